"""A tiny random transformers model and multi-turn trajectories scored by it."""

import numpy as np
import torch

from agentgym.learner.batch import collate
from agentgym.learner.forward import forward_tokens
from agentgym.transport.wire import Trajectory

VOCAB = 48


def tiny_model(seed: int = 0):
    """A 2-layer Llama with random weights (no downloads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).eval()


def multi_turn_mask(rng: np.random.Generator, n: int, prompt: int) -> np.ndarray:
    """prompt, then alternating generated and environment segments, ending on an env reply."""
    mask = np.zeros(n, np.uint8)
    t, gen = prompt, True
    while t < n - 1:
        seg = int(rng.integers(2, 5))
        if gen:
            mask[t : min(t + seg, n - 1)] = 1
        t, gen = t + seg, not gen
    return mask


def make_groups(
    model,
    num_groups: int = 2,
    group_size: int = 4,
    *,
    version: int = 0,
    seed: int = 0,
    cap: int | None = None,
    temperature: float = 1.0,
    opening: int = 0,
) -> list[Trajectory]:
    """Random multi-turn episodes whose behaviour log-probs are the model's own (mu == pi);
    the episodes of a group start with the same ``opening`` tokens (at most 12)."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(num_groups):
        shared = rng.integers(0, VOCAB, opening).astype(np.int32)
        for i in range(group_size):
            n = int(rng.integers(12, 24))
            tokens = rng.integers(0, VOCAB, n).astype(np.int32)
            tokens[:opening] = shared
            mask = multi_turn_mask(rng, n, prompt=4)
            out.append(
                Trajectory(
                    episode_id=seed * 10_000 + g * 100 + i,
                    group_id=seed * 1000 + g,
                    group_size=group_size,
                    env="babyai" if g % 2 else "textcraft",
                    task_id=g,
                    horizon_cap=cap,
                    turn_versions=np.full(2, version, np.int32),
                    tokens=tokens,
                    logprobs=np.zeros(n, np.float32),
                    loss_mask=mask,
                    prompt_len=4,
                    reward=float(i % 2),
                    success=bool(i % 2),
                    truncation="cap" if i == 0 else "",
                    num_turns=2,
                )
            )
    return rescore(model, out, temperature)


def single_turn(
    prompt: list[int],
    reply: list[int],
    reward: float,
    group: int,
    i: int,
    *,
    env: str = "babyai",
    size: int = 4,
    logprobs: list[float] | None = None,
) -> Trajectory:
    """One episode of one turn: ``prompt`` (no loss) then ``reply`` (the generated tokens, with
    behaviour ``logprobs``; 0 until ``rescore`` fills them), the ``i``-th of group ``group``."""
    tokens = np.array(prompt + reply, np.int32)
    behaviour = [0.0] * len(prompt) + (list(logprobs) if logprobs else [0.0] * len(reply))
    return Trajectory(
        episode_id=group * 100 + i, group_id=group, group_size=size, env=env, task_id=group,
        horizon_cap=None, turn_versions=np.zeros(1, np.int32), tokens=tokens,
        logprobs=np.array(behaviour, np.float32),
        loss_mask=np.array([0] * len(prompt) + [1] * len(reply), np.uint8),
        prompt_len=len(prompt), reward=float(reward), success=reward > 0.5, truncation="",
        num_turns=1,
    )  # fmt: skip


@torch.no_grad()
def rescore(model, trajs: list[Trajectory], temperature: float = 1.0) -> list[Trajectory]:
    """The same trajectories with behaviour log-probs from ``model``."""
    batch = collate(trajs)
    logp = forward_tokens(model, batch, temperature).logp.numpy()
    out = []
    for i, t in enumerate(trajs):
        lp = np.where(t.loss_mask > 0, logp[i, : t.num_tokens], 0).astype(np.float32)
        fields = {k: getattr(t, k) for k in Trajectory.__dataclass_fields__}
        out.append(Trajectory(**{**fields, "logprobs": lp}))
    return out
