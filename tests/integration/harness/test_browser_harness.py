"""The headless-Chromium helper itself (tests/support/browser.py), on pages written into tmp_path."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.support.browser import chromium_path, non_blank_fraction, open_page

pytestmark = pytest.mark.slow


def _require_chromium() -> None:
    # Fail, never skip: a skipped browser test would hide a page that went unchecked.
    assert chromium_path() is not None, (
        "Chromium is not installed (no /usr/bin/chromium, no `chromium` on PATH); "
        "`make chromium` installs it (`make test` does so itself)"
    )


def test_page_text_screenshot_and_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require_chromium()
    profiles = tmp_path / "tmp"
    profiles.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(profiles))  # where the helper's profile goes
    page = tmp_path / "page.html"
    page.write_text(
        "<!doctype html><title>harness</title>"
        '<h1 id="v">hello</h1>'
        '<div style="width:400px;height:300px;background:#c0392b"></div>'
    )

    result = open_page(page, ["#v", "#absent"])

    assert result.texts == {"#v": "hello", "#absent": None}
    assert result.requests == [page.resolve().as_uri()]
    assert result.title == "harness"
    assert result.console_errors == []
    assert non_blank_fraction(result.screenshot_png) > 0.01
    assert list(profiles.iterdir()) == []  # the throwaway profile was removed


def test_external_request_is_reported(tmp_path: Path) -> None:
    _require_chromium()
    page = tmp_path / "page.html"
    external = "http://127.0.0.1:9/x.png"  # discard port: nothing listens, refused at once
    page.write_text(f'<!doctype html><p>offline?</p><img src="{external}">')

    result = open_page(page, [])

    assert result.requests == [page.resolve().as_uri(), external]
