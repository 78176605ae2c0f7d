"""A Python started with -I, -E or -S runs the script without ioprobe's hook: `run` says so
before the script starts and at its end, where it said no DataLoader was iterated."""

from __future__ import annotations

import sys

import pytest

from ioprobe.cli.run import hook_skipped
from tests.support.cli import run_cli


@pytest.mark.parametrize(
    ("cmd", "flag"),
    [
        (("python", "-I", "train.py"), "-I"),
        (("/usr/bin/python3.11", "-uE", "train.py"), "-E"),
        (("python3", "-W", "ignore", "-S", "train.py"), "-S"),
        (("python3", "-Wignore", "-Xdev", "-I", "-m", "train"), "-I"),
        (("python", "-X", "importtime", "-Es", "x.py"), "-E"),
        (("python", "train.py", "-I"), None),  # the script's own argument
        (("python", "-m", "train", "-E"), None),
        (("python", "-c", "import x", "-S"), None),
        (("python", "-W", "-I", "train.py"), None),  # -I is -W's argument here
        (("torchrun", "-I", "train.py"), None),  # not a Python interpreter
        (("python", "--check-hash-based-pycs", "default", "-I", "t.py"), "-I"),
    ],
)
def test_the_option_that_skips_the_hook_is_found_among_pythons_own(
    cmd: tuple[str, ...], flag: str | None
) -> None:
    assert hook_skipped(cmd) == flag


SCRIPT = (
    "from torch.utils.data import DataLoader\n"
    "print(sum(len(b) for b in DataLoader(list(range(10)), batch_size=2)))\n"
)


def test_run_of_an_isolated_python_says_nothing_is_watched_and_why() -> None:
    proc = run_cli("run", "--", sys.executable, "-I", "-c", SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "10\n"  # the script ran as it would
    first, *_, last = proc.stderr.strip().splitlines()
    assert first.startswith("ioprobe: python") and "-I keeps ioprobe's hook from loading" in first
    assert last == "ioprobe: nothing was watched: the script's Python ran with -I"
    assert "no DataLoader was iterated" not in proc.stderr
