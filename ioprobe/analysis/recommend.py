"""Recommendations: one small rule per kind of bottleneck, each with its predicted rate.

Every rule takes the record and the pipeline findings and returns zero or more
``Recommendation``s; ``recommend`` runs them all and ranks by predicted gain. A rule only
predicts what the model can support from measured numbers; where it can't, it says so and
leaves ``predicted_samples_per_s`` null rather than inventing a figure.
"""

from __future__ import annotations

from collections.abc import Callable

from ioprobe.analysis.model import PipelineFindings
from ioprobe.record import Recommendation, RunRecord

Rule = Callable[[RunRecord, PipelineFindings], list[Recommendation]]


def _next_limit(f: PipelineFindings, skip: str) -> float | None:
    """The rate the pipeline would reach if stage ``skip`` were no longer limiting."""
    others = [v for k, v in f.capacities.items() if k != skip and v]
    return min(others) if others else None


def storage_rules(rec: RunRecord, f: PipelineFindings) -> list[Recommendation]:
    """Storage-bound: more concurrency, bigger files, or a cache, by what the sweep showed."""
    if f.bottleneck != "storage":
        return []
    st = rec.stages.storage
    out: list[Recommendation] = []
    target = _next_limit(f, "storage")
    ds = rec.dataset
    p = st.cold or st.warm
    if (
        p
        and p.sweep
        and p.best_concurrency == max(pt.concurrency for pt in p.sweep)
        and p.best_concurrency < 64
    ):
        out.append(
            Recommendation(
                kind="read_concurrency",
                text=(
                    f"Reads still scaled at {p.best_concurrency} concurrent requests: use more "
                    "loader workers or threads per worker to keep more reads in flight."
                ),
                predicted_samples_per_s=None,
                evidence=f"storage sweep peaked at its highest level, {p.best_concurrency}",
            )
        )
    if ds.density == "low":
        out.append(
            Recommendation(
                kind="shard_small_files",
                text=(
                    f"Samples average {ds.sample_bytes_mean / 1024:.0f} KiB: per-file latency "
                    "dominates. Pack them into shards (tar / WebDataset) of 100 MB or more so "
                    "storage streams instead of seeking."
                ),
                predicted_samples_per_s=None,
                evidence=(
                    f"p99 read latency {p.latency_p99_ms:.1f} ms"
                    if p and p.latency_p99_ms is not None
                    else "small samples"
                ),
            )
        )
    if st.warm and st.warm.read_bytes_per_s and st.cold and st.cold.read_bytes_per_s:
        warm_cap = st.warm.read_bytes_per_s / max(ds.sample_bytes_mean, 1)
        avail = rec.host.memory_available_bytes
        cold_cap = st.capacity_samples_per_s or 0.0
        if cold_cap and warm_cap > cold_cap * 1.2:
            fits = avail is not None and ds.bytes < 0.8 * avail
            pred = min(warm_cap, target) if target else warm_cap
            out.append(
                Recommendation(
                    kind="cache_in_ram",
                    text=(
                        f"Cached reads run {warm_cap / cold_cap:.1f}x faster "
                        f"than cold ones. The dataset ({ds.bytes / 1e9:.1f} GB) "
                        + (
                            "fits in free RAM: after the first epoch it is served from the page cache."
                            if fits
                            else "does not fit in free RAM: cache a subset or stage it on local NVMe."
                        )
                    ),
                    predicted_samples_per_s=pred if fits else None,
                    evidence=(
                        f"cold {st.cold.read_bytes_per_s / 1e6:.0f} MB/s vs warm "
                        f"{st.warm.read_bytes_per_s / 1e6:.0f} MB/s"
                    ),
                )
            )
    if not out:
        out.append(
            Recommendation(
                kind="faster_storage",
                text="Storage limits the pipeline: move the dataset to faster local storage (NVMe) or a RAM cache.",
                predicted_samples_per_s=target,
                evidence=f"storage delivers {f.predicted_samples_per_s:.0f} samples/s",
            )
        )
    return out


def cpu_rules(rec: RunRecord, f: PipelineFindings) -> list[Recommendation]:
    """CPU-bound: say how many cores the other stages could use, and GPU decode for images."""
    if f.bottleneck != "cpu":
        return []
    cpu = rec.stages.cpu
    out: list[Recommendation] = []
    target = _next_limit(f, "cpu")
    if cpu.cpu_seconds_per_sample and target:
        cores_needed = target * cpu.cpu_seconds_per_sample
        out.append(
            Recommendation(
                kind="more_cpu",
                text=(
                    f"Each sample costs {cpu.cpu_seconds_per_sample * 1e3:.2f} ms of CPU; "
                    f"keeping up with the next stage ({target:.0f} samples/s) needs about "
                    f"{cores_needed:.1f} cores of workers, this machine gives {cpu.usable_cores}."
                ),
                predicted_samples_per_s=target,
                evidence=f"CPU delivers {f.predicted_samples_per_s:.0f} samples/s",
            )
        )
    if cpu.loader == "image":
        out.append(
            Recommendation(
                kind="gpu_decode",
                text="Decode images on the GPU (NVIDIA DALI's mixed decoder) to take JPEG decode off the CPU.",
                predicted_samples_per_s=None,
                evidence="CPU-bound on Pillow image decode",
            )
        )
    if not out:
        out.append(
            Recommendation(
                kind="more_cpu",
                text="CPU preprocessing limits the pipeline: raise num_workers to the usable cores or simplify transforms.",
                predicted_samples_per_s=target,
                evidence=f"CPU delivers {f.predicted_samples_per_s:.0f} samples/s",
            )
        )
    return out


def gpu_rules(rec: RunRecord, f: PipelineFindings) -> list[Recommendation]:
    """GPU-bound: the input pipeline keeps up; say by how much, so nobody buys storage."""
    if f.bottleneck != "gpu":
        return []
    slack = min((v for k, v in f.headroom.items() if k != "gpu"), default=None)
    text = (
        "The GPU is the bottleneck: the input pipeline keeps up; nothing to gain on the data side."
    )
    if slack is not None:
        text += f" The next slowest stage has {slack:.0%} headroom."
    return [
        Recommendation(
            kind="balanced", text=text, predicted_samples_per_s=f.predicted_samples_per_s
        )
    ]


def pcie_rules(rec: RunRecord, f: PipelineFindings) -> list[Recommendation]:
    """PCIe-bound: pinned memory and smaller device batches are the levers."""
    if f.bottleneck != "pcie":
        return []
    return [
        Recommendation(
            kind="pin_memory",
            text="Host-to-device copies limit the pipeline: use pin_memory=True and non_blocking copies, or send uint8 and convert on the GPU.",
            predicted_samples_per_s=_next_limit(f, "pcie"),
        )
    ]


RULES: tuple[Rule, ...] = (storage_rules, cpu_rules, gpu_rules, pcie_rules)


def recommend(rec: RunRecord, f: PipelineFindings) -> list[Recommendation]:
    out = [r for rule in RULES for r in rule(rec, f)]
    # ranked by predicted gain; rules that can't predict go after those that can
    return sorted(out, key=lambda r: -(r.predicted_samples_per_s or 0.0))
