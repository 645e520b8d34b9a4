"""Refusing requests a web browser makes for a page of another site, in agentgym's Python HTTP
servers (the hub, ``agentgym-sciworld-server``); the Rust env server applies the same rules
(``rust/envserver/src/server/cross_site.rs``).

A page on any site can make the browser of someone running a server on loopback send it
requests: a "simple" cross-site POST (a ``text/plain`` body, no preflight) acts on the server
although the page cannot read the answer, and DNS rebinding (a name of the attacker's that
resolves to 127.0.0.1) lets the page read answers too. The rules:

- a POST body must be JSON (``Content-Type: application/json`` or ``application/*+json``); a
  POST without a body may leave the type out;
- an ``Origin`` header (browsers add it to cross-site requests, programs do not) must name this
  server by the host rule below; ``Origin: null`` is refused;
- on a server without a token, the ``Host`` header must name this server: ``localhost``, a
  loopback address, the bound address (any IP address when bound to all of them: a rebinding
  page cannot make the browser send an address), or a name allowed by ``--allow-host``
  (``*``: any).

The bearer token of those servers and of ``agentgym-envserver`` comes from their common flags
(``resolve_token``); one bound beyond loopback without a token is warned about
(``exposed_without_token``).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CrossSite:
    """The rules of the module doc for one server."""

    bound: str
    """The address the server is bound to."""
    allowed_hosts: frozenset[str] = frozenset()
    """Host names served besides the server's addresses (lowercase; ``*``: any)."""
    has_token: bool = False
    """Whether every request needs a token (the Host rule is then not needed)."""

    @classmethod
    def of(cls, bound: str, allowed: Iterable[str] = (), has_token: bool = False) -> CrossSite:
        """The rules for a server bound to ``bound`` (names are compared in lowercase)."""
        return cls(bound, frozenset(h.lower() for h in allowed), has_token)

    def refusal(self, method: str, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """``(status, message)`` when the request must be refused, else None. ``headers`` is
        looked up case-insensitively by the caller's mapping (``http.server``'s and
        Starlette's are)."""
        host = headers.get("Host")
        if not self.has_token and host is not None and not self.host_allowed(host_part(host)):
            return 403, (
                f"Host {host!r} is not this server's address; start it with --allow-host "
                f"{host_part(host)} (or with a token) to serve that name"
            )
        origin = headers.get("Origin")
        if origin is not None:
            _, sep, rest = origin.partition("://")
            if not sep or not self.host_allowed(host_part(rest)):
                return 403, (
                    f"requests from web pages of other sites are refused (Origin {origin!r}); "
                    "--allow-host NAME allows a page served under NAME"
                )
        if method == "POST":
            return json_body_refusal(headers)
        return None

    def host_allowed(self, host: str) -> bool:
        """Whether ``host`` (no port) names this server."""
        host = host.lower()
        if host == "localhost" or "*" in self.allowed_hosts or host in self.allowed_hosts:
            return True
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return False
        bound = _ip(self.bound)
        return ip.is_loopback or ip == bound or (bound is not None and bound.is_unspecified)


def host_part(authority: str) -> str:
    """``host`` of ``host:port``, ``[v6]:port``, ``host`` or ``host/path``."""
    authority = authority.split("/", 1)[0]
    if authority.startswith("["):
        return authority[1:].split("]", 1)[0]
    return authority.rsplit(":", 1)[0] if ":" in authority else authority


def json_body_refusal(headers: Mapping[str, str]) -> tuple[int, str] | None:
    """415 for a POST body that does not say it is JSON (an empty body may say nothing)."""
    kind = headers.get("Content-Type")
    if kind is None:
        empty = headers.get("Content-Length", "0").strip() == "0"
        if empty and headers.get("Transfer-Encoding") is None:
            return None
        return 415, "a request body needs `Content-Type: application/json`"
    media = kind.split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return None
    return 415, f"the body must be JSON (`Content-Type: application/json`), not {media!r}"


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine (a name counts as not)."""
    if host == "localhost":
        return True
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def resolve_token(args: argparse.Namespace, variable: str) -> str | None:
    """The bearer token: ``--token``, else ``--token-file``'s first line, else $``variable``."""
    if args.token and args.token_file:
        raise ValueError("give --token or --token-file, not both")
    if args.token_file:
        try:
            lines = Path(args.token_file).read_text().splitlines()
        except OSError as e:
            raise ValueError(f"--token-file: cannot read {args.token_file}: {e.strerror}") from e
        token = lines[0].strip() if lines else ""
        if not token:
            raise ValueError(f"--token-file: {args.token_file} holds no token on its first line")
        return token
    return args.token or os.environ.get(variable) or None


def exposed_without_token(host: str, token: str | None) -> bool:
    """Whether the server listens beyond loopback with no token (anyone can drive it); a
    host name counts as beyond loopback."""
    return not token and not is_loopback(host)
