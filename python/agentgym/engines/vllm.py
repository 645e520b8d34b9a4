"""vLLM engine: AsyncLLMEngine with processed log-probs and weights loaded in place.

UNTESTED ON THE DEVELOPMENT MACHINE: it has no GPU and vLLM is not installed there. This module is
written against vLLM's documented V1 API (``AsyncEngineArgs``, ``AsyncLLMEngine.from_engine_args``,
``TokensPrompt``, ``SamplingParams(logprobs=0, output_kind=FINAL_ONLY)``, the
``logprobs_mode="processed_logprobs"`` engine argument of vLLM >= 0.10.2, ``worker_extension_cls``
with ``collective_rpc`` for weight updates, ``reset_prefix_cache``). Its tests carry
``@pytest.mark.gpu`` and skip without CUDA and vLLM. Treat it as a starting point until a GPU run
has checked it.

Behaviour:
- every prompt becomes one vLLM request (vLLM batches continuously across all of them);
- ``logprobs=0`` asks for the sampled token's log-prob only; with
  ``logprobs_mode="processed_logprobs"`` that is the log-prob after temperature and top-k/top-p,
  the behaviour distribution the learner must compare against;
- ``load_weights`` closes the gate to new requests, waits for those in flight, loads the tensors
  in every worker through `AgentgymWorkerExtension.load_agentgym_weights`, drops the prefix cache
  (its KV entries came from the old weights) and reopens: every generation has one version.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.engines.base import Generation, SamplingParams


class AgentgymWorkerExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``): in-place weight loading."""

    def load_agentgym_weights(self, weights: list[tuple[str, Any]]) -> int:
        """Load (name, tensor) pairs with the model's own `load_weights`; returns how many."""
        model = self.model_runner.model  # type: ignore[attr-defined]
        model.load_weights(weights=weights)
        return len(weights)


class VLLMEngine:
    """An `Engine` on vLLM's async engine (see the module docstring; untested here)."""

    def __init__(self, engine: Any, *, version: int = 0) -> None:
        """Wrap an already built ``AsyncLLMEngine``; prefer `VLLMEngine.from_pretrained`."""
        self._engine = engine
        self._version = version
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
        max_model_len: int | None = None,
        seed: int = 0,
        **engine_kwargs: Any,
    ) -> VLLMEngine:
        """Start vLLM on a local checkpoint directory (imports vllm here, not at module import)."""
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        args = AsyncEngineArgs(
            model=str(path),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=f"{__name__}.AgentgymWorkerExtension",
            **engine_kwargs,
        )
        return cls(AsyncLLMEngine.from_engine_args(args))

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
        """Drain requests, load `state_dict` into every worker, reset the prefix cache."""
        self._open.clear()
        try:
            await self._idle.wait()
            weights = [(name, tensor.detach().cpu()) for name, tensor in state_dict.items()]
            await self._engine.collective_rpc("load_agentgym_weights", args=(weights,))
            await self._engine.reset_prefix_cache()
            self._version = version
        finally:
            self._open.set()

    async def load_weights_stream(
        self, tensors: AsyncIterator[tuple[str, Any]], version: int, batch_bytes: int = 256 << 20
    ) -> None:
        """Load tensors as they arrive, in batches of about ``batch_bytes`` per worker call
        (vLLM's ``load_weights`` takes any subset of the checkpoint's names), then reset the
        prefix cache. Requests wait from the first batch to the last; a stream that breaks off
        leaves version -1, so the next fetch asks for every tensor, and the gate stays closed
        until a stream completes."""
        self._open.clear()
        complete = False
        try:
            await self._idle.wait()
            batch: list[tuple[str, Any]] = []
            size = 0
            async for name, tensor in tensors:
                batch.append((name, tensor.detach().cpu()))
                size += tensor.numel() * tensor.element_size()
                if size >= batch_bytes:
                    await self._engine.collective_rpc("load_agentgym_weights", args=(batch,))
                    batch, size = [], 0
            if batch:
                await self._engine.collective_rpc("load_agentgym_weights", args=(batch,))
            await self._engine.reset_prefix_cache()
            self._version, complete = version, True
        finally:
            if complete:
                self._open.set()
            else:
                self._version = -1

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
