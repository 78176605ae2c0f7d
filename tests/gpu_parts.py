"""DALI's wheels carried to a GPU machine in parts small enough for one call each.

A call to the borrowed GPU machine carries at most 64 MiB (the checkout included), and DALI's
wheel alone is 198 MB. Where an index is reachable, ``tests/gpu_check.py --download-dali DIR``
fetches the wheels and calls the functions here: ``repack_wheel`` turns DALI's wheel into a
tar.xz of its members (143 MB against the wheel's 198 MB of deflate), ``bundle`` puts that and
the other wheels into one tar, and ``split`` cuts the tar into parts of at most 60 MiB beside
a ``manifest.json`` (each part's name, size and sha256, the whole archive's sha256, what it
holds).

On the GPU machine everything here uses the standard library only (it may lack the xz
binary): ``stash`` copies the parts one call carried into a folder outside the checkout where
they gather over several calls, ``check_parts`` verifies them against the manifest, and
``prepare`` reassembles the archive and gives back installable wheels, DALI's rebuilt from its
members uncompressed (``ZIP_STORED``: fast to write, and pip takes it), every file checked
against the wheel's own RECORD.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

MIB = 1 << 20
PART_BYTES = 60 * MIB
MANIFEST = "manifest.json"
PART_PREFIX = "part-"
REPACKED = ".tar.xz"  # a repacked wheel is carried as "<wheel file name>.tar.xz"
ARCHIVE = "dali-wheels.tar"
FORMAT = 1
CHUNK = 1 << 20


class PartsError(Exception):
    """Why the parts cannot give the wheels, in one line."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


# --- where an index is reachable: wheel -> tar.xz -> one archive -> parts -----------------


def _zip_to_tar(zf: zipfile.ZipFile, tf: tarfile.TarFile) -> tuple[int, int]:
    """Every member of ``zf``, in its order, with its mode and time, into ``tf``; the count
    of members and the bytes of their files."""
    members = unpacked = 0
    for info in zf.infolist():
        ti = tarfile.TarInfo(info.filename.rstrip("/"))
        ti.mtime = calendar.timegm((*info.date_time, 0, 0, -1))
        mode = info.external_attr >> 16
        if info.is_dir():
            ti.type = tarfile.DIRTYPE
            ti.mode = stat.S_IMODE(mode) or 0o755
            tf.addfile(ti)
        else:
            ti.mode = stat.S_IMODE(mode) or 0o644
            ti.size = info.file_size
            with zf.open(info) as src:
                tf.addfile(ti, src)
            unpacked += info.file_size
        members += 1
    return members, unpacked


def repack_wheel(wheel: Path, out: Path) -> dict[str, Any]:
    """``wheel``'s members, in its order, with their modes and times, as a tar.xz at ``out``;
    returns what the manifest says of it.

    Uses the ``xz`` binary on every core where there is one (DALI's 492 MB of members: 73 s on
    2 cores, 143 MB), Python's lzma otherwise (one core: 118 s, 141 MB).
    """
    tmp = out.with_name(out.name + ".tmp")
    xz = shutil.which("xz")
    with zipfile.ZipFile(wheel) as zf, tmp.open("wb") as raw:
        if xz is None:
            with tarfile.open(fileobj=raw, mode="w:xz", preset=6, format=tarfile.PAX_FORMAT) as tf:
                members, unpacked = _zip_to_tar(zf, tf)
        else:
            with subprocess.Popen(
                [xz, "-6", "-T0", "-c"], stdin=subprocess.PIPE, stdout=raw
            ) as proc:
                assert proc.stdin is not None
                with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tf:
                    members, unpacked = _zip_to_tar(zf, tf)
                proc.stdin.close()
            if proc.returncode != 0:
                raise PartsError(f"xz exited {proc.returncode} packing {wheel.name}")
    os.replace(tmp, out)
    return {
        "wheel": wheel.name,
        "wheel_bytes": wheel.stat().st_size,
        "wheel_sha256": sha256_file(wheel),
        "members": members,
        "unpacked_bytes": unpacked,
    }


