"""Names from the user's world through the real CLI: rich markup, terminal escapes, an 8-bit
CSI, bidi overrides and bytes that are not UTF-8 in a Dataset class, a directory or a record,
and a local directory whose path holds ``://``. Every output asked for is written, the exit
code is the command's (the script's under ``run``), nothing raw reaches the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ioprobe.record import RunRecord
from tests.fixtures.hostile_train import NAME
from tests.support.cli import REPO, run_cli
from tests.support.servers import make_files

# bytes of raw control that no output may hold: ESC, BEL, an 8-bit CSI (C1 0x9b as a byte of
# a file name, and U+009B encoded), a bidi override
RAW = (b"\x1b]", b"\x07", b"\xc2\x9b", b"\xe2\x80\xae")


def _cli_bytes(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """The CLI with its output as bytes, under PYTHONIOENCODING=utf-8 (the setting that made
    the terminal view die on an undecodable name)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "ioprobe", *args],
        capture_output=True,
        cwd=REPO,
        env={**full, **(env or {})},
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def _outputs(tmp: Path, trace: bool = True) -> list[str]:
    return [
        *("--json", str(tmp / "run.json"), "--html", str(tmp / "run.html")),
        *("--md", str(tmp / "run.md")),
        *(("--trace", str(tmp / "run.trace.json")) if trace else ()),
    ]


def _written(tmp: Path, trace: bool = True) -> dict[str, str]:
    """Every output, read as strict UTF-8 (a lone surrogate would have failed the write)."""
    names = ("run.json", "run.html", "run.md", *(("run.trace.json",) if trace else ()))
    texts = {n: (tmp / n).read_bytes().decode("utf-8") for n in names}
    if trace:
        json.loads(texts["run.trace.json"])
    return texts


def _clean(*blobs: bytes) -> None:
    for blob in blobs:
        for raw in RAW:
            assert raw not in blob, raw


@pytest.mark.parametrize("script_exit", [0, 3])
def test_a_dataset_class_named_with_markup_loses_no_output_and_keeps_the_exit_code(
    tmp_path: Path, script_exit: int
) -> None:
    proc = _cli_bytes(
        "run",
        *_outputs(tmp_path),
        "--",
        sys.executable,
        "-m",
        "tests.fixtures.hostile_train",
        str(script_exit),
    )
    assert proc.returncode == script_exit, proc.stderr.decode(errors="replace")
    assert b"Traceback" not in proc.stderr and b"MarkupError" not in proc.stderr
    texts = _written(tmp_path)
    watched = RunRecord.load(str(tmp_path / "run.json")).watch
    assert watched is not None and watched.settings.dataset == NAME  # the record keeps it exact
    assert b"Evil[/]Set[bold]\\x1b]0;pwned\\x07\\x9b\\u202e" in proc.stderr  # shown as text
    _clean(proc.stderr, *(t.encode() for n, t in texts.items() if n != "run.json"))


@pytest.fixture
def undecodable_dir(tmp_path: Path) -> Path:
    name = os.fsdecode(b"bad\xff\xfe\x9b[/]data")  # surrogateescape'd, as Python lists it
    d = tmp_path / name
    make_files(d, 5, 4_000, seed=2)
    return d


