"""``agentgym-sciworld-server``: ScienceWorld over HTTP in AgentGym's SciWorld wire format.

    pip install 'agentgym-rs[sciworld]'      # scienceworld (needs Java 11+), fastapi, uvicorn
    agentgym-sciworld-server --port 36002 --max-sessions 16

Drive it with ``EnvPool.remote("http://127.0.0.1:36002", "sciworld")``. Routes, as AgentGym's
``agentenv-sciworld``: ``GET /``, ``POST /create -> {"id"}``, ``POST /reset {"id", "data_idx"} ->
{"task_name", "var_num", "task_description", "observation", "reward", "score", "deleted",
"done"}``, ``POST /step {"id", "action"} -> {"observation", "reward", "score", "done"}``,
``GET /observation?id=N -> str``, ``POST /close {"id"} -> true|false``; plus ``GET /health``.

Task ``data_idx`` enumerates (task, variation) pairs in the simulator's task order, leaving out
the tasks AgentGym leaves out. Replies carry what AgentGym's server sends; ``/step`` adds
``truncated``: true when the episode ended at ScienceWorld's move limit (``done`` is then true as
well, as AgentGym's clients expect), false when it ended by completion (score 100) or failure
(score < 0). AgentGym's client shows ``task_description + "\n" + observation`` as the first
observation and takes each step's ``score`` as the reward; ``EnvPool.remote(url, "sciworld")``
does the same.

Determinism: ScienceWorld orders some objects differently each time a simulator loads a task
(in 25 of 90 (task, variation) pairs a second load of the same task in one simulator differed),
but the first load in a fresh simulator is always the same. ``--fresh-simulator`` starts a new
simulator for every reset, so the same ``data_idx`` gives the same episode, at the cost of
a JVM start per reset (about 1-2 s instead of 0.1-0.2 s; bench/RESULTS.md). Without it (the
default, as AgentGym's server) the same ``data_idx`` gives the same task, objects and goal, with
the order of some listed objects varying.

Each session owns a JVM (about 0.2-0.5 GB), so sessions are capped (``--max-sessions``; over it
``/create`` answers 503) and ``/close`` shuts the JVM down. Errors are ``{"error": "..."}`` with
404 (unknown id), 409 (episode finished), 422 (bad fields or ``data_idx``), 503 (over capacity);
AgentGym's server answers 200 for those.

The server has ``agentgym-envserver``'s guards (``agentgym.asgiguard``): request bodies capped
(``--max-body-bytes``, 413) and read within ``--body-read-timeout`` (408), request heads within
``--header-read-timeout`` (the connection is closed), an optional bearer token
(``$AGENTGYM_SCIWORLD_TOKEN``, ``--token-file`` or ``--token``; a warning when it listens beyond
loopback without one), and the cross-site rules (``agentgym.httpguard``, ``--allow-host``).
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.asgiguard import Guard, GuardSettings, head_timeout_protocol
from agentgym.httpguard import CrossSite, exposed_without_token, resolve_token

TOKEN_ENV = "AGENTGYM_SCIWORLD_TOKEN"

# Tasks AgentGym's SciWorld server leaves out of its task list.
EXCLUDED_TASKS = frozenset({"5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2"})


class HttpError(Exception):
    """An error reply: status code and message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Session:
    """One ScienceWorld simulator (one JVM) and what the wire reports about it."""

    env: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    observation: str = ""
    done: bool = False
    started: bool = False
    last_used: float = field(default_factory=time.monotonic)


