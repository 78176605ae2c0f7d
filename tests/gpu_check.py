"""Verify ioprobe's GPU side on this machine in one command: ``make gpu-check``.

  python tests/gpu_check.py [--wheels DIR] [--dali-parts DIR] [--report FILE] [--quick]
  python tests/gpu_check.py --download DIR [--python-version 3.12]
  python tests/gpu_check.py --download-dali DIR [--python-version 3.12]
  python tests/gpu_check.py --stash-part CARRIED --dali-parts DIR

For a GPU machine with a CUDA build of PyTorch already installed and, possibly, no package
index. The interpreter running this script must import a torch that sees a CUDA device; it is
never modified. A virtual environment ``.venv-gpu`` is made beside the checkout whose path
includes that interpreter's site-packages (so its torch, and whatever else it has, is used
as is); ioprobe is installed into it editable, and any module ioprobe or its GPU tests need
that is missing is installed from the wheels in ``--wheels`` (no index is contacted).

Two steps follow, each timed. Step 1: every test marked ``gpu`` but DALI's, then the GPU
benchmarks (tests/benchmarks/gpu_bench.py) but their DALI section; its target is 240 s. Step 2,
only where DALI is installed (already, or from the parts in ``--dali-parts``): DALI's GPU tests
and the benchmarks' DALI section. Where DALI is not installed its tests are listed as not run,
with the reason, and the summary says the DALI step did not run. One Markdown file holds the
results. Exit 0 when step 1 passed and the DALI step passed or was not asked for; 1 when a
test or a benchmark section failed, or parts were given and the DALI step could not run; 2
when the check could not start.

Preparing the carried files, where an index is reachable: ``--download DIR`` fetches the
wheels a bare GPU machine with torch may lack (one call carries them); ``--download-dali DIR``
fetches DALI and what its JPEG paths load, and splits them into parts of at most 60 MiB
(tests/gpu_parts.py), printing what each call to the GPU machine carries. On the GPU
machine, ``--stash-part CARRIED --dali-parts DIR`` copies the part one call carried into DIR
(outside the checkout, e.g. /tmp/ioprobe-dali-parts), where the parts gather call by call.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import platform
import shutil
import site
import subprocess
import sys
import tempfile
import time
import venv
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script, tests/ is on the path, not the checkout

from tests import gpu_parts  # noqa: E402

VENV = ROOT / ".venv-gpu"
# import name -> distribution: what ioprobe, its GPU tests and its benchmarks import
NEEDED = {
    "click": "click",
    "rich": "rich",
    "psutil": "psutil",
    "fsspec": "fsspec",
    "aiohttp": "aiohttp",
    "PIL": "pillow",
    "numpy": "numpy",
    "platformdirs": "platformdirs",
    "pynvml": "nvidia-ml-py",
    "pytest": "pytest",
    "pytest_timeout": "pytest-timeout",
    "hypothesis": "hypothesis",
    "nvtx": "nvtx",
}
# reported where missing, never fetched: its CUDA libraries (cupy's, about 1.3 GB) cannot travel
OPTIONAL = {"kvikio": "kvikio-cu13"}
# DALI and what its JPEG paths load; nvcomp, nvjpeg2k and nvtiff are loaded by other operators
# only when those run, so they stay behind. DALI's own wheel travels repacked as tar.xz.
DALI_DISTS = [
    "nvidia-dali-cuda130",
    "nvidia-nvimgcodec-cu13",
    "nvidia-nvjpeg",
    "astunparse",
    "gast",
    "optree",
    "makefun",
    "libcst",
    "six",  # astunparse imports it; most torch images have it, and it is 11 kB
]
DALI_REPACK = "nvidia-dali-cuda130"
DALI_TEST_FILES = (
    "tests/integration/watch/test_dali.py",
    "tests/integration/probe/test_cli_probe_dali.py",
)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64"
]
CARRY_BYTES = 64 * gpu_parts.MIB  # what one call to the GPU machine carries, checkout included
DEVICE_PARTS = "/tmp/ioprobe-dali-parts"
CARRIED = ".wp"
# step 1's tests and benchmarks end within its 240 s target (on an H100 the tests took 40 s
# before the CLI and torchrun GPU tests came, the benchmarks 51 s); the DALI step's within
# 210 s, so the whole check (set-up and DALI's install included) fits a 10-minute call
STEP1_TARGET_S = 240
TEST_TIMEOUT_S = 160
# One test's limit: a test that hangs fails alone, with every thread's stack, and the rest
# of its step still runs and is reported (the step's own limit loses every row with it).
PER_TEST_TIMEOUT_S = 60
BENCH_TIMEOUT_S = 80
DALI_TEST_TIMEOUT_S = 120
DALI_BENCH_TIMEOUT_S = 120


class CheckError(Exception):
    """A reason the check cannot go on, said in one line."""


class Row(NamedTuple):
    test: str
    outcome: str  # passed, FAILED, ERROR, skipped, not run
    seconds: float
    message: str


@dataclass
class Step:
    """One step's tests and benchmarks, or why it did not run."""

    title: str
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0
    log: str = ""
    bench_md: str = ""
    bench_ok: bool = True
    bench_err: str = ""
    not_run: str | None = None

    @property
    def passed(self) -> int:
        return sum(1 for r in self.rows if r.outcome == "passed")

    @property
    def bad(self) -> list[Row]:
        return [r for r in self.rows if r.outcome in ("FAILED", "ERROR")]

    @property
    def skipped(self) -> int:
        return sum(1 for r in self.rows if r.outcome == "skipped")

    @property
    def ok(self) -> bool:
        # a skip is an optional module missing here: reported, not a failure; but a step
        # where nothing passed verified nothing
        return self.not_run is None and self.passed > 0 and not self.bad and self.bench_ok


