"""Trajectory transport over loopback ZeroMQ: agentgym's msgpack wire format vs pickle.

Both sides run in separate processes and talk over the same kind of socket pair (PUSH ->
PULL on tcp://127.0.0.1). Each message carries a batch of 2048-token trajectories; the sender
encodes every message (agentgym: ``encode_trajectories``; pickle: ``pickle.dumps`` of the same
list of ``Trajectory`` objects, protocol 5) and the receiver decodes every message back into
``Trajectory`` objects. Timing runs from the first message received to the last; each case
moves ``--trajectories`` trajectories (default 100,000: 1.9 GB, a few seconds per case) so that
start-up does not count.

    python bench/bench_transport.py [--tokens 2048] [--trajectories 100000] [--no-malloc-tuning]

A third row per batch size, "socket only", sends frames of the same sizes without encoding
or decoding anything: the ceiling these sockets allow on this machine, which no codec can beat.

Both processes call ``agentgym.transport.malloc.tune_malloc`` (as the learner and actor
commands do) for both formats, unless ``--no-malloc-tuning`` is given.

MB/s counts wire bytes (the encoded messages); payload MB/s counts only the token, log-prob
and mask bytes, which are the same for both formats.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import numpy as np  # noqa: E402
import zmq  # noqa: E402

from agentgym.transport.malloc import tune_malloc  # noqa: E402
from agentgym.transport.wire import (  # noqa: E402
    Trajectory,
    decode_trajectories,
    encode_trajectories,
)

END = b"END"


def make_batch(batch: int, tokens: int, seed: int = 0) -> list[Trajectory]:
    """``batch`` trajectories of ``tokens`` tokens with a multi-turn-like loss mask."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(batch):
        mask = (np.arange(tokens) // 64 % 2).astype(np.uint8)
        out.append(
            Trajectory(
                episode_id=i,
                group_id=i // 8,
                group_size=8,
                env="textcraft",
                task_id=i,
                horizon_cap=20,
                turn_versions=np.full(16, 3, np.int32),
                tokens=rng.integers(0, 150_000, tokens, dtype=np.int32),
                logprobs=(-rng.random(tokens) * mask).astype(np.float32),
                loss_mask=mask,
                prompt_len=128,
                reward=1.0,
                success=True,
                truncation="",
                num_turns=16,
                timings={"generate": 1.0, "env": 0.1},
            )
        )
    return out


def encoder(fmt: str, batch: int, tokens: int):
    """Batch -> list of frames."""
    if fmt == "agentgym":
        return encode_trajectories
    if fmt == "socket":  # frames of agentgym's sizes, made once: no encoding at all
        frames = [bytes(memoryview(f)) for f in encode_trajectories(make_batch(batch, tokens))]
        return lambda trajs: frames
    return lambda trajs: [pickle.dumps(trajs, protocol=5)]


def decoder(fmt: str, batch: int):
    """List of frame buffers -> list of Trajectory."""
    if fmt == "agentgym":
        return decode_trajectories
    if fmt == "socket":
        return lambda frames: range(batch)
    return lambda frames: pickle.loads(frames[0])


def sender(endpoint: str, fmt: str, batch: int, tokens: int, messages: int, tune: bool) -> None:
    """Child process: encode and push ``messages`` batches, then the end marker."""
    if tune:
        tune_malloc()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 64)
    push.setsockopt(zmq.LINGER, -1)
    push.connect(endpoint)
    trajs = make_batch(batch, tokens)
    encode = encoder(fmt, batch, tokens)
    for _ in range(messages):
        push.send_multipart(encode(trajs), copy=False)
    push.send(END)
    push.close()
    ctx.term()


