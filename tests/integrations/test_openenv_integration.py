"""agentgym's envs as an OpenEnv server, driven by OpenEnv's own GenericEnvClient over the
WebSocket route: many sessions at once, the Task API, replies, bad input, disconnects."""

from __future__ import annotations

import asyncio
import time

import pytest

from conftest import need, served

need("openenv", "openenv")

import requests  # noqa: E402
from openenv import GenericEnvClient  # noqa: E402

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.integrations.openenv import (  # noqa: E402
    AgentGymAction,
    create_server_app,
    environment_class,
)

ACTIONS = ["turn left", "move forward", "turn right"]


@pytest.fixture(scope="module")
def url():
    with served(create_server_app("babyai", max_sessions=128, window_s=0.02)) as base:
        yield base


@pytest.fixture(scope="module")
def capped_url():
    """A server whose episodes are cut after two steps."""
    with served(create_server_app("babyai", max_sessions=8, max_turns=2)) as base:
        yield base


def stats(base: str) -> dict:
    return requests.get(f"{base}/agentgym/stats", timeout=10).json()


def expected(task_id: int, steps: int) -> list[str]:
    pool = EnvPool("babyai", threads=1)
    with pool.session() as s:
        out = [s.reset(task_id)]
        out += [s.step(ACTIONS[k % 3])[0] for k in range(steps)]
    return out


def test_many_websocket_sessions_at_once_match_the_pool(url):
    """48 GenericEnvClient sessions step concurrently; each sees exactly the episode a plain
    pool session gives, and their calls went out in batches."""
    before = stats(url)

    async def episode(task_id: int) -> list[str]:
        async with GenericEnvClient(base_url=url) as client:
            first = await client.reset(task_id=task_id)
            seen = [first.observation["text"]]
            for k in range(6):
                result = await client.step({"action": ACTIONS[k % 3]})
                seen.append(result.observation["text"])
            state = await client.state()
        assert state["task_id"] == task_id and state["step_count"] == 6
        return seen

    async def main():
        return await asyncio.gather(*(episode(t) for t in range(48)))

    results = asyncio.run(main())
    assert results[:4] == [expected(t, 6) for t in range(4)]
    after = stats(url)
    calls, batches = after["calls"] - before["calls"], after["batches"] - before["batches"]
    assert calls == 48 * 7 and calls / batches > 4
    assert after["sessions_opened"] - before["sessions_opened"] == 48


def test_the_task_api_maps_onto_agentgym_task_ids(url):
    assert requests.get(f"{url}/babyai/splits", timeout=10).json() == [
        {"name": "train", "type": "train"},
        {"name": "test", "type": "test"},
    ]
    count = requests.post(f"{url}/babyai/num_tasks", json={"split": "test"}, timeout=10).json()
    assert count == {"num_tasks": 400}
    task = requests.post(f"{url}/babyai/task", json={"split": "test", "index": 3}, timeout=10)
    assert task.json()["task"]["task_id"] == 100_003
    bad = requests.post(f"{url}/babyai/task", json={"split": "test", "index": 400}, timeout=10)
    assert bad.status_code == 400
    tasks = requests.post(
        f"{url}/babyai/task_range", json={"split": "train", "start": 5, "stop": 8}, timeout=10
    ).json()["tasks"]
    assert [t["task_id"] for t in tasks] == [5, 6, 7]

    async def by_split() -> tuple[int, int]:
        async with GenericEnvClient(base_url=url) as client:
            a = await client.reset(split="test", index=3)
            b = await client.reset(seed=4002)  # train task 4002 % 4000
        return a.observation["task_id"], b.observation["task_id"]

    assert asyncio.run(by_split()) == (100_003, 2)


def test_replies_are_read_by_agentgyms_rules(url):
    async def main():
        async with GenericEnvClient(base_url=url) as client:
            await client.reset(task_id=7)
            good = await client.step({"reply": "Thought: look around.\nAction: turn left"})
            bad = await client.step({"reply": "I will turn left"})
            state = await client.state()
        return good, bad, state

    good, bad, state = asyncio.run(main())
    assert good.observation["text"] == expected(7, 1)[1]
    assert not good.observation["invalid_reply"]
    assert bad.observation["invalid_reply"] and "Action:" in bad.observation["text"]
    assert bad.reward == 0.0 and state["step_count"] == 2


