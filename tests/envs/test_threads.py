"""EnvPool used from short-lived threads (thread pools, HTTP servers such as the hub's).

Run in a child process, since the failure this guards against is a segfault: with mimalloc 3 as
the extension's allocator, when the extension was first imported on a thread that then exited,
the next new thread to allocate crashed in the allocator's thread set-up (it took the loading
thread's state for the process's main heap). mimalloc 2 does not.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import threading
from concurrent.futures import ThreadPoolExecutor

pools = {}

def load():
    from agentgym.envs import EnvPool  # the extension is loaded on this short-lived thread

    pools["babyai"] = EnvPool("babyai", threads=1)
    pools["textcraft"] = EnvPool("textcraft", threads=1)

t = threading.Thread(target=load)
t.start()
t.join()

def play(k):
    pool = pools["babyai" if k % 2 else "textcraft"]
    [sid] = pool.create(1)
    pool.reset([sid], [k])
    pool.info([sid]), pool.available_actions([sid])
    pool.step([sid], ["turn left" if k % 2 else "inventory"])
    pool.close([sid])
    return k

for k in range(20):
    t = threading.Thread(target=play, args=(k,))
    t.start()
    t.join()
with ThreadPoolExecutor(4) as ex:
    assert sorted(ex.map(play, range(64))) == list(range(64))
print("ok")
"""


def test_pool_used_from_new_threads_after_the_loading_thread_exited():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.strip() == "ok"
