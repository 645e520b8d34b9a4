"""Weight sync, learner -> actor: chunked stream vs one message vs a shared safetensors file.

Two processes on this machine, like a learner and an actor on one node (tcp loopback). The
model is float32 tensors of 32 MB plus one "embedding" holding a quarter of the bytes (larger
than a chunk, so it travels in pieces). Each case runs in fresh processes; a case's time runs
from the learner starting to publish the second version to the actor's engine (``HFEngine``)
holding it (the first sync warms both sides up: sockets, buffers, page cache):

- stream: ``LearnerChannels`` (64 MB chunks) -> ``weight_chunks`` + ``stream_tensors`` ->
  ``HFEngine.load_weights_stream`` (one chunk and one tensor held at a time);
- one message: the same channels with one chunk for everything -> ``fetch_weights`` ->
  ``blobs_to_state_dict`` -> ``HFEngine.load_weights``;
- file (``learner.weights_via: file``): ``write_safetensors`` tensor by tensor to a path both
  see, its path served on the weight socket -> ``stream_tensors`` reads it tensor by tensor
  (memory-mapped) -> ``HFEngine.load_weights_stream``.

Extra RSS = the process's peak RSS minus its RSS once its model was built (page-cache pages of
the file count where the actor maps them).

``--model LAYERSxHIDDENxVOCAB`` syncs a random Qwen2 of that shape (bench_learner_dist.py's)
instead of the synthetic tensors, and ``--device cuda`` keeps both sides' models on the GPU (the
learner's tensors are copied to host memory to travel, the engine copies them back in place),
as a learner and an actor sharing one GPU would.

    python bench/bench_weights.py [--sizes-mb 100 1000] [--dir /dev/shm]
    python bench/bench_weights.py --model 16x1024x32768 --device cuda --methods stream
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_learner_dist's model

METHODS = ("stream", "one message", "file")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(size: int | str, fill: float, device: str = "cpu"):
    """The model of a case on ``device``, every value ``fill``: ``size`` MB of synthetic float32
    tensors, or a Qwen2 of shape "LAYERSxHIDDENxVOCAB"."""
    import torch

    if isinstance(size, str):
        from bench_learner_dist import model as qwen2

        module = qwen2(*(int(v) for v in size.split("x"))).to(device)
        with torch.no_grad():
            for t in module.state_dict().values():
                t.fill_(fill)
        return module
    return synthetic(size, fill).to(device)


def synthetic(size_mb: int, fill: float):
    """A module whose state dict is ``size_mb`` MB of float32 tensors."""
    import torch

    total = size_mb << 20
    embed = total // 4
    params = {"embed": torch.full((embed // 4096, 1024), fill)}
    left, i = total - embed, 0
    while left > 0:
        n = min(32 << 20, left)
        params[f"w{i}"] = torch.full((n // 4,), fill)
        left, i = left - n, i + 1
    module = torch.nn.Module()
    for k, v in params.items():
        module.register_buffer(k, v)
    return module


def marker(model):
    """The tensor whose value says which version a model holds (the state dict's first)."""
    return next(iter(model.state_dict().values()))


def state_bytes(model) -> int:
    """Bytes of the state dict as it travels (every entry, tied ones too)."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def learner(method: str, size, device: str, endpoints, ready, go, done, out, path: str) -> None:
    import torch

    from agentgym.transport.learner_channels import LearnerChannels
    from agentgym.transport.weights.tensors import state_dict_to_blobs, write_safetensors

    torch.set_num_threads(1)
    model = build(size, 1.5, device)
    base = rss_mb()
    chunk = 64 << 20 if method == "stream" else 1 << 40
    with LearnerChannels(endpoints, chunk_bytes=chunk) as channels:
        for version in (1, 2):  # version 1 warms both sides up; version 2 is timed
            ready[version].wait(600)
            start = time.time()
            with torch.no_grad():
                marker(model).fill_(version)
            if method == "file":
                state = model.state_dict()
                header = [(k, v.dtype, tuple(v.shape)) for k, v in state.items()]
                target = f"{path}.v{version}"
                write_safetensors(target, header, state.values())
                channels.publish_weights_file(version, target)
            else:
                channels.retire_weights()
                channels.publish_weights(version, state_dict_to_blobs(model.state_dict()))
            go[version].set()
        done.wait(600)
    out.put(("learner", start, peak_mb() - base, state_bytes(model)))


def actor(method: str, size, device: str, endpoints, ready, go, done, out, path: str) -> None:
    import torch

    from agentgym.engines.hf import HFEngine
    from agentgym.transport.actor_channels import AsyncActorChannels
    from agentgym.transport.weights.paths import stream_tensors
    from agentgym.transport.weights.tensors import blobs_to_state_dict

    torch.set_num_threads(1)
    model = build(size, 0.0, device)
    engine = HFEngine(model, stop_token_ids=[0], pad_token_id=0)
    base = rss_mb()

    async def main():
        channels = AsyncActorChannels(endpoints)
        for version in (1, 2):
            ready[version].set()
            await asyncio.to_thread(go[version].wait, 600)
            if method in ("stream", "file"):
                chunks = channels.weight_chunks(version - 1, timeout_s=120)
                first = await anext(chunks)
                await engine.load_weights_stream(stream_tensors(first, chunks), first.version)
            else:
                snap = await channels.fetch_weights(version - 1, timeout_s=300)
                await engine.load_weights(blobs_to_state_dict(snap.tensors), snap.version)
        channels.close()

    asyncio.run(main())
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    end = time.time()
    assert engine.version == 2 and float(marker(model).reshape(-1)[-1]) == 2.0
    done.set()
    out.put(("actor", end, peak_mb() - base, state_bytes(model)))


def run_case(method: str, size, directory: str, port: int, device: str = "cpu") -> dict:
    from agentgym.transport.endpoints import Endpoints

    ctx = mp.get_context("spawn")
    ready = {v: ctx.Event() for v in (1, 2)}
    go = {v: ctx.Event() for v in (1, 2)}
    done, out = ctx.Event(), ctx.Queue()
    path = os.path.join(directory, f"agentgym-bench-{os.getpid()}.safetensors")
    endpoints = Endpoints.tcp("127.0.0.1", port)
    args = (method, size, device, endpoints, ready, go, done, out, path)
    procs = [ctx.Process(target=f, args=args) for f in (learner, actor)]
    for p in procs:
        p.start()
    got = {name: rest for name, *rest in (out.get(timeout=900) for _ in procs)}
    for p in procs:
        p.join(60)
    for version in (1, 2):
        if os.path.exists(f"{path}.v{version}"):
            os.remove(f"{path}.v{version}")
    seconds = got["actor"][0] - got["learner"][0]
    return {"s": seconds, "gbps": got["actor"][2] / 2**30 / seconds,
            "learner_mb": got["learner"][1], "actor_mb": got["actor"][1]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--model", default=None, help="LAYERSxHIDDENxVOCAB: a Qwen2 instead")
    ap.add_argument("--device", default="cpu", help="where both sides keep their model")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    ap.add_argument("--dir", default="/dev/shm", help="where the file case writes")
    ap.add_argument("--port", type=int, default=5720)
    ap.add_argument("--json", default=None, help="append each case's figures to this file")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, models on {args.device}; "
          f"file case in {args.dir}\n")  # fmt: skip
    print("| model | method | seconds | GB/s | learner extra RSS MB | actor extra RSS MB |")
    print("|---:|---|---:|---:|---:|---:|")
    sizes = [args.model] if args.model else args.sizes_mb
    for size in sizes:
        name = f"Qwen2 {size}" if isinstance(size, str) else f"{size} MB"
        for i, method in enumerate(args.methods):
            r = run_case(method, size, args.dir, args.port + 3 * i, args.device)
            print(f"| {name} | {method} | {r['s']:.2f} | {r['gbps']:.2f} | "
                  f"{r['learner_mb']:,.0f} | {r['actor_mb']:,.0f} |", flush=True)  # fmt: skip
            if args.json:
                with open(args.json, "a") as f:
                    row = {"bench": "weights", "model": name, "method": method,
                           "device": args.device, **r}  # fmt: skip
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