def say(msg: str) -> None:
    print(f"gpu-check: {msg}", flush=True)


def run(
    cmd: list[str], timeout: float | None = None, **kw: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, timeout=timeout, **kw)  # type: ignore[call-overload, no-any-return]


def check_torch() -> str:
    """This interpreter's torch and its device, or why it can't be used."""
    try:
        import torch
    except ImportError:
        raise CheckError(
            f"{sys.executable} cannot import torch: run with the Python that has a CUDA "
            "build of PyTorch (make gpu-check GPU_PYTHON=...)"
        ) from None
    if not torch.cuda.is_available():
        raise CheckError(f"torch {torch.__version__} sees no CUDA device")
    return (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {torch.cuda.get_device_name()}"
    )


def make_venv() -> Path:
    """``.venv-gpu``, seeing this interpreter's packages through a .pth file.

    ``--system-site-packages`` is not enough: when this interpreter is itself a virtual
    environment (torch images often are), "system" means the base Python, not the
    environment that holds torch.
    """
    py = VENV / "bin" / "python"
    if not py.exists():
        say(f"creating {VENV.name} over {sys.executable}")
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    site_dir = Path(
        run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    parents = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir()]
    (site_dir / "_ioprobe_parent.pth").write_text("\n".join(parents) + "\n")
    return py


def missing(py: Path, modules: dict[str, str]) -> list[str]:
    out = []
    for mod, dist in modules.items():
        if run([str(py), "-c", f"import {mod}"]).returncode != 0:
            out.append(dist)
    return out


OFFLINE = ["--no-index", "--disable-pip-version-check", "-q"]


def install(py: Path, wheels: Path | None) -> list[str]:
    """Install what is missing from ``wheels``, then ioprobe itself; returns notes."""
    notes = []
    need = missing(py, NEEDED)
    carried = wheels is not None and any(wheels.glob("*.whl"))
    if need and not carried:
        raise CheckError(
            f"missing {', '.join(need)} and no wheels to install them from: run "
            f"`python tests/gpu_check.py --download .whl --python-version "
            f"{sys.version_info.major}.{sys.version_info.minor}` where an index is "
            "reachable, bring .whl along, and pass WHEELS=.whl"
        )
    if wheels is not None and carried:
        have = {_dist(w) for w in wheels.glob("*.whl")}
        todo = [d for d in need if _norm(d) in have]
        if todo:
            r = run([str(py), "-m", "pip", "install", *OFFLINE, "--find-links", str(wheels), *todo])
            if r.returncode != 0:
                raise CheckError(
                    f"installing {', '.join(todo)} from {wheels} failed: {r.stderr.strip()[-400:]}"
                )
        # the rest of what was carried, each without resolving its dependencies
        notes += install_wheels(py, sorted(wheels.glob("*.whl")), f"from {wheels}")
        still = missing(py, NEEDED)
        if still:
            raise CheckError(f"still missing after installing from {wheels}: {', '.join(still)}")
    for dist in missing(py, OPTIONAL):
        notes.append(
            f"{dist} not installed (too large to carry): its GPU paths are reported as not measured"
        )
    r = run(
        [str(py), "-m", "pip", "install", *OFFLINE, "--no-deps", "--no-build-isolation",
         "-e", str(ROOT)],
        cwd=ROOT,
    )  # fmt: skip
    if r.returncode != 0:
        raise CheckError(f"installing ioprobe failed: {r.stderr.strip()[-400:]}")
    return notes


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _dist(wheel: Path) -> str:
    return _norm(wheel.name.split("-")[0])


