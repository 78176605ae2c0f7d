"""make gpu-check's pieces that need no GPU: DALI's wheels carried in parts (split, manifest,
stash, verify, reassemble, the wheel rebuilt uncompressed) and the report's two steps."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import shutil
import stat
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests import gpu_check, gpu_parts
from tests.gpu_check import Row, Step

DATE = (2026, 1, 2, 3, 4, 6)


def _entry(path: str, mode: int) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(path, DATE)
    zi.external_attr = mode << 16
    return zi


def make_wheel(folder: Path, name: str, *, bad_record: bool = False, seed: int = 0) -> Path:
    """A small wheel shaped like DALI's: a folder entry, a shared library with its execute
    bits, incompressible data, and a member after its RECORD."""
    folder.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 1\n",
        f"{name}/libfake.so": rnd.randbytes(40_000),
        f"{name}/data.bin": rnd.randbytes(30_000),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
    }
    tail = {f"{name}_tool.py": b"print('after RECORD')\n"}
    lines = []
    for path, data in {**files, **tail}.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    if bad_record:  # RECORD promises other bytes for the data file
        lines[2] = lines[2].replace("sha256=", "sha256=AAAA", 1)
    lines.append(f"{info}/RECORD,,")
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(_entry(f"{name}/", stat.S_IFDIR | 0o755), b"")
        for path, data in files.items():
            mode = 0o755 if path.endswith(".so") else 0o644
            zf.writestr(_entry(path, stat.S_IFREG | mode), data)
        zf.writestr(_entry(f"{info}/RECORD", stat.S_IFREG | 0o644), "\n".join(lines) + "\n")
        for path, data in tail.items():
            zf.writestr(_entry(path, stat.S_IFREG | 0o644), data)
    return wheel


PART = 16 * 1024


def make_parts(tmp: Path, *, bad_record: bool = False) -> tuple[Path, dict[str, Any], Path, Path]:
    """The parts folder, its manifest, the wheel repacked and the one carried as it is."""
    big = make_wheel(tmp / "src", "fakedali", bad_record=bad_record, seed=1)
    small = make_wheel(tmp / "src", "other", seed=2)
    build = tmp / "build"
    build.mkdir()
    packed = build / (big.name + gpu_parts.REPACKED)
    info = gpu_parts.repack_wheel(big, packed)
    archive = build / gpu_parts.ARCHIVE
    contents = gpu_parts.bundle([packed, small], archive, {packed.name: info})
    manifest = gpu_parts.split(archive, tmp / "parts", contents, PART)
    return tmp / "parts", manifest, big, small


def carry_each_part(
    parts: Path, manifest: dict[str, Any], dest: Path, tmp: Path
) -> list[list[str]]:
    """As the GPU machine's calls do: one part and the manifest carried at a time, stashed."""
    said = []
    for part in manifest["parts"]:
        carried = tmp / "wp"
        shutil.rmtree(carried, ignore_errors=True)
        carried.mkdir()
        shutil.copy(parts / part["name"], carried)
        shutil.copy(parts / gpu_parts.MANIFEST, carried)
        msgs, whole = gpu_parts.stash(carried, dest)
        assert whole, msgs
        said.append(msgs)
    return said


@pytest.fixture(params=["xz binary", "python lzma"])
def packer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "xz binary" and shutil.which("xz") is None:
        pytest.skip("no xz binary here")
    if request.param == "python lzma":
        monkeypatch.setattr(gpu_parts.shutil, "which", lambda name: None)
    return str(request.param)


def test_split_parts_stash_and_prepare_give_back_the_same_wheels(
    tmp_path: Path, packer: str
) -> None:
    parts, manifest, big, small = make_parts(tmp_path)
    sizes = [p["bytes"] for p in manifest["parts"]]
    assert len(sizes) >= 3 and all(s <= PART for s in sizes[:-1]) and sizes[-1] <= PART
    assert sizes[:-1] == [PART] * (len(sizes) - 1)
    assert sum(sizes) == manifest["archive"]["bytes"]
    assert sorted(p.name for p in parts.glob("part-*")) == [p["name"] for p in manifest["parts"]]
    on_disk = json.loads((parts / gpu_parts.MANIFEST).read_text())
    assert on_disk == manifest
    packed = {c["name"]: c for c in manifest["contents"]}[big.name + gpu_parts.REPACKED]
    assert packed["wheel"] == big.name and packed["members"] == 8

    dest = tmp_path / "gathered"
    said = carry_each_part(parts, manifest, dest, tmp_path)
    n = len(sizes)
    assert said[0][-1].startswith(f"1 of {n} parts in {dest}; part-001 missing")
    assert said[-1][-1] == f"all {n} parts are in {dest} and match the manifest"

    got = gpu_parts.prepare(dest, tmp_path / "work")
    assert got.problem is None
    assert sorted(w.name for w in got.wheels) == sorted([big.name, small.name])
    rebuilt = next(w for w in got.wheels if w.name == big.name)
    with zipfile.ZipFile(big) as a, zipfile.ZipFile(rebuilt) as b:
        assert b.namelist() == a.namelist()
        for x, y in zip(a.infolist(), b.infolist(), strict=True):
            assert y.compress_type == zipfile.ZIP_STORED
            assert y.external_attr >> 16 == x.external_attr >> 16, x.filename
            assert y.date_time == x.date_time
            assert b.read(y) == a.read(x), x.filename
        assert b.testzip() is None
    carried = next(w for w in got.wheels if w.name == small.name)
    assert carried.read_bytes() == small.read_bytes()


