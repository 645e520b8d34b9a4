"""Keep multi-megabyte message buffers in the heap (glibc only).

A batch of trajectories is a few frames of 0.1-3 MB. glibc serves blocks that large with a
fresh ``mmap`` and gives them back with ``munmap`` on free, so every message pays a page fault
for each 4 KiB page, on both sides: the sender's concatenated arrays and the receive buffers
libzmq allocates on its I/O thread. On this project's 2-core machine that was a third of the
encode time and held transport to ~0.9 GB/s (figures in ``bench/RESULTS.md``).

``tune_malloc`` raises glibc's mmap threshold and trim threshold so that such blocks are
carved from the heap and reused. The cost is memory: up to ``trim_threshold`` bytes of freed
heap stay mapped instead of going back to the OS. The learner and actor commands call it at
start-up; a process embedding agentgym may call it too. Nothing changes where the user set
``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (glibc's own knobs, which win), where
``AGENTGYM_MALLOC_TUNING=0``, or on a C library other than glibc.

``trim_heap`` hands the heap's free pages back to the OS (``malloc_trim``). The learner calls it
after each update: a CPU update frees gigabytes of activations whose blocks glibc keeps mapped,
so without it the learner's resident memory stays at the largest step's peak plus the holes
between differently sized steps (SmolLM2-135M, micro-batches of 2 x 614-1,024 tokens: 4.3-4.7 GB
resident between steps, 2.4 GB with the trim; figures in ``bench/RESULTS.md``), memory that the
actor on the same machine cannot use. The transformers engine (``agentgym.engines.hf``) calls it
after each batch and each weight load, for the decode's key/value slabs and the received state
dict (``bench/bench_learner_memory.py --actor`` measures the actor's side).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 16 << 20
"""Blocks below this size come from the heap (glibc's default starts at 128 KiB)."""
TRIM_THRESHOLD = 64 << 20
"""Freed heap at the top beyond this size goes back to the OS (glibc's default: 128 KiB)."""


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """This process's C library if it is glibc (found once: ``libc_ver`` reads the executable)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def _disabled() -> bool:
    return os.environ.get("AGENTGYM_MALLOC_TUNING", "1").strip() in ("0", "false", "no", "off")


def trim_heap() -> bool:
    """Return the heap's free pages to the OS (glibc's ``malloc_trim(0)``); whether it ran
    and released anything. A no-op off glibc or with ``AGENTGYM_MALLOC_TUNING=0``."""
    libc = None if _disabled() else _glibc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim(0) == 1


def tune_malloc(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Apply the thresholds to this process; returns whether they were applied."""
    if mmap_threshold <= 0 or trim_threshold < mmap_threshold:
        raise ValueError(
            f"need 0 < mmap_threshold <= trim_threshold, got {mmap_threshold}, {trim_threshold}"
        )
    if _disabled() or {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"} & os.environ.keys():
        return False
    mallopt = getattr(_glibc(), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # the mmap threshold first: setting it also freezes glibc's dynamic adjustment
    ok = mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
    ok = mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1 and ok
    if not ok:
        log.warning("mallopt refused the transport buffer thresholds; left as they were")
    return ok
