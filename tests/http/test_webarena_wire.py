"""``EnvPool.remote(url, "webarena", dialect="webarena")`` against a stand-in for AgentGym's
WebArena server on 127.0.0.1 (the real one needs the WebArena docker sites and a browser):
its routes and field names, ``terminated`` read as done, the plain-text close, and a server
that fails one session."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentgym.envs import EnvPool

TASKS = {0: ("Find the price of the red mug.", "$12"), 1: ("What is the top post?", "Cats")}


class FakeWebArena(ThreadingHTTPServer):
    """AgentGym's WebArena wire: ``/create`` -> ``{"env_idx"}``, ``/reset {env_idx, seed, idx}``
    -> ``{"observation"}``, ``/step {env_idx, action}`` -> ``{observation, reward, terminated,
    truncated, info}`` where the action is the model's whole reply and the server reads the
    fenced part, ``/close`` -> the text ``closed``. Task 1's sessions fail at step 3."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.sessions: dict[int, dict] = {}
        self.bodies: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.loads(raw) if raw else {}
        s = self.server
        with s.lock:
            s.bodies.append((self.path, body))
            reply = self._answer(body)
        if reply is None:
            self._send(500, b"Internal Server Error", "text/html")
        elif isinstance(reply, str):
            self._send(200, reply.encode(), "text/html")
        else:
            self._send(200, json.dumps(reply).encode(), "application/json")

    def _answer(self, body: dict):
        s = self.server
        if self.path == "/create":
            env_idx = len(s.sessions)
            s.sessions[env_idx] = {"task": None, "steps": 0}
            return {"env_idx": env_idx}
        session = s.sessions[body["env_idx"]]
        if self.path == "/reset":
            session.update(task=body["idx"], steps=0)
            intent = TASKS[body["idx"]][0]
            return {"observation": f"OBJECTIVE: {intent}\n[1] RootWebArea 'Shop'"}
        if self.path == "/step":
            session["steps"] += 1
            if session["task"] == 1 and session["steps"] == 3:
                return None
            action = body["action"].split("```")[1].strip() if "```" in body["action"] else ""
            done = action.startswith("stop")
            reward = float(done and action == f"stop [{TASKS[session['task']][1]}]")
            return {"observation": f"PREVIOUS ACTION: {action}", "reward": reward,
                    "terminated": done, "truncated": False, "info": {}}  # fmt: skip
        if self.path == "/close":
            return "closed"
        return None

    def _send(self, code: int, data: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    s = FakeWebArena()
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


def test_episodes_over_agentgym_webarena_wire(server):
    pool = EnvPool.remote(server.url, "webarena", dialect="webarena", num_tasks=2, timeout=5)
    ids = pool.create(2)
    first = pool.reset(ids, [0, 1])
    assert first[0].startswith("OBJECTIVE: Find the price")
    reply = "Let's think step-by-step. The price is $12. In summary, the next action I will "
    step = pool.step(ids, [reply + "perform is ```stop [$12]```", reply + "is ```scroll [down]```"])
    assert step.errors == [None, None]
    assert step.dones.tolist() == [True, False] and step.rewards.tolist() == [1.0, 0.0]
    assert step.observations[1] == "PREVIOUS ACTION: scroll [down]"
    resets = sorted((b for path, b in server.bodies if path == "/reset"), key=lambda b: b["idx"])
    # creates and resets go out concurrently, so which server session backs ids[0] is not fixed
    assert [(b["idx"], b["seed"]) for b in resets] == [(0, 0), (1, 0)]
    assert sorted(b["env_idx"] for b in resets) == [0, 1]
    assert [b for path, b in server.bodies if path == "/step"][0]["action"].endswith("```")
    pool.close(ids[:1])  # a plain-text "closed" is a close that worked
    assert ("/close", {"env_idx": resets[0]["env_idx"]}) in server.bodies


def test_the_webarena_family_speaks_the_dialect_and_sends_the_fenced_action(server):
    from agentgym.envs.families import family

    rules = family("webarena")
    assert rules.remote_options["dialect"] == "webarena"
    reply = "The mug costs $12. In summary, the next action I will perform is ```stop [$12]```"
    action, error = rules.parse_reply(reply)
    assert (action, error) == ("```stop [$12]```", None)
    assert rules.parse_reply("no action")[0] is None
    pool = EnvPool.remote(server.url, "webarena", num_tasks=2, timeout=5)  # dialect from family
    ids = pool.create(1)
    pool.reset(ids, [0])
    assert pool.step(ids, [action]).rewards.tolist() == [1.0]


def test_a_server_error_fails_only_its_session(server):
    pool = EnvPool.remote(server.url, "webarena", dialect="webarena", num_tasks=2, timeout=5)
    ids = pool.create(2)
    pool.reset(ids, [0, 1])
    for _ in range(2):
        assert pool.step(ids, ["```click [1]```"] * 2).errors == [None, None]
    third = pool.step(ids, ["```click [1]```"] * 2)
    assert third.errors[0] is None and "500" in third.errors[1]
