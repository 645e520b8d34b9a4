"""Runs on env servers from the config: ``env.remote`` (servers the user runs) and ``env.serve``
(servers ``agentgym train``/``eval`` start), checked at load, recorded in ``config.yaml``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest
import tiny_run
import yaml

from agentgym.config import ConfigError, load_config


def _problems(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(tiny_run.QUICKSTART, list(overrides))
    return str(e.value)


def test_remote_settings_are_checked_at_load():
    text = _problems(
        "env.remote=[ftp://host:1, 'http://a b']",
        "env.remote_options={timeot: 3}",
        "env.serve=-1",
    )
    assert "env.remote: must be base URLs" in text
    assert "env.remote_options: unknown key(s) ['timeot']" in text
    assert "env.serve: must be in [0, 64]" in text
    assert "env.name: env.serve starts servers for" in _problems(
        "env.name=webshop", "env.serve=1", "model.path=/tmp"
    )
    no_native = _problems("env.name=sciworld", "env.remote=[http://127.0.0.1:36002]")
    assert "model.path: must be set for env(s) ['sciworld'] without a native" in no_native
    assert "env.name: must be a native env" in _problems("env.name=sciworld")


def test_a_remote_config_builds_a_remote_pool_on_a_running_server(free_base_port):
    """``env.remote`` sessions are served by the server (its ``/metrics`` counts them)."""
    port = free_base_port(1)
    server = subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli.envserver", "--env", "babyai", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        config = load_config(
            tiny_run.QUICKSTART, [f"env.remote=[{url}]", "env.remote_options={timeout: 5}"]
        )
        _wait_health(url)
        pool = config.env.pool(seed=1)
        ids = pool.create(2)
        first = pool.reset(ids, [0, 1])
        local = load_config(tiny_run.QUICKSTART).env.pool()
        assert first == local.reset(local.create(2), [0, 1])
        assert pool.step(ids, ["turn left", "turn left"]).errors == [None, None]
    finally:
        server.terminate()
        server.wait(10)


def _wait_health(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.slow
def test_train_on_env_servers_it_starts(tmp_path):
    """``env.serve=1``: the launcher starts an envserver, the actors play on it, the saved
    config names it, and it is gone after the run."""
    pytest.importorskip("torch")
    from agentgym.cli.main import main

    run_dir = tmp_path / "run"
    code = main(
        [
            "train",
            str(tiny_run.QUICKSTART),
            *tiny_run.sets([*tiny_run.TINY, f"run_dir={run_dir}", "env.serve=1"]),
            "--quiet",
        ]
    )
    assert code == 0, (run_dir / "logs" / "learner.log").read_text()[-3000:]
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    (url,) = saved["env"]["remote"]
    assert url.startswith("http://127.0.0.1:") and saved["env"]["serve"] == 1
    assert f"babyai on {url}" in (run_dir / "logs" / "envserver0.log").read_text()
    assert f"sessions on {url}" in (run_dir / "logs" / "actor0.log").read_text()
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/health", timeout=2)


def test_the_sciworld_recipe_loads_with_its_horizon_file(tmp_path):
    """``learner.horizon`` may name a schedule file (relative to the config's folder); a
    missing one is one problem naming it."""
    configs = tiny_run.QUICKSTART.parent
    config = load_config(configs / "sciworld.yaml")
    assert config.env.serve == 4 and config.env.is_remote
    assert config.learner.horizon.rounds == (10, 20, 30) and config.learner.horizon.every == 100
    with pytest.raises(ConfigError) as e:
        load_config(configs / "sciworld.yaml", ["learner.horizon=horizon/nope.yaml"])
    assert e.value.problems == [
        f"learner.horizon: no horizon file 'horizon/nope.yaml' in {configs} or here"
    ]
    with pytest.raises(ValueError, match="servers are not started"):
        config.env.pool()