def install_wheels(py: Path, wheels: list[Path], source: str) -> list[str]:
    """Every wheel whose distribution is not installed yet, without dependency resolution:
    DALI's metadata asks for codec extras (JPEG 2000, TIFF) that its JPEG paths do not load,
    and a resolver would refuse the set for their absence. Returns notes."""
    r = run([str(py), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"])
    installed = {_norm(p["name"]) for p in json.loads(r.stdout or "[]")}
    extra = [str(w) for w in wheels if _dist(w) not in installed]
    if not extra:
        return []
    r = run([str(py), "-m", "pip", "install", *OFFLINE, "--no-deps", *extra])
    if r.returncode != 0:
        return [f"wheels {source} did not install: {r.stderr.strip()[-300:]}"]
    return [f"installed {source}: {', '.join(Path(w).name.split('-')[0] for w in extra)}"]


def install_dali(py: Path, parts: Path | None, notes: list[str]) -> str | None:
    """DALI in ``.venv-gpu``, from the parts in ``parts`` where it is not there yet; None
    when it imports, else why it does not (the DALI step's reason for not running)."""
    if not missing(py, {"nvidia.dali": DALI_REPACK}):
        if parts is not None:
            notes.append(f"DALI was installed already: the parts in {parts} were not used")
        return None
    if parts is None:
        return "no parts given"
    say(f"verifying and unpacking the DALI parts in {parts}")
    prepared = gpu_parts.prepare(parts, VENV / "dali-wheels")
    if prepared.problem is not None:
        return prepared.problem
    if prepared.seconds:
        notes.append(
            f"DALI parts in {parts}: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in prepared.seconds.items())
        )
    t0 = time.perf_counter()
    got = install_wheels(py, prepared.wheels, f"from the DALI parts in {parts}")
    notes += [f"{n} ({time.perf_counter() - t0:.1f} s)" for n in got]
    if got and "did not install" in got[0]:
        return "its wheels did not install (see the notes)"
    r = run([str(py), "-c", "import nvidia.dali"])
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines() or ["no message"]
        return f"installed, but `import nvidia.dali` fails: {lines[-1][:200]}"
    return None


def parse_junit(xml_path: Path) -> list[Row]:
    """(test, outcome, seconds, message) per test case of a pytest JUnit XML file."""
    rows: list[Row] = []
    if not xml_path.exists():
        return rows
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                text = el.get("message") or ""
                message = text.splitlines()[0][:160] if text else ""
        rows.append(Row(name, outcome, float(case.get("time", 0)), message))
    return rows


def run_tests(py: Path, xml_path: Path, where: list[str], timeout: float) -> tuple[list[Row], str]:
    """The tests marked gpu in ``where`` (paths and pytest options); rows and the log's tail."""
    cmd = [str(py), "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "-o", f"timeout={PER_TEST_TIMEOUT_S}", f"--junitxml={xml_path}", *where]  # fmt: skip
    say("running the GPU tests: " + " ".join(cmd[1:]))
    try:
        r = run(cmd, timeout=timeout, cwd=ROOT)
        log = r.stdout + r.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        log = f"timed out after {timeout:.0f} s\n{out or ''}"
    return parse_junit(xml_path), log[-3000:]


def run_bench(
    py: Path, md: Path, quick: bool, select: list[str], timeout: float
) -> tuple[bool, str, str]:
    """gpu_bench.py with ``select`` (--sections/--skip); whether every section ran, its
    Markdown and its stderr's tail."""
    cmd = [str(py), "tests/benchmarks/gpu_bench.py", "--out", str(md), *select] + (
        ["--quick"] if quick else []
    )
    say("running the GPU benchmarks: " + " ".join(cmd[1:]))
    try:
        r = run(cmd, timeout=timeout, cwd=ROOT)
        ok, err = r.returncode == 0, (r.stderr or "")[-2000:]
    except subprocess.TimeoutExpired:
        ok, err = False, f"timed out after {timeout:.0f} s"
    return ok, (md.read_text() if md.exists() else ""), err


def run_step(
    py: Path,
    title: str,
    tmp: Path,
    where: list[str],
    select: list[str],
    quick: bool,
    timeouts: tuple[float, float],
) -> Step:
    t0 = time.perf_counter()
    tag = title.replace(" ", "-")
    rows, log = run_tests(py, tmp / f"{tag}.xml", where, timeouts[0])
    ok, md, err = run_bench(py, tmp / f"{tag}.md", quick, select, timeouts[1])
    return Step(title, rows, time.perf_counter() - t0, log, md, ok, err)


def _marks_gpu(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == "gpu" and ast.unparse(n.value) == "pytest.mark"
        for n in ast.walk(node)
    )


def dali_gpu_tests(root: Path = ROOT) -> list[str]:
    """The gpu tests in DALI's test files, named as the report names them, read from their
    source: pytest cannot collect test_dali.py where DALI is not installed."""
    names = []
    for rel in DALI_TEST_FILES:
        tree = ast.parse((root / rel).read_text())
        whole = any(
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
            and _marks_gpu(n.value)
            for n in tree.body
        )
        for n in tree.body:
            if (
                isinstance(n, ast.FunctionDef)
                and n.name.startswith("test")
                and (whole or any(_marks_gpu(d) for d in n.decorator_list))
            ):
                names.append(f"{Path(rel).stem}::{n.name}")
    return names


def dali_not_run(reason: str, tests: list[str]) -> Step:
    """The DALI step where DALI is not installed: each of its tests and its benchmark section
    listed as not run, with the reason."""
    names = [*tests, "gpu_bench.py --sections dali"]
    return Step(
        "DALI",
        [Row(t, "not run", 0.0, f"DALI not installed: {reason}") for t in names],
        bench_ok=False,
        not_run=reason,
    )


def _counts(step: Step) -> str:
    out = f"{step.passed} passed, {len(step.bad)} failed"
    if step.skipped:
        out += f", {step.skipped} skipped"
    return out


def summary(step1: Step, dali: Step) -> tuple[bool, str]:
    """Whether every step that ran passed, and the report's one-line result."""
    part1 = f"{_counts(step1)}; benchmarks {'ran' if step1.bench_ok else 'FAILED'}"
    if dali.not_run is not None:
        ok = step1.ok
        return (
            ok,
            f"{'PASS' if ok else 'FAIL'} (step 1): {part1}; DALI step not run: {dali.not_run}",
        )
    ok = step1.ok and dali.ok
    part2 = f"{_counts(dali)}; its benchmark {'ran' if dali.bench_ok else 'FAILED'}"
    if not dali.rows:
        part2 = "no DALI test ran; " + part2
    return ok, f"{'PASS' if ok else 'FAIL'} (steps 1 and 2): {part1}; DALI step: {part2}"


def timing(
    setup_s: float, step1: Step, dali_prep_s: float, dali: Step, total_s: float
) -> list[str]:
    """The report's time lines; a step 1 over its target is said so."""
    parts = [f"set-up {setup_s:.0f} s", f"step 1 {step1.seconds:.0f} s (target {STEP1_TARGET_S} s)"]
    if dali_prep_s:
        parts.append(f"DALI install {dali_prep_s:.0f} s")
    if dali.not_run is None:
        parts.append(f"step 2 (DALI) {dali.seconds:.0f} s")
    lines = [f"- time: {', '.join(parts)}; total {total_s:.0f} s"]
    if step1.seconds > STEP1_TARGET_S:
        lines.append(f"- **step 1 took {step1.seconds:.0f} s, over its {STEP1_TARGET_S} s target**")
    return lines


def _table(rows: list[Row]) -> list[str]:
    return [
        "| test | outcome | s | message |",
        "|---|---|---:|---|",
        *[
            f"| {r.test} | {r.outcome} | {r.seconds:.1f} | {r.message.replace('|', '/')} |"
            for r in rows
        ],
    ]


def _step_lines(step: Step, tests: str, bench: str) -> list[str]:
    """One step's section: its tests' table (with the log where one failed) and its
    benchmark's Markdown (with the error where it failed)."""
    lines = [f"## GPU tests ({tests})", "", *_table(step.rows), ""]
    if step.bad or not step.rows:
        lines += ["```", step.log.strip(), "```", ""]
    lines += [f"## {bench}", "", step.bench_md.strip(), ""]
    if not step.bench_ok:
        lines += ["```", step.bench_err.strip(), "```", ""]
    return lines


def render_report(head: list[str], step1: Step, dali: Step, times: list[str]) -> tuple[bool, str]:
    """The whole Markdown report and whether the check passed; ``head`` holds the lines about
    the machine and the notes."""
    ok, result = summary(step1, dali)
    lines = ["# ioprobe gpu-check", "", f"- result: **{result}**", *times, *head, ""]
    lines += ["# Step 1: GPU tests and benchmarks, DALI's left out", ""]
    lines += _step_lines(
        step1,
        f"`pytest -m gpu tests/unit tests/integration`, {len(DALI_TEST_FILES)} DALI files ignored",
        "Benchmarks (`gpu_bench.py --skip dali`)",
    )
    lines += ["# Step 2: DALI", ""]
    if dali.not_run is not None:
        lines += [f"Not run: {dali.not_run}.", "", *_table(dali.rows), ""]
    else:
        lines += _step_lines(
            dali,
            f"`pytest -m gpu {' '.join(DALI_TEST_FILES)}`",
            "Benchmark (`gpu_bench.py --sections dali`)",
        )
    return ok, "\n".join(lines) + "\n"


def commit() -> str:
    """HEAD's short hash, and whether the checkout differs from it (a copied working tree can
    carry an older .git: the hash alone would name code that did not run)."""
    r = run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT)
    if r.returncode != 0:
        return "unknown"
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT)
    return r.stdout.strip() + (" with changes not committed there" if dirty.stdout.strip() else "")


# --- where an index is reachable --------------------------------------------------------------


def pip_download(dists: list[str], dest: Path, python_version: str, no_deps: bool) -> None:
    """``dists`` (with their dependencies unless ``no_deps``, resolved together, so one
    version of each) into ``dest``, which ends holding exactly these wheels."""
    dest.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pip", "download", "--only-binary=:all:",
            "--disable-pip-version-check", "--python-version", python_version,
            "--implementation", "cp"]  # fmt: skip
    for p in PLATFORMS:
        args += ["--platform", p]
    if no_deps:
        args.append("--no-deps")
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f"{dest.name}.new-") as tmp:
        say(f"downloading {', '.join(dists)}" + (" (no dependencies)" if no_deps else ""))
        r = run([*args, "-d", tmp, *dists])
        if r.returncode != 0:
            raise CheckError(f"pip download failed: {(r.stderr or r.stdout).strip()[-600:]}")
        for old in dest.glob("*.whl"):
            old.unlink()
        for new in Path(tmp).glob("*.whl"):
            shutil.move(str(new), dest / new.name)
    twice = duplicates(sorted(dest.glob("*.whl")))
    if twice:
        raise CheckError(f"more than one version of {', '.join(twice)} in {dest}")


