"""Connections that hold the server without using it (silent sockets, a slow-loris client,
idle keep-alive connections) are closed on time and capped, so a normal client is served within
the header-read timeout even when they outnumber the descriptors the server has."""

from __future__ import annotations

import shlex
import socket
import sys
import threading
import time

import requests
from httphelpers import Proc, envserver_process

TIMEOUT = 1.0  # --header-read-timeout and --keep-alive-timeout of the server under attack
MARGIN = 2.0  # scheduling noise on a loaded 2-core machine


def _server_with_fds(nofile: int, *flags: str) -> Proc:
    """``agentgym-envserver`` for babyai under ``ulimit -n nofile``."""
    command = [sys.executable, "-m", "agentgym.cli.envserver", "--env", "babyai", "--port", "0"]
    script = f"ulimit -n {nofile} && exec {shlex.join([*command, *flags])}"
    return Proc(["sh", "-c", script], "agentgym-envserver:")


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (reading what it sends)."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:  # reset
            return True
    return False


def _slow_loris(sock: socket.socket, stop: threading.Event) -> None:
    """Sends a request head one header line at a time, never finishing it."""
    try:
        sock.sendall(b"POST /step HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for i in range(1000):
            if stop.wait(0.2):
                return
            sock.sendall(f"X-Slow-{i}: y\r\n".encode())
    except OSError:  # closed by the server: what we want
        return


def test_idle_and_slow_clients_do_not_starve_a_normal_client(procs):
    # 256 descriptors and 261 attacking sockets: without a cap and timeouts the server ran out
    # of descriptors and /health timed out.
    timeouts = ["--header-read-timeout", str(TIMEOUT), "--keep-alive-timeout", str(TIMEOUT)]
    server = _server_with_fds(256, *timeouts)
    procs.append(server)
    assert any("accepts at most 192 connections" in line for line in server.output)
    kept_alive = []
    for _ in range(10):  # one request each, then idle with keep-alive
        sock = _connect(server.port)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        kept_alive.append(sock)
    loris = _connect(server.port)
    stop = threading.Event()
    threading.Thread(target=_slow_loris, args=(loris, stop), daemon=True).start()
    silent = [_connect(server.port) for _ in range(250)]  # connect, send nothing
    try:
        t0 = time.monotonic()
        r = requests.get(server.url + "/health", timeout=30)
        assert r.status_code == 200
        assert time.monotonic() - t0 < TIMEOUT + MARGIN
        for sock in [*kept_alive, loris, *silent]:
            assert _closed_by_server(sock, within=TIMEOUT + MARGIN)
    finally:
        stop.set()
        for sock in [*kept_alive, loris, *silent]:
            sock.close()


def test_connection_flags_in_help_and_a_busy_server_keeps_its_connection(procs):
    p = envserver_process("babyai", "--keep-alive-timeout", "0.5", "--step-latency-ms", "1500")
    procs.append(p)
    # A request in progress longer than the keep-alive timeout is answered, not cut.
    session = requests.Session()
    sid = session.post(p.url + "/create", json={}, timeout=10).json()["id"]
    session.post(p.url + "/reset", json={"id": sid, "data_idx": 0}, timeout=10)
    reply = session.post(p.url + "/step", json={"id": sid, "action": "turn left"}, timeout=10)
    assert reply.status_code == 200 and "observation" in reply.json()
    from agentgym.cli.envserver import build_parser

    text = build_parser().format_help()
    for flag in ("--header-read-timeout", "--keep-alive-timeout", "--max-connections"):
        assert flag in text
