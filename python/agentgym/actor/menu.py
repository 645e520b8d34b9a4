"""The menu policy: a small model that chooses one action from the env's menu per turn.

For CPU runs with a randomly initialised tiny model (the quickstart). A model that has never seen
text cannot discover the "Thought: ... Action: ..." format by RL in minutes: almost all of its
probability mass sits on tokens that are not actions, so no episode succeeds and GRPO sees no
signal. The menu policy makes the decision RL has to learn the only decision there is:

- the tokenizer is trained on env text, and every action phrase of the env's vocabulary
  (``go to red ball 1``, ``turn left``, ...) is one added token, so the menu printed in each
  observation (``Available actions: [...]``) is a run of action tokens, and a reply is one token;
- ``MenuPolicy`` wraps the causal LM: at the first position of every reply (right after the
  chat template's ``<|im_start|>assistant\\n``) all logits except those of the action tokens
  listed in the latest user message are set to ``-1e9``. Every other position is untouched.

The mask is a pure function of the token stream, and it is part of the model: the engine samples
from it and the learner recomputes log-probs through it, so the behaviour log-probs and the
learner's pi are the same distribution and the importance weights stay exact. The untrained
policy is a near-uniform random choice among the listed actions: the baseline RL must beat.

Replies are one token (``max_new_tokens = 1``): the cached decode steps of an engine cannot see
the context, so longer replies would be masked differently by the engine and the learner.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentgym.models import (
    IM_START,
    TinyModelSpec,
    builtin_corpus,
    env_corpus,
    init_model,
    menu_manifest,
)
from agentgym.models import (
    MENU_MANIFEST as MANIFEST,
)

MASKED_LOGIT = -1e9
"""Logit of a token the menu rules out (finite, so 0 * logp stays 0 in masked sums)."""

COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
KINDS = ("ball", "key", "box")


def babyai_action_phrases(max_index: int = 6) -> list[str]:
    """Every BabyAI-text action name whose object number is at most ``max_index``, in a fixed
    order. Actions with a larger number stay multi-token (the menu policy cannot choose them)."""
    out = ["turn left", "turn right", "move forward", "drop", "toggle", "go to goal"]
    out.append("check available actions")
    nums = range(1, max_index + 1)
    for verb in ("go to", "pickup"):
        out += [f"{verb} {c} {k} {n}" for c in COLORS for k in KINDS for n in nums]
    for state in ("open", "closed", "locked"):
        out += [f"go to {c} {state} door {n}" for c in COLORS for n in nums]
    out += [f"go through {c} open door {n}" for c in COLORS for n in nums]
    for state in ("closed", "locked"):
        out += [f"toggle and go through {c} {state} door {n}" for c in COLORS for n in nums]
    return out


def action_phrases(env: str) -> list[str]:
    """The action vocabulary of ``env`` (only BabyAI has a closed one)."""
    if env != "babyai":
        raise ValueError(f"the menu policy needs an env with a closed action menu, not {env!r}")
    return babyai_action_phrases()


def build_menu_model(
    directory: str | Path,
    env: str,
    spec: TinyModelSpec,
    *,
    corpus_episodes: int = 64,
    seed: int = 0,
) -> Path:
    """Build (or reuse) a tiny model whose tokenizer has one token per action phrase.

    The BPE part is trained on ``corpus_episodes`` random-action episodes of ``env`` plus the
    agent's built-in text; the model is a randomly initialised Qwen2 sized by ``spec``.
    """
    directory = Path(directory)
    want = menu_manifest(env, spec, corpus_episodes, seed)
    manifest = directory / MANIFEST
    if manifest.exists():
        have = json.loads(manifest.read_text())
        if have != want:
            raise ValueError(f"{directory} holds a different menu model: {have} != {want}")
        return directory
    from agentgym.models import no_progress_bars, train_tokenizer

    texts = env_corpus(env, episodes=corpus_episodes, seed=seed) + builtin_corpus()
    tokenizer = train_tokenizer(texts, spec.vocab_size)
    tokenizer.add_tokens(action_phrases(env))
    model = init_model(tokenizer, spec)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".menu-", dir=directory.parent))
    try:
        tokenizer.save_pretrained(staging)
        no_progress_bars()
        model.save_pretrained(staging)
        (staging / MANIFEST).write_text(json.dumps(want, indent=2, sort_keys=True))
        staging.rename(directory)
    except OSError:
        if not manifest.exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def action_token_ids(tokenizer: Any, env: str) -> list[int]:
    """Ids of the env's action phrases that are single tokens of ``tokenizer``."""
    ids = []
    for phrase in action_phrases(env):
        tid = tokenizer.convert_tokens_to_ids(phrase)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.append(tid)
    if not ids:
        raise ValueError("the tokenizer has no action tokens; build it with build_menu_model")
    return ids