def duplicates(wheels: list[Path]) -> list[str]:
    """Distributions that have more than one wheel among ``wheels``."""
    seen: dict[str, int] = {}
    for w in wheels:
        seen[_dist(w)] = seen.get(_dist(w), 0) + 1
    return sorted(d for d, n in seen.items() if n > 1)


def tree_bytes() -> int:
    """The checkout's tracked files: what every call carries beside its own folders."""
    r = run(["git", "ls-files", "-z"], cwd=ROOT)
    files = [ROOT / f for f in r.stdout.split("\0") if f]
    return sum(f.stat().st_size for f in files if f.is_file())


def download(dest: Path, python_version: str) -> int:
    """The NEEDED set and its dependencies, one version each, small enough for one call."""
    try:
        pip_download(sorted(set(NEEDED.values())), dest, python_version, no_deps=False)
    except CheckError as exc:
        print(f"gpu-check: error: {exc}", file=sys.stderr)
        return 1
    size, tree = gpu_parts.folder_bytes(dest), tree_bytes()
    fits = size + tree <= CARRY_BYTES
    say(
        f"not fetched: {', '.join(OPTIONAL.values())} (too large to carry; reported as not installed)"
    )
    say(
        f"{dest}: {len(list(dest.glob('*.whl')))} wheels, {gpu_parts.mib(size)}; with the "
        f"checkout's {gpu_parts.mib(tree)}, {gpu_parts.mib(size + tree)} of the "
        f"{gpu_parts.mib(CARRY_BYTES)} one call carries"
        + ("" if fits else ": TOO LARGE for one call")
    )
    return 0 if fits else 1


