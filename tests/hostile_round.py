"""A hostile round against the real CLI: generated cases across the nine families of issue 29,
each run in a subprocess with a timeout and judged on four things only:

- **hang**: the command did not end within its timeout;
- **traceback**: a Python traceback, a C++ stack (``frame #``) or "Exception ignored" on stderr;
- **secret**: a planted secret in stdout, stderr or any file the case's folder holds afterwards;
- **lost**: the command ended as a finished measurement (its ``done`` exit codes) and an output
  the user asked for is missing or is not loadable.

A case may add its own check (a YAML key injected, a signal's exit code, a temporary file left
behind). Run: ``python tests/hostile_round.py [--cases N] [--jobs J] [--family F] [-v]``;
prints one row per case (case, family, outcome, seconds, exit code) and a summary per family;
exits 1 when any case failed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

FAMILIES = {
    1: "markup",
    2: "utf8",
    3: "secrets",
    4: "slow-reads",
    5: "signals",
    6: "launcher",
    7: "full-device",
    8: "export",
    9: "read-faults",
}
SECRET = "S3KR1T"  # every planted secret holds it, so one search finds them all
BUDGET = "2"  # seconds: every probe's --time-budget


@dataclasses.dataclass
class Result:
    rc: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    folder: Path


@dataclasses.dataclass
class Case:
    name: str
    family: int
    argv: list[str]  # after ``python -m ioprobe`` (or after ``python`` with ``program``)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    outputs: list[str] = dataclasses.field(default_factory=list)  # must exist when done
    done: frozenset[int] = frozenset({0})  # exit codes that mean the measurement finished
    secrets: bool = False  # whether a secret was planted
    timeout: float = 60.0
    stdout_to: str | None = None  # a path stdout is opened onto (/dev/full)
    send: tuple[float, int] | None = None  # (seconds after start, signal) to the process
    check: Callable[[Result], str | None] | None = None  # a further check: why it failed
    program: bool = False  # argv is a Python program's, not ioprobe's
    folder: Path | None = None  # where its outputs go: searched for secrets afterwards


# ---------------------------------------------------------------------------------------------
# servers on 127.0.0.1


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "files"
    root = Path()

    def log_message(self, *args: object) -> None:
        pass

    def _file(self) -> Path | None:
        path = self.root / self.path.split("?")[0].lstrip("/")
        return path if path.is_file() else None

    def _listing(self) -> None:
        names = sorted(p.name for p in self.root.iterdir() if p.is_file())
        body = "".join(f'<a href="{n}">{n}</a>\n' for n in names).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        f = self._file()
        if f is None:
            self.send_response(404 if self.path.split("?")[0] != "/" else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(f.stat().st_size))
        self.end_headers()

    def do_GET(self) -> None:
        mode = self.mode
        if self.path.split("?")[0] == "/" and mode not in ("silent", "drip-head"):
            return self._listing()
        if mode == "silent":
            time.sleep(3600)
        if mode == "drip-head":
            with contextlib.suppress(OSError):  # the client gave up
                for ch in b"HTTP/1.1 200 OK\r\n":
                    self.wfile.write(bytes([ch]))
                    self.wfile.flush()
                    time.sleep(0.5)
            return
        f = self._file()
        if f is None:
            # the error page repeats the request, secrets and all, as some servers do
            body = f"no such object: {self.path}".encode()
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        data = f.read_bytes()
        if mode in ("403", "500"):
            body = f"denied {self.path}".encode()
            self.send_response(int(mode))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        if mode == "endless":
            self.end_headers()  # no length: the body runs until the connection closes
            with contextlib.suppress(OSError):
                while True:
                    self.wfile.write(b"\0" * 65536)
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if mode == "drip-body":
            with contextlib.suppress(OSError):
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.5)
            return
        if mode == "short":
            self.wfile.write(data[: len(data) // 2])
            self.close_connection = True
            return
        if mode == "reset":
            self.wfile.write(data[:10])
            self.wfile.flush()
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            self.close_connection = True
            return
        self.wfile.write(data)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextlib.contextmanager
def http_server(root: Path, mode: str) -> Iterator[str]:
    handler = type(f"H_{mode}", (_Quiet,), {"mode": mode, "root": root})
    srv = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """Accepts every connection and never sends a byte."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(srv.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        for c in held:
            c.close()
        srv.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# fixtures every family shares


def make_data(
    root: Path, n: int = 24, size: int = 20_000, names: list[bytes] | None = None
) -> Path:
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        name = names[i % len(names)] + str(i).encode() if names else f"f{i:03d}.bin".encode()
        with open(os.path.join(os.fsencode(root), name), "wb") as f:
            f.write(os.urandom(size))
    return root


