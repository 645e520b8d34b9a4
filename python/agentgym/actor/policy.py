"""Building the policy model, its tokenizer and an engine from a ``RunConfig``.

The learner, every actor and ``agentgym eval`` build the policy the same way, from the same
directory, so they start from identical weights and exchange state dicts unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym.config import RunConfig


def model_dir(config: RunConfig) -> Path:
    """The checkpoint directory the policy is loaded from (the tiny model lives in the run dir)."""
    if config.model.path is not None:
        return Path(config.model.path)
    return Path(config.run_dir) / "model"


def model_conflict(config: RunConfig) -> str | None:
    """Why the run dir's model cannot serve ``config`` (it was built with other settings), or
    None; reads the build's manifest only (no torch), so the launcher can refuse before any
    process starts. The build itself is left to the learner and actors."""
    if config.model.path is not None:
        return None
    directory = model_dir(config)
    if config.model.menu_policy:
        from agentgym.models import MENU_MANIFEST as MANIFEST
        from agentgym.models import menu_manifest

        want = menu_manifest(config.env.name, config.model.tiny, config.model.corpus_episodes,
                             config.actor.seed)  # fmt: skip
        have = _manifest(directory / MANIFEST)
        ok = have is None or have == want
        return None if ok else f"{directory} holds a different menu model: {have} != {want}"
    from agentgym.models import MANIFEST, manifest_conflict

    have = _manifest(directory / MANIFEST)
    if have is None:
        return None
    model = config.model
    problem = manifest_conflict(
        have, model.tiny, list(model.tokenizer_texts), model.copy_warmup_steps
    )
    return None if problem is None else f"{directory} holds a tiny model built with {problem}"


def _manifest(path: Path) -> dict | None:
    import json

    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def wait_for_model(config: RunConfig, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for another process (the learner) to finish building the
    model directory; True when it is there."""
    import time

    from agentgym.models import MANIFEST as TINY
    from agentgym.models import MENU_MANIFEST as MENU

    if config.model.path is not None:
        return True
    directory = model_dir(config)
    deadline = time.monotonic() + timeout_s
    while not ((directory / MENU).exists() or (directory / TINY).exists()):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def prepare_model(config: RunConfig) -> Path:
    """Make sure the policy's directory exists (build the tiny model once); returns it."""
    directory = model_dir(config)
    if config.model.path is not None:
        return directory
    if config.model.menu_policy:
        from agentgym.actor.menu import build_menu_model

        return build_menu_model(
            directory,
            config.env.name,
            config.model.tiny,
            corpus_episodes=config.model.corpus_episodes,
            seed=config.actor.seed,
        )
    from agentgym.envs import env_names
    from agentgym.models import build_tiny_model, env_corpus

    n, seed = config.model.corpus_episodes, config.actor.seed
    native = [e.env for e in config.entries if not e.env.is_remote or e.env.name in env_names()]

    def corpus() -> list[str]:  # every env's text (a multi-env run's tokenizer covers them all)
        return [t for e in native for t in env_corpus(e.name, episodes=n, seed=seed, **e.options)]

    model = config.model
    return build_tiny_model(
        directory, corpus, model.tiny, text_files=model.tokenizer_texts,
        copy_warmup_steps=model.copy_warmup_steps,
    )  # fmt: skip


