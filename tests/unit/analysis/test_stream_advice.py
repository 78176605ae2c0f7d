"""The stream advice's loader setting, on records built by hand against the truth of their
construction (``test_stream_whatif.unequal_streams``: worker 0's stream holds every slow
batch, the reads blocked, the consumer's step short). Dealt out, the slow batches fall to
every worker, and more workers overlap the reads until the consumer's own step is the
limit: the advice pairs the deal with them. Where the consumer is already the limit once
the deal is made, no setting is paired with it."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from ioprobe.analysis import loader_sim, streams
from ioprobe.analysis.compare import compare
from ioprobe.analysis.model import MIN_GAIN, pipeline_model
from ioprobe.analysis.scenario import LINEAR_STORAGE
from ioprobe.analysis.streams import balanced_setting, dealt_evenly_rate, stream_rule
from ioprobe.record import Change, RunRecord
from tests.unit.analysis.test_stream_whatif import FAST_S, PER_BATCH, SLOW_S, unequal_streams


def test_dealt_out_the_reads_overlap_and_more_workers_are_paired_with_the_deal() -> None:
    rec = unequal_streams()
    evenly = dealt_evenly_rate(rec)
    both = balanced_setting(rec)
    assert evenly is not None and both is not None
    assert both.setting.workers > 2
    # the consumer's step (1 ms a batch of 2) bounds any setting; workers enough to fill it
    # reach most of it: each worker's mean batch takes (SLOW_S + FAST_S) / 2 of reads
    bound = PER_BATCH / 0.001
    assert both.samples_per_s <= 1.02 * bound
    assert both.samples_per_s >= MIN_GAIN * evenly
    assert both.samples_per_s >= 0.6 * min(
        bound, both.setting.workers * PER_BATCH / ((SLOW_S + FAST_S) / 2)
    )
    # the record measured no storage scaling: more reads in flight are assumed to overlap
    assert LINEAR_STORAGE in both.assumptions


def test_a_consumer_that_is_the_limit_once_dealt_out_gets_the_deal_alone() -> None:
    # an 8 ms step: dealt out, two workers make a batch every 5.5 ms on average and the
    # consumer takes 8 ms for each; as run, worker 0's stream took 10 ms a batch
    rec = unequal_streams(step_s=0.008)
    assert balanced_setting(rec) is None
    (advice,) = stream_rule(rec, pipeline_model(rec.stages))
    assert advice.change is None and "ioprobe tune" in advice.text


def test_the_advice_states_the_pair_and_the_gain_of_both_together() -> None:
    rec = unequal_streams()
    (advice,) = stream_rule(rec, pipeline_model(rec.stages))
    both = balanced_setting(rec)
    assert both is not None and advice.change is not None and rec.measured_samples_per_s
    assert advice.change.workers == both.setting.workers
    assert advice.predicted_samples_per_s == pytest.approx(both.samples_per_s)
    assert f"set num_workers={both.setting.workers}" in advice.text
    assert f"{both.gain - 1:+.0%} for the two together" in advice.text
    assert advice.unchecked == list(both.assumptions)
    # the deal's own figure, at the run's two workers, stays in the text
    evenly = dealt_evenly_rate(rec)
    assert evenly is not None
    assert f"predict {evenly / rec.measured_samples_per_s - 1:+.0%}" in advice.text
    assert loader_sim.recorded_setting(rec) == loader_sim.Setting(2, 2, True)


def applied(rec: RunRecord, change: Change, iterable: bool) -> RunRecord:
    """``rec`` as a rerun with ``change``'s loader setting would record it."""
    out = copy.deepcopy(rec)
    assert out.watch is not None
    st = out.watch.settings
    out.watch.settings = dataclasses.replace(
        st,
        workers=change.workers or st.workers,
        prefetch_factor=change.prefetch_factor or st.prefetch_factor,
        in_order=st.in_order if change.in_order is None else change.in_order,
        iterable=iterable,
    )
    return out


def test_compare_counts_the_pair_carried_out_only_where_the_streams_were_dealt_out() -> None:
    a = unequal_streams()
    a.recommendations = stream_rule(a, pipeline_model(a.stages))
    (advice,) = a.recommendations
    assert advice.change is not None and advice.change.workers
    # the setting applied, the streams as unequal as before: the advice was not carried out
    still = compare(a, applied(a, advice.change, iterable=True), names=("a", "b"))
    assert still.applied is None
    # the same setting with no unequal stream left: it was
    dealt = compare(a, applied(a, advice.change, iterable=False), names=("a", "b"))
    assert dealt.applied is not None and dealt.applied.kind == "balance_streams"
    assert f"num_workers {advice.change.workers}" in dealt.applied.how


def test_a_random_deal_keeps_each_worker_to_its_own_streams_work() -> None:
    rec = unequal_streams()
    c = loader_sim.logged_costs(rec)
    assert c is not None
    dealt = streams._dealt_at_random(c, 1, 4)
    assert sorted(dealt.blocked) == sorted(c.blocked)
    assert dealt.streams == tuple(i % 4 for i in range(len(c.blocked)))
    s = loader_sim.Setting(4, 2, False)
    arrivals = loader_sim.simulate(dealt, s)
    # no worker makes its stream faster than the stream's own work, as often as the replay
    # repeats the log: the epoch lasts at least the longest stream's
    rounds = len(arrivals) / len(dealt.streams)
    longest = max(
        sum(b for b, k in zip(dealt.blocked, dealt.streams, strict=True) if k == w)
        for w in range(4)
    )
    assert arrivals[-1] >= rounds * longest * 0.999
    # handed to whichever worker is free, the same batches end sooner
    free = dataclasses.replace(dealt, streams=(), stream_workers=0)
    assert loader_sim.rate_of(dealt, s) < loader_sim.rate_of(free, s)
