"""A prediction that rests on an assumption its run could not check says so beside the number,
in the terminal, the Markdown and the page: storage taken as linear in reads in flight where
nothing measured tells a bandwidth cap from a latency limit. Records built by hand."""

from __future__ import annotations

from ioprobe.analysis import finalize
from ioprobe.analysis.catalog import load_catalog
from ioprobe.analysis.report import findings
from ioprobe.analysis.scenario import FOREIGN_SHARE, LINEAR_STORAGE, evaluate
from ioprobe.analysis.whatif import whatif
from ioprobe.record import Change, RunRecord
from ioprobe.render import html, markdown, terminal
from tests.unit.analysis.test_whatif import watched_remote


def _storage_bound(exponent: float | None = None) -> RunRecord:
    """2 workers reading at 40 samples/s in all, the CPU and GPU far faster; the run's reads
    in flight varied too little to fit how storage scales, unless ``exponent`` is given."""
    rec = watched_remote(mean=1.6, exponent=exponent)
    rec.stages.gpu.capacity_samples_per_s = 400.0
    return rec


def test_more_readers_on_unfitted_storage_rest_on_the_linear_assumption() -> None:
    sc = evaluate(_storage_bound(), Change(workers=4))
    assert sc.predicted_samples_per_s > 40.0  # the gain itself comes from storage scaling
    assert sc.unchecked == (LINEAR_STORAGE,)


def test_more_workers_beside_other_load_rest_on_it_giving_up_cores_thread_by_thread() -> None:
    # the workers waited for a core as long as they ran: someone else's threads shared them
    rec = _storage_bound(exponent=0.5)
    assert rec.watch is not None
    for e in rec.watch.epochs:
        e.sample_cpu_seconds, e.runqueue_seconds = 5.0, 5.0
    assert evaluate(rec, Change(workers=4)).unchecked == (FOREIGN_SHARE,)
    assert evaluate(rec, Change(workers=1)).unchecked == ()  # fewer take nothing from it


def test_measured_scaling_a_new_class_or_storage_to_spare_assume_nothing_unchecked() -> None:
    # the run's own fit says how storage scales: a measured curve, not an assumption
    assert evaluate(_storage_bound(exponent=0.5), Change(workers=4)).unchecked == ()
    # the same worker count: storage is read as it was
    assert evaluate(_storage_bound(), Change(cores=16)).unchecked == ()
    # a new storage class is modelled from its datasheet, not from this run's scaling
    nvme = load_catalog()["nvme-gen4"]
    rec = _storage_bound()
    rec.dataset.sample_bytes_mean = 100_000.0
    assert evaluate(rec, Change(storage=nvme)).unchecked == ()
    # storage at 5,000/s whatever it does with more readers: the prediction does not rest on it
    fast = _storage_bound()
    fast.stages.storage.capacity_samples_per_s = 5000.0
    assert evaluate(fast, Change(workers=4)).unchecked == ()
    # storage at 390/s: with 4 workers the CPU's 400 limits, within 5% of storage as it is
    near = _storage_bound()
    near.stages.storage.capacity_samples_per_s = 390.0
    sc = evaluate(near, Change(workers=4))
    assert sc.predicted_samples_per_s == 400.0 and sc.unchecked == ()


def test_the_advice_carries_the_assumption_beside_its_number_in_every_report() -> None:
    rec = finalize(_storage_bound())
    (r,) = [r for r in rec.recommendations if r.kind == "num_workers"]
    assert r.unchecked == [LINEAR_STORAGE]
    f = findings(rec)
    (a,) = [a for a in f.recommendations if a.kind == "num_workers"]
    assert a.unchecked == [LINEAR_STORAGE]
    text = " ".join(terminal.render(rec, f, width=400).split())
    assert "samples/s (" in text and f"x) ({LINEAR_STORAGE})" in text
    assert f"x)** *({LINEAR_STORAGE})*" in markdown.render(rec, f).replace("\\", "")
    assert f'<span class="unchecked">({LINEAR_STORAGE})</span>' in html.render(rec, f)


def test_advice_on_fitted_storage_carries_no_flag() -> None:
    rec = finalize(_storage_bound(exponent=1.0))
    (r,) = [r for r in rec.recommendations if r.kind == "num_workers"]
    assert r.unchecked == []
    assert "unchecked" not in terminal.render(rec, findings(rec), width=400)


def test_a_whatif_says_so_beside_its_predicted_rate() -> None:
    out = whatif(_storage_bound(), Change(workers=4))
    assert out.whatif is not None and out.whatif.unchecked == [LINEAR_STORAGE]
    f = findings(out)
    beside = f"samples/s ({LINEAR_STORAGE})"
    assert beside in " ".join(terminal.render(out, f, width=400).split())
    assert beside in markdown.render(out, f).replace("\\", "")
    assert beside in html.render(out, f)
    # and a what-if record from before the field loads without one
    data = out.to_json()
    del data["whatif"]["unchecked"]
    assert RunRecord.from_json(data).whatif.unchecked == []  # type: ignore[union-attr]
