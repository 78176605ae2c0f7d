"""`whatif --workers --probe` on bandwidth-capped remote storage against a rerun: a server
that shares one bandwidth among all its connections is read no faster by more workers. One
watched run can't see that (its reads in flight hardly vary); a probe of the same server,
whose concurrency sweep levels off at the cap, can. And `--probe` refuses what it can't use."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from ioprobe.analysis.scenario import LINEAR_STORAGE
from ioprobe.record import RunRecord
from tests.fixtures.datasets import MeteredHttpDecodeDataset
from tests.support.accuracy import relative_error, watch_run
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.servers import ThrottledHTTPServer, make_files
from tests.unit.analysis.test_whatif import CAPPED, storage_probe, watched_remote

pytestmark = pytest.mark.slow

RATE, SIZE, FILES = 2_000_000, 50_000, 160  # 4 s of transfer per run at the cap
DECODE_S = 0.015  # each sample's CPU after its read, jittered from half to 1.5x by sample


def _predicted(run: Path, probe: Path, workers: int) -> tuple[float, list[str]]:
    proc = run_cli(
        "whatif", str(run), "--workers", str(workers), "--probe", str(probe), "--json", "-"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["whatif"]["unchecked"] == []  # the probe's curve checked it
    return float(out["predicted_samples_per_s"]), out["whatif"]["assumptions"]


# 15-35 s of reruns on 2 cores: in `make validate`, so the default run keeps to 15 minutes
@pytest.mark.long
def test_more_workers_on_a_bandwidth_cap_predicted_from_the_probe_within_20_percent(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    make_files(root, FILES, SIZE)
    probe = tmp_path / "probe.json"
    pairs: list[tuple[float, float]] = []
    with ThrottledHTTPServer(root, rate_bytes_per_s=RATE) as srv:
        proc = run_cli(
            "probe", srv.url, "--loader", "raw", "--time-budget", "4", "--json", str(probe), "-q"
        )
        assert proc.returncode == 0, proc.stderr
        sweep = RunRecord.load(probe).stages.storage.cold
        assert sweep is not None and len(sweep.sweep) >= 3  # a curve, not one level
        urls = [srv.url + f"p0/f{i:05d}.bin" for i in range(FILES)]

        def run(workers: int) -> RunRecord:
            ds = MeteredHttpDecodeDataset(urls, DECODE_S)
            return watch_run(DataLoader(ds, batch_size=4, num_workers=workers))

        # two pairs: the throttle holds the 4-worker rate at its cap from run to run, and the
        # default test run's 15 minutes hold no third
        for i in range(2):
            path = tmp_path / f"two{i}.json"
            run(2).save(path)
            predicted, assumptions = _predicted(path, probe, 4)
            assert any("probe.json" in a and srv.url in a for a in assumptions), assumptions
            if i == 0:
                _alone_says_it_assumes(path)
            four = run(4).measured_samples_per_s
            assert four is not None
            pairs.append((predicted, four))
    # the run alone would predict about twice its storage (linear); the cap allows
    # RATE / SIZE = 40 samples/s at any worker count
    err = statistics.median(relative_error(p) for p in pairs)
    assert err <= 0.20, f"predicted vs measured: {pairs}"


def _alone_says_it_assumes(run: Path) -> None:
    """Without the probe, where the run's reads in flight varied too little to fit how its
    storage scales, the what-if's number rests on storage linear in readers, and says so
    beside it (with the probe it rests on the probe's curve: nothing unchecked)."""
    rec = RunRecord.load(run)
    assert rec.watch is not None
    fit = rec.watch.read_scaling
    proc = run_cli("whatif", str(run), "--workers", "4")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    if fit is None or fit.exponent is None:
        assert f"samples/s ({LINEAR_STORAGE})" in said, said
    else:
        assert "unchecked" not in said, said


def test_probe_flag_refuses_a_swapped_pair_other_storage_and_no_worker_change(
    tmp_path: Path,
) -> None:
    run, probe = tmp_path / "run.json", tmp_path / "probe.json"
    watched_remote().save(run)
    storage_probe(CAPPED).save(probe)
    other = tmp_path / "other.json"
    storage_probe(CAPPED, target="http://other.example/train").save(other)
    cases = [
        (["whatif", str(run), "--workers", "4", "--probe", str(probe)], None),
        (["whatif", str(probe), "--workers", "4", "--probe", str(probe)], "watched run"),
        (["whatif", str(run), "--workers", "4", "--probe", str(run)], "a watch record"),
        (["whatif", str(run), "--workers", "4", "--probe", str(other)], "other.example"),
        (["whatif", str(run), "--cores", "4", "--probe", str(probe)], "--workers or --gpus"),
    ]
    for args, error in cases:
        proc = run_cli(*args)
        if error is None:
            assert proc.returncode == 0, proc.stderr
            assert "probe.json" in proc.stdout
        else:
            assert_one_line_error(proc, "--probe", error)
