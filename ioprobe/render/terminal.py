"""The terminal summary of a record: verdict, stage capacities, recommendations."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe.record import STAGE_NAMES, RunRecord

BAR = 24


def rate(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _bytesrate(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:,.1f} MB/s"


def verdict(rec: RunRecord) -> str:
    line = f"{rec.bottleneck}-bound: the pipeline can deliver {rate(rec.predicted_samples_per_s)} samples/s"
    if rec.measured_samples_per_s is not None:
        line += f" (measured {rate(rec.measured_samples_per_s)})"
    if rec.gpu_idle_fraction is not None:
        line += f"; the GPU waits {rec.gpu_idle_fraction:.0%} of the time"
    return line


def _stage_detail(rec: RunRecord, name: str) -> str:
    st = rec.stages
    if name == "storage":
        parts = []
        for p in (st.storage.cold, st.storage.warm):
            if p is not None and p.read_bytes_per_s is not None:
                label = "remote" if rec.dataset.remote else p.cache
                parts.append(
                    f"{label} {_bytesrate(p.read_bytes_per_s)} @ {p.best_concurrency} threads, "
                    f"p99 {p.latency_p99_ms or 0:.1f} ms"
                )
        return "; ".join(parts) or st.storage.basis or "not measured"
    if name == "cpu":
        if st.cpu.cpu_seconds_per_sample is None:
            return "not measured"
        loader = f" ({st.cpu.loader})" if st.cpu.loader else ""
        return (
            f"{st.cpu.cpu_seconds_per_sample * 1e3:.2f} ms CPU/sample{loader}, "
            f"{st.cpu.usable_cores} usable cores"
        )
    if name == "pcie":
        return st.pcie.method
    gpu = st.gpu
    if gpu.method == "emulated" and gpu.step_seconds is not None:
        return f"emulated: {gpu.step_seconds * 1e3:g} ms per batch of {gpu.batch_size}"
    return gpu.method


def _bar(value: float | None, top: float) -> Text:
    if not value or top <= 0:
        return Text("")
    # log scale: capacities often differ by orders of magnitude
    lo = top / 1e4
    frac = (math.log10(max(value, lo)) - math.log10(lo)) / (math.log10(top) - math.log10(lo))
    n = max(1, round(frac * BAR))
    return Text("█" * n)


def summary(rec: RunRecord) -> RenderableType:
    ds = rec.dataset
    fmt = ", ".join(f"{k}" for k, _ in sorted(ds.formats.items(), key=lambda kv: -kv[1])[:3])
    head = Text.assemble(
        ("ioprobe ", "bold"),
        (rec.kind, "bold"),
        "  ",
        (ds.target, "cyan"),
        f"  {ds.files:,} files, {ds.bytes / 1e6:,.1f} MB, mean {ds.sample_bytes_mean / 1e3:,.1f} KB"
        f" ({ds.density} density{', ' + fmt if fmt else ''})",
    )
    caps = rec.stages.capacities()
    top = max((v for v in caps.values() if v), default=1.0)
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("stage")
    table.add_column("samples/s", justify="right")
    table.add_column("", width=BAR, no_wrap=True)
    table.add_column("measured", overflow="fold")
    for name in STAGE_NAMES:
        style = "bold red" if name == rec.bottleneck else ""
        bar = _bar(caps[name], top)
        bar.stylize("red" if name == rec.bottleneck else "green")
        table.add_row(
            Text(name + (" ◀" if name == rec.bottleneck else ""), style=style),
            rate(caps[name]),
            bar,
            _stage_detail(rec, name),
        )
    parts: list[RenderableType] = [
        head,
        Text(""),
        Text(verdict(rec), style="bold"),
        Text(""),
        table,
    ]
    parts += recommendations(rec, "What to change")
    skipped = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(ds.skipped.items()))
    notes = list(rec.notes)
    if skipped:
        notes.append(f"skipped: {skipped}")
    if ds.sizes_estimated:
        notes.append("sizes estimated from a random sample of the listing")
    for n in notes:
        parts.append(Text(f"note: {n}", style="dim"))
    return Group(*parts)


def recommendations(rec: RunRecord, title: str) -> list[RenderableType]:
    """The ranked advice, each with its predicted rate and the gain over today's rate (the
    measured one where the run measured it)."""
    if not rec.recommendations:
        return []
    now = rec.measured_samples_per_s or rec.predicted_samples_per_s
    out: list[RenderableType] = [Text(""), Text(title, style="bold")]
    for i, r in enumerate(rec.recommendations, 1):
        gain = ""
        if r.predicted_samples_per_s is not None and now:
            gain = f"  → {rate(r.predicted_samples_per_s)} samples/s ({r.predicted_samples_per_s / now:.1f}x)"
        out.append(Text(f" {i}. {r.text}{gain}"))
    return out