def base_records(folder: Path) -> dict[str, Path]:
    """A probe and a watched record, finalized, built from the unit tests' fixtures (no CLI)."""
    from ioprobe.analysis import finalize
    from tests.unit.analysis.test_whatif import probe_record, watch_record

    out = {}
    for name, rec in (("probe", probe_record()), ("watch", watch_record(workers=2))):
        path = folder / f"{name}.json"
        finalize(rec).save(path)
        out[name] = path
    return out


HOSTILE_TEXT = {
    "markup": "Evil[/]Set[bold]x[/bold]",
    "link": "[link=file:///etc/passwd]a[/link]",
    "osc": "title\x1b]0;pwned\x07",
    "csi": "csi\x1b[2J\x1b[31m",
    "c1": "c1\u009b31m",
    "bidi": "bidi\u202eexe.txt",
    "newline": "line\nkey: injected",
    "emoji": ":smile::warning:",
    "html": "<script>alert(1)</script>&amp;",
    "quotes": "q'\"`$(id)",
    "yaml": "- a: [1, {b: c}]",
    "md": "| a | b |\n# head *x* `y`",
}
BAD_BYTES = {
    "ff-fe": b"bad\xff\xfe",
    "c1-byte": b"csi\x9b31m",
    "lone-cont": b"x\x80y",
    "overlong": b"ov\xc0\xaf",
    "surrogate-utf8": b"sur\xed\xa0\x80",
    "markup-bytes": b"m[bold]\xff[red]",
}
SECRET_URLS = {
    "password": "http://alice:pw{S}@{H}/",
    "apostrophe": "http://alice:it's{S}@{H}/",
    "at-slash": "http://alice:a@b/{S}@{H}/",
    "pct": "http://alice:p%40{S}@{H}/",
    "token-user": "http://tok{S}ABC@{H}/",
    "sig": "http://{H}/?X-Amz-Signature={S}",
    "token-q": "http://{H}/?token={S}",
    "access_key": "http://{H}/?access_key={S}&secret_key={S}2",
    "jwt": "http://{H}/?jwt=ey{S}",
    "session": "http://{H}/?session={S}",
    "code": "http://{H}/?code={S}",
    "credential": "http://{H}/?credential={S}",
    "sas": "http://{H}/?sv=1&sig={S}&se=2",
    "fragment": "http://{H}/#access_token={S}",
}


def _no_yaml_keys(*keys: str, path: str | None = None) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        import yaml

        text = (r.folder / path).read_text() if path else r.stdout.decode()
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            return f"the export is not YAML: {str(exc).splitlines()[0]}"
        live = set(keys) & set(doc or {})
        return f"injected YAML keys {sorted(live)}" if live else None

    return check


def _exit_in(*codes: int) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        return None if r.rc in codes else f"exit {r.rc}, expected {codes}"

    return check