def test_a_second_prepare_of_the_same_parts_reuses_the_rebuilt_wheels(tmp_path: Path) -> None:
    parts, _, _, _ = make_parts(tmp_path)
    first = gpu_parts.prepare(parts, tmp_path / "work")
    stamp = [w.stat().st_mtime_ns for w in first.wheels]
    again = gpu_parts.prepare(parts, tmp_path / "work")
    assert again.problem is None and again.wheels == first.wheels
    assert [w.stat().st_mtime_ns for w in again.wheels] == stamp
    assert "reassemble" not in again.seconds


def test_a_missing_part_is_named_and_nothing_is_unpacked(tmp_path: Path) -> None:
    parts, _, _, _ = make_parts(tmp_path)
    (parts / "part-001").unlink()
    got = gpu_parts.prepare(parts, tmp_path / "work")
    assert got.problem == "part-001 missing"
    assert got.wheels == [] and not (tmp_path / "work").exists()


def test_a_corrupt_part_of_the_right_size_is_caught_by_its_sha256(tmp_path: Path) -> None:
    parts, _, _, _ = make_parts(tmp_path)
    data = bytearray((parts / "part-002").read_bytes())
    data[100] ^= 0xFF
    (parts / "part-002").write_bytes(bytes(data))
    got = gpu_parts.prepare(parts, tmp_path / "work")
    assert got.problem == "part-002 corrupt (its sha256 differs from the manifest's)"
    assert got.wheels == []


def test_a_short_part_and_a_missing_manifest_are_said(tmp_path: Path) -> None:
    parts, _, _, _ = make_parts(tmp_path)
    (parts / "part-000").write_bytes(b"x" * 10)
    got = gpu_parts.prepare(parts, tmp_path / "work")
    assert got.problem == f"part-000 corrupt (10 bytes, the manifest says {PART})"
    (parts / gpu_parts.MANIFEST).unlink()
    assert (
        gpu_parts.prepare(parts, tmp_path / "work").problem == f"manifest.json missing in {parts}"
    )


def test_a_wheel_whose_files_differ_from_its_record_is_not_given_back(tmp_path: Path) -> None:
    parts, _, big, _ = make_parts(tmp_path, bad_record=True)
    got = gpu_parts.prepare(parts, tmp_path / "work")
    assert got.problem is not None
    assert f"{big.name}: 1 members differ from its RECORD, e.g. fakedali/data.bin" in got.problem
    assert got.wheels == []
    assert not list((tmp_path / "work" / "wheels").glob("*.whl.tmp"))


def test_stashing_parts_of_a_new_archive_removes_the_old_ones(tmp_path: Path) -> None:
    parts, manifest, _, _ = make_parts(tmp_path / "a")
    dest = tmp_path / "gathered"
    carry_each_part(parts, manifest, dest, tmp_path)
    (tmp_path / "b").mkdir()
    new_parts, new_manifest, _, _ = make_parts(tmp_path / "b")
    new_manifest["archive"]["sha256"] = "0" * 64  # another archive, as a new split gives
    (new_parts / gpu_parts.MANIFEST).write_text(json.dumps(new_manifest))
    carried = tmp_path / "wp"
    shutil.rmtree(carried, ignore_errors=True)
    carried.mkdir()
    shutil.copy(new_parts / gpu_parts.MANIFEST, carried)
    shutil.copy(new_parts / "part-000", carried)
    msgs, whole = gpu_parts.stash(carried, dest)
    assert msgs[0] == f"{dest} held the parts of another archive: removed them"
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json", "part-000"]
    assert whole


