"""tune_malloc: multi-MB buffers come from the heap once tuned; env vars and opt-out win.
trim_heap: freed heap pages go back to the OS."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from agentgym.transport.malloc import trim_heap, tune_malloc

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


# 49 blocks of 4 MiB from the tuned heap, written, the first 48 freed (the last keeps them off
# the heap's top, which glibc trims on its own); prints the resident MiB trim_heap gives back.
TRIM_PROBE = """
import ctypes
from agentgym.transport.malloc import trim_heap, tune_malloc

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
assert tune_malloc()
blocks = [libc.malloc(4 << 20) for _ in range(49)]
for b in blocks:
    ctypes.memset(b, 1, 4 << 20)
for b in blocks[:-1]:  # the last one stays: the freed ones are not the heap's top
    libc.free(b)
before = rss_mib()
trimmed = trim_heap()
print(int(trimmed), before - rss_mib())
"""


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_trim_heap_gives_freed_pages_back():
    full = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    full.pop("AGENTGYM_MALLOC_TUNING", None)
    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE], env=full, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    trimmed, released_mib = (int(v) for v in out.stdout.split())
    assert trimmed == 1
    assert released_mib >= 150  # of the 192 MiB freed


def test_trim_heap_opt_out(monkeypatch):
    monkeypatch.setenv("AGENTGYM_MALLOC_TUNING", "0")
    assert trim_heap() is False
