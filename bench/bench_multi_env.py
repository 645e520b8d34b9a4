"""Multi-env actors: groups/s of each env alone and mixed, and what a slow remote env does to
a fast in-process one with and without per-env admission (in-flight slots per env).

One actor process, the real ``Actor`` loop and env pools, a learner stand-in that only collects
groups (no updates: the admission budget is opened wide), and an engine that answers every
prompt at once with a fixed action per env, so the figures measure the actor and the envs,
not a model. The slow env is an AgentGym-style HTTP server on 127.0.0.1 (``id`` dialect) that
answers every ``/step`` after ``--delay-ms`` (100 ms: ScienceWorld's order of magnitude).

    python bench/bench_multi_env.py --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from agentgym.envs.families import family

ACTIONS = {"babyai": "turn left", "textcraft": "inventory", "slow": "wait"}


class SlowServer(ThreadingHTTPServer):
    """Sessions whose every step takes ``delay_s``; an episode never ends by itself (the
    actor's turn cap ends it)."""

    daemon_threads = True

    def __init__(self, delay_s: float):
        super().__init__(("127.0.0.1", 0), _SlowHandler)
        self.delay_s = delay_s
        self.next_id = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _SlowHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/create":
            with self.server.lock:
                self.server.next_id += 1
                reply = {"id": self.server.next_id}
        elif self.path == "/reset":
            reply = {"observation": f"Task {body.get('data_idx')}: wait until done."}
        elif self.path == "/step":
            time.sleep(self.server.delay_s)
            reply = {"observation": "You wait.", "reward": 0.0, "done": False}
        else:
            reply = True
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FixedEngine:
    """Replies ``Action: <the env's fixed action>`` at once (the env named in the prompt)."""

    version = 0
    streams_weights = False  # takes whole state dicts

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.replies = {
            env: tokenizer.encode(f"Thought: go on.\nAction: {a}<|im_end|>")
            for env, a in ACTIONS.items()
        }
        # each env's system prompt is its family's instruction: the prompt names its env
        self.marks = {e: family(e).instruction[:60] for e in ("babyai", "textcraft")}

    async def generate(self, prompts, params):
        from agentgym.engines.base import Generation

        out = []
        for tokens in prompts:
            text = self.tokenizer.decode(tokens[:200])
            env = next((e for e, mark in self.marks.items() if mark in text), "slow")
            ids = self.replies[env]
            out.append(Generation(list(ids), [-0.1] * len(ids), "stop"))
        await asyncio.sleep(0)
        return out

    async def load_weights(self, state_dict, version):
        self.version = version

    async def close(self):
        pass


def run_case(
    tokenizer, envs: dict[str, int], slots: int, pools: dict, seconds: float, tmp: Path
) -> dict:
    """Groups/s per env for one actor with ``slots`` groups in flight, ``envs[e]`` of them
    at most of env ``e``."""
    from agentgym.actor.actor import Actor, ActorSettings, EnvDraw
    from agentgym.actor.config import EpisodeRules
    from agentgym.agent.turns import ChatCodec
    from agentgym.engines.base import SamplingParams
    from agentgym.transport.endpoints import Endpoints
    from agentgym.transport.learner_channels import LearnerChannels
    from agentgym.transport.wire import Control

    draws = tuple(EnvDraw(name, tuple(range(1000)), 1.0, n) for name, n in envs.items())
    settings = ActorSettings(
        draws, group_size=4, groups_in_flight=slots, max_staleness=10**6, share=10**6,
        rules=EpisodeRules(max_context_tokens=4096),
        connect_timeout_s=10,
    )  # fmt: skip
    tmp.mkdir(parents=True, exist_ok=True)
    learner = LearnerChannels(Endpoints.ipc(tmp), republish_s=0.05)
    engine = FixedEngine(tokenizer)
    actor = Actor(
        settings, engine, {n: pools[n] for n in envs}, ChatCodec(tokenizer),
        SamplingParams(max_new_tokens=16), learner.endpoints,
    )  # fmt: skip
    learner.publish_control(Control(0, {"": 6}))
    done: Counter[str] = Counter()
    thread = threading.Thread(target=lambda: asyncio.run(actor.run(timeout_s=seconds)))
    thread.start()
    start = time.monotonic()
    while thread.is_alive():
        for t in learner.recv_trajectories(timeout_s=0.05):
            done[t.env] += 1
    elapsed = time.monotonic() - start
    learner.close()
    return {env: done[env] / settings.group_size / elapsed for env in envs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--delay-ms", type=float, default=100.0)
    p.add_argument("--slots", type=int, default=8, help="actor.groups_in_flight")
    args = p.parse_args()
    from agentgym.envs import EnvPool
    from agentgym.models import TinyModelSpec, build_tiny_model, env_corpus, load_tokenizer

    server = SlowServer(args.delay_ms / 1000)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = env_corpus("babyai", episodes=8) + env_corpus("textcraft", episodes=8)
        model_dir = build_tiny_model(Path(tmp) / "m", lambda: corpus, TinyModelSpec())
        tokenizer = load_tokenizer(model_dir)
        pools = {
            "babyai": EnvPool("babyai"),
            "textcraft": EnvPool("textcraft"),
            "slow": EnvPool.remote(server.url, "slow", num_tasks=1000, timeout=30),
        }
        n, half = args.slots, args.slots // 2
        split = f"{half}/{n - half}"
        cases = [
            ("babyai alone", {"babyai": n}),
            ("textcraft alone", {"textcraft": n}),
            (f"babyai + textcraft (slots {split})", {"babyai": half, "textcraft": n - half}),
            ("slow alone", {"slow": n}),
            (f"babyai + slow, per-env slots {split}", {"babyai": half, "slow": n - half}),
            (f"babyai + slow, shared slots ({n} for either)", {"babyai": n, "slow": n}),
        ]
        print(f"# {platform.processor() or platform.machine()}, {args.seconds:.0f} s per case, "
              f"slow env {args.delay_ms:.0f} ms/step, group size 4, cap 6 turns")  # fmt: skip
        print("| case | babyai groups/s | textcraft groups/s | slow groups/s |")
        print("|---|---:|---:|---:|")
        for i, (name, envs) in enumerate(cases):
            rates = run_case(tokenizer, envs, n, pools, args.seconds, Path(tmp) / f"c{i}")
            cells = [f"{rates[e]:.1f}" if e in rates else "" for e in ACTIONS]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    server.shutdown()


if __name__ == "__main__":
    main()
