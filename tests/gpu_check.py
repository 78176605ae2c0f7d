"""Verify ioprobe's GPU side on this machine in one command: ``make gpu-check``.

  python tests/gpu_check.py [--wheels DIR] [--report FILE] [--quick]
  python tests/gpu_check.py --download DIR [--python-version 3.12]

For a GPU machine with a CUDA build of PyTorch already installed and, possibly, no package
index. The interpreter running this script must import a torch that sees a CUDA device; it is
never modified. A virtual environment ``.venv-gpu`` is made beside the checkout whose path
includes that interpreter's site-packages (so its torch, and whatever else it has, is used
as is); ioprobe is installed into it editable, and any module ioprobe or its GPU tests need
that is missing is installed from the wheels in ``--wheels`` (no index is contacted). Then
every test marked ``gpu`` runs, then the GPU benchmarks (tests/benchmarks/gpu_bench.py), and
one Markdown file holds the results. Exit 0 only when every GPU test passed and every
benchmark section ran.

``--download DIR`` (on a machine that reaches an index) fetches the wheels a bare GPU machine
with torch lacks, for the given Python version, so the folder can travel with the checkout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import site
import subprocess
import sys
import time
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
    "hypothesis": "hypothesis",
    "nvtx": "nvtx",
}
OPTIONAL = {"nvidia.dali": "nvidia-dali-cuda130", "kvikio": "kvikio-cu13"}
TEST_TIMEOUT_S = 360
BENCH_TIMEOUT_S = 240


class CheckError(Exception):
    """A reason the check cannot go on, said in one line."""


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


def install(py: Path, wheels: Path | None) -> list[str]:
    """Install what is missing from ``wheels``, then ioprobe itself; returns notes."""
    notes = []
    need = missing(py, NEEDED)
    optional = missing(py, OPTIONAL)
    offline = ["--no-index", "--disable-pip-version-check", "-q"]
    if need or optional:
        if wheels is None or not any(wheels.glob("*.whl")):
            if need:
                raise CheckError(
                    f"missing {', '.join(need)} and no wheels to install them from: run "
                    f"`python tests/gpu_check.py --download .whl --python-version "
                    f"{sys.version_info.major}.{sys.version_info.minor}` where an index is "
                    "reachable, bring .whl along, and pass WHEELS=.whl"
                )
        else:
            have = {_dist(w) for w in wheels.glob("*.whl")}
            todo = [d for d in need if _norm(d) in have]
            if todo:
                r = run(
                    [str(py), "-m", "pip", "install", *offline, "--find-links", str(wheels), *todo]
                )
                if r.returncode != 0:
                    raise CheckError(
                        f"installing {', '.join(todo)} from {wheels} failed: {r.stderr.strip()[-400:]}"
                    )
            if optional:
                notes += _install_optional(py, wheels, offline)
        still = missing(py, NEEDED)
        if still:
            raise CheckError(f"still missing after installing from {wheels}: {', '.join(still)}")
    for dist in missing(py, OPTIONAL):
        notes.append(f"{dist} not installed: its GPU paths are reported as not measured")
    r = run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            *offline,
            "--no-deps",
            "--no-build-isolation",
            "-e",
            str(ROOT),
        ],
        cwd=ROOT,
    )
    if r.returncode != 0:
        raise CheckError(f"installing ioprobe failed: {r.stderr.strip()[-400:]}")
    return notes


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _dist(wheel: Path) -> str:
    return _norm(wheel.name.split("-")[0])


def _install_optional(py: Path, wheels: Path, offline: list[str]) -> list[str]:
    """Every carried wheel whose distribution is not installed yet, without dependency
    resolution: DALI's metadata asks for codec extras (JPEG 2000, TIFF) that its JPEG paths
    do not load, and a resolver would refuse the set for their absence."""
    r = run([str(py), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"])
    installed = {_norm(p["name"]) for p in json.loads(r.stdout or "[]")}
    extra = sorted(str(w) for w in wheels.glob("*.whl") if _dist(w) not in installed)
    if not extra:
        return []
    r = run([str(py), "-m", "pip", "install", *offline, "--no-deps", *extra])
    if r.returncode != 0:
        return [f"optional wheels did not install: {r.stderr.strip()[-300:]}"]
    return [f"installed from {wheels}: {', '.join(Path(w).name.split('-')[0] for w in extra)}"]


def run_tests(py: Path, xml_path: Path) -> tuple[list[tuple[str, str, float, str]], str]:
    """Every test marked gpu; rows of (test, outcome, seconds, message) and the tail of the log."""
    cmd = [
        str(py), "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
        f"--junitxml={xml_path}", "tests/unit", "tests/integration",
    ]  # fmt: skip
    say("running the GPU tests: " + " ".join(cmd[1:]))
    try:
        r = run(cmd, timeout=TEST_TIMEOUT_S, cwd=ROOT)
        log = r.stdout + r.stderr
    except subprocess.TimeoutExpired as exc:
        log = f"timed out after {TEST_TIMEOUT_S} s\n{exc.stdout or ''}"
    rows = []
    if xml_path.exists():
        for case in ET.parse(xml_path).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                    message = (
                        (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
                    )
            rows.append((name, outcome, float(case.get("time", 0)), message))
    return rows, log[-3000:]


def run_bench(py: Path, md: Path, quick: bool) -> tuple[bool, str]:
    cmd = [str(py), "tests/benchmarks/gpu_bench.py", "--out", str(md)] + (
        ["--quick"] if quick else []
    )
    say("running the GPU benchmarks: " + " ".join(cmd[1:]))
    try:
        r = run(cmd, timeout=BENCH_TIMEOUT_S, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {BENCH_TIMEOUT_S} s"
    return r.returncode == 0, (r.stderr or "")[-2000:]


def commit() -> str:
    """HEAD's short hash, and whether the checkout differs from it (a copied working tree can
    carry an older .git: the hash alone would name code that did not run)."""
    r = run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT)
    if r.returncode != 0:
        return "unknown"
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT)
    return r.stdout.strip() + (" with changes not committed there" if dirty.stdout.strip() else "")


def report(
    path: Path,
    torch_line: str,
    notes: list[str],
    rows: list[tuple[str, str, float, str]],
    test_log: str,
    bench_md: str,
    bench_ok: bool,
    bench_err: str,
    took: float,
) -> bool:
    passed = sum(1 for r in rows if r[1] == "passed")
    bad = [r for r in rows if r[1] in ("FAILED", "ERROR")]
    skipped = [r for r in rows if r[1] == "skipped"]
    # a skip is an optional package missing here (DALI, kvikio): reported, not a failure
    ok = passed > 0 and not bad and bench_ok
    lines = [
        "# ioprobe gpu-check",
        "",
        f"- result: **{'PASS' if ok else 'FAIL'}**: {passed} GPU tests passed, {len(bad)} failed, "
        f"{len(skipped)} skipped; benchmarks {'ran' if bench_ok else 'FAILED'}; {took:.0f} s",
        f"- {torch_line}",
        f"- ioprobe at {commit()}; Python {platform.python_version()} ({sys.executable}); "
        f"{platform.platform()}; {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        *[f"- note: {n}" for n in notes],
        "",
        "## GPU tests (`pytest -m gpu`)",
        "",
        "| test | outcome | s | message |",
        "|---|---|---:|---|",
        *[f"| {n} | {o} | {t:.1f} | {m.replace('|', '/')} |" for n, o, t, m in rows],
        "",
    ]
    if bad or not rows:
        lines += ["```", test_log.strip(), "```", ""]
    lines += ["# Benchmarks (tests/benchmarks/gpu_bench.py)", "", bench_md.strip(), ""]
    if not bench_ok:
        lines += ["```", bench_err.strip(), "```", ""]
    path.write_text("\n".join(lines) + "\n")
    return ok


def download(dest: Path, python_version: str) -> int:
    """Fetch wheels for everything a torch-only GPU image may lack (DALI included)."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + [
        "manylinux2014_x86_64"
    ]
    args = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "-d", str(dest),
            "--python-version", python_version, "--implementation", "cp"]  # fmt: skip
    for p in platforms:
        args += ["--platform", p]
    for dist in [*NEEDED.values(), *OPTIONAL.values()]:
        r = subprocess.run([*args, dist])
        if r.returncode != 0:
            say(f"could not download {dist} (carry on without it if optional)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--wheels", type=Path, help="a folder of wheels to install missing packages from"
    )
    ap.add_argument("--report", type=Path, default=ROOT / "gpu-check.md")
    ap.add_argument(
        "--quick", action="store_true", help="fewer sizes and repeats in the benchmarks"
    )
    ap.add_argument(
        "--download", type=Path, metavar="DIR", help="fetch the wheels into DIR and stop"
    )
    ap.add_argument(
        "--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}"
    )
    args = ap.parse_args()
    if args.download:
        return download(args.download, args.python_version)
    started = time.perf_counter()
    try:
        torch_line = check_torch()
        say(torch_line)
        py = make_venv()
        notes = install(py, args.wheels)
    except CheckError as exc:
        print(f"gpu-check: error: {exc}", file=sys.stderr)
        return 2
    tmp = VENV / "run"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    rows, log = run_tests(py, tmp / "gpu.xml")
    bench_ok, bench_err = run_bench(py, tmp / "bench.md", args.quick)
    bench_md = (tmp / "bench.md").read_text() if (tmp / "bench.md").exists() else ""
    ok = report(
        args.report, torch_line, notes, rows, log, bench_md, bench_ok, bench_err,
        time.perf_counter() - started,
    )  # fmt: skip
    say(f"{'PASS' if ok else 'FAIL'}: results in {args.report}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(main())
