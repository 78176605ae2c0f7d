"""A small SVG chart kit for the HTML page: axes, ticks, lines, legends, drawn as strings.

Coordinates are short and stable (one decimal, no trailing zeros) so the same record always
gives the same bytes; every label crosses ``markup.text_html``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ioprobe import units
from ioprobe.render.markup import text_html

W = 760  # chart width in CSS pixels
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
STALL = "#e15759"
COMPUTE = "#4e79a7"
Scale = Callable[[float], float]  # a value to its coordinate on one axis


def n(x: float) -> str:
    # short, stable coordinates keep the page small and byte-identical run to run
    return f"{x:.1f}".rstrip("0").rstrip(".")


def svg(width: float, height: float, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{n(width)}" height="{n(height)}" '
        f'viewBox="0 0 {n(width)} {n(height)}" role="img" aria-label="{text_html(label)}">'
        + "".join(body)
        + "</svg>"
    )


def ticks(top: float, n: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [step * i for i in range(math.ceil(top / step - 1e-9) + 1)]


def log_axis(lo_v: float, hi_v: float, left: float, plot: float) -> tuple[Scale, list[float]]:
    """Whole decades around the values, a tick at each."""
    lo = 10 ** math.floor(math.log10(lo_v))
    hi = 10 ** math.ceil(math.log10(hi_v))

    def x(v: float) -> float:
        return left + plot * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    return x, [10.0**k for k in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]


def linear_axis(hi_v: float, left: float, plot: float) -> tuple[Scale, list[float]]:
    """From zero to the round tick at or above the largest value."""
    marks = ticks(hi_v)
    hi = marks[-1]

    def x(v: float) -> float:
        return left + plot * v / hi

    return x, marks


def y_grid(ticks: Sequence[float], y: Scale, left: int, right: int) -> list[str]:
    """A light horizontal line across the plot at each tick, its value left of the axis."""
    return [
        f'<line x1="{left}" y1="{n(y(t))}" x2="{right}" y2="{n(y(t))}" stroke="#e3e6ea"/>'
        f'<text x="{left - 6}" y="{n(y(t) + 4)}" text-anchor="end">{units.figure(t)}</text>'
        for t in ticks
    ]


def y_title(mid: float, text: str) -> str:
    """The y axis's title, turned to run up the axis; ``text`` is already escaped."""
    return (
        f'<text x="12" y="{mid}" transform="rotate(-90 12 {mid})" '
        f'text-anchor="middle">{text}</text>'
    )


def legend(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="legend">'
        + "".join(
            f'<span><i style="background:{c}"></i>{text_html(name)}</span>' for name, c in items
        )
        + "</div>"
    )


def line_chart(
    xs: Sequence[float],
    lines: Sequence[tuple[str, Sequence[float | None]]],
    x_label: str,
    y_label: str,
    x_names: Sequence[str] | None = None,
    shade: Sequence[tuple[float, float]] = (),
) -> str:
    """Lines over shared x positions; with ``x_names`` the positions are evenly spaced
    categories (concurrency 1, 2, 4, ...) rather than a numeric axis. ``shade`` lays a light
    band behind the lines over each (from, to) span of a numeric axis."""
    left, bottom, height = 70, 36, 240
    plot_w, plot_h = W - left - 16, height - bottom - 12
    ticks = line_ticks(lines)
    top = ticks[-1]
    px = x_categories(len(xs), left, plot_w) if x_names is not None else x_numeric(xs, left, plot_w)

    def py(v: float) -> float:
        return 12 + plot_h * (1 - v / top)

    body = y_grid(ticks, py, left, W - 16)
    body += shades(shade if x_names is None else (), px, left, W - 16, 12, plot_h)
    body += x_labels(xs, x_names, px, height - 18)
    body.append(
        f'<text x="{left + plot_w / 2}" y="{height - 2}" text-anchor="middle">{text_html(x_label)}</text>'
        + y_title(12 + plot_h / 2, text_html(y_label))
    )
    colours = [PALETTE[k % len(PALETTE)] for k in range(len(lines))]
    for (_, ys), colour in zip(lines, colours, strict=True):
        body += polyline([(px(i, xs[i]), py(v)) for i, v in enumerate(ys) if v is not None], colour)
    keys = [(name, colour) for (name, _), colour in zip(lines, colours, strict=True)]
    return legend(keys) + svg(W, height, body, f"{y_label} vs {x_label}")


def shades(
    spans: Sequence[tuple[float, float]], px: XScale, left: int, right: int, top: int, height: int
) -> list[str]:
    """A band over each (from, to) span of the x axis, clipped to the plot."""
    out = []
    for a, b in spans:
        x0, x1 = max(px(0, a), left), min(px(0, b), right)
        if x1 > x0:
            out.append(
                f'<rect x="{n(x0)}" y="{top}" width="{n(max(x1 - x0, 1))}" height="{height}" '
                f'fill="{STALL}" fill-opacity="0.15"/>'
            )
    return out


def line_ticks(lines: Sequence[tuple[str, Sequence[float | None]]]) -> list[float]:
    """The y axis's ticks: from zero to the round value at or above every line's top."""
    vals = [v for _, ys in lines for v in ys if v is not None]
    return ticks(max(vals, default=1.0) or 1.0)


# An x position from a point's index and its value: categories use the one, numbers the other.
XScale = Callable[[int, float], float]


def x_categories(n: int, left: int, plot_w: int) -> XScale:
    span = max(n - 1, 1)

    def px(i: int, v: float) -> float:
        return left + plot_w * (i / span if n > 1 else 0.5)

    return px


def x_numeric(xs: Sequence[float], left: int, plot_w: int) -> XScale:
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    width = (x1 - x0) or 1.0

    def px(i: int, v: float) -> float:
        return left + plot_w * (v - x0) / width

    return px


def x_labels(xs: Sequence[float], names: Sequence[str] | None, px: XScale, y: int) -> list[str]:
    """A label per category, or round ticks within the range of the numeric positions."""
    if names is not None:
        return [
            f'<text x="{n(px(i, 0))}" y="{y}" text-anchor="middle">{text_html(name)}</text>'
            for i, name in enumerate(names)
        ]
    if not xs:
        return []
    lo, hi = min(xs), max(xs)
    return [
        f'<text x="{n(px(0, t))}" y="{y}" text-anchor="middle">{units.figure(t)}</text>'
        for t in ticks(hi)
        if t <= hi + 1e-9 and t >= lo - 1e-9
    ]


def polyline(pts: Sequence[tuple[float, float]], colour: str) -> list[str]:
    if not pts:
        return []
    out = [
        f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
        + " ".join(f"{n(a)},{n(b)}" for a, b in pts)
        + '"/>'
    ]
    # a marker per point only while the points are few enough to tell apart
    if len(pts) <= 24:
        out += [f'<circle cx="{n(a)}" cy="{n(b)}" r="3" fill="{colour}"/>' for a, b in pts]
    return out
