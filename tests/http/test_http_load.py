"""Load: many concurrent clients on loopback, bounded in count and time, lose nothing."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import requests
from httphelpers import native_server, url_of

CLIENTS = 16
STEPS = 25
TIME_LIMIT_S = 60.0


def _client(url: str, k: int, deadline: float) -> list[str]:
    """One keep-alive client: create, reset, STEPS steps, close. Returns what it saw."""
    with requests.Session() as http:
        sid = http.post(url + "/create", json={}, timeout=10).json()["id"]
        http.post(url + "/reset", json={"id": sid, "data_idx": k}, timeout=10).raise_for_status()
        seen = []
        for i in range(STEPS):
            assert time.monotonic() < deadline, "load test ran out of time"
            r = http.post(
                url + "/step", json={"id": sid, "action": f"get {i + 1} oak logs"}, timeout=10
            )
            assert r.status_code == 200, r.text
            seen.append(r.json()["observation"])
        inventory = http.post(
            url + "/step", json={"id": sid, "action": "inventory"}, timeout=10
        ).json()
        seen.append(inventory["observation"])
        assert http.post(url + "/close", json={"id": sid}, timeout=10).json() is True
        return seen


def test_concurrent_clients_lose_no_step():
    server = native_server("textcraft")
    url = url_of(server)
    try:
        deadline = time.monotonic() + TIME_LIMIT_S
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(lambda k: _client(url, k, deadline), range(CLIENTS)))
        total = sum(range(1, STEPS + 1))
        for seen in results:
            assert seen[:-1] == [f"Got {i + 1} oak logs" for i in range(STEPS)]
            assert seen[-1] == f"Inventory: [oak logs] ({total}) "
        metrics = requests.get(url + "/metrics").text
        assert f'agentgym_env_steps_total{{env="textcraft"}} {CLIENTS * (STEPS + 1)}' in metrics
        assert 'agentgym_sessions_open{env="textcraft"} 0' in metrics
        assert 'agentgym_http_errors_total{status="other"} 0' in metrics
        assert server.sessions() == 0
    finally:
        server.stop()
