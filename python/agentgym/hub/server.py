"""The hub's HTTP server: a JSON API over ``RunIndex`` and the static pages.

Python's threading HTTP server is enough here: the data are files written by the Python side of
a run, one person's browser is the client, and playing an env by hand will go through
``EnvPool`` in this process. The Rust server stays what it is, the env wire protocol.

API (all GET, JSON; ``run`` is an id from ``/api/runs``):
    /api/runs                                   the runs under the roots, with status
    /api/run?run=ID                             config, summary, actors of one run
    /api/metrics?run=ID&start=N&keys=A,B        metric columns from valid line N on, ``next``
    /api/trajectories?run=ID&offset=&limit=&FILTER=VALUE...
                                                sampled episodes (no tokens), filterable
    /api/trajectory?run=ID&index=N              one episode split into turns
    /api/evals?run=ID                           the run's ``agentgym eval`` results per level
    /api/eval_episodes?run=ID&name=N[&task=T]   an eval result's tasks, or one task's episodes
    /api/envs                                   native envs one can play by hand
    POST /api/play {"env", "task_id"}           start a hand-played episode
    POST /api/play/step {"session", "action"}   one action in it
With a token, every API call needs ``Authorization: Bearer TOKEN`` (the page passes on the
``?token=`` it was opened with).

Guards: requests a browser makes for another site's page are refused (``agentgym.httpguard``:
JSON bodies only, no foreign ``Origin``, and without a token no ``Host`` but this server's);
a request's head must arrive within ``HEAD_TIMEOUT_S`` of the connection's last request (or
its opening) and its body within ``BODY_TIMEOUT_S``; at most ``MAX_CONNECTIONS`` connections
are open at once: a new one past them takes the place of the one that has waited longest
without a request in progress (first those that never sent one, then idle kept-alive ones),
and is closed only when every open connection has a request being answered, so silent sockets
cannot lock the user out; ``keys=`` names at most ``MAX_KEYS`` metrics.
A bad run file costs only its own run (its ``problems`` say why); an error in a route is
answered 500 with the reason, and the server goes on.
"""

from __future__ import annotations

import hmac
import json
import math
import mimetypes
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agentgym.httpguard import CrossSite
from agentgym.hub.play import Play, PlayError
from agentgym.hub.runs import (
    FILTERS,
    RunIndex,
    UnknownEval,
    UnknownRun,
    UnknownTrajectory,
    matches,
)

STATIC_FILES = ("index.html", "app.js", "style.css")
MAX_PAGE = 1000
MAX_BODY = 64 * 1024
MAX_KEYS = 256
"""Metric names one ``/api/metrics`` call may ask for."""
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 128


class BadRequest(ValueError):
    """A request the API cannot answer (400, with the message)."""


def plotly_js() -> Path:
    """plotly.js as the ``plotly`` package ships it."""
    try:
        import plotly
    except ImportError as e:
        raise RuntimeError("agentgym hub draws curves with plotly.js: pip install plotly") from e
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise RuntimeError(f"the installed plotly package has no {path}")
    return path


RUN_ROUTES = frozenset({"run", "metrics", "trajectories", "trajectory", "evals", "eval_episodes"})
"""The GET routes about one run (``?run=ID``)."""


