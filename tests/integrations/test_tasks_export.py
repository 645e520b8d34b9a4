"""The task datasets of ``agentgym export-tasks`` (no stack needed), and the rule that the core
never imports a stack's integration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentgym.cli.main import main
from agentgym.config import TaskRange, TasksConfig
from agentgym.integrations.tasks import (
    AGENT_NAME,
    export,
    parse_task_reference,
    row,
    rows,
    task_reference,
)


def test_every_layout_names_its_task():
    verl = row("verl", "babyai", "train", 4, 804)
    assert verl["agent_name"] == AGENT_NAME and verl["extra_info"]["task_id"] == 804
    assert verl["data_source"] == "agentgym/babyai" and verl["prompt"][0]["role"] == "user"
    skyrl = row("skyrl", "babyai", "train", 4, 804)
    assert skyrl["env_class"] == "agentgym-babyai" and skyrl["task_id"] == 804
    trl = row("trl", "babyai", "test", 0, 100_000)
    assert trl["task_id"] == 100_000 and trl["prompt"][-1]["task"] == "babyai/100000"
    openenv = row("openenv", "babyai", "test", 2, 100_002)
    assert openenv["reset"] == {"task_id": 100_002} and openenv["index"] == 2
    with pytest.raises(ValueError, match="unknown stack"):
        row("rllib", "babyai", "train", 0, 0)


def test_rows_follow_agentgyms_splits():
    tasks = TasksConfig(train=TaskRange(0, 80, levels=(3,)), eval=TaskRange(1000, 1004))
    assert [r["task_id"] for r in rows("openenv", "babyai", "train", tasks)] == [3, 43]
    assert [r["index"] for r in rows("openenv", "babyai", "test", tasks)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="unknown split"):
        list(rows("openenv", "babyai", "validation"))


def test_task_references_round_trip():
    assert parse_task_reference(task_reference("webnav", 91)) == ("webnav", 91)
    for bad in ("babyai", "babyai/x", "/3", ""):
        with pytest.raises(ValueError, match="not an agentgym task reference"):
            parse_task_reference(bad)


def test_export_writes_jsonl_for_every_split(tmp_path):
    tasks = TasksConfig(train=TaskRange(0, 3), eval=TaskRange(10, 12))
    written = export("skyrl", "textcraft", tmp_path, tasks=tasks, fmt="jsonl")
    train = [json.loads(line) for line in written["train"].read_text().splitlines()]
    assert [r["task_id"] for r in train] == [0, 1, 2]
    assert len(written["test"].read_text().splitlines()) == 2
    with pytest.raises(ValueError, match="unknown env 'chess'"):
        export("verl", "chess", tmp_path / "x", fmt="jsonl")
    with pytest.raises(ValueError, match="unknown format"):
        export("verl", "babyai", tmp_path / "x", fmt="csv")
    assert not (tmp_path / "x").exists()


def test_export_tasks_cli(tmp_path, capsys):
    out = tmp_path / "openenv"
    code = main(["export-tasks", "--for", "openenv", "--env", "babyai", "--out", str(out),
                 "--set", "tasks.train.limit=5"])  # fmt: skip
    assert code == 0
    assert "train: 5 tasks" in capsys.readouterr().out
    assert json.loads((out / "test.jsonl").read_text().splitlines()[1])["task_id"] == 100_001
    assert main(["export-tasks", "--for", "verl", "--env", "chess", "--out", str(out)]) == 2
    assert "unknown env" in capsys.readouterr().err


def test_the_core_imports_no_stack():
    """agentgym's packages and its CLI load without importing any stack or stack module."""
    code = (
        "import sys, agentgym, agentgym.envs, agentgym.agent, agentgym.actor, agentgym.config\n"
        "import agentgym.integrations, agentgym.integrations.tasks\n"
        "from agentgym.cli.main import build_parser\n"
        "build_parser()\n"
        "stacks = ('openenv', 'skyrl_gym', 'trl', 'verl')\n"
        "mine = ('agentgym.integrations.' + s for s in ('openenv', 'skyrl', 'trl', 'verl'))\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in stacks or m in set(mine)]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parquet_rows_keep_their_nested_fields(tmp_path):
    """verl, SkyRL and TRL read parquet (pyarrow comes with their extras)."""
    pq = pytest.importorskip(
        "pyarrow.parquet", reason="needs pyarrow: pip install 'agentgym-rs[skyrl]' (or pyarrow)"
    )
    tasks = TasksConfig(train=TaskRange(0, 2), eval=TaskRange(10, 11))
    for stack in ("verl", "skyrl", "trl"):
        written = export(stack, "babyai", tmp_path / stack, tasks=tasks)
        back = pq.read_table(written["train"]).to_pylist()
        assert back == list(rows(stack, "babyai", "train", tasks))
