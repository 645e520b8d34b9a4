"""agentgym-sciworld-server has agentgym-envserver's guards: a body cap, a body deadline, a
header-read timeout, an optional bearer token, the cross-site rules and a warning when it
listens beyond loopback without a token (over fake simulators, no Java)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from fake_sciworld import ServerThread  # noqa: E402

from agentgym.asgiguard import GuardSettings  # noqa: E402
from agentgym.httpguard import CrossSite  # noqa: E402
from net_helpers import closed_after  # noqa: E402

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def guarded():
    servers = []

    def start(**settings):
        header = settings.pop("header_read_timeout", 10.0)
        guards = GuardSettings(CrossSite.of("127.0.0.1", has_token="token" in settings), **settings)
        server = ServerThread(guards=guards, header_read_timeout=header, max_sessions=4)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_bodies_over_the_cap_are_refused(guarded):
    s = guarded(max_body_bytes=1000)
    big = b'{"id": 0, "action": "' + b"x" * 5000 + b'"}'
    assert requests.post(s.url + "/step", data=big, headers=JSON, timeout=10).status_code == 413
    chunked = requests.post(s.url + "/step", data=iter([big]), headers=JSON, timeout=10)
    assert chunked.status_code == 413  # no Content-Length: counted as it arrives
    assert requests.post(s.url + "/create", json={}, timeout=10).status_code == 200


def test_silent_slow_and_half_sent_requests_are_cut(guarded):
    s = guarded(header_read_timeout=0.5, body_read_timeout=0.5)
    waited, reply = closed_after(s.port, [b""], 0)
    assert waited < 2 and reply == b""
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n"
    waited, _ = closed_after(s.port, [bytes([c]) for c in head], 0.05)
    assert waited < 2.5  # the head's deadline does not restart with each byte
    half = b"POST /step HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    waited, reply = closed_after(s.port, [half + b"Content-Length: 40\r\n\r\n{"], 0)
    assert waited < 2 and reply.startswith(b"HTTP/1.1 408")
    assert requests.get(s.url + "/health", timeout=10).status_code == 200


def test_the_token_is_required_when_set(guarded):
    s = guarded(token="s3cret")
    assert requests.post(s.url + "/create", json={}, timeout=10).status_code == 401
    for value in ("Bearer nope", "Bearer s3cr\xe9t", "Basic s3cret"):
        r = requests.post(s.url + "/create", json={}, headers={"Authorization": value}, timeout=10)
        assert r.status_code == 401, value
    ok = requests.post(
        s.url + "/create", json={}, headers={"Authorization": "bearer s3cret"}, timeout=10
    )
    assert ok.status_code == 200 and ok.json() == {"id": 0}


def test_without_the_token_every_request_is_401_first(guarded):
    s = guarded(token="s3cret")
    refused_otherwise = [  # a form post, a foreign page, a body over the cap, no type at all
        {"data": b"a=b", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
        {"json": {}, "headers": {"Origin": "https://evil.example"}},
        {"data": b"x" * (2 << 20), "headers": {"Content-Type": "text/plain"}},
        {"data": b"x" * 100},
    ]
    for request in refused_otherwise:
        r = requests.post(s.url + "/create", timeout=10, **request)
        assert r.status_code == 401, (request.get("headers"), r.status_code)


def test_cross_site_requests_are_refused(guarded):
    s = guarded()
    text = {"Content-Type": "text/plain"}
    assert requests.post(s.url + "/create", data="{}", headers=text, timeout=10).status_code == 415
    foreign = {**JSON, "Origin": "https://evil.example"}
    assert requests.post(s.url + "/create", json={}, headers=foreign, timeout=10).status_code == 403
    rebound = {"Host": "rebind.evil.example"}
    assert requests.get(s.url + "/health", headers=rebound, timeout=10).status_code == 403
    assert len(s.sessions) == 0, "no refused request opened a session"
    assert requests.post(s.url + "/create", timeout=10).status_code == 200  # AgentGym's form


def test_a_server_beyond_loopback_without_a_token_warns():
    cmd = [sys.executable, "-m", "agentgym.envs.sciworld_server", "--host", "0.0.0.0",
           "--port", "0", "--max-sessions", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=30)  # exits without scienceworld installed
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    assert "listens on 0.0.0.0 without a bearer token" in err
