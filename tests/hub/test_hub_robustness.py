"""agentgym hub against damaged run files, oversized queries, slow or silent connections and
requests a browser makes for another site's page: a bad file costs only its own run (with the
reason shown), every request is answered, and no connection holds a thread for long."""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc

import pytest
import requests

pytest.importorskip("plotly")

from hub_helpers import make_run  # noqa: E402

import agentgym.hub.runs as hub_runs  # noqa: E402
import agentgym.hub.server as hub_server  # noqa: E402
import net_helpers  # noqa: E402
from agentgym.hub.server import Hub, make_server  # noqa: E402

ROUTES = [
    ("run", {}),
    ("metrics", {}),
    ("metrics", {"keys": "step,reward/all"}),
    ("trajectories", {}),
    ("trajectory", {"index": 0}),
    ("evals", {}),
    ("eval_episodes", {"name": "step_1"}),
    ("eval_episodes", {"name": "step_1", "task": 0}),
]

DEEP = b"[" * 100_000 + b"]" * 100_000
TRAJECTORY = {"episode_id": 1, "env": "babyai", "task_id": 0, "versions": [1],
              "tokens": [1, 2], "loss_mask": [0, 1], "logprobs": [0, -1]}  # fmt: skip

# file name -> bytes: each of these once broke a route of the hub
DAMAGE = {
    "deep metrics line": ("metrics.jsonl", b'{"step": 1}\n' + DEEP + b"\n"),
    "deep config": ("config.yaml", b"env: " + b"[" * 5000 + b"]" * 5000 + b"\n"),
    "circular yaml alias": ("config.yaml", b"learner: &a {max_steps: 3, again: *a}\n"),
    "self-referencing yaml list": ("config.yaml", b"env: &l [*l]\n"),
    "config not utf-8": ("config.yaml", b"env: {name: \xff\xfe}\n"),
    "config sections of the wrong type": ("config.yaml", b"learner: 5\nenv: [1]\nactor: x\n"),
    "config a list": ("config.yaml", b"- 1\n- 2\n"),
    "summary not utf-8": ("summary.json", b'{"exit_code": "\xff"}'),
    "summary deep": ("summary.json", DEEP),
    "summary a list": ("summary.json", b"[1, 2]"),
    "actors deep": ("actors.json", DEEP),
    "trajectory of the wrong types": (
        "trajectories.jsonl",
        json.dumps(
            {
                **TRAJECTORY,
                "versions": "abc",
                "tokens": {"a": 1},
                "task_id": [1],
                "env": {"x": 1},
                "loss_mask": "1",
            }
        ).encode()
        + b"\n",
    ),  # fmt: skip
    "trajectory ids past the vocabulary": (
        "trajectories.jsonl",
        json.dumps({**TRAJECTORY, "tokens": [10**12, -5], "versions": [1, "x"]}).encode() + b"\n",
    ),
    "trajectory not utf-8": ("trajectories.jsonl", b'{"env": "\xff"}\n'),
    "eval result a list": ("eval/step_1.json", b"[1]"),
    "eval result step a string": (
        "eval/step_1.json",
        json.dumps({"rows": {"babyai": {}}, "step": "ten", "env": [1]}).encode(),
    ),
    "eval episodes of the wrong shape": ("eval/step_1.episodes.jsonl", b'[1]\n"x"\n\xff\n'),
}


