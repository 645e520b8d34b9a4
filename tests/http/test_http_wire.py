"""Wire conformance: a client that behaves like AgentGym's (one ``requests.post`` per call,
asserting status 200 and reading the documented fields) plays whole episodes."""

from __future__ import annotations

import re

import pytest
import requests

from agentgym.envs import EnvPool


class AgentGymLikeClient:
    """What AgentGym's ``agentenv.envs.*EnvClient`` does on the wire, nothing more."""

    def __init__(self, base: str, create_body: dict | None = None):
        self.base = base
        res = requests.post(f"{base}/create", json=create_body, timeout=10)
        assert res.status_code == 200, res.text
        self.created = res.json()
        self.env_id = self.created["id"]

    def post(self, path: str, data: dict) -> dict:
        data["id"] = self.env_id
        res = requests.post(f"{self.base}/{path}", json=data, timeout=10)
        assert res.status_code == 200, res.text
        return res.json()

    def get(self, path: str):
        res = requests.get(f"{self.base}/{path}?id={self.env_id}", timeout=10)
        assert res.status_code == 200, res.text
        return res.json()


def test_root_strings(textcraft_url, babyai_url):
    assert requests.get(textcraft_url + "/").json() == "This is environment TextCraft."
    assert requests.get(babyai_url + "/").json() == "This is environment BabyAI."