def carry_plan(manifest: dict[str, object], parts: Path, wheels: str, tree: int) -> list[str]:
    """What each call to the GPU machine carries and runs, one part per call, then the check."""
    plist = manifest["parts"]
    assert isinstance(plist, list)
    n = len(plist) + 1
    lines = [
        f"{n} calls to the GPU machine, in quick succession (it keeps {DEVICE_PARTS} only "
        "while it stays warm):"
    ]
    for k, part in enumerate(plist, 1):
        size = part["bytes"] + (parts / gpu_parts.MANIFEST).stat().st_size + tree
        lines += [
            f"  call {k} of {n}, here: rm -rf {CARRIED} && mkdir {CARRIED} && cp "
            f"{parts}/{part['name']} {parts}/{gpu_parts.MANIFEST} {CARRIED}/",
            f"      carry {CARRIED} ({gpu_parts.mib(size)} with the checkout), run there: "
            f"python3 tests/gpu_check.py --stash-part {CARRIED} --dali-parts {DEVICE_PARTS}",
        ]
    lines.append(
        f"  call {n} of {n}: carry {wheels}, run there: make gpu-check WHEELS={wheels} "
        f"DALI_PARTS={DEVICE_PARTS} GPU_REPORT=gpu-check.md"
    )
    return lines