def receive(fmt: str, batch: int, tokens: int, messages: int, tune: bool) -> dict[str, float]:
    """Run one sender process against a PULL socket here; returns the measured rates."""
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 64)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    proc = mp.get_context("spawn").Process(
        target=sender, args=(f"tcp://127.0.0.1:{port}", fmt, batch, tokens, messages, tune)
    )
    proc.start()
    decode = decoder(fmt, batch)
    n_traj = wire_bytes = 0
    start = None
    while True:
        frames = pull.recv_multipart(copy=False)
        if len(frames) == 1 and frames[0].bytes == END:
            break
        if start is None:
            start = time.perf_counter()
        wire_bytes += sum(len(f) for f in frames)
        n_traj += len(decode([f.buffer for f in frames]))
    elapsed = time.perf_counter() - start
    proc.join()
    pull.close()
    payload = n_traj * tokens * (4 + 4 + 1)
    return {
        "traj_s": n_traj / elapsed,
        "mb_s": wire_bytes / elapsed / 1e6,
        "payload_mb_s": payload / elapsed / 1e6,
        "bytes_per_traj": wire_bytes / n_traj,
    }


def codec_cost(fmt: str, batch: int, tokens: int, seconds: float = 2.0) -> dict[str, float]:
    """CPU time (this process, not wall time) to encode and decode one trajectory, no sockets.

    CPU time is what a loaded machine distorts least: it excludes time spent waiting for a core.
    """
    trajs = make_batch(batch, tokens)
    encode, decode = encoder(fmt, batch, tokens), decoder(fmt, batch)
    frames = [bytes(f) for f in encode(trajs)]
    size = sum(len(f) for f in frames)
    out = {}
    for name, fn in (("encode", lambda: encode(trajs)), ("decode", lambda: decode(frames))):
        n, start = 0, time.process_time()
        while time.process_time() - start < seconds / 2:
            fn()
            n += 1
        out[name] = (time.process_time() - start) / n / batch * 1e6
    out["mb_s_per_core"] = size / batch / (out["encode"] + out["decode"])  # bytes/us = MB/s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--trajectories", type=int, default=100_000, help="trajectories moved per case")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument(
        "--no-malloc-tuning",
        dest="tune",
        action="store_false",
        help="leave glibc's malloc thresholds at their defaults in both processes",
    )
    args = ap.parse_args()
    tuned = args.tune and tune_malloc()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}, pyzmq {zmq.__version__}"
    )
    print(
        f"{args.tokens}-token trajectories; load average {os.getloadavg()[0]:.1f} at start; "
        f"malloc tuning {'on' if tuned else 'off'}"
    )
    print("\nCodec CPU cost per trajectory (encode + decode in one process, no sockets):\n")
    print("| batch/msg | format | encode us | decode us | MB/s per core | speed-up |")
    print("|---:|---|---:|---:|---:|---:|")
    for batch in args.batches:
        ours = codec_cost("agentgym", batch, args.tokens)
        theirs = codec_cost("pickle", batch, args.tokens)
        base = theirs["encode"] + theirs["decode"]
        for fmt, r in (("agentgym msgpack", ours), ("pickle", theirs)):
            print(
                f"| {batch} | {fmt} | {r['encode']:.1f} | {r['decode']:.1f} | "
                f"{r['mb_s_per_core']:,.0f} | {base / (r['encode'] + r['decode']):.2f}x |"
            )
    print("\nEnd to end over tcp loopback, sender and receiver in separate processes (wall):\n")
    print("| batch/msg | format | traj/s | wire MB/s | payload MB/s | bytes/traj | speed-up |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for batch in args.batches:
        n = max(20, args.trajectories // batch)
        ours = receive("agentgym", batch, args.tokens, n, tuned)
        theirs = receive("pickle", batch, args.tokens, n, tuned)
        ceiling = receive("socket", batch, args.tokens, n, tuned)
        for fmt, r in (("agentgym msgpack", ours), ("pickle", theirs), ("socket only", ceiling)):
            speedup = r["traj_s"] / theirs["traj_s"]
            print(
                f"| {batch} | {fmt} | {r['traj_s']:,.0f} | {r['mb_s']:,.0f} | "
                f"{r['payload_mb_s']:,.0f} | {r['bytes_per_traj']:,.0f} | {speedup:.2f}x |"
            )


if __name__ == "__main__":
    main()