def test_the_stash_command_exits_1_for_a_corrupt_carried_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parts, _, _, _ = make_parts(tmp_path)
    carried = tmp_path / "wp"
    carried.mkdir()
    shutil.copy(parts / gpu_parts.MANIFEST, carried)
    (carried / "part-000").write_bytes((parts / "part-000").read_bytes()[:-1] + b"?")
    dest = tmp_path / "gathered"
    argv = ["gpu_check.py", "--stash-part", str(carried), "--dali-parts", str(dest)]
    monkeypatch.setattr(sys, "argv", argv)
    assert gpu_check.main() == 1
    out = capsys.readouterr().out
    assert "part-000 corrupt (its sha256 differs from the manifest's)" in out
    shutil.copy(parts / "part-000", carried)
    assert gpu_check.main() == 0


# --- the report ----------------------------------------------------------------------------


def step1(**kw: object) -> Step:
    rows = [Row(f"test_x::test_{i}", "passed", 1.0, "") for i in range(10)]
    rows.append(Row("test_stateful_loader::test_s", "skipped", 0.0, "could not import 'torchdata'"))
    return Step("step 1", rows, 130.0, "log", "## Device", True, "", **kw)  # type: ignore[arg-type]


DALI_TESTS = ["test_dali::test_mixed", "test_cli_probe_dali::test_probe"]


def test_dali_not_run_is_listed_per_test_and_never_counted_as_passed() -> None:
    dali = gpu_check.dali_not_run("part-002 missing", DALI_TESTS)
    ok, line = gpu_check.summary(step1(), dali)
    assert ok
    assert line == (
        "PASS (step 1): 10 passed, 0 failed, 1 skipped; benchmarks ran; "
        "DALI step not run: part-002 missing"
    )
    _, text = gpu_check.render_report([], step1(), dali, [])
    for name in [*DALI_TESTS, "gpu_bench.py --sections dali"]:
        assert f"| {name} | not run | 0.0 | DALI not installed: part-002 missing |" in text
    assert "Not run: part-002 missing." in text
    assert "| test_stateful_loader::test_s | skipped |" in text


def test_dali_passed_makes_both_steps_pass() -> None:
    rows = [Row(n, "passed", 9.0, "") for n in DALI_TESTS]
    dali = Step("DALI", rows, 95.0, "", "## DALI decode paths\n\n| 10 | ...", True, "")
    ok, text = gpu_check.render_report([], step1(), dali, [])
    assert ok
    assert (
        "- result: **PASS (steps 1 and 2): 10 passed, 0 failed, 1 skipped; benchmarks ran; "
        "DALI step: 2 passed, 0 failed; its benchmark ran**"
    ) in text
    assert f"| {DALI_TESTS[1]} | passed | 9.0 |  |" in text
    assert "## DALI decode paths" in text


def test_a_dali_failure_fails_the_check_and_shows_its_log() -> None:
    rows = [
        Row(DALI_TESTS[0], "passed", 9.0, ""),
        Row(DALI_TESTS[1], "FAILED", 16.0, "AssertionError: probe took 16.0 s"),
    ]
    dali = Step("DALI", rows, 95.0, "E   assert 16.0 < 15", "", True, "")
    ok, text = gpu_check.render_report([], step1(), dali, [])
    assert not ok
    assert (
        "**FAIL (steps 1 and 2): 10 passed, 0 failed, 1 skipped; benchmarks ran; DALI step: "
        in text
    )
    assert "DALI step: 1 passed, 1 failed; its benchmark ran" in text
    assert f"| {DALI_TESTS[1]} | FAILED | 16.0 | AssertionError: probe took 16.0 s |" in text
    assert "E   assert 16.0 < 15" in text


def test_a_failed_dali_benchmark_fails_the_dali_step() -> None:
    rows = [Row(n, "passed", 9.0, "") for n in DALI_TESTS]
    dali = Step("DALI", rows, 95.0, "", "", False, "RuntimeError: probe --loader dali exited 1")
    ok, line = gpu_check.summary(step1(), dali)
    assert not ok and line.endswith("DALI step: 2 passed, 0 failed; its benchmark FAILED")


def test_step_one_with_no_test_passed_fails_even_with_dali_not_run() -> None:
    only_skips = Step("step 1", [Row("test_a::t", "skipped", 0.0, "no GPU")], 5.0)
    ok, line = gpu_check.summary(only_skips, gpu_check.dali_not_run("no parts given", []))
    assert not ok
    assert line == (
        "FAIL (step 1): 0 passed, 0 failed, 1 skipped; benchmarks ran; "
        "DALI step not run: no parts given"
    )


def test_the_time_lines_flag_a_step_one_over_its_target() -> None:
    dali = gpu_check.dali_not_run("no parts given", [])
    fast = gpu_check.timing(20.0, step1(), 0.0, dali, 150.0)
    assert fast == ["- time: set-up 20 s, step 1 130 s (target 240 s); total 150 s"]
    slow = step1()
    slow.seconds = 251.0
    lines = gpu_check.timing(20.0, slow, 30.0, Step("DALI", seconds=90.0), 391.0)
    assert lines == [
        "- time: set-up 20 s, step 1 251 s (target 240 s), DALI install 30 s, "
        "step 2 (DALI) 90 s; total 391 s",
        "- **step 1 took 251 s, over its 240 s target**",
    ]