def test_a_directory_whose_name_is_not_utf8_probes_and_renders_everywhere(
    undecodable_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc = _cli_bytes("probe", str(undecodable_dir), "--time-budget", "3", *_outputs(out))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"Traceback" not in proc.stderr
    texts = _written(out)
    _clean(proc.stdout, proc.stderr, *(t.encode() for n, t in texts.items() if n != "run.json"))
    assert b"\x9b" not in proc.stdout  # the raw byte of the name, an 8-bit CSI
    assert b"bad\\xff\\xfe\\x9b[/]data" in proc.stdout  # the terminal view shows the bytes
    assert r"bad\\xff\\xfe\\x9b\[/\]data" in texts["run.md"]
    # the report of the saved record renders the same, on the terminal and to pages
    again = _cli_bytes("report", str(out / "run.json"))
    assert again.returncode == 0, again.stderr.decode(errors="replace")
    _clean(again.stdout)


def test_a_local_directory_whose_path_holds_a_scheme_is_read_as_local(tmp_path: Path) -> None:
    d = tmp_path / "runs" / "http:" / "" / "host"  # the path ".../runs/http://host"
    make_files(d, 4, 4_000, seed=3)
    target = f"{tmp_path}/runs/http://host"
    assert os.path.isdir(target)
    proc = run_cli("probe", target, "--time-budget", "3", "-q", "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    rec = RunRecord.load(str(tmp_path / "r.json"))
    assert rec.dataset.files == 4 and rec.dataset.target == target


CATALOG = """
[classes."fast[/]nvme"]
label = "Evil [bold]label[/] \\u001b]0;pwned\\u0007"
scope = "local"
seq_read_MBps = 6000
iops_4k = 900000
iops_128k = 45000
latency_ms = 0.1
source = "https://wiki:pa'SEKRIT1@intra.example/disks?token=SEKRIT2"
"""
COSTS = """
currency = "EUR[/]"
gpu = 30000
core = 150
[storage]
"fast[/]nvme" = 900
"""


def test_a_catalog_and_prices_with_markup_and_credentials_render_and_leak_nothing(
    tmp_path: Path,
) -> None:
    from ioprobe.analysis import finalize
    from tests.unit.analysis.test_whatif import probe_record

    run = tmp_path / "run.json"
    finalize(probe_record()).save(run)
    (tmp_path / "cat.toml").write_text(CATALOG)
    (tmp_path / "cost.toml").write_text(COSTS)
    out = tmp_path / "out"
    out.mkdir()
    proc = _cli_bytes(
        "size",
        str(run),
        "--gpus",
        "1,2",
        "--catalog",
        str(tmp_path / "cat.toml"),
        "--cost",
        str(tmp_path / "cost.toml"),
        *_outputs(out, trace=False),  # a sizing has no timeline
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    texts = _written(out, trace=False)
    terminal = _cli_bytes(
        "size",
        str(run),
        "--gpus",
        "1,2",
        "--catalog",
        str(tmp_path / "cat.toml"),
        "--cost",
        str(tmp_path / "cost.toml"),
    )
    assert terminal.returncode == 0, terminal.stderr.decode(errors="replace")
    assert b"fast[/]nvme" in terminal.stdout  # the class's name, as text
    for blob in (proc.stdout, proc.stderr, terminal.stdout, *(t.encode() for t in texts.values())):
        assert b"SEKRIT" not in blob
    _clean(terminal.stdout, *(t.encode() for n, t in texts.items() if n != "run.json"))


def test_files_a_script_leaves_beside_the_records_lose_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = run_cli(
        "run", "--json", str(out), "--", sys.executable, "-m", "tests.fixtures.litter_train", "4"
    )
    assert proc.returncode == 4, proc.stderr  # the script's
    assert "Traceback" not in proc.stderr
    watched = RunRecord.load(str(out)).watch
    assert watched is not None and sum(e.samples for e in watched.epochs) == 48
    # the damaged file under a record's name is named once; the script's own files are not
    lost = [line for line in proc.stderr.splitlines() if "a record was lost" in line]
    assert len(lost) == 1 and "loader-1-0.json" in lost[0], proc.stderr
    assert "notes.json" not in proc.stderr


@pytest.mark.parametrize("how", ["remove", "replace"])
def test_a_script_that_takes_the_records_folder_away_keeps_its_exit_code(
    tmp_path: Path, how: str
) -> None:
    proc = run_cli(
        "run", "--json", str(tmp_path / "run.json"), "--",
        sys.executable, "-m", "tests.fixtures.litter_train", "0", how,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr  # the script's, not a crash of ioprobe's
    assert "Traceback" not in proc.stderr
    assert "removed or replaced the folder its records were saved in" in proc.stderr
    assert "no DataLoader was iterated" not in proc.stderr


def test_a_script_ending_by_os_exit_is_not_said_to_have_iterated_nothing() -> None:
    proc = run_cli("run", "--", sys.executable, "-m", "tests.fixtures.os_exit_train")
    assert proc.returncode == 0, proc.stderr
    assert "no DataLoader was iterated" not in proc.stderr
    assert "made a DataLoader but saved no record" in proc.stderr
    assert "os._exit" in proc.stderr


def test_the_dlio_export_keeps_outside_text_in_its_comments(tmp_path: Path) -> None:
    import yaml

    from ioprobe.analysis import finalize
    from tests.unit.analysis.test_whatif import probe_record

    rec = finalize(probe_record())
    rec.created = "2026-01-01\nlive_key: injected"
    rec.ioprobe_version = "9.9\nversion_key: injected"
    run = tmp_path / "run\nfile_key: injected.json"  # a file name may hold a newline
    rec.save(run)
    proc = run_cli("export", "dlio", str(run), "-o", str(tmp_path / "w.yaml"))
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load((tmp_path / "w.yaml").read_text())
    assert not {"live_key", "version_key", "file_key"} & set(doc)
    assert "live_key: injected" in (tmp_path / "w.yaml").read_text()  # shown, as a comment


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}],
    ids=["ascii", "C locale"],
)
def test_an_ascii_terminal_gets_the_summary_with_ascii_marks(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from ioprobe.analysis import finalize
    from tests.unit.analysis.test_whatif import probe_record

    finalize(probe_record()).save(tmp_path / "run.json")
    proc = _cli_bytes("report", str(tmp_path / "run.json"), env=env)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"UnicodeEncodeError" not in proc.stderr
    proc.stdout.decode("ascii")  # every byte ASCII
    assert b"What to change" in proc.stdout
    # the bars and arrows come out as ASCII marks, not as '?'
    assert b"####" in proc.stdout and b"-> " in proc.stdout, proc.stdout.decode()


@pytest.mark.parametrize("folder", ["x\npwned", "x\x1b[2Jy", "${oc.env:HOME}/d"])
def test_a_dlio_data_folder_with_a_control_character_is_refused(
    tmp_path: Path, folder: str
) -> None:
    from ioprobe.analysis import finalize
    from tests.unit.analysis.test_whatif import probe_record

    finalize(probe_record()).save(tmp_path / "run.json")
    out = tmp_path / "w.yaml"
    proc = run_cli(
        "export", "dlio", str(tmp_path / "run.json"), "-o", str(out), "--data-folder", folder
    )
    assert proc.returncode == 2 and "--data-folder" in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_a_record_saved_to_an_empty_name_is_refused_in_ioprobes_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ioprobe.analysis import finalize
    from ioprobe.errors import IoprobeError
    from tests.unit.analysis.test_whatif import probe_record

    # '' is the working directory to os.path: the write must not rename a file over it
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(IoprobeError, match="an empty file name"):
        finalize(probe_record()).save("")
    assert work.is_dir() and os.listdir(tmp_path) == ["work"] and not os.listdir(work)


def test_an_output_name_ending_in_a_slash_is_refused_and_bytes_paths_are_taken(
    tmp_path: Path,
) -> None:
    from ioprobe.analysis import finalize
    from tests.unit.analysis.test_whatif import probe_record

    rec = finalize(probe_record())
    rec.save(tmp_path / "run.json")
    proc = run_cli("report", str(tmp_path / "run.json"), "--json", str(tmp_path / "x.json") + "/")
    assert proc.returncode == 2 and "names a directory" in proc.stderr, proc.stderr
    assert not (tmp_path / "x.json").exists()  # "x.json/" asked for a folder, not this file
    rec.save(os.fsencode(tmp_path / "b.json"))  # as open() takes a bytes path
    assert RunRecord.load(os.fsencode(tmp_path / "b.json")).kind == rec.kind
