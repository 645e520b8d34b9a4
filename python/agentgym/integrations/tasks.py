"""The dataset rows each stack reads to pick agentgym tasks, from agentgym's splits.

One row per task id of a split (``train``: ``tasks.train``; ``test``: ``tasks.eval``), in the
layout the stack's trainer reads; the integration module of that stack turns a row back into
``(env, task_id)``. Every layout keeps ``env`` and ``task_id`` readable as plain columns or
fields. Nothing here imports a stack.

- verl: ``data_source``, ``agent_name`` (the registered agent loop, ``"agentgym"``),
  ``prompt`` (a one-message placeholder naming the task: the agent loop opens the episode
  itself), ``ability``, ``reward_model`` (the env scores the episode), ``extra_info``
  (``env``, ``task_id``, ``split``, ``index``).
- SkyRL: ``data_source``, ``env_class`` (``agentgym-<env>``, as
  ``agentgym.integrations.skyrl.register`` names it), ``prompt`` (the placeholder; the env's
  ``init`` replaces it with the episode's opening), ``task_id``, ``extra_info``.
- TRL: ``prompt`` (one user message, empty, with the task in its ``task`` field, which chat
  templates ignore: ``environment_factory`` instances read the ``task_id`` column through
  ``reset(**row)``, the ``rollout_func`` reads the field), ``env``, ``task_id``, ``split``.
- OpenEnv: ``env``, ``split``, ``index``, ``task_id`` and ``reset``: the arguments of the
  client's ``reset(**row["reset"])`` that play this task.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentgym.config import TasksConfig
from agentgym.integrations.common import SPLITS, split_ids

STACKS = ("verl", "skyrl", "trl", "openenv")
FORMATS = ("parquet", "jsonl")
DEFAULT_FORMAT = {"verl": "parquet", "skyrl": "parquet", "trl": "parquet", "openenv": "jsonl"}
AGENT_NAME = "agentgym"
"""The name the verl agent loop registers under (rows pick it by ``agent_name``)."""
AGENT_LOOP_YAML = f"""\
# agentgym's verl agent loop (actor_rollout_ref.rollout.agent.agent_loop_config_path)
- name: {AGENT_NAME}
  _target_: agentgym.integrations.verl.AgentGymAgentLoop
  max_turns: 20
"""
"""What ``export --for verl`` writes to ``agent_loop.yaml`` beside the rows."""


def task_reference(env: str, task_id: int) -> str:
    """``babyai/804``: how rows and placeholder prompts name a task."""
    return f"{env}/{task_id}"


def parse_task_reference(text: str) -> tuple[str, int]:
    """``(env, task_id)`` of a :func:`task_reference`; ValueError for anything else."""
    env, sep, task = str(text).strip().rpartition("/")
    if not sep or not env or not task.isdigit():
        raise ValueError(f"not an agentgym task reference (env/task_id): {text!r}")
    return env, int(task)


def placeholder_prompt(env: str, task_id: int) -> list[dict[str, str]]:
    """The one-message prompt verl and SkyRL rows carry; the episode opens with the env's
    instruction and first observation instead."""
    return [{"role": "user", "content": f"agentgym task {task_reference(env, task_id)}"}]


def skyrl_env_class(env: str) -> str:
    """The SkyRL env id of an agentgym env."""
    return f"agentgym-{env}"


def row(stack: str, env: str, split: str, index: int, task_id: int) -> dict[str, Any]:
    """The dataset row of one task for ``stack``."""
    source = f"agentgym/{env}"
    info = {"env": env, "task_id": task_id, "split": split, "index": index}
    if stack == "verl":
        return {
            "data_source": source,
            "agent_name": AGENT_NAME,
            "prompt": placeholder_prompt(env, task_id),
            "ability": "agent",
            "reward_model": {"style": "env", "ground_truth": ""},
            "extra_info": info,
        }
    if stack == "skyrl":
        return {
            "data_source": source,
            "env_class": skyrl_env_class(env),
            "prompt": placeholder_prompt(env, task_id),
            "task_id": task_id,
            "extra_info": info,
        }
    if stack == "trl":
        prompt = [{"role": "user", "content": "", "task": task_reference(env, task_id)}]
        return {"prompt": prompt, "env": env, "task_id": task_id, "split": split}
    if stack == "openenv":
        return {**info, "reset": {"task_id": task_id}}
    raise ValueError(f"unknown stack {stack!r}; one of {', '.join(STACKS)}")


def rows(
    stack: str, env: str, split: str, tasks: TasksConfig | None = None
) -> Iterator[dict[str, Any]]:
    """Every row of ``split`` for ``stack``, in task-id order."""
    for index, task_id in enumerate(split_ids(tasks, split)):
        yield row(stack, env, split, index, task_id)


def export(
    stack: str,
    env: str,
    out: str | Path,
    *,
    tasks: TasksConfig | None = None,
    fmt: str | None = None,
) -> dict[str, Path]:
    """Writes ``out/train.<fmt>`` and ``out/test.<fmt>`` for ``stack`` (and for verl
    ``out/agent_loop.yaml``, the registry entry its workers load); returns the paths.

    ``fmt``: ``parquet`` (needs pyarrow, which the stacks' extras install) or ``jsonl``;
    default: the stack's usual one (parquet for verl, SkyRL and TRL; JSONL for OpenEnv).
    """
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; one of {', '.join(STACKS)}")
    fmt = fmt or DEFAULT_FORMAT[stack]
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    from agentgym.envs import env_names

    if env not in env_names():
        raise ValueError(f"unknown env {env!r}; agentgym's native envs: {', '.join(env_names())}")
    if fmt == "parquet":
        _parquet()  # a missing pyarrow fails here, before any file is written
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for split in SPLITS:
        path = out / f"{split}.{fmt}"
        data = list(rows(stack, env, split, tasks))
        (_write_parquet if fmt == "parquet" else _write_jsonl)(path, data)
        written[split] = path
    if stack == "verl":
        written["agent_loop"] = out / "agent_loop.yaml"
        written["agent_loop"].write_text(AGENT_LOOP_YAML)
    return written


def _write_jsonl(path: Path, data: list[dict[str, Any]]) -> None:
    with path.open("w") as f:
        for r in data:
            f.write(json.dumps(r) + "\n")


def _parquet() -> Any:
    try:
        import pyarrow.parquet
    except ImportError as e:
        raise ImportError(
            "writing parquet needs pyarrow (pip install pyarrow, or any of the stacks' extras); "
            "or write JSONL with --format jsonl"
        ) from e
    return pyarrow


def _write_parquet(path: Path, data: list[dict[str, Any]]) -> None:
    pa = _parquet()
    pa.parquet.write_table(pa.Table.from_pylist(data), path)
