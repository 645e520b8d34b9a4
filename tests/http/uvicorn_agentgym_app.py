"""An AgentGym-style env server (``id`` dialect) as AgentGym's own are built: a FastAPI app under
uvicorn, here with a short keep-alive (``--keep-alive S``), as gunicorn's default (2 s) or
``uvicorn --timeout-keep-alive 2`` run them. The env is a counter: step ``k`` of an episode
answers ``"<task>:<k>:<action>"``. Binds 127.0.0.1 on a free port and prints ``PORT <n>``."""

from __future__ import annotations

import argparse
import itertools
import socket

import uvicorn
from fastapi import FastAPI

app = FastAPI()
ids = itertools.count(0)
sessions: dict[int, dict] = {}


@app.post("/create")
def create() -> dict:
    sid = next(ids)
    sessions[sid] = {"task": None, "k": 0}
    return {"id": sid}


@app.post("/reset")
def reset(body: dict) -> dict:
    sessions[body["id"]] = {"task": body["data_idx"], "k": 0}
    return {"observation": f"task {body['data_idx']}", "reward": 0, "done": False}


@app.post("/step")
def step(body: dict) -> dict:
    s = sessions[body["id"]]
    s["k"] += 1
    return {"observation": f"{s['task']}:{s['k']}:{body['action']}", "reward": 0, "done": False}


@app.post("/close")
def close(body: dict) -> bool:
    return sessions.pop(body["id"], None) is not None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--keep-alive", type=float, default=2.0)
    args = p.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, timeout_keep_alive=args.keep_alive, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