def download_dali(dest: Path, python_version: str, wheels: str) -> int:
    """DALI's wheels, DALI's own repacked as tar.xz, in one archive split into parts in
    ``dest``; what was fetched and packed stays in ``dest/build`` for the next run."""
    build = dest / "build"
    fetched = build / "wheels"
    try:
        pip_download(DALI_DISTS, fetched, python_version, no_deps=True)
    except CheckError as exc:
        print(f"gpu-check: error: {exc}", file=sys.stderr)
        return 1
    found = sorted(fetched.glob("*.whl"))
    dali = [w for w in found if _dist(w) == _norm(DALI_REPACK)]
    if len(dali) != 1:
        print(f"gpu-check: error: no single {DALI_REPACK} wheel in {fetched}", file=sys.stderr)
        return 1
    packed = build / (dali[0].name + gpu_parts.REPACKED)
    said = packed.with_name(packed.name + ".json")
    info = json.loads(said.read_text()) if said.is_file() and packed.is_file() else {}
    if info.get("wheel_sha256") != gpu_parts.sha256_file(dali[0]):
        say(f"packing {dali[0].name} as tar.xz (about a minute on 2 cores with xz)")
        t0 = time.perf_counter()
        info = gpu_parts.repack_wheel(dali[0], packed)
        said.write_text(json.dumps(info, indent=1) + "\n")
        say(f"packed in {time.perf_counter() - t0:.0f} s: {gpu_parts.mib(packed.stat().st_size)} "
            f"against the wheel's {gpu_parts.mib(dali[0].stat().st_size)}")  # fmt: skip
    archive = build / gpu_parts.ARCHIVE
    contents = gpu_parts.bundle(
        [packed, *(w for w in found if w != dali[0])], archive, {packed.name: info}
    )
    about = {
        "python_version": python_version,
        "made": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    manifest = gpu_parts.split(archive, dest, contents, about=about)
    archive.unlink()
    tree = tree_bytes()
    say(
        f"{dest}: {len(manifest['parts'])} parts of the {gpu_parts.mib(manifest['archive']['bytes'])} "
        "archive: "
        + ", ".join(f"{p['name']} {gpu_parts.mib(p['bytes'])}" for p in manifest["parts"])
        + f"; {gpu_parts.MANIFEST}; it holds "
        + ", ".join(c["name"] for c in contents)
    )
    for line in carry_plan(manifest, dest, wheels, tree):
        print(line, flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--wheels", type=Path, help="a folder of wheels to install missing packages from"
    )
    ap.add_argument(
        "--dali-parts",
        type=Path,
        metavar="DIR",
        help="the folder where DALI's parts were gathered (and, with --stash-part, are)",
    )
    ap.add_argument("--report", type=Path, default=ROOT / "gpu-check.md")
    ap.add_argument(
        "--quick", action="store_true", help="fewer sizes and repeats in the benchmarks"
    )
    ap.add_argument(
        "--download", type=Path, metavar="DIR", help="fetch the needed wheels into DIR and stop"
    )
    ap.add_argument(
        "--download-dali",
        type=Path,
        metavar="DIR",
        help="fetch DALI's wheels, split them into parts in DIR and stop",
    )
    ap.add_argument(
        "--stash-part",
        type=Path,
        metavar="CARRIED",
        help="copy the parts carried in CARRIED into --dali-parts and stop",
    )
    ap.add_argument(
        "--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}"
    )
    args = ap.parse_args()
    if args.download:
        return download(args.download, args.python_version)
    if args.download_dali:
        return download_dali(args.download_dali, args.python_version, str(args.wheels or ".whl"))
    if args.stash_part:
        if args.dali_parts is None:
            ap.error("--stash-part needs --dali-parts, the folder the parts gather in")
        try:
            msgs, whole = gpu_parts.stash(args.stash_part, args.dali_parts)
        except (gpu_parts.PartsError, OSError) as exc:
            print(f"gpu-check: error: {exc}", file=sys.stderr)
            return 2
        for m in msgs:
            say(m)
        return 0 if whole else 1
    started = time.perf_counter()
    try:
        torch_line = check_torch()
        say(torch_line)
        py = make_venv()
        notes = install(py, args.wheels)
    except CheckError as exc:
        print(f"gpu-check: error: {exc}", file=sys.stderr)
        return 2
    setup_s = time.perf_counter() - started
    tmp = VENV / "run"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    ignore = [f"--ignore={f}" for f in DALI_TEST_FILES]
    step1 = run_step(
        py, "step 1", tmp, ["tests/unit", "tests/integration", *ignore], ["--skip", "dali"],
        args.quick, (TEST_TIMEOUT_S, BENCH_TIMEOUT_S),
    )  # fmt: skip
    t0 = time.perf_counter()
    reason = install_dali(py, args.dali_parts, notes)
    dali_prep_s = time.perf_counter() - t0
    if reason is None:
        dali = run_step(
            py, "DALI", tmp, list(DALI_TEST_FILES), ["--sections", "dali"], args.quick,
            (DALI_TEST_TIMEOUT_S, DALI_BENCH_TIMEOUT_S),
        )  # fmt: skip
    else:
        say(f"DALI step not run: {reason}")
        dali = dali_not_run(reason, dali_gpu_tests())
    head = [
        f"- {torch_line}",
        f"- ioprobe at {commit()}; Python {platform.python_version()} ({sys.executable}); "
        f"{platform.platform()}; {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        *[f"- note: {n}" for n in notes],
    ]
    times = timing(setup_s, step1, dali_prep_s, dali, time.perf_counter() - started)
    ok, text = render_report(head, step1, dali, times)
    args.report.write_text(text)
    _, result = summary(step1, dali)
    say(f"{result}; results in {args.report}")
    if ok and dali.not_run is not None and args.dali_parts is not None:
        say("the DALI parts were given but the DALI step did not run: exit 1")
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(main())
