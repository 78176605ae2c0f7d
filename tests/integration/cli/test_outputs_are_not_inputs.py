"""No output replaces a file the command reads: ``report run.json --html run.json`` would put
a page where the record was. Every such command refuses in one line before anything is
written, and the record is left as it was; an empty file name is refused too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, run_cli
from tests.unit.ground.test_record import make_record


@pytest.fixture
def record(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    make_record().save(path)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{r}", "--html", "{r}"],
        ["report", "{r}", "-o", "{same}"],
        ["export", "dlio", "{r}", "-o", "{r}"],
        ["size", "{r}", "--gpus", "1", "--md", "{r}"],
        ["whatif", "{r}", "--workers", "2", "--json", "{same}"],
        ["compare", "{r}", "{r}", "--md", "{r}"],
    ],
)
def test_an_output_naming_the_input_is_refused_and_the_input_kept(
    record: Path, args: list[str]
) -> None:
    before = record.read_bytes()
    # the same file by another name: through a link, and as a relative path
    link = record.parent / "same.json"
    link.symlink_to(record)
    result = run_cli(*(a.format(r=record, same=link) for a in args))
    assert_one_line_error(result, "is the file this command reads", "would replace it")
    assert record.read_bytes() == before


@pytest.mark.parametrize(
    "args", [["export", "dlio", "{r}", "-o", ""], ["report", "{r}", "--html", ""]]
)
def test_an_empty_output_name_is_refused(record: Path, args: list[str]) -> None:
    assert_one_line_error(run_cli(*(a.format(r=record) for a in args)), "an empty file name")


@pytest.mark.parametrize(
    "args",
    [
        ["report", "{r}", "--html", "nosuch/../run.json"],
        ["whatif", "{r}", "--workers", "2", "--json", "nosuch/../run.json"],
        ["compare", "{r}", "{r}", "--md", "x/y/../../run.json"],
    ],
)
def test_a_path_through_a_missing_folder_is_refused_where_it_folded_onto_the_input(
    record: Path, args: list[str]
) -> None:
    # "nosuch/../run.json" names nothing (the kernel stops at nosuch), but folded as a
    # string it was run.json: the record was replaced by the page
    before = record.read_bytes()
    result = run_cli(*(a.format(r=record.name) for a in args), cwd=record.parent)
    assert_one_line_error(result, "no such directory")
    assert record.read_bytes() == before


@pytest.mark.parametrize("cmd", ["run", "tune"])
def test_an_output_naming_the_watched_script_is_refused(tmp_path: Path, cmd: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    before = script.read_bytes()
    result = run_cli(cmd, "--md", str(script), "--", sys.executable, str(script))
    assert_one_line_error(result, "is the file this command reads", "would replace it")
    assert script.read_bytes() == before


def test_columns_zero_still_shows_the_summary(record: Path) -> None:
    # rich rendered every view at a width of nothing: stdout empty, exit 0
    result = run_cli("report", str(record), env={"COLUMNS": "0"})
    assert result.returncode == 0 and len(result.stdout.splitlines()) > 3, result.stderr
