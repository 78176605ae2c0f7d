"""Safe to point at production: no credential from a target URL or the environment reaches any
output, and no escape sequence from a path reaches the terminal or a report, through the real
CLI with stdout and stderr piped (colour off, as in a log)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ioprobe.record import RunRecord
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.servers import S3Server, ThrottledHTTPServer, make_files

pytestmark = pytest.mark.slow

SECRETS = ("s3cr3tpw", "abcdef123", "tok999")
ENV_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "envsecret5ad1f00d",
    "AWS_SESSION_TOKEN": "envtoken77c0ffee",
}
EVIL_NAME = "evil\x1b]0;pwned\x07dir"


@pytest.fixture(scope="module")
def http_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("served")
    make_files(root / "data", 8, 20_000, seed=5)
    return root


@pytest.fixture(scope="module")
def server(http_root: Path) -> Iterator[ThrottledHTTPServer]:
    with ThrottledHTTPServer(http_root) as srv:
        yield srv


def _ok(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = run_cli(*args, env={**ENV_SECRETS, **(env or {})}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc


def _leaks(texts: dict[str, str], secrets: tuple[str, ...]) -> list[str]:
    return [
        f"{secret} in {where}" for where, t in texts.items() for secret in secrets if secret in t
    ]


def _outputs(tmp: Path, stem: str = "run") -> list[str]:
    """Every file output a probe or a report writes, named ``stem`` under ``tmp``."""
    ends = {"--json": "json", "--html": "html", "--md": "md", "--trace": "trace.json"}
    return [a for flag, end in ends.items() for a in (flag, str(tmp / f"{stem}.{end}"))]


def _files(tmp: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(tmp.iterdir()) if p.is_file()}


def test_a_signed_url_leaves_no_secret_in_probe_report_whatif_or_compare(
    server: ThrottledHTTPServer, tmp_path: Path
) -> None:
    base = f"127.0.0.1:{server.port}/data/p0/f00003.bin"
    url = f"http://user:s3cr3tpw@{base}?X-Amz-Signature=abcdef123&token=tok999"
    run = str(tmp_path / "run.json")
    probe = _ok("probe", url, "--loader", "raw", "--time-budget", "3", *_outputs(tmp_path))
    procs = {
        "probe": probe,
        "report": _ok("report", run, *_outputs(tmp_path, "report")),
        "report --md -": _ok("report", run, "--md", "-"),
        "whatif": _ok("whatif", run, "--workers", "4", "--json", str(tmp_path / "whatif.json")),
        "whatif view": _ok("whatif", run, "--workers", "4"),
        "compare": _ok("compare", run, run, "--json", str(tmp_path / "compare.json")),
        "compare view": _ok("compare", run, run, "--md", str(tmp_path / "compare.md")),
    }
    shown = _files(tmp_path)
    for name, proc in procs.items():
        shown[f"{name} stdout"], shown[f"{name} stderr"] = proc.stdout, proc.stderr
    assert _leaks(shown, SECRETS + tuple(ENV_SECRETS.values())) == []
    redacted = f"http://user:***@{base}?X-Amz-Signature=***&token=***"
    assert RunRecord.load(run).dataset.target == redacted
    assert redacted in probe.stdout  # the terminal header names the target, redacted
    assert RunRecord.load(run).dataset.formats == {"binary": 1}  # the query is no extension


def test_a_directory_url_with_a_password_leaves_it_in_no_output(
    server: ThrottledHTTPServer, tmp_path: Path
) -> None:
    # every file listed under it carries the credentials in its own URL
    url = f"http://user:s3cr3tpw@127.0.0.1:{server.port}/data/"
    probe = _ok("probe", url, "--loader", "raw", "--time-budget", "3", *_outputs(tmp_path))
    texts = {"stdout": probe.stdout, "stderr": probe.stderr, **_files(tmp_path)}
    assert _leaks(texts, SECRETS) == []
    assert RunRecord.load(tmp_path / "run.json").dataset.files == 8


def test_an_unreachable_url_with_a_password_fails_without_quoting_it() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = sock.getsockname()[1]
        for url in (
            f"http://user:s3cr3tpw@127.0.0.1:{port}/data/",
            f"http://user:s3cr3tpw@127.0.0.1:{port}/data/x.bin?X-Amz-Signature=abcdef123",
        ):
            proc = run_cli("probe", url, "-q", timeout=60)
            assert_one_line_error(proc, f"user:***@127.0.0.1:{port}/data/")
            assert _leaks({url: proc.stderr + proc.stdout}, SECRETS) == []


def test_environment_credentials_of_an_s3_probe_reach_no_output(tmp_path: Path) -> None:
    data = tmp_path / "src"
    make_files(data, 6, 10_000, seed=2)
    out = tmp_path / "out"
    out.mkdir()
    with S3Server() as s3:
        # a bucket of its own: the server may hold other tests' objects
        s3.upload_tree("redact-bucket", data, prefix="train")
        env = {**s3.env(), **ENV_SECRETS}
        args = ["s3://redact-bucket/train", "--loader", "raw", "--time-budget", "3", *_outputs(out)]
        probe = _ok("probe", *args, env=env)
    texts = {"stdout": probe.stdout, "stderr": probe.stderr, **_files(out)}
    assert _leaks(texts, tuple(ENV_SECRETS.values())) == []
    assert RunRecord.load(out / "run.json").dataset.files == 6  # the credentials were used


def _no_raw_escapes(text: str) -> bool:
    return "\x1b" not in text and "\x07" not in text


@pytest.fixture
def evil_dir(tmp_path: Path) -> Path:
    d = tmp_path / EVIL_NAME
    make_files(d, 5, 4_000, seed=1)
    return d


def test_an_escape_sequence_in_a_directory_name_never_reaches_the_terminal(
    evil_dir: Path, tmp_path: Path
) -> None:
    page = tmp_path / "run.html"
    quiet = run_cli("probe", str(evil_dir), "--time-budget", "3", "-q", "--html", str(page))
    assert quiet.returncode == 0, quiet.stderr
    # without -q the progress lines go to stderr, and --md - replaces the view on stdout
    summary = run_cli("probe", str(evil_dir), "--time-budget", "3", "--md", "-")
    assert summary.returncode == 0, summary.stderr
    texts = [quiet.stdout, quiet.stderr, summary.stdout, summary.stderr]
    assert all(_no_raw_escapes(t) for t in texts)
    assert _no_raw_escapes(page.read_text(encoding="utf-8"))
    assert r"evil\x1b]0;pwned\x07dir" in quiet.stdout  # shown, as text
    assert summary.stderr.startswith("ioprobe: ")  # the progress lines were there to check


def test_an_error_line_quoting_a_path_with_an_escape_shows_it_as_text(tmp_path: Path) -> None:
    proc = run_cli("probe", str(tmp_path / EVIL_NAME / "missing"), "-q")
    assert_one_line_error(proc, r"evil\x1b]0;pwned\x07dir/missing", "no such file")
    assert _no_raw_escapes(proc.stderr)


def test_an_error_line_quoting_a_url_argument_masks_its_secrets() -> None:
    # the run file's name is quoted as given, by a message no target code built: the CLI's
    # error line itself masks it
    proc = run_cli("report", "http://user:s3cr3tpw@h/run.json?token=tok999")
    assert_one_line_error(proc, "http://user:***@h/run.json?token=***")
    assert _leaks({"stderr": proc.stderr}, SECRETS) == []
