"""One self-contained HTML page per record: the answer above the fold, the evidence below.

The page needs nothing from the network: styles are inlined, charts are SVG drawn here, and
the findings (plus the record, less its long series) ride along as one JSON blob with sorted
keys, so the same record always gives the same bytes. Every string that comes from data
(paths, URLs, hostnames, loader names) goes through ``html.escape`` with its control characters
made visible (``\\x1b``); the JSON blob escapes ``<``, ``>`` and ``&`` so no value can close its
script element, and every control character, so the page holds no raw escape byte.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

from ioprobe import units
from ioprobe.analysis.cluster import RankTable
from ioprobe.analysis.pcie import CopyRow
from ioprobe.analysis.ranks import RankSpread
from ioprobe.analysis.report import (
    ConsumerPoint,
    Findings,
    HeatCell,
    Heatmap,
    OperatorRow,
    SeriesView,
    StageBar,
    SweepLine,
    Throughput,
)
from ioprobe.analysis.samples import SampleCostView
from ioprobe.analysis.stall_series import Burst, StallOverTime
from ioprobe.record import ClientsPoint, DensityRow, RunRecord, SizeData, TuneData, to_plain
from ioprobe.redact import shown_all
from ioprobe.render import markup, sizing_text, svg
from ioprobe.render.facts import (
    cluster_sentence,
    cluster_title,
    facts_title,
    incomplete,
    judged,
    key_facts,
    missing_line,
    rank_cells,
    rank_columns,
    stage_detail,
    title,
    unchecked_text,
    verdict,
)
from ioprobe.render.host import host_facts
from ioprobe.render.markup import text_html
from ioprobe.render.tune_text import TUNE_COLUMNS, tune_cells, tune_summary

# --- charts ---------------------------------------------------------------------------------


def stage_chart(rec: RunRecord, f: Findings) -> str:
    """A bar per stage (its capacity) and a vertical line at the delivered rate; log scale
    when capacities span more than 20x, because they often differ by orders of magnitude."""
    stages, delivered = f.stages, f.delivered
    vals = [b.capacity for b in stages if b.capacity]
    if delivered:
        vals.append(delivered)
    if not vals:
        return '<p class="note">No stage capacity was measured.</p>'
    left, right, row = 90, 110, 34
    height = row * len(stages) + 40
    plot = svg.W - left - right
    log = max(vals) / min(vals) > 20
    x, ticks = (
        svg.log_axis(min(vals), max(vals), left, plot)
        if log
        else svg.linear_axis(max(vals), left, plot)
    )
    body = [_stage_tick(svg.n(x(t)), t, height) for t in ticks]
    body += [_stage_bar(rec, b, 12 + i * row, left, x) for i, b in enumerate(stages)]
    if delivered:
        body.append(_delivered_line(svg.n(x(delivered)), delivered, f.delivered_label, height))
    scale = "log scale" if log else "linear scale"
    return svg.svg(svg.W, height, body, f"stage capacities in samples/s ({scale})") + (
        f'<p class="note">Capacity of each stage in samples/s ({scale}); the dashed line is the '
        f"{text_html(f.delivered_label)} rate.</p>"
    )


def _stage_tick(x: str, t: float, height: int) -> str:
    return (
        f'<line x1="{x}" y1="8" x2="{x}" y2="{height - 26}" stroke="#e3e6ea"/>'
        f'<text x="{x}" y="{height - 10}" text-anchor="middle">{units.figure(t)}</text>'
    )


def _stage_bar(rec: RunRecord, b: StageBar, y: int, left: int, x: svg.Scale) -> str:
    """The stage's name, then its bar and rate, or "not measured" where it has no capacity."""
    weight = ' font-weight="700"' if b.limiting else ""
    name = (
        f'<text x="{left - 8}" y="{y + 16}" text-anchor="end"{weight}>{text_html(b.stage)}</text>'
    )
    if not b.capacity:
        return name + f'<text x="{left + 6}" y="{y + 17}" fill="#8a949c">not measured</text>'
    colour = svg.STALL if b.limiting else "#8fb9d8"
    return name + (
        f'<rect x="{left}" y="{y + 3}" width="{svg.n(max(x(b.capacity) - left, 1))}" '
        f'height="20" fill="{colour}"><title>{text_html(b.stage)}: {text_html(units.samples_per_s(b.capacity))} '
        f"samples/s; {text_html(stage_detail(rec, b.stage))}</title></rect>"
        f'<text x="{svg.n(x(b.capacity) + 6)}" y="{y + 17}">{text_html(units.samples_per_s(b.capacity))}</text>'
    )


def _delivered_line(x: str, delivered: float, label: str, height: int) -> str:
    return (
        f'<line x1="{x}" y1="4" x2="{x}" y2="{height - 26}" stroke="#1d2329" '
        f'stroke-width="2" stroke-dasharray="5,3"/>'
        f'<text x="{x}" y="{height - 28}" text-anchor="start" dx="4" font-weight="600">'
        f"{text_html(label)} {text_html(units.samples_per_s(delivered))}</text>"
    )


