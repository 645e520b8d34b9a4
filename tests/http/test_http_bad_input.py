"""Bad input: each gets the right status and a JSON error; the server stays up and the other
sessions are untouched."""

from __future__ import annotations

import http.client

import pytest
import requests
from httphelpers import native_server, raw_post, url_of

from agentgym.envs import EnvPool


@pytest.fixture
def server():

    s = native_server("textcraft", max_sessions=4, max_body_bytes=4096, max_action_bytes=64)
    yield s, url_of(s)
    s.stop()


def _witness(url: str) -> tuple[int, str]:
    """A session mid-episode whose state must survive every bad request."""
    created = requests.post(url + "/create", json={}).json()
    sid = created["id"]
    obs = requests.post(url + "/step", json={"id": sid, "action": "get 1 oak log"}).json()[
        "observation"
    ]
    return sid, obs


def _check_witness(url: str, sid: int, obs: str) -> None:
    assert requests.get(url + "/observation", params={"id": sid}).json() == obs


BAD_REQUESTS = [
    # (name, method, path, body bytes or JSON, headers, status)
    ("malformed json", "POST", "/step", b'{"id": 1, "action": ', {}, 400),
    ("not an object", "POST", "/step", b"[1, 2]", {}, 422),
    ("invalid utf-8", "POST", "/step", b'{"id": 1, "action": "\xff\xfe"}', {}, 400),
    ("id of wrong type", "POST", "/step", {"id": "one", "action": "x"}, {}, 422),
    ("action of wrong type", "POST", "/step", {"id": 1, "action": 5}, {}, 422),
    ("negative id", "POST", "/step", {"id": -1, "action": "x"}, {}, 422),
    ("missing action", "POST", "/step", {"id": 1}, {}, 422),
    ("missing id", "POST", "/reset", {"data_idx": 0}, {}, 422),
    ("unknown id step", "POST", "/step", {"id": 999999, "action": "x"}, {}, 404),
    ("unknown id reset", "POST", "/reset", {"id": 999999, "data_idx": 0}, {}, 404),
    ("unknown id observation", "GET", "/observation?id=999999", None, {}, 404),
    ("observation without id", "GET", "/observation", None, {}, 422),
    ("observation bad id", "GET", "/observation?id=abc", None, {}, 422),
    ("negative task", "POST", "/reset", {"id": 1, "data_idx": -3}, {}, 422),
    ("huge body", "POST", "/step", b'{"id": 1, "action": "' + b"a" * 10000 + b'"}', {}, 413),
    ("over-long action", "POST", "/step", {"id": 1, "action": "get " + "a" * 100}, {}, 422),
    ("custom goal no recipe makes", "POST", "/create", {"goal": "unobtainium"}, {}, 422),
    ("custom commands without goal", "POST", "/create", {"commands": "craft 1 x"}, {}, 422),
    ("custom goal of wrong type", "POST", "/create", {"goal": 7}, {}, 422),
    ("batch length mismatch", "POST", "/batch/step", {"ids": [1], "actions": []}, {}, 422),
    ("batch n wrong type", "POST", "/batch/create", {"n": "3"}, {}, 422),
    ("batch n negative", "POST", "/batch/create", {"n": -3}, {}, 422),
    ("unknown route", "POST", "/nope", {}, {}, 404),
    ("wrong method", "GET", "/step", None, {}, 405),
]


@pytest.mark.parametrize(
    "name,method,path,body,headers,status", BAD_REQUESTS, ids=[r[0] for r in BAD_REQUESTS]
)
def test_bad_request(server, name, method, path, body, headers, status):
    _, url = server
    sid, obs = _witness(url)
    path = path.replace('"id": 1', f'"id": {sid}')
    if isinstance(body, dict) and body.get("id") == 1:
        body = {**body, "id": sid}
    if isinstance(body, bytes):
        body = body.replace(b'"id": 1,', f'"id": {sid},'.encode())
    code, reply = raw_post(url, method, path, body, headers)
    assert code == status, reply
    assert isinstance(reply, dict) and isinstance(reply.get("error"), str) and reply["error"], reply
    _check_witness(url, sid, obs)
    assert requests.get(url + "/health").status_code == 200


def test_step_after_close_and_after_done(server):
    _, url = server
    sid, _ = _witness(url)
    assert requests.post(url + "/close", json={"id": sid}).json() is True
    r = requests.post(url + "/step", json={"id": sid, "action": "inventory"})
    assert r.status_code == 404 and "unknown session id" in r.json()["error"]
    fresh = requests.post(url + "/batch/create", json={"n": 1}).json()["ids"][0]
    r = requests.post(url + "/step", json={"id": fresh, "action": "inventory"})
    assert r.status_code == 409 and "reset" in r.json()["error"]


