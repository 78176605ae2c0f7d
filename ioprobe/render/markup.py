"""The HTML page's style, inlined so the page needs nothing from the network, and its one way in
for text: every string the page or an SVG chart shows crosses ``text_html``."""

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


CSS = """
rect.pred{fill:#9db4c8}rect.meas{fill:#2f6690}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
color:#1d2329;background:#f6f7f9}
main{max-width:980px;margin:0 auto;padding:24px 20px 60px}
h1{font-size:20px;margin:0 0 4px;word-break:break-all}
h2{font-size:17px;margin:32px 0 8px;border-bottom:1px solid #d5d9de;padding-bottom:4px}
.meta{color:#5b6670;font-size:13px}
.verdict{font-size:19px;font-weight:600;background:#fff;border-left:6px solid #e15759;
padding:14px 18px;margin:18px 0;border-radius:4px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
.verdict.ok{border-left-color:#59a14f}
ol.recs{background:#fff;border-radius:4px;padding:12px 16px 12px 40px;margin:0;
box-shadow:0 1px 2px rgba(0,0,0,.08)}
ol.recs li{margin:6px 0}
.gain{font-weight:600;color:#2d7a2d;white-space:nowrap}
.unchecked{color:#a05a00;font-style:italic}
.evidence{color:#5b6670;font-size:13px}
.card{background:#fff;border-radius:4px;padding:12px 16px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
table{border-collapse:collapse;font-size:14px}
td,th{padding:4px 10px;text-align:left;vertical-align:top}
th{font-weight:600;color:#39424a}
tr+tr td{border-top:1px solid #eceff2}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.heat td{text-align:center;min-width:58px;color:#111}
.note{color:#5b6670;font-size:13px}
svg text{font:12px system-ui,sans-serif;fill:#39424a}
.legend span{display:inline-block;margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
tr.straggler td{font-weight:600;color:#b02a2c}
"""
