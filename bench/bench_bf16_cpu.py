"""bf16 autocast against float32 on this machine's CPU: one forward and backward pass of a causal
LM over ``--batch`` x ``--tokens`` tokens (what the learner and SFT run), and a forward pass alone
(the engine's prefill), side by side in one process, rounds interleaved.

Without bf16 instructions (no ``avx512_bf16`` or ``amx_bf16`` among /proc/cpuinfo's flags) torch
runs bf16 matrix products through conversions, and bf16 is slower than float32; with them it is
faster. ``agentgym train``, ``sft`` and ``eval`` warn when a config asks for bf16 on such a CPU.

    python bench/bench_bf16_cpu.py --model runs/models/smollm2-135m-instruct --tokens 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

from agentgym.cli.common import BF16_CPU_FLAGS, cpu_bf16_native


def run(model, ids: torch.Tensor, bf16: bool, backward: bool) -> float:
    """Seconds of one pass (forward, and backward when ``backward``)."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids).logits
    if backward:
        logits.float().logsumexp(-1).mean().backward()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model directory")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.tokens))
    native = cpu_bf16_native()
    print(f"cpu bf16 instructions ({' or '.join(sorted(BF16_CPU_FLAGS))}): {native}; "
          f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.threads} thread(s), {args.batch} x {args.tokens} tokens")  # fmt: skip
    tokens = args.batch * args.tokens
    for backward in (True, False):
        what = "forward+backward" if backward else "forward"
        run(model, ids, False, backward)  # warm-up, float32 (bf16's first pass is timed: slow)
        times: dict[str, list[float]] = {"float32": [], "bf16": []}
        for r in range(args.rounds):
            for name in ("float32", "bf16"):
                s = run(model, ids, name == "bf16", backward)
                times[name].append(s)
                print(f"  round {r + 1} {what} {name}: {s:.2f} s ({tokens / s:.0f} tokens/s)")
        f32, bf16 = (statistics.median(times[k]) for k in ("float32", "bf16"))
        print(f"{what}: float32 {tokens / f32:.0f} tokens/s, bf16 {tokens / bf16:.0f} tokens/s "
              f"(medians): bf16 is {f32 / bf16:.2f}x float32's speed")  # fmt: skip


if __name__ == "__main__":
    main()