def consumer_chart(points: Sequence[ConsumerPoint], batches: int) -> str:
    """Stacked bars: per batch, the consumer's wait for data (stall) under its compute."""
    if not points:
        return '<p class="note">No batch timeline in this record.</p>'
    left, bottom, height = 60, 30, 220
    plot_w, plot_h = svg.W - left - 10, height - bottom - 10
    per = [_per_batch_ms(p) for p in points]
    ticks = svg.ticks(max((s + c for s, c in per), default=1.0) or 1.0)
    top = ticks[-1]
    bw = plot_w / len(points)

    def y(v: float) -> float:
        return 10 + plot_h * (1 - v / top)

    def h(v: float) -> float:
        return plot_h * v / top

    body = svg.y_grid(ticks, y, left, svg.W - 10)
    body += [
        _consumer_bar(p, s, c, x=left + i * bw, width=bw, base=10 + plot_h, h=h)
        for i, (p, (s, c)) in enumerate(zip(points, per, strict=True))
    ]
    body.append(
        f'<text x="{left}" y="{height - 8}">batch 1</text>'
        f'<text x="{svg.W - 10}" y="{height - 8}" text-anchor="end">batch {batches:,}</text>'
        + svg.y_title(10 + plot_h / 2, "ms per batch")
    )
    group = points[0].last - points[0].first + 1
    grouping = f" Each bar sums {group:,} consecutive batches." if group > 1 else ""
    return (
        svg.legend(
            [("waiting for data (stall)", svg.STALL), ("compute (training step)", svg.COMPUTE)]
        )
        + svg.svg(svg.W, height, body, "consumer timeline: stall vs compute per batch")
        + f'<p class="note">{batches:,} batches in order.{grouping}</p>'
    )


def _per_batch_ms(p: ConsumerPoint) -> tuple[float, float]:
    # a row that counts no batch (a damaged record) shows its totals rather than dividing by 0
    n = max(p.last - p.first + 1, 1)
    return p.stall_s * 1e3 / n, p.compute_s * 1e3 / n


def _consumer_bar(
    p: ConsumerPoint,
    stall: float,
    compute: float,
    *,
    x: float,
    width: float,
    base: float,
    h: svg.Scale,
) -> str:
    """The stall bar up from the axis at ``base``, the compute bar stacked on it; ``h`` turns
    milliseconds into a bar's height."""
    hs, hc = h(stall), h(compute)
    w = svg.n(max(width - 0.5, 0.5))
    which = f"batch {p.first:,}" if p.first == p.last else f"batches {p.first:,}-{p.last:,}"
    tip = f"<title>{which}: stall {stall:.2f} ms, compute {compute:.2f} ms per batch</title>"
    return (
        f'<g>{tip}<rect x="{svg.n(x)}" y="{svg.n(base - hs)}" width="{w}" '
        f'height="{svg.n(hs)}" fill="{svg.STALL}"/>'
        f'<rect x="{svg.n(x)}" y="{svg.n(base - hs - hc)}" width="{w}" '
        f'height="{svg.n(hc)}" fill="{svg.COMPUTE}"/></g>'
    )


def throughput_chart(tp: Throughput | None) -> str:
    if tp is None or not tp.lines:
        return '<p class="note">No per-worker timeline in this record.</p>'
    n = len(tp.lines[0].samples_per_s)
    xs = [tp.bin_s * (i + 0.5) for i in range(n)]
    chart = svg.line_chart(
        xs,
        [(w.name, list(w.samples_per_s)) for w in tp.lines],
        "seconds since the first batch request",
        "samples/s",
    )
    more = f" {tp.hidden} more workers not drawn." if tp.hidden else ""
    return chart + (
        f'<p class="note">Samples each worker finished per second, in {n} bins of '
        f"{tp.bin_s:.3g} s.{more}</p>"
    )


MAX_BURST_ROWS = 20  # bursts listed under the stall chart, the most stalled first


def stall_section(st: StallOverTime | None) -> list[str]:
    """The stall fraction bin by bin, its bursts shaded, their sentence and a row per burst."""
    if st is None:
        return []
    s = st.series
    xs = [s.t0_s + s.bin_s * (i + 0.5) for i in range(len(s.stall_fraction))]
    pct = [None if v is None else v * 100 for v in s.stall_fraction]
    chart = svg.line_chart(
        xs,
        [("stall %", pct)],
        "seconds since the first batch request",
        "stall %",
        shade=[(b.start_s, b.end_s) for b in st.bursts],
    )
    note = (
        f"The share of each {s.bin_s:g} s the training loop waited for data, in "
        f"{len(xs):,} bins; each epoch's start-up round (the first batch of each worker) is "
        "left out."
    )
    if st.threshold is not None:
        note += (
            f" Shaded: bursts, bins above {st.threshold:.0%} (twice the run's median bin, and "
            "at least 20 points above it)."
        )
    parts = ["<h2>Stall over time</h2>", '<div id="stall-over-time">']
    if st.verdict:
        parts.append(f'<p class="stall-verdict"><b>{text_html(st.verdict)}</b></p>')
    parts += [chart, f'<p class="note">{note}</p>', _bursts_table(st.bursts), "</div>"]
    return parts


