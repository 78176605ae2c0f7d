"""The sweep of the tool's own temporary entries that a killed process left: what it removes
(this user's, of dead pids, on this host), and what it never touches or trips on (a link's
target, a filesystem mounted inside, a name another user made to look like ours, a tree
deeper than Python's recursion)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ioprobe.collect import leftovers
from ioprobe.collect.leftovers import own_prefix, parse_mount_points, remove_stale, remove_tree

PREFIX = "ioprobe-run-"


def _dead_pid() -> int:
    ended = subprocess.Popen(["true"])
    ended.wait()
    return ended.pid


def test_a_name_whose_pid_is_not_ascii_digits_is_passed_over_not_raised(tmp_path: Path) -> None:
    # "²".isdigit() is True and int("²") raises: another user's file so named in a shared
    # TMPDIR stopped every user's run with a traceback
    tag = own_prefix(PREFIX, 1).split("-")[-2]
    for name in (f"{PREFIX}²-{tag}-x", f"{PREFIX}١٢-{tag}-x", f"{PREFIX}{'9' * 40}-{tag}-x"):
        (tmp_path / name).write_text("x")
    assert remove_stale(str(tmp_path), PREFIX) == []
    assert len(list(tmp_path.iterdir())) == 3


def test_a_link_named_like_ours_goes_and_its_target_stays(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "keep.txt").write_text("precious")
    sweep = tmp_path / "tmp"
    sweep.mkdir()
    (sweep / f"{own_prefix(PREFIX, _dead_pid())}abc").symlink_to(data)
    assert len(remove_stale(str(sweep), PREFIX)) == 1
    assert (data / "keep.txt").read_text() == "precious" and not list(sweep.iterdir())


def test_a_tree_deeper_than_pythons_recursion_is_removed(tmp_path: Path) -> None:
    stale = tmp_path / f"{own_prefix(PREFIX, _dead_pid())}deep"
    stale.mkdir()
    fd = os.open(stale, os.O_RDONLY)
    for _ in range(1200):  # shutil.rmtree raised RecursionError past about 1,000
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    assert remove_stale(str(tmp_path), PREFIX) == [stale.name]
    assert not stale.exists()


def test_what_is_mounted_inside_is_left_with_the_folders_that_hold_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a bind mount of the user's data inside the folder: rmtree emptied it (the mount table
    # is the seam here; a real bind mount needs root)
    tree = tmp_path / "own"
    (tree / "a" / "mnt").mkdir(parents=True)
    (tree / "a" / "mnt" / "keep.txt").write_text("precious")
    (tree / "a" / "ours.json").write_text("{}")
    (tree / "b").mkdir()
    (tree / "b" / "ours.json").write_text("{}")
    mounted = {str((tree / "a" / "mnt").resolve())}
    monkeypatch.setattr(leftovers, "_mount_points", lambda: mounted)
    assert remove_tree(str(tree)) is False
    assert (tree / "a" / "mnt" / "keep.txt").read_text() == "precious"
    assert not (tree / "a" / "ours.json").exists() and not (tree / "b").exists()
    # a folder that is itself a mount point is not touched at all
    mounted.add(str(tree.resolve()))
    assert remove_tree(str(tree)) is False and (tree / "a" / "mnt" / "keep.txt").exists()


def test_the_mount_table_is_read_with_its_escapes() -> None:
    text = (
        b"22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        b"40 22 0:5 /data /tmp/ioprobe-run-7-x/my\\040data rw - ext4 /dev/sdb rw\n"
    )
    assert parse_mount_points(text) == {"/", "/tmp/ioprobe-run-7-x/my data"}
    assert "/proc" in leftovers._mount_points()  # the real table, read


def test_a_folder_a_running_script_names_in_its_environment_stays_until_it_ends(
    tmp_path: Path,
) -> None:
    # `ioprobe run` killed with SIGKILL leaves its script running from its folder (the hook
    # on PYTHONPATH, the records folder it saves to at its end): a later sweep leaves it
    used = tmp_path / f"{own_prefix(PREFIX, _dead_pid())}used"
    other = tmp_path / f"{own_prefix(PREFIX, _dead_pid())}use"  # a name the first begins with
    for d in (used, other):
        (d / "records").mkdir(parents=True)
    env = {**os.environ, "IOPROBE_RUN_DIR": f"{used}/records", "PYTHONPATH": f"{used}:/x"}
    script = subprocess.Popen(["sleep", "30"], env=env)
    try:
        assert remove_stale(str(tmp_path), PREFIX) == [other.name]
        assert used.is_dir()
    finally:
        script.kill()
        script.wait()
    assert remove_stale(str(tmp_path), PREFIX) == [used.name]
