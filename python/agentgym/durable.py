"""Files a run writes so that a crash, a full disk or a shortage of descriptors costs as little
as possible.

- ``write_atomic``: a file replaced whole (a temporary file beside it, fsynced, then renamed,
  and the directory fsynced), so a reader or a resumed run sees the old file or the new one,
  never half of one.
- ``with_descriptors``: calls that need a descriptor (opening a file) retried while the
  process has none left (``EMFILE``/``ENFILE``: a flood of connections holds them), waiting
  between tries, instead of failing the run mid-step.
- ``DiskFull``: the one-line error a full disk becomes (``ENOSPC``, ``EDQUOT``).
- ``write_manifest`` / ``manifest_problem``: a directory's files with their sizes and SHA-256
  (``manifest.json``), written when a checkpoint is complete and checked before it is
  loaded; ``newest_intact`` picks the newest checkpoint of a root that passes the check.
  Torch-free, so the launcher can tell which checkpoint a run resumes from.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
DESCRIPTOR_WAIT_S = 120.0
"""How long a call waits for a descriptor before its error goes up."""
MANIFEST = "manifest.json"
"""A directory's files (relative paths), each with its size and SHA-256."""
_STEP_DIR = re.compile(r"step_(\d+)$")


class DiskFull(OSError):
    """Writing ``path`` failed for want of space; ``str()`` is one line saying so."""

    def __init__(self, path: str | Path, cause: OSError):
        super().__init__(cause.errno, f"no space left to write {path} ({cause.strerror})")


def with_descriptors(call: Callable[[], T], what: str, wait_s: float = DESCRIPTOR_WAIT_S) -> T:
    """``call()``, tried again every half second for up to ``wait_s`` while it fails for want
    of a file descriptor (logged once); other errors, and the last one, go up."""
    deadline = time.monotonic() + wait_s
    logged = False
    while True:
        try:
            return call()
        except OSError as e:
            if e.errno not in OUT_OF_DESCRIPTORS or time.monotonic() > deadline:
                raise
            if not logged:
                log.warning("%s: no file descriptor left (%s); waiting for one", what, e)
                logged = True
            time.sleep(0.5)


def fsync_dir(path: str | Path) -> None:
    """Make a rename or a new file in directory ``path`` durable (where directories can be
    opened: POSIX)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: str | bytes, *, mode: int = 0o666) -> None:
    """Replace ``path`` with ``data`` whole and durably (see the module doc); a full disk is a
    ``DiskFull`` and leaves no temporary file behind."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = with_descriptors(lambda: os.open(tmp, flags, mode), f"writing {path}")
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in DISK_FULL:
            raise DiskFull(path, e) from None
        raise
    fsync_dir(path.parent)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(directory: str | Path) -> None:
    """Fsync every file under ``directory`` and record it in ``MANIFEST`` (written last, and
    fsynced with the directories): a checkpoint is whole once its manifest is there."""
    directory = Path(directory)
    entries = {}
    for path in _files(directory):
        with path.open("rb") as f:
            os.fsync(f.fileno())
        entries[str(path.relative_to(directory))] = {
            "bytes": path.stat().st_size, "sha256": _digest(path),
        }  # fmt: skip
    for sub in {p.parent for p in _files(directory)}:
        fsync_dir(sub)
    write_atomic(directory / MANIFEST, json.dumps({"files": entries}, indent=1))


def manifest_problem(directory: str | Path) -> str | None:
    """What is wrong with ``directory`` against its manifest (a file missing, of another size
    or content), or None when it matches. A directory without a manifest (a checkpoint of an
    earlier version) is not checked: None."""
    directory = Path(directory)
    if not directory.is_dir():
        return f"{directory} is not there"
    try:
        entries = json.loads((directory / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"its {MANIFEST} is unreadable ({e})"
    for name, entry in sorted(entries.items()):
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry.get("bytes"):
            return f"{name} is {path.stat().st_size:,} bytes, {entry.get('bytes'):,} when written"
        if _digest(path) != entry.get("sha256"):
            return f"{name} differs from what was written (SHA-256)"
    return None


def newest_intact(root: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint under ``root`` whose manifest it matches: the one ``latest``
    names, else the ``step_*`` directories from the newest; and those passed over, with why.
    (None, []) when ``root`` has no checkpoint."""
    root = Path(root)
    pointer = root / "latest"
    named = root / pointer.read_text().strip() if pointer.is_file() else None
    steps = sorted((p for p in root.glob("step_*") if _STEP_DIR.search(p.name) and p.is_dir()),
                   key=lambda p: int(_STEP_DIR.search(p.name).group(1)), reverse=True)  # fmt: skip
    candidates = ([named] if named is not None else []) + [p for p in steps if p != named]
    skipped: list[tuple[Path, str]] = []
    for path in candidates:
        why = manifest_problem(path)
        if why is None:
            return path, skipped
        skipped.append((path, why))
    return None, skipped