def _bursts_table(bursts: Sequence[Burst]) -> str:
    if not bursts:
        return ""
    shown = sorted(bursts, key=lambda b: -b.stall_s)[:MAX_BURST_ROWS]
    head = "".join(
        f"<th>{h}</th>" for h in ("from s", "length s", "stall", "stall s", "workers busy on")
    )
    rows = "".join(
        f'<tr><td class="num">{b.start_s:,.1f}</td><td class="num">{b.end_s - b.start_s:,.1f}'
        f'</td><td class="num">{b.stall_fraction:.0%}</td><td class="num">{b.stall_s:,.2f}</td>'
        f"<td>{text_html(b.cause)}</td></tr>"
        for b in sorted(shown, key=lambda b: b.start_s)
    )
    more = len(bursts) - len(shown)
    tail = f'<p class="note">{more:,} smaller bursts not listed.</p>' if more else ""
    return f'<div class="card"><table id="bursts"><tr>{head}</tr>{rows}</table>{tail}</div>'


def storage_section(lines: Sequence[SweepLine]) -> str:
    if not lines:
        return '<p class="note">No storage sweep in this record (a watched run times reads as they happen).</p>'
    levels = sorted({c for s in lines for c in s.concurrency})
    chart = svg.line_chart(
        list(range(len(levels))),
        [(s.name, _at_levels(s, levels)) for s in lines],
        "reads in flight (threads)",
        "MB/s",
        x_names=[str(c) for c in levels],
    )
    table = (
        "<table><tr><th>pass</th><th>threads</th><th>MB/s</th><th>p50 ms</th><th>p95 ms</th>"
        "<th>p99 ms</th></tr>" + "".join(row for s in lines for row in _sweep_rows(s)) + "</table>"
    )
    return chart + f'<div class="card">{table}</div>'


def _at_levels(s: SweepLine, levels: Sequence[int]) -> list[float | None]:
    """A pass's MB/s at every level any pass swept, None where this one did not."""
    by = dict(zip(s.concurrency, s.mb_per_s, strict=True))
    return [by.get(c) for c in levels]


def _sweep_rows(s: SweepLine) -> list[str]:
    rows = []
    for i, c in enumerate(s.concurrency):
        best = " ◀ best" if c == s.best else ""
        latencies = "".join(
            f"<td class=num>{'-' if v is None else f'{v:.2f}'}</td>"
            for v in (s.p50_ms[i], s.p95_ms[i], s.p99_ms[i])
        )
        rows.append(
            f"<tr><td>{text_html(s.name)}</td><td class=num>{c}{best}</td>"
            f"<td class=num>{s.mb_per_s[i]:,.1f}</td>{latencies}</tr>"
        )
    return rows


def heatmap_table(hm: Heatmap | None) -> str:
    if hm is None:
        return ""
    head = "".join(f"<th>{g} GPU{'s' if g > 1 else ''}</th>" for g in hm.gpus)
    rows = [
        f"<tr><th>{text_html(name)}</th>{''.join(_heat_cell(c, hm.target) for c in cells)}</tr>"
        for name, cells in zip(hm.storage, hm.cells, strict=True)
    ]
    return (
        f'<div class="card"><table class="heat"><tr><th>storage</th>{head}</tr>'
        + "".join(rows)
        + f'</table><p class="note">GPU utilisation per storage class and GPU count; green '
        f"reaches the {hm.target:.0%} target. Hover a cell for the limiting stage.</p></div>"
    )


def _heat_cell(cell: HeatCell | None, target: float) -> str:
    if cell is None:
        return "<td>-</td>"
    u = cell.utilization
    # red (starved) through yellow to green (fed to the target)
    hue = 120 * min(u / target, 1.0) if target > 0 else 0
    tip = f"{units.samples_per_s(cell.samples_per_s)} samples/s, limited by {cell.bottleneck}"
    return (
        f'<td style="background:hsl({hue:.0f},70%,72%)" title="{text_html(tip)}">'
        f"{math.floor(u * 100 + 1e-9)}%</td>"
    )


def _kv_table(rows: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="card"><table>'
        + "".join(f"<tr><th>{text_html(k)}</th><td>{text_html(v)}</td></tr>" for k, v in rows)
        + "</table></div>"
    )


def operators_table(rows: Sequence[OperatorRow]) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("operator", "device", "stage", "CPU ms/batch", "wall ms/batch", "CPU share")
    )
    body = "".join(
        f"<tr><td>{text_html(r.name)}</td><td>{text_html(r.device)}</td><td>{text_html(r.stage)}</td>"
        f'<td class="num">{r.cpu_ms:,.2f}</td><td class="num">{r.wall_ms:,.2f}</td>'
        f'<td class="num">{r.cpu_share:.0%}</td></tr>'
        for r in rows
    )
    return f'<div class="card"><table id="operators"><tr>{head}</tr>{body}</table></div>'


def _recs(f: Findings) -> str:
    if not f.recommendations:
        return '<p id="recommendations" class="note">Nothing to change: no change the model knows predicts a 5% gain.</p>'
    items = []
    for a in f.recommendations:
        gain = ""
        if a.predicted is not None:
            times = f" ({a.gain:.1f}x)" if a.gain is not None else ""
            gain = f' <span class="gain">→ {text_html(units.samples_per_s(a.predicted))} samples/s{times}</span>'
            if a.unchecked:
                gain += (
                    f' <span class="unchecked">({text_html(unchecked_text(a.unchecked))})</span>'
                )
        ev = f'<div class="evidence">{text_html(a.evidence)}</div>' if a.evidence else ""
        items.append(f"<li>{text_html(a.text)}{gain}{ev}</li>")
    return f'<ol id="recommendations" class="recs">{"".join(items)}</ol>'


