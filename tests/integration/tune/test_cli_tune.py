"""``ioprobe tune`` on an unchanged script: trials under the settings the replay ranked,
each stopped once measured, the table and the change to make, the record with every trial."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.errors import BadInputError
from ioprobe.record import RunRecord
from tests.support.cli import REPO, run_cli, without_dropped_worker_tracebacks

SCRIPT = str(REPO / "tests" / "fixtures" / "tune_train.py")


# a full tuning of four trials, 17 s on 2 cores: in `make validate`; the default run tunes in
# one process and holds every trial's exits and signals
@pytest.mark.long
def test_tune_tries_the_replays_settings_and_names_the_measured_best(tmp_path: Path) -> None:
    out, record = tmp_path / "done.txt", tmp_path / "tune.json"
    md = tmp_path / "tune.md"
    result = run_cli(
        "tune", "--trial-batches", "60", "--trials", "2", "--json", str(record),
        "--md", str(md), "--", sys.executable, SCRIPT, "4000", str(out),
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # every trial stopped the script before its end: its last line never ran
    assert not out.exists()
    rec = RunRecord.load(record)
    assert rec.tune is not None and len(rec.tune.trials) == 3
    first, *rest = rec.tune.trials
    assert (first.workers, first.prefetch_factor, first.in_order) == (4, 2, True)
    assert first.predicted_samples_per_s is None and first.exit_code == 0
    for t in rest:
        assert t.measured_samples_per_s and t.predicted_samples_per_s
        assert (t.workers, t.prefetch_factor, t.in_order) != (4, 2, True)
        # a trial measures its batches and stops: the first round and 60 more, not 3 epochs
        assert t.workers + 60 <= t.batches <= t.workers + 61
    assert rec.tune.best is not None
    best = rec.tune.trials[rec.tune.best]
    assert best.measured_samples_per_s == max(
        t.measured_samples_per_s or 0 for t in rec.tune.trials
    )
    # the skewed loader's own setting is far from its best: a trial beats it
    assert rec.tune.best != 0
    assert "Measured best: trial" in result.stderr and "Change: DataLoader(..., " in result.stderr
    assert "**Trials (ioprobe tune)**" in md.read_text()


def test_tune_refuses_a_script_without_a_loader_with_workers(tmp_path: Path) -> None:
    result = run_cli(
        "tune", "--", sys.executable, SCRIPT, "200", str(tmp_path / "x"), "0", timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert "num_workers=0" in result.stderr or "no DataLoader" in result.stderr


@pytest.mark.parametrize(
    ("before", "inside", "said"),
    [
        ("sys.exit(4)", "pass", "exit code 4"),
        ("pass", "os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
    ],
)
def test_a_first_trial_with_no_record_says_how_the_script_ended(
    tmp_path: Path, before: str, inside: str, said: str
) -> None:
    # a script killed mid-trial was said to have iterated no DataLoader "(exit code -9)"
    script = tmp_path / "train.py"
    script.write_text(
        "import os, signal, sys, torch\n"
        "from torch.utils.data import DataLoader\n"
        f"{before}\n"
        "for i, b in enumerate(DataLoader(list(range(64)), batch_size=4, num_workers=1)):\n"
        f"    if i == 3:\n        {inside}\n"
    )
    result = run_cli("tune", "--", sys.executable, str(script), timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]  # after the trial's progress line
    assert last.startswith("ioprobe: error: ") and said in last, last
    assert "no DataLoader with workers was recorded" in last


def test_a_script_that_catches_the_trials_stop_starts_no_more_workers_and_leaves_no_temp(
    tmp_path: Path,
) -> None:
    # each later epoch started its workers only for the stop to tear them down at the first
    # batch: 100 epochs a trial, and pymp-* folders of workers that died holding them
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, torch\n"
        "from torch.utils.data import DataLoader\n"
        "def started(_):\n"
        f"    with open({str(tmp_path / 'starts')!r}, 'a') as f: f.write('w\\n')\n"
        "loader = DataLoader([torch.zeros(8)] * 2048, batch_size=8, num_workers=2,\n"
        "                    worker_init_fn=started)\n"
        "caught = 0\n"
        "for epoch in range(100):\n"
        "    try:\n"
        "        for b in loader: pass\n"
        "    except SystemExit:\n"
        "        caught += 1\n"
        "print('caught', caught)\n"
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = run_cli("tune", "--trials", "1", "--trial-batches", "50", "--", sys.executable,
                     str(script), env={"TMPDIR": str(temp)}, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = result.stdout.count("caught 100")
    assert runs >= 2, result.stdout  # the first trial and the replay's setting, every epoch
    starts = (tmp_path / "starts").read_text().count("w")
    assert starts <= 2 * 8, starts  # one round of workers a trial: at most 8 workers each
    assert list(temp.iterdir()) == []


def test_tune_in_process_tries_settings_and_leaves_the_loader_as_it_was() -> None:
    import time

    from torch.utils.data import DataLoader

    import ioprobe
    from tests.fixtures.datasets import SkewedDataset

    loader = DataLoader(SkewedDataset(4000, 0.002, 50, 150.0), batch_size=16, num_workers=4)
    steps: list[int] = []

    def step(batch: object) -> None:
        steps.append(1)
        time.sleep(0.005)

    rec = ioprobe.tune(loader, step=step, batches=60, trials=1)  # as it is, and the best
    assert rec.tune is not None and len(rec.tune.trials) == 2
    assert all(t.measured_samples_per_s for t in rec.tune.trials)
    # each trial: its workers' first round and 60 more, every batch through the step
    assert len(steps) == sum(t.batches for t in rec.tune.trials)
    assert all(t.batches == t.workers + 60 for t in rec.tune.trials)
    with pytest.raises(BadInputError, match="batches must be at least 50"):
        ioprobe.tune(loader, batches=10)
    assert loader.num_workers == 4 and loader.prefetch_factor == 2


IN_RUN = str(REPO / "tests" / "fixtures" / "in_run_train.py")


# 15-35 s of reruns on 2 cores: in `make validate`, so the default run keeps to 15 minutes
@pytest.mark.long
def test_tune_in_run_tries_settings_in_the_first_epoch_and_the_script_trains_as_unwatched(
    tmp_path: Path,
) -> None:
    import json
    import subprocess

    plain, tuned, record = tmp_path / "plain.json", tmp_path / "tuned.json", tmp_path / "t.json"
    # 300 batches an epoch, 2 workers, 2 epochs: room for the first window (52) and two of up
    # to 64 workers (114 each)
    args = ["4800", "2", "2"]
    subprocess.run(
        [sys.executable, IN_RUN, args[0], str(plain), *args[1:]], check=True, timeout=300
    )
    result = run_cli(
        "tune", "--in-run", "--trial-batches", "50", "--trials", "2", "--json", str(record),
        "--", sys.executable, IN_RUN, args[0], str(tuned), *args[1:],
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rec = RunRecord.load(record)
    assert rec.tune is not None and rec.tune.in_run
    trials = rec.tune.trials
    assert len(trials) == 3, rec.tune.notes
    assert (trials[0].workers, trials[0].prefetch_factor, trials[0].in_order) == (2, 2, True)
    assert all(t.measured_samples_per_s for t in trials)
    assert all(t.predicted_samples_per_s for t in trials[1:])
    assert len({(t.workers, t.prefetch_factor, t.in_order) for t in trials}) == 3
    # each window: its workers' first round and 50 batches, one after another from the start
    assert [t.batches for t in trials] == [t.workers + 50 for t in trials]
    ran, want = json.loads(tuned.read_text()), json.loads(plain.read_text())
    # the script ran to its end, every epoch whole: the first epoch's batches are its own
    # (each window's in its order, or in the order its workers finished them with
    # in_order=False), and everything after the trials is as unwatched: the second epoch's
    # shuffle and the generator's last draw show that no draw of the script's was taken
    assert sorted(ran["epochs"][0]) == sorted(want["epochs"][0])
    at = 0
    for t in trials:
        window = slice(at, at + t.batches)
        if t.in_order:
            assert ran["epochs"][0][window] == want["epochs"][0][window]
        at += t.batches
    assert ran["epochs"][0][at:] == want["epochs"][0][at:]
    assert ran["epochs"][1] == want["epochs"][1]
    assert ran["after"] == want["after"]
    if all(t.in_order for t in trials):  # the same batches in the same order: the same model
        assert ran["weights"] == want["weights"]
    else:
        assert any("order" in t.note for t in trials if not t.in_order)


def test_tune_in_run_says_why_no_loader_held_the_trials(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = run_cli(
        "tune", "--in-run", "--trial-batches", "50", "--",
        sys.executable, IN_RUN, "320", str(out), "2", "1",
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "no trial ran (the script exited 0)" in result.stderr
    assert "its epoch has 20 batches; the trials need about 270" in result.stderr
    assert out.exists()  # the script itself ran to its end


def test_tune_in_run_passes_the_scripts_exit_code_on_and_says_so(
    tmp_path: Path,
) -> None:
    result = run_cli(
        "tune", "--in-run", "--trial-batches", "50", "--trials", "1", "--",
        sys.executable, IN_RUN, "3200", str(tmp_path / "out.json"), "2", "1", "0.5", "3",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "Measured best: trial" in result.stderr or "measured best" in result.stderr
    assert "the script then ran with its own setting and exited 3." in " ".join(
        result.stderr.split()
    )


def test_ctrl_c_during_a_trial_stops_the_tuning_with_what_was_measured(tmp_path: Path) -> None:
    import signal
    import time

    record = tmp_path / "t.json"
    argv = [
        sys.executable, "-m", "ioprobe", "tune", "--trial-batches", "100", "--trials", "3",
        "--json", str(record), "--",
        sys.executable, IN_RUN, "40000", str(tmp_path / "out.json"), "2", "1",
    ]  # fmt: skip
    proc = _tune_process(argv)
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 120
    while "trial 2 of" not in seen and time.monotonic() < deadline:
        seen += proc.stderr.readline()
    time.sleep(1.0)  # inside trial 2's script
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, seen + rest
    assert "Interrupted (SIGINT) in trial 2: the trials after it were not run." in rest
    assert "Traceback" not in without_dropped_worker_tracebacks(rest.split("Interrupted")[-1])
    rec = RunRecord.load(record)
    assert rec.tune is not None and rec.tune.interrupted_by == signal.SIGINT
    assert len(rec.tune.trials) == 2 and rec.tune.trials[1].note == "interrupted (SIGINT)"


def test_tune_in_run_of_a_script_without_torch_imports_none_at_its_exit(tmp_path: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("import sys\nsys.exit(0)\n")
    result = run_cli(
        "tune", "--in-run", "--trials", "1", "--trial-batches", "50", "--",
        sys.executable, str(plain), timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr  # no loader: said in one line
    # torch imported by the hook at the script's exit ran its finalizers in a dying
    # interpreter: "Exception ignored ... 'NoneType' object is not callable"
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("signum", [15, 1], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_tune_in_run_before_a_trial_ended_exits_as_that_signal(
    tmp_path: Path, signum: int
) -> None:
    import signal
    import time

    argv = [
        sys.executable, "-m", "ioprobe", "tune", "--in-run", "--trial-batches", "100",
        "--trials", "2", "--", sys.executable, IN_RUN, "40000", str(tmp_path / "out.json"),
        "2", "1",
    ]  # fmt: skip
    proc = _tune_process(argv)
    assert proc.stderr is not None
    seen = proc.stderr.readline()  # "ioprobe tune: up to 3 trials in the first epoch ..."
    time.sleep(2.0)  # inside the script's first window
    proc.send_signal(signum)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signum, seen + rest
    assert f"interrupted ({signal.Signals(signum).name}) before a trial ended" in rest
    assert "Traceback" not in without_dropped_worker_tracebacks(rest), rest
    assert "no trial ran" not in rest


def test_a_signal_the_trials_script_catches_and_exits_0_on_still_stops_tune(
    tmp_path: Path,
) -> None:
    # the script ends well on SIGTERM (a checkpoint, exit 0): tune went on to its next
    # trials, as it did for a SIGHUP that came while a trial's script was exiting
    import signal
    import time

    script = tmp_path / "train.py"
    script.write_text(
        "import signal, sys, time, torch\n"
        "from torch.utils.data import DataLoader\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "class DS(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 100000\n"
        "    def __getitem__(self, i): time.sleep(0.002); return torch.zeros(4)\n"
        "for i, b in enumerate(DataLoader(DS(), batch_size=8, num_workers=2)):\n"
        "    if i == 5: print('training', flush=True)\n"
    )
    argv = [sys.executable, "-m", "ioprobe", "tune", "--trials", "2", "--trial-batches", "400",
            "--", sys.executable, str(script)]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while "training" not in proc.stdout.readline() and time.monotonic() < deadline:
        pass
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "interrupted (SIGTERM) in trial 1" in err and "trial 2" not in err


def _tune_process(argv: list[str]) -> subprocess.Popen[str]:
    """``argv`` with its stderr to read line by line, SIGHUP at its default: the test
    runner's own may be ignored (nohup), and ioprobe keeps an ignored one ignored."""
    import os
    import signal

    return subprocess.Popen(
        argv,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO)},
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
