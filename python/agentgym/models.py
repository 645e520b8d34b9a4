"""A tiny local model for CPU runs: a byte-level BPE tokenizer trained on env text and a randomly
initialised Qwen2 causal LM, saved like any Hugging Face checkpoint. No downloads.

`build_tiny_model(directory, corpus)` writes the tokenizer (with a ChatML chat template, the
``<|im_start|>role\\n...<|im_end|>\\n`` format of Qwen2.5) and the model with `save_pretrained`.
A directory that already holds a build with the same spec is reused as is. `load_model(path)` loads
either that directory or a real checkpoint directory the same way. `copy_warmup` (the build's
``copy_warmup_steps``) gives the random model the one skill of a pretrained one that agent
episodes need and a few hundred SFT steps do not teach: copying a span it has seen before.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentgym.configtools import check

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""ChatML: each message is <|im_start|>ROLE, newline, CONTENT, <|im_end|>, newline."""

MANIFEST = "agentgym_tiny_model.json"
MENU_MANIFEST = "agentgym_menu_model.json"


@dataclass(frozen=True)
class TinyModelSpec:
    """Sizes of the tiny model and its tokenizer."""

    vocab_size: int = 2048
    """Target BPE vocabulary (256 bytes + special tokens + merges); the trainer may stop short."""
    hidden_size: int = 128
    """Width of the residual stream."""
    intermediate_size: int = 384
    """Width of the MLP."""
    num_hidden_layers: int = 2
    """Transformer blocks."""
    num_attention_heads: int = 4
    """Query heads (head dim = hidden_size / heads)."""
    num_key_value_heads: int = 2
    """Key/value heads (grouped-query attention as in Qwen2)."""
    max_position_embeddings: int = 4096
    """Longest context the model accepts."""
    seed: int = 0
    """Seed of the weight initialisation."""

    def __post_init__(self) -> None:
        sizes = (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
        )  # fmt: skip
        heads, kv = self.num_attention_heads, self.num_key_value_heads
        check(
            self,
            *((name, getattr(self, name) >= 1, "must be >= 1") for name in sizes),
            ("hidden_size", heads < 1 or self.hidden_size % heads == 0,
             f"must be a multiple of num_attention_heads ({heads})"),
            ("num_attention_heads", kv < 1 or heads % kv == 0,
             f"must be a multiple of num_key_value_heads ({kv})"),
        )  # fmt: skip


Corpus = Iterable[str] | Callable[[], Iterable[str]]


def menu_manifest(env: str, spec: TinyModelSpec, corpus_episodes: int, seed: int) -> dict:
    """What a menu model's manifest records (``agentgym.actor.menu``; a build with another one
    is not reused)."""
    return {"spec": asdict(spec), "env": env, "corpus_episodes": corpus_episodes, "seed": seed}


