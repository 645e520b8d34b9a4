"""Run directories as agentgym train writes them, for the hub's tests."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

CORPUS = [
    "Thought: the red ball is ahead. Action: go to red ball 1",
    "Your goal: go to the red ball. You see a red ball 1 and a blue key 1.",
    "Available actions: turn left, turn right, move forward, go to red ball 1",
] * 20


def episode(tok, episode_id, replies, *, env="babyai", task_id=0, success=True, versions=None):
    """A trajectory sample as the actor writes it: contexts and replies as tokens + mask."""
    tokens, mask, logprobs = [], [], []
    for k, reply in enumerate(replies):
        context = tok.encode(
            f"<|im_start|>user\nobservation {k}<|im_end|>\n<|im_start|>assistant\n"
        )
        generated = tok.encode(reply)
        tokens += context + generated
        mask += [0] * len(context) + [1] * len(generated)
        logprobs += [0.0] * len(context) + [-0.5] * len(generated)
    return {
        "episode_id": episode_id, "group_id": episode_id // 2, "env": env, "task_id": task_id,
        "horizon_cap": 4, "reward": 1.0 if success else 0.0, "success": success,
        "truncated": not success, "num_turns": len(replies),
        "versions": versions or [1] * len(replies), "num_tokens": len(tokens),
        "text": tok.decode(tokens), "tokens": tokens, "loss_mask": mask, "logprobs": logprobs,
    }  # fmt: skip


def make_run(path: Path, tok=None, *, steps=3, summary_code=None, episodes=()):
    path.mkdir(parents=True)
    config = {
        "env": {"name": "babyai"},
        "learner": {"max_steps": 10, "advantage": {"estimator": "grpo"}},
        "actor": {"reply_format": "action_line"},
    }
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    with open(path / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({"step": step, "reward/all": step / 10, "loss/total": 1.0}) + "\n")
    if tok is not None:
        (path / "model").mkdir()
        tok.save_pretrained(path / "model")
    with open(path / "trajectories.jsonl", "w") as f:
        for record in episodes:
            f.write(json.dumps(record) + "\n")
    if summary_code is not None:
        (path / "summary.json").write_text(json.dumps({"exit_code": summary_code}))
    return path
