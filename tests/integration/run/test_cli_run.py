from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from ioprobe.record import RunRecord
from tests.support.cli import REPO, assert_one_line_error, run_cli, watched_and_plain

# behaviour alone: run beside other tests (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.shared]


@pytest.mark.serial  # the burn's CPU time per sample, and the verdict it makes
def test_run_watches_an_unchanged_script_and_passes_everything_through(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = run_cli(
        "run",
        "--json",
        str(out),
        "--",
        sys.executable,
        "-m",
        "tests.fixtures.train_script",
        "1",
        "7",
    )
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.strip() == "trained on 96 samples"
    assert "cpu-bound" in proc.stderr
    rec = json.loads(out.read_text())
    assert rec["kind"] == "watch"
    assert rec["bottleneck"] == "cpu"
    assert rec["stages"]["cpu"]["cpu_seconds_per_sample"] == pytest.approx(0.004, rel=0.15)
    assert [e["samples"] for e in rec["watch"]["epochs"]] == [96]


def test_a_stream_output_holds_the_first_loader_and_no_name_is_derived_from_it(
    tmp_path: Path,
) -> None:
    # with two loaders, --json /dev/null made /dev/null.loader2: a new file in /dev
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    proc = run_cli(
        "run", "--json", str(fifo), "--", sys.executable, "-m", "tests.fixtures.train_script", "2"
    )
    if reader.is_alive():  # never opened: end the reader's wait before asserting
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(got[0])["watch"]["epochs"][0]["samples"] == 96  # the first loader's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no pipe.loader2
    assert fifo.is_fifo()
    assert f"loader 2's json output not written: {fifo} is a stream" in proc.stderr


def test_run_writes_one_record_per_loader(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = run_cli(
        "run", "--json", str(out), "--", sys.executable, "-m", "tests.fixtures.train_script", "2"
    )
    assert proc.returncode == 0, proc.stderr
    first = json.loads(out.read_text())
    second = json.loads((tmp_path / "run.loader2.json").read_text())
    assert first["watch"]["epochs"][0]["samples"] == 96  # the busiest loader comes first
    assert second["watch"]["epochs"][0]["samples"] == 48
    assert "loader 2 of 2" in proc.stderr


def test_run_without_a_dataloader_says_so(tmp_path: Path) -> None:
    proc = run_cli("run", "--", sys.executable, "-c", "print('hello')")
    assert proc.returncode == 0
    assert proc.stdout == "hello\n"
    assert "no DataLoader was iterated" in proc.stderr
    assert "Error in sitecustomize" not in proc.stderr


WORKER_DIES_AT_ONCE = """\
import os, torch
from torch.utils.data import DataLoader, Dataset
class Dies(Dataset):
    def __len__(self): return 32
    def __getitem__(self, i):
        if i == 0: os._exit(7)  # before its batch is sent: no batch ever reaches the loop
        return torch.tensor([i])
for batch in DataLoader(Dies(), batch_size=4, num_workers=1):
    pass
"""


def test_a_loader_whose_worker_dies_before_any_batch_is_said_so_with_its_error(
    tmp_path: Path,
) -> None:
    # the line used to say the script never iterated its loader or skipped its exit hooks
    script = tmp_path / "train.py"
    script.write_text(WORKER_DIES_AT_ONCE)
    proc = run_cli("run", "--json", str(tmp_path / "run.json"), "--", sys.executable, str(script))
    assert proc.returncode == 1, proc.stderr  # the script's, as unwatched
    assert "iterated a loader but no batch reached it (RuntimeError: DataLoader worker" in (
        proc.stderr
    )
    assert "never iterated" not in proc.stderr
    assert not (tmp_path / "run.json").exists()


def test_a_run_inside_a_run_watches_once_and_the_users_sitecustomize_runs_once_each(
    tmp_path: Path,
) -> None:
    # a wrapper script that uses `ioprobe run`, started under `ioprobe run`: the inner hook
    # chained to the outer one and that one back to it, without end
    site = tmp_path / "site"
    site.mkdir()
    ran = tmp_path / "ran"
    (site / "sitecustomize.py").write_text(
        f"import os\nwith open({str(ran)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
    )
    inner = tmp_path / "inner.json"
    proc = run_cli(
        "run", "--", sys.executable, "-m", "ioprobe", "run", "--json", str(inner), "--",
        sys.executable, "-m", "tests.fixtures.train_script",
        env={"PYTHONPATH": f"{site}{os.pathsep}{REPO}"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Error in sitecustomize" not in proc.stderr and "RecursionError" not in proc.stderr
    assert proc.stdout == "trained on 96 samples\n"
    assert RunRecord.load(inner).watch is not None  # the inner run watched the script
    pids = ran.read_text().split()
    # the outer ioprobe, the inner one and the script: each ran the user's hook once
    assert len(pids) == len(set(pids)) == 3


USER_SITE = {
    # a module the script imports itself, for a value it set
    "module": {"sitecustomize.py": "FOO = 42\n"},
    # a package whose __init__ imports from itself
    "package": {
        "sitecustomize/__init__.py": "from . import helper\nFOO = helper.X\n",
        "sitecustomize/helper.py": "X = 7\n",
    },
    # a source in another encoding, as its coding line says
    "latin-1": {"sitecustomize.py": b"# -*- coding: latin-1 -*-\nFOO = 'caf\xe9'\n"},
}
SITE_SCRIPT = (
    "import sitecustomize, sys\n"
    "from torch.utils.data import DataLoader\n"
    "print(sitecustomize.FOO, sum(int(b.sum()) for b in DataLoader(list(range(64)), batch_size=8, num_workers=2)))\n"
)


@pytest.mark.parametrize("form", sorted(USER_SITE))
def test_the_users_own_sitecustomize_runs_and_is_what_the_script_imports(
    tmp_path: Path, form: str
) -> None:
    # the hook shadowed it: `import sitecustomize` gave the hook, a package's relative
    # import failed, and a latin-1 one made the hook raise
    site = tmp_path / "site"
    for rel, text in USER_SITE[form].items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (site / rel).write_bytes(text)
        else:
            (site / rel).write_text(text)
    script = tmp_path / "t.py"
    script.write_text(SITE_SCRIPT)
    env = {"PYTHONPATH": f"{site}{os.pathsep}{REPO}"}
    plain = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
        env={**os.environ, **env},
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    watched = run_cli("run", "--", sys.executable, str(script), env=env)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout == plain.stdout
    assert "Error in sitecustomize" not in watched.stderr


def test_a_python_the_script_runs_that_cannot_import_ioprobe_says_nothing_on_its_stderr(
    tmp_path: Path,
) -> None:
    # another interpreter (a system Python, a venv without ioprobe): the hook reaches it
    # through PYTHONPATH; an ioprobe package that fails to import stands for one here
    broken = tmp_path / "broken" / "ioprobe"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('no ioprobe here')\n")
    script = tmp_path / "t.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.environ['PYTHONPATH'].split(os.pathsep)[0], sys.argv[1]]))\n"
        "r = subprocess.run([sys.executable, '-c', 'print(1)'], env=env, capture_output=True, text=True)\n"
        "print(r.returncode, repr(r.stdout), repr(r.stderr))\n"
    )
    proc = run_cli("run", "--", sys.executable, str(script), str(tmp_path / "broken"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "0 '1\\n' ''\n"
    # the script itself was watched but iterated nothing; the child's note is not a
    # reason for that, and is said only where no record was saved
    assert "could not import ioprobe" in proc.stderr and "no ioprobe here" in proc.stderr


def test_a_tmpdir_whose_path_holds_a_colon_still_watches_the_script(tmp_path: Path) -> None:
    # the hook's folder under it was split in two on PYTHONPATH: the script ran unwatched.
    # A short path: multiprocessing's sockets under TMPDIR must fit AF_UNIX's 108 bytes,
    # which a folder under pytest's tmp_path may not (the loader hangs unwatched too)
    odd = Path(tempfile.mkdtemp(prefix="ioprobe-test:"))
    try:
        out = tmp_path / "run.json"
        proc = run_cli(
            "run", "--json", str(out), "--", sys.executable, "-m", "tests.fixtures.train_script",
            env={"TMPDIR": str(odd)},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "trained on 96 samples\n"
        assert RunRecord.load(out).watch is not None, proc.stderr
        assert not [p for p in odd.iterdir() if p.name.startswith("ioprobe-run-")]
    finally:
        shutil.rmtree(odd, ignore_errors=True)


def test_the_folder_of_a_run_killed_with_sigkill_is_removed_by_the_next_run(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    killed = subprocess.Popen(
        [sys.executable, "-m", "ioprobe", "run", "--", sys.executable, "-c",
         "import time; time.sleep(60)"],
        env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run = psutil.Process(killed.pid)
    deadline = time.monotonic() + 30
    while not _script_of(run) and time.monotonic() < deadline:
        time.sleep(0.05)
    script = _script_of(run)
    assert script is not None and len(list(tmp_path.glob("ioprobe-run-*"))) == 1
    os.killpg(killed.pid, signal.SIGKILL)  # the run: nothing can be caught
    killed.wait()
    # another host's run, in a TMPDIR that nodes share: its pid says nothing here
    elsewhere = tmp_path / f"ioprobe-run-{killed.pid}-0badf00d-x"
    elsewhere.mkdir()
    try:
        # its script runs on, orphaned, from that folder: the next run leaves it
        again = run_cli(
            "run", "--", sys.executable, "-c", "print('hi')", env={"TMPDIR": str(tmp_path)}
        )
        assert again.returncode == 0 and again.stdout == "hi\n", again.stderr
        assert len(list(tmp_path.iterdir())) == 2
    finally:
        script.kill()
        script.wait(10)
    proc = run_cli("run", "--", sys.executable, "-c", "print('hi')", env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0 and proc.stdout == "hi\n", proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == [elsewhere.name]


def _script_of(run: psutil.Process) -> psutil.Process | None:
    """The script ``ioprobe run`` started: its child that runs the sleep."""
    try:
        for child in run.children(recursive=True):
            if "time.sleep(60)" in " ".join(child.cmdline()):
                return child
    except psutil.Error:
        pass
    return None


def test_run_of_a_missing_command_exits_2() -> None:
    assert_one_line_error(
        run_cli("run", "--", "no-such-program-xyz"), "no-such-program-xyz: command not found"
    )


def test_run_watches_a_subclass_that_wraps_iter_and_keeps_its_logic(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc, plain = watched_and_plain(out, sys.executable, "-m", "tests.fixtures.subclass_train")
    assert json.loads(proc.stdout) == json.loads(plain.stdout)  # still multiplied by 10
    rec = RunRecord.load(out)
    assert rec.watch is not None and rec.watch.epochs[0].samples == 48


ASKS_ITS_ITERATOR = """\
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

class DS(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i): return torch.tensor([i])

it = iter(DataLoader(DS(), batch_size=8, num_workers=2))
print(len(it), isinstance(it, _BaseDataLoaderIter))  # a progress bar's total
first = next(it)
print(len(it), it._num_yielded, first.flatten().tolist())
print(sum(int(b.sum()) for b in it), it._num_yielded)
"""


def test_a_script_that_asks_its_loaders_iterator_for_its_length_runs_as_unwatched(
    tmp_path: Path,
) -> None:
    # round ten: under run, iter(loader) was a generator: len() raised TypeError and the
    # script exited 1 where unwatched it printed and exited 0
    script = tmp_path / "asks.py"
    script.write_text(ASKS_ITS_ITERATOR)
    proc, plain = watched_and_plain(tmp_path / "run.json", sys.executable, str(script))
    assert proc.stdout == plain.stdout
    assert plain.stdout.splitlines()[0] == "8 True"
    rec = RunRecord.load(tmp_path / "run.json")
    assert rec.watch is not None and rec.watch.epochs[0].samples == 64


FILLS_TMPDIR = """\
import os, tempfile, torch
from torch.utils.data import DataLoader
for batch in DataLoader(list(range(64)), batch_size=8, num_workers=0):
    pass
try:  # the records' folder's file system, filled to its last block
    with open(os.path.join(tempfile.gettempdir(), "fill"), "wb") as f:
        while True:
            f.write(bytes(4096))
            f.flush()
except OSError:
    pass
"""


def test_a_record_lost_to_a_full_tmpdir_is_said_so(tmp_path: Path) -> None:
    # a 256 kB tmpfs as TMPDIR, in a mount namespace of its own (no root needed where user
    # namespaces are allowed); the message used to say the script never iterated its loader
    can = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], check=False)
    if can.returncode != 0:
        pytest.skip("this machine allows no user and mount namespaces (unshare failed)")
    small = tmp_path / "small"
    small.mkdir()
    script = tmp_path / "train.py"
    script.write_text(FILLS_TMPDIR)
    inner = (
        f'mount -t tmpfs -o size=256k none "{small}" && TMPDIR="{small}" '
        f'"{sys.executable}" -m ioprobe run -- "{sys.executable}" "{script}"'
    )
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inner],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{small} (TMPDIR) has no space left" in proc.stderr
    assert "never iterated" not in proc.stderr


def test_a_full_stderr_leaves_runs_exit_code_the_scripts_and_tune_its_record(
    tmp_path: Path,
) -> None:
    # a log on a full disk: the summary cannot be written, and that ended run with 2 (the
    # script's was 3) and tune before its first trial, its --json never written
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, time, torch\n"
        "from torch.utils.data import DataLoader, Dataset\n"
        "class DS(Dataset):\n"
        "    def __len__(self): return 1200\n"
        "    def __getitem__(self, i): time.sleep(0.001); return torch.zeros(4)\n"
        "for b in DataLoader(DS(), batch_size=8, num_workers=2): pass\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    # stderr buffered, as for most users (no PYTHONUNBUFFERED): a progress line's failed
    # write stayed in its buffer and failed again at the next flush, ending tune with 2
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env |= {"PYTHONPATH": str(REPO), "COLUMNS": "100"}

    def full_stderr(*args: str) -> int:
        with open("/dev/full", "w") as full:
            return subprocess.run(
                [sys.executable, "-m", "ioprobe", *args], stderr=full, stdout=subprocess.DEVNULL,
                env=env, cwd=tmp_path, timeout=120, check=False,
            ).returncode  # fmt: skip

    assert full_stderr("run", "--json", "r.json", "--", sys.executable, str(script), "3") == 3
    assert RunRecord.load(tmp_path / "r.json").watch is not None
    tune = ("tune", "--trials", "1", "--trial-batches", "50", "--json", "t.json")
    assert full_stderr(*tune, "--", sys.executable, str(script), "0") == 0
    rec = RunRecord.load(tmp_path / "t.json")
    assert rec.tune is not None and len(rec.tune.trials) == 2


def test_a_grandchild_that_outlives_the_run_says_nothing_of_its_records(tmp_path: Path) -> None:
    # it inherits the hook and the records folder, which the run removed as it ended: its
    # exit printed "could not save the record ... no such directory" into the user's log
    go, done, log = tmp_path / "go", tmp_path / "done", tmp_path / "grandchild.err"
    later = (
        "import os, time, torch\n"
        "from torch.utils.data import DataLoader\n"
        "end = time.monotonic() + 60  # a test that failed early never says go\n"
        f"while not os.path.exists({str(go)!r}) and time.monotonic() < end: time.sleep(0.05)\n"
        "for b in DataLoader(list(range(64)), batch_size=8, num_workers=1): pass\n"
        f"open({str(done)!r}, 'w').close()\n"
    )
    script = tmp_path / "s.py"
    script.write_text(
        "import subprocess, sys, torch\n"
        "from torch.utils.data import DataLoader\n"
        f"subprocess.Popen([sys.executable, '-c', {later!r}], start_new_session=True,\n"
        f"                 stdout=subprocess.DEVNULL, stderr=open({str(log)!r}, 'w'))\n"
        "for b in DataLoader(list(range(64)), batch_size=8, num_workers=1): pass\n"
    )
    proc = run_cli("run", "--json", str(tmp_path / "r.json"), "--", sys.executable, str(script))
    assert proc.returncode == 0, proc.stderr
    go.touch()  # the run is over: the grandchild iterates its loader and exits now
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # its exit handlers
    assert done.exists() and "ioprobe" not in log.read_text()


def test_an_output_the_script_itself_writes_is_left_to_it_and_the_record_goes_beside(
    tmp_path: Path,
) -> None:
    # `run --json model.json` of a script that saves model.json: its file was replaced by
    # the record once it ended
    script = tmp_path / "save.py"
    script.write_text(
        "import runpy, sys\n"
        "sys.argv = ['train_script']\n"
        "try:\n"
        "    runpy.run_module('tests.fixtures.train_script', run_name='__main__')\n"
        "finally:  # it ends with sys.exit\n"
        "    open('model.json', 'w').write('{\"weights\": [1, 2, 3]}')\n"
    )
    (tmp_path / "model.json").write_text("{}")  # there before the run: the script rewrites it
    proc = run_cli("run", "--json", "model.json", "--", sys.executable, str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "model.json").read_text() == '{"weights": [1, 2, 3]}'
    assert RunRecord.load(tmp_path / "model.ioprobe.json").watch is not None
    assert "model.json was written by the script while it ran" in proc.stderr
    assert "model.ioprobe.json" in proc.stderr
