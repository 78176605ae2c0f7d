"""The standalone probe: profile a dataset, then measure what each stage can sustain.

``Probe(options).run()`` returns a RunRecord of kind ``probe`` with the measured stages filled
in; ``ioprobe.analysis.finalize`` adds the verdict. The time budget covers the whole probe,
from the command's start where the CLI gives it (``ProbeOptions.started_at``), and is split
across phases up front, so a slow target shortens each phase instead of overrunning: the
probe ends within the budget plus ``budget.margin_s`` whatever the storage does
(collect/budget.py says how).

Costs no phase can share are paid before the first phase, so they are measured, not guessed,
when the rest is split: CUDA's start (importing torch and opening a context, 4.3-4.7 s on the
H100 host) runs on a thread of its own from the probe's start, beside the listing, and DALI's
pipelines are built after it. Both are done before the first timed phase: importing torch
holds the interpreter's lock for up to 0.38 s at a time (1.3 s in all on the H100 host),
which would stall the storage threads and the CPU sweep's feeder and lower their figures.
Where those costs and the phases' least times cannot fit the budget plus its margin, the
plan says so before anything is measured (``ProbeOptions.on_plan``) and the probe runs
each phase for its least time. Files that fail to read are skipped and counted by cause in
``dataset.read_errors``; the probe fails only when nothing is left to measure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ioprobe import capacity, units
from ioprobe._version import __version__
from ioprobe.collect import cpu as cpu_mod
from ioprobe.collect import dataset as ds_mod
from ioprobe.collect import decode_paths as paths_mod
from ioprobe.collect import device_limit as dl_mod
from ioprobe.collect import disk_to_gpu as d2g_mod
from ioprobe.collect import gpu_sampler, phase_shares
from ioprobe.collect import pcie as pcie_mod
from ioprobe.collect import pipeline as pipe_mod
from ioprobe.collect import shards as shards_mod
from ioprobe.collect import storage as st_mod
from ioprobe.collect import workers as workers_mod
from ioprobe.collect.budget import Overdue, PhasePlan, cost_words, plan_phases, within
from ioprobe.collect.cuda_copy import Copier, may_have_gpu, open_copier
from ioprobe.collect.dataset import FileEntry
from ioprobe.collect.decode import choose
from ioprobe.collect.decode import resolve as resolve_decoder
from ioprobe.collect.failures import ReadFailures, cause, label
from ioprobe.collect.hostinfo import host_info
from ioprobe.collect.pcie import LinkReader
from ioprobe.collect.phase_shares import (
    COLD_MAX_BYTES,
    MIN_PHASE_S,
    PCIE_SETUP_S,
    PHASES,
    WARM_MAX_BYTES,
)
from ioprobe.collect.progress import Reporter, SilentReporter
from ioprobe.collect.quiet import start_quiet
from ioprobe.errors import (
    LIMIT_ERRNOS,
    WRITE_ERRNOS,
    BadInputError,
    StorageTimeoutError,
    TargetError,
)
from ioprobe.record import (
    CpuStage,
    DatasetProfile,
    DiskToGpu,
    GpuStage,
    HostInfo,
    PcieStage,
    PipelineRun,
    ProbeSettings,
    RunRecord,
    Stages,
    StorageStage,
)
from ioprobe.redact import redact_url

DEFAULT_BATCH = 32
MAX_BUDGET_S = 86_400.0  # a day: any longer is a typo, and past what thread timeouts take
MAX_WORKERS = 1024  # end-to-end worker processes: each is a Python interpreter
LISTING_SHARE = 0.5  # of the budget: a listing slower than this leaves too little to measure
PROFILE_SHARE = 0.1  # of the budget, at least PROFILE_MIN_S: the heads that name the formats
PROFILE_MIN_S = 0.5


@dataclass(kw_only=True)
class ProbeOptions(ProbeSettings):
    """What to probe and how: the settings the record keeps (``ProbeSettings``), and what
    only this run needs (the target, the seed, the seams to the GPU)."""

    target: str
    seed: int = 0
    storage_options: dict[str, Any] = field(default_factory=dict)
    pcie_only: bool = False  # the host-to-device probe alone: no dataset
    # the CUDA seam (collect/cuda_copy.py) and the NVML link reader; None opens the real ones
    copier: Copier | str | None = None
    link_reader: LinkReader | None = None
    # when the command started (``time.perf_counter``): the budget counts from it; None, from
    # ``run()``. The CLI gives the process's start: the interpreter and the imports count
    started_at: float | None = None
    # told the plan before the first phase: the CLI says, in one line, where it cannot hold
    on_plan: Callable[[PhasePlan], None] | None = None

    def validate(self) -> None:
        """Every flag checked before anything is measured: a typo costs nothing."""
        _check_numbers(self)
        if not self.passes:
            raise BadInputError("nothing to measure: neither cold nor warm")
        if self.loader != "auto":
            resolve_decoder(self.loader)  # a bad --loader fails before anything is measured
        if self.loader == "dali":
            missing = paths_mod.dali_missing()
            if missing is not None:
                raise BadInputError(
                    f"--loader dali needs NVIDIA DALI, which cannot be imported here "
                    f"({missing}): {paths_mod.DALI_EXTRA}"
                )

    def recorded(self, loader: str, passes: list[str]) -> ProbeSettings:
        """The settings as the record keeps them, with the loader and passes that ran."""
        kept = {f.name: getattr(self, f.name) for f in fields(ProbeSettings)}
        return ProbeSettings(**{**kept, "loader": loader, "passes": passes})

    @property
    def emulated(self) -> bool:
        return self.compute_ms_per_batch is not None or self.gpu_samples_per_s is not None


def _check_numbers(o: ProbeOptions) -> None:
    both = o.compute_ms_per_batch is not None and o.gpu_samples_per_s is not None
    # written so that NaN fails each check (it compares false with everything)
    wrong = (
        (
            not 0 < o.time_budget_s <= MAX_BUDGET_S,  # NaN too: it compares false
            f"--time-budget must be a positive number of seconds, at most {MAX_BUDGET_S:,.0f}",
        ),
        (o.workers is not None and o.workers < 1, "--workers must be at least 1"),
        (
            o.workers is not None and o.workers > MAX_WORKERS,
            f"--workers must be at most {MAX_WORKERS}",
        ),
        (o.batch_size is not None and o.batch_size < 1, "--batch-size must be at least 1"),
        (
            o.compute_ms_per_batch is not None and not 0 <= o.compute_ms_per_batch < math.inf,
            "--compute-ms-per-batch must be a finite number, not negative",
        ),
        (
            o.gpu_samples_per_s is not None and not 0 < o.gpu_samples_per_s < math.inf,
            "--gpu-samples-per-s must be a finite positive number",
        ),
        (both, "give --compute-ms-per-batch or --gpu-samples-per-s, not both"),
        (o.gpus < 1, "--gpus must be at least 1"),
    )
    for bad, message in wrong:
        if bad:
            raise BadInputError(message)


def _check_images(target: str, formats: dict[str, int]) -> None:
    """``--loader dali`` decodes images: anything else is bad input, said in one line."""
    if choose("auto", formats) == "image":
        return
    top = max(formats.items(), key=lambda kv: kv[1])[0] if formats else "unrecognised"
    raise BadInputError(
        f"--loader dali: {target} is not an image dataset (mostly {top} files); DALI's decode "
        "paths need JPEG, PNG or other images"
    )


@dataclass(frozen=True)
class _Plan:
    """What the probe learned before measuring: the target, the host, and each phase's time."""

    ds: ds_mod.Dataset  # the data files: index and metadata files are no samples
    profile: DatasetProfile
    layout: shards_mod.Layout  # what holds the samples: files, shards, chunks, tables
    host: HostInfo
    usable: int
    device: bool  # a CUDA device the copies can use
    dali: bool  # --loader dali: DALI's decode paths beside Pillow's
    passes: list[str]  # the storage passes that run: cold, warm
    budget: dict[str, float]  # seconds per phase
    timing: PhasePlan  # the costs before the first phase, and how the rest is spent
    deadline: float  # perf_counter when the phases are planned to end


