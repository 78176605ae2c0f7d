"""One rule per quantity: the units module's rules, and a check that no other module formats
bytes or byte rates by hand (a division by 1e6 inside an f-string, or a figure followed by a
unit such as " MB"), so one report cannot print the same quantity two ways."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ioprobe import units

PACKAGE = Path(units.__file__).parent
SCALES = {1e3, 1e6, 1e9, 1e12, 1024, 1 << 20, 1 << 30}
UNIT_AFTER = re.compile(r"^ ?(B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\b")


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (812, "812 B"),
        (110_300, "110 kB"),
        (4_210_000, "4.21 MB"),
        (52_400_000, "52.4 MB"),
        (1_500_000_000, "1.5 GB"),
        (2_345_000_000_000_000, "2,345 TB"),
        (None, "-"),
    ],
)
def test_data_sizes_are_decimal_with_three_significant_digits(n: float | None, text: str) -> None:
    assert units.size(n) == text


def test_read_rates_are_sizes_per_second() -> None:
    assert units.bandwidth(812e6) == "812 MB/s"
    assert units.bandwidth(1.98e9) == "1.98 GB/s"
    assert units.bandwidth(None) == "-"


@pytest.mark.parametrize(
    ("n", "text"),
    [(512, "512 B"), (64 << 10, "64 KiB"), (256 << 20, "256 MiB"), (31.4 * (1 << 30), "31.4 GiB")],
)
def test_memory_is_binary_as_the_os_reports_it(n: float, text: str) -> None:
    assert units.memory(n) == text


def test_a_table_column_holds_the_figure_in_its_own_unit() -> None:
    assert units.in_unit(25.13e9, "GB") == "25.1"
    assert units.in_unit(1234.5e6, "MB") == "1,234"
    assert units.in_unit(None, "GB") == "-"


def test_samples_per_second_keep_one_decimal_below_a_hundred() -> None:
    assert units.samples_per_s(12.34) == "12.3"
    assert units.samples_per_s(12_345.6) == "12,346"


def _scaled(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.right, ast.Constant):
            if isinstance(n.op, ast.Div) and n.right.value in SCALES:
                return True
            if isinstance(n.op, ast.RShift | ast.FloorDiv) and n.right.value in {10, 20, 30}:
                return True
    return False


def stray_formatting(source: str) -> list[str]:
    """f-string parts that format bytes outside the units module: a scaled value, or a
    formatted value followed by a unit."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.JoinedStr):
            continue
        for a, b in zip(node.values, [*node.values[1:], None], strict=True):
            if not isinstance(a, ast.FormattedValue):
                continue
            if _scaled(a.value):
                found.append(f"{node.lineno}: {ast.unparse(a.value)}")
            elif isinstance(b, ast.Constant) and UNIT_AFTER.match(str(b.value)):
                found.append(f"{node.lineno}: {ast.unparse(a.value)}{b.value[:8]}")
    return found


def test_the_check_finds_hand_formatted_bytes() -> None:
    assert stray_formatting('x = f"{n / 1e6:.1f} MB"')
    assert stray_formatting('x = f"{mb:,.0f} MB from"')
    assert stray_formatting('x = f"{n >> 20} MiB"')
    assert not stray_formatting('x = f"{units.size(n)} from"')


def test_no_module_formats_bytes_by_hand() -> None:
    stray = {
        str(p.relative_to(PACKAGE)): found
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "units.py" and (found := stray_formatting(p.read_text()))
    }
    assert not stray, stray
