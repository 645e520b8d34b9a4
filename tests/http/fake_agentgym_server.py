"""A tiny AgentGym-style server (``id`` or ``env_idx`` dialect) that misbehaves on purpose.

Run as a subprocess by the fault tests: ``python fake_agentgym_server.py --mode MODE``. It binds
127.0.0.1 on a free port and prints ``PORT <n>`` once listening. Modes:

- ``ok``: a counter env; step ``k`` of an episode answers ``"<task>:<k>:<action>"``, done at 3.
- ``sleep``: as ``ok``, but ``/step`` sleeps ``--sleep`` seconds first.
- ``garbage``: as ``ok``, but ``/step`` answers 200 with a body that is not JSON.
- ``reuse_ids``: as ``ok``, but ``/create`` hands out ids 0 and 1 in turn (a server that
  reuses ids, or one restarted between two creates).
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self, mode: str, sleep: float, dialect: str):
        self.mode, self.sleep, self.dialect = mode, sleep, dialect
        self.ids = itertools.cycle([0, 1]) if mode == "reuse_ids" else itertools.count(0)
        self.sessions: dict[int, dict] = {}
        self.lock = threading.Lock()
        self.steps_received = 0


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    key = "id" if state.dialect == "id" else "env_idx"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/":
                self.reply(200, json.dumps("This is a fake environment.").encode())
            elif self.path == "/stats":
                self.reply(200, json.dumps({"steps": state.steps_received}).encode())
            else:
                self.reply(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            route = self.path
            if route == "/create":
                with state.lock:
                    sid = next(state.ids)
                    state.sessions[sid] = {"task": None, "k": 0}
                self.reply(200, json.dumps({"id": sid} if key == "id" else sid).encode())
            elif route == "/reset":
                sid = body[key]
                task = body["data_idx"] if key == "id" else body["id"]
                state.sessions[sid] = {"task": task, "k": 0}
                obs = f"task {task}"
                reply = {"observation": obs, "reward": 0, "done": False} if key == "id" else obs
                self.reply(200, json.dumps(reply).encode())
            elif route == "/step":
                with state.lock:
                    state.steps_received += 1
                if state.mode == "sleep":
                    time.sleep(state.sleep)
                if state.mode == "garbage":
                    self.reply(200, b"<html>502 Bad Gateway</html>")
                    return
                s = state.sessions.get(body[key])
                if s is None:
                    self.reply(
                        200, json.dumps({"error": f"The id {body[key]} is not valid."}).encode()
                    )
                    return
                s["k"] += 1
                obs = f"{s['task']}:{s['k']}:{body['action']}"
                self.reply(
                    200,
                    json.dumps(
                        {"observation": obs, "reward": float(s["k"] == 3), "done": s["k"] == 3}
                    ).encode(),
                )
            elif route == "/close":
                self.reply(
                    200, json.dumps(state.sessions.pop(body[key], None) is not None).encode()
                )
            else:
                self.reply(404, b'{"detail": "Not Found"}')

    return Handler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ok", "sleep", "garbage", "reuse_ids"], default="ok")
    p.add_argument("--sleep", type=float, default=5.0)
    p.add_argument("--dialect", choices=["id", "env_idx"], default="id")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    server = ThreadingHTTPServer(
        ("127.0.0.1", args.port), make_handler(State(args.mode, args.sleep, args.dialect))
    )
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