class _CudaStart:
    """CUDA's start (``open_copier``: importing torch, a context, a stream) on a thread of its
    own, begun with the probe so that it runs beside the listing; ``result`` waits for it."""

    def __init__(self) -> None:
        self._out: list[Copier | str] = []
        self._thread = start_quiet(
            threading.Thread(target=self._open, daemon=True, name="ioprobe-cuda")
        )

    def _open(self) -> None:
        try:
            self._out.append(open_copier())
        except BaseException as exc:  # open_copier says why as a string; anything else too
            self._out.append(f"not measured: CUDA did not start ({type(exc).__name__}: {exc})")

    def result(self) -> Copier | str:
        self._thread.join()
        return self._out[0]


class Probe:
    """The standalone probe: ``Probe(options).run()`` measures each phase within the time
    budget and returns the record, without a verdict."""

    # the single-node probe's plan: DALI's pipelines built before the first phase, and the
    # plan told (``on_plan``) and noted where the budget cannot hold
    _plans_phases = True

    def __init__(self, options: ProbeOptions, reporter: Reporter | None = None) -> None:
        options.validate()
        self.options = options
        self.reporter = _PhaseNoting(reporter or SilentReporter())
        self.notes: list[str] = []
        # what the phases measured so far, kept for the record of an interrupted probe
        self._so_far: tuple[_Plan, Stages, str] | None = None
        self.partial: RunRecord | None = None
        self.failures = ReadFailures()  # every phase's failed reads, each file once
        self._deadline = math.inf  # perf_counter when the budget is spent
        self._per_file = 1.0  # samples per CPU payload: more where whole shards were decoded
        # the files' bytes over the payloads' where raw decoding read only a prefix of each
        self._prefix_scale = 1.0
        self._cuda: _CudaStart | None = None  # CUDA's start, begun with run()
        self._prepared: paths_mod.Prepared | None = None  # DALI's pipelines, built in _plan
        self._began = 0.0  # perf_counter when run() began

    def run(self) -> RunRecord:
        """Every phase, with NVML sampled in the background throughout where there is a GPU.

        Ctrl-C (or SIGTERM turned into a KeyboardInterrupt) propagates unchanged; before it
        does, ``partial`` is set to the record of the phases that had ended, marked incomplete
        and naming the phase it stopped in, or stays None when no stage had been measured.
        A write the host refuses (``WRITE_ERRNOS``: a full TMPDIR), or a limit it meets
        (``LIMIT_ERRNOS``: too many open files), does the same."""
        o = self.options
        self._began = time.perf_counter()
        started = self._began if o.started_at is None else min(o.started_at, self._began)
        if o.copier is None and may_have_gpu():
            self._cuda = _CudaStart()  # beside the listing; never on a host without a GPU
        sampler = gpu_sampler.new_sampler()
        sampler.start()  # no GPU or NVML: False, and the record simply has no series
        try:
            try:
                record = self._pcie_only(started) if o.pcie_only else self._run(started)
            finally:
                sampler.stop()
                self._release()
        except KeyboardInterrupt:
            self.partial = self._interrupted(started)
            if self.partial is not None:
                self.partial.gpu_series = gpu_sampler.series_record(sampler, started)
            raise
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS | LIMIT_ERRNOS:
                # the host failed a write of ours (the CPU pool's payloads in a full TMPDIR)
                # or met its limits (no file or process left for the CPU pool's workers): the
                # phases that ended are kept, as for Ctrl-C
                self.partial = self._interrupted(started)
                if self.partial is not None:
                    self.partial.gpu_series = gpu_sampler.series_record(sampler, started)
            # a probe that failed (a bad target, storage that never answered) does not leave
            # CUDA's start running on into the interpreter's exit
            if self._cuda is not None:
                self._cuda.result()
            raise
        record.gpu_series = gpu_sampler.series_record(sampler, started)
        return record

    def _release(self) -> None:
        """Drop DALI's pipelines if the decode paths never took them."""
        if self._prepared is not None:
            self._prepared.close()
            self._prepared = None

    def _run(self, started: float) -> RunRecord:
        """The phases in order: list and profile the target, read it (cold, warm), read it to
        the GPU, decode it, copy to the GPU, compare decode paths, and run it end to end."""
        self._deadline = started + self.options.time_budget_s
        plan = self._plan(started)
        self._deadline = plan.deadline
        stages = Stages(storage=StorageStage(), pcie=self._pcie_unmeasured())
        loader = "image" if plan.dali else choose(self.options.loader, _decode_formats(plan))
        self._so_far = (plan, stages, loader)
        self._storage(plan, stages.storage)
        if "direct" in plan.budget:
            self._device_limit(plan, stages.storage)
        path = self._disk_to_gpu(plan, stages.storage) if plan.device else None
        stages.cpu, payloads = self._cpu_phase(plan, loader, stages.storage)
        stages.gpu = self._gpu_stage()
        if plan.device:  # without one the pcie stage keeps its reason
            stages.pcie = self._pcie(plan, stages.cpu, path)
        if plan.dali and payloads:
            self._decode_paths(plan, payloads, stages)
        record = self._record(plan, stages, loader)
        if self.options.emulated:
            self._end_to_end(plan, record, loader)
        record.dataset.read_errors = self.failures.counts()
        record.duration_s = time.perf_counter() - started
        self.reporter.close()
        return record

    def _interrupted(self, started: float) -> RunRecord | None:
        """The record of what an interrupted probe measured: the phases that ended, the stage
        of the phase in progress left as it was; None before a storage pass had ended."""
        if self._so_far is None:
            return None
        plan, stages, loader = self._so_far
        st = stages.storage
        if st.cold is None and st.warm is None:
            return None  # nothing measured: an empty record would only mislead
        if st.capacity_samples_per_s is None:  # stopped between the passes
            self._storage_capacity(st, plan.profile.sample_bytes_mean)
        record = self._record(plan, stages, loader)
        record.dataset.read_errors = self.failures.counts()
        record.duration_s = time.perf_counter() - started
        record.complete = False
        record.interrupted = self.reporter.current
        return record

    def _profiled(self) -> tuple[ds_mod.Dataset, DatasetProfile, shards_mod.Layout]:
        """List the target, find what holds its samples, and profile a sample of the data
        files within the profile's share of the budget."""
        o = self.options
        self.reporter.phase("listing")
        listed = self._list()
        seconds = max(PROFILE_SHARE * o.time_budget_s, PROFILE_MIN_S)
        layout = _layout_within(listed, o.samples_per_file, seconds, o.seed)
        ds = _data_only(listed, layout)
        prof = ds_mod.profile(
            ds,
            lambda e: pipe_mod.read_whole(ds.fs, e, ds_mod.MAGIC_BYTES),
            seed=o.seed,
            seconds=seconds,
            failures=self.failures,
        )
        _count_samples(prof, layout, ds)
        self.notes.extend(layout.notes)
        if listed.sparse:
            self.notes.append(_sparse_note(listed.sparse, len(listed.entries)))
        return ds, prof, layout

    def _plan(self, started: float) -> _Plan:
        """List and profile the target and read the host while CUDA starts beside them; then
        wait for CUDA, build DALI's pipelines (``--loader dali``), and split what remains of
        the budget across the phases, none below its least time. The costs before the first
        phase are measured here; where they and the phases' least times cannot fit the budget
        plus its margin, the plan says so (``on_plan``, and a note) before any phase runs."""
        o = self.options
        ds, prof, layout = self._profiled()
        dali = o.loader == "dali"
        if dali:
            # before any progress line: one error line
            _check_images(ds.target, dict(layout.sample_formats) or prof.formats)
        self.reporter.result(_listing_line(prof))
        host = self._host(ds)
        usable = host.usable_cores or os.cpu_count() or 1
        listed_at = time.perf_counter()
        if self._cuda is not None:
            self.reporter.phase("CUDA start")
        device = not isinstance(self._copier(), str)
        cuda_at = time.perf_counter()
        gpu_decode = dali and bool(host.gpus)
        if dali and self._plans_phases:
            self.reporter.phase("DALI pipelines")
            # the threads are the CPU sweep's most workers, as measure_paths will ask
            devices: list[paths_mod.Device] = ["cpu", "mixed"] if gpu_decode else ["cpu"]
            self._prepared = paths_mod.prepare(devices, max(cpu_mod.levels_for(usable)))
        planned_at = time.perf_counter()
        passes: list[str] = (
            ["cold"] if ds.remote else [p for p in ("cold", "warm") if p in o.passes]
        )
        fixed = {"start": self._began - started, "listing": listed_at - self._began}
        if self._cuda is not None:
            fixed["cuda"] = cuda_at - listed_at  # the part the listing did not hide
        if self._prepared is not None:
            fixed["dali"] = planned_at - cuda_at
        timing = plan_phases(
            o.time_budget_s,
            {k: v for k, v in fixed.items() if v > 0},
            phase_shares.shares(ds.remote, o.passes, o.emulated, dali, device, o.device_limit),
            phase_shares.floors(usable, o.workers or usable, gpu_decode, prof.bytes, ds.remote),
        )
        if self._plans_phases and not timing.holds:
            self.notes.append(_budget_note(o.time_budget_s, timing))
        if self._plans_phases and o.on_plan is not None:
            o.on_plan(timing)
        return _Plan(
            ds=ds,
            profile=prof,
            layout=layout,
            host=host,
            usable=usable,
            device=device,
            dali=dali,
            passes=passes,
            budget=timing.phases_s,
            timing=timing,
            deadline=planned_at + sum(timing.phases_s.values()),
        )

    def _seconds(self, plan: _Plan, phase: str) -> float:
        """The phase's planned share of the budget, shortened where earlier phases ran long
        (process pools starting, reads in flight finishing): what is left of the budget is
        split across this phase and the ones after it in the planned proportions."""
        planned = plan.budget.get(phase, 0.0)
        rest = sum(plan.budget.get(p, 0.0) for p in PHASES[PHASES.index(phase) :])
        left = self._deadline - time.perf_counter()
        return max(min(planned, left * planned / rest if rest else 0.0), MIN_PHASE_S)

    def _list(self) -> ds_mod.Dataset:
        """The target's files, listed within ``LISTING_SHARE`` of the budget."""
        o = self.options
        limit = LISTING_SHARE * o.time_budget_s

        def listing() -> ds_mod.Dataset:
            return ds_mod.resolve(
                o.target, seed=o.seed, storage_options=o.storage_options, budget_s=o.time_budget_s
            )

        try:
            return within(limit, listing)
        except Overdue:
            raise StorageTimeoutError(
                f"{o.target}: storage did not answer within the time budget (no listing after "
                f"{limit:.1f} s, half of the {o.time_budget_s:g} s budget; a store that is "
                "slow rather than down lists within a longer --time-budget)"
            ) from None

    def _storage(self, plan: _Plan, st: StorageStage) -> None:
        """A read pass per cache state (one for a remote target, which has no page cache),
        and the stage's capacity from the pass that stands for training's reads."""
        o = self.options
        for p in plan.passes:
            self.reporter.phase(f"storage ({'remote' if plan.ds.remote else p})")
            cap = COLD_MAX_BYTES if p == "cold" else WARM_MAX_BYTES
            if p == "warm" and plan.host.memory_available_bytes:
                cap = min(cap, plan.host.memory_available_bytes // 4)
            selection = st_mod.select_entries(plan.ds.entries, cap, o.seed)
            try:
                result = st_mod.measure_pass(
                    plan.ds,
                    selection,
                    p,
                    self._seconds(plan, p),
                    reporter=self.reporter,
                    seed=o.seed,
                    failures=self.failures,
                    partial=functools.partial(setattr, st, p),
                )
            except OSError as exc:  # TimeoutError included
                if exc.errno in LIMIT_ERRNOS:
                    raise  # the host's limits, not the storage's: run() keeps what was measured
                # a failed read's message quotes the file's URL, credentials and all
                said = redact_url(str(exc))
                done = [q for q in plan.passes if q != p and getattr(st, q) is not None]
                if done and any(getattr(st, q).sweep for q in done):
                    # the files changed under it, or the storage went away: the pass that
                    # was measured stands, and the rest of the probe runs
                    setattr(st, p, None)
                    self.notes.append(f"the {p} pass was not measured: {said}")
                    self.reporter.result(f"not measured: {said}")
                    continue
                if isinstance(exc, TimeoutError):
                    raise StorageTimeoutError(
                        f"{o.target}: storage did not answer within the time budget ({said})"
                    ) from None
                raise TargetError(f"{redact_url(plan.ds.target)}: {said}") from None
            setattr(st, p, result)
        self._storage_capacity(st, plan.profile.sample_bytes_mean)

    def _device_limit(self, plan: _Plan, st: StorageStage) -> None:
        """Direct reads of the pass's files at a queue-depth sweep: the device's ceiling
        beside what the loader-like passes got (``collect/device_limit.py``)."""
        self.reporter.phase("device limit (direct reads)")
        selection = st_mod.select_entries(plan.ds.entries, COLD_MAX_BYTES, self.options.seed)
        st.device = dl_mod.measure_device(
            selection,
            self._seconds(plan, "direct"),
            reporter=self.reporter,
            seed=self.options.seed,
        )

    def _cpu_phase(
        self, plan: _Plan, loader: str, st: StorageStage
    ) -> tuple[CpuStage, list[bytes]]:
        """The CPU stage and the payloads it decoded; unmeasured, with a note saying why,
        where no payload could be read (the storage stage was measured: the record stands)."""
        self.reporter.phase(f"cpu ({loader})")
        seconds = self._seconds(plan, "cpu")
        payloads, spent = self._payloads(plan, loader, st, seconds / 2)
        if not payloads:
            return CpuStage(loader=loader, usable_cores=plan.usable), payloads
        # reading the decode inputs comes out of the CPU phase's share, up to half of it
        cpu_s = max(seconds - spent, seconds / 2)
        return self._cpu(plan, loader, payloads, cpu_s), payloads

    def _payloads(
        self, plan: _Plan, loader: str, st: StorageStage, seconds: float
    ) -> tuple[list[bytes], float]:
        """The files the CPU phase decodes, read once within ``seconds``, and the seconds that
        took. Files that failed to read before are left out, and one that fails now is
        skipped. None read is noted: the CPU stage goes unmeasured."""
        ds = plan.ds
        entries, limit = self._decode_inputs(plan, loader, st)
        started = time.monotonic()
        payloads = cpu_mod.load_payloads(
            lambda e: pipe_mod.read_whole(ds.fs, e, limit),
            entries,
            seconds=seconds,
            failures=self.failures,
        )
        spent = time.monotonic() - started
        if limit is not None and loader == "raw" and plan.layout.splitter is None and payloads:
            self._scale_prefixes(entries, payloads, limit)
        payloads = self._samples_of(plan, payloads)
        if not payloads:
            why = (
                f"storage did not return one within {seconds:.1f} s; a larger --time-budget "
                "gives it longer"
                if spent >= seconds
                else f"every read failed ({self.failures.summary()})"
            )
            self.notes.append(f"the CPU stage was not measured: no sample to decode ({why})")
        return payloads, spent

    def _scale_prefixes(self, entries: list[FileEntry], payloads: list[bytes], limit: int) -> None:
        """Raw decoding of files over ``limit`` read a prefix of each: its cost, a copy, grows
        with the bytes, so the stage is scaled by the files' mean size over the payloads'."""
        if not any(len(p) >= limit for p in payloads):
            return
        files = sum(e.size for e in entries) / len(entries)
        read = sum(len(p) for p in payloads) / len(payloads)
        if read > 0 and files > read:
            self._prefix_scale = files / read
            self.notes.append(
                f"raw decoding copied a {units.memory(limit)} prefix of each file; its CPU time "
                f"is scaled by the files' size ({self._prefix_scale:.2f}x)"
            )

    def _samples_of(self, plan: _Plan, payloads: list[bytes]) -> list[bytes]:
        """The samples the CPU stage decodes: each shard or chunk read is cut into its
        samples where the format allows (``shards.split``); a file that can't be cut stands
        for its samples whole, and the stage's rate is scaled by the samples per file."""
        if not plan.layout.packed or not payloads:
            return payloads
        out: list[bytes] = []
        whole = 0
        for payload in payloads:
            parts = shards_mod.split(plan.layout, payload)
            if parts:
                out.extend(parts)
            else:
                whole += 1
        if out:
            return out
        if whole:
            self._per_file = capacity.dataset_samples(plan.profile) / max(plan.profile.files, 1)
            self.notes.append(
                f"the CPU stage decoded whole files ({plan.layout.kind}: ioprobe does not cut "
                "this format into samples); its rate is per file times the samples per file"
            )
        return payloads

    def _decode_inputs(
        self, plan: _Plan, loader: str, st: StorageStage
    ) -> tuple[list[FileEntry], int | None]:
        """Which files to decode, and how much of each to read (None: all of it). Decode
        inputs are held by every worker: files over the cap are left out while smaller ones
        exist, and raw "decoding" of a huge file needs only a prefix of it."""
        ds = plan.ds
        payload_cap = 64 << 20
        if ds.remote and st.read_bytes_per_s:
            # fetching decode inputs over a slow link must not eat the CPU phase's budget
            payload_cap = min(payload_cap, int(st.read_bytes_per_s * plan.budget["cpu"] / 4))
        readable = [e for e in ds.entries if e.path not in self.failures] or ds.entries
        fitting = [e for e in readable if e.size <= payload_cap]
        entries = st_mod.select_entries(
            fitting or [min(readable, key=lambda e: e.size)], payload_cap, self.options.seed + 1
        )
        # a shard cut into samples needs only a prefix: the samples read whole are decoded
        cut = plan.layout.splitter is not None
        limit = payload_cap if loader == "raw" or cut else None
        if cut and not fitting:
            entries = st_mod.select_entries(readable, payload_cap, self.options.seed + 1)[:1]
        if not fitting and limit is None:
            self.notes.append(
                f"every file is larger than {units.memory(payload_cap)}: the CPU stage decodes one "
                f"whole {units.size(entries[0].size)} file per worker"
            )
        return entries, limit

    def _cpu(self, plan: _Plan, loader: str, payloads: list[bytes], seconds: float) -> CpuStage:
        try:
            cpu = cpu_mod.measure_cpu(
                loader, payloads, plan.usable, seconds, reporter=self.reporter
            )
        except cpu_mod.PhaseCut as cut:
            # the levels measured stand; the other phases still run
            cpu = cut.stage
            done = f"after {len(cpu.sweep)} of its levels" if cpu.sweep else "before any level"
            self.notes.append(f"the CPU phase stopped {done}: {cut.reason}")
            self.reporter.result(f"stopped: {cut.reason}")
        per_file = self._per_file
        if per_file > 1:
            # each payload was a whole file of ``per_file`` samples
            scale_cpu(cpu, per_file)
        if cpu.output_bytes_per_sample and per_file > 1:
            cpu.output_bytes_per_sample /= per_file
        if self._prefix_scale > 1:
            scale_cpu(cpu, 1 / self._prefix_scale)
            if cpu.output_bytes_per_sample:
                cpu.output_bytes_per_sample *= self._prefix_scale
        return cpu

    def _pcie(self, plan: _Plan, cpu: CpuStage, path: DiskToGpu | None) -> PcieStage:
        """The host-to-device phase at the size a sample has on the device: decoded where the
        CPU stage decoded, else as stored."""
        per_sample = cpu.output_bytes_per_sample or plan.profile.sample_bytes_mean
        basis = "decoded" if cpu.output_bytes_per_sample else "file size"
        # the buffers, the warm-up and the link's reading come before the copies' own time
        seconds = max(self._seconds(plan, "pcie") - PCIE_SETUP_S, MIN_PHASE_S)
        stage = self._measure_pcie(seconds, per_sample, basis)
        stage.disk_to_gpu = path
        return stage

    def _decode_paths(self, plan: _Plan, payloads: list[bytes], stages: Stages) -> None:
        """``--loader dali``: the CPU stage decoded with Pillow; DALI's paths are measured
        beside it on the same images, and the fastest that fits stands for the stage."""
        self.reporter.phase("decode paths")
        prepared, self._prepared = self._prepared, None
        stages.cpu.decode_paths = paths_mod.measure_paths(
            payloads,
            stages.cpu,
            plan.host.gpus,
            self._seconds(plan, "decode"),
            reporter=self.reporter,
            prepared=prepared,
        )
        note = paths_mod.use_fastest_path(stages)
        if note is not None:
            self.notes.append(note)

    def _record(self, plan: _Plan, stages: Stages, loader: str) -> RunRecord:
        return RunRecord(
            kind="probe",
            host=plan.host,
            dataset=plan.profile,
            stages=stages,
            settings=self.options.recorded("dali" if plan.dali else loader, plan.passes),
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            ioprobe_version=__version__,
            notes=self.notes,
        )

    def _end_to_end(self, plan: _Plan, record: RunRecord, loader: str) -> None:
        """The whole pipeline against the emulated accelerator: readers, decode workers,
        batches, and a consumer that computes the given time per batch."""
        o, ds = self.options, plan.ds
        self.reporter.phase("end-to-end")
        if plan.dali:
            self.notes.append(
                "the end-to-end run decodes with Pillow; the DALI paths were measured on "
                "their own (stages.cpu.decode_paths)"
            )
        batch = o.batch_size or DEFAULT_BATCH
        cold = "cold" in plan.passes
        began = time.perf_counter()
        seconds = self._seconds(plan, "pipeline")
        if not ds.remote and cold:
            self._evict(ds.entries[:50_000], seconds / 2)
        workers = o.workers or plan.usable
        # the eviction and the workers' start come out of the phase's share, as the CPU
        # sweep's pool start does: the batches are timed for what is left
        seconds = max(
            seconds - (time.perf_counter() - began) - workers_mod.pool_start_s(workers),
            st_mod.MIN_LEVEL_S,
        )
        run = pipe_mod.run_pipeline(
            ds.entries,
            ds.fs,
            loader,
            workers=workers,
            batch_size=batch,
            compute_s=self._compute_seconds(batch),
            budget_s=seconds,
            cache="remote" if ds.remote else ("cold" if cold else "warm"),
            seed=o.seed,
            failures=self.failures,
        )
        self.reporter.result(
            f"{run.samples_per_s:.1f} samples/s, GPU idle {run.gpu_idle_fraction:.0%} "
            f"over {run.batches} batches"
        )
        self._keep_run(record, run, seconds)

    def _keep_run(self, record: RunRecord, run: PipelineRun, seconds: float) -> None:
        """The end-to-end run into the record; its rate and idle share only where a batch was
        measured, since with none after the start-up one a rate of 0 would be invented."""
        record.pipeline = run
        if not run.batches:
            self.notes.append(
                f"the end-to-end run took no batch after its first within {seconds:.1f} s: "
                "nothing was measured end to end; a larger time budget gives it time"
            )
            return
        record.measured_samples_per_s = run.samples_per_s
        record.gpu_idle_fraction = run.gpu_idle_fraction
        record.gpu_idle_method = "emulated consumer: time waiting for a batch / wall time"
        if run.batches < 5:
            self.notes.append(
                f"the end-to-end run saw only {run.batches} batches: a larger dataset or "
                "time budget gives a steadier figure"
            )

    def _evict(self, entries: list[FileEntry], seconds: float) -> None:
        """Drop the files from the page cache before a cold run, for at most ``seconds``:
        each eviction opens a file, which blocks on a file system that stopped answering."""
        try:
            within(seconds, st_mod.evict, [e.path for e in entries])
        except Overdue:
            self.notes.append(
                f"evicting the files before the end-to-end run took over {seconds:.1f} s: "
                "part of its reads may have come from the page cache"
            )

    def _copier(self) -> Copier | str:
        """The CUDA seam, opened once per probe (a reason string where there is no GPU): by
        the thread begun with the probe where there is one, here otherwise."""
        if self.options.copier is None:
            self.options.copier = self._cuda.result() if self._cuda else open_copier()
        return self.options.copier

    def _disk_to_gpu(self, plan: _Plan, st: StorageStage) -> DiskToGpu:
        """The disk-to-GPU path, cold where the probe reads cold, with cuFile beside it where
        kvikio is installed (collect/disk_to_gpu.py); a remote target says why it has none."""
        copier = self._copier()
        assert not isinstance(copier, str)
        self.reporter.phase("disk to GPU")
        cold = "cold" in plan.passes
        path = d2g_mod.run_path(
            copier,
            plan.ds.entries,
            remote=plan.ds.remote,
            budget_s=self._seconds(plan, "disk_to_gpu") if "disk_to_gpu" in plan.budget else 0.0,
            cold=cold,
            storage=st,
            seed=self.options.seed + 2,
            reporter=self.reporter,
        )
        if path.bytes_per_s is None:
            self.reporter.result(path.method)
        else:
            cufile = (
                f"cuFile {units.bandwidth(path.cufile_bytes_per_s)}"
                if path.cufile_bytes_per_s
                else f"cuFile: {path.cufile}"
            )
            self.reporter.result(
                f"{units.bandwidth(path.bytes_per_s)} end to end ({path.cache}, {path.method}); "
                + cufile
            )
        return path

    def _pcie_unmeasured(self) -> PcieStage:
        c = self._copier()
        return PcieStage(method=c if isinstance(c, str) else "not measured")

    def _measure_pcie(self, budget_s: float, per_sample: float | None, basis: str) -> PcieStage:
        """The host-to-device phase: copies by size, the link, and the stage's capacity at
        the probe's batch of ``per_sample`` bytes."""
        copier = self._copier()
        assert not isinstance(copier, str)
        self.reporter.phase(f"host-to-device ({copier.name})")
        reader = self.options.link_reader or pcie_mod.nvml_link
        points, link = pcie_mod.measure_copies(
            copier, budget_s=budget_s, link_reader=reader, reporter=self.reporter
        )
        batch = self.options.batch_size or DEFAULT_BATCH
        stage = pcie_mod.pcie_stage(points, link, per_sample, batch, basis)
        if stage.pinned_bytes_per_s is not None:
            self.reporter.result(
                f"pinned {units.bandwidth(stage.pinned_bytes_per_s)}, pageable "
                f"{units.bandwidth(stage.pageable_bytes_per_s or 0)} per batch of {batch}"
            )
        return stage

    def _pcie_only(self, started: float) -> RunRecord:
        """``probe --pcie-only``: the host and the link, no dataset."""
        o = self.options
        host = host_info(None)
        copier = self._copier()
        if isinstance(copier, str):
            raise BadInputError(
                f"--pcie-only needs a CUDA device: {copier.removeprefix('not measured: ')}"
            )
        stage = self._measure_pcie(min(o.time_budget_s, 30.0), None, "none")
        record = RunRecord(
            kind="probe",
            host=host,
            dataset=DatasetProfile(target=""),
            stages=Stages(pcie=stage),
            settings=ProbeSettings(
                loader="none", passes=[], time_budget_s=o.time_budget_s, batch_size=o.batch_size
            ),
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            ioprobe_version=__version__,
            notes=[*self.notes, "--pcie-only: the link alone; no dataset, so no stage capacities"],
        )
        record.duration_s = time.perf_counter() - started
        self.reporter.close()
        return record

    def _host(self, ds: ds_mod.Dataset) -> HostInfo:
        return host_info(None if ds.remote else ds.entries[0].path)

    def _compute_seconds(self, batch: int) -> float:
        o = self.options
        if o.compute_ms_per_batch is not None:
            return o.compute_ms_per_batch / 1e3
        assert o.gpu_samples_per_s is not None
        return batch / (o.gpu_samples_per_s * o.gpus)

    def _gpu_stage(self) -> GpuStage:
        o = self.options
        if o.compute_ms_per_batch is not None:
            batch = o.batch_size or DEFAULT_BATCH
            step = o.compute_ms_per_batch / 1e3
            cap = capacity.gpu_emulated(batch, step, o.gpus)
            return GpuStage(
                capacity_samples_per_s=cap, method="emulated", step_seconds=step, batch_size=batch
            )
        if o.gpu_samples_per_s is not None:
            return GpuStage(
                capacity_samples_per_s=capacity.gpus_linear(o.gpu_samples_per_s, o.gpus),
                method="given",
            )
        return GpuStage(method="not measured: no --compute-ms-per-batch or --gpu-samples-per-s")

    def _storage_capacity(self, st: StorageStage, mean_bytes: float) -> None:
        chosen = st.cold or st.warm
        assert chosen is not None and chosen.read_bytes_per_s is not None
        st.read_bytes_per_s = chosen.read_bytes_per_s
        st.capacity_samples_per_s = capacity.storage_from_rate(chosen.read_bytes_per_s, mean_bytes)
        if st.cold is not None and st.warm is not None:
            st.basis = "cold: a first epoch, or any epoch of a dataset larger than the page cache"
        else:
            st.basis = chosen.cache


class _PhaseNoting:
    """The caller's reporter, remembering the phase it was last told: the record of an
    interrupted probe names the phase it stopped in."""

    def __init__(self, inner: Reporter) -> None:
        self.inner = inner
        self.current = "the start"

    def phase(self, name: str) -> None:
        self.current = name
        self.inner.phase(name)

    def update(self, fraction: float, detail: str = "") -> None:
        self.inner.update(fraction, detail)

    def result(self, line: str) -> None:
        self.inner.result(line)

    def close(self) -> None:
        self.inner.close()


def _sparse_note(sparse: int, stated: int) -> str:
    """The note for a dataset whose files are mostly holes."""
    return (
        f"{sparse} of {stated} files are sparse (mostly holes, which read as zeros without "
        "touching the disk): the storage rates are higher than the same data written out "
        "would give"
    )


def _budget_note(budget_s: float, timing: PhasePlan) -> str:
    """Why the time budget could not hold, and the budget at which it would."""
    return (
        f"the time budget of {budget_s:g} s could not hold: "
        f"{cost_words(timing.fixed_s)} went before the first phase, and the phases "
        f"needed at least {timing.least_s:.1f} s; the probe was planned to take about "
        f"{timing.expected_s:.1f} s (at --time-budget {timing.full_share_budget_s:g} "
        "or more every phase gets its planned share)"
    )


def _layout_within(
    ds: ds_mod.Dataset, samples_per_file: int | None, seconds: float, seed: int
) -> shards_mod.Layout:
    """``shards.detect``'s layout of ``ds``, or, where it has not answered ``seconds`` past its
    own deadline, each file taken for one sample, with a note. Its header and index reads
    stop at its deadline between reads, but one read from a server that sends a byte every
    half second never trips a socket's read timeout and never ends: it is abandoned here
    (the thread goes on until the server or the read timeout ends it)."""

    def detect() -> shards_mod.Layout:
        with shards_mod.RangeReader(ds.fs) as read:
            return shards_mod.detect(
                ds, read, samples_per_file=samples_per_file, seconds=seconds, seed=seed
            )

    try:
        return within(2 * seconds, detect)
    except Overdue:
        why = f"did not arrive within {2 * seconds:.1f} s"
    except Exception as exc:  # a read of a header failed (a body shorter than announced)
        why = f"could not be read ({label(cause(exc))})"
    indexes = [e for e in ds.entries if os.path.basename(e.path) in shards_mod.INDEX_NAMES]
    data = [e for e in ds.entries if e not in indexes] or ds.entries
    return shards_mod.Layout(
        kind="packed files" if samples_per_file else "files",
        data=data,
        samples=samples_per_file * len(data) if samples_per_file else None,
        basis=f"--samples-per-file {samples_per_file}" if samples_per_file else None,
        index_files=len(indexes),
        notes=[
            f"the files' layout (headers, index.json) {why}: each file is taken for one "
            "sample (--samples-per-file N says otherwise)"
        ],
    )


def _data_only(ds: ds_mod.Dataset, layout: shards_mod.Layout) -> ds_mod.Dataset:
    """``ds`` with only the files that hold samples: an index, a table's metadata, or files no
    index names are no samples, and they are neither read nor counted."""
    if len(layout.data) == len(ds.entries):
        return ds
    total = ds.total_files * len(layout.data) / len(ds.entries)
    return dataclasses.replace(ds, entries=layout.data, total_files=max(round(total), 1))


def _count_samples(prof: DatasetProfile, layout: shards_mod.Layout, ds: ds_mod.Dataset) -> None:
    """The profile's samples and bytes per sample from ``layout``: the files' bytes over the
    samples they hold (scaled up with the files where a huge tree was sampled)."""
    prof.layout = layout.kind
    prof.index_files = layout.index_files
    if layout.samples is None or not layout.data:
        return
    samples = layout.samples * ds.total_files / len(layout.data)
    prof.samples = max(round(samples), 1)
    prof.samples_basis = layout.basis
    prof.sample_bytes_mean = prof.bytes / prof.samples
    prof.density = capacity.density_class(prof.sample_bytes_mean)


def _listing_line(prof: DatasetProfile) -> str:
    if prof.samples is None:
        return f"{prof.files} files, {units.size(prof.bytes)}, {prof.density} density"
    return (
        f"{prof.files} {prof.layout} holding {prof.samples:,} samples ({prof.samples_basis}), "
        f"{units.size(prof.bytes)}, {units.size(prof.sample_bytes_mean)} per sample, "
        f"{prof.density} density"
    )


def _decode_formats(plan: _Plan) -> dict[str, int]:
    """The formats the decode sees: the samples' inside shards, else the files'."""
    return dict(plan.layout.sample_formats) or plan.profile.formats


def scale_cpu(cpu: CpuStage, per_file: float) -> None:
    """A CPU stage measured on whole files of ``per_file`` samples, per sample; a
    ``per_file`` below 1 is a stage measured on that share of each sample (a prefix)."""
    if cpu.capacity_samples_per_s is not None:
        cpu.capacity_samples_per_s *= per_file
    if cpu.cpu_seconds_per_sample is not None:
        cpu.cpu_seconds_per_sample /= per_file
    for level in cpu.sweep:
        if per_file >= 1:  # below 1: prefixes of files, one sample each
            level.samples *= round(per_file)
        level.samples_per_s *= per_file
        level.cpu_seconds_per_sample /= per_file
