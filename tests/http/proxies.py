"""A TCP proxy that misbehaves on purpose: it answers one request twice, the way a broken server
or middlebox can, to test that a client never takes the surplus reply for the next one's."""

from __future__ import annotations

import socket
import threading


def _read_message(f) -> bytes | None:
    """One HTTP/1.1 message (head and a Content-Length body) from the buffered reader ``f``."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = f.readline()
        if not line:
            return None
        head += line
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + f.read(length)


class DuplicatingProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream`` and answers the first request for ``path``
    twice. ``at_once``: the copy follows the reply at once (surplus bytes on an idle
    connection); otherwise it is held until the client's next request on that connection and
    sent just before that request is forwarded (a reply one request late)."""

    def __init__(self, upstream: int, path: str, *, at_once: bool):
        self.upstream, self.path, self.at_once = upstream, path.encode(), at_once
        self.duplicated = 0
        # set once the request that followed a held (late) copy has been answered upstream: the
        # client refuses that copy and drops the connection, but the server still acts on the
        # request, so a test waits for it before it resets what that request stepped
        self.late_request_done = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        held = None
        with client, socket.create_connection(("127.0.0.1", self.upstream)) as up:
            from_client, from_up = client.makefile("rb"), up.makefile("rb")
            while (request := _read_message(from_client)) is not None:
                late = held is not None
                if late:
                    client.sendall(held)
                    held = None
                up.sendall(request)
                reply = _read_message(from_up)
                if late:
                    self.late_request_done.set()
                if reply is None:
                    return
                twice = not self.duplicated and request.split(b" ", 2)[1] == self.path
                self.duplicated += twice  # counted before the client can see the reply
                client.sendall(reply)
                if twice and self.at_once:
                    client.sendall(reply)
                elif twice:
                    held = reply

    def close(self) -> None:
        self._listener.close()