def _textcraft_solution(observation: str) -> list[str]:
    """Crafting commands in dependency order, from the reset text (goal last)."""
    goal = re.search(r"Goal: craft (.+)\.", observation).group(1)
    recipes = {}
    for line in observation.splitlines():
        m = re.match(r"craft (\d+) (.+?) using (.+)", line)
        if m:
            ingredients = [
                re.match(r"(\d+) (.+)", part.strip()).groups() for part in m.group(3).split(",")
            ]
            recipes.setdefault(
                m.group(2), (int(m.group(1)), [(int(n), name) for n, name in ingredients])
            )
    actions: list[str] = []

    def make(item: str, count: int) -> None:
        if item not in recipes:
            actions.append(f"get {count} {item}")
            return
        out, ingredients = recipes[item]
        times = -(-count // out)
        for n, name in ingredients:
            make(name, n * times)
        actions.append(
            f"craft {out * times} {item} using "
            + ", ".join(f"{n * times} {name}" for n, name in ingredients)
        )

    make(goal, 1)
    return actions


def _solvable_tasks(pool: EnvPool, n: int) -> list[int]:
    """The first `n` task ids that `_textcraft_solution` solves (checked on a local pool)."""
    found, ids = [], pool.create(1)
    for task in range(pool.num_tasks):
        actions = _textcraft_solution(pool.reset(ids, [task])[0])
        if _plays_to_done(pool, ids, actions):
            found.append(task)
            if len(found) == n:
                break
    pool.close(ids)
    return found


def _plays_to_done(pool: EnvPool, ids: list[int], actions: list[str]) -> bool:
    for action in actions:
        if pool.step(ids, [action]).dones[0]:
            return True
    return False


def test_textcraft_episode_like_agentgym(textcraft_url):
    # AgentGym's TextCraft client posts these three fields on /create.
    c = AgentGymLikeClient(
        textcraft_url, {"minecraft_dir": "agentenv_textcraft/", "commands": None, "goal": None}
    )
    assert set(c.created) == {"id", "observation", "done", "reward"}
    assert c.created["done"] is False and c.created["reward"] == 0
    assert "Goal: craft" in c.created["observation"]
    local = EnvPool("textcraft")
    ids = local.create(1)
    tasks = _solvable_tasks(local, 2)
    assert len(tasks) == 2
    for task in tasks:
        reset = c.post("reset", {"data_idx": task})
        assert set(reset) == {"id", "observation", "done", "reward"}
        assert reset["id"] == c.env_id and reset["done"] is False and reset["reward"] == 0
        assert reset["observation"] == local.reset(ids, [task])[0]
        assert c.get("observation") == reset["observation"]
        done = False
        for action in ["inventory", *_textcraft_solution(reset["observation"])]:
            step = c.post("step", {"action": action})
            assert set(step) == {"observation", "reward", "done"}
            expected = local.step(ids, [action])
            assert step["observation"] == expected.observations[0]
            assert step["reward"] == float(expected.rewards[0])
            assert c.get("observation") == step["observation"]
            done = step["done"]
            if done:
                break
        assert done and step["reward"] == 1
    assert c.post("close", {}) is True
    assert c.post("close", {}) is False


def test_textcraft_create_with_a_custom_goal(textcraft_url):
    # AgentGym's server accepts `goal`/`commands` on /create but its reset discards them; ours
    # starts that episode. The goal is an item id or the words players type.
    local = EnvPool("textcraft")
    ids = local.create(1)
    task = _solvable_tasks(local, 1)[0]
    local.reset(ids, [task])
    goal_id = local.info(ids)[0]["goal_id"]
    for goal in (goal_id, goal_id.removeprefix("minecraft:").replace("_", " ")):
        c = AgentGymLikeClient(textcraft_url, {"commands": None, "goal": goal})
        obs = c.created["observation"]
        assert obs.startswith("Crafting commands:\n")
        assert obs.endswith(f"Goal: craft {goal_id.removeprefix('minecraft:').replace('_', ' ')}.")
        assert c.get("observation") == obs
        step = {"done": False}
        for action in _textcraft_solution(obs):
            step = c.post("step", {"action": action})
            if step["done"]:
                break
        assert step["done"] and step["reward"] == 1
        # a later reset plays the numbered tasks again
        assert c.post("reset", {"data_idx": task})["observation"] == local.reset(ids, [task])[0]
        assert c.post("close", {}) is True
    # the client's own commands are shown as given (here: the goal's recipe lines only)
    name = goal_id.removeprefix("minecraft:").replace("_", " ")
    commands = "\n".join(line for line in obs.splitlines() if line.startswith("craft "))
    c = AgentGymLikeClient(textcraft_url, {"commands": commands, "goal": name})
    assert c.created["observation"] == f"Crafting commands:\n{commands}\n\nGoal: craft {name}."
    step = {"done": False}
    for action in _textcraft_solution(c.created["observation"]):
        step = c.post("step", {"action": action})
        if step["done"]:
            break
    assert step["done"] and step["reward"] == 1
    local.close(ids)


def test_babyai_episode_like_agentgym(babyai_url):
    c = AgentGymLikeClient(babyai_url)
    assert c.created == {"id": c.env_id}
    fresh = c.get("observation")
    assert fresh["observation"] == "Environment not initialized"
    local = EnvPool("babyai")
    ids = local.create(1)
    reset = c.post("reset", {"data_idx": 0})
    assert set(reset) == {"observation", "reward", "score", "deleted", "done"}
    assert reset["observation"] == local.reset(ids, [0])[0]
    assert reset["observation"].startswith("Your goal: ")
    goal_line = reset["observation"].split("\n", 1)[0]
    score = 0.0
    for _ in range(40):
        actions = local.available_actions(ids)[0]
        action = next((a for a in actions if a.startswith("go to red ball")), actions[2])
        step = c.post("step", {"action": action})
        assert set(step) == {"observation", "reward", "score", "done"}
        expected = local.step(ids, [action])
        assert step["observation"] == expected.observations[0]
        assert abs(step["reward"] - float(expected.rewards[0])) < 1e-6
        score += step["reward"]
        # the exact decimal values the env computes (0.94375, not 0.943750024)
        assert step["score"] == round(score, 9)
        assert step["reward"] == float(str(expected.rewards[0]))
        observed = c.get("observation")
        assert set(observed) == {"observation", "reward", "score", "done", "deleted"}
        assert observed["observation"] == goal_line + "\n" + step["observation"]
        assert observed["done"] == step["done"]
        if step["done"]:
            break
    assert step["done"] and step["reward"] > 0
    assert c.post("close", {}) is True


def test_batch_endpoints_match_a_local_pool(babyai_url):
    local = EnvPool("babyai")
    lids = local.create(8)
    ids = requests.post(babyai_url + "/batch/create", json={"n": 8}).json()["ids"]
    assert len(ids) == 8 and len(set(ids)) == 8
    tasks = list(range(8))
    reset = requests.post(babyai_url + "/batch/reset", json={"ids": ids, "data_idxs": tasks}).json()
    assert reset["errors"] == [None] * 8
    assert reset["observations"] == local.reset(lids, tasks)
    for _ in range(5):
        actions = ["move forward" if i % 2 else "turn left" for i in range(8)]
        step = requests.post(
            babyai_url + "/batch/step", json={"ids": ids, "actions": actions}
        ).json()
        expected = local.step(lids, actions)
        assert step["observations"] == expected.observations
        assert step["dones"] == expected.dones.tolist()
        assert step["errors"] == expected.errors
    closed = requests.post(babyai_url + "/batch/close", json={"ids": [*ids, 10**9]}).json()
    assert closed == {"closed": [True] * 8 + [False]}


def test_health_and_metrics(textcraft_url):
    health = requests.get(textcraft_url + "/health").json()
    assert health["server"] == "agentgym-envserver" and health["env"] == "textcraft"
    assert health["batch"] is True and health["num_tasks"] > 0
    c = AgentGymLikeClient(textcraft_url)
    c.post("step", {"action": "inventory"})
    requests.post(textcraft_url + "/step", json={"id": 10**9, "action": "x"})
    text = requests.get(textcraft_url + "/metrics").text
    assert 'agentgym_sessions_open{env="textcraft"} 1' in text
    assert 'agentgym_env_steps_total{env="textcraft"} 1' in text
    assert 'agentgym_http_requests_total{route="/step"} 2' in text
    assert 'agentgym_http_errors_total{status="404"} 1' in text
    assert "agentgym_http_request_duration_seconds_bucket" in text


def test_babyai_data_idx_gives_agentgym_s_world_over_the_wire(babyai_url):
    """AgentGym's BabyAI client (``/create``, then ``/reset {id, data_idx}``) gets, for a spread
    of ids over all 40 levels and past 4e7, the first observation of the minigrid-based
    reference seeded as AgentGym's server seeds it."""
    pytest.importorskip("minigrid")
    from agentgym.envs.reference.babyai_text import make_session

    c = AgentGymLikeClient(babyai_url)
    for data_idx in [*range(0, 80, 3), 1234, 40_000_007, 40 * 10**6 + 39]:
        reset = c.post("reset", {"data_idx": data_idx})
        assert reset["observation"] == make_session(data_idx)[1], data_idx
    assert c.post("close", {}) is True