def build_tiny_model(
    directory: str | Path,
    corpus: Corpus,
    spec: TinyModelSpec = TinyModelSpec(),
    *,
    text_files: Iterable[str] = (),
    copy_warmup_steps: int = 0,
) -> Path:
    """Build (or reuse) the tiny model in `directory`; returns the directory.

    corpus: text to train the tokenizer on (observations, instructions, actions), or a callable
    producing it, which is only called when the directory holds no build yet. The agent
    instructions and corrective messages of `agentgym.agent` are always added, and the text of
    each of `text_files` (see ``file_texts``); the manifest records the spec and these paths.
    copy_warmup_steps: steps of ``copy_warmup`` after the initialisation (0: none); the manifest
    records them and the copy accuracy reached.
    Raises ValueError when the directory holds a build with a different spec, text files or
    warm-up.
    """
    directory = Path(directory)
    text_files = resolved_paths(text_files)
    cached = _read_manifest(directory)
    if cached is not None:
        problem = manifest_conflict(cached, spec, text_files, copy_warmup_steps)
        if problem is not None:
            raise ValueError(f"{directory} holds a tiny model built with {problem}")
        return directory
    texts = list(corpus() if callable(corpus) else corpus) + builtin_corpus()
    texts += [t for path in text_files for t in file_texts(path)]
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=directory.parent))
    try:
        tokenizer = train_tokenizer(texts, spec.vocab_size)
        tokenizer.save_pretrained(staging)
        model = init_model(tokenizer, spec)
        manifest = {"spec": asdict(spec), "corpus_sha256": _corpus_hash(texts)}
        if copy_warmup_steps:
            accuracy = copy_warmup(model, tokenizer, copy_warmup_steps, seed=spec.seed)
            manifest["copy_warmup"] = {"steps": copy_warmup_steps, "copy_accuracy": accuracy}
        no_progress_bars()
        model.save_pretrained(staging)
        if text_files:
            manifest["tokenizer_texts"] = text_files
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        _publish(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def manifest_conflict(
    manifest: dict[str, Any], spec: TinyModelSpec, text_files: list[str], copy_warmup_steps: int = 0
) -> str | None:
    """How a tiny model's build (its manifest) differs from `spec`, `text_files` and
    `copy_warmup_steps`, or None. A build whose manifest records no text files or warm-up had
    none."""
    if manifest.get("spec") != asdict(spec):
        return f"{manifest.get('spec')}, not {asdict(spec)}"
    conflicts = build_setting_conflicts(manifest, text_files, copy_warmup_steps)
    first = next(iter(conflicts.values()), None)
    return None if first is None else f"{first[0]}, not {first[1]}"


def build_setting_conflicts(
    manifest: dict[str, Any], text_files: Iterable[str], copy_warmup_steps: int
) -> dict[str, tuple[str, Any]]:
    """The build settings (``tokenizer_texts``, ``copy_warmup_steps``) a tiny model's manifest
    records otherwise: name -> (what the build recorded, in words; the value asked for). A
    manifest that records no text files or warm-up had none."""
    conflicts: dict[str, tuple[str, Any]] = {}
    have, want = manifest.get("tokenizer_texts", []), resolved_paths(text_files)
    if have != want:
        conflicts["tokenizer_texts"] = (f"tokenizer texts {have}", want)
    steps = manifest.get("copy_warmup", {}).get("steps", 0)
    if steps != copy_warmup_steps:
        conflicts["copy_warmup_steps"] = (f"{steps} copy warm-up steps", copy_warmup_steps)
    return conflicts


COPY_SPAN = 32
"""Tokens in a copy warm-up span; each training sequence is a span followed by its repeat."""
COPY_BATCH = 32
"""Sequences per copy warm-up step."""
COPY_LR = 1e-3
"""AdamW learning rate of the copy warm-up (a 2-layer, 128-wide model copies after ~150 steps)."""


def copy_token_ids(tokenizer: Any) -> Any:
    """The ids copy spans are drawn from: the whole vocabulary but the special tokens."""
    import torch

    special = set(tokenizer.all_special_ids)
    return torch.tensor([i for i in range(len(tokenizer)) if i not in special])


def copy_sequences(ids: Any, size: int, generator: Any) -> Any:
    """`size` sequences of COPY_SPAN tokens drawn uniformly from `ids`, each followed by its
    repeat: only the repeat is predictable, by copying."""
    import torch

    span = ids[torch.randint(len(ids), (size, COPY_SPAN), generator=generator)]
    return torch.cat([span, span], dim=1)


def copy_loss(model: Any, ids: Any, size: int, generator: Any) -> Any:
    """Next-token cross-entropy of `model` on `size` fresh copy sequences."""
    sequences = copy_sequences(ids, size, generator)
    return model(input_ids=sequences, labels=sequences).loss


def copy_warmup(model: Any, tokenizer: Any, steps: int, *, seed: int = 0) -> float:
    """Train `model` for `steps` steps to continue repeated spans; returns its copy accuracy.

    Each step is COPY_BATCH ``copy_sequences`` (random spans followed by their repeats); the
    loss is next-token cross-entropy over the whole sequence, of which only the repeat is
    predictable. A model learns it by forming induction heads (attend to the token after the
    earlier occurrence of the current one, copy it), the mechanism pretrained language models
    use to copy names from their context. A randomly initialised model does not form them in a
    few hundred SFT steps on agent episodes, so it cannot copy a name it has never seen from a
    question or a retrieved passage (bench/RESULTS.md, Deep Search quickstart). Copy accuracy:
    share of a fresh batch's repeated tokens (after the first) that the model predicts greedily.
    Deterministic for a given `seed`.
    """
    import torch

    ids = copy_token_ids(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=COPY_LR, weight_decay=0.0)
    model.train()
    for step in range(1, steps + 1):
        copy_loss(model, ids, COPY_BATCH, generator).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == steps:
            print(f"tiny model: copy warm-up step {step}/{steps}", file=sys.stderr, flush=True)
    model.eval()
    accuracy = copy_accuracy(model, ids, generator)
    print(f"tiny model: copy accuracy {accuracy:.3f}", file=sys.stderr, flush=True)
    return accuracy


def copy_accuracy(model: Any, ids: Any, generator: Any) -> float:
    """Share of the repeated tokens (after each repeat's first) of 4 * COPY_BATCH fresh copy
    sequences that `model` predicts greedily."""
    import torch

    sequences = copy_sequences(ids, 4 * COPY_BATCH, generator)
    with torch.no_grad():
        predicted = model(input_ids=sequences).logits[:, COPY_SPAN:-1].argmax(-1)
    return round((predicted == sequences[:, COPY_SPAN + 1 :]).float().mean().item(), 4)


def resolved_paths(paths: Iterable[str | Path]) -> list[str]:
    """Absolute paths, so a build made from another working directory compares equal."""
    return [str(Path(p).expanduser().resolve()) for p in paths]


def file_texts(path: str | Path) -> list[str]:
    """The text of a file for a tokenizer: of a ``.jsonl`` file every string in each record
    (nested lists and objects included, keys not), of any other file its non-empty lines."""
    lines = Path(path).read_text().splitlines()
    if not str(path).endswith(".jsonl"):
        return [line for line in lines if line.strip()]
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out += _strings(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not a JSON record ({err.msg})") from None
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:
    """Train a byte-level BPE on `texts`; returns a PreTrainedTokenizerFast with ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
        chat_template=CHATML_TEMPLATE,
        model_max_length=TinyModelSpec.max_position_embeddings,
    )


def init_model(tokenizer: Any, spec: TinyModelSpec) -> Any:
    """A randomly initialised Qwen2ForCausalLM sized by `spec`, seeded by `spec.seed`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    endoftext = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=endoftext,
        eos_token_id=im_end,
        pad_token_id=endoftext,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[im_end, endoftext], pad_token_id=endoftext, bos_token_id=endoftext
    )
    return model


def no_progress_bars() -> None:
    """Turn off transformers' progress bars ("Loading weights", "Writing model shards"):
    agentgym's commands print their own progress, and the learner and every actor load and
    save models, each of which would draw one on the console."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


_LOADING = threading.Lock()
"""Held while a model loads: ``from_pretrained`` switches process-wide torch defaults (the
meta device its empty weights start on), so two threads loading at once (the learner and the
actors of ``agentgym train --inline``) can see each other's, and fail."""


def load_model(path: str | Path, *, device: str = "cpu", dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a local checkpoint directory; the model in eval mode on `device`
    (one load at a time in a process: ``_LOADING``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    no_progress_bars()
    with _LOADING:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
        return model.to(device).eval(), tokenizer


def cache_keyword(model: Any) -> str:
    """The keyword ``model.forward`` takes a KV cache by: ``cache`` in transformers >= 5.24
    (which deprecates ``past_key_values``), ``past_key_values`` before. A wrapper (the menu
    policy) answers for the model it wraps."""
    import inspect

    inner = getattr(model, "lm", model)
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    """The KV cache a forward pass with ``use_cache=True`` returned (either field name)."""
    return output["cache"] if "cache" in output else output["past_key_values"]


def cache_layers(cache: Any) -> list[tuple[Any, Any]]:
    """Per decoder layer, the (keys, values) tensors of a transformers KV cache."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def new_cache(layers: Sequence[tuple[Any, Any]]) -> Any:
    """A transformers ``DynamicCache`` holding ``layers`` ((keys, values) per layer)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(layers):
        cache.update(k, v, i)
    return cache


def keeps_logits(model: Any) -> bool:
    """Whether ``model.forward`` takes transformers' ``logits_to_keep``, so that logits can be
    computed only at the positions a caller needs (a 1-D tensor of positions)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer of a local checkpoint directory."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def env_corpus(
    env: str, *, episodes: int = 64, max_steps: int = 20, seed: int = 0, **options: Any
) -> list[str]:
    """Text of `episodes` episodes of native env `env` (a tokenizer corpus).

    Actions come from the env's menu of available actions when it has one (BabyAI, random
    choices); otherwise from the env's expert when it has one (search: the searches and answer
    of the expert), else from the commands the first observation lists (TextCraft: each
    "craft ..." line and a "get" of each ingredient) plus "inventory". Each action is also
    written as an agent reply in the family's format ("Thought: ...\nAction: <action>", or
    search's tags) so the reply format gets its own merges; the family's instruction is added
    when ``builtin_corpus`` lacks it. Deterministic for a given (env, episodes, max_steps, seed,
    options).
    """
    from agentgym.envs import EnvPool
    from agentgym.envs.families import family

    rules = family(env)
    rng = random.Random(seed)
    pool = EnvPool(env, seed=seed, **options)
    ids = pool.create(episodes)
    texts = pool.reset(ids, pool.sample_task_ids(episodes))
    fallback = {i: _commands_in(obs) for i, obs in zip(ids, texts, strict=True)}
    if rules.instruction not in builtin_corpus():
        texts.append(rules.instruction)
    live = list(ids)
    for _ in range(max_steps):
        menus = pool.available_actions(live)
        experts = pool.expert(live).moves if any(m is None for m in menus) else [None] * len(live)
        moves = [
            move if menu is None and move is not None else _random_move(rng, menu or fallback[i])
            for i, menu, move in zip(live, menus, experts, strict=True)
        ]
        actions = [action for action, _ in moves]
        batch = pool.step(live, actions)
        texts += [o for o in batch.observations if o]
        texts += [rules.format_reply(thought, action) for action, thought in moves]
        ended = batch.dones | batch.truncated
        live = [i for k, i in enumerate(live) if not ended[k] and batch.errors[k] is None]
        if not live:
            break
    pool.close(ids)
    return texts


def _random_move(rng: random.Random, actions: list[str]) -> tuple[str, str]:
    action = rng.choice(actions)
    return action, f"I will {action}."


_CRAFT_LINE = re.compile(r"^craft .+$", re.MULTILINE)
_INGREDIENT = re.compile(r"(\d+) ([a-z][a-z ]*?)(?:,|$)")


def _commands_in(observation: str) -> list[str]:
    """Actions a random TextCraft-like player can try: listed crafts, gets of their inputs."""
    crafts = _CRAFT_LINE.findall(observation)
    gets = [
        f"get {n} {item}"
        for line in crafts
        for n, item in _INGREDIENT.findall(line.partition(" using ")[2])
    ]
    return ["inventory", *crafts, *gets]


def builtin_corpus() -> list[str]:
    """Text every agentgym prompt contains: instructions, the reply format, corrective messages."""
    from agentgym.agent import parsing, prompts

    return [
        prompts.BABYAI_INSTRUCTION,
        prompts.TEXTCRAFT_INSTRUCTION,
        prompts.GENERIC_INSTRUCTION,
        parsing.NO_ACTION_MESSAGE,
        parsing.MANY_ACTIONS_MESSAGE,
        parsing.EMPTY_ACTION_MESSAGE,
        "Thought: I should act.\nAction: ",
    ]


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return None


def _publish(staging: Path, directory: Path) -> None:
    """Move a finished build into place; a concurrent builder that won the race is kept."""
    try:
        os.rename(staging, directory)
    except OSError:
        if _read_manifest(directory) is None:
            if directory.exists() and not any(directory.iterdir()):
                directory.rmdir()
                os.rename(staging, directory)
                return
            raise


def _corpus_hash(texts: list[str]) -> str:
    digest = hashlib.sha256()
    for t in texts:
        digest.update(t.encode())
        digest.update(b"\0")
    return digest.hexdigest()