def bundle(
    files: Iterable[Path], out: Path, repacked: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One plain tar of ``files`` (wheels, and wheels repacked as tar.xz, which compress no
    further); returns the manifest's list of what it holds. ``repacked`` maps a tar.xz's
    name to what ``repack_wheel`` said of it."""
    contents = []
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for path in sorted(files, key=lambda p: p.name):
            ti = tf.gettarinfo(str(path), arcname=path.name)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mode = 0o644
            with path.open("rb") as f:
                tf.addfile(ti, f)
            entry = {"name": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
            entry.update(repacked.get(path.name, {}))
            contents.append(entry)
    return contents


def split(
    archive: Path,
    dest: Path,
    contents: list[dict[str, Any]],
    part_bytes: int = PART_BYTES,
    about: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Cut ``archive`` into ``dest/part-000``, ``part-001``, ... of at most ``part_bytes`` each
    and write ``dest/manifest.json`` (``about`` adds to it); parts of an earlier split there
    are removed first."""
    if part_bytes <= 0:
        raise ValueError("part_bytes must be positive")
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob(PART_PREFIX + "*"):
        old.unlink()
    whole = hashlib.sha256()
    parts: list[dict[str, Any]] = []
    with archive.open("rb") as src:
        while True:
            name = f"{PART_PREFIX}{len(parts):03d}"
            h = hashlib.sha256()
            n = 0
            with (dest / name).open("wb") as out:
                while n < part_bytes and (block := src.read(min(CHUNK, part_bytes - n))):
                    out.write(block)
                    h.update(block)
                    whole.update(block)
                    n += len(block)
            if n == 0:
                (dest / name).unlink()
                break
            parts.append({"name": name, "bytes": n, "sha256": h.hexdigest()})
    manifest = {
        "format": FORMAT,
        "archive": {
            "name": archive.name,
            "bytes": archive.stat().st_size,
            "sha256": whole.hexdigest(),
        },
        "part_bytes": part_bytes,
        "parts": parts,
        "contents": contents,
        **(about or {}),
    }
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


# --- on the GPU machine: standard library only -------------------------------------------


def load_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PartsError(f"{MANIFEST} in {folder} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or "parts" not in data:
        raise PartsError(f"{MANIFEST} in {folder} is not a parts manifest of format {FORMAT}")
    return data


def check_parts(folder: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The manifest in ``folder`` and one line per part that is missing or differs from it
    (no lines: every part is there and whole)."""
    try:
        manifest = load_manifest(folder)
    except PartsError as exc:
        return None, [str(exc)]
    if manifest is None:
        return None, [f"{MANIFEST} missing in {folder}"]
    problems = []
    for part in manifest["parts"]:
        path = folder / part["name"]
        if not path.is_file():
            problems.append(f"{part['name']} missing")
        elif path.stat().st_size != part["bytes"]:
            problems.append(
                f"{part['name']} corrupt ({path.stat().st_size} bytes, the manifest says "
                f"{part['bytes']})"
            )
        elif sha256_file(path) != part["sha256"]:
            problems.append(f"{part['name']} corrupt (its sha256 differs from the manifest's)")
    return manifest, problems


def reassemble(folder: Path, manifest: dict[str, Any], out: Path) -> None:
    """The parts joined into ``out``, checked against the whole archive's sha256."""
    h = hashlib.sha256()
    with out.open("wb") as dst:
        for part in manifest["parts"]:
            with (folder / part["name"]).open("rb") as src:
                while block := src.read(CHUNK):
                    dst.write(block)
                    h.update(block)
    if h.hexdigest() != manifest["archive"]["sha256"]:
        out.unlink()
        raise PartsError("the reassembled archive's sha256 differs from the manifest's")


def _record(text: str) -> dict[str, tuple[str, str]]:
    """A wheel's RECORD: path -> (hash, size); the RECORD's own line has neither."""
    rows = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        path, digest, size = line.rsplit(",", 2)
        rows[path.strip('"')] = (digest, size)
    return rows


def _digest(h: Any) -> str:
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def rebuild_wheel(tar_xz: IO[bytes], out: Path, members: int | None = None) -> None:
    """The wheel at ``out`` rebuilt from a tar.xz stream made by ``repack_wheel``, every member
    stored uncompressed; each file's sha256 and size are checked against the wheel's RECORD
    and every path RECORD lists must be there."""
    seen: dict[str, tuple[str, str]] = {}
    record_text = None
    count = 0
    tmp = out.with_name(out.name + ".tmp")
    with (
        tarfile.open(fileobj=tar_xz, mode="r|xz") as tf,
        zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf,
    ):
        for ti in tf:
            count += 1
            date = time.gmtime(max(ti.mtime, 315532800))[:6]  # a zip cannot date before 1980
            if ti.isdir():
                zi = zipfile.ZipInfo(ti.name + "/", date)
                zi.external_attr = (stat.S_IFDIR | ti.mode) << 16 | 0x10
                zf.writestr(zi, b"")
                continue
            if not ti.isfile():
                raise PartsError(f"{ti.name}: not a file or a folder")
            src = tf.extractfile(ti)
            assert src is not None
            zi = zipfile.ZipInfo(ti.name, date)
            zi.external_attr = (stat.S_IFREG | ti.mode) << 16
            zi.compress_type = zipfile.ZIP_STORED
            zi.file_size = ti.size
            h = hashlib.sha256()
            keep = ti.name.endswith(".dist-info/RECORD")
            buf = bytearray()
            with zf.open(zi, "w") as dst:
                while block := src.read(CHUNK):
                    dst.write(block)
                    h.update(block)
                    if keep:
                        buf += block
            seen[ti.name] = (_digest(h), str(ti.size))
            if keep:
                record_text = buf.decode()
    try:
        if record_text is None:
            raise PartsError(f"{out.name}: no .dist-info/RECORD among its members")
        record = _record(record_text)
        bad = [
            p for p, (digest, size) in record.items() if digest and seen.get(p) != (digest, size)
        ]
        bad += [p for p in seen if p not in record]
        if bad:
            raise PartsError(
                f"{out.name}: {len(bad)} members differ from its RECORD, e.g. {bad[0]}"
            )
        if members is not None and count != members:
            raise PartsError(f"{out.name}: {count} members where the manifest says {members}")
    except PartsError:
        tmp.unlink()
        raise
    os.replace(tmp, out)


def unpack(archive: Path, dest: Path, manifest: dict[str, Any]) -> list[Path]:
    """Every wheel in the archive written to ``dest``, the repacked ones rebuilt."""
    dest.mkdir(parents=True, exist_ok=True)
    known = {c["name"]: c for c in manifest.get("contents", [])}
    wheels = []
    with tarfile.open(archive, "r:") as tf:
        for ti in tf:
            name = ti.name
            if not ti.isfile() or "/" in name or name not in known:
                raise PartsError(f"the archive holds {name!r}, which its manifest does not list")
            src = tf.extractfile(ti)
            assert src is not None
            if name.endswith(REPACKED):
                wheel = dest / name[: -len(REPACKED)]
                rebuild_wheel(src, wheel, known[name].get("members"))
            else:
                wheel = dest / name
                with wheel.open("wb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
            wheels.append(wheel)
    return wheels


@dataclass
class Prepared:
    """What ``prepare`` gave: the wheels, or why there are none, and the time each part took."""

    wheels: list[Path] = field(default_factory=list)
    problem: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def prepare(folder: Path, work: Path) -> Prepared:
    """Verify the parts in ``folder``, reassemble them in ``work`` and give back the wheels
    (rebuilt once per archive: a second call with the same parts reuses them). Never raises
    for a missing or corrupt part: ``problem`` says which, e.g. "part-002 missing"."""
    out = Prepared()
    t0 = time.perf_counter()
    manifest, problems = check_parts(folder)
    out.seconds["verify"] = time.perf_counter() - t0
    if manifest is None or problems:
        out.problem = "; ".join(problems)
        return out
    done = work / ".done"
    sha = manifest["archive"]["sha256"]
    made = done.read_text().splitlines() if done.is_file() else []
    if made[:1] == [sha] and all((work / n).is_file() for n in made[1:]):
        out.wheels = [work / n for n in made[1:]]
        return out
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    archive = work / manifest["archive"]["name"]
    try:
        t0 = time.perf_counter()
        reassemble(folder, manifest, archive)
        out.seconds["reassemble"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        out.wheels = unpack(archive, work / "wheels", manifest)
        out.seconds["unpack and rebuild"] = time.perf_counter() - t0
    except (PartsError, OSError, tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        out.problem = f"the parts are whole but do not unpack: {exc}"
        out.wheels = []
        return out
    finally:
        archive.unlink(missing_ok=True)
    done.write_text("\n".join([sha, *(str(w.relative_to(work)) for w in out.wheels)]) + "\n")
    return out


def stash(src: Path, dest: Path) -> tuple[list[str], bool]:
    """Copy the parts and the manifest that one call carried in ``src`` into ``dest``, where
    the parts of one archive gather over several calls; returns what was done and what is
    still to come, and False where a part there is corrupt or there is no manifest (parts
    not carried yet are expected). Parts of another archive found in ``dest`` are removed
    first."""
    if not src.is_dir():
        raise PartsError(f"{src} is not a folder (carry the folder holding this call's part)")
    carried = load_manifest(src)
    dest.mkdir(parents=True, exist_ok=True)
    msgs = []
    held = load_manifest(dest)
    if carried and held and carried["archive"]["sha256"] != held["archive"]["sha256"]:
        for old in [*dest.glob(PART_PREFIX + "*"), dest / MANIFEST]:
            old.unlink(missing_ok=True)
        msgs.append(f"{dest} held the parts of another archive: removed them")
    copied = []
    for path in sorted(src.iterdir()):
        if path.is_file() and (path.name == MANIFEST or path.name.startswith(PART_PREFIX)):
            tmp = dest / (path.name + ".tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, dest / path.name)
            copied.append(path.name)
    msgs.append(f"copied {', '.join(copied) or 'nothing'} from {src} to {dest}")
    manifest, problems = check_parts(dest)
    if manifest is None:
        return msgs + problems, False
    total = len(manifest["parts"])
    missing = [p for p in problems if p.endswith(" missing")]
    if not problems:
        msgs.append(f"all {total} parts are in {dest} and match the manifest")
    else:
        msgs.append(f"{total - len(missing)} of {total} parts in {dest}; " + "; ".join(problems))
    return msgs, len(missing) == len(problems)
