"""Parity of the Rust BabyAI world with minigrid.

Each case resets a minigrid BabyAI level, exports its world as a layout, starts the Rust env
from that layout (``EnvPool("babyai", layout=..., primitive="true")``), then applies the same
primitive actions to both and compares, after every step: agent position and direction,
carried object, every door's state, the step count, reward and done. Actions are random, or
(for half the sequences) mostly those of minigrid's BabyAI bot, so that missions are also
completed and the success reward and the verifiers' success paths are compared too.
"""

from __future__ import annotations

import copy
import random
import signal
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("minigrid")

from minigrid.utils.baby_ai_bot import BabyAIBot  # noqa: E402

from agentgym.envs import EnvPool  # noqa: E402
from agentgym.envs.reference.babyai_text import LEVELS  # noqa: E402
from agentgym.envs.reference.minigrid_layout import (  # noqa: E402
    ACTIONS,
    layout_json,
    make_level,
    reset_quietly,
    state,
)

# Random actions lean towards moving so that episodes travel.
WEIGHTS = {"left": 2, "right": 2, "forward": 5, "pickup": 2, "drop": 1, "toggle": 2, "done": 0.2}
MAX_STEPS_PER_SEQUENCE = 80


def _random_action(rng: random.Random) -> str:
    return rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]


class _Guide:
    """Minigrid's BabyAI bot, taken 80% of the time; random actions otherwise or once the
    bot gives up (it cannot plan every level)."""

    def __init__(self, env: Any, rng: random.Random):
        self.rng = rng
        try:
            self.bot: BabyAIBot | None = BabyAIBot(env)
        except Exception:  # the bot does not parse every instruction
            self.bot = None
        self.last: int | None = None

    def action(self) -> str:
        if self.bot is not None:
            try:
                suggested = int(_within(1.0, self.bot.replan, self.last))
            except Exception:  # the bot fails or loops on some worlds; play on at random
                self.bot = None
            else:
                if self.rng.random() < 0.8:
                    self.last = suggested
                    return ACTIONS[suggested]
        action = _random_action(self.rng)
        self.last = ACTIONS.index(action)
        return action


def _within(seconds: float, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, raising ``TimeoutError`` after ``seconds`` (the bot can loop forever)."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _compare(env: Any, info: dict[str, Any], where: str) -> None:
    expected = state(env)
    got = {key: info.get(key) for key in expected}
    assert got == expected, f"{where}: rust {got} != minigrid {expected}"


def _play(env: Any, pool: EnvPool, sid: int, rng: random.Random, guided: bool) -> Counter:
    """One action sequence on both sides; returns what happened (for coverage checks)."""
    seen: Counter = Counter()
    guide = _Guide(env, rng) if guided else None
    _compare(env, pool.info([sid])[0], "after reset")
    for t in range(MAX_STEPS_PER_SEQUENCE):
        action = guide.action() if guide else _random_action(rng)
        _, reward, terminated, truncated, _ = env.step(ACTIONS.index(action))
        batch = pool.step([sid], [action])
        where = f"{env.spec.id if env.spec else type(env).__name__} step {t} ({action})"
        assert batch.errors[0] is None, f"{where}: {batch.errors[0]}"
        _compare(env, pool.info([sid])[0], where)
        assert float(batch.rewards[0]) == pytest.approx(float(reward), abs=1e-6), where
        assert bool(batch.dones[0]) == bool(terminated or truncated), where
        seen[action] += 1
        if terminated or truncated:
            seen["success" if reward > 0 else "ended"] += 1
            break
    return seen


def _run(levels: list[str], seeds: range, sequences_per_layout: int) -> Counter:
    total: Counter = Counter()
    for level_index, level in enumerate(levels):
        for seed in seeds:
            env = make_level(level)
            reset_quietly(env, seed)
            pool = EnvPool("babyai", threads=1, layout=layout_json(env), primitive="true")
            sid = pool.create(1)[0]
            for k in range(sequences_per_layout):
                rng = random.Random(f"{level}/{seed}/{k}")
                pool.reset([sid], [0])
                total += _play(copy.deepcopy(env), pool, sid, rng, guided=k % 2 == 0)
                total["sequences"] += 1
            pool.close([sid])
            total[f"level{level_index}"] += 1
    return total


def test_layout_roundtrip_starts_where_minigrid_starts() -> None:
    for level in LEVELS:
        env = make_level(level)
        reset_quietly(env, 1)
        pool = EnvPool("babyai", threads=1, layout=layout_json(env), primitive="true")
        sid = pool.create(1)[0]
        pool.reset([sid], [0])
        info = pool.info([sid])[0]
        _compare(env, info, level)
        assert info["mission"] == env.mission
        assert info["max_steps"] == env.max_steps


def test_primitive_parity_sample_of_levels() -> None:
    """200 sequences: 40 levels x 1 seed x 5 sequences."""
    seen = _run(list(LEVELS), range(0, 1), sequences_per_layout=5)
    assert seen["sequences"] == 200
    assert seen["success"] > 0, seen


@pytest.mark.slow
def test_primitive_parity_1000_sequences() -> None:
    """1000 sequences: 40 levels x 5 seeds x 5 sequences, random and bot-guided."""
    seen = _run(list(LEVELS), range(1, 6), sequences_per_layout=5)
    assert seen["sequences"] == 1000
    for action in ACTIONS:
        assert seen[action] > 0, seen
    assert seen["success"] >= 100, seen