class Hub:
    """What the request handler serves: the run index, the token, the static files."""

    def __init__(
        self,
        roots: list[Path],
        token: str | None = None,
        env_options: dict[str, dict[str, str]] | None = None,
        allowed_hosts: tuple[str, ...] = (),
    ):
        self.index = RunIndex(roots)
        self.token = token
        self.allowed_hosts = allowed_hosts
        """Host names served besides the bound address and localhost (``--allow-host``)."""
        self.plotly = plotly_js()
        self.play = Play(env_options=env_options)
        self.cross_site = CrossSite.of("127.0.0.1", allowed_hosts, token is not None)
        """Set for the bound address by ``make_server``."""

    def api(self, route: str, query: dict[str, str]) -> Any:
        """The JSON answer of one API call (raises BadRequest, UnknownRun...)."""
        if route == "runs":
            return {"runs": [_overview(run) for run in self.index.scan()]}
        if route == "envs":
            return {"envs": self.play.envs()}
        if route not in RUN_ROUTES:  # before asking for a run: an unknown route is a 404
            raise KeyError(route)
        run = self.index.get(_required(query, "run"))
        if route == "run":
            return {"overview": run.overview(), "config": run.config(), "summary": run.summary(),
                    "actors": run.actors()}  # fmt: skip
        if route == "metrics":
            return run.metrics_since(_int(query, "start", 0), _keys(query.get("keys")))
        if route == "trajectories":
            return self._trajectories(run, query)
        if route == "trajectory":
            return run.trajectory(_int(query, "index", None))
        if route == "evals":
            return {"evals": run.evals()}
        if route == "eval_episodes":
            task = _int(query, "task", None) if "task" in query else None
            return run.eval_episodes(_required(query, "name"), task)
        raise KeyError(route)

    def post(self, route: str, body: Any) -> Any:
        """The JSON answer of a POST call (the play routes)."""
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if route == "play":
            return self.play.start(body.get("env"), body.get("task_id"))
        if route == "play/step":
            return self.play.step(body.get("session"), body.get("action"))
        raise KeyError(route)

    def _trajectories(self, run, query: dict[str, str]) -> dict[str, Any]:
        run.refresh_trajectories()
        filters = {k: v for k, v in query.items() if k in FILTERS and v != ""}
        if "version" in filters:
            _int(filters, "version", None)
        rows = [r for r in run.summaries if matches(r, filters)]
        offset = _int(query, "offset", 0)
        limit = min(_int(query, "limit", 200), MAX_PAGE)
        values = {k: sorted({str(r.get(k)) for r in run.summaries}) for k in ("env", "group")}
        return {"total": len(run.summaries), "matched": len(rows),
                "rows": rows[offset : offset + limit], "values": values,
                "bad_lines": run.trajectories.bad}  # fmt: skip


def _required(query: dict[str, str], name: str) -> str:
    if not query.get(name):
        raise BadRequest(f"missing query parameter {name!r}")
    return query[name]


