"""Outputs named on the command line are each written whatever becomes of the others: a
renderer that raises costs its own output alone, the record is written first, and the failure
is one line naming what failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from ioprobe.cli import _common
from ioprobe.errors import BadInputError
from ioprobe.record import RunRecord
from tests.unit.analysis.test_whatif import probe_record


def _plan(tmp: Path) -> dict[str, list[str]]:
    return {
        "json": [str(tmp / "run.json")],
        "html": [str(tmp / "run.html")],
        "md": [str(tmp / "run.md")],
        "trace": [str(tmp / "run.trace.json")],
    }


@pytest.mark.parametrize("broken", ["html", "md", "trace"])
def test_a_renderer_that_raises_costs_its_own_output_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    real = _common._render

    def render(module: str, rec: RunRecord, f: object) -> str:
        if module == _common.RENDERERS[broken][0]:
            raise ValueError("boom")
        return real(module, rec, f)  # type: ignore[arg-type]

    monkeypatch.setattr(_common, "_render", render)
    monkeypatch.setattr(_common, "show", lambda rec, f, err=False: None)
    rec = finalize(probe_record())
    with pytest.raises(BadInputError) as caught:
        _common.deliver(rec, _plan(tmp_path))
    flag = _common.RENDERERS[broken][1]
    assert str(caught.value) == f"{flag} failed: ValueError: boom (a bug in ioprobe)"
    assert RunRecord.load(str(tmp_path / "run.json")).dataset.files == rec.dataset.files
    written = {p.name for p in tmp_path.iterdir()}
    expected = {"run.json", "run.html", "run.md", "run.trace.json"}
    assert written == expected - {Path(_plan(tmp_path)[broken][0]).name}


def test_a_summary_that_raises_still_leaves_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def show(rec: RunRecord, f: object, err: bool = False) -> None:
        raise KeyError("summary")

    monkeypatch.setattr(_common, "show", show)
    with pytest.raises(BadInputError, match="the summary failed: KeyError"):
        _common.deliver(finalize(probe_record()), _plan(tmp_path))
    json.loads((tmp_path / "run.trace.json").read_text())
    assert (tmp_path / "run.html").read_text().startswith("<!DOCTYPE html>")