def series_section(v: SeriesView | None) -> str:
    """NVML over the run: utilisation (SM, memory) and PCIe throughput on their own axes."""
    if v is None:
        return ""
    parts = ["<h2>GPU over time (NVML)</h2>", '<div id="gpu-series">']
    if any(x is not None for x in v.sm_util + v.mem_util):  # MIG mode gives no utilisation
        parts.append(
            svg.line_chart(
                v.t,
                [("SM", v.sm_util), ("memory", v.mem_util)],
                "seconds since the start",
                "utilisation %",
            )
        )
    if any(x is not None for x in v.pcie_rx_gbps + v.pcie_tx_gbps):
        parts.append(
            svg.line_chart(
                v.t,
                [("host to device", v.pcie_rx_gbps), ("device to host", v.pcie_tx_gbps)],
                "seconds since the start",
                "PCIe GB/s",
            )
        )
    if any(x is not None for x in v.power_w):
        parts.append(svg.line_chart(v.t, [("power", v.power_w)], "seconds since the start", "W"))
    binned = f", {len(v.t)} bins of consecutive readings" if len(v.t) < v.rows else ""
    parts.append(
        f'<p class="note">{v.rows:,} readings every {v.interval_s * 1e3:g} ms{binned}. '
        "Utilisation is the share of time a kernel was running, not the share of SMs.</p></div>"
    )
    return "".join(parts)


def copies_table(rows: Sequence[CopyRow]) -> str:
    """The host-to-device probe's rates by copy size."""
    if not rows:
        return ""

    head = "".join(
        f"<th>{h}</th>"
        for h in ("copy size", "H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable")
    )
    body = "".join(
        f"<tr><td>{units.memory(r.size_bytes)}</td><td>{units.in_unit(r.h2d_pinned, 'GB')}</td>"
        f"<td>{units.in_unit(r.h2d_pageable, 'GB')}</td><td>{units.in_unit(r.d2h_pinned, 'GB')}</td>"
        f"<td>{units.in_unit(r.d2h_pageable, 'GB')}</td></tr>"
        for r in rows
    )
    return (
        "<h2>Host-to-device copies (GB/s)</h2>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        '<p class="note">Median of 3 trials per size, timed with CUDA events on a stream of '
        "the probe's own.</p>"
    )


def _short(rec: RunRecord) -> RunRecord:
    """The record less its long series: those are in the findings, reduced, and the full
    record is the JSON file."""
    watch, pipeline = rec.watch, rec.pipeline
    if watch is not None:
        empty = {
            k: dataclasses.replace(getattr(watch, k), values=[])
            for k in ("stall_ms", "step_ms", "sample_ms", "gpu_step_ms")
        }
        costs = watch.sample_costs
        if costs is not None:
            costs = dataclasses.replace(
                costs,
                cpu_ms=dataclasses.replace(costs.cpu_ms, values=[]),
                bytes=dataclasses.replace(costs.bytes, values=[]),
            )
        watch = dataclasses.replace(
            watch, tracks=[], gpu_track=None, batch_log=None, sample_costs=costs, **empty
        )
    if pipeline is not None:
        pipeline = dataclasses.replace(pipeline, tracks=[])
    return dataclasses.replace(rec, watch=watch, pipeline=pipeline, gpu_series=None)


def _blob(rec: RunRecord, f: Findings) -> str:
    """The findings (with the page's sentences, less the full-resolution timelines the trace
    takes) and the short record, as one JSON text safe inside a script element."""
    shown = dataclasses.replace(f, timeline=[], device_timeline=None)
    plain = to_plain(shown)
    del plain["timeline"], plain["device_timeline"]
    findings = {
        **plain,
        "title": title(rec),
        "verdict": verdict(rec, f),
        "measurements": [list(kv) for kv in key_facts(rec, f)],
        "measurements_title": facts_title(rec),
        "stages": [{**to_plain(b), "detail": stage_detail(rec, b.stage)} for b in shown.stages],
    }
    data: dict[str, Any] = {"findings": findings, "record": to_plain(_short(rec))}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
        .replace("\x7f", "\\u007f")  # json.dumps escapes every other control character
    )


def render(rec: RunRecord, f: Findings) -> str:
    """The whole page as one string."""
    rec, f = shown_all(rec), shown_all(f)  # outside text masked and escaped before any use
    sections = [
        *_head(rec, f),
        *_answer(rec, f),
        *ranks_section(rec, f),
        *_tune_section(rec),
        *_operators_section(f.operators),
        *_measurements_section(rec, f),
        *(x for x in (copies_table(f.copies), series_section(f.gpu_series)) if x),
        *(_timelines(f) if f.kind in ("watch", "probe") else []),
        *_notes_section(f.notes),
        *_host_section(rec),
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        # no request may leave the page: forbid every fetch, allow the inline style only
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{text_html(verdict(rec, f))}</title><style>{markup.CSS}</style></head><body><main>"
        + "\n".join(sections)
        + f'</main><script type="application/json" id="ioprobe-data">{_blob(rec, f)}</script>'
        "</body></html>\n"
    )