def _int(query: dict[str, str], name: str, default: int | None) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadRequest(f"missing query parameter {name!r}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise BadRequest(f"{name} must be >= 0, got {value}")
    return value


def _overview(run) -> dict[str, Any]:
    """A run's line in the runs list; a run whose files break the overview is listed with
    the reason, and the others are not affected."""
    try:
        return run.overview()
    except Exception as e:  # noqa: BLE001 - one run's bad files must not hide the others
        return {"id": run.id, "path": str(run.path), "status": "error",
                "problems": [f"{type(e).__name__}: {e}"]}  # fmt: skip


def _keys(raw: str | None) -> list[str] | None:
    """The metric names of ``keys=A,B`` (each once, in order), at most ``MAX_KEYS``."""
    if not raw:
        return None
    keys = list(dict.fromkeys(raw.split(",")))
    if len(keys) > MAX_KEYS:
        raise BadRequest(f"keys names {len(keys)} metrics; at most {MAX_KEYS} per call")
    return keys


class _DeadlineReader:
    """The connection's input with one deadline for everything read until it is moved: each
    read waits only for the time left (the socket's own timeout restarts with every byte, so
    a client sending a byte at a time would otherwise hold its thread without end)."""

    def __init__(self, raw: Any, sock: socket.socket):
        self._raw, self._sock = raw, sock
        self.deadline = time.monotonic() + HEAD_TIMEOUT_S

    def _wait(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(left)

    def readline(self, limit: int = -1) -> bytes:
        self._wait()
        return self._raw.readline(limit)

    def read(self, n: int = -1) -> bytes:
        self._wait()
        return self._raw.read(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class Handler(BaseHTTPRequestHandler):
    """GET: ``/`` and ``/static/NAME`` pages, ``/api/ROUTE`` JSON; POST: the play routes."""

    hub: Hub
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.rfile = _DeadlineReader(self.rfile, self.connection)
        self.activity = self.server.track(self.connection)

    def finish(self) -> None:
        self.server.untrack(self.connection)
        super().finish()

    def handle_one_request(self) -> None:
        """One request; its head must arrive within ``HEAD_TIMEOUT_S`` (an idle kept-alive
        connection is closed then, as one that sends nothing or too slowly)."""
        self.rfile.deadline = time.monotonic() + HEAD_TIMEOUT_S
        self.activity.waiting(True)
        super().handle_one_request()

    def parse_request(self) -> bool:
        self.activity.waiting(False)  # a request head arrived: not to be pushed out
        return super().parse_request()

    def _refused(self) -> bool:
        """Answers a request the cross-site rules refuse; whether it did."""
        refusal = self.hub.cross_site.refusal(self.command, self.headers)
        if refusal is None:
            return False
        self.close_connection = True
        self._json(HTTPStatus(refusal[0]), {"error": refusal[1]})
        return True

    def do_GET(self) -> None:  # noqa: N802 - the http.server naming
        url = urlsplit(self.path)
        if self._refused():
            return
        try:
            if url.path == "/":
                self._file(resources.files("agentgym.hub") / "static" / "index.html")
            elif url.path.startswith("/static/"):
                self._static(url.path.removeprefix("/static/"))
            elif url.path.startswith("/api/"):
                self._api(url.path.removeprefix("/api/"), url.query)
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})
        except ConnectionError:
            pass  # the browser went away (page closed or request aborted)

    def do_POST(self) -> None:  # noqa: N802 - the http.server naming
        url = urlsplit(self.path)
        if self._refused():
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            self.close_connection = True
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"need a Content-Length <= {MAX_BODY}"})
            return
        self.rfile.deadline = time.monotonic() + BODY_TIMEOUT_S
        raw = self._read_body(int(length))
        if raw is None:
            return
        if not url.path.startswith("/api/"):
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})
            return
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            self._json(HTTPStatus.BAD_REQUEST, {"error": "the body is not JSON"})
            return
        self._api(url.path.removeprefix("/api/"), "", body)

    def _read_body(self, length: int) -> bytes | None:
        """The body, or None (answered 408, connection closed) when it stops arriving."""
        parts, got = [], 0
        try:
            while got < length:
                part = self.rfile.read(length - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
        except TimeoutError:
            pass
        if got < length:
            self.close_connection = True
            self._json(HTTPStatus.REQUEST_TIMEOUT, {"error": "the request body did not arrive"})
            return None
        return b"".join(parts)

    def _api(self, route: str, raw_query: str, body: Any = None) -> None:
        if not self._authorised():
            self._json(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
            return
        query = {k: v[-1] for k, v in parse_qs(raw_query, keep_blank_values=True).items()}
        try:
            if self.command == "POST":
                self._json(HTTPStatus.OK, self.hub.post(route, body))
            else:
                self._json(HTTPStatus.OK, self.hub.api(route, query))
        except (BadRequest, PlayError) as e:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(e)})
        except UnknownRun as e:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"unknown run {e.args[0]!r}"})
        except UnknownTrajectory as e:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no trajectory {e.args[0]}"})
        except UnknownEval as e:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no eval episodes named {e.args[0]!r}"})
        except KeyError as e:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such API route: {e.args[0]!r}"})
        except Exception as e:  # noqa: BLE001 - answer, and serve the next request
            sys.stderr.write(f"hub: /api/{route} failed: {type(e).__name__}: {e}\n")
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"})

    def _authorised(self) -> bool:
        token = self.hub.token
        if token is None:
            return True
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        # header values arrive as latin-1 text: compare the bytes sent with the token's UTF-8
        sent = given.strip().encode("latin-1", errors="replace")
        return scheme.lower() == "bearer" and hmac.compare_digest(sent, token.encode())

    def _static(self, name: str) -> None:
        if name == "plotly.min.js":
            self._file(self.hub.plotly)
        elif name in STATIC_FILES:
            self._file(resources.files("agentgym.hub") / "static" / name)
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such file: {name}"})

    def _file(self, path: Any) -> None:
        body = path.read_bytes()
        kind = mimetypes.guess_type(str(path))[0] or "application/octet-stream"
        self._send(HTTPStatus.OK, body, kind, cache=name_is_library(path))

    def _json(self, status: HTTPStatus, value: Any) -> None:
        try:
            body = json.dumps(value, allow_nan=False, default=str).encode()
        except ValueError:  # NaN or infinity in a metric: JSON has no such numbers
            try:
                body = json.dumps(_finite(value), allow_nan=False, default=str).encode()
            except (ValueError, RecursionError) as e:
                status, body = HTTPStatus.INTERNAL_SERVER_ERROR, _error_body(e)
        except RecursionError as e:
            status, body = HTTPStatus.INTERNAL_SERVER_ERROR, _error_body(e)
        self._send(status, body, "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=86400" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Errors only; a hub polled every second would flood the console otherwise."""
        if args and str(args[1] if len(args) > 1 else "").startswith(("4", "5")):
            sys.stderr.write(f"hub: {self.address_string()} {format % args}\n")


def _error_body(e: BaseException) -> bytes:
    return json.dumps({"error": f"the reply cannot be written as JSON: {e}"}).encode()


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def name_is_library(path: Any) -> bool:
    """plotly.js is cached by the browser; the hub's own files are not (they change with it)."""
    return str(path).endswith("plotly.min.js")


class _Activity:
    """What one connection is doing, for eviction at the cap."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.is_waiting, self.served, self.since = True, False, time.monotonic()

    def waiting(self, now_waiting: bool) -> None:
        if now_waiting and not self.is_waiting:
            self.served = True
        self.is_waiting, self.since = now_waiting, time.monotonic()


class HubServer(ThreadingHTTPServer):
    """One thread per connection, at most ``MAX_CONNECTIONS`` open: at the cap a new one takes
    the place of the one waiting longest without a request (see the module doc), and is closed
    at once only when every open one has a request in progress; a client that hangs up
    mid-request is not an error."""

    daemon_threads = True
    request_queue_size = 128
    EVICTION_WAIT_S = 2.0
    """How long a new connection waits for the place of the one pushed out to be free."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: dict[int, _Activity] = {}
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def track(self, sock: socket.socket) -> _Activity:
        activity = _Activity(sock)
        with self._open_lock:
            self._open[id(sock)] = activity
        return activity

    def untrack(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open.pop(id(sock), None)

    def _evict_one(self) -> bool:
        """Shut down the connection waiting longest without a request (never-served first);
        its thread then ends and frees its place. False when every one has a request."""
        with self._open_lock:
            waiting = [a for a in self._open.values() if a.is_waiting]
            victim = min(waiting, key=lambda a: (a.served, a.since), default=None)
            if victim is None:
                return False
            victim.is_waiting = False  # pushed out once
        try:
            victim.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return True

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not (
            self._evict_one() and self._slots.acquire(timeout=self.EVICTION_WAIT_S)
        ):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


def make_server(hub: Hub, host: str = "127.0.0.1", port: int = 8765) -> HubServer:
    """A threading HTTP server for ``hub`` bound to ``host:port`` (0: any free port)."""
    handler = type("BoundHandler", (Handler,), {"hub": hub})
    server = HubServer((host, port), handler)
    hub.cross_site = CrossSite.of(
        server.server_address[0], hub.allowed_hosts, hub.token is not None
    )
    return server