def test_batch_items_fail_alone(server):
    _, url = server
    sid, obs = _witness(url)
    reply = requests.post(
        url + "/batch/step", json={"ids": [sid, 424242, sid], "actions": ["inventory"] * 3}
    ).json()
    assert reply["errors"][0] is None and reply["observations"][0].startswith("Inventory")
    assert "unknown session id 424242" in reply["errors"][1]
    assert "more than once" in reply["errors"][2]
    reply = requests.post(
        url + "/batch/reset", json={"ids": [sid, 424242], "data_idxs": [-1, 0]}
    ).json()
    assert "out of range" in reply["errors"][0] and "unknown" in reply["errors"][1]


def test_more_sessions_than_allowed(server):
    _, url = server
    ids = [requests.post(url + "/create", json={}).json()["id"] for _ in range(4)]
    r = requests.post(url + "/create", json={})
    assert r.status_code == 503 and "max_sessions" in r.json()["error"]
    r = requests.post(url + "/batch/create", json={"n": 10**12})
    assert r.status_code == 503
    requests.post(url + "/close", json={"id": ids[0]})
    assert requests.post(url + "/create", json={}).status_code == 200


def test_token_required():

    s = native_server("babyai", token="s3cret")
    url = url_of(s)
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = requests.post(url + "/create", headers=headers)
            assert r.status_code == 401 and r.json()["error"], headers
            assert r.headers["WWW-Authenticate"] == "Bearer"
        assert requests.get(url + "/health").status_code == 401
        ok = requests.post(url + "/create", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "id" in ok.json()
    finally:
        s.stop()


def test_remote_pools_carry_the_token():
    """EnvPool.remote sends its token on every route (probe, batch and per-session); without
    it the server's 401 reaches the caller as an error naming the status."""
    s = native_server("babyai", token="s3cret")
    url = url_of(s)
    try:
        for batch in (True, False):
            pool = EnvPool.remote(url, "babyai", token="s3cret", batch=batch)
            ids = pool.create(2)
            assert all(pool.reset(ids, [0, 1]))
            assert pool.step(ids, ["turn left"] * 2).ok
            pool.close(ids)
        assert s.sessions() == 0
        with pytest.raises(ConnectionError, match="HTTP 401"):
            EnvPool.remote(url, "babyai").create(1)
    finally:
        s.stop()


def test_idle_sessions_are_reclaimed():
    import time

    s = native_server("babyai", idle_timeout=0.3)
    url = url_of(s)
    try:
        ids = requests.post(url + "/batch/create", json={"n": 3}).json()["ids"]
        deadline = time.monotonic() + 10
        while s.sessions() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.sessions() == 0
        r = requests.post(url + "/reset", json={"id": ids[0], "data_idx": 0})
        assert r.status_code == 404
        assert (
            'agentgym_sessions_reclaimed_total{env="babyai"} 3'
            in requests.get(url + "/metrics").text
        )
    finally:
        s.stop()


def test_connection_survives_garbage(server):
    _, url = server
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(
        "POST", "/step", body=b"\x00\x01garbage", headers={"Content-Type": "application/json"}
    )
    r = conn.getresponse()
    assert r.status == 400
    r.read()
    conn.request("GET", "/health")
    r = conn.getresponse()
    assert r.status == 200
    r.read()
    conn.close()


def test_refused_custom_goal_leaves_no_session(server):
    _, url = server
    before = requests.get(url + "/health").json()["sessions"]
    r = requests.post(url + "/create", json={"goal": "unobtainium"})
    assert r.status_code == 422 and "not an item any recipe makes" in r.json()["error"]
    assert requests.get(url + "/health").json()["sessions"] == before


def test_custom_episode_size_is_bounded():
    """A custom TextCraft episode's commands are kept per session: their size is limited, so
    creates cannot hold body size x max sessions of memory; a refused create leaves nothing."""
    s = native_server("textcraft")
    try:
        _check_custom_limits(url_of(s))
    finally:
        s.stop()


def _check_custom_limits(url: str) -> None:
    before = requests.get(url + "/health").json()["sessions"]
    line = "craft 1 torch using 1 stick, 1 coal"
    refused = {
        "lines": {"goal": "torch", "commands": "\n".join([line] * 257)},
        "line length": {"goal": "torch", "commands": "craft 1 torch using " + "a" * 600},
        "goal": {"goal": "t" * 300},
    }
    messages = {
        "lines": "`commands` has 257 lines, over the limit of 256",
        "line length": "`commands` line 1 is 620 bytes, over the limit of 512 per line",
        "goal": "`goal` is 300 bytes, over the limit of 256",
    }
    for name, body in refused.items():
        r = requests.post(url + "/create", json=body)
        assert r.status_code == 422 and r.json()["error"] == messages[name], name
    ok = requests.post(url + "/create", json={"goal": "torch", "commands": "\n".join([line] * 256)})
    assert ok.status_code == 200
    requests.post(url + "/close", json={"id": ok.json()["id"]})
    assert requests.get(url + "/health").json()["sessions"] == before
