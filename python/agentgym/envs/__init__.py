"""Text environments hosted by thousands in one native multiplexer.

>>> from agentgym.envs import EnvPool
>>> pool = EnvPool("textcraft")
>>> ids = pool.create(4)
>>> observations = pool.reset(ids, task_ids=[0, 1, 2, 3])
>>> batch = pool.step(ids, ["inventory"] * 4)
"""

from agentgym.envs.coalesce import (
    AsyncCoalescer,
    AsyncEnvSession,
    ClosedSessionError,
    ThreadCoalescer,
    ThreadSafeEnvSession,
)
from agentgym.envs.pool import EnvPool, EnvSession, ExpertBatch, SessionError, StepBatch

__all__ = [
    "AsyncCoalescer",
    "AsyncEnvSession",
    "ClosedSessionError",
    "EnvPool",
    "EnvSession",
    "ExpertBatch",
    "SessionError",
    "StepBatch",
    "ThreadCoalescer",
    "ThreadSafeEnvSession",
    "env_names",
]


def env_names() -> list[str]:
    """Names of the native envs."""
    from agentgym import _envserver

    return list(_envserver.ENV_NAMES)