# The page's sections, top to bottom: each returns its heading and body, or nothing.


def _head(rec: RunRecord, f: Findings) -> list[str]:
    """The title, where and when the record was made, and the verdict."""
    ok = f.kind == "size" or not f.recommendations
    meta = (
        f"{rec.kind} record",
        f"ioprobe {rec.ioprobe_version}" if rec.ioprobe_version else "",
        rec.created,
        rec.host.hostname,
    )
    return [
        f"<h1>{text_html(title(rec))}</h1>",
        *(
            [f'<div class="verdict incomplete">{text_html(incomplete(rec))}</div>']
            if not rec.complete
            else []
        ),
        '<div class="meta">' + " · ".join(text_html(x) for x in meta if x) + "</div>",
        f'<div id="verdict" class="verdict{" ok" if ok else ""}">{text_html(verdict(rec, f))}</div>',
    ]


def _answer(rec: RunRecord, f: Findings) -> list[str]:
    """Above the fold: a run's advice and stages, or a sizing's report."""
    if f.kind == "size" and rec.sizing is not None:
        return sizing_sections(rec.sizing, f)
    advice = ["<h2>What to change</h2>", _recs(f)] if judged(rec) else []
    return [*advice, "<h2>Stage capacities</h2>", stage_chart(rec, f)]


# -- a sizing: a report to forward, the answer first and every input with its source --------


def sizing_sections(sz: SizeData, f: Findings) -> list[str]:
    """The sizing report under its verdict: what else the answer implies, utilisation
    against GPU count per storage class, each class in MLPerf Storage's units, the grid, the
    density guidance, published reference points, the inputs and the assumptions."""
    lines = sizing_text.answer_lines(sz, f.cache_gap)
    parts = ['<ul id="answer">' + "".join(f"<li>{text_html(x)}</li>" for x in lines) + "</ul>"]
    parts += [
        "<h2>GPU utilisation against GPUs per node</h2>",
        f'<div id="utilisation">{_utilisation_chart(sz)}</div>',
        f"<h2>{text_html(sizing_text.units_title(sz))}</h2>",
        _table(
            "units",
            sizing_text.units_columns(sz),
            [sizing_text.units_cells(sz, u) for u in sz.units],
        ),
        f'<p class="note">{text_html(sizing_text.units_note(sz))}</p>',
        "<h2>GPU utilisation by storage and GPU count</h2>",
        heatmap_table(f.heatmap),
    ]
    parts += _density_section(sz)
    parts += _references_section(sz)
    cost = sizing_text.cost_note(sz)
    parts += [
        "<h2>Inputs</h2>",
        _table(
            "inputs",
            [("figure", False), ("value", True), ("source", False)],
            [list(r) for r in sizing_text.input_rows(sz)],
        ),
        *([f'<p class="note">{text_html(cost)}</p>'] if cost else []),
        "<h2>Assumptions</h2>",
        '<ul id="assumptions" class="note">'
        + "".join(f"<li>{text_html(a)}</li>" for a in sz.assumptions)
        + "</ul>",
    ]
    return parts


def _table(
    ident: str,
    columns: Sequence[tuple[str, bool]],
    rows: Sequence[list[str]],
    links: int | None = None,
) -> str:
    """A table with an id; the column ``links`` holds web addresses, shown as links."""

    def cell(k: int, c: str, num: bool) -> str:
        if k == links and c.startswith("https://"):
            # a source's address is long: the link shows where it leads, the host
            return f'<td><a href="{text_html(c)}">{text_html(c.split("/")[2])}</a></td>'
        return f"<td{' class=num' if num else ''}>{text_html(c)}</td>"

    head = "".join(f"<th>{text_html(name)}</th>" for name, _ in columns)
    body = "".join(
        "<tr>"
        + "".join(
            cell(k, c, num) for k, (c, (_, num)) in enumerate(zip(cells, columns, strict=True))
        )
        + "</tr>"
        for cells in rows
    )
    return f'<div class="card"><table id="{ident}"><tr>{head}</tr>{body}</table></div>'


def _tune_section(rec: RunRecord) -> list[str]:
    """``ioprobe tune``'s trials: predicted against measured for each, then what they say."""
    t = rec.tune
    if t is None or not t.trials:
        return []
    rows = [tune_cells(t, i) for i in range(len(t.trials))]
    notes = "".join(f"<li>{text_html(x)}</li>" for x in tune_summary(t))
    return [
        "<h2>Trials (ioprobe tune)</h2>",
        _tune_chart(t),
        _table("tune", TUNE_COLUMNS, rows),
        f'<ul id="tune-summary" class="note">{notes}</ul>',
    ]


