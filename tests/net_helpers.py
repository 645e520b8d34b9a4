"""Raw-socket helpers shared by the tests of the HTTP servers' connection guards."""

from __future__ import annotations

import socket
import time


def closed_after(
    port: int, pieces: list[bytes], pause: float, timeout_s: float = 10.0
) -> tuple[float, bytes]:
    """Send ``pieces`` to 127.0.0.1:``port`` ``pause`` seconds apart (stopping when the server
    has closed), read until it closes; the seconds that took and what the server sent."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(timeout_s)
        for piece in pieces:
            try:
                sock.sendall(piece)
            except OSError:
                break
            time.sleep(pause)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    return time.monotonic() - start, reply
