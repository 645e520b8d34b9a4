"""Writes ``babyai_agentgym.jsonl.gz``: what AgentGym's own BabyAI server code answers.

    python3 -m venv /tmp/agentgym-ref
    /tmp/agentgym-ref/bin/pip install minigrid==2.3.1 gymnasium==0.29.1 "numpy<2" gym matplotlib
    # AGENTGYM: a checkout of https://github.com/WooooDyy/AgentGym (its agentenv-babyai folder)
    /tmp/agentgym-ref/bin/python tests/envs/goldens/make_babyai_agentgym.py AGENTGYM \\
        --out tests/envs/goldens/babyai_agentgym.jsonl.gz

It imports ``agentenv-babyai/agentenv_babyai/environment.py`` from the given checkout (the
module AgentGym's FastAPI server wraps; nothing of it is copied here) and drives its
``BabyAIEnv`` exactly as the server's ``/create``, ``/reset`` and ``/step`` endpoints do. For each
case (a task id, i.e. AgentGym's ``data_idx``) it records the reset observation and, per step,
the action sent, the payload's observation, reward and done, and which of the action's
primitive moves ended minigrid's episode (AgentGym plays on past such a move; agentgym stops
there, a documented difference). Actions are drawn per case
from a seeded ``random.Random(task_id)``: mostly an action of the current menu, sometimes
``check available actions``, an action the env refuses with its own message (an unreachable
object, a closed door), a text it does not know, or a menu action in other case and spacing
(AgentGym lower-cases and strips). A case ends when the server says done or after its
``--steps`` actions.

The first line of the file is the provenance: AgentGym's commit, the minigrid, gymnasium and
numpy versions, this script's description of the cases. ``tests/envs/test_babyai_goldens.py``
plays every case on agentgym's BabyAI and compares text, reward and done.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.metadata
import importlib.util
import io
import json
import random
import subprocess
import sys
from pathlib import Path

LEVELS = 40
SEEDS = (0, 1, 2, 3, 4, 7, 12, 31, 60, 250)
"""Seeds every level is played with (task id = level + 40 * seed)."""
EXTRA_TASKS = (155, 156, 2994, 4394, 10594, 16394, 36394)
"""Task ids where agentgym's worlds differed from minigrid 2.3.1's until issue 35 (item 9);
69674 is left out: minigrid 2.3.1's reset never finishes there, so AgentGym's server hangs."""
UNKNOWN_ACTIONS = ("jump", "go to the moon", "pick up everything", "")


def load_agentgym(checkout: Path):
    """AgentGym's BabyAI environment module, imported from ``checkout``."""
    path = checkout / "agentenv-babyai" / "agentenv_babyai" / "environment.py"
    spec = importlib.util.spec_from_file_location("agentgym_babyai_environment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def next_action(rng: random.Random, env) -> str:
    """The next action of a case, from the env's current menu and refusal messages."""
    menu = [a for a in env._get_action_space() if a != "check available actions"]
    roll = rng.random()
    if roll < 0.06:
        return "check available actions"
    if roll < 0.14 and env.error_message:
        return rng.choice(sorted(env.error_message))
    if roll < 0.18:
        return rng.choice(UNKNOWN_ACTIONS)
    action = rng.choice(menu)
    if roll < 0.24:
        return "  " + action.upper() + " "
    return action


class EndWatch:
    """Wraps the minigrid env inside AgentGym's ``BabyAI`` and notes which primitive moves of
    the current action ended the episode (AgentGym plays on past them)."""

    def __init__(self, env):
        self.env = env
        self.moves: list[tuple[bool, bool]] = []

    def step(self, action):
        out = self.env.step(action)
        self.moves.append((bool(out[2]), bool(out[3])))
        return out

    def __getattr__(self, name):
        return getattr(self.env, name)

    def ends(self) -> list | None:
        """[index of the first move that terminated or truncated, moves played, which], or
        None when no move of the action ended the episode."""
        for i, (terminated, truncated) in enumerate(self.moves):
            if terminated or truncated:
                return [i, len(self.moves), "terminated" if terminated else "truncated"]
        return None


def play(module, task_id: int, steps: int) -> dict:
    """One case through the server's endpoints: reset, then up to ``steps`` steps. Each step
    records [action, observation, reward, done, ends] (``EndWatch.ends``)."""
    server = module.BabyAIEnv()
    sid = server.create()["id"]
    reset = server.reset(sid, task_id)
    if "error" in reset:
        raise RuntimeError(f"task {task_id}: reset failed: {reset['error']}")
    rng = random.Random(task_id)
    env = server.env[sid]
    watch = EndWatch(env.env)
    env.env = watch
    record = {"task_id": task_id, "reset": reset["observation"], "steps": []}
    for _ in range(steps):
        action = next_action(rng, env)
        watch.moves = []
        out = server.step(sid, action)
        if "error" in out:
            raise RuntimeError(f"task {task_id}: step {action!r} failed: {out['error']}")
        step = [action, out["observation"], float(out["reward"]), out["done"], watch.ends()]
        record["steps"].append(step)
        if out["done"]:
            break
    env.env = watch.env
    server.close(sid)
    return record


def provenance(checkout: Path, steps: int, commit: str | None) -> dict:
    if commit is None:
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"],
                                capture_output=True, text=True).stdout.strip()  # fmt: skip
    versions = {p: importlib.metadata.version(p) for p in ("minigrid", "gymnasium", "numpy")}
    return {
        "provenance": {
            "source": "https://github.com/WooooDyy/AgentGym agentenv-babyai/agentenv_babyai/"
            "environment.py (BabyAIEnv, driven as server.py's endpoints drive it)",
            "agentgym_commit": commit or "unknown (not a git checkout)",
            **versions,
            "python": sys.version.split()[0],
            "generator": "tests/envs/goldens/make_babyai_agentgym.py",
            "cases": f"task ids level + 40 * seed for the 40 levels and seeds {list(SEEDS)}, "
            f"plus {list(EXTRA_TASKS)}; up to {steps} actions each, drawn with "
            "random.Random(task_id) (see next_action)",
        }
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agentgym", type=Path, help="a checkout of WooooDyy/AgentGym")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20, help="actions per case at most")
    parser.add_argument("--commit", default=None,
                        help="AgentGym's commit, when AGENTGYM is an exported tree rather than "
                        "a git checkout")  # fmt: skip
    args = parser.parse_args(argv)
    module = load_agentgym(args.agentgym)
    tasks = [level + LEVELS * seed for seed in SEEDS for level in range(LEVELS)]
    tasks += [t for t in EXTRA_TASKS if t not in tasks]
    lines = [json.dumps(provenance(args.agentgym, args.steps, args.commit))]
    for i, task_id in enumerate(tasks, 1):
        with contextlib.redirect_stdout(io.StringIO()):  # the server prints on every close
            lines.append(json.dumps(play(module, task_id, args.steps)))
        if i % 40 == 0 or i == len(tasks):
            print(f"{i}/{len(tasks)} cases", flush=True)
    data = ("\n".join(lines) + "\n").encode()
    with open(args.out, "wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as f:
        f.write(data)  # mtime 0: the same cases give the same bytes
    return 0


if __name__ == "__main__":
    sys.exit(main())