def _tune_chart(t: TuneData) -> str:
    """A pair of bars per trial: the replay's prediction and the measurement, on one scale."""
    pairs = [(t_.predicted_samples_per_s, t_.measured_samples_per_s) for t_ in t.trials]
    top = max((v for p in pairs for v in p if v), default=0.0)
    if top <= 0:
        return ""
    bar_h, gap, width = 12, 10, 420
    rows = []
    for i, (pred, meas) in enumerate(pairs):
        y = i * (2 * bar_h + gap)
        for k, (v, cls) in enumerate(((pred, "pred"), (meas, "meas"))):
            if not v:
                continue
            w = max(v / top * width, 1.0)
            rows.append(
                f'<rect class="{cls}" x="70" y="{y + k * bar_h}" width="{w:.1f}" '
                f'height="{bar_h - 2}"><title>trial {i + 1} {"predicted" if k == 0 else "measured"}'
                f" {text_html(units.samples_per_s(v))} samples/s</title></rect>"
            )
        rows.append(f'<text x="0" y="{y + bar_h + 3}">trial {i + 1}</text>')
    h = len(pairs) * (2 * bar_h + gap)
    return (
        f'<div class="card"><svg id="tune-chart" viewBox="0 0 {width + 80} {h}" '
        f'role="img" aria-label="predicted and measured samples/s per trial">'
        + "".join(rows)
        + "</svg><p class=\"note\">upper bar: the replay's prediction; lower: the trial's "
        "measurement</p></div>"
    )


def _utilisation_chart(sz: SizeData) -> str:
    """A line per storage class: predicted GPU utilisation at each GPU count per node, with
    the target as a line of its own."""
    by = {(r.storage, r.gpus): r.gpu_utilization * 100 for r in sz.rows}
    n = sz.gpu_counts
    lines: list[tuple[str, Sequence[float | None]]] = [
        (c.name, [by.get((c.name, g)) for g in n]) for c in sz.storage
    ]
    target = sz.inputs.target_utilization
    lines.append((f"target {target:.0%}", [target * 100] * len(n)))
    return svg.line_chart(
        list(range(len(n))),
        lines,
        "GPUs per node",
        "GPU utilisation %",
        x_names=[str(g) for g in n],
    ) + (
        '<p class="note">Predicted GPU utilisation for each storage class as GPUs are added '
        "to a node; a class keeps the GPUs up to where its line falls below the target.</p>"
    )


def _density_section(sz: SizeData) -> list[str]:
    g = sz.density
    if g is None:
        return []
    cols = [
        ("storage", False),
        (f"MB/s at {units.size(g.sample_bytes)}", True),
        ("of bandwidth", True),
        ("limit", False),
        (f"MB/s at {units.size(g.contrast_bytes)}", True),
        ("of bandwidth", True),
        ("limit", False),
    ]
    contrast = {c.storage: c for c in g.contrast_rows}

    def cells(r: DensityRow | None) -> list[str]:
        if r is None:  # a damaged record lost the row
            return ["-", "-", "-"]
        return [units.in_unit(r.bytes_per_s, "MB"), f"{r.share_of_bandwidth:.0%}", r.limit]

    rows = [[a.storage, *cells(a), *cells(contrast.get(a.storage))] for a in g.rows]
    return [
        "<h2>Density</h2>",
        f'<p id="density">{text_html(sizing_text.density_paragraph(g, sz.inputs))}</p>',
        _table("density-table", cols, rows),
        f'<p class="note">What one node reads from each class with {sz.inputs.in_flight} '
        "reads in flight, at this dataset's sample size and at one of the other density, "
        "from the classes' datasheet bandwidth, IOPS and latency.</p>",
    ]


def _references_section(sz: SizeData) -> list[str]:
    refs = sz.references
    sentence = sizing_text.reference_sentence(sz)
    if refs is None or not refs.points or sentence is None:
        return []
    return [
        "<h2>Reference points: published MLPerf Storage results</h2>",
        f'<p id="reference">{text_html(sentence)}</p>',
        _table(
            "references",
            sizing_text.REFERENCE_COLUMNS,
            [sizing_text.reference_cells(p) for p in refs.points],
            links=len(sizing_text.REFERENCE_COLUMNS) - 1,
        ),
        f'<p class="note">Nearest in sample size first; each figure is cited in '
        f"{text_html(refs.source)}. 'nodes like yours': the result's throughput over one node's need "
        "at the target.</p>",
    ]


def ranks_section(rec: RunRecord, f: Findings) -> list[str]:
    """A distributed run's ranks: what they say together, a probe's aggregate read against
    the clients reading at once and each rank's read rate, or a watched job's stall by rank
    (stragglers in red), and every rank's figures in a table."""
    heading = cluster_title(rec)
    t = f.ranks
    if heading is None or t is None:
        return []
    parts = [f"<h2>{text_html(heading)}</h2>", '<div id="ranks">']
    sentence = cluster_sentence(f)
    if sentence:
        parts.append(f'<p class="rank-verdict"><b>{text_html(sentence)}</b></p>')
    d = rec.distributed
    if t.kind == "probe" and d is not None and d.curve:
        parts.append(_clients_chart(d.curve))
    parts.append(_rank_chart(t))
    parts.append(_ranks_table(t, f.rank_spread))
    notes = [x for x in (missing_line(t),) if x]
    parts += [f'<p class="note">{text_html(n)}</p>' for n in notes]
    parts.append("</div>")
    return parts