def tokenizer_id(directory: str | Path) -> str:
    """An id of the tokenizer in a model directory: a hash of its ``tokenizer.json``'s vocabulary
    and added tokens (not of the file, whose layout differs between ``tokenizers`` versions);
    empty without a ``tokenizer.json``. A tiny model's tokenizer is trained on its run's env text
    (``actor.seed``, ``model.corpus_episodes``, the envs), so two runs can differ here."""
    import hashlib
    import json

    try:
        spec = json.loads((Path(directory) / "tokenizer.json").read_text())
    except FileNotFoundError:
        return ""
    vocab = (spec.get("model") or {}).get("vocab")
    added = sorted((t.get("id"), t.get("content")) for t in spec.get("added_tokens") or [])
    text = json.dumps([vocab, added], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_tokenizer(checkpoint: str | Path, config: RunConfig) -> None:
    """Refuse weights trained under another tokenizer than the run's policy has: their token
    ids would mean other text, and nothing else would fail."""
    import json

    try:
        state = json.loads((Path(checkpoint) / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return  # a model directory, or a checkpoint written before ids were kept
    trained, here = state.get("tokenizer") or "", tokenizer_id(model_dir(config))
    if trained and here and trained != here:
        raise ValueError(
            f"{checkpoint} was trained with another tokenizer than {model_dir(config)} has "
            f"(tokenizer id {trained} != {here}). A tiny model's tokenizer is built from its "
            "run's env text (actor.seed, model.corpus_episodes, the envs): use the same "
            "settings as the run that wrote the checkpoint, or point model.path at that run's "
            "model directory"
        )


def load_policy(config: RunConfig, device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode; the model is wrapped in ``MenuPolicy`` if configured,
    and holds ``model.init_from``'s weights when that is set."""
    from agentgym.models import load_model

    model, tokenizer = load_model(model_dir(config), device=device)
    if config.model.menu_policy:
        from agentgym.actor.menu import MenuPolicy

        model = MenuPolicy.from_tokenizer(model, tokenizer, config.env.name).to(device).eval()
    if config.model.init_from is not None:
        init = resolve_checkpoint(config.model.init_from)
        check_tokenizer(init, config)
        load_weights_file(model, init)
    return model, tokenizer


def load_trained_policy(
    config: RunConfig, checkpoint: str | Path, *, device: str = "cpu"
) -> tuple[Any, Any, Path]:
    """(model, tokenizer, checkpoint dir): the run's policy with ``checkpoint``'s weights (a
    checkpoint dir, a checkpoints folder, or a model dir; either kind of learner checkpoint)."""
    prepare_model(config)
    ckpt = resolve_checkpoint(checkpoint)
    check_tokenizer(ckpt, config)
    model, tokenizer = load_policy(config, device=device)
    load_weights_file(model, ckpt)
    return model, tokenizer, ckpt


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory; a checkpoints folder resolves to its newest checkpoint."""
    path = Path(path)
    if (path / "latest").exists():
        return path / (path / "latest").read_text().strip()
    if not (path / "model.safetensors").exists() and not (path / "dcp" / ".metadata").exists():
        raise SystemExit(
            f"{path}: no model.safetensors or dcp/ (not a checkpoint or model directory)"
        )
    return path


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad id (its EOS when it has none)."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def make_engine(
    config: RunConfig,
    model: Any,
    tokenizer: Any,
    *,
    seed: int = 0,
    checkpoint: str | Path | None = None,
    owns_model: bool = False,
    max_staleness: int | None = None,
) -> Any:
    """The configured engine with ``model``'s weights: around ``model`` (hf), or started from
    a directory holding them (vllm, ``engine_weights_dir``). ``checkpoint``: where ``model``'s
    weights came from when not from the policy's directory (an evaluated checkpoint); by
    default ``model.init_from``, as ``load_policy`` loads it. ``owns_model``: nothing else
    uses ``model``, so the hf engine may hold its weights as it computes with them (bf16).
    ``max_staleness``: the actor's staleness bound (None: ``learner.max_staleness``, 0 in a
    deterministic run), which bounds the age of reused keys and values by default."""
    from agentgym.engines.hf import HFEngine, stop_ids_for

    if config.engine.backend == "vllm":
        if checkpoint is None and config.model.init_from is not None:
            checkpoint = resolve_checkpoint(config.model.init_from)
        directory = engine_weights_dir(config, model, tokenizer, checkpoint)
        return start_vllm(config, directory, seed, stop_ids_for(model, tokenizer))

    inner = getattr(model, "lm", model)
    return HFEngine(
        model,
        stop_token_ids=stop_ids_for(inner, tokenizer),
        pad_token_id=pad_token_id(tokenizer),
        max_batch_size=1 if config.deterministic else config.engine.max_batch_size,
        gather_s=config.engine.gather_s,
        seed=seed,
        prefix_cache_mb=0 if config.model.menu_policy else config.engine.prefix_cache_size_mb,
        tokenizer=tokenizer,
        bf16=config.engine.bf16,
        owns_model=owns_model,
        fast_decode=config.engine.fast_decode,
        reuse_kv_across_versions=config.engine.reuse_kv_across_versions,
        kv_reuse_max_lag=kv_reuse_lag(config, max_staleness),
    )


def start_vllm(config: RunConfig, directory: Path, seed: int, stop_token_ids: list[int]) -> Any:
    """vLLM started on the model directory ``directory`` as ``engine`` configures it: bf16 or
    float32 as the learner computes, room for the longest prompt and reply the actor makes
    (``actor.max_context_tokens - 1`` + ``engine.max_new_tokens``), ``engine.vllm_kv_cache_mb``."""
    from agentgym.engines.vllm import VLLMEngine

    e = config.engine
    mb = e.vllm_kv_cache_mb
    return VLLMEngine.from_pretrained(
        directory,
        dtype="bfloat16" if e.bf16 else "float32",
        kv_cache_memory_bytes=None if mb is None else int(mb * (1 << 20)),
        max_model_len=config.actor.max_context_tokens - 1 + e.max_new_tokens,
        seed=seed,
        stop_token_ids=stop_token_ids,
        enforce_eager=e.vllm_eager,
    )


def kv_reuse_lag(config: RunConfig, max_staleness: int | None = None) -> int:
    """How many versions old the engine's reused keys and values may be: ``engine.
    kv_reuse_max_lag``, by default the actor's staleness bound (0 in a synchronous run)."""
    if config.engine.kv_reuse_max_lag is not None:
        return config.engine.kv_reuse_max_lag
    if max_staleness is not None:
        return max_staleness
    return 0 if config.deterministic else config.learner.max_staleness


ENGINE_WEIGHTS = "engine_weights"
"""Folder of the run dir holding checkpoints' policies as model directories (for vLLM)."""


def engine_weights_dir(
    config: RunConfig, model: Any, tokenizer: Any, checkpoint: str | Path | None
) -> Path:
    """A Hugging Face model directory holding ``model``'s weights, for an engine that starts
    from one (vLLM): the policy's own directory when the weights are its (``checkpoint``
    None, or that directory); else ``model`` and ``tokenizer`` saved, once per checkpoint
    (its path and the time its weights were written), under ``RUN_DIR/engine_weights/``,
    so that actors and ``agentgym eval --checkpoint`` sample with the weights the learner
    starts from or the checkpoint holds, never the base model's."""
    import hashlib
    import os
    import shutil

    base = model_dir(config)
    if checkpoint is None or Path(checkpoint).resolve() == base.resolve():
        return base
    ckpt = Path(checkpoint).resolve()
    weights = [ckpt / "model.safetensors", ckpt / "dcp" / ".metadata"]
    stamp = max(p.stat().st_mtime_ns for p in weights if p.exists())
    key = hashlib.blake2b(f"{ckpt}:{stamp}".encode(), digest_size=6).hexdigest()
    out = Path(config.run_dir) / ENGINE_WEIGHTS / f"{ckpt.name}-{key}"
    if (out / "config.json").exists():
        return out
    staging = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    getattr(model, "lm", model).save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(out)
    except OSError:  # another actor saved it first
        shutil.rmtree(staging, ignore_errors=True)
    return out


def sampling_params(config: RunConfig, *, evaluation: bool = False) -> Any:
    """The engine's ``SamplingParams`` from the config: the training sampler's (the whole
    distribution at ``engine.temperature``: what the learner's log-probs describe), or with
    ``evaluation`` the eval sampler's (``eval.temperature``, ``eval.top_k``, ``eval.top_p``)."""
    from agentgym.engines.base import SamplingParams

    e = config.engine
    if not evaluation:
        return SamplingParams(max_new_tokens=e.max_new_tokens, temperature=e.temperature)
    ev = config.eval
    return SamplingParams(
        max_new_tokens=e.max_new_tokens,
        temperature=e.temperature if ev.temperature is None else ev.temperature,
        top_k=ev.top_k,
        top_p=ev.top_p,
    )


def load_weights_file(model: Any, path: str | Path) -> None:
    """Load ``model.safetensors`` of a learner checkpoint (or of a model directory, whose names
    lack the ``MenuPolicy`` prefix), or the policy of a sharded (DCP) checkpoint, into
    ``model``; raises if the names or shapes do not fit."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    from agentgym.learner.checkpoint import is_sharded, load_sharded_policy

    if is_sharded(path):
        load_sharded_policy(path, model)
        return
    file = Path(path) / "model.safetensors"
    with safe_open(str(file), "pt") as f:
        names = list(f.keys())
    target = model
    if hasattr(model, "lm") and not any(n.startswith("lm.") for n in names):
        target = model.lm
    missing, unexpected = load_model(target, str(file), strict=False)
    if missing or unexpected:
        raise ValueError(f"{file}: weights do not fit the model ({missing=}, {unexpected=})")