class SciWorldSessions:
    """The session table: JVM-backed simulators, capped in number, freed on close."""

    def __init__(self, max_sessions: int = 16, make_env: Any = None, fresh: bool = False):
        if make_env is None:
            from scienceworld import ScienceWorldEnv

            make_env = ScienceWorldEnv
        self._make_env = make_env
        self.max_sessions = max_sessions
        self.fresh = fresh
        self._sessions: dict[int, Session] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(0)
        self._reserved = 0
        self.games = self._list_games()

    def _list_games(self) -> list[tuple[str, int]]:
        """(task name, variation) pairs, AgentGym's ``data_idx`` order."""
        env = self._make_env()
        try:
            return [
                (name, variation)
                for key, name in env.tasks.items()
                if key not in EXCLUDED_TASKS
                for variation in range(env.get_max_variations(name))
            ]
        finally:
            env.close()

    def create(self) -> dict[str, Any]:
        with self._lock:
            if len(self._sessions) + self._reserved >= self.max_sessions:
                raise HttpError(
                    503, f"too many sessions: {self.max_sessions} open (--max-sessions)"
                )
            self._reserved += 1
        try:
            env = self._make_env()  # starts a JVM: seconds, outside the table lock
        finally:
            with self._lock:
                self._reserved -= 1
        with self._lock:
            session_id = next(self._ids)
            self._sessions[session_id] = Session(env)
        return {"id": session_id}

    def reset(self, session_id: int, data_idx: int) -> dict[str, Any]:
        if not 0 <= data_idx < len(self.games):
            raise HttpError(422, f"data_idx {data_idx} is out of range 0..{len(self.games)}")
        s = self._get(session_id)
        task_name, variation = self.games[data_idx]
        with s.lock:
            if self.fresh and s.started:  # a task's first load in a new simulator is reproducible
                fresh_env = self._make_env()
                s.env.close()
                s.env = fresh_env
            s.env.load(task_name, variation)
            description = s.env.get_task_description()
            observation, reward, done, info = s.env.step("look around")
            s.observation, s.done, s.started = observation, bool(done), True
        return {
            "task_name": task_name,
            "var_num": variation,
            "task_description": description,
            "observation": observation,
            "reward": reward,
            "score": info["score"],
            "deleted": False,
            "done": bool(done),
        }

    def step(self, session_id: int, action: str) -> dict[str, Any]:
        s = self._get(session_id)
        with s.lock:
            if not s.started:
                raise HttpError(409, f"session {session_id} has not been reset")
            if s.done:
                raise HttpError(409, f"the episode of session {session_id} has finished; reset it")
            observation, reward, done, info = s.env.step(action)
            s.observation, s.done = observation, bool(done)
        return {
            "observation": observation,
            "reward": reward,
            "score": info["score"],
            "done": s.done,
            "truncated": s.done and _out_of_moves(s.env, info),
        }

    def observation(self, session_id: int) -> str:
        return self._get(session_id).observation

    def close(self, session_id: int) -> bool:
        with self._lock:
            s = self._sessions.pop(session_id, None)
        if s is None:
            return False
        with s.lock:
            s.env.close()
        return True

    def close_idle(self, idle_seconds: float) -> int:
        """Closes sessions unused for ``idle_seconds``; returns how many."""
        now = time.monotonic()
        with self._lock:
            idle = [i for i, s in self._sessions.items() if now - s.last_used > idle_seconds]
        return sum(self.close(i) for i in idle)

    def close_all(self) -> None:
        with self._lock:
            ids = list(self._sessions)
        for i in ids:
            self.close(i)

    def __len__(self) -> int:
        return len(self._sessions)

    def _get(self, session_id: int) -> Session:
        with self._lock:
            s = self._sessions.get(session_id)
        if s is None:
            raise HttpError(404, f"unknown session id {session_id} (never created or closed)")
        s.last_used = time.monotonic()
        return s


def _out_of_moves(env: Any, info: dict[str, Any]) -> bool:
    """The episode ended at the move limit: neither completed (score 100) nor failed (< 0)."""
    limit = getattr(env, "envStepLimit", None)
    over = limit is not None and info.get("moves", 0) > limit
    return bool(over and 0 <= info["score"] < 100)


def _request_models() -> tuple[type, type, type]:
    """The request bodies, as module globals so FastAPI resolves the (string) annotations."""
    from pydantic import BaseModel

    global StepBody, ResetBody, IdBody

    class StepBody(BaseModel):
        id: int
        action: str

    class ResetBody(BaseModel):
        id: int
        data_idx: int

    class IdBody(BaseModel):
        id: int

    return StepBody, ResetBody, IdBody


