"""The guards of ``agentgym-envserver``, for a Python ASGI server run by uvicorn
(``agentgym-sciworld-server``).

- ``Guard`` (ASGI middleware): the cross-site rules (``agentgym.httpguard``), an optional bearer
  token (``Authorization: Bearer TOKEN``, the scheme in any case), and the request body read
  whole before the app sees it: at most ``max_body_bytes`` (413 past it, declared or sent)
  and within ``body_read_timeout`` of the request's head (408). A refused request's
  connection is closed (the rest of its body may still come).
- ``head_timeout_protocol``: uvicorn's HTTP/1 protocol with a header-read timeout (uvicorn has
  none): a connection is closed when a request head has not arrived ``seconds`` after it
  opened or after its previous response, so silent and slow-loris clients do not hold it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from dataclasses import dataclass
from typing import Any

from agentgym.httpguard import CrossSite


@dataclass(frozen=True)
class GuardSettings:
    """What ``Guard`` enforces."""

    cross_site: CrossSite
    token: str | None = None
    max_body_bytes: int = 1 << 20
    body_read_timeout: float = 30.0


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Guard:
    """ASGI middleware applying ``GuardSettings`` to every HTTP request (module doc)."""

    def __init__(self, app: Any, settings: GuardSettings):
        self.app, self.settings = app, settings

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = _Headers(scope["headers"])
        try:
            self._check_head(scope["method"], headers)
            body = await self._read_body(headers, receive)
        except _Refused as e:
            return await _reply(send, e.status, e.message)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _check_head(self, method: str, headers: _Headers) -> None:
        # the token first: a request without it learns nothing else of the API (its input
        # rules, the cross-site ones), as agentgym-envserver answers it
        token = self.settings.token
        if token is not None:
            scheme, _, given = headers.get("Authorization", "").partition(" ")
            sent = given.strip().encode("latin-1", errors="replace")
            if scheme.lower() != "bearer" or not hmac.compare_digest(sent, token.encode()):
                raise _Refused(401, "missing or wrong bearer token")
        refusal = self.settings.cross_site.refusal(method, headers)
        if refusal is not None:
            raise _Refused(*refusal)
        declared, limit = headers.get("Content-Length", ""), self.settings.max_body_bytes
        if declared.isdigit() and int(declared) > limit:
            raise _Refused(413, f"request body is over the {limit}-byte limit")

    async def _read_body(self, headers: _Headers, receive: Any) -> bytes:
        limit = self.settings.max_body_bytes
        deadline = asyncio.get_running_loop().time() + self.settings.body_read_timeout
        parts, size, more = [], 0, True
        while more:
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(left, 0.0))
            except TimeoutError:
                raise _Refused(408, "the request body did not arrive in time") from None
            if message["type"] == "http.disconnect":
                raise _Refused(400, "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _Refused(413, f"request body is over the {limit}-byte limit")
            parts.append(chunk)
            more = message.get("more_body", False)
        return b"".join(parts)


class _Headers:
    """An ASGI scope's headers as a case-insensitive mapping of latin-1 text (last one wins)."""

    def __init__(self, raw: list[tuple[bytes, bytes]]):
        self._h = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._h.get(name.lower(), default)


async def _reply(send: Any, status: int, message: str) -> None:
    """A refusal; the connection closes after it (a body may still be on its way)."""
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def head_timeout_protocol(seconds: float) -> type:
    """uvicorn's h11 protocol class closing connections whose request head does not arrive
    within ``seconds`` (see the module doc)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:  # a request head arrived
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            busy = self.cycle is not None and not self.cycle.response_complete
            if not busy and not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutProtocol
