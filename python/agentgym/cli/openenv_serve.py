"""``agentgym openenv-serve --env babyai``: one native env as an OpenEnv environment server.

Serves OpenEnv's own app (``openenv.core.env_server.create_app``) over one agentgym pool:
``/ws`` for per-episode WebSocket sessions (OpenEnv's ``GenericEnvClient``, TRL's, SkyRL's and
verifiers' OpenEnv clients), ``/reset``, ``/step``, ``/schema``, ``/health``, the Task API
(``/{env}/splits``, ``/{env}/tasks``, ``/{env}/task``, ...: agentgym's ``train`` and ``test``
splits, from CONFIG's ``tasks`` when given) and ``/agentgym/stats``. The sessions' concurrent
calls go out as batched pool calls. Needs ``pip install 'agentgym-rs[openenv]'``; the page is
docs/integrations/openenv.md.
"""

from __future__ import annotations

import argparse
import sys

from agentgym.envs.coalesce import DEFAULT_WINDOW_S


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="native env: babyai, textcraft, ...")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--max-sessions", type=int, default=1024, help="WebSocket sessions allowed at once"
    )
    parser.add_argument(
        "--max-turns", type=int, default=None,
        help="horizon cap: an episode that takes this many steps ends truncated",
    )  # fmt: skip
    parser.add_argument(
        "--window-ms", type=float, default=DEFAULT_WINDOW_S * 1000,
        help="how long a call waits for other sessions' calls before its batch goes",
    )  # fmt: skip
    parser.add_argument(
        "--config", default=None, help="a run config whose tasks.train/tasks.eval are the splits"
    )
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE",
        help="env option (repeatable), e.g. qa=... index=... for search",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Serves until Ctrl-C; returns the exit code (2 for bad arguments or a missing extra)."""
    try:
        app = build_app(args)
    except (ImportError, ValueError) as e:
        print(f"agentgym openenv-serve: {e}", file=sys.stderr)
        return 2
    import uvicorn

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"agentgym openenv-serve: listening on {args.host} without authentication: anyone "
            "who reaches it can drive the env",
            file=sys.stderr,
        )
    print(f"OpenEnv server for {args.env} on http://{args.host}:{args.port} (WebSocket /ws)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def build_app(args: argparse.Namespace):
    """The FastAPI app ``args`` describe (ValueError for a bad argument)."""
    from agentgym.cli.envserver import parse_options
    from agentgym.config import load_config
    from agentgym.integrations.common import require

    require("openenv.core.env_server")
    from agentgym.integrations.openenv import create_server_app

    tasks = None
    if args.config:
        entries = [e for e in load_config(args.config).entries if e.env.name == args.env]
        if not entries:
            raise ValueError(f"{args.config} has no env {args.env!r}")
        tasks = entries[0].tasks
    if args.max_sessions < 1:
        raise ValueError(f"--max-sessions must be >= 1, got {args.max_sessions}")
    return create_server_app(
        args.env,
        max_sessions=args.max_sessions,
        tasks=tasks,
        max_turns=args.max_turns,
        window_s=args.window_ms / 1000,
        **parse_options(args.env, args.option),
    )
