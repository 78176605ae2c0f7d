"""The cluster as a whole, from a distributed record: where the shared storage saturates as
clients are added, what each node holds, and which ranks a short report lists.

A distributed probe measures aggregate read bandwidth with 1, 2, 4, ... ranks reading at once
(the clients curve) and each rank's read and CPU figures with every rank at work; a watched
DDP job measures each rank's loader. These functions read those figures and say, in numbers
and a sentence, how far the storage scales and what one node can do; they measure nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ioprobe import units
from ioprobe.record import ClientsPoint, RankFigures, RunRecord

# a client count that reads this share of the curve's peak is where the storage saturates:
# past it, doubling the clients gains at most about a tenth
SATURATION_SHARE = 0.9
MAX_RANK_ROWS = 16  # ranks a short table (terminal, Markdown) lists; the rest are summarised


@dataclass
class Saturation:
    """Where the clients curve flattens, and what one client reads alone."""

    peak_bytes_per_s: float  # the most any client count read, all clients together
    peak_clients: int
    knee_clients: int  # the fewest clients reading at least SATURATION_SHARE of the peak
    one_client_bytes_per_s: float  # per client at the smallest count measured
    smallest_clients: int
    largest_clients: int
    largest_bytes_per_s: float
    previous_clients: int  # the count measured before the largest
    last_gain: float  # the largest count's aggregate over the previous one's, less 1
    saturated: bool  # some count below the largest already read 90% of the peak
    one_node: bool  # every client of every count ran on one node
    text: str


def _curve(rec: RunRecord) -> list[ClientsPoint]:
    d = rec.distributed
    if d is None:
        return []
    return sorted((p for p in d.curve if p.clients > 0), key=lambda p: p.clients)


def saturation(rec: RunRecord) -> Saturation | None:
    """Where the shared storage saturates, from the clients curve: the peak aggregate, the
    fewest clients reaching 90% of it, one client's rate, and whether the last doubling of
    clients still gained. Saturated means a count below the largest already read 90% of the
    peak, so the last step gained about a tenth at most; otherwise the storage was still
    scaling where the measurement stopped and may give more clients more. None without a
    curve of at least two client counts."""
    pts = _curve(rec)
    if len(pts) < 2:
        return None
    peak = max(pts, key=lambda p: p.read_bytes_per_s)
    knee = next(p for p in pts if p.read_bytes_per_s >= SATURATION_SHARE * peak.read_bytes_per_s)
    first, prev, last = pts[0], pts[-2], pts[-1]
    gain = last.read_bytes_per_s / prev.read_bytes_per_s - 1 if prev.read_bytes_per_s else 0.0
    sat = Saturation(
        peak_bytes_per_s=peak.read_bytes_per_s,
        peak_clients=peak.clients,
        knee_clients=knee.clients,
        one_client_bytes_per_s=first.per_client_bytes_per_s,
        smallest_clients=first.clients,
        largest_clients=last.clients,
        largest_bytes_per_s=last.read_bytes_per_s,
        previous_clients=prev.clients,
        last_gain=gain,
        saturated=knee.clients < last.clients,
        one_node=all(p.nodes <= 1 for p in pts),
        text="",
    )
    sat.text = _saturation_text(sat)
    return sat


def _saturation_text(s: Saturation) -> str:
    alone = (
        f"one client alone reads {units.bandwidth(s.one_client_bytes_per_s)}"
        if s.smallest_clients == 1
        else f"{s.smallest_clients} clients read {units.bandwidth(s.one_client_bytes_per_s)} each"
    )
    if not s.saturated:
        return (
            f"still scaling at {s.largest_clients} clients: {units.bandwidth(s.largest_bytes_per_s)}, "
            f"{s.last_gain:+.0%} from {s.previous_clients}; more clients would read more "
            f"({alone})"
        )
    text = (
        f"the shared storage saturates at {s.knee_clients} client{'s' * (s.knee_clients != 1)}, "
        f"{units.bandwidth(s.peak_bytes_per_s)}; {alone}"
    )
    if s.largest_bytes_per_s < SATURATION_SHARE * s.peak_bytes_per_s:
        text += f"; {s.largest_clients} clients read less, {units.bandwidth(s.largest_bytes_per_s)}"
    if s.one_node:
        text += " (every client ran on one node: the limit may be the node's, not the storage's)"
    return text


@dataclass
class NodeShare:
    """One node of a distributed probe: its ranks and what they did together."""

    node: int  # index into Distributed.hosts
    host: str
    ranks: int
    read_bytes_per_s: float | None  # its ranks' own rates summed, every rank reading
    cpu_samples_per_s: float | None  # its ranks decoding at once, summed
    cores: int | None  # its ranks' shares of its cores, summed


def _total(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def per_node(rec: RunRecord) -> list[NodeShare]:
    """Per host, in the record's host order: how many ranks ran there, their read rates
    summed (each rank's own, with every rank of the job reading) and their decode rates
    summed (every rank decoding at once on its share of the node's cores): what one node of
    the job does, the figure a sizing across nodes multiplies. Empty for a record that is
    not distributed."""
    d = rec.distributed
    if d is None or not d.ranks:
        return []
    hosts = d.hosts or sorted({r.host for r in d.ranks})
    out = []
    for i, host in enumerate(hosts):
        mine = (
            [r for r in d.ranks if r.node == i]
            if d.hosts
            else [r for r in d.ranks if r.host == host]
        )
        if not mine:
            continue
        cores = [r.usable_cores for r in mine if r.usable_cores is not None]
        out.append(
            NodeShare(
                node=i,
                host=host,
                ranks=len(mine),
                read_bytes_per_s=_total([r.read_bytes_per_s for r in mine]),
                cpu_samples_per_s=_total([r.cpu_samples_per_s for r in mine]),
                cores=sum(cores) if cores else None,
            )
        )
    return out


@dataclass
class ClusterFigures:
    """What a sizing across nodes takes from a distributed probe."""

    aggregate_bytes_per_s: float  # the curve's peak: the most the storage gave all clients
    node_bytes_per_s: float  # one node's read rate: the largest per-node share on the curve
    node_cpu_samples_per_s: float | None  # the slowest node's ranks decoding at once
    node_cores: int | None  # that node's cores (its ranks' shares summed)
    ranks_per_node: int  # the most ranks one node ran
    hosts: int
    clients: int  # the most clients the curve measured
    saturated: bool  # the curve flattened (False: one count only, or still scaling)


def cluster_figures(rec: RunRecord) -> ClusterFigures | None:
    """The measured figures a sizing across nodes starts from. The aggregate is the curve's
    peak, the most the storage gave every client together (a lower bound of what it can give
    where the curve did not flatten). One node's read rate is the best of each client
    count's aggregate over the nodes its clients sat on: a level of clients on one node is
    that node reading, and a level spread over several shares its aggregate among them, so
    each is a rate one node reached. A node's CPU is the slowest node's ranks decoding at
    once. None without a curve (a watched job, a single-node record)."""
    pts = [p for p in _curve(rec) if p.read_bytes_per_s > 0]
    d = rec.distributed
    if d is None or not pts:
        return None
    nodes = per_node(rec)
    cpu = [n for n in nodes if n.cpu_samples_per_s]
    slowest = min(cpu, key=lambda n: n.cpu_samples_per_s or 0.0) if cpu else None
    sat = saturation(rec)
    return ClusterFigures(
        aggregate_bytes_per_s=max(p.read_bytes_per_s for p in pts),
        node_bytes_per_s=max(p.read_bytes_per_s / max(p.nodes, 1) for p in pts),
        node_cpu_samples_per_s=slowest.cpu_samples_per_s if slowest else None,
        node_cores=slowest.cores if slowest else None,
        ranks_per_node=max((n.ranks for n in nodes), default=1),
        hosts=max(d.nodes, len(d.hosts), 1),
        clients=pts[-1].clients,
        saturated=sat is not None and sat.saturated,
    )


@dataclass
class RankRest:
    """The ranks a short table leaves out, summarised by the figure it sorts on."""

    ranks: int
    figure: str  # "stall" (a fraction), "read" (bytes/s)
    low: float | None  # None: none of them measured it
    median: float | None
    high: float | None


@dataclass
class RankTable:
    """Each rank's figures for a report: all of them (a page lists every rank), the few a
    short table lists, and the rest summarised."""

    kind: str  # "probe": read and CPU figures; "watch": the loader's
    ranks: list[RankFigures] = field(default_factory=list)  # by rank
    shown: list[RankFigures] = field(default_factory=list)  # at most MAX_RANK_ROWS, by rank
    rest: RankRest | None = None
    stragglers: list[int] = field(default_factory=list)  # ranks named as stragglers
    missing: list[int] = field(default_factory=list)  # ranks lost before the end


def rank_table(
    rec: RunRecord, stragglers: list[int] | None = None, rows: int = MAX_RANK_ROWS
) -> RankTable | None:
    """The ranks a report lists. Up to ``rows`` ranks are all listed; beyond that a short
    table keeps the ranks a reader looks for: a watched job's stragglers and then its most
    stalled ranks, a probe's slowest readers (rank 0 always, the reference), listed by rank,
    and the others summarised by that figure's range and median. None for a record that is
    not distributed."""
    d = rec.distributed
    if d is None or not d.ranks:
        return None
    watch = rec.kind == "watch"
    ranks = sorted(d.ranks, key=lambda r: r.rank)
    named = list(stragglers or [])
    table = RankTable(
        kind="watch" if watch else "probe",
        ranks=ranks,
        shown=ranks,
        stragglers=named,
        missing=list(d.missing_ranks),
    )
    if len(ranks) <= rows:
        return table

    def value(r: RankFigures) -> float | None:
        return r.stall_fraction if watch else r.read_bytes_per_s

    def keep_first(r: RankFigures) -> tuple[int, float]:
        v = value(r)
        if watch:
            return (0 if r.rank in named else 1, -(v if v is not None else -1.0))
        return (0 if r.rank == 0 else 1, v if v is not None else float("inf"))

    keep = {r.rank for r in sorted(ranks, key=keep_first)[:rows]}
    table.shown = [r for r in ranks if r.rank in keep]
    left = [v for r in ranks if r.rank not in keep and (v := value(r)) is not None]
    table.rest = RankRest(
        ranks=len(ranks) - len(keep),
        figure="stall" if watch else "read",
        low=min(left, default=None),
        median=statistics.median(left) if left else None,
        high=max(left, default=None),
    )
    return table


__all__ = [
    "MAX_RANK_ROWS",
    "SATURATION_SHARE",
    "ClusterFigures",
    "NodeShare",
    "RankRest",
    "RankTable",
    "Saturation",
    "cluster_figures",
    "per_node",
    "rank_table",
    "saturation",
]
