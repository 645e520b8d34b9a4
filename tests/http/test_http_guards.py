"""agentgym-envserver against connections that hold it without using it (a silent flood four
times its connection cap, bodies that stop arriving), requests a browser sends for another
site's page, custom episodes past their memory budget; and EnvPool.remote against replies
past its cap."""

from __future__ import annotations

import socket
import time

import pytest
import requests
from httphelpers import envserver_process, native_server, url_of

from agentgym.envs import EnvPool, SessionError

TIMEOUT = 3.0  # --header-read-timeout of the flooded server


def _served_within(url: str, seconds: float) -> bool:
    start = time.monotonic()
    try:
        r = requests.get(url + "/health", timeout=seconds)
    except requests.RequestException:
        return False
    return r.status_code == 200 and time.monotonic() - start < seconds


def test_a_silent_flood_four_times_the_cap_keeps_no_client_waiting_a_timeout(procs):
    flags = ["--max-connections", "16", "--header-read-timeout", str(TIMEOUT)]
    server = envserver_process("babyai", *flags)
    procs.append(server)
    flood = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(64)]
    try:
        time.sleep(0.2)
        served = [_served_within(server.url, TIMEOUT) for _ in range(3)]
        assert served == [True, True, True]
    finally:
        for sock in flood:
            sock.close()


def test_a_body_that_stops_arriving_is_answered_408(procs):
    server = envserver_process("babyai", "--body-read-timeout", "0.5")
    procs.append(server)
    head = (
        b"POST /step HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"id": '
    )
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.settimeout(10)
        sock.sendall(head)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert time.monotonic() - start < 5


def test_cross_site_requests_change_nothing(babyai_url):
    ids = requests.post(babyai_url + "/batch/create", json={"n": 4}, timeout=10).json()["ids"]
    body = '{"ids": [0, 1, 2, 3, 4, 5, 6, 7]}'
    simple = {"Content-Type": "text/plain", "Origin": "https://evil.example"}
    r = requests.post(babyai_url + "/batch/close", data=body, headers=simple, timeout=10)
    assert r.status_code == 403
    r = requests.post(
        babyai_url + "/batch/close", data=body, headers={"Content-Type": "text/plain"}, timeout=10
    )
    assert r.status_code == 415
    r = requests.post(babyai_url + "/batch/create", data='{"n": 1000}', headers=simple, timeout=10)
    assert r.status_code == 403
    rebound = requests.get(
        babyai_url + "/health", headers={"Host": "rebind.evil.example"}, timeout=10
    )
    assert rebound.status_code == 403 and "--allow-host" in rebound.json()["error"]
    assert requests.get(babyai_url + "/health", timeout=10).json()["sessions"] == len(ids)


def test_allowed_hosts_are_served():
    server = native_server("babyai", allowed_hosts=["envs.internal"])
    try:
        url = url_of(server)
        host = {"Host": f"envs.internal:{server.port}"}
        assert requests.get(url + "/health", headers=host, timeout=10).status_code == 200
    finally:
        server.stop()


def test_custom_episodes_share_a_memory_budget():
    server = native_server("textcraft", max_custom_bytes=10_000)
    try:
        url = url_of(server)
        custom = {"goal": "torch", "commands": "craft 1 torch using 1 stick, 1 coal\n" * 200}
        first = requests.post(url + "/create", json=custom, timeout=10)
        assert first.status_code == 200
        refused = requests.post(url + "/create", json=custom, timeout=10)
        assert refused.status_code == 503 and "--max-custom-bytes" in refused.json()["error"]
        requests.post(url + "/close", json={"id": first.json()["id"]}, timeout=10)
        assert requests.post(url + "/create", json=custom, timeout=10).status_code == 200
    finally:
        server.stop()


def test_remote_replies_past_the_cap_fail_their_sessions(babyai_url):
    pool = EnvPool.remote(babyai_url, "babyai", max_reply_bytes=200)
    ids = pool.create(2)
    with pytest.raises(SessionError) as e:
        pool.reset(ids, [0, 1])
    assert "200-byte cap" in str(e.value)
    roomy = EnvPool.remote(babyai_url, "babyai")
    more = roomy.create(2)
    assert all(roomy.reset(more, [0, 1]))


def _status_within(port: int, request: bytes, seconds: float) -> tuple[int | None, float]:
    """Sends ``request`` (a head, maybe part of a body) and reads the status line; the status
    (None: none within ``seconds``) and how long it took."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(seconds)
        sock.sendall(request)
        reply = b""
        try:
            while b"\r\n" not in reply and (chunk := sock.recv(4096)):
                reply += chunk
        except TimeoutError:
            return None, time.monotonic() - start
    status = reply.split(b" ", 2)[1] if reply.startswith(b"HTTP/1.1 ") else b""
    return int(status) if status.isdigit() else None, time.monotonic() - start


UNAUTHENTICATED = {
    # a body declared 9 MiB (over the 8 MiB cap), no content type, none of it ever sent
    "9MiB-no-type": b"POST /batch/step HTTP/1.1\r\nHost: h\r\nContent-Length: 9437184\r\n\r\n",
    "form-post": b"POST /create HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-"
    b"urlencoded\r\nContent-Length: 3\r\n\r\na=b",
    "text-plain": b"POST /step HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 2\r\n\r\nhi",
    "chunked": b"POST /reset HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
    "foreign-origin": b"GET /health HTTP/1.1\r\nHost: h\r\nOrigin: https://evil.example\r\n\r\n",
    "origin-null": b"POST /batch/create HTTP/1.1\r\nHost: h\r\nOrigin: null\r\n"
    b'Content-Type: application/json\r\nContent-Length: 8\r\n\r\n{"n": 1}',
    "unknown-route": b"GET /nowhere HTTP/1.1\r\nHost: h\r\n\r\n",
    "wrong-method": b"DELETE /create HTTP/1.1\r\nHost: h\r\n\r\n",
    "metrics": b"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n",
    "other-instance": b"GET /health HTTP/1.1\r\nHost: h\r\nX-Agentgym-Instance: 0\r\n\r\n",
    "wrong-token": b"GET /health HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer nope\r\n\r\n",
    "basic-scheme": b"GET /health HTTP/1.1\r\nHost: h\r\nAuthorization: Basic s3cret\r\n\r\n",
}


@pytest.mark.parametrize("name", list(UNAUTHENTICATED))
def test_without_the_token_every_request_is_401_before_its_body_is_read(name):
    # with a 3 s body timeout, a server that read the body first would answer 408 after 3 s
    server = native_server("babyai", token="s3cret", body_read_timeout=3.0)
    try:
        status, took = _status_within(server.port, UNAUTHENTICATED[name], 10.0)
        assert status == 401, status
        assert took < 2.0, f"answered after {took:.1f} s"
        r = requests.get(url_of(server) + "/health", headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200
    finally:
        server.stop()
