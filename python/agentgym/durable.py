"""Files a run writes so that a crash, a full disk or a shortage of descriptors costs as little
as possible.

- ``write_atomic``: a file replaced whole (a temporary file beside it, fsynced, then renamed,
  and the directory fsynced), so a reader or a resumed run sees the old file or the new one,
  never half of one.
- ``with_descriptors``: calls that need a descriptor (opening a file) retried while the
  process has none left (``EMFILE``/``ENFILE``: a flood of connections holds them), waiting
  between tries, instead of failing the run mid-step.
- ``DiskFull``: the one-line error a full disk becomes (``ENOSPC``, ``EDQUOT``).
"""

from __future__ import annotations

import errno
import logging
import os
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
