"""A DLIO (MLPerf Storage) workload from a measured run: the user's job in the terms a storage
vendor's benchmark runs.

DLIO emulates a training job from a YAML file: the dataset's files and sample sizes, the
loader's batch and reader threads, a per-sample preprocessing time and a per-step computation
time it sleeps for. The last is what users cannot easily get and what ioprobe measures: the
watched step between batches (or the emulated accelerator of a probe). Each field carries
where it came from (measured, from the loader's settings, or DLIO's default because the record
has nothing better), and what DLIO cannot reproduce is listed beside them.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

from ioprobe.record import Distribution, RunRecord

# ioprobe's formats to DLIO's readers; anything else is written as npz of the same sizes
DLIO_FORMATS = {
    "jpeg": "jpeg",
    "png": "png",
    "npy": "npy",
    "npz": "npz",
    "hdf5": "hdf5",
    "tfrecord": "tfrecord",
    "parquet": "parquet",
    "csv": "csv",
}
# what DLIO's PyTorch reader takes from an S3 bucket (s3torchconnector): npz and npy alone
S3_FORMATS = {k: v for k, v in DLIO_FORMATS.items() if v in ("npz", "npy")}
MLPERF_AU = 0.90  # MLPerf Storage's accelerator utilisation target (0.70 for CosmoFlow)
DEFAULT_BATCH = 32  # the probe's own end-to-end batch


Value = str | int | float | bool


@dataclass(frozen=True)
class DlioField:
    """One value of the workload and where it came from."""

    section: str
    key: str
    value: Value
    source: str  # "measured: ...", "settings: ...", "default: ..."


Put = Callable[[str, str, Value, str], None]


@dataclass
class DlioWorkload:
    fields: list[DlioField] = field(default_factory=list)
    not_carried: list[str] = field(default_factory=list)  # what DLIO cannot reproduce

    def value(self, section: str, key: str) -> Value | None:
        return next((f.value for f in self.fields if (f.section, f.key) == (section, key)), None)


def _mean_stdev(d: Distribution) -> tuple[float, float] | None:
    if not d.values:
        return None
    mean = d.total / d.count if d.count else statistics.fmean(d.values)
    return mean, statistics.pstdev(d.values) if len(d.values) > 1 else 0.0


def _name(rec: RunRecord) -> str:
    """A model name from the dataset's folder or the watched dataset's class."""
    target = rec.dataset.target
    if "://" in target:  # a URL's folder as its server names it: "sp%20ace" is "sp ace"
        target = unquote(target.split("?", 1)[0].split("#", 1)[0])
    base = os.path.basename(target.rstrip("/")) if target else ""
    if not base and rec.watch is not None:
        base = rec.watch.settings.dataset
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", base).strip("_").lower()
    return f"ioprobe_{slug or 'workload'}"


def dlio_workload(
    rec: RunRecord, epochs: int | None = None, data_folder: str | None = None
) -> DlioWorkload:
    """The DLIO workload of ``rec``: its dataset (files, sample size and spread, format), its
    loader (batch, reader threads, prefetch, shuffling, preprocessing per sample) and its step
    (computation time per batch and its spread), each with its source. Raises ValueError
    where the record has no sample size or no step time: DLIO would emulate nothing of it."""
    out = DlioWorkload()

    def put(section: str, key: str, value: Value, source: str) -> None:
        out.fields.append(DlioField(section, key, value, source))

    put("model", "name", _name(rec), "the dataset's name")
    framework = "pytorch"
    put("framework", "", framework, "ioprobe watches PyTorch and DALI loaders")
    put(
        "workflow",
        "generate_data",
        False,
        "generate once with ++workload.workflow.generate_data=True",
    )
    put("workflow", "train", True, "the training loop is what was measured")
    put("workflow", "checkpoint", False, "checkpoints were not measured")
    _dataset(rec, out, put, data_folder)
    _reader(rec, out, put)
    _train(rec, out, put, epochs)
    put("metric", "au", MLPERF_AU, "MLPerf Storage's accelerator utilisation target")
    _no_interpolation(out)
    out.not_carried += [
        "DLIO sleeps for the preprocessing and computation times: it keeps storage as busy as "
        "the job, but not the host's cores (a CPU-bound job is not reproduced as CPU-bound)",
        "host-to-device copies, GPU contention and DALI's GPU decode are not emulated",
        "the model's size (checkpoints) is not measured: checkpointing is off",
    ]
    return out


def _no_interpolation(out: DlioWorkload) -> None:
    """Raise ValueError where a value taken from the record holds ``${``: DLIO reads its
    configuration through Hydra, which would resolve it (an environment variable, a
    resolver) where a folder or a bucket was meant. ``--data-folder`` is refused so too."""
    for f in out.fields:
        if isinstance(f.value, str) and "${" in f.value:
            where = f"{f.section}.{f.key}" if f.key else f.section
            raise ValueError(
                f"its {where} ({f.value!r}) holds '${{', which DLIO's Hydra would resolve; "
                "give --data-folder"
            )


def _dataset(rec: RunRecord, out: DlioWorkload, add: Put, folder: str | None) -> None:
    p = rec.dataset
    bucket = None if folder else _s3_source(rec)
    if bucket is None:
        add(
            "dataset", "data_folder", folder or f"data/{_name(rec)}/", "where DLIO writes its files"
        )
        _format(rec, out, add)
    else:
        _s3_storage(bucket, out, add)
        _format(rec, out, add, S3_FORMATS)
    samples_per_epoch = _samples_per_epoch(rec)
    files = p.files or samples_per_epoch
    if not files:
        raise ValueError("the record has no file or sample count: nothing for DLIO to emulate")
    src = (
        "measured: the files listed"
        if p.files
        else "measured: samples in an epoch, one sample per file (the record has no listing)"
    )
    add("dataset", "num_files_train", int(files), src)
    per_file = 1
    if p.samples is not None and p.files:
        per_file = max(1, round(p.samples / p.files))
        add(
            "dataset",
            "num_samples_per_file",
            per_file,
            f"measured: {p.samples:,} samples in {p.files:,} files ({p.samples_basis})",
        )
    elif p.files and samples_per_epoch and samples_per_epoch > p.files:
        per_file = max(1, round(samples_per_epoch / p.files))
        add("dataset", "num_samples_per_file", per_file, "measured: samples per epoch / files")
    else:
        add("dataset", "num_samples_per_file", 1, "one sample per file, as listed")
    size = _sample_size(rec, per_file)
    if size is None:
        raise ValueError(
            "the record has no sample size (its loader read files ioprobe did not list or "
            "meter): probe the dataset with ioprobe probe DIR, or read it through "
            "ioprobe.loaders.files, and export that record"
        )
    mean, stdev, how = size
    sizes = [("", round(mean), how), ("_stdev", round(stdev), how)]
    decoded = rec.stages.cpu.output_bytes_per_sample
    if decoded:
        sizes.append(("_resize", round(decoded), "measured: bytes of one decoded sample"))
    for suffix, value, source in sizes:
        add("dataset", f"record_length_bytes{suffix}", value, source)
    # DLIO from PyPI (2.0.0) reads the older spelling alone, and without it would emulate
    # 64 KiB samples; DLIO since MLPerf Storage v2.0 reads the one above and ignores this
    for suffix, value, _source in sizes:
        add("dataset", f"record_length{suffix}", value, "the same, for DLIO 2.0.0 (PyPI)")


def _s3_source(rec: RunRecord) -> str | None:
    """The ``s3://bucket/prefix`` the run read, query dropped, or None for any other
    storage: a probe's target, or the source a watched streaming dataset names."""
    sources = [rec.dataset.target, rec.watch.settings.source if rec.watch else ""]
    url = next((u for u in sources if u.startswith(("s3://", "s3a://"))), None)
    if url is None:
        return None
    path = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
    wild = [path.find(ch) for ch in "*?[" if ch in path]
    if wild:  # a glob: the folder every match lies below, where DLIO needs a folder
        path = path[: min(wild)].rsplit("/", 1)[0] if "/" in path[: min(wild)] else ""
    elif rec.dataset.files == 1 and not url.endswith("/") and "/" in path:
        path = path.rsplit("/", 1)[0]  # one object: the folder holding it, not the object
    return "s3://" + path.rstrip("/") if path.split("/", 1)[0] else None


def _s3_storage(url: str, out: DlioWorkload, add: Put) -> None:
    """The dataset's folder in the bucket the run read and the storage block that reaches
    it: DLIO since MLPerf Storage v2.0 reads an S3 bucket through s3torchconnector (v3.0's
    DLIO needs the library named, argonne's takes it always)."""
    bucket = url[len("s3://") :].split("/", 1)[0]
    add("dataset", "data_folder", url + "/", "measured: the bucket and prefix the run read")
    add("storage", "storage_type", "s3", "measured: the run read an S3 bucket")
    add("storage", "storage_root", bucket, "the bucket")
    add("storage", "storage_options.storage_library", "s3torchconnector", "DLIO's S3 reader")
    out.not_carried += [
        "the S3 endpoint and credentials: give them as ++workload.storage.storage_options."
        "endpoint_url=..., access_key_id=..., secret_access_key=... (DLIO 2.0.0 from PyPI "
        "reads no storage_options and reaches AWS alone)",
    ]


def _format(
    rec: RunRecord, out: DlioWorkload, add: Put, readable: dict[str, str] = DLIO_FORMATS
) -> None:
    """The files' format where DLIO reads it (from ``readable``), else npz of the same sizes
    (and says so)."""
    p = rec.dataset
    top = max(p.formats.items(), key=lambda kv: kv[1])[0] if p.formats else None
    fmt = readable.get(top or "")
    if fmt == "parquet":
        out.not_carried.append(
            "parquet: only MLPerf Storage v3.0's DLIO reads it; for DLIO 2.0.0 or argonne's, "
            "write format: npz (the same sizes)"
        )
    if fmt is not None:
        add(
            "dataset",
            "format",
            fmt,
            f"measured: the format of {sum(p.formats.values())} files read",
        )
        return
    add(
        "dataset",
        "format",
        "npz",
        f"DLIO has no reader for {top or 'these files'}: npz of the same sizes",
    )
    out.not_carried.append(
        f"the files' format ({top or 'unrecognised'}): DLIO reads npz files of the same sizes"
    )


def _samples_per_epoch(rec: RunRecord) -> int | None:
    w = rec.watch
    if w is None or not w.epochs:
        return None
    # the largest epoch: a run stopped mid-epoch leaves a short last one (an entry merging
    # epochs past the record's cap stands for its mean one)
    return max(e.samples // e.merged for e in w.epochs) or None


def _sample_size(rec: RunRecord, per_file: int) -> tuple[float, float, str] | None:
    """Mean and spread of a sample's bytes: the listed files' where the listing kept their
    spread, else the bytes each watched sample read, else what the listing has."""
    p = rec.dataset
    if p.samples is not None and p.sample_bytes_mean > 0:
        # the mean is already per sample; the listing's spread is the files'
        return (
            p.sample_bytes_mean,
            (p.size_stdev or 0.0) / per_file,
            "measured: the files' bytes / the samples they hold",
        )
    if p.sample_bytes_mean > 0 and p.size_stdev is not None:
        return (
            p.sample_bytes_mean / per_file,
            p.size_stdev / per_file,
            "measured: the listed files' sizes",
        )
    w = rec.watch
    if w is not None and w.sample_costs is not None:
        ms = _mean_stdev(w.sample_costs.bytes)
        if ms is not None and ms[0] > 0:
            return ms[0], ms[1], "measured: bytes each sample read"
    if p.sample_bytes_mean <= 0:
        return None
    mean = p.sample_bytes_mean / per_file
    if p.size_p50 is not None and p.size_p90 is not None:
        # older records: a normal spread through the median and the 90th percentile
        spread = max(p.size_p90 - p.size_p50, 0) / 1.2816 / per_file
        return mean, spread, "measured: the listed sizes (spread from their p50 and p90)"
    return mean, 0.0, "measured: the listed files' mean size (no spread recorded)"


def _reader(rec: RunRecord, out: DlioWorkload, add: Put) -> None:
    w = rec.watch
    dali = rec.dali is not None or (w is not None and w.settings.framework == "dali")
    add("reader", "data_loader", "dali" if dali else "pytorch", "the loader watched")
    if w is not None:
        s = w.settings
        batch = s.batch_size or DEFAULT_BATCH
        add("reader", "batch_size", batch, "settings: the loader's batch_size")
        add("reader", "read_threads", s.workers, "settings: the loader's num_workers")
        factor = s.prefetch_factor or 2
        if s.workers:
            # DLIO hands PyTorch prefetch_size / read_threads as its prefetch_factor
            add(
                "reader",
                "prefetch_size",
                factor * s.workers,
                "settings: prefetch_factor x num_workers",
            )
        # DistributedSampler shuffles by default, as RandomSampler does
        shuffled = (s.sampler or "").startswith(("Random", "Distributed"))
        order = "seed" if shuffled else "off"
        how = f"settings: the sampler ({s.sampler or 'none given'})"
        add("reader", "sample_shuffle", order, how)
        add("reader", "file_shuffle", order, how)
        method = w.loader.get("start_method", "")
        if s.workers and method in ("fork", "spawn", "forkserver"):
            how = "settings: the workers' start method"
            add("reader", "multiprocessing_context", method, how)
    else:
        batch = rec.settings.batch_size or DEFAULT_BATCH
        add("reader", "batch_size", batch, "settings: the probe's --batch-size")
        threads = rec.settings.workers or rec.stages.cpu.usable_cores or 1
        add("reader", "read_threads", threads, "settings: the probe's decode workers")
        add("reader", "sample_shuffle", "seed", "the probe reads in a shuffled order")
        add("reader", "file_shuffle", "seed", "the probe reads in a shuffled order")
    cost = _preprocess(rec)
    if cost is not None:
        mean, stdev, how = cost
        add("reader", "preprocess_time", round(mean, 6), how)
        add("reader", "preprocess_time_stdev", round(stdev, 6), how)


def _preprocess(rec: RunRecord) -> tuple[float, float, str] | None:
    """Seconds of CPU per sample (DLIO sleeps this long per sample in its readers)."""
    w = rec.watch
    if w is not None and w.sample_costs is not None:
        ms = _mean_stdev(w.sample_costs.cpu_ms)
        if ms is not None:
            return ms[0] / 1e3, ms[1] / 1e3, "measured: CPU time of each sample in the workers"
    cost = rec.stages.cpu.cpu_seconds_per_sample
    if cost:
        return cost, 0.0, "measured: CPU seconds per decoded sample"
    return None


def _train(rec: RunRecord, out: DlioWorkload, add: Put, epochs: int | None) -> None:
    w = rec.watch
    n = epochs or (sum(e.merged for e in w.epochs) if w is not None and w.epochs else 1)
    add(
        "train",
        "epochs",
        n,
        "given: --epochs" if epochs else "measured: epochs watched" if w else "default: one epoch",
    )
    step = None
    if w is not None:
        ms = _mean_stdev(w.step_ms)
        if ms is not None:
            step = (ms[0] / 1e3, ms[1] / 1e3, "measured: the training step between batches")
    if step is None and rec.stages.gpu.step_seconds:
        step = (
            rec.stages.gpu.step_seconds,
            0.0,
            f"{rec.stages.gpu.method}: the accelerator's step",
        )
    if step is None and rec.stages.gpu.capacity_samples_per_s:
        batch = out.value("reader", "batch_size")
        assert isinstance(batch, int)
        gpus = max(rec.settings.gpus, 1)
        per_gpu = rec.stages.gpu.capacity_samples_per_s / gpus
        step = (batch / per_gpu, 0.0, "given: one GPU's rate, batch / samples per second")
    if step is None or not math.isfinite(step[0]):
        raise ValueError(
            "the record has no step time: watch the training loop, or probe with "
            "--compute-ms-per-batch or --gpu-samples-per-s"
        )
    add("train", "computation_time", round(step[0], 6), step[2])
    add("train", "computation_time_stdev", round(step[1], 6), step[2])
