"""Who may talk to a learner over TCP: per-run keys, checked by ZeroMQ when a peer connects.

A run's keys live in one file in its run dir (``KEYS_FILE``, readable by its owner only),
written by the learner the first time it binds TCP sockets and reused when the run resumes.
Every actor reads the same file (a shared run dir, or a copy next to it: ``agentgym-actor
--keys PATH``). Two mechanisms, the same rules:

- ``curve`` (when this libzmq has CurveZMQ, i.e. was built with libsodium; pyzmq's wheels are):
  the learner's sockets are CURVE servers with the run's server key pair, actors CURVE clients
  with the run's client key pair. Traffic is encrypted, and the learner admits a connection
  only when the client proves it holds the run's client secret key.
- ``plain`` (libzmq without CURVE): ZeroMQ's PLAIN mechanism with a random per-run token as
  the password. The token travels in clear text once per connection; nothing is encrypted.

The check runs in the learner's ZAP handler (``ZapHandler``), which libzmq consults on every
connection to a socket with a ZAP domain, before a single message is delivered: a peer
without the keys can neither push trajectories, say hello, fetch weights nor read control.

The keys file is created with ``O_EXCL | O_NOFOLLOW`` (a planted symlink is never written
through) and mode 0600; a keys file others may read is tightened when it is this user's and
refused when it is not. Unix sockets (``transport.kind: ipc``) take no keys: they live in a
directory only this user can enter (``private_directory``).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import zmq
from zmq.utils import z85

log = logging.getLogger(__name__)

KEYS_FILE = "transport_keys.json"
"""The keys of a run, in its run dir."""
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
"""Where libzmq looks for the ZAP handler of a context (RFC 27)."""
ZAP_DOMAIN = b"agentgym"
PLAIN_USER = b"agentgym"

Mechanism = Literal["curve", "plain"]


class KeysError(RuntimeError):
    """A keys file that is missing, unreadable, or unusable with this libzmq."""


class UnsafeDirectory(PermissionError):
    """A socket directory another user could replace sockets in; the message says whose."""


def curve_available() -> bool:
    """Whether this libzmq has CurveZMQ."""
    return bool(zmq.has("curve"))


@dataclass(frozen=True)
class TransportKeys:
    """The secrets of one run (Z85 text for CURVE keys). ``plain`` uses ``token`` only."""

    mechanism: Mechanism
    server_public: str = ""
    server_secret: str = ""
    client_public: str = ""
    client_secret: str = ""
    token: str = ""

    @classmethod
    def generate(cls, mechanism: Mechanism | None = None) -> TransportKeys:
        """New keys: CURVE when available (or asked for), else a PLAIN token."""
        mechanism = mechanism or ("curve" if curve_available() else "plain")
        if mechanism == "plain":
            return cls("plain", token=secrets.token_urlsafe(32))
        if not curve_available():
            raise KeysError("this libzmq has no CURVE support (built without libsodium)")
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls("curve", server_public.decode(), server_secret.decode(),
                   client_public.decode(), client_secret.decode())  # fmt: skip

    @classmethod
    def load(cls, path: str | Path) -> TransportKeys:
        """Keys written by ``save``; ``KeysError`` naming the file when they are unusable. A
        file that others may read or write is made private (0600, with a warning) when it is
        this user's, and refused when it is not."""
        try:
            with open(path, "rb") as f:
                _keep_private(f.fileno(), path)
                keys = cls(**json.loads(f.read()))
        except (OSError, ValueError, TypeError) as e:
            raise KeysError(f"cannot read the transport keys in {path}: {e}") from None
        if keys.mechanism not in ("curve", "plain"):
            raise KeysError(f"{path}: unknown mechanism {keys.mechanism!r}")
        if keys.mechanism == "curve" and not curve_available():
            raise KeysError(f"{path} holds CURVE keys but this libzmq has no CURVE support")
        if keys.mechanism == "plain" and not keys.token:
            raise KeysError(f"{path}: plain keys without a token")
        return keys

    def save(self, path: str | Path) -> None:
        """Write the keys, readable and writable by the owner only (atomically). The temporary
        file is created anew (``O_EXCL | O_NOFOLLOW``): one left there, or a symlink planted
        under its name, is removed (never followed) and the file created again."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileExistsError:
            tmp.unlink()  # removes a symlink itself, not what it points to
            fd = os.open(tmp, flags, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)

    def serve(self, sock: zmq.Socket) -> None:
        """Make ``sock`` (before it binds) admit only peers holding these keys."""
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        if self.mechanism == "curve":
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.server_secret.encode())
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self.server_public.encode())
        else:
            sock.setsockopt(zmq.PLAIN_SERVER, 1)

    def join(self, sock: zmq.Socket) -> None:
        """Give ``sock`` (before it connects) the credentials a learner with these keys asks."""
        if self.mechanism == "curve":
            sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public.encode())
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self.client_public.encode())
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.client_secret.encode())
        else:
            sock.setsockopt(zmq.PLAIN_USERNAME, PLAIN_USER)
            sock.setsockopt(zmq.PLAIN_PASSWORD, self.token.encode())

    def admits(self, mechanism: bytes, credentials: list[bytes]) -> bool:
        """Whether a ZAP request's credentials are this run's."""
        if self.mechanism == "curve":
            want = z85.decode(self.client_public)
            return (
                mechanism == b"CURVE"
                and len(credentials) == 1
                and hmac.compare_digest(credentials[0], want)
            )
        return (
            mechanism == b"PLAIN"
            and len(credentials) == 2
            and hmac.compare_digest(credentials[1], self.token.encode())
        )


def _keep_private(fd: int, path: str | Path) -> None:
    """Refuse, or tighten to 0600, an open keys file others may read or write."""
    st = os.fstat(fd)
    if not st.st_mode & 0o077:
        return
    if st.st_uid != os.geteuid():
        raise KeysError(
            f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}) and belongs to "
            f"uid {st.st_uid}, not this user: make it private (chmod 600) or copy it"
        )
    os.fchmod(fd, 0o600)
    log.warning("%s was readable by others (mode %o): made it private (0600)",
                path, stat.S_IMODE(st.st_mode))  # fmt: skip


def private_directory(path: str | Path) -> Path:
    """``path`` as a directory only this user can enter: created with mode 0700, or an
    existing one checked (a directory, not a symlink, owned by this user) and tightened to
    0700. ``UnsafeDirectory`` when another user owns it or it is not a real directory: a
    directory another user can write is one where they can replace the learner's sockets."""
    path = Path(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory (a symlink or a file): remove it")
    if st.st_uid != os.geteuid():
        raise UnsafeDirectory(
            f"{path} belongs to uid {st.st_uid}, not this user ({os.geteuid()}): another user "
            "could replace the learner's sockets there; remove it, or set TMPDIR elsewhere"
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def run_keys(run_dir: str | Path, mechanism: Mechanism | None = None) -> TransportKeys:
    """The run's keys: those in ``run_dir`` (a resumed run) when they are of ``mechanism``
    (any when None), else new ones, saved there."""
    path = Path(run_dir) / KEYS_FILE
    if path.exists():
        keys = TransportKeys.load(path)
        if mechanism is None or keys.mechanism == mechanism:
            return keys
    keys = TransportKeys.generate(mechanism)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    keys.save(path)
    return keys


def wait_for_keys(path: str | Path, timeout_s: float, poll_s: float = 0.1) -> TransportKeys:
    """The keys at ``path`` once the learner has written them; ``KeysError`` after
    ``timeout_s`` (an actor may start before its learner)."""
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise KeysError(
                f"no transport keys at {path} after {timeout_s:.0f} s: the learner writes "
                f"them to RUN_DIR/{KEYS_FILE} when it starts; copy that file to this machine "
                "and pass --keys PATH when the run dir is not shared"
            )
        time.sleep(poll_s)
    return TransportKeys.load(path)


def uses_tcp(*addresses: str) -> bool:
    """Whether any of the zmq endpoint strings is a TCP one (reachable from other hosts)."""
    return any(a.startswith("tcp://") for a in addresses)


class ZapHandler:
    """The learner's ZAP handler: answers libzmq's authentication requests for one context.

    Bound before any socket of the context binds (without a handler libzmq would admit
    everyone); ``handle`` answers the requests waiting, from the thread that owns the socket.
    Refusals are counted and logged (at most one line a second, with the count).
    """

    def __init__(self, ctx: zmq.Context, keys: TransportKeys):
        self.keys = keys
        self.socket = ctx.socket(zmq.REP)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(ZAP_ENDPOINT)
        self.admitted = 0
        self.refused = 0
        self._logged_at = 0.0

    def handle(self) -> None:
        """Answer every request waiting (never blocks)."""
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.socket.send_multipart(self._answer(frames))

    def _answer(self, frames: list[bytes]) -> list[bytes]:
        # version, request id, domain, address, identity, mechanism, credentials...
        if len(frames) < 6:
            return [b"1.0", b"", b"500", b"malformed ZAP request", b"", b""]
        version, request_id, domain, address, _, mechanism, *credentials = frames
        ok = version == b"1.0" and domain == ZAP_DOMAIN and self.keys.admits(mechanism, credentials)
        if ok:
            self.admitted += 1
            return [b"1.0", request_id, b"200", b"OK", b"actor", b""]
        self.refused += 1
        now = time.monotonic()
        if now - self._logged_at >= 1.0:
            self._logged_at = now
            log.warning(
                "refused a %s connection from %s without this run's transport keys "
                "(%d refused so far)",
                mechanism.decode(errors="replace"),
                address.decode(errors="replace"),
                self.refused,
            )
        return [b"1.0", request_id, b"400", b"not this run's keys", b"", b""]

    def close(self) -> None:
        self.socket.close()
