"""Text from the user's world crosses one boundary into every output.

Every free-text field of real records (a probe, a watched DataLoader, a DALI run, a what-if, a
sizing) is filled with generated hostile text: rich markup (``[/]``), emoji codes, terminal
escapes (C0, an 8-bit CSI), bidi overrides, undecodable bytes (surrogates), newlines, quotes,
HTML and Markdown syntax, YAML keys, and URLs whose secrets hide behind a quote, a
credential-named parameter or a bare-token userinfo. The record must then render through the
terminal view (with and without colour), the HTML page, the Markdown summary, the trace, the
compare views and the DLIO export without raising, into text that encodes as UTF-8, holds no
raw control byte, shows the markup literally and holds no secret.

Which fields are free text is found, not listed: a field whose value the loader accepts as any
string is one (``kind`` or a stage name is not), so a field added later is covered.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ioprobe.analysis.compare import compare
from ioprobe.analysis.dlio import dlio_workload
from ioprobe.analysis.report import findings
from ioprobe.errors import IoprobeError
from ioprobe.record import RunRecord
from ioprobe.redact import redact_url, shown
from ioprobe.render import html, markdown, terminal, trace
from ioprobe.render.compare import compare_markdown, render_compare
from ioprobe.render.dlio import to_yaml
from tests.unit.ground.test_fuzz_records import seeds

SECRET = "SEKRITv4lue"
# pieces of hostile text; a URL carrying the secret is always a whole word, as a user's is
ATOMS = (
    "[/]",
    "[bold red]x[/bold red]",
    "[link=http://evil]",
    ":smile:",
    "\x1b]0;pwned\x07",
    "\x1b[2J",
    "\x9b31m",
    "\u202egnp.exe",
    "\u2066",
    "bad\udcff\udcfe",
    "\udc9b",
    "\n# x\nkey: live",
    "\r\n",
    "'",
    '"',
    "<script>alert(1)</script>",
    "&amp;",
    "| col |",
    "*_`~",
    "\\",
    "{{",
    "%s",
)
SECRET_URLS = (
    f"https://alice:pa'{SECRET}@data.example.com/x",
    f"https://h.example/p?access_key={SECRET}&n=1",
    f"https://h.example/p?secret_key={SECRET}",
    f"https://h.example/p?jwt={SECRET}",
    f"https://h.example/p?session={SECRET}",
    f"https://h.example/p?code={SECRET}",
    f"https://h.example/p?credential={SECRET}",
    f"https://{SECRET}@github.com/org/repo",
    f"s3://AKIDEXAMPLE:{SECRET}@bucket/key",
)
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
MARKER = "zq[/]zq"  # markup that must come out literally wherever a free-text field is shown


@st.composite
def hostile(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(ATOMS) | st.text(max_size=6), max_size=4))
    if draw(st.booleans()):
        parts.append(f" {draw(st.sampled_from(SECRET_URLS))} ")
    return "".join(parts)


def _string_paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, str):
        return [path]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _string_paths(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _string_paths(v, (*path, i))]
    return []


def _set(tree: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


@functools.cache
def free_text_paths(seed: int) -> tuple[tuple[Any, ...], ...]:
    """The string fields of seed ``seed`` the loader takes any text for."""
    data = seeds()[seed]
    found = []
    for path in _string_paths(data):
        trial = copy.deepcopy(data)
        _set(trial, path, MARKER)
        try:
            RunRecord.from_json(trial)
        except IoprobeError:
            continue
        found.append(path)
    return tuple(found)


def test_the_records_have_free_text_fields_to_fill() -> None:
    # the property below is only as wide as this: each seed has names, targets, notes
    for i in range(len(seeds())):
        assert len(free_text_paths(i)) >= 3, i


def _views(rec: RunRecord) -> dict[str, str]:
    """Every text ioprobe makes of ``rec``."""
    f = findings(rec)
    out = {
        "terminal": terminal.render(rec, f, width=120),
        "terminal colour": terminal.render(rec, f, width=120, color=True),
        "html": html.render(rec, f),
        "markdown": markdown.render(rec, f),
        "trace": trace.render(rec, f),
    }
    if rec.kind in ("probe", "watch"):
        c = compare(rec, rec, names=(rec.dataset.target, "b.json"))
        out["compare"] = terminal.to_text(render_compare(c), width=120)
        out["compare markdown"] = compare_markdown(c)
    try:
        workload = dlio_workload(rec)
    except ValueError:  # a record DLIO cannot take; the export refuses it in one line
        pass
    else:
        out["dlio"] = to_yaml(workload, [f"from {rec.created} record {rec.dataset.target}"])
    return out


def _check(views: dict[str, str]) -> None:
    for name, text in views.items():
        text.encode("utf-8")  # a lone surrogate fails the write of any output
        plain = re.sub(r"\x1b\[[0-9;]*m", "", text) if name == "terminal colour" else text
        assert RAW_CONTROL.search(plain) is None, (name, RAW_CONTROL.findall(plain)[:3])
        assert SECRET not in text, name
        if name in ("html", "markdown", "compare markdown"):  # a tag of data is text here
            assert "<script>" not in text, name
    json.loads(views["trace"])
    if "dlio" in views:
        doc = yaml.safe_load(views["dlio"])
        assert "key" not in doc  # a newline in a comment's text started no live key


@pytest.mark.parametrize("seed", range(6))
def test_markup_in_every_free_text_field_shows_literally(seed: int) -> None:
    data = copy.deepcopy(seeds()[seed])
    for path in free_text_paths(seed):
        _set(data, path, MARKER)
    views = _views(RunRecord.from_json(data))
    _check(views)
    for name in ("terminal", "html", "trace"):
        assert MARKER in views[name].replace("&#x27;", "'"), name
    assert r"zq\[/\]zq" in views["markdown"]


SETTINGS = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
LONG = int(os.environ.get("IOPROBE_FUZZ_EXAMPLES", "20000")) // 10  # a case renders 6 views


@given(seed=st.integers(0, 5), texts=st.lists(hostile(), min_size=1, max_size=8))
@settings(SETTINGS, max_examples=120)
def test_no_outside_string_breaks_or_leaks_through_any_renderer(
    seed: int, texts: list[str]
) -> None:
    _fill_and_render(seed, texts)


@pytest.mark.long  # deselected by default: `make fuzz` runs it
@given(seed=st.integers(0, 5), texts=st.lists(hostile(), min_size=1, max_size=8))
@settings(SETTINGS, max_examples=LONG)
def test_long_outside_text_run(seed: int, texts: list[str]) -> None:
    _fill_and_render(seed, texts)


@given(text=hostile() | st.text())
@settings(SETTINGS, max_examples=300)
# a port read past the newline on the second pass ("\x0a#"): masked only then
@example(text="[link=http://evil]:smile:\n# x\nkey: live")
def test_the_mask_and_the_escape_never_raise_and_are_stable(text: str) -> None:
    """Any string through the boundary functions: no exception, nothing left to escape, and
    a second pass changes nothing (a masked URL stays masked)."""
    once = shown(text)
    assert shown(once) == once
    assert RAW_CONTROL.search(once) is None
    once.encode("utf-8")
    assert redact_url(redact_url(text)) == redact_url(text)


def _fill_and_render(seed: int, texts: list[str]) -> None:
    data = copy.deepcopy(seeds()[seed])
    for i, path in enumerate(free_text_paths(seed)):
        _set(data, path, texts[i % len(texts)])
    try:
        rec = RunRecord.from_json(data)
    except IoprobeError:
        return  # refused in one line (a text too long for its field, say)
    _check(_views(rec))
