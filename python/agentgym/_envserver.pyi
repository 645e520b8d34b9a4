"""Typed surface of the native module. Users import ``agentgym.envs``; this stub keeps the
private module honest (``tests/envs/test_stub.py`` checks it against the built module)."""

from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

ENV_NAMES: list[str]
MAX_ACTION_BYTES: int
__version__: str

class _SessionPool(Protocol):
    """Stub only (no such class at runtime): the methods EnvPool and RemotePool share, with the
    same signatures; ``tests/envs/test_stub.py`` checks them on both classes."""

    def create(self, n: int) -> list[int]: ...
    def reset(
        self, ids: list[int], task_ids: list[int]
    ) -> tuple[list[str | None], list[str | None]]: ...
    def step(
        self, ids: list[int], actions: list[str]
    ) -> tuple[
        list[str],
        npt.NDArray[np.float32],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        list[str | None],
    ]: ...
    def close(self, ids: list[int]) -> int: ...
    def set_horizon(self, cap: int | None) -> None: ...
    @property
    def horizon(self) -> int | None: ...
    @property
    def num_tasks(self) -> int: ...
    @property
    def env(self) -> str: ...
    @property
    def num_threads(self) -> int: ...
    def __len__(self) -> int: ...
    def ids(self) -> list[int]: ...
    def observations(self, ids: list[int]) -> list[str]: ...
    def available_actions(self, ids: list[int]) -> list[list[str] | None]: ...
    def info(self, ids: list[int]) -> list[str]: ...
    def stats(self) -> dict[str, int]: ...

class EnvPool(_SessionPool):
    def __init__(
        self,
        env: str,
        *,
        threads: int | None = None,
        options: dict[str, str] | None = None,
        max_action_bytes: int | None = None,
        max_sessions: int | None = None,
    ) -> None: ...
    def sample_actions(self, ids: list[int], seed: int) -> list[str | None]: ...
    def reset_custom(self, id: int, goal: str, commands: str | None = None) -> str: ...
    def expert(self, ids: list[int]) -> tuple[list[tuple[str, str] | None], list[str | None]]: ...

# ---- HTTP server and remote sessions (issue 3) ----

class Server:
    def __init__(
        self,
        env: str,
        *,
        host: str = "127.0.0.1",
        port: int = 36001,
        options: dict[str, str] | None = None,
        max_sessions: int = 65536,
        max_body_bytes: int = 8388608,
        max_action_bytes: int | None = None,
        idle_timeout: float | None = 3600.0,
        token: str | None = None,
        workers: int | None = None,
        env_threads: int | None = None,
        blocking_threads: int = 2,
        step_latency: float = 0.0,
        header_read_timeout: float = 10.0,
        keep_alive_timeout: float = 5.0,
        max_connections: int = 1024,
        body_read_timeout: float = 30.0,
        allowed_hosts: list[str] | None = None,
        max_custom_bytes: int = 67108864,
    ) -> None: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def max_connections(self) -> int: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def stop(self) -> None: ...
    def sessions(self) -> int: ...

class RemotePool(_SessionPool):
    def __init__(
        self,
        urls: list[str],
        env: str,
        *,
        dialect: str = "id",
        batch: bool | None = None,
        max_in_flight: int = 64,
        connect_timeout: float = 5.0,
        timeout: float = 60.0,
        token: str | None = None,
        max_action_bytes: int | None = None,
        num_tasks: int | None = None,
        task_field: str | None = None,
        score_field: str | None = None,
        max_reply_bytes: int | None = None,
    ) -> None: ...
    @property
    def urls(self) -> list[str]: ...

# ---- search env: building and querying an index (issue 15) ----

def build_search_index(
    corpus: str,
    index_dir: str,
    *,
    threads: int | None = None,
    memory_mb: int | None = None,
    progress: Callable[[int, int, int, int], object] | None = None,
) -> tuple[int, int, list[tuple[int, str]], float, int]: ...

class SearchIndex:
    def __init__(self, index_dir: str) -> None: ...
    @property
    def num_passages(self) -> int: ...
    def query_terms(self, query: str) -> list[str]: ...
    def search(
        self, queries: list[str], k: int, threads: int | None = None
    ) -> list[list[tuple[str, float]]]: ...