def _one_error_line(r: Result) -> str | None:
    """A failure is one line: ``ioprobe: error: ...`` (what a user can cause)."""
    if r.rc == 0:
        return "exit 0 where a failure was expected"
    lines = [ln for ln in r.stderr.decode(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ioprobe: error:")]
    if len(errors) != 1 or len(lines) > 2:
        return f"stderr is not one error line: {lines[:4]}"
    return None


def _one_line_or_ok(r: Result) -> str | None:
    return None if r.rc == 0 else _one_error_line(r)


def _both(*checks: Callable[[Result], str | None]) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        for c in checks:
            why = c(r)
            if why:
                return why
        return None

    return check


def generate(tmp: Path, recs: dict[str, Path], servers: dict[str, str]) -> list[Case]:
    """Every case, family by family. Paths are made here; servers are running."""
    cases: list[Case] = []
    folders: dict[tuple[str, ...], Path] = {}
    data = make_data(tmp / "data")
    py = sys.executable

    def out(name: str, *kinds: str) -> tuple[list[str], list[str]]:
        folder = tmp / "out" / name
        folder.mkdir(parents=True, exist_ok=True)
        paths = {k: str(folder / f"run.{k}") for k in kinds}
        flags = {"json": "--json", "html": "--html", "md": "--md", "trace": "--trace"}
        args = [a for k in kinds for a in (flags[k], paths[k])]
        folders[tuple(paths.values())] = folder
        return args, list(paths.values())

    # 1. markup and control text in every name the user supplies -----------------------------
    for key, text in HOSTILE_TEXT.items():
        d = make_data(tmp / "names" / key / text.replace("/", "_"), n=6)
        args, outs = out(f"m-dir-{key}", "json", "html", "md", "trace")
        cases.append(
            Case(
                f"probe dir named {key}",
                1,
                ["probe", str(d), "-q", "--time-budget", BUDGET, *args],
                outputs=outs,
            )
        )
    for key in ("markup", "osc", "newline", "bidi", "link"):
        text = HOSTILE_TEXT[key]
        cat = tmp / "cat" / f"{key}.toml"
        cat.parent.mkdir(parents=True, exist_ok=True)
        cat.write_text(
            f'[classes.{json.dumps(text)}]\nlabel = {json.dumps(text)}\nscope = "local"\n'
            "seq_read_MBps = 6000\niops_4k = 900000\niops_128k = 45000\nlatency_ms = 0.1\n"
            f'source = "https://wiki:pw{SECRET}@intra.example/?token={SECRET}"\n'
        )
        cost = tmp / "cat" / f"{key}.cost.toml"
        cost.write_text(
            f"currency = {json.dumps(text)}\ngpu = 30000\ncore = 150\n[storage]\n{json.dumps(text)} = 900\n"
        )
        args, outs = out(f"m-size-{key}", "json", "html", "md")
        cases.append(
            Case(
                f"size --catalog/--cost named {key}",
                1,
                [
                    "size",
                    str(recs["probe"]),
                    "--gpus",
                    "1,2",
                    "--catalog",
                    str(cat),
                    "--cost",
                    str(cost),
                    *args,
                ],
                outputs=outs,
                secrets=True,
            )
        )
        cases.append(
            Case(
                f"whatif --catalog named {key}",
                1,
                ["whatif", str(recs["watch"]), "--workers", "4", "--catalog", str(cat)],
                secrets=True,
            )
        )
    for key in ("markup", "osc", "c1", "newline"):
        args, outs = out(f"m-run-{key}", "json", "html", "md", "trace")
        script = tmp / "scripts" / f"named_{key}.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(
            "import sys\nfrom torch.utils.data import DataLoader\n"
            "from tests.fixtures.datasets import BurnDataset\n"
            f"H = type({text_literal(HOSTILE_TEXT[key])}, (BurnDataset,), {{'__module__': {text_literal(HOSTILE_TEXT[key])}}})\n"
            "for _ in DataLoader(H(24, 0.001), batch_size=8, num_workers=1):\n    pass\n"
        )
        cases.append(
            Case(
                f"run script, Dataset class named {key}",
                1,
                ["run", *args, "--", py, str(script)],
                outputs=outs,
                env={"PYTHONPATH": str(REPO)},
                timeout=90,
            )
        )

    # 2. names that are not UTF-8 ---------------------------------------------------------------
    for key, raw in BAD_BYTES.items():
        d = os.path.join(os.fsencode(tmp / "bytes"), raw)
        make_data(Path(os.fsdecode(d)), n=6)
        args, outs = out(f"u-dir-{key}", "json", "html", "md", "trace")
        cases.append(
            Case(
                f"probe dir {key} (utf-8 io)",
                2,
                ["probe", os.fsdecode(d), "--time-budget", BUDGET, *args],
                outputs=outs,
                env={"PYTHONIOENCODING": "utf-8"},
            )
        )
        d2 = make_data(tmp / "bytenames" / key, n=6, names=[raw])
        args, outs = out(f"u-files-{key}", "json", "md")
        cases.append(
            Case(
                f"probe files named {key} (C locale)",
                2,
                ["probe", str(d2), "--time-budget", BUDGET, *args],
                outputs=outs,
                env={"LC_ALL": "C", "LANG": "C"},
            )
        )
    scheme_dir = make_data(tmp / "local" / "s3:" / "" / "bucket", n=6)
    args, outs = out("u-scheme", "json")
    cases.append(
        Case(
            "probe local dir holding s3://",
            2,
            ["probe", f"{tmp}/local/s3://bucket", "-q", "--time-budget", BUDGET, *args],
            outputs=outs,
        )
    )
    assert scheme_dir.is_dir()
    bad_json = tmp / "out" / os.fsdecode(b"rec\xff\x9b.md")
    cases.append(
        Case(
            "report --md to a name not UTF-8",
            2,
            ["report", str(recs["probe"]), "--md", str(bad_json)],
            outputs=[str(bad_json)],
            env={"PYTHONIOENCODING": "utf-8"},
        )
    )

    # 3. secrets wherever a URL can enter, the error paths included ---------------------------
    hosts = {
        "ok": servers["files"],
        "refused": f"127.0.0.1:{closed_port()}",
        "403": servers["403"],
        "missing": servers["files"] + "/nope",
    }
    for hkey, host in hosts.items():
        for skey, pattern in SECRET_URLS.items():
            if hkey != "ok" and skey not in (
                "password",
                "apostrophe",
                "token-user",
                "sig",
                "access_key",
                "fragment",
            ):
                continue
            url = pattern.format(S=SECRET, H=host)
            args, outs = out(f"s-{hkey}-{skey}", "json", "html", "md")
            cases.append(
                Case(
                    f"probe {hkey} server, {skey}",
                    3,
                    ["probe", url, "--time-budget", BUDGET, *args],
                    outputs=outs,
                    secrets=True,
                    done=frozenset({0}) if hkey == "ok" else frozenset(),
                )
            )
    # the access key id is the URL's user, shown as a login is; the secret key is the password
    s3 = f"s3://AKIAEXAMPLE:{SECRET}xyz@Bad_Bucket!/x"
    cases.append(
        Case(
            "probe s3 invalid bucket with keys",
            3,
            ["probe", s3, "--time-budget", BUDGET],
            secrets=True,
            done=frozenset(),
        )
    )
    cases.append(
        Case(
            "probe s3 endpoint secret",
            3,
            ["probe", f"s3://bucket/x?X-Amz-Credential={SECRET}"],
            env={
                "AWS_ENDPOINT_URL": f"http://u:{SECRET}@{hosts['refused']}",
                "AWS_ACCESS_KEY_ID": "a",
                "AWS_SECRET_ACCESS_KEY": "b",
            },
            secrets=True,
            done=frozenset(),
        )
    )
    cases.append(
        Case(
            "env on a URL with a password",
            3,
            ["env", f"http://alice:pw{SECRET}@{hosts['refused']}/"],
            secrets=True,
            done=frozenset(),
        )
    )
    cases.append(
        Case(
            "run --json of a script printing nothing, secret arg",
            3,
            ["run", "--", py, "-c", "import sys", f"http://u:{SECRET}@h/"],
            secrets=True,
            done=frozenset({0}),
        )
    )
    # a record written by hand (or by an older tool) with credentials in its strings: every
    # view of it, every format, and the commands that read two records or a what-if of one
    raw = json.loads(recs["probe"].read_text())
    raw["dataset"]["target"] = f"https://u:it's{SECRET}@h/data?X-Amz-Signature={SECRET}"
    raw["notes"] = [
        *raw.get("notes", []),
        f"read s3://AK:{SECRET}@bucket/x and https://tok{SECRET}X@h/",
    ]
    leaky = tmp / "leaky.json"
    leaky.write_text(json.dumps(raw))
    for name, cmd, kinds in (
        ("report", ["report", str(leaky)], ("json", "html", "md", "trace")),
        ("report --json -", ["report", str(leaky), "--json", "-"], ()),
        ("report --md -", ["report", str(leaky), "--md", "-"], ()),
        ("whatif", ["whatif", str(leaky), "--cores", "4"], ("json", "md")),
        ("compare", ["compare", str(leaky), str(recs["probe"])], ()),
        ("size", ["size", str(leaky), "--gpus", "1,2"], ("json", "md")),
        ("export dlio", ["export", "dlio", str(leaky)], ()),
    ):
        args, outs = out(f"s-rec-{name.replace(' ', '_')}", *kinds) if kinds else ([], [])
        cases.append(
            Case(
                f"{name} of a record holding secrets",
                3,
                [*cmd, *args],
                outputs=outs,
                secrets=True,
                done=frozenset({0}) if kinds else frozenset(),
            )
        )
    args, outs = out("s-trace", "json", "trace")
    url = SECRET_URLS["apostrophe"].format(S=SECRET, H=hosts["ok"])
    cases.append(
        Case(
            "probe secret URL --trace --json",
            3,
            ["probe", url, "--time-budget", BUDGET, *args],
            outputs=outs,
            secrets=True,
        )
    )
    cases.append(
        Case(
            "probe secret URL --md -",
            3,
            ["probe", url, "-q", "--time-budget", BUDGET, "--md", "-"],
            secrets=True,
        )
    )

    # 4. slow, endless and dripping servers; FIFOs and devices as inputs ---------------------
    for mode in ("silent", "drip-head", "drip-body", "endless"):
        for ext in ("", "noext", "index"):
            host = servers[mode + ext] if ext else servers[mode]
            args, outs = out(f"r-{mode}-{ext}", "json")
            cases.append(
                Case(
                    f"probe {mode} server {ext or 'bin'}",
                    4,
                    ["probe", f"http://{host}/", "--time-budget", BUDGET, *args],
                    timeout=30,
                    done=frozenset({0}),
                    outputs=outs,
                    check=_fast(float(BUDGET) + 12),
                )
            )
    fifo = tmp / "in.fifo"
    os.mkfifo(fifo)
    for cmd in (
        ["report", str(fifo)],
        ["report", "/dev/zero"],
        ["report", "/dev/urandom"],
        ["whatif", str(recs["watch"]), "--workers", "2", "--catalog", str(fifo)],
        ["size", str(recs["probe"]), "--gpus", "1", "--cost", "/dev/zero"],
        ["size", str(recs["probe"]), "--gpus", "1", "--catalog", "/dev/urandom"],
        ["compare", str(recs["probe"]), "/dev/zero"],
        ["export", "dlio", str(fifo)],
        ["probe", str(data), "--catalog", "/dev/zero", "--time-budget", BUDGET],
    ):
        cases.append(
            Case(
                " ".join(Path(c).name if "/" in c else c for c in cmd[:4]),
                4,
                cmd,
                done=frozenset(),
                timeout=30,
                # a FIFO nobody writes to reads as empty: an empty catalog is a valid one
                check=_both(
                    _one_line_or_ok if cmd[-1] == str(fifo) else _one_error_line, _fast(15)
                ),
            )
        )

    # 5. signals to probe and run --------------------------------------------------------------
    sleeper = tmp / "scripts" / "sleeper.py"
    sleeper.write_text(
        "import time\nfrom torch.utils.data import DataLoader\n"
        "from tests.fixtures.datasets import BurnDataset\n"
        "try:\n"
        "    for _ in DataLoader(BurnDataset(400, 0.01), batch_size=8, num_workers=2):\n"
        "        pass\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    raise SystemExit(130)\n"
    )
    big = make_data(tmp / "big", n=200, size=256_000)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        for at in (0.5, 1.2, 2.0):
            args, outs = out(f"g-probe-{sig.name}-{at}", "json", "md")
            cases.append(
                Case(
                    f"probe {sig.name} at {at} s",
                    5,
                    ["probe", str(big), "--time-budget", "8", *args],
                    send=(at, sig),
                    done=frozenset({0}),
                    outputs=outs,
                    check=_exit_in(0, 130, 143, 129, 2),
                    timeout=40,
                )
            )
        args, outs = out(f"g-run-{sig.name}", "json")
        cases.append(
            Case(
                f"run {sig.name} during script",
                5,
                ["run", *args, "--", py, str(sleeper)],
                env={"PYTHONPATH": str(REPO)},
                send=(8.0, sig),
                done=frozenset(),
                check=_exit_in(130, 143, 129, 128 + sig),
                timeout=60,
            )
        )

    # 6. launcher variables -------------------------------------------------------------------
    base = {"LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    launcher = {
        "world 23 digits": {"RANK": "0", "WORLD_SIZE": "9" * 23, "MASTER_PORT": "29500"},
        "world superscript": {"RANK": "0", "WORLD_SIZE": "²", "MASTER_PORT": "29500"},
        "rank past world": {"RANK": "7", "WORLD_SIZE": "2", "MASTER_PORT": "29500"},
        "rank negative": {"RANK": "-1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"},
        "port 0": {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "0"},
        "port 99999": {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "99999"},
        "port text": {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "http"},
        "addr markup": {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "MASTER_PORT": str(closed_port()),
            "MASTER_ADDR": "[/]\x1b]0;x\x07",
        },
        "slurm x huge": {
            "SLURM_JOB_ID": "1",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "0",
            "SLURM_STEP_NUM_TASKS": "4",
            "SLURM_STEP_TASKS_PER_NODE": "4(x99999999999)",
            "SLURM_STEP_NODELIST": "n1",
        },
        "slurm nodelist huge": {
            "SLURM_JOB_ID": "1",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "0",
            "SLURM_STEP_NUM_TASKS": "4",
            "SLURM_STEP_TASKS_PER_NODE": "4",
            "SLURM_STEP_NODELIST": "n[0-99999999]",
        },
        "slurm nested brackets": {
            "SLURM_JOB_ID": "1",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "0",
            "SLURM_STEP_NUM_TASKS": "4",
            "SLURM_STEP_TASKS_PER_NODE": "4",
            "SLURM_STEP_NODELIST": "n[[0-3]",
        },
        "silent listener rank 1": {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "MASTER_PORT": str(servers["listener"]),
        },
        "silent listener rank 0": {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "MASTER_PORT": str(servers["listener"]),
        },
        "nothing listening": {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": str(closed_port())},
    }
    for key, env in launcher.items():
        full = {**base, **env}
        cases.append(
            Case(
                f"probe under {key}",
                6,
                ["probe", str(data), "-q", "--time-budget", "1", "--rank-timeout", "1"],
                env=full,
                done=frozenset(),
                timeout=40,
                check=_both(_one_error_line, _fast(30)),
            )
        )
    for key in ("world 23 digits", "slurm x huge", "slurm nodelist huge", "silent listener rank 1"):
        gather = (
            "from ioprobe.loaders import gather as g\n"
            "g.gather(None, merge=lambda rs: rs[0], timeout_s=1.0)\nprint('returned')\n"
        )
        cases.append(
            Case(
                f"gather under {key}",
                6,
                ["-c", gather],
                env={**base, **launcher[key], "PYTHONPATH": str(REPO)},
                program=True,
                done=frozenset(),
                timeout=40,
                check=_returned,
            )
        )

    # 7. full devices ----------------------------------------------------------------------------
    for cmd in (
        ["env"],
        ["report", str(recs["probe"])],
        ["report", str(recs["watch"]), "--md", "-"],
        ["export", "dlio", str(recs["watch"])],
        ["whatif", str(recs["watch"]), "--workers", "4"],
        ["size", str(recs["probe"]), "--gpus", "1,2"],
        ["compare", str(recs["probe"]), str(recs["probe"])],
        ["report", str(recs["probe"]), "--json", "-"],
    ):
        cases.append(
            Case(
                f"{' '.join(c for c in cmd if '/' not in c)} > /dev/full",
                7,
                cmd,
                stdout_to="/dev/full",
                done=frozenset(),
                check=_one_error_line,
            )
        )
    for flag in ("--json", "--html", "--md", "--trace"):
        args, outs = out(f"f-{flag[2:]}", "json", "md")
        if flag in ("--json", "--md"):
            args, outs = out(f"f-{flag[2:]}", "html")
        cases.append(
            Case(
                f"probe {flag} /dev/full",
                7,
                ["probe", str(data), "--time-budget", BUDGET, *args, flag, "/dev/full"],
                done=frozenset({2}),
                outputs=outs,
                check=_exit_in(2),
            )
        )
    cases.append(
        Case(
            "export dlio -o /dev/full",
            7,
            ["export", "dlio", str(recs["watch"]), "-o", "/dev/full"],
            done=frozenset(),
            check=_one_error_line,
        )
    )
    args, outs = out("f-run-html", "json")
    cases.append(
        Case(
            "run --json ok --html /dev/full",
            7,
            ["run", *args, "--html", "/dev/full", "--", py, "-m", "tests.fixtures.train_script"],
            env={"PYTHONPATH": str(REPO)},
            done=frozenset({0}),
            outputs=outs,
            timeout=90,
        )
    )

    # 8. export injection -------------------------------------------------------------------------
    from ioprobe.record import RunRecord

    for key, (created, version, fname) in {
        "created": ("2026\nlive_key: x", "1.0", "a.json"),
        "version": ("2026", "1\nversion_key: x", "b.json"),
        "filename": ("2026", "1.0", "c\nfile_key: x.json"),
        "all crlf": ("2026\r\nlive_key: x", "1\r\nversion_key: x", "d\r\nfile_key: x.json"),
        "doc end": ("2026\n...\n---\nlive_key: x", "1.0", "e.json"),
        "markup+nel": ("[/]\u0085live_key: x", "1\u2028version_key: x", "f.json"),
    }.items():
        rec = RunRecord.load(str(recs["watch"]))
        rec.created, rec.ioprobe_version = created, version
        path = tmp / "export" / key.replace(" ", "_") / fname
        path.parent.mkdir(parents=True, exist_ok=True)
        rec.save(path)
        keys = ("live_key", "version_key", "file_key")
        cases.append(
            Case(
                f"export dlio, {key} injected (stdout)",
                8,
                ["export", "dlio", str(path)],
                check=_no_yaml_keys(*keys),
            )
        )
        out_dir = tmp / "out" / f"x-{key.replace(' ', '_')}"
        out_dir.mkdir(parents=True, exist_ok=True)
        cases.append(
            Case(
                f"export dlio, {key} injected (-o)",
                8,
                ["export", "dlio", str(path), "-o", str(out_dir / "w.yaml")],
                outputs=[str(out_dir / "w.yaml")],
                check=_no_yaml_keys(*keys, path=str(out_dir / "w.yaml")),
            )
        )

    # 9. faults during reads ---------------------------------------------------------------------
    for fault in ("fifo", "delete", "truncate", "dir", "chmod"):
        d = make_data(tmp / "faults" / fault, n=40, size=64_000)
        args, outs = out(f"x-{fault}", "json", "md")
        program = (
            "import os,sys,time,subprocess\n"
            f"d={str(d)!r}\n"
            "p=subprocess.Popen([sys.executable,'-m','ioprobe',*sys.argv[1:]])\n"
            "time.sleep(1.2)\n"
            "for i,n in enumerate(sorted(os.listdir(d))):\n"
            "    if i%2: continue\n"
            "    f=os.path.join(d,n)\n"
            f"    fault={fault!r}\n"
            "    if fault=='fifo': os.unlink(f); os.mkfifo(f)\n"
            "    elif fault=='delete': os.unlink(f)\n"
            "    elif fault=='truncate': open(f,'w').close()\n"
            "    elif fault=='dir': os.unlink(f); os.mkdir(f)\n"
            "    elif fault=='chmod': os.chmod(f,0)\n"
            "sys.exit(p.wait())\n"
        )
        cases.append(
            Case(
                f"probe, files turned {fault} mid-probe",
                9,
                ["-c", program, "probe", str(d), "--time-budget", "4", *args],
                env={"PYTHONPATH": str(REPO)},
                program=True,
                outputs=outs,
                timeout=40,
            )
        )
    for mode in ("short", "500", "reset", "403"):
        args, outs = out(f"x-srv-{mode}", "json")
        cases.append(
            Case(
                f"probe {mode} server",
                9,
                ["probe", f"http://{servers[mode]}/", "--time-budget", BUDGET, *args],
                done=frozenset({0}),
                outputs=outs,
                timeout=30,
                check=_both(_fast(float(BUDGET) + 12), _named_not_400(mode)),
            )
        )
    sparse = tmp / "sparse"
    sparse.mkdir()
    for i in range(6):
        with open(sparse / f"s{i}.bin", "wb") as f:
            f.truncate(4 << 20)
    args, outs = out("x-sparse", "json")
    cases.append(
        Case(
            "probe sparse files",
            9,
            ["probe", str(sparse), "--time-budget", BUDGET, *args],
            outputs=outs,
            check=_says_sparse(outs[0]),
        )
    )
    for case in cases:
        case.folder = folders.get(tuple(case.outputs))
    return cases


def text_literal(text: str) -> str:
    return repr(text)


def _fast(limit: float) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        return f"took {r.seconds:.1f} s, over {limit:g} s" if r.seconds > limit else None

    return check


def _named_not_400(mode: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        if mode != "400" and b"HTTP 400" in r.stderr + r.stdout:
            return "reported HTTP 400, which the server never sent"
        return None

    return check


def _says_sparse(path: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        if r.rc != 0:
            return None
        rec = json.loads(Path(path).read_text())
        notes = " ".join(rec.get("notes") or []) + json.dumps(rec.get("dataset", {}))
        return None if "sparse" in notes else "sparse files not noted in the record"

    return check


def _returned(r: Result) -> str | None:
    if r.rc != 0 or b"returned" not in r.stdout:
        return f"gather did not return to the script (exit {r.rc})"
    return None


# ---------------------------------------------------------------------------------------------


def run_case(case: Case, folder: Path) -> tuple[str, str, Result]:
    # a TMPDIR of the case's own: whatever is left in it afterwards was left by the command
    tmpdir = Path(tempfile.mkdtemp(prefix="tmp-", dir=folder))
    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO), "TMPDIR": str(tmpdir)}
    env.update(case.env)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if k not in case.env:
            env.pop(k, None)
    cmd = (
        [sys.executable, *case.argv]
        if case.program
        else [sys.executable, "-m", "ioprobe", *case.argv]
    )
    stdout: int | object = subprocess.PIPE
    sink = open(case.stdout_to, "wb") if case.stdout_to else None  # noqa: SIM115
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=sink if sink else stdout,  # type: ignore[arg-type]
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    if case.send:
        timer = threading.Timer(case.send[0], lambda: _signal(proc, case.send[1]))  # type: ignore[index]
        timer.start()
    hung = False
    try:
        out, err = proc.communicate(timeout=case.timeout)
    except subprocess.TimeoutExpired:
        hung = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    took = time.monotonic() - start
    if sink:
        sink.close()
    # what the command started must not outlive it (a script, workers): its session is its own
    time.sleep(0.3)
    orphans = _session_alive(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    r = Result(None if hung else proc.returncode, out or b"", err or b"", took, folder)
    if hung:
        return "hang", f"no end within {case.timeout:g} s", r
    text = r.stderr.decode(errors="replace")
    if (
        "Traceback (most recent call last)" in text
        or "frame #" in text
        or "Exception ignored" in text
    ):
        first = [ln for ln in text.splitlines() if ln.strip()][-1:]
        return "traceback", f"{first}", r
    if case.secrets or SECRET in " ".join(case.argv) + json.dumps(case.env):
        where = _secret_in(r, case.folder)
        if where:
            return "secret", f"shown in {where}", r
    if r.rc in case.done:
        missing = [p for p in case.outputs if not _loadable(p)]
        if missing:
            return "lost", f"exit {r.rc}, missing or unloadable: {missing}", r
    if orphans:
        return "orphan", f"processes left running: {orphans}", r
    left = sorted(p.name for p in tmpdir.iterdir())
    if left:
        return "temp-left", f"left in TMPDIR: {left[:3]}", r
    if case.check:
        why = case.check(r)
        if why:
            return "check", why, r
    return "ok", "", r


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def _session_alive(sid: int) -> list[int]:
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == sid:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                alive.append(int(pid))
    return alive


def _secret_in(r: Result, folder: Path | None) -> str | None:
    if SECRET.encode() in r.stdout:
        return "stdout"
    if SECRET.encode() in r.stderr:
        return "stderr"
    if folder is None:
        return None
    for root, _dirs, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            with contextlib.suppress(OSError), open(path, "rb") as fh:
                if SECRET.encode() in fh.read():
                    return path
    return None


def _loadable(path: str) -> bool:
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return False
    if p.suffix == ".json":
        try:
            json.loads(p.read_bytes())
        except ValueError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=0, help="run the first N cases (0: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--family", type=int, action="append", help="only these families")
    ap.add_argument("--match", default="", help="only cases whose name holds this")
    ap.add_argument("-v", "--verbose", action="store_true", help="stderr's tail of each failure")
    opts = ap.parse_args(argv)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hostile-round-")))
        recs = base_records(tmp)
        www = make_data(tmp / "www", n=8, size=20_000)
        noext = make_data(tmp / "www-noext", n=8, size=20_000, names=[b"shard"])
        index = make_data(tmp / "www-index", n=8, size=20_000)
        (index / "index.json").write_text(json.dumps({"version": 2, "shards": []}))
        servers: dict[str, str] = {}
        for mode in (
            "files",
            "403",
            "500",
            "short",
            "reset",
            "silent",
            "drip-head",
            "drip-body",
            "endless",
        ):
            servers[mode] = stack.enter_context(http_server(www, mode))
        for mode in ("silent", "drip-head", "drip-body", "endless"):
            servers[mode + "noext"] = stack.enter_context(http_server(noext, mode))
            servers[mode + "index"] = stack.enter_context(http_server(index, mode))
        servers["listener"] = str(stack.enter_context(silent_listener()))
        cases = generate(tmp, recs, servers)
        if opts.family:
            cases = [c for c in cases if c.family in opts.family]
        if opts.match:
            cases = [c for c in cases if opts.match in c.name]
        if opts.cases:
            cases = cases[: opts.cases]

        def one(case: Case) -> tuple[Case, str, str, Result]:
            folder = tmp / "out"
            outcome, why, r = run_case(case, folder)
            return case, outcome, why, r

        results = []
        print(f"{'case':58} {'family':12} {'outcome':9} {'s':>5} rc")
        with ThreadPoolExecutor(opts.jobs) as pool:
            for case, outcome, why, r in pool.map(one, cases):
                results.append((case, outcome))
                fam = f"{case.family} {FAMILIES[case.family]}"
                line = f"{case.name[:58]:58} {fam:12} {outcome:9} {r.seconds:5.1f} {r.rc}"
                print(line + (f"  {why}" if why else ""), flush=True)
                if outcome != "ok" and opts.verbose:
                    print("    " + r.stderr.decode(errors="replace")[-600:].replace("\n", "\n    "))
        print()
        by_family: dict[int, Counter[str]] = {}
        for case, outcome in results:
            by_family.setdefault(case.family, Counter())[outcome] += 1
        for fam, counts in sorted(by_family.items()):
            bad = sum(v for k, v in counts.items() if k != "ok")
            print(
                f"family {fam} {FAMILIES[fam]:12} cases {sum(counts.values()):3}  ok {counts['ok']:3}  failed {bad:3}  {dict(counts)}"
            )
        failed = sum(1 for _, o in results if o != "ok")
        print(f"\n{len(results)} cases: {len(results) - failed} ok, {failed} failed")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