def _clients_chart(curve: Sequence[ClientsPoint]) -> str:
    pts = sorted(curve, key=lambda p: p.clients)
    chart = svg.line_chart(
        list(range(len(pts))),
        [
            ("all clients", [p.read_bytes_per_s / 1e6 for p in pts]),
            ("per client", [p.per_client_bytes_per_s / 1e6 for p in pts]),
        ],
        "clients reading at once",
        "MB/s",
        x_names=[str(p.clients) for p in pts],
    )
    return chart + (
        '<p class="note">Aggregate read bandwidth of the shared storage with 1, 2, 4, ... ranks '
        "reading at once, each level started together; where the line flattens, the storage "
        "is saturated.</p>"
    )


def _rank_chart(t: RankTable) -> str:
    """A bar per rank: a watch's stall share (stragglers red), a probe's read rate."""
    watch = t.kind == "watch"
    named = set(t.stragglers)
    bars = [
        (
            r.rank,
            r.host,
            (r.stall_fraction * 100 if r.stall_fraction is not None else None)
            if watch
            else (r.read_bytes_per_s / 1e6 if r.read_bytes_per_s is not None else None),
            r.rank in named,
        )
        for r in t.ranks
    ]
    unit = "stall %" if watch else "read MB/s"
    left, bottom, height = 60, 30, 180
    plot_w, plot_h = svg.W - left - 10, height - bottom - 10
    ticks = svg.ticks(max((v for _, _, v, _ in bars if v is not None), default=1.0) or 1.0)
    top = ticks[-1]
    # a few ranks get bars of a readable width, not the whole plot
    bw = min(plot_w / max(len(bars), 1), 48.0)
    body = svg.y_grid(ticks, lambda v: 10 + plot_h * (1 - v / top), left, svg.W - 10)
    for k, (rank, host, v, slow) in enumerate(bars):
        if v is None:
            continue
        h = plot_h * v / top
        body.append(
            f"<g><title>rank {rank} ({text_html(host)}): {units.figure(v)} {'%' if watch else 'MB/s'}"
            f"{' (straggler)' if slow else ''}</title>"
            f'<rect x="{svg.n(left + k * bw)}" y="{svg.n(10 + plot_h - h)}" '
            f'width="{svg.n(max(bw - 1, 0.5))}" height="{svg.n(h)}" '
            f'fill="{svg.STALL if slow else svg.COMPUTE}"/></g>'
        )
    labelled = range(len(bars)) if len(bars) <= 24 else (0, len(bars) - 1)
    body += [
        f'<text x="{svg.n(left + (k + 0.5) * bw)}" y="{height - 8}" text-anchor="middle">'
        f"{bars[k][0]}</text>"
        for k in labelled
    ]
    body.append(
        f'<text x="{svg.n(left + len(bars) * bw + 8)}" y="{height - 8}">rank</text>'
        + svg.y_title(10 + plot_h / 2, unit)
    )
    what = (
        "the share of its time each rank waited for data"
        if watch
        else ("each rank's own read rate with every rank reading at once")
    )
    return svg.svg(svg.W, height, body, f"{unit} by rank") + f'<p class="note">By rank: {what}.</p>'


def _ranks_table(t: RankTable, spread: RankSpread | None) -> str:
    head = "".join(f"<th>{text_html(name)}</th>" for name, _ in rank_columns(t))
    numeric = [n for _, n in rank_columns(t)]
    named = set(t.stragglers)
    rows = "".join(
        f"<tr{' class=straggler' if r.rank in named else ''}>"
        + "".join(
            f"<td{' class=num' if num else ''}>{text_html(c)}</td>"
            for c, num in zip(rank_cells(t, r, spread), numeric, strict=True)
        )
        + "</tr>"
        for r in t.ranks
    )
    return f'<div class="card"><table id="rank-table"><tr>{head}</tr>{rows}</table></div>'


def _operators_section(rows: Sequence[OperatorRow]) -> list[str]:
    return ["<h2>DALI operators</h2>", operators_table(rows)] if rows else []


def _measurements_section(rec: RunRecord, f: Findings) -> list[str]:
    measured = key_facts(rec, f)
    return [f"<h2>{text_html(facts_title(rec))}</h2>", _kv_table(measured)] if measured else []


def _timelines(f: Findings) -> list[str]:
    """A watched or probed run's evidence over time and over the sweeps."""
    sections = [
        "<h2>Consumer timeline</h2>",
        consumer_chart(f.consumer, f.consumer_batches),
        *stall_section(f.stall_over_time),
        *samples_section(f.sample_costs),
        *queue_section(f),
        "<h2>Per-worker throughput</h2>",
        throughput_chart(f.throughput),
        "<h2>Storage sweep</h2>",
        storage_section(f.storage_sweep),
    ]
    if f.cpu_sweep:
        sections += ["<h2>CPU sweep</h2>", _cpu_sweep_chart(f.cpu_sweep)]
    return sections


def _cpu_sweep_chart(sweep: Sequence[tuple[int, float]]) -> str:
    return svg.line_chart(
        list(range(len(sweep))),
        [("samples/s", [v for _, v in sweep])],
        "loader workers",
        "samples/s",
        x_names=[str(w) for w, _ in sweep],
    )


