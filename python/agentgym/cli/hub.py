"""``agentgym hub [RUNS_DIR ...]``: serve the hub over the runs found under the directories."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentgym.httpguard import is_loopback


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``agentgym hub`` options."""
    p.add_argument(
        "roots", nargs="*", default=["runs"], metavar="RUNS_DIR",
        help="directories searched for run directories, 4 levels deep (default: runs)",
    )  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free)")
    p.add_argument(
        "--token", default=None,
        help="require this bearer token on every API call (open the page with ?token=...)",
    )  # fmt: skip
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME",
        help="serve requests for this host name too (without --token only localhost and the "
        "bound address are served, against DNS rebinding); repeatable, * allows any",
    )  # fmt: skip
    p.add_argument(
        "--env-option", action="append", default=[], metavar="ENV:KEY=VALUE",
        help="an option of ENV's pool on the Play page, repeatable (the search env needs "
        "--env-option search:index=DIR --env-option search:qa=FILE)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C."""
    from agentgym.hub.server import Hub, make_server

    roots = [Path(r) for r in args.roots]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        print(f"agentgym hub: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        env_options = parse_env_options(args.env_option)
    except ValueError as e:
        print(f"agentgym hub: --env-option: {e}", file=sys.stderr)
        return 2
    try:
        hub = Hub(
            roots,
            token=args.token,
            env_options=env_options,
            allowed_hosts=tuple(args.allow_host),
        )
        server = make_server(hub, args.host, args.port)
    except (RuntimeError, OSError) as e:
        print(f"agentgym hub: {e}", file=sys.stderr)
        return 2
    if args.token is None and not is_loopback(args.host):
        print(
            f"agentgym hub: warning: serving {args.host} without --token; anyone who can reach "
            "this port can read the runs",
            file=sys.stderr,
        )
    host, port = server.server_address[:2]
    query = f"?token={args.token}" if args.token else ""
    runs = len(hub.index.scan())
    print(f"agentgym hub: {runs} run(s) under {', '.join(map(str, roots))}", flush=True)
    print(f"agentgym hub: open http://{host}:{port}/{query}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def parse_env_options(pairs: list[str]) -> dict[str, dict[str, str]]:
    """``ENV:KEY=VALUE`` pairs as options per env (an unknown env or a malformed pair raises)."""
    from agentgym.envs import env_names

    options: dict[str, dict[str, str]] = {}
    for pair in pairs:
        env, colon, rest = pair.partition(":")
        key, equals, value = rest.partition("=")
        if not colon or not equals or not env or not key:
            raise ValueError(f"expected ENV:KEY=VALUE, got {pair!r}")
        if env not in env_names():
            raise ValueError(f"unknown env {env!r} in {pair!r}; envs: {', '.join(env_names())}")
        options.setdefault(env, {})[key] = value
    return options
