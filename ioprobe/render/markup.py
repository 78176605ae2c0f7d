"""The page's one way in for text: every string an HTML page or an SVG chart shows crosses
here."""

from __future__ import annotations

import html

from ioprobe.redact import printable


def text_html(value: object) -> str:
    """The page's one way in for text: every character that could open markup is escaped, and
    control characters and undecodable bytes are shown as ``\\xNN`` (a page viewed with
    ``cat`` must not drive the terminal; a lone surrogate would fail the UTF-8 write). Every
    string a page shows goes through here; ``render`` has already passed the record and its
    findings through ``redact.shown_all``."""
    return html.escape(printable(str(value)), quote=True)