def test_the_timeouts_keep_step_one_within_its_target_and_the_check_within_a_call() -> None:
    assert gpu_check.TEST_TIMEOUT_S + gpu_check.BENCH_TIMEOUT_S <= gpu_check.STEP1_TARGET_S
    dali = gpu_check.DALI_TEST_TIMEOUT_S + gpu_check.DALI_BENCH_TIMEOUT_S
    # a device call runs 600 s at most; set-up and DALI's install take under a minute each
    assert gpu_check.STEP1_TARGET_S + dali + 120 <= 600


def test_a_hung_gpu_test_fails_alone_and_the_rest_of_its_step_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # at 7fc8e45 one slow test used up step 1's whole limit and the report listed no test
    (tmp_path / "test_hang.py").write_text(
        "import time\nimport pytest\n\npytestmark = pytest.mark.gpu\n\n"
        "def test_hangs():\n    time.sleep(60)\n\n"
        "def test_after_it():\n    assert True\n"
    )
    monkeypatch.setattr(gpu_check, "PER_TEST_TIMEOUT_S", 2)
    rows, _ = gpu_check.run_tests(
        Path(sys.executable), tmp_path / "out.xml", [str(tmp_path / "test_hang.py")], 40
    )
    outcome = {r.test.rsplit("::", 1)[-1]: r.outcome for r in rows}
    assert outcome == {"test_hangs": "FAILED", "test_after_it": "passed"}
    assert "pytest_timeout" in gpu_check.NEEDED  # the limit needs it on the GPU machine


def test_dali_gpu_tests_are_read_from_the_source_of_the_dali_test_files() -> None:
    assert gpu_check.dali_gpu_tests() == [
        "test_dali::test_mixed_decoder_ranges_are_timed_as_gpu_preprocessing",
        "test_cli_probe_dali::test_probe_measures_pillow_and_dali_on_the_same_images",
        "test_cli_probe_dali::test_a_ten_second_dali_probe_of_the_sample_keeps_its_budget_or_says_so",
    ]


def test_a_module_wide_gpu_mark_lists_every_test_of_the_file(tmp_path: Path) -> None:
    source = "import pytest\npytestmark = [pytest.mark.slow, pytest.mark.gpu]\n\n"
    source += "def test_a():\n    pass\n\ndef helper():\n    pass\n\ndef test_b():\n    pass\n"
    for rel in gpu_check.DALI_TEST_FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(
            source if "test_dali.py" in rel else "def test_c():\n    pass\n"
        )
    assert gpu_check.dali_gpu_tests(tmp_path) == ["test_dali::test_a", "test_dali::test_b"]


def test_duplicates_names_a_distribution_saved_in_two_versions() -> None:
    wheels = [
        Path("packaging-26.3-py3-none-any.whl"),
        Path("packaging-26.4-py3-none-any.whl"),
        Path("nvidia_ml_py-13.615.71-py3-none-any.whl"),
    ]
    assert gpu_check.duplicates(wheels) == ["packaging"]
    assert gpu_check.duplicates(wheels[1:]) == []


def test_the_carry_plan_gives_one_call_per_part_then_the_check(tmp_path: Path) -> None:
    parts, manifest, _, _ = make_parts(tmp_path)
    plan = gpu_check.carry_plan(manifest, parts, ".whl", 2_000_000)
    n = len(manifest["parts"])
    for k, part in enumerate(manifest["parts"], 1):
        assert sum(f"call {k} of {n + 1}, here:" in line for line in plan) == 1
        assert sum(f"{parts}/{part['name']} " in line for line in plan) == 1
    assert plan[-1] == (
        f"  call {n + 1} of {n + 1}: carry .whl, run there: make gpu-check WHEELS=.whl "
        "DALI_PARTS=/tmp/ioprobe-dali-parts GPU_REPORT=gpu-check.md"
    )


def test_the_benchmark_sections_are_picked_by_name() -> None:
    pytest.importorskip("torch")
    from tests.benchmarks import gpu_bench

    names = [gpu_bench.section_name(s) for s in gpu_bench.SECTIONS]
    skipped = [gpu_bench.section_name(s) for s in gpu_bench.pick(None, "dali")]
    assert skipped == [n for n in names if n != "dali"]
    assert gpu_bench.pick("dali", None) == [gpu_bench.dali_section]
    with pytest.raises(ValueError, match="no section dal; the sections: device"):
        gpu_bench.pick("dal", None)