def samples_section(sc: SampleCostView | None) -> list[str]:
    """What a sample costs: a log-spaced histogram of wall time, the percentiles, and the
    heaviest samples by index, so a reader can find the files that cost most."""
    if sc is None:
        return []
    parts = ["<h2>Per-sample cost</h2>", '<div id="sample-costs">']
    if sc.histogram:
        parts.append(_histogram_chart(sc.histogram))
    head = "<tr><th></th><th>median</th><th>p90</th><th>p99</th><th>max</th><th>mean</th></tr>"
    rows = "".join(
        f"<tr><th>{text_html(r.name)} ({text_html(r.unit)})</th>"
        + "".join(f"<td>{units.figure(v)}</td>" for v in (r.p50, r.p90, r.p99, r.max, r.mean))
        + "</tr>"
        for r in sc.rows
    )
    parts.append(f'<div class="card"><table>{head}{rows}</table></div>')
    if sc.heaviest:
        # columns only where some sample has a value: unmetered reads have no bytes, a
        # dataset that names no sources no paths
        kb = any(h.bytes is not None for h in sc.heaviest)
        src = any(h.path for h in sc.heaviest)
        heavy = "".join(
            f"<tr><td>{h.index if h.index >= 0 else '?'}</td><td>{units.figure(h.wall_ms)}</td>"
            f"<td>{units.figure(h.cpu_ms)}</td>"
            + (f"<td>{'' if h.bytes is None else units.in_unit(h.bytes, 'kB')}</td>" if kb else "")
            + f"<td>{h.worker}</td><td>{h.epoch + 1}</td>"
            + (f"<td>{text_html(h.path or '')}</td>" if src else "")
            + "</tr>"
            for h in sc.heaviest
        )
        parts.append(
            f'<p class="note">The heaviest samples, by {text_html(sc.index_kind)}:</p>'
            '<div class="card"><table><tr><th>index</th><th>wall ms</th><th>CPU ms</th>'
            + ("<th>kB</th>" if kb else "")
            + "<th>worker</th><th>epoch</th>"
            + ("<th>source</th>" if src else "")
            + f"</tr>{heavy}</table></div>"
        )
    parts.append("</div>")
    return parts


def _histogram_chart(bins: Sequence[tuple[float, float, int]]) -> str:
    left, bottom, height = 60, 30, 160
    plot_w, plot_h = svg.W - left - 10, height - bottom - 10
    ticks = svg.ticks(max((c for _, _, c in bins), default=1) or 1)
    top = ticks[-1]
    bw = plot_w / len(bins)
    body = svg.y_grid(ticks, lambda v: 10 + plot_h * (1 - v / top), left, svg.W - 10)
    for k, (lo, hi, c) in enumerate(bins):
        h = plot_h * c / top
        body.append(
            f"<g><title>{units.figure(lo)}-{units.figure(hi)} ms: {c:,} samples</title>"
            f'<rect x="{svg.n(left + k * bw)}" y="{svg.n(10 + plot_h - h)}" '
            f'width="{svg.n(max(bw - 1, 0.5))}" height="{svg.n(h)}" fill="{svg.COMPUTE}"/></g>'
        )
    body.append(
        f'<text x="{left}" y="{height - 8}">{units.figure(bins[0][0])} ms</text>'
        f'<text x="{svg.W - 10}" y="{height - 8}" text-anchor="end">{units.figure(bins[-1][1])} ms</text>'
        + svg.y_title(10 + plot_h / 2, "samples")
    )
    return svg.svg(svg.W, height, body, "per-sample wall time, log-spaced bins")


def queue_section(f: Findings) -> list[str]:
    """What the in-order queue of batches cost and what each loader setting would gain."""
    h = f.head_of_line
    if h is None:
        return []
    rows = [
        ("batches", f"{h.batches:,} over {h.seconds:.2f} s"),
        ("consumer stall", f"{h.stall_seconds:.2f} s"),
        ("behind a slow batch", f"{h.queue_seconds:.2f} s while a later batch was ready"),
        (
            "stragglers",
            f"{h.slow_sample_seconds:.2f} s of {h.work_seconds:.2f} s worker time beyond a "
            f"typical sample ({units.figure(h.typical_sample_ms)} ms)",
        ),
    ]
    rows += [
        (
            f"{p.setting}={p.proposed}",
            f"{units.samples_per_s(p.predicted_samples_per_s)} samples/s ({p.gain - 1:+.0%}, simulated)",
        )
        for p in f.queue
    ]
    return [
        "<h2>Batch queue (head-of-line)</h2>",
        '<div id="batch-queue">',
        _kv_table(rows),
        "</div>",
    ]


def _notes_section(notes: Sequence[str]) -> list[str]:
    if not notes:
        return []
    return [
        "<h2>Notes</h2>",
        '<ul class="note">' + "".join(f"<li>{text_html(n)}</li>" for n in notes) + "</ul>",
    ]


def _host_section(rec: RunRecord) -> list[str]:
    if not rec.host.hostname:  # a sizing from typed numbers ran on no host worth listing
        return []
    return ["<h2>Host</h2>", _kv_table(host_facts(rec.host))]
