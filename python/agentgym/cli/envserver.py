"""``agentgym-envserver``: serve a native env over HTTP in AgentGym's wire format.

    agentgym-envserver --env textcraft --port 36001

The server is Rust (``agentgym._envserver.Server``: axum on tokio, sessions in an EnvPool); this
script only parses arguments, fills in TextCraft's default recipe folder, and waits with the GIL
released until Ctrl-C (or SIGTERM), which stops it cleanly.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from agentgym.httpguard import exposed_without_token, resolve_token

TOKEN_ENV = "AGENTGYM_ENVSERVER_TOKEN"


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per server option."""
    p = argparse.ArgumentParser(
        prog="agentgym-envserver",
        description="Serve a native agentgym env over HTTP, wire-compatible with AgentGym.",
    )
    p.add_argument(
        "--env", required=True, help="native env name (babyai, search, textcraft, webnav)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=36001, help="port (0: pick a free one)")
    p.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env option, repeatable (e.g. -o recipes_dir=/path for textcraft; "
        "-o index=DIR -o qa=FILE for search)",
    )
    p.add_argument("--max-sessions", type=int, default=65536, help="open sessions allowed")
    p.add_argument("--max-body-bytes", type=int, default=8 << 20, help="request body limit")
    p.add_argument("--max-action-bytes", type=int, default=None, help="action length limit")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=3600.0,
        help="close sessions unused for this many seconds (0: never)",
    )
    p.add_argument(
        "--token",
        default=None,
        help=f"bearer token every request must carry (default: ${TOKEN_ENV} if set; "
        "--token shows in ps, prefer the variable or --token-file)",
    )
    p.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="read the bearer token from the first line of this file",
    )
    p.add_argument("--workers", type=int, default=None, help="HTTP worker threads (default: cores)")
    p.add_argument("--env-threads", type=int, default=None, help="env threads (default: cores)")
    p.add_argument(
        "--blocking-threads",
        type=int,
        default=2,
        help="threads that take requests' env work (default 2: small requests are answered "
        "while a big batch runs; batches still spread over --env-threads). A single-session "
        "step of BabyAI or TextCraft, microseconds of CPU, runs on its HTTP worker instead",
    )
    p.add_argument(
        "--step-latency-ms",
        type=float,
        default=0.0,
        help="add this much latency to each step request (benchmarks only)",
    )
    p.add_argument(
        "--header-read-timeout",
        type=float,
        default=10.0,
        help="close a connection whose request head has not arrived this many seconds after "
        "it opened or after the previous response (slow clients, silent sockets; default 10)",
    )
    p.add_argument(
        "--body-read-timeout",
        type=float,
        default=30.0,
        help="answer 408 and close the connection when a request's body has not arrived "
        "this many seconds after its head (default 30)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=5.0,
        help="close a kept-alive connection idle this many seconds between requests "
        "(default 5; an idle connection also ends at --header-read-timeout)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        help="open connections at most; a new one takes the place of one waiting without a "
        "request in progress (default 1024, lowered to leave 64 file descriptors free when "
        "ulimit -n is smaller)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="serve requests for this host name too (without a token only localhost and the "
        "bound address are served, against DNS rebinding); repeatable, * allows any",
    )
    p.add_argument(
        "--max-custom-bytes",
        type=int,
        default=64 << 20,
        help="bytes of custom TextCraft episodes (/create with goal and commands) all open "
        "sessions may hold together (default 64 MiB)",
    )
    return p


def parse_options(env: str, pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as env options, plus TextCraft's default ``recipes_dir``."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"agentgym-envserver: --option expects KEY=VALUE, got {pair!r}")
        options[key] = value
    if env == "textcraft" and "recipes_dir" not in options:
        from agentgym.envs.textcraft import default_recipes_dir

        options["recipes_dir"] = default_recipes_dir()
    return options


def start(args: argparse.Namespace):
    """Starts the native server described by ``args`` (returns ``agentgym._envserver.Server``)."""
    from agentgym import _envserver

    return _envserver.Server(
        args.env,
        host=args.host,
        port=args.port,
        options=parse_options(args.env, args.option),
        max_sessions=args.max_sessions,
        max_body_bytes=args.max_body_bytes,
        max_action_bytes=args.max_action_bytes,
        idle_timeout=args.idle_timeout if args.idle_timeout > 0 else None,
        token=resolve_token(args, TOKEN_ENV),
        workers=args.workers,
        env_threads=args.env_threads,
        blocking_threads=args.blocking_threads,
        step_latency=args.step_latency_ms / 1000.0,
        header_read_timeout=args.header_read_timeout,
        body_read_timeout=args.body_read_timeout,
        keep_alive_timeout=args.keep_alive_timeout,
        max_connections=args.max_connections,
        allowed_hosts=args.allow_host,
        max_custom_bytes=args.max_custom_bytes,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the server until Ctrl-C or SIGTERM."""
    args = build_parser().parse_args(argv)
    try:
        server = start(args)
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as e:
        print(f"agentgym-envserver: {e}", file=sys.stderr)
        return 2
    if exposed_without_token(args.host, resolve_token(args, TOKEN_ENV)):
        print(
            f"warning: agentgym-envserver listens on {args.host} without a bearer token: "
            f"anyone who can reach this port can drive the envs (set ${TOKEN_ENV} or "
            "--token-file)",
            file=sys.stderr,
            flush=True,
        )
    if server.max_connections < args.max_connections:
        print(
            f"note: agentgym-envserver accepts at most {server.max_connections} connections "
            f"(not {args.max_connections}): ulimit -n leaves no more file descriptors",
            file=sys.stderr,
            flush=True,
        )
    # SIGTERM ends the process like Ctrl-C does: through KeyboardInterrupt and server.stop().
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        # Inside the try: whoever reads this line may interrupt at once (tests, supervisors).
        print(f"agentgym-envserver: {args.env} on http://{server.host}:{server.port}", flush=True)
        # Short waits with the GIL released, so Python sees Ctrl-C between them.
        while not server.wait(0.2):
            pass
    except KeyboardInterrupt:
        print("agentgym-envserver: stopping", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
