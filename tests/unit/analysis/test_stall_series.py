"""The stall over time (ioprobe/analysis/stall_series.py) on timelines built here, with known
stall in known seconds: the series, its bursts, their sentence, and how each view draws them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ioprobe.analysis.report import coarsen, findings
from ioprobe.analysis.stall_series import (
    MAX_BINS,
    StallSeries,
    burst_sentence,
    burst_threshold,
    bursts,
    stall_over_time,
    stall_series,
)
from ioprobe.record import (
    CpuStage,
    DatasetProfile,
    HostInfo,
    RunRecord,
    Stages,
    Track,
    WatchData,
    WatchEpoch,
)
from ioprobe.render.html import render as render_html
from ioprobe.render.markdown import render as render_markdown
from ioprobe.render.terminal import render as render_terminal
from ioprobe.render.trace import render as render_trace

PERIOD = 0.1  # one batch every 0.1 s after the first
STARTUP = 0.5  # the first batch arrives after the workers start
BATCH = 8  # samples per batch
QUIET, LOUD = 0.01, 0.09  # stall per batch outside and inside the slow window


def run(
    batches: int = 200,
    window: tuple[float, float] | None = (8.0, 11.0),
    *,
    quiet: float = QUIET,
    workers: bool = True,
    worker: int = 0,
    epochs: int = 1,
) -> RunRecord:
    """A watched run on a fake clock: the first batch is requested at 0 and arrives at
    ``STARTUP``; batch k (1..``batches``) then arrives at ``STARTUP + k * PERIOD`` (20.5 s for
    the last by default), having waited ``LOUD`` if it arrived inside ``window`` (seconds from
    the first request) and ``quiet`` otherwise. A worker made each batch over the period
    before it arrived: mostly reading in the window, mostly on the CPU outside it. With
    ``epochs`` > 1 the run repeats 0.3 s after each epoch's last batch, each epoch's first
    batch waiting ``STARTUP`` again."""
    main: dict[str, list[float]] = {
        k: [] for k in ("start", "end", "stall", "batches", "samples", "epoch")
    }
    work: dict[str, list[float]] = {
        k: [] for k in ("start", "end", "batches", "samples", "wall", "cpu", "read")
    }
    for e in range(epochs):
        t = e * (STARTUP + batches * PERIOD + 0.3)
        for k in range(batches + 1):
            arrival = t + STARTUP + k * PERIOD
            slow = window is not None and window[0] < arrival <= window[1] + 1e-9
            stall = STARTUP if k == 0 else (LOUD if slow else quiet)
            for col, v in zip(main, (arrival - stall, arrival, stall, 1, BATCH, e), strict=True):
                main[col].append(v)
            read, cpu = (0.08, 0.005) if slow else (0.01, 0.06)
            row = (arrival - PERIOD, arrival - 0.001, 1, BATCH, 0.09, cpu, read)
            for col, v in zip(work, row, strict=True):
                work[col].append(v)
    tracks = [Track(name="main process", worker=None, columns=main)]
    if workers:
        tracks.append(Track(name=f"worker {worker}", worker=worker, columns=work))
    return RunRecord(
        kind="watch",
        host=HostInfo(),
        dataset=DatasetProfile(target="fake"),
        stages=Stages(cpu=CpuStage(capacity_samples_per_s=100.0)),
        watch=WatchData(
            loader={"num_workers": "1"},
            epochs=[WatchEpoch(index=e, first_batch_seconds=STARTUP) for e in range(epochs)],
            tracks=tracks,
        ),
    )


def series(rec: RunRecord, width_s: float = 1.0) -> StallSeries:
    s = stall_series(rec, width_s)
    assert s is not None
    return s


def test_each_second_gets_the_stall_that_fell_in_it_over_the_seconds_the_run_was_observed() -> None:
    s = series(run())
    assert s.bin_s == 1.0 and s.t0_s == 0.0 and s.end_s == pytest.approx(20.5)
    assert len(s.stall_fraction) == 21
    expected = [LOUD / PERIOD if 8 <= i < 11 else QUIET / PERIOD for i in range(21)]
    assert s.stall_fraction == pytest.approx(expected, abs=1e-3)
    # the first batch's 0.5 s wait is start-up: out of the stall and of the observed time
    assert s.total_stall_s == pytest.approx(30 * LOUD + 170 * QUIET)
    assert s.covered_s[0] == pytest.approx(STARTUP) and s.covered_s[5] == pytest.approx(1.0)
    assert s.covered_s[-1] == pytest.approx(0.5)  # the run ends half way through its last second
    assert s.samples_per_s[5] == pytest.approx(BATCH / PERIOD)


def test_the_workers_tracks_name_each_seconds_cause() -> None:
    s = series(run())
    assert s.cause[8:11] == ["storage"] * 3
    assert set(s.cause[1:7] + s.cause[12:20]) == {"cpu"}


def test_a_wait_that_crosses_a_second_is_split_between_the_two() -> None:
    rec = run(window=None)
    main = rec.watch.tracks[0].columns  # type: ignore[union-attr]
    # batch 30 arrives at 3.5 s: make it wait 0.6 s, from 2.9 s
    main["stall"][30], main["start"][30] = 0.6, 2.9
    s = series(rec)
    assert s.stall_s[2] == pytest.approx(10 * QUIET + 0.1)
    assert s.stall_s[3] == pytest.approx(9 * QUIET + 0.5)


def test_a_slow_window_is_one_burst_at_its_seconds_with_its_cause_and_stall() -> None:
    found = bursts(series(run()))
    assert len(found) == 1
    b = found[0]
    assert (b.start_s, b.end_s) == pytest.approx((8.0, 11.0))
    assert b.cause == "storage"
    assert b.stall_fraction == pytest.approx(LOUD / PERIOD, abs=1e-3)
    assert b.stall_s == pytest.approx(30 * LOUD)


def test_the_sentence_names_the_cause_the_share_of_the_run_and_the_burst() -> None:
    st = stall_over_time(run())
    assert st is not None
    assert st.threshold == pytest.approx(max(2 * 0.1, 0.1 + 0.2))
    assert st.verdict == (
        "storage-bound for 15% of the run, in 1 burst (3.0 s at 8.0 s), holding 61% of its stall"
    )


def test_two_windows_make_two_bursts_and_the_sentence_counts_them() -> None:
    rec = run(batches=400, window=(8.0, 11.0))
    main = rec.watch.tracks[0].columns  # type: ignore[union-attr]
    for k, arrival in enumerate(main["end"]):
        if 25.0 < arrival <= 30.0 + 1e-9:  # a second window, 5 s long
            main["stall"][k] = LOUD
            main["start"][k] = arrival - LOUD
    work = rec.watch.tracks[1].columns  # type: ignore[union-attr]
    for k, done in enumerate(work["end"]):
        if 25.0 < done <= 30.0:  # and the workers read through it, as in the first
            work["read"][k], work["cpu"][k] = 0.08, 0.005
    s = series(rec)
    found = bursts(s)
    spans = [t for b in found for t in (b.start_s, b.end_s)]
    assert spans == pytest.approx([8.0, 11.0, 25.0, 30.0])
    sentence = burst_sentence(s, found)
    assert sentence is not None
    assert "in 2 bursts (longest 5.0 s at 25 s)" in sentence


def test_a_burst_of_another_cause_is_counted_apart_from_the_named_causes_figures() -> None:
    # a 1 s second window where the loop waited but no worker had a sample in hand (the
    # whole host paused): an "unknown" burst that must not add to the storage bursts' span
    rec = run(window=(8.0, 11.0))
    main = rec.watch.tracks[0].columns  # type: ignore[union-attr]
    work = rec.watch.tracks[1].columns  # type: ignore[union-attr]
    for k, arrival in enumerate(main["end"]):
        if 15.0 < arrival <= 16.0 + 1e-9:
            main["stall"][k] = LOUD
            main["start"][k] = arrival - LOUD
    keep = [i for i, e in enumerate(work["end"]) if not 14.9 < e <= 16.0 + 1e-9]
    for col in work:
        work[col] = [work[col][i] for i in keep]
    st = stall_over_time(rec)
    assert st is not None
    assert [(b.start_s, b.end_s, b.cause) for b in st.bursts] == [
        (8.0, 11.0, "storage"),
        (15.0, 16.0, "unknown"),
    ]
    total = st.series.total_stall_s
    assert st.verdict == (
        f"storage-bound for 15% of the run, in 1 burst (3.0 s at 8.0 s), holding "
        f"{round(100 * st.bursts[0].stall_s / total)}% of its stall; 1 more burst of another "
        f"cause, holding {round(100 * st.bursts[1].stall_s / total)}%"
    )


def test_bursts_one_quiet_second_apart_are_one_burst_and_two_apart_are_two() -> None:
    s = series(run())
    fr = s.stall_fraction
    one_gap = dataclasses.replace(s, stall_fraction=[*fr[:9], 0.1, *fr[10:]])
    assert [(b.start_s, b.end_s) for b in bursts(one_gap)] == [(8.0, 11.0)]
    two_gaps = dataclasses.replace(s, stall_fraction=[*fr[:9], 0.1, 0.1, *fr[11:]])
    assert [(b.start_s, b.end_s) for b in bursts(two_gaps)] == [(8.0, 9.0)]


def test_merged_rows_of_a_long_run_give_the_same_series_and_burst() -> None:
    rec = run()
    exact = series(rec)
    assert rec.watch is not None
    rec.watch.tracks = [coarsen(t, 60) for t in rec.watch.tracks]
    assert rec.watch.tracks[0].batches_per_row == 4
    merged = series(rec)
    # a merged row's stall is spread over its 0.4 s: seconds whose rows all lie on one side
    # of the window's edges keep their fraction; the first row holds the start-up batch, whose
    # wait the epoch records and the series leaves out
    assert merged.total_stall_s == pytest.approx(exact.total_stall_s)
    for i in (2, 3, 4, 9, 14, 15, 16):
        assert merged.stall_fraction[i] == pytest.approx(exact.stall_fraction[i], abs=0.01)
    (b,) = bursts(merged)
    assert b.start_s == pytest.approx(8.0) and b.end_s == pytest.approx(11.0, abs=1.0)
    assert b.cause == "storage"


def test_each_epochs_first_batch_is_left_out_so_a_restart_of_the_workers_is_no_burst() -> None:
    rec = run(batches=100, window=None, epochs=3)
    s = series(rec)
    # each first batch waited 0.5 s: left in, three seconds would stand at ~0.55
    assert max(f for f in s.stall_fraction if f is not None) == pytest.approx(0.1, abs=0.02)
    assert bursts(s) == []


def test_the_start_up_round_of_two_workers_is_left_out_whole() -> None:
    def slow_second_batch(workers: int) -> StallSeries:
        rec = run(window=None)
        assert rec.watch is not None
        rec.watch.settings.workers = workers
        main = rec.watch.tracks[0].columns
        # the second worker's first batch (arriving at 0.6 s) waited 0.3 s for it to start
        main["stall"][1], main["start"][1] = 0.3, 0.3
        return series(rec)

    two = slow_second_batch(2)
    assert two.total_stall_s == pytest.approx(199 * QUIET)
    assert two.covered_s[0] == pytest.approx(0.4)  # observed from the round's last arrival
    assert two.stall_fraction[0] == pytest.approx(0.1, abs=1e-3)
    # with one worker that batch is steady state: its wait counts
    one = slow_second_batch(1)
    assert one.total_stall_s == pytest.approx(0.3 + 199 * QUIET)
    assert one.stall_fraction[0] == pytest.approx((0.3 + 4 * QUIET) / 0.5, abs=1e-3)


def test_a_flat_run_has_no_bursts_and_no_sentence() -> None:
    st = stall_over_time(run(window=None))
    assert st is not None
    assert st.bursts == [] and st.verdict is None


def test_a_run_stalled_throughout_has_no_bursts() -> None:
    # 90% of every second waiting: nothing stands above the run's usual level
    st = stall_over_time(run(window=None, quiet=LOUD))
    assert st is not None
    assert st.series.stall_fraction[5] == pytest.approx(0.9, abs=1e-3)
    assert st.bursts == []


def test_a_long_run_keeps_at_most_max_bins_whole_seconds_wide() -> None:
    rows = 5000
    cols = {
        "start": [i * 40.0 for i in range(rows)],
        "end": [i * 40.0 + 2.0 for i in range(rows)],
        "stall": [2.0] * rows,
        "batches": [1.0] * rows,
        "samples": [8.0] * rows,
        "epoch": [0.0] * rows,
    }
    rec = RunRecord(
        kind="watch",
        host=HostInfo(),
        dataset=DatasetProfile(target="long"),
        watch=WatchData(tracks=[Track(name="main process", columns=cols)]),
    )
    s = series(rec)
    assert len(s.stall_fraction) <= MAX_BINS
    assert s.bin_s == 100.0  # 199,962 s in 2,000 bins: 100 s each, a whole multiple of 1 s
    assert s.total_stall_s == pytest.approx((rows - 1) * 2.0)
    st = stall_over_time(rec)
    assert st is not None and len(json.dumps(dataclasses.asdict(st))) < 200_000


def test_a_dali_run_with_only_its_main_track_has_no_cause() -> None:
    st = stall_over_time(run(workers=False))
    assert st is not None
    assert set(st.series.cause) == {"unknown"}
    assert [b.cause for b in st.bursts] == ["unknown"]
    assert st.verdict is not None and st.verdict.startswith("stalled for 15% of the run")


def test_loading_in_the_main_process_names_the_cause_from_its_track() -> None:
    s = series(run(worker=-1))  # num_workers=0: the loading track is worker -1
    assert s.cause[9] == "storage" and s.cause[4] == "cpu"


def test_no_main_track_gives_no_series() -> None:
    rec = run()
    assert rec.watch is not None
    rec.watch.tracks = rec.watch.tracks[1:]
    assert stall_series(rec) is None
    assert findings(rec).stall_over_time is None


def test_too_few_seconds_give_no_usual_level_and_no_bursts() -> None:
    s = series(run(batches=25, window=(1.0, 2.0)))
    assert burst_threshold(s) is None and bursts(s) == []


# --- the views ----------------------------------------------------------------------------


def test_terminal_and_markdown_say_the_sentence_and_a_flat_run_says_nothing_of_bursts() -> None:
    sentence = "storage-bound for 15% of the run, in 1 burst (3.0 s at 8.0 s)"
    rec = run()
    assert sentence in render_terminal(rec, findings(rec), width=200)
    assert sentence in render_markdown(rec, findings(rec))
    flat = run(window=None)
    assert "burst" not in render_terminal(flat, findings(flat), width=200)
    assert "burst" not in render_markdown(flat, findings(flat))


def test_html_draws_the_series_with_the_burst_shaded_and_listed() -> None:
    rec = run()
    page = render_html(rec, findings(rec))
    section = page[page.index('<div id="stall-over-time">') :]
    section = section[: section.index("<h2>")]
    assert "storage-bound for 15% of the run" in section
    assert section.count('fill-opacity="0.15"') == 1  # one shaded burst
    assert 'id="bursts"' in section and "<td>storage</td>" in section
    flat = run(window=None)
    flat_page = render_html(flat, findings(flat))
    assert '<div id="stall-over-time">' in flat_page
    assert 'fill-opacity="0.15"' not in flat_page and 'id="bursts"' not in flat_page


def test_trace_has_a_stall_counter_at_each_seconds_start() -> None:
    rec = run()
    events = json.loads(render_trace(rec, findings(rec)))["traceEvents"]
    counters = [ev for ev in events if ev["name"] == "stall %"]
    assert [ev["ph"] for ev in counters] == ["C"] * 21
    assert [ev["ts"] for ev in counters] == [i * 1e6 for i in range(21)]
    assert counters[9]["args"]["stall %"] == pytest.approx(90.0, abs=0.1)
    assert counters[4]["args"]["stall %"] == pytest.approx(10.0, abs=0.1)
