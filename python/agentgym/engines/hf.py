"""transformers engine: batched sampling on CPU or GPU for many concurrent episodes.

Requests from many coroutines go into one queue. A background task takes whatever is queued
(after a short gathering window), groups it by sampling parameters and runs one right-padded,
KV-cached decode loop per group in a worker thread, so the event loop keeps running while the
model computes. Rows that finish leave the batch. Weights are swapped between batches under the
same lock, so every generation comes from exactly one policy version.

CPU note: with small models each decode step is dominated by per-op overhead, so batching many
episodes per step is what buys throughput. When several processes share few cores (actors plus
a learner), call ``torch.set_num_threads(1)`` in each: on a loaded 2-core machine a tiny Qwen2
decode step took 373 ms with 2 intra-op threads and 32 ms with 1.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from agentgym import attention
from agentgym.engines.base import Generation, SamplingParams
from agentgym.engines.kv import (
    cast_linear_weights,
    load_untied_heads,
    slab_from_layers,
    slab_from_rows,
)
from agentgym.engines.prefix_cache import Layers, PrefixStore
from agentgym.engines.sampling import greedy_rows, processed_logprobs, sample_rows
from agentgym.models import cache_keyword, cache_layers, keeps_logits, new_cache, output_cache
from agentgym.transport.malloc import trim_heap


@dataclass
class _Request:
    prompt: list[int]
    seed: int
    future: asyncio.Future[Generation]


class HFEngine:
    """An `Engine` backed by a transformers causal LM (see the module docstring)."""

    streams_weights = True

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        stop_token_ids: Sequence[int],
        pad_token_id: int,
        max_batch_size: int = 64,
        gather_s: float = 0.002,
        seed: int = 0,
        version: int = 0,
        prefix_cache_mb: float = 0,
        tokenizer: Any = None,
        bf16: bool = False,
        owns_model: bool = False,
        fast_decode: bool = True,
        reuse_kv_across_versions: bool = False,
        kv_reuse_max_lag: int = 0,
    ) -> None:
        """Wrap `model` (already on its device, eval mode is set here).

        stop_token_ids: tokens that end every generation (EOS, <|im_end|>).
        pad_token_id: filler for padding and finished rows (never attended to).
        max_batch_size: most prompts in one forward pass.
        gather_s: how long the batcher waits after the first request for others to join.
        seed: seeds the stream used by requests without their own seed.
        prefix_cache_mb: keep the keys/values of finished generations, up to this many MB,
            so that a prompt extending one (an episode's next turn) prefills only its new
            tokens (`agentgym.engines.prefix_cache`); 0: prefill every prompt whole.
        tokenizer: decodes replies for stop strings (``SamplingParams.stop``).
        bf16: compute under bf16 autocast, as the learner does with ``learner.bf16``, so that
            both see nearly the same log-probs; keys and values are cached in bf16.
        owns_model: nobody else uses ``model`` (the actor's own copy, put in eval mode): with
            ``bf16`` its linear layers' weights are then held in bf16, which autocast would
            cast them to at every call anyway (``agentgym.engines.kv.cast_linear_weights``;
            same outputs, faster). A shared model (the periodic eval's, the learner's) is used
            as its owner keeps it.
        fast_decode: keys and values in one preallocated slab of one dtype, and on the CPU
            ``agentgym.attention``'s one-token kernel (``agentgym.engines.kv``); False:
            transformers' DynamicCache and SDPA with the weights as they are (for comparison).
        reuse_kv_across_versions: keep the prefix store when the weights change. A prompt
            continued from keys and values of older weights is sampled by a mix of two
            policies; its generation reports the oldest version among them, so the learner
            counts its lag from there (its behaviour log-probs are those it was sampled with,
            which is all the decoupled loss needs). False: the store is emptied at each update
            and every prompt in flight is prefilled again.
        kv_reuse_max_lag: with ``reuse_kv_across_versions``, keys and values at most this many
            versions older than the weights are reused (older entries are dropped).
        """
        self.model = model.eval() if owns_model else model
        self.tokenizer = tokenizer
        self.bf16 = bf16
        self.fast_decode = fast_decode
        self._untied = cast_linear_weights(model) if bf16 and owns_model and fast_decode else None
        if fast_decode:
            attention.install(model)
        self.kv_dtype = (torch.bfloat16 if bf16 else _state_dtype(model)) if fast_decode else None
        """The one dtype the decode loop caches keys and values in (None: as computed)."""
        self.store = PrefixStore(int(prefix_cache_mb * 2**20)) if prefix_cache_mb > 0 else None
        """The prefix cache (None: off)."""
        self.reuse_kv = reuse_kv_across_versions
        self.kv_reuse_max_lag = kv_reuse_max_lag
        self.stop_token_ids = frozenset(int(t) for t in stop_token_ids)
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = max_batch_size
        self.gather_s = gather_s
        self._seeds = random.Random(seed)
        self._version = version
        self._lock = threading.Lock()
        self._whole = True  # False after a weight stream broke off: the weights are mixed
        self._whole_again: asyncio.Event | None = None
        self._queues: dict[SamplingParams, list[_Request]] = {}
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.batches_run = 0
        self.rows_run = 0

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, device: str = "cpu", dtype: torch.dtype = torch.float32, **kw: Any
    ) -> HFEngine:
        """Load a checkpoint directory (a tiny local model or a real one) with its tokenizer."""
        from agentgym.models import load_model

        model, tokenizer = load_model(path, device=device, dtype=dtype)
        return cls(
            model,
            tokenizer=tokenizer,
            stop_token_ids=stop_ids_for(model, tokenizer),
            pad_token_id=tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else tokenizer.eos_token_id,
            **kw,
        )

    @property
    def version(self) -> int:
        """Policy version of the loaded weights."""
        return self._version

    async def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Generation]:
        """Queue every prompt and wait for all of them (they may share batches with others)."""
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need the engine's tokenizer (HFEngine(tokenizer=...))")
        self._ensure_running()
        loop = asyncio.get_running_loop()
        key = replace(params, seed=None)
        requests = [
            _Request(list(p), self._row_seed(params, i), loop.create_future())
            for i, p in enumerate(prompts)
        ]
        self._queues.setdefault(key, []).extend(requests)
        assert self._wakeup is not None
        self._wakeup.set()
        return list(await asyncio.gather(*(r.future for r in requests)))

    async def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Copy `state_dict` into the model between batches and set `version`."""
        await asyncio.to_thread(self._load_weights, state_dict, version)
        if self._whole_again is not None:  # batches held by a broken stream go on
            self._whole_again.set()

    async def load_weights_stream(
        self, tensors: AsyncIterator[tuple[str, Any]], version: int
    ) -> None:
        """Copy tensors into the model as they arrive (each is dropped once copied, so no
        second copy of the weights is held) and set ``version``.

        Generation pauses from the first tensor to the last (the copies need a model nobody
        samples from). If the stream breaks off, the model holds a mix of two versions: the
        engine reports version -1, so the next fetch asks for every tensor, and generation
        waits until a stream completes.
        """
        self._ensure_running()
        await asyncio.to_thread(self._lock.acquire)
        try:
            self._whole = False
            if self.store is not None and not self.reuse_kv:
                self.store.clear()
            params = self.model.state_dict()
            loaded = set()
            async for name, tensor in tensors:
                target = params.get(name)
                if target is None:
                    raise KeyError(f"unexpected weight name {name!r}")
                if target.shape != tensor.shape:
                    shapes = f"{tuple(tensor.shape)}, the model's {tuple(target.shape)}"
                    raise ValueError(f"weight {name!r} has shape {shapes}")
                with torch.no_grad():
                    target.copy_(tensor)
                loaded.add(name)
            if self._untied:
                load_untied_heads(self.model, self._untied, loaded)
            self._version, self._whole = version, True
        except BaseException:
            self._version = -1
            raise
        finally:
            self._lock.release()
            if self._whole and self._whole_again is not None:
                self._whole_again.set()
        await asyncio.to_thread(trim_heap)  # the stream's received buffers, back to the OS

    async def close(self) -> None:
        """Stop the batcher; queued requests fail with CancelledError."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for queue in self._queues.values():
            for r in queue:
                r.future.cancel()
        self._queues.clear()

    def _row_seed(self, params: SamplingParams, index: int) -> int:
        if params.seed is not None:
            return params.seed + index
        return self._seeds.getrandbits(63)

    def _ensure_running(self) -> None:
        if self._whole_again is None:
            self._whole_again = asyncio.Event()
        if self._task is None or self._task.done():
            self._wakeup = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._batcher())

    async def _batcher(self) -> None:
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            await asyncio.sleep(self.gather_s)
            self._wakeup.clear()
            while self._queues:
                params, batch = self._take_batch()
                await self._serve(params, batch)

    def _take_batch(self) -> tuple[SamplingParams, list[_Request]]:
        params = next(iter(self._queues))
        queue = self._queues[params]
        batch, rest = queue[: self.max_batch_size], queue[self.max_batch_size :]
        del self._queues[params]
        if rest:  # re-inserted last, so other sampling params get their turn first
            self._queues[params] = rest
        return params, [r for r in batch if not r.future.done()]

    async def _serve(self, params: SamplingParams, batch: list[_Request]) -> None:
        if not batch:
            return
        results = None
        while results is None:
            while not self._whole:  # a weight stream broke off; wait for a complete one
                assert self._whole_again is not None
                self._whole_again.clear()
                await self._whole_again.wait()
            try:  # None: a stream broke off while this batch waited for the lock
                results = await asyncio.to_thread(
                    self._generate_batch, [r.prompt for r in batch], [r.seed for r in batch],
                    params,
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                return
        for r, g in zip(batch, results, strict=True):
            if not r.future.done():
                r.future.set_result(g)

    def _load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        with self._lock, torch.no_grad():
            self._whole = True  # a whole state dict: no mix of versions from here on
            if self.store is not None and not self.reuse_kv:
                self.store.clear()
            tensors = {k: torch.as_tensor(v) for k, v in state_dict.items()}  # numpy is fine too
            missing, unexpected = self.model.load_state_dict(tensors, strict=False)
            if unexpected:
                raise KeyError(f"unexpected weight names: {sorted(unexpected)[:5]}")
            if self._untied:
                load_untied_heads(self.model, self._untied, set(tensors))
            self._version = version
            del tensors
        trim_heap()  # the received state dict's buffers, freed, back to the OS

    def _generate_batch(
        self, prompts: list[list[int]], seeds: list[int], params: SamplingParams
    ) -> list[Generation] | None:
        """The batch's generations, or None when the weights are a mix of two versions (a
        stream broke off while this batch waited for the lock; checked under it)."""
        device = next(self.model.parameters()).device
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.bf16)
        with self._lock, torch.inference_mode(), autocast:
            if not self._whole:
                return None
            gens = decode(
                self.model,
                prompts,
                seeds,
                params,
                stop_token_ids=self.stop_token_ids | set(params.stop_token_ids),
                pad_token_id=self.pad_token_id,
                store=self.store,
                stop_text=stop_text_check(self.tokenizer, params.stop) if params.stop else None,
                kv=KVSettings(
                    self.kv_dtype,
                    self.fast_decode,
                    self._version,
                    self._version - self.kv_reuse_max_lag if self.reuse_kv else self._version,
                ),
            )
            for g in gens:
                g.metrics["batch_size"] = float(len(prompts))
        self.batches_run += 1
        self.rows_run += len(prompts)
        trim_heap()  # the batch's caches, freed, back to the OS (agentgym.transport.malloc)
        return gens


def stop_ids_for(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """EOS ids of the generation config and tokenizer, plus <|im_end|> when the vocab has it."""
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return sorted(ids)


def decode(
    model: torch.nn.Module,
    prompts: list[list[int]],
    seeds: list[int],
    params: SamplingParams,
    *,
    stop_token_ids: set[int] | frozenset[int],
    pad_token_id: int,
    store: PrefixStore | None = None,
    stop_text: Callable[[list[int]], bool] | None = None,
    kv: KVSettings | None = None,
) -> list[Generation]:
    """KV-cached sampling of one continuation per prompt (no batching across calls).

    Each row's budget is ``params.max_new_tokens`` or what the model's context leaves after its
    own prompt, whichever is smaller (a row with no room generates nothing). Without a
    ``store`` the prompts are prefilled together (`_prefill_batch`); with one, row by row from
    the longest cached prefix (`_prefill_rows`), and every finished row's keys and values go
    back into the store. The keys and values then sit in one slab of ``kv.dtype`` sized to the
    prompts and the largest budget (``agentgym.engines.kv``; with ``kv.slab`` off, in
    transformers' DynamicCache), and the attention mask in one buffer of that width; decode
    steps write both in place and continue each row at its own position, the padding slots
    masked. Rows that finish leave the batch. ``stop_text(tokens)`` says whether a row's tokens
    end with a stop string. Each generation's ``policy_version`` is ``kv.version``, or the
    oldest version of the stored keys and values its prompt continued.
    """
    kv = kv or KVSettings(next(model.parameters()).dtype)
    budgets = row_budgets(model, prompts, params.max_new_tokens)
    out = [Generation([], [], "length", policy_version=kv.version) for _ in prompts]
    live = [i for i, b in enumerate(budgets) if b > 0]
    if not live:
        return out
    rows = [prompts[i] for i in live]
    room = max(budgets[i] for i in live)
    pre = (
        _prefill_rows(model, rows, store, room, kv)
        if store is not None
        else _prefill_batch(model, rows, pad_token_id, room, kv)
    )
    for i, version in zip(live, pre.versions, strict=True):
        out[i].policy_version = version
    device = pre.logits.device
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    cache, logits, width = pre.cache, pre.logits, pre.mask.shape[1]
    mask = torch.cat([pre.mask, pre.mask.new_zeros(len(rows), room)], dim=1)
    positions = pre.lengths[:, None] - 1
    cache_kw = cache_keyword(model)
    fed = 0  # tokens fed back so far (every live row gets each one)
    while True:
        tokens, logps = _pick(logits, params, [generators[i] for i in live])
        keep = _record(out, live, tokens.tolist(), logps.tolist(), stop_token_ids, budgets,
                       stop_text)  # fmt: skip
        if store is not None and len(keep) < len(live):
            done = [b for b in range(len(live)) if b not in set(keep)]
            _store_rows(store, cache, done, [live[b] for b in done], prompts, out, width, fed)
        if not keep:
            return out
        if len(keep) < len(live):
            idx = torch.tensor(keep, device=device)
            cache.batch_select_indices(idx)
            tokens, mask, positions = tokens[idx], mask[idx], positions[idx]
            live = [live[k] for k in keep]
        mask[:, width + fed] = 1
        positions = positions + 1
        result = model(
            input_ids=tokens[:, None],
            attention_mask=mask[:, : width + fed + 1],
            position_ids=positions,
            use_cache=True,
            **{cache_kw: cache},
        )
        fed += 1
        logits = result.logits[:, -1, :]


def row_budgets(model: torch.nn.Module, prompts: list[list[int]], max_new: int) -> list[int]:
    """Tokens each row may generate: ``max_new``, or fewer where the model's context
    (``max_position_embeddings``) ends sooner after that row's own prompt."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is None:
        return [max_new] * len(prompts)
    return [max(0, min(max_new, limit - len(p))) for p in prompts]


@dataclass(frozen=True)
class KVSettings:
    """How ``decode`` holds keys and values, and which weights they come from."""

    dtype: torch.dtype | None
    """The one dtype of the slab and of the stored prefixes (None: as the model computes
    them; only without ``slab``)."""
    slab: bool = True
    """A preallocated slab (``agentgym.engines.kv``); False: transformers' DynamicCache."""
    version: int = 0
    """The policy version of the weights."""
    min_version: int | None = None
    """Stored keys and values of older versions are not reused (None: any)."""


@dataclass
class _Prefilled:
    """Prompts run through the model: a right-padded KV cache and the next-token logits."""

    cache: Any
    mask: torch.Tensor
    """[rows, width]: 1 for each row's prompt slots, 0 for padding."""
    logits: torch.Tensor
    """[rows, vocab] at each prompt's last token."""
    lengths: torch.Tensor
    """[rows] prompt lengths."""
    versions: list[int]
    """Per row, the oldest policy version among the weights that computed its keys and
    values."""


def _prefill_batch(
    model: torch.nn.Module, prompts: list[list[int]], pad: int, room: int, kv: KVSettings
) -> _Prefilled:
    """All prompts in one forward pass, right-padded and without an attention mask: under the
    causal mask no real token sees the padding after it, so the model can take its fused causal
    attention path, and only the logits at each prompt's last token are computed (where the
    model takes ``logits_to_keep``). The keys and values go into a slab with ``room`` slots
    to spare."""
    device = next(model.parameters()).device
    input_ids, mask = _right_pad(prompts, pad, device)
    last = mask.sum(-1) - 1  # position of each prompt's last token
    kept = last.unique()  # sorted
    keep = {"logits_to_keep": kept} if keeps_logits(model) else {}
    result = model(input_ids=input_ids, use_cache=True, **keep)
    column = torch.searchsorted(kept, last) if keep else last
    logits = result.logits[torch.arange(len(prompts), device=device), column]
    cache = output_cache(result)
    if kv.slab:
        cache = slab_from_layers(cache_layers(cache), room, kv.dtype)
    return _Prefilled(cache, mask, logits, last + 1, [kv.version] * len(prompts))


def _prefill_rows(
    model: torch.nn.Module,
    prompts: list[list[int]],
    store: PrefixStore,
    room: int,
    kv: KVSettings,
) -> _Prefilled:
    """Each prompt from the longest prefix the store holds (only the rest is run), its keys and
    values (in ``kv.dtype``) put back at once so a later row with the same opening (a GRPO
    group) reuses them; the rows' caches are then laid right-padded into one slab with ``room``
    slots to spare."""
    device = next(model.parameters()).device
    cache_kw = cache_keyword(model)
    keep = {"logits_to_keep": 1} if keeps_logits(model) else {}
    rows: list[Layers] = []
    last_logits = []
    versions = []
    for prompt in prompts:
        past, n, version = store.lookup(prompt, kv.min_version)
        version = kv.version if version is None else min(version, kv.version)
        ids = torch.tensor([prompt[n:]], dtype=torch.long, device=device)
        extra = {cache_kw: new_cache(past)} if past is not None else {}
        positions = torch.arange(n, len(prompt), device=device)[None]
        result = model(input_ids=ids, position_ids=positions, use_cache=True, **keep, **extra)
        layers = [
            (k.to(kv.dtype or k.dtype, copy=True), v.to(kv.dtype or v.dtype, copy=True))
            for k, v in cache_layers(output_cache(result))
        ]
        store.put(prompt, layers, version)
        store.reused_tokens += n
        store.prefilled_tokens += len(prompt) - n
        rows.append(layers)
        versions.append(version)
        last_logits.append(result.logits[0, -1])
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    width = int(lengths.max())
    mask = (torch.arange(width, device=device)[None] < lengths[:, None]).long()
    cache = slab_from_rows(rows, room, kv.dtype) if kv.slab else _padded_cache(rows, width)
    return _Prefilled(cache, mask, torch.stack(last_logits), lengths, versions)


def _padded_cache(rows: list[Layers], width: int) -> Any:
    """The rows' keys and values right-padded with zeros to ``width`` in a DynamicCache."""
    batch = []
    for layer in range(len(rows[0])):
        k0, v0 = rows[0][layer]
        shape = (len(rows), k0.shape[1], width, k0.shape[3])
        keys, values = k0.new_zeros(shape), v0.new_zeros(shape)
        for r, row in enumerate(rows):
            k, v = row[layer]
            keys[r, :, : k.shape[2]] = k[0]
            values[r, :, : v.shape[2]] = v[0]
        batch.append((keys, values))
    return new_cache(batch)


def _store_rows(
    store: PrefixStore,
    cache: Any,
    batch_rows: list[int],
    rows: list[int],
    prompts: list[list[int]],
    out: list[Generation],
    width: int,
    fed: int,
) -> None:
    """Put finished rows' keys and values in the store: their prompt slots and the slots of
    the tokens fed back (every generated token but the last)."""
    layers = cache_layers(cache)
    device = layers[0][0].device
    for b, row in zip(batch_rows, rows, strict=True):
        n = len(prompts[row])
        slots = torch.cat([torch.arange(n), torch.arange(width, width + fed)]).to(device)
        kept = [(k[b : b + 1, :, slots].clone(), v[b : b + 1, :, slots].clone()) for k, v in layers]
        store.put(prompts[row] + out[row].token_ids[:-1], kept, out[row].policy_version)


def _right_pad(
    prompts: list[list[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, : len(p)] = torch.tensor(p, dtype=torch.long)
        mask[row, : len(p)] = 1
    return ids.to(device), mask.to(device)


def _pick(
    logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's next token and its behaviour log-prob, on the logits' device (the caller
    moves only these picks to the host)."""
    logits = logits.float()
    if params.temperature == 0:
        return greedy_rows(logits)
    logprobs = processed_logprobs(logits, params.temperature, params.top_k, params.top_p)
    return sample_rows(logprobs, generators)


def _record(
    out: list[Generation],
    live: list[int],
    tokens: list[int],
    logps: list[float],
    stop_token_ids: set[int] | frozenset[int],
    budgets: list[int],
    stop_text: Callable[[list[int]], bool] | None,
) -> list[int]:
    """Append each live row's token; return the batch rows that keep generating."""
    keep = []
    for k, (row, tok, lp) in enumerate(zip(live, tokens, logps, strict=True)):
        gen = out[row]
        gen.token_ids.append(tok)
        gen.logprobs.append(lp)
        if tok in stop_token_ids or (stop_text is not None and stop_text(gen.token_ids)):
            gen.finish_reason = "stop"
        elif len(gen.token_ids) < budgets[row]:
            keep.append(k)
    return keep


def stop_text_check(tokenizer: Any, stops: Sequence[str]) -> Callable[[list[int]], bool]:
    """``check(tokens)``: whether the text of ``tokens`` ends in a stop string completed by its
    last token, read as the actor reads replies (special tokens skipped). Only the tail is
    decoded (every other token is at least one character; a few more are read for special
    ones), so a long reply costs the same per step as a short one."""
    longest = max(len(s) for s in stops)

    def check(tokens: list[int]) -> bool:  # special tokens skipped, as the actor reads replies
        tail = tokenizer.decode(tokens[-(longest + 4) :], skip_special_tokens=True)
        before = tokenizer.decode(tokens[-(longest + 4) : -1], skip_special_tokens=True)
        return any(s in tail and s not in before for s in stops)

    return check


def _state_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the model's first parameter, or of its first buffer when it has none (a
    module whose whole state is buffers, as some benchmarks build)."""
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    return torch.get_default_dtype() if first is None else first.dtype