def serve(hub):
    server = make_server(hub, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def runs(tmp_path):
    make_run(tmp_path / "good", steps=3)
    server, url = serve(Hub([tmp_path]))
    yield url, tmp_path
    server.shutdown()
    server.server_close()


def damage(run_dir, name, data):
    path = run_dir / name
    path.parent.mkdir(exist_ok=True)
    if name == "eval/step_1.episodes.jsonl":
        (run_dir / "eval" / "step_1.json").write_text(json.dumps({"rows": {}, "step": 1}))
    if name == "eval/step_1.json":
        (run_dir / "eval" / "step_1.episodes.jsonl").write_text(json.dumps(TRAJECTORY) + "\n")
    path.write_bytes(data)


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_bad_file_costs_only_its_own_run(runs, case):
    url, root = runs
    name, data = DAMAGE[case]
    bad = make_run(root / "bad", steps=2)
    (bad / "trajectories.jsonl").write_text(json.dumps(TRAJECTORY) + "\n")
    damage(bad, name, data)
    listed = requests.get(f"{url}/api/runs", timeout=30)
    assert listed.status_code == 200, listed.text
    by_id = {r["id"]: r for r in listed.json()["runs"]}
    assert by_id["good"]["steps"] == 3 and by_id["good"]["problems"] == []
    for route, params in ROUTES:
        r = requests.get(f"{url}/api/{route}", params={"run": "bad", **params}, timeout=30)
        assert r.status_code < 500, f"{route} {params}: {r.status_code} {r.text[:300]}"
        r.json()
    good = requests.get(f"{url}/api/metrics", params={"run": "good"}, timeout=30).json()
    assert good["columns"]["step"] == [1, 2, 3]


@pytest.mark.parametrize(
    "case", ["circular yaml alias", "config not utf-8", "summary deep", "deep config"]
)
def test_the_reason_is_shown_with_the_run(runs, case):
    url, root = runs
    name, data = DAMAGE[case]
    damage(make_run(root / "bad"), name, data)
    listed = {r["id"]: r for r in requests.get(f"{url}/api/runs", timeout=30).json()["runs"]}
    problems = listed["bad"]["problems"]
    assert len(problems) == 1 and problems[0].startswith(name), problems


def test_thousands_of_metric_names_are_capped(runs):
    url, root = runs
    run = make_run(root / "wide", steps=1)
    with open(run / "metrics.jsonl", "a") as f:
        for line in range(4):
            f.write(json.dumps({f"m{line}_{i}": i for i in range(2000)}) + "\n")
    listed = {r["id"]: r for r in requests.get(f"{url}/api/runs", timeout=60).json()["runs"]}
    assert listed["wide"]["steps"] == 5
    assert any("ignored" in p for p in listed["wide"]["problems"])
    page = requests.get(f"{url}/api/metrics", params={"run": "wide"}, timeout=60).json()
    assert len(page["keys"]) == hub_runs.MAX_METRIC_NAMES
    assert all(len(column) == 5 for column in page["columns"].values())


def test_a_huge_keys_query_gets_a_small_answer(runs):
    url, root = runs
    run = make_run(root / "long", steps=2000)
    assert run.exists()
    keys = ",".join(["nope"] * 4000)  # 16 KiB of one unknown name
    r = requests.get(f"{url}/api/metrics", params={"run": "long", "keys": keys}, timeout=30)
    assert r.status_code == 200 and len(r.content) < 50_000
    assert r.json()["unknown"] == ["nope"] and r.json()["columns"] == {}
    many = ",".join(f"k{i}" for i in range(1000))
    r = requests.get(f"{url}/api/metrics", params={"run": "long", "keys": many}, timeout=30)
    assert r.status_code == 400 and "at most" in r.json()["error"]


def test_silent_and_slow_connections_are_closed(runs, monkeypatch):
    url, _ = runs
    monkeypatch.setattr(hub_server, "HEAD_TIMEOUT_S", 0.5)
    monkeypatch.setattr(hub_server, "BODY_TIMEOUT_S", 0.5)
    port = int(url.rsplit(":", 1)[1])

    def closed_after(sends, pause):
        return net_helpers.closed_after(port, sends, pause, timeout_s=5)

    waited, reply = closed_after([b""], 0)  # silent
    assert waited < 2 and reply == b""
    head = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    waited, _ = closed_after([bytes([c]) for c in head], 0.05)  # one byte at a time
    assert waited < 2.5
    body = (
        b'POST /api/play HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{"'
    )
    waited, reply = closed_after([body], 0)
    assert waited < 2 and reply.startswith(b"HTTP/1.1 408")
    assert requests.get(f"{url}/api/runs", timeout=10).status_code == 200


def test_a_non_ascii_bearer_is_a_401(tmp_path):
    make_run(tmp_path / "r")
    server, url = serve(Hub([tmp_path], token="s3cret"))
    try:
        r = requests.get(
            f"{url}/api/runs", headers={"Authorization": "Bearer s3cr\xe9t"}, timeout=10
        )
        assert r.status_code == 401
        ok = requests.get(f"{url}/api/runs", headers={"Authorization": "Bearer s3cret"}, timeout=10)
        assert ok.status_code == 200
    finally:
        server.shutdown()
        server.server_close()


def test_cross_site_requests_are_refused(runs):
    url, _ = runs
    play = f"{url}/api/play"
    body = json.dumps({"env": "babyai", "task_id": 0})
    text = requests.post(play, data=body, headers={"Content-Type": "text/plain"}, timeout=10)
    assert text.status_code == 415
    foreign = {"Content-Type": "application/json", "Origin": "https://evil.example"}
    assert requests.post(play, data=body, headers=foreign, timeout=10).status_code == 403
    rebound = requests.get(f"{url}/api/runs", headers={"Host": "rebind.evil.example"}, timeout=10)
    assert rebound.status_code == 403 and "--allow-host" in rebound.json()["error"]
    same = {"Content-Type": "application/json", "Origin": url}
    assert requests.post(play, data=body, headers=same, timeout=30).status_code == 200


def test_allowed_hosts_and_tokens_lift_the_host_rule(tmp_path):
    make_run(tmp_path / "r")
    rebound = {"Host": "hub.internal:8765"}
    for hub, headers, want in [
        (Hub([tmp_path], allowed_hosts=("hub.internal",)), {}, 200),
        (Hub([tmp_path], token="t"), {"Authorization": "Bearer t"}, 200),
        (Hub([tmp_path], token="t"), {}, 401),
    ]:
        server, url = serve(hub)
        try:
            r = requests.get(f"{url}/api/runs", headers={**rebound, **headers}, timeout=10)
            assert r.status_code == want
        finally:
            server.shutdown()
            server.server_close()


def test_silent_sockets_past_the_cap_do_not_lock_the_user_out(runs):
    url, _ = runs
    port = int(url.rsplit(":", 1)[1])
    silent = [
        socket.create_connection(("127.0.0.1", port))
        for _ in range(hub_server.MAX_CONNECTIONS + 64)
    ]
    try:
        time.sleep(0.3)
        for _ in range(3):  # each newcomer takes the place of the oldest silent socket
            r = requests.get(f"{url}/api/runs", timeout=5)
            assert r.status_code == 200
    finally:
        for s in silent:
            s.close()


def _peak_bytes(call) -> int:
    """The most memory Python objects held during ``call()``."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_unterminated_huge_metrics_line_is_not_held_or_read_again(tmp_path):
    run = make_run(tmp_path / "r", steps=2)
    with open(run / "metrics.jsonl", "ab") as f:  # a learner died writing a 64 MB line
        f.write(b'{"step": 3, "x": "' + b"x" * (64 << 20))
    hub = Hub([tmp_path])
    peak = _peak_bytes(lambda: hub.api("metrics", {"run": "r"}))
    assert peak < 16 << 20, f"{peak:,} bytes held"
    run_reader = hub.index.get("r").metrics
    with open(run / "metrics.jsonl", "rb") as probe:  # polls do not read the file again
        before = probe.seek(0, 2)
    calls = []
    real_next = run_reader._next_line
    run_reader._next_line = lambda f: calls.append(1) or real_next(f)
    for _ in range(3):
        assert hub.api("metrics", {"run": "r"})["next"] == 2
    assert calls == [] and before == (run / "metrics.jsonl").stat().st_size


def test_a_huge_trajectory_line_is_a_bad_line_in_bounded_memory(tmp_path):
    run = make_run(tmp_path / "r", episodes=[TRAJECTORY])
    with open(run / "trajectories.jsonl", "ab") as f:  # 25 MB of token ids in one sample
        f.write(b'{"episode_id": 2, "env": "babyai", "tokens": [' + b"1," * (12 << 20) + b"1]}\n")
        f.write(json.dumps(TRAJECTORY).encode() + b"\n")
    hub = Hub([tmp_path])
    peak = _peak_bytes(lambda: hub.api("trajectories", {"run": "r"}))
    assert peak < 32 << 20, f"{peak:,} bytes held"
    listing = hub.api("trajectories", {"run": "r"})
    assert listing["total"] == 2 and listing["bad_lines"] == 1
    assert hub.api("trajectory", {"run": "r", "index": 1})["episode_id"] == 1
