"""A worker's module reads are the interpreter's: the import system's reads of module files
are counted as ioprobe's own (not the dataset's) once a worker has patched its file loaders;
a data file read with open() is not; patching twice counts once. Run in a fresh interpreter:
the patch lasts as long as the process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SCRIPT = """
import importlib, sys
sys.path.insert(0, {repo!r})
sys.path.insert(0, {mods!r})
from ioprobe.loaders import torch_worker as wt
wt._count_module_reads()
wt._count_module_reads()  # a second call changes nothing
before = wt._S.own
import lazy_module  # source read (and bytecode written, not read)
after_import = wt._S.own
with open({data!r}, "rb") as fh:
    fh.read()
after_data = wt._S.own
print(after_import - before, after_data - after_import)
"""


def test_module_files_imported_count_as_own_reads_and_data_files_do_not(
    tmp_path: Path,
) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    source = "DATA = " + repr("x" * 100_000) + "\n"
    (mods / "lazy_module.py").write_text(source)
    data = tmp_path / "shard.bin"
    data.write_bytes(b"\0" * 50_000)
    script = SCRIPT.format(repo=str(REPO), mods=str(mods), data=str(data))
    out = subprocess.run(
        [sys.executable, "-B", "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [int(x) for x in out] == [len(source), 0]
