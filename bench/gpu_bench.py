"""Learner and engine throughput of one model on one device (the figures of bench/gpu_check.sh).

The model is bench_learner_dist.py's randomly initialised Qwen2 (``--layers``, ``--hidden``,
``--vocab``; the defaults make a 272M-parameter model: 16 layers of width 1024, a 32,768-token
vocabulary, tied embeddings). Nothing is downloaded.

- ``learner``: tokens trained per second and peak device memory of ``agentgym.learner.Learner``
  on GRPO groups of multi-turn episodes (bench_learner.py's batches), bf16 by default. Started
  by ``torchrun`` it runs as one FSDP2 rank (NCCL on CUDA), otherwise as one process.
- ``engine``: generated tokens per second of ``agentgym.engines.hf.HFEngine`` at each batch
  size, every row generating exactly ``--new-tokens`` tokens (no stop tokens); ``--sampler
  multinomial`` runs the baseline sampler (logits to the host, ``torch.multinomial`` per row).

Each prints a Markdown table row and, with ``--json FILE``, appends its figures as one JSON line.

    python bench/gpu_bench.py learner --device cuda [--no-bf16] [--steps 3]
    torchrun --standalone --nproc-per-node 1 bench/gpu_bench.py learner --device cuda
    python bench/gpu_bench.py engine --device cuda --batches 1 16 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from bench_learner import episodes  # noqa: E402
from bench_learner_dist import model as qwen2  # noqa: E402


def describe(model: torch.nn.Module, device: str) -> dict:
    """The model's size and the device's name, for the report."""
    cfg = model.config
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else platform.machine()
    return {
        "device": name,
        "model": f"Qwen2 {cfg.num_hidden_layers}x{cfg.hidden_size}, vocab {cfg.vocab_size}",
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "torch": torch.__version__,
    }


def peak_gib(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def bench_learner(args: argparse.Namespace) -> dict:
    """Seconds per update and tokens/s of one learner (rank 0's figures under torchrun)."""
    from agentgym.learner import Learner, LearnerConfig, OptimConfig
    from agentgym.learner.distributed import from_environment

    dist = from_environment(args.device, timeout_s=300)
    device = dist.device if dist.sharded else args.device
    model = qwen2(args.layers, args.hidden, args.vocab)
    info = describe(model, device)
    cfg = LearnerConfig(
        optim=OptimConfig(lr=1e-5), micro_batch_size=args.micro_batch, bf16=args.bf16,
        device=args.device, groups_per_step=args.groups, shared_prefix=args.shared_prefix,
    )  # fmt: skip
    learner = Learner(model, cfg, dist=dist)
    shared = int(args.tokens * args.shared_share)
    data = episodes(args.groups, args.group_size, args.tokens, args.vocab, 0, shared=shared)
    learner.step(data)  # warm-up: kernels, allocator, optimizer state
    sync(device)
    start = time.perf_counter()
    total = sum(learner.step(data)["tokens"] for _ in range(args.steps))
    sync(device)
    elapsed = (time.perf_counter() - start) / args.steps
    mode = f"FSDP2, {dist.world_size} rank(s)" if dist.sharded else "one process"
    result = {
        **info, "bench": "learner", "mode": mode, "bf16": args.bf16,
        "episodes": len(data), "tokens_per_episode": args.tokens,
        "shared_tokens": shared, "shared_prefix": args.shared_prefix,
        "micro_batch": args.micro_batch, "s_per_update": elapsed,
        "tokens_per_s": total / args.steps / elapsed, "peak_gib": peak_gib(device),
    }  # fmt: skip
    dist.close()
    return result if dist.is_main else {}


def host_multinomial_pick(logits, params, generators):
    """The baseline sampler: logits to the host, one ``torch.multinomial`` call per row (the
    engine's sampler before it sampled on the logits' device)."""
    from agentgym.engines.sampling import processed_logprobs

    device = logits.device
    logprobs = processed_logprobs(logits.float().cpu(), params.temperature, params.top_k,
                                  params.top_p)  # fmt: skip
    probs = logprobs.exp()
    tokens = torch.stack(
        [torch.multinomial(probs[i], 1, generator=g)[0] for i, g in enumerate(generators)]
    )
    return tokens.to(device), logprobs.gather(-1, tokens[:, None])[:, 0].to(device)


def bench_engine(args: argparse.Namespace) -> list[dict]:
    """Generated tokens/s of the HF engine at each batch size."""
    from agentgym.engines import SamplingParams, hf
    from agentgym.engines.hf import HFEngine

    if args.sampler == "multinomial":
        hf._pick = host_multinomial_pick  # the baseline, in this process only

    dtype = torch.bfloat16 if args.bf16 else torch.float32
    model = qwen2(args.layers, args.hidden, args.vocab).to(args.device, dtype)
    info = describe(model, args.device)
    engine = HFEngine(model, stop_token_ids=[], pad_token_id=0, max_batch_size=max(args.batches),
                      fast_decode=args.fast_decode)  # fmt: skip
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    gen = torch.Generator().manual_seed(0)

    async def run(batch: int) -> tuple[float, int]:
        prompts = torch.randint(0, args.vocab, (batch, args.prompt_tokens), generator=gen)
        start = time.perf_counter()
        out = await engine.generate(prompts.tolist(), params)
        return time.perf_counter() - start, sum(len(g.token_ids) for g in out)

    async def main() -> list[dict]:
        await run(min(args.batches))  # warm-up
        rows = []
        for batch in args.batches:
            if args.device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats(args.device)
            seconds, tokens = await run(batch)
            rows.append({
                **info, "bench": "engine", "sampler": args.sampler, "bf16": args.bf16,
                "batch": batch, "fast_decode": args.fast_decode,
                "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                "s": seconds, "tokens_per_s": tokens / seconds, "peak_gib": peak_gib(args.device),
            })  # fmt: skip
        await engine.close()
        return rows

    return asyncio.run(main())


def table_row(r: dict) -> str:
    peak = "" if r.get("peak_gib") is None else f"{r['peak_gib']:.1f}"
    precision = "bf16" if r["bf16"] else "fp32"
    if r["bench"] == "learner":
        shape = f"{r['episodes']} x {r['tokens_per_episode']} tokens, micro {r['micro_batch']}"
        if r.get("shared_tokens"):
            shape += (f", {r['shared_tokens']} shared per group, shared prefix "
                      f"{'on' if r['shared_prefix'] else 'off'}")  # fmt: skip
        return (f"| learner, {r['mode']} | {r['model']} ({r['params_m']}M) | {precision} | "
                f"{shape} | {r['s_per_update']:.2f} s/update | {r['tokens_per_s']:,.0f} tokens/s "
                f"| {peak} |")  # fmt: skip
    shape = f"batch {r['batch']}, {r['prompt_tokens']}-token prompts, {r['new_tokens']} new"
    if not r.get("fast_decode", True):
        shape += ", fast_decode off"
    return (f"| HF engine, {r['sampler']} sampler | {r['model']} ({r['params_m']}M) | "
            f"{precision} | {shape} | {r['s']:.2f} s | {r['tokens_per_s']:,.0f} tokens/s | "
            f"{peak} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("learner", "engine"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--no-bf16", dest="bf16", action="store_false", help="float32 throughout")
    ap.add_argument("--steps", type=int, default=3, help="timed learner updates")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per learner episode")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument(
        "--sampler",
        choices=("inverse-cdf", "multinomial"),
        default="inverse-cdf",
        help="multinomial: the baseline (host-side torch.multinomial per row)",
    )
    ap.add_argument(
        "--shared-share",
        type=float,
        default=0.0,
        help="learner: share of each episode that its group shares (its opening)",
    )
    ap.add_argument(
        "--no-shared-prefix",
        dest="shared_prefix",
        action="store_false",
        help="learner: every row forwarded whole (learner.shared_prefix false)",
    )
    ap.add_argument(
        "--no-fast-decode",
        dest="fast_decode",
        action="store_false",
        help="engine: transformers' own cache (engine.fast_decode false)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", type=Path, default=None, help="append the figures to this file")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"gpu_bench: --device {args.device} but torch sees no CUDA device")
    rows = [bench_learner(args)] if args.what == "learner" else bench_engine(args)
    rows = [r for r in rows if r]  # ranks other than 0 report nothing
    for r in rows:
        print(table_row(r), flush=True)
        if args.json is not None:
            with args.json.open("a") as f:
                f.write(json.dumps(r) + "\n")
    if args.what == "learner" and "RANK" in os.environ:
        os._exit(0)  # see Dist.exit: no interpreter finalization with a live process group


if __name__ == "__main__":
    main()
