"""bench/real_model_proof.sh's skip-or-resume rule, with a stand-in ``agentgym`` on PATH that
records each call (the real runs take hours): a finished run is skipped, a stopped or failed one
resumes from its checkpoints, a missing one trains, and a done eval is not run again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Records its arguments, one call per line, and writes the file an eval's or a demo's --out names.
FAKE = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$AGENTGYM_CALLS"
while [ $# -gt 0 ]; do
    if [ "$1" = --out ]; then mkdir -p "$(dirname "$2")"; echo '[]' > "$2"; fi
    shift
done
"""


def _run(tmp_path: Path, table: str, seeds: str) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "agentgym"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    calls = tmp_path / "calls.txt"
    calls.unlink(missing_ok=True)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "AGENTGYM_CALLS": str(calls), "MODEL": str(model),
           "PROOF_DIR": str(tmp_path / "proof"), "SEEDS": seeds,
           "SETS": "engine.bf16=false"}  # fmt: skip
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "real_model_proof.sh"), table],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def _run_dir(out: Path, name: str, exit_code: int | None, checkpoints: bool) -> Path:
    run = out / name
    run.mkdir(parents=True)
    if checkpoints:
        (run / "checkpoints").mkdir()
    if exit_code is not None:
        (run / "summary.json").write_text(json.dumps({"exit_code": exit_code}))
    return run


def test_finished_runs_are_skipped_stopped_ones_resume_missing_ones_train(tmp_path):
    out = tmp_path / "proof" / "textcraft"
    _run_dir(out, "rl-s0", 0, checkpoints=True)  # finished
    stopped = _run_dir(out, "rl-s1", 130, checkpoints=True)  # stopped (Ctrl-C) part-way
    failed = _run_dir(out, "rl-s2", 1, checkpoints=True)
    calls = _run(tmp_path, "textcraft", "0 1 2 3")
    trains = [c for c in calls if c.startswith("train")]
    assert trains[0] == f"train --resume {stopped}"
    assert trains[1] == f"train --resume {failed}"
    assert len(trains) == 3, calls
    fresh = trains[2]
    assert f"run_dir={out}/rl-s3" in fresh and "actor.seed=3" in fresh, fresh
    assert fresh.endswith("--set engine.bf16=false"), fresh  # SETS reach a new run, not a resume
    assert not any("rl-s0" in c for c in trains), calls
    # Each seed's eval, the three baselines and zero-shot: 8 evals, none of them twice.
    evals = [c for c in calls if c.startswith("eval")]
    assert len(evals) == 8, calls
    assert len(_run(tmp_path, "textcraft", "0 1 2 3")) == 3  # the evals are done: the trains only


def test_search_sft_warm_starts_from_training_demos_on_the_search_tables_world(tmp_path):
    calls = _run(tmp_path, "search-sft", "0 1")
    proof = tmp_path / "proof"
    data, warm = proof / "search" / "data", proof / "search-sft" / "warm"
    demos = [c for c in calls if c.startswith("demos")]
    assert len(demos) == 1, calls
    assert demos[0].startswith("demos search --tasks 0:320:5 "), demos  # training ids only
    assert f"-o index={data}/index -o qa={data}/qa.jsonl -o topk=1" in demos[0], demos
    sft = [c for c in calls if c.startswith("sft")]
    assert len(sft) == 1 and f"sft.data=[{warm}/demos.jsonl]" in sft[0], calls
    trains = [c for c in calls if c.startswith("train")]
    assert len(trains) == 2, calls
    for seed, train in enumerate(trains):
        assert f"--init-from {warm}/sft/checkpoints" in train, train
        assert f"env.options.index={data}/index" in train and f"actor.seed={seed}" in train, train
    evals = [c for c in calls if c.startswith("eval")]
    assert len(evals) == 3 and f"--checkpoint {warm}/sft/checkpoints" in evals[0], calls
    assert all("--caps 2,3,5" in c for c in evals), evals


def test_babyai_rl_trains_levels_5_and_7_from_the_instruct_model(tmp_path):
    calls = _run(tmp_path, "babyai-rl", "0 1")
    trains = [c for c in calls if c.startswith("train")]
    assert len(trains) == 2, calls
    for train in trains:
        assert train.startswith("train configs/smollm2-babyai-horizon.yaml "), train
        assert "tasks.train.levels=[5, 7]" in train and "--init-from" not in train, train
        assert "learner.horizon={schedule: fixed, cap: 6}" in train, train
    evals = [c for c in calls if c.startswith("eval")]
    assert len(evals) == 5, calls  # the script, the bot, zero-shot, a seed each
    assert sum("--policy" in c for c in evals) == 2, evals
    assert all("tasks.eval.levels=[5, 7]" in c for c in evals if "--policy" in c), evals
