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
"""

from __future__ import annotations

import hmac
import json
import math
import mimetypes
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

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
    ):
        self.index = RunIndex(roots)
        self.token = token
        self.plotly = plotly_js()
        self.play = Play(env_options=env_options)

    def api(self, route: str, query: dict[str, str]) -> Any:
        """The JSON answer of one API call (raises BadRequest, UnknownRun...)."""
        if route == "runs":
            return {"runs": [run.overview() for run in self.index.scan()]}
        if route == "envs":
            return {"envs": self.play.envs()}
        if route not in RUN_ROUTES:  # before asking for a run: an unknown route is a 404
            raise KeyError(route)
        run = self.index.get(_required(query, "run"))
        if route == "run":
            return {"overview": run.overview(), "config": run.config(), "summary": run.summary(),
                    "actors": _json_file(run.path / "actors.json")}  # fmt: skip
        if route == "metrics":
            keys = query.get("keys")
            return run.metrics_since(_int(query, "start", 0), keys.split(",") if keys else None)
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


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Handler(BaseHTTPRequestHandler):
    """GET: ``/`` and ``/static/NAME`` pages, ``/api/ROUTE`` JSON; POST: the play routes."""

    hub: Hub
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the http.server naming
        url = urlsplit(self.path)
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
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            self.close_connection = True
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"need a Content-Length <= {MAX_BODY}"})
            return
        raw = self.rfile.read(int(length))
        if not url.path.startswith("/api/"):
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})
            return
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            self._json(HTTPStatus.BAD_REQUEST, {"error": "the body is not JSON"})
            return
        self._api(url.path.removeprefix("/api/"), "", body)

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

    def _authorised(self) -> bool:
        token = self.hub.token
        if token is None:
            return True
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)

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
            body = json.dumps(_finite(value), allow_nan=False, default=str).encode()
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


class HubServer(ThreadingHTTPServer):
    """One thread per connection; a client that hangs up mid-request is not an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def make_server(hub: Hub, host: str = "127.0.0.1", port: int = 8765) -> HubServer:
    """A threading HTTP server for ``hub`` bound to ``host:port`` (0: any free port)."""
    handler = type("BoundHandler", (Handler,), {"hub": hub})
    return HubServer((host, port), handler)
