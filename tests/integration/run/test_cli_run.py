from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ioprobe.record import RunRecord
from tests.support.cli import REPO, assert_one_line_error, run_cli, watched_and_plain

pytestmark = pytest.mark.slow


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
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}

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
