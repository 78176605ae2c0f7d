"""The terminal view of a probe or a watched run: the verdict, a bar per stage with what it
was measured from, the advice, and the key measurements."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ioprobe import units
from ioprobe.analysis.report import Findings
from ioprobe.record import STAGE_NAMES, DatasetProfile, RunRecord
from ioprobe.render.facts import (
    cluster_sentence,
    cluster_title,
    curve_line,
    incomplete,
    judged,
    measurements,
    missing_line,
    rank_rest,
    size_line,
    stage_detail,
    verdict,
)
from ioprobe.render.tune_text import tune_summary
from ioprobe.render.widgets import (
    copy_table,
    facts,
    operator_table,
    rank_table,
    recommendations,
    tune_table,
)

BAR = 24


def view(rec: RunRecord, f: Findings) -> RenderableType:
    """The summary; a probe of the link alone (``--pcie-only``) has no pipeline to show."""
    if not any(rec.stages.capacities().values()):
        return _link_only(rec, f)
    return _summary(rec, f)


def _bar(value: float | None, top: float) -> Text:
    if not value or top <= 0:
        return Text("")
    # log scale: capacities often differ by orders of magnitude
    lo = top / 1e4
    frac = (math.log10(max(value, lo)) - math.log10(lo)) / (math.log10(top) - math.log10(lo))
    n = max(1, round(frac * BAR))
    return Text("█" * n)


def _header(rec: RunRecord) -> Text:
    ds = rec.dataset
    fmt = ", ".join(f"{k}" for k, _ in sorted(ds.formats.items(), key=lambda kv: -kv[1])[:3])
    return Text.assemble(
        ("ioprobe ", "bold"),
        (rec.kind, "bold"),
        "  ",
        (ds.target, "cyan"),
        f"  {size_line(rec, fmt)}",
        ("\n" + incomplete(rec) if not rec.complete else "", "bold yellow"),
    )


def _stage_table(rec: RunRecord) -> Table:
    caps = rec.stages.capacities()
    top = max((v for v in caps.values() if v), default=1.0)
    table = Table(show_edge=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("stage")
    table.add_column("samples/s", justify="right")
    table.add_column("", width=BAR, no_wrap=True)
    table.add_column("measured", overflow="fold")
    for name in STAGE_NAMES:
        limiting = name == rec.bottleneck and judged(rec)
        bar = _bar(caps[name], top)
        bar.stylize("red" if limiting else "green")
        table.add_row(
            Text(name + (" ◀" if limiting else ""), style="bold red" if limiting else ""),
            units.samples_per_s(caps[name]),
            bar,
            stage_detail(rec, name),
        )
    return table


def _summary(rec: RunRecord, f: Findings) -> RenderableType:
    parts: list[RenderableType] = [
        _header(rec),
        Text(""),
        Text(verdict(rec, f), style="bold"),
        *_stall_line(f),
        Text(""),
        _stage_table(rec),
        *_cluster(rec, f),
        *_tune(rec),
    ]
    if f.operators:
        parts += [Text(""), operator_table(f.operators)]
    copies = copy_table(f.copies)
    if copies is not None:
        parts += [Text(""), copies]
    parts += recommendations(f, "What to change")
    # the header already names the dataset and its size
    parts += facts([(k, v) for k, v in measurements(rec, f) if k not in ("dataset", "size")])
    parts += [Text(f"note: {n}", style="dim") for n in _notes(rec)]
    return Group(*parts)


def _tune(rec: RunRecord) -> list[RenderableType]:
    """``ioprobe tune``'s trials and what they say."""
    t = rec.tune
    if t is None or not t.trials:
        return []
    return [
        Text(""),
        Text("Trials (ioprobe tune)", style="bold"),
        tune_table(t),
        *(Text(line) for line in tune_summary(t)),
    ]


def _stall_line(f: Findings) -> list[RenderableType]:
    """The stall bursts' sentence under the verdict, where the run had bursts that matter."""
    st = f.stall_over_time
    return [Text(st.verdict)] if st is not None and st.verdict else []


def _cluster(rec: RunRecord, f: Findings) -> list[RenderableType]:
    """A distributed run's ranks: what they say together (where the shared storage
    saturated, or the spread and the stragglers), a probe's clients curve, the per-rank
    table (at most a screenful, the rest summarised)."""
    title = cluster_title(rec)
    if title is None:
        return []
    parts: list[RenderableType] = [Text(""), Text(title, style="bold")]
    parts += [Text(line) for line in (cluster_sentence(f), curve_line(rec)) if line]
    t = f.ranks
    if t is not None:
        parts.append(rank_table(t, f.rank_spread))
        parts += [Text(line, style="dim") for line in (rank_rest(t), missing_line(t)) if line]
    return parts


def _notes(rec: RunRecord) -> list[str]:
    ds = rec.dataset
    notes = list(rec.notes)
    skipped = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(ds.skipped.items()))
    if skipped:
        notes.append(f"skipped: {skipped}")
    failed = read_errors_line(rec)
    if failed:
        notes.append(failed)
    if ds.sizes_estimated:
        notes.append("sizes estimated from a random sample of the listing")
    if ds.listing_truncated and ds.files_listed is not None:
        notes.append(listing_note(ds))
    return notes


def listing_note(ds: DatasetProfile) -> str:
    """What a walk stopped at its share of the budget listed, and how the rest was counted."""
    line = f"the listing stopped at its share of the budget after {ds.files_listed:,} files; "
    if ds.files_at_least:
        how = "bucket's keys" if ds.remote else "folder's files"
        return line + f"at least {ds.files:,} files (the rest of the {how} not counted in time)"
    if ds.files_error is not None and ds.files:
        how = "from the mean of the folders listed whole" if ds.remote else "by random descents"
        return line + (
            f"about {ds.files:,} in all (± {ds.files_error / ds.files:.1%}, one standard "
            f"error: the folders left were estimated {how})"
        )
    return line + f"about {ds.files:,} in all"


def read_errors_line(rec: RunRecord) -> str | None:
    """The note on files that failed to read ("12 of 200 files failed to read: 10 not found,
    2 HTTP 403"), or None when none did."""
    errors = rec.dataset.read_errors
    if not errors:
        return None
    causes = ", ".join(f"{n:,} {_cause(k)}" for k, n in sorted(errors.items(), key=_most))
    return f"{sum(errors.values()):,} of {rec.dataset.files:,} files failed to read: {causes}"


def _most(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def _cause(key: str) -> str:
    # the keys collect/failures.py counts: http_403, not_found, timeout, EIO, ...
    if key.startswith("http_"):
        return "HTTP " + key.removeprefix("http_")
    return "timed out" if key == "timeout" else key.replace("_", " ")


def _link_only(rec: RunRecord, f: Findings) -> RenderableType:
    """``probe --pcie-only``: the GPU, its link and the copy rates; there is no pipeline."""
    gpu = rec.host.gpus[0].name if rec.host.gpus else "GPU"
    parts: list[RenderableType] = [
        Text.assemble(("ioprobe probe --pcie-only", "bold"), "  ", (gpu, "cyan")),
        Text(""),
        Text(verdict(rec, f), style="bold"),
    ]
    table = copy_table(f.copies)
    if table is not None:
        parts += [Text(""), table]
    parts += recommendations(f, "What to check")
    parts += facts([(k, v) for k, v in measurements(rec, f) if k != "dataset"])
    parts += [Text(f"note: {n}", style="dim") for n in rec.notes]
    return Group(*parts)


__all__ = ["view"]
