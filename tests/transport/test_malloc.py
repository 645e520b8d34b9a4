"""tune_malloc: multi-MB buffers come from the heap once tuned; env vars and opt-out win."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from agentgym.transport.malloc import tune_malloc

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Allocates a 4 MiB block and reports whether glibc served it with mmap (mallinfo2's hblkhd:
# bytes in mmapped blocks). Runs in a fresh interpreter so the test process keeps its settings.
PROBE = """
import ctypes, sys
from agentgym.transport.malloc import tune_malloc

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
applied = tune_malloc()
before = libc.mallinfo2().hblkhd
p = libc.malloc(4 << 20)
mapped = libc.mallinfo2().hblkhd - before
libc.free(p)
print(int(applied), int(mapped >= 4 << 20))
"""


def probe(**env: str) -> tuple[int, int]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    full.pop("AGENTGYM_MALLOC_TUNING", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**full, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    applied, mapped = out.stdout.split()
    return int(applied), int(mapped)


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_tuned_process_serves_large_blocks_from_the_heap():
    assert probe() == (1, 0)


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_opt_out_and_glibc_env_vars_leave_the_defaults():
    # untouched glibc maps a 4 MiB block on its own
    assert probe(AGENTGYM_MALLOC_TUNING="0") == (0, 1)
    applied, _ = probe(MALLOC_TRIM_THRESHOLD_="1048576")
    assert applied == 0


def test_rejects_inconsistent_thresholds():
    with pytest.raises(ValueError, match="mmap_threshold"):
        tune_malloc(mmap_threshold=64 << 20, trim_threshold=1 << 20)
