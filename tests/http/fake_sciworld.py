"""A scripted stand-in for ``scienceworld.ScienceWorldEnv`` and a thread running the SciWorld server
over it, so the SciWorld wire rules are tested without Java.

It keeps ScienceWorld's contract as its Python API states it: ``step`` returns (observation,
reward = change of score, done, info with ``score`` and ``moves``); an episode is done when the
task completes (score 100), fails (score < 0, reported as -100) or the moves pass
``envStepLimit``. Each task has a fixed solution; every right action adds 100 / len(solution),
``focus on wrong thing`` fails the task, anything else only uses a move.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

SOLUTIONS = {
    "boil": ["go to kitchen", "focus on water", "activate stove"],
    "melt": ["go to kitchen", "focus on ice"],
}
DESCRIPTIONS = {
    "boil": "Your task is to boil water. First, focus on the substance.",
    "melt": "Your task is to melt ice. First, focus on the substance.",
}


class FakeScienceWorld:
    """ScienceWorld's API surface used by ``SciWorldSessions``."""

    tasks = {"1-1": "boil", "1-2": "melt"}

    def __init__(self, env_step_limit: int = 6):
        self.envStepLimit = env_step_limit
        self.task: str | None = None
        self.closed = False

    def get_max_variations(self, name: str) -> int:
        return 2

    def load(self, task: str, variation: int = 0) -> None:
        self.task, self.variation = task, variation
        self.progress = self.moves = 0
        self.score = self.last_score = 0
        self.failed = False

    def get_task_description(self) -> str:
        return DESCRIPTIONS[self.task]

    def step(self, action: str) -> tuple[str, int, bool, dict[str, Any]]:
        solution = SOLUTIONS[self.task]
        if action == "look around":
            obs = f"This room is called the hallway. Variation {self.variation}."
        elif action == "focus on wrong thing":
            self.failed = True
            obs = "You focus on the wrong thing."
        elif self.progress < len(solution) and action == solution[self.progress]:
            self.progress += 1
            obs = f"You did: {action}."
        else:
            obs = "No known action matches that input."
        self.moves += 1
        self.score = -100 if self.failed else round(100 * self.progress / len(solution))
        reward, self.last_score = self.score - self.last_score, self.score
        done = self.score >= 100 or self.score < 0 or self.moves > self.envStepLimit
        return obs, reward, done, {"score": self.score, "moves": self.moves}

    def close(self) -> None:
        self.closed = True


class ServerThread:
    """``agentgym-sciworld-server``'s app over fake simulators, on a free loopback port."""

    def __init__(self, guards=None, header_read_timeout: float = 10.0, **session_args: Any):
        import uvicorn

        from agentgym.envs.sciworld_server import SciWorldSessions, build_app, uvicorn_config

        self.sessions = SciWorldSessions(make_env=FakeScienceWorld, **session_args)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(build_app(self.sessions, guards), header_read_timeout)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the SciWorld server thread did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()


class ScriptedEngine:
    """An engine whose replies are ``Thought: ...`` then the next action of a fixed plan.

    ``plans`` maps a task description to its actions; the plan is picked by the description
    the prompt shows, the turn by the number of replies so far. Past the plan it repeats
    ``idle_action``. ``first_prompts`` keeps each episode's first prompt, decoded.
    """

    version = 0
    streams_weights = False  # never loads weights

    def __init__(self, tokenizer, plans: dict[str, list[str]], idle_action: str):
        self.tokenizer, self.plans, self.idle_action = tokenizer, plans, idle_action
        self.first_prompts: list[str] = []

    async def generate(self, prompts, params):
        from agentgym.engines.base import Generation

        out = []
        for tokens in prompts:
            text = self.tokenizer.decode(tokens)
            turn = text.count("<|im_start|>assistant") - 1
            if turn == 0:
                self.first_prompts.append(text)
            plan = next(p for task, p in self.plans.items() if task in text)
            action = plan[turn] if turn < len(plan) else self.idle_action
            ids = self.tokenizer.encode(f"Thought: next step.\nAction: {action}<|im_end|>")
            out.append(Generation(list(ids), [-0.1] * len(ids), 0))
        return out

    async def close(self):
        pass