def test_truncation_and_a_step_after_the_end(capped_url):
    async def main():
        async with GenericEnvClient(base_url=capped_url) as client:
            await client.reset(task_id=0)
            await client.step({"action": "turn left"})
            last = await client.step({"action": "turn left"})
            with pytest.raises(RuntimeError, match="episode is over"):
                await client.step({"action": "turn left"})
            again = await client.reset(task_id=1)  # the session goes on after a reset
        return last, again

    last, again = asyncio.run(main())
    assert last.done and last.observation["truncated"] and not last.observation["success"]
    assert again.observation["task_id"] == 1 and not again.done


def test_bad_input_fails_that_call_alone(url):
    async def main():
        async with GenericEnvClient(base_url=url) as client:
            with pytest.raises(RuntimeError, match="reset the environment first"):
                await client.step({"action": "turn left"})
            with pytest.raises(RuntimeError, match="task_id must be >= 0"):
                await client.reset(task_id=-1)
            with pytest.raises(RuntimeError, match="unknown split"):
                await client.reset(split="validation", index=0)
            with pytest.raises(RuntimeError, match="out of range"):
                await client.reset(split="test", index=400)
            with pytest.raises(RuntimeError, match="unknown reset argument 'level'"):
                await client.reset(level=3)
            with pytest.raises(RuntimeError, match="exactly one of"):
                await client.step({"action": "turn left", "reply": "Action: turn left"})
            ok = await client.reset(task_id=2)  # the session survived all of that
        return ok

    assert asyncio.run(main()).observation["task_id"] == 2
    with pytest.raises(ValueError, match="unknown env 'chess'"):
        environment_class("chess")
    with pytest.raises(ValueError, match="exactly one of"):
        cls = environment_class("babyai")
        env = cls()
        env.reset(task_id=0)
        env.step(AgentGymAction())


def test_clients_that_disconnect_mid_episode_are_closed_and_counted(url):
    """Sessions whose clients vanish (a clean close, or the TCP connection dropped) are closed
    by OpenEnv; agentgym frees their envs and counts them; nothing stays open."""
    before = stats(url)

    async def vanish(task_id: int, abrupt: bool) -> None:
        client = GenericEnvClient(base_url=url)
        await client.connect()
        await client.reset(task_id=task_id)
        await client.step({"action": "turn left"})
        if abrupt:
            client._ws.transport.abort()
            client._ws = None
        else:
            await client.close()

    async def main():
        await asyncio.gather(*(vanish(t, abrupt=t % 2 == 0) for t in range(6)))

    asyncio.run(main())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        now = stats(url)
        if now["closed_mid_episode"] - before["closed_mid_episode"] == 6:
            break
        time.sleep(0.05)
    assert now["closed_mid_episode"] - before["closed_mid_episode"] == 6
    assert now["sessions_opened"] - before["sessions_opened"] == 6
    assert now["sessions_closed"] - before["sessions_closed"] == 6
    assert now["pool_sessions"] == 0


def test_the_environment_works_without_a_server():
    """The class on its own, sync (thread-safe sessions) and async, the way OpenEnv calls it."""
    cls = environment_class("textcraft", window_s=0.0)
    env = cls()
    first = env.reset(task_id=3)
    step = env.step(AgentGymAction(action="inventory"))
    assert first.task_id == 3 and "Goal" in first.text and not step.done
    assert env.state.step_count == 1 and env.list_splits() == ["train", "test"]

    async def also_async():
        other = cls()
        await other.reset_async(task_id=3)
        result = await other.step_async(AgentGymAction(action="inventory"))
        other.close()
        return result

    assert asyncio.run(also_async()).text == step.text
    env.close()
    env.close()
    assert cls.hub.stats()["pool_sessions"] == 0


def test_openenv_serve_cli_refuses_bad_arguments(capsys):
    from agentgym.cli.main import main

    assert main(["openenv-serve", "--env", "chess"]) == 2
    assert "unknown env 'chess'" in capsys.readouterr().err
    assert main(["openenv-serve", "--env", "babyai", "--max-sessions", "0"]) == 2
    assert "--max-sessions" in capsys.readouterr().err


@pytest.mark.slow
def test_agentgym_openenv_serve_serves_babyai(tmp_path):
    """The command itself, in its own process: health, then an episode over /ws."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "agentgym.cli.main", "openenv-serve", "--env", "babyai",
           "--port", str(port), "--max-turns", "3"]  # fmt: skip
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "the server died"
            time.sleep(0.2)

        async def episode():
            async with GenericEnvClient(base_url=f"http://127.0.0.1:{port}") as client:
                result = await client.reset(task_id=5)
                while not result.done:
                    result = await client.step({"action": "turn left"})
                return result

        last = asyncio.run(episode())
        assert last.observation["truncated"] and last.observation["task_id"] == 5
    finally:
        server.terminate()
        server.communicate(timeout=30)  # closes its pipe