def build_app(sessions: SciWorldSessions, guards: GuardSettings | None = None) -> Any:
    """The FastAPI app over ``sessions``, behind ``guards`` (default: loopback, no token)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    StepBody, ResetBody, IdBody = _request_models()

    app = FastAPI()
    app.add_middleware(Guard, settings=guards or GuardSettings(CrossSite.of("127.0.0.1")))

    @app.exception_handler(HttpError)
    async def _http_error(_: Request, e: HttpError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        status = 400 if any(err.get("type") == "json_invalid" for err in e.errors()) else 422
        return JSONResponse({"error": f"wrong fields in request: {e.errors()}"}, status_code=status)

    @app.get("/")
    def hello() -> str:
        return "This is environment ScienceWorld."

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "server": "agentgym-sciworld-server",
            "env": "sciworld",
            "num_tasks": len(sessions.games),
            "sessions": len(sessions),
            "max_sessions": sessions.max_sessions,
            "batch": False,
        }

    @app.post("/create")
    def create() -> dict[str, Any]:
        return sessions.create()

    @app.post("/reset")
    def reset(body: ResetBody) -> dict[str, Any]:
        return sessions.reset(body.id, body.data_idx)

    @app.post("/step")
    def step(body: StepBody) -> dict[str, Any]:
        return sessions.step(body.id, body.action)

    @app.get("/observation")
    def observation(id: int) -> str:  # noqa: A002 - AgentGym's query parameter name
        return sessions.observation(id)

    @app.post("/close")
    def close(body: IdBody) -> bool:
        return sessions.close(body.id)

    return app


def _reap(sessions: SciWorldSessions, idle_seconds: float, stop: threading.Event) -> None:
    while not stop.wait(min(60.0, max(1.0, idle_seconds / 4))):
        sessions.close_idle(idle_seconds)


def uvicorn_config(app: Any, header_read_timeout: float = 10.0, keep_alive: float = 5.0) -> Any:
    """uvicorn's config for ``app``: HTTP/1 with a header-read timeout (``asgiguard``)."""
    import uvicorn

    return uvicorn.Config(
        app,
        log_level="warning",
        http=head_timeout_protocol(header_read_timeout),
        timeout_keep_alive=keep_alive,
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="agentgym-sciworld-server", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=36002)
    p.add_argument("--max-sessions", type=int, default=16, help="JVM-backed sessions at once")
    p.add_argument("--idle-timeout", type=float, default=3600.0, help="seconds; 0: never")
    p.add_argument(
        "--fresh-simulator",
        action="store_true",
        help="start a new simulator for every reset: the same data_idx then gives the same "
        "episode (object order included), at about 1-2 s per reset",
    )
    p.add_argument(
        "--token",
        default=None,
        help=f"bearer token every request must carry (default: ${TOKEN_ENV} if set; --token "
        "shows in ps, prefer the variable or --token-file)",
    )
    p.add_argument("--token-file", default=None, metavar="PATH", help="the token's file")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body limit")
    p.add_argument(
        "--header-read-timeout", type=float, default=10.0,
        help="close a connection whose request head has not arrived this many seconds after "
        "it opened or after its previous response (default 10)",
    )  # fmt: skip
    p.add_argument(
        "--body-read-timeout", type=float, default=30.0,
        help="answer 408 when a request body has not arrived this many seconds after its head",
    )  # fmt: skip
    p.add_argument(
        "--keep-alive-timeout", type=float, default=5.0,
        help="close a kept-alive connection idle this many seconds (default 5)",
    )  # fmt: skip
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME",
        help="serve requests for this host name too (without a token only localhost and the "
        "bound address are served, against DNS rebinding); repeatable, * allows any",
    )  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the server until Ctrl-C; every JVM is shut down on the way out."""
    import socket
    import sys

    import uvicorn

    args = build_parser().parse_args(argv)
    try:
        token = resolve_token(args, TOKEN_ENV)
    except ValueError as e:
        print(f"agentgym-sciworld-server: {e}", file=sys.stderr)
        return 2
    if exposed_without_token(args.host, token):
        print(
            f"warning: agentgym-sciworld-server listens on {args.host} without a bearer token: "
            f"anyone who can reach this port can drive the simulators (set ${TOKEN_ENV} or "
            "--token-file)",
            file=sys.stderr,
            flush=True,
        )
    guards = GuardSettings(
        CrossSite.of(args.host, args.allow_host, token is not None),
        token=token,
        max_body_bytes=args.max_body_bytes,
        body_read_timeout=args.body_read_timeout,
    )
    sessions = SciWorldSessions(max_sessions=args.max_sessions, fresh=args.fresh_simulator)
    stop = threading.Event()
    if args.idle_timeout > 0:
        threading.Thread(
            target=_reap, args=(sessions, args.idle_timeout, stop), daemon=True
        ).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)  # connections queue from now on, before uvicorn starts serving
    config = uvicorn_config(
        build_app(sessions, guards), args.header_read_timeout, args.keep_alive_timeout
    )
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    print(f"agentgym-sciworld-server: sciworld on http://{host}:{port}", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        sessions.close_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