class MenuPolicy(nn.Module):
    """A causal LM whose first reply token is restricted to the menu (module docstring).

    Its state dict is the wrapped model's under the prefix ``lm.``; engines, the learner and
    checkpoints all hold this module, so weights move between them unchanged.
    """

    def __init__(
        self,
        lm: nn.Module,
        action_ids: Sequence[int],
        reply_prefix: Sequence[int],
        im_start_id: int,
    ):
        super().__init__()
        self.lm = lm
        self.config = lm.config
        self.generation_config = getattr(lm, "generation_config", None)
        vocab = lm.get_output_embeddings().weight.shape[0]
        is_action = torch.zeros(vocab, dtype=torch.bool)
        is_action[list(action_ids)] = True
        self.register_buffer("is_action", is_action, persistent=False)
        self.register_buffer("reply_prefix", torch.tensor(list(reply_prefix)), persistent=False)
        self.im_start_id = int(im_start_id)

    @classmethod
    def from_tokenizer(cls, lm: nn.Module, tokenizer: Any, env: str) -> MenuPolicy:
        """Wrap ``lm`` using the action tokens and chat markers of ``tokenizer``."""
        prefix = tokenizer.encode(f"{IM_START}assistant\n", add_special_tokens=False)
        return cls(
            lm, action_token_ids(tokenizer, env), prefix, tokenizer.convert_tokens_to_ids(IM_START)
        )

    def forward(
        self, input_ids: torch.Tensor, logits_to_keep: int | torch.Tensor = 0, **kwargs: Any
    ) -> Any:
        """The wrapped model's output with reply-start logits restricted to the menu.

        ``logits_to_keep`` as in transformers: an int keeps the last that many positions (0: all),
        a 1-D tensor keeps those positions. A first call with a cache (an engine's prefill) only
        needs the last position, so by default only its logits are computed; cached decode steps
        see one token and are never masked.
        """
        cached = kwargs.get("cache", kwargs.get("past_key_values")) is not None
        prefill = kwargs.get("use_cache") and not cached
        if prefill and isinstance(logits_to_keep, int) and logits_to_keep == 0:
            logits_to_keep = 1
        if not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
            kwargs["logits_to_keep"] = logits_to_keep  # 0 (all) is the wrapped model's default
        out = self.lm(input_ids=input_ids, **kwargs)
        if input_ids.shape[1] > 1 or not cached:
            out.logits = self._mask(input_ids, out.logits, logits_to_keep)
        return out

    def _mask(
        self, input_ids: torch.Tensor, logits: torch.Tensor, kept: int | torch.Tensor
    ) -> torch.Tensor:
        T = input_ids.shape[1]
        if isinstance(kept, int):  # the last logits.shape[1] positions
            kept = torch.arange(T - logits.shape[1], T, device=logits.device)
        if len(kept) == 0:
            return logits
        allowed = reply_menus(
            input_ids, self.reply_prefix, self.im_start_id, self.is_action, first=int(kept[0])
        )
        if not allowed:
            return logits
        # One mask and one out-of-place fill: an in-place fill per reply on a copy of the
        # logits made autograd copy the whole [B, T, V] gradient once per reply.
        rows = torch.tensor([row for row, _ in allowed], device=logits.device)
        positions = torch.tensor([pos for _, pos in allowed], device=logits.device)
        columns = torch.searchsorted(kept, positions).clamp(max=len(kept) - 1)
        present = kept[columns] == positions  # False: a reply start whose logits were not kept
        keep = torch.zeros(len(allowed), logits.shape[-1], dtype=torch.bool, device=logits.device)
        for k, menu in enumerate(allowed.values()):
            keep[k, menu] = True
        banned = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        banned[rows[present], columns[present]] = ~keep[present]
        return logits.masked_fill(banned, MASKED_LOGIT)


def reply_menus(
    input_ids: torch.Tensor,
    prefix: torch.Tensor,
    im_start_id: int,
    is_action: torch.Tensor,
    first: int = 0,
) -> dict[tuple[int, int], torch.Tensor]:
    """``{(row, position): action ids}`` for every position >= ``first`` that ends a reply
    prefix.

    The menu of a reply is the set of action tokens between the previous ``<|im_start|>`` (the
    user message) and the reply prefix. A reply start with no listed action is left unmasked.
    """
    n = len(prefix)
    if input_ids.shape[1] < n:
        return {}
    windows = input_ids.unfold(1, n, 1)
    hits = (windows == prefix.to(input_ids.device)).all(-1).nonzero().tolist()
    out = {}
    for row, start in hits:
        if start + n - 1 < first:
            continue
        ids = input_ids[row, :start]
        starts = (ids == im_start_id).nonzero()
        begin = int(starts[-1]) + 1 if len(starts) else 0
        segment = ids[begin:]
        menu = segment[is_action[segment]].unique()
        if len(menu):
            out[(row, start + n - 1)] = menu
    return out
