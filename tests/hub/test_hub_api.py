"""agentgym hub: the JSON API over run directories, bad input included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import requests

pytest.importorskip("plotly")
pytest.importorskip("transformers")

from hub_helpers import CORPUS, episode, make_run  # noqa: E402

from agentgym.hub.server import Hub, make_server  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from agentgym.models import train_tokenizer

    return train_tokenizer(CORPUS, vocab_size=300)


@pytest.fixture
def hub(tmp_path, tokenizer):
    root = tmp_path / "runs"
    episodes = [
        episode(tokenizer, 0, ["Thought: ahead.\nAction: go to red ball 1"], task_id=0),
        episode(
            tokenizer,
            1,
            ["no action here", "Action: turn left"],
            task_id=41,
            success=False,
            versions=[2, 3],
        ),  # fmt: skip
        episode(tokenizer, 2, ["Action: turn right"], env="textcraft", task_id=5),
    ]
    make_run(root / "done", tokenizer, summary_code=0, episodes=episodes)
    make_run(root / "group" / "failed", summary_code=1)
    make_run(root / "live")
    stopped = make_run(root / "stopped")
    old = time.time() - 3600
    for name in ("metrics.jsonl", "trajectories.jsonl"):
        os.utime(stopped / name, (old, old))
    (root / "not-a-run").mkdir()
    (root / "not-a-run" / "notes.txt").write_text("x")
    server = make_server(Hub([root]), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield url, root
    server.shutdown()
    server.server_close()


def get(url, route, **params):
    return requests.get(f"{url}/api/{route}", params=params, timeout=10)


def test_runs_found_with_status(hub):
    url, _ = hub
    runs = {r["id"]: r for r in get(url, "runs").json()["runs"]}
    assert set(runs) == {"done", "group/failed", "live", "stopped"}
    assert {k: r["status"] for k, r in runs.items()} == {
        "done": "finished", "group/failed": "failed", "live": "running", "stopped": "stopped"
    }  # fmt: skip
    assert runs["done"]["steps"] == 3 and runs["done"]["max_steps"] == 10
    assert runs["done"]["algorithm"] == "grpo" and runs["done"]["env"] == "babyai"


def test_run_detail_and_unknown_run(hub):
    url, _ = hub
    detail = get(url, "run", run="done").json()
    assert detail["config"]["env"]["name"] == "babyai"
    assert detail["summary"] == {"exit_code": 0}
    r = get(url, "run", run="nope")
    assert r.status_code == 404 and "unknown run" in r.json()["error"]
    assert get(url, "run").status_code == 400


@pytest.mark.parametrize(
    "run_id", ["..", "../runs/done", "/etc", "done/../../..", "done/model", "%2e%2e", ""]
)
def test_paths_outside_the_runs_are_not_served(hub, run_id):
    url, _ = hub
    r = get(url, "metrics", run=run_id)
    assert r.status_code in (400, 404), r.text
    assert "columns" not in r.json()


@pytest.mark.parametrize("path", ["/static/../runs/done/config.yaml", "/static/%2e%2e/x",
                                  "/static/app.js/../../../etc/passwd", "/etc/passwd"])  # fmt: skip
def test_static_files_are_a_fixed_list(hub, path):
    url, _ = hub
    r = requests.get(url + path, timeout=10)
    assert r.status_code == 404


def test_pages_are_served(hub):
    url, _ = hub
    page = requests.get(url + "/", timeout=10)
    assert page.status_code == 200 and "agentgym hub" in page.text
    for name in ("app.js", "style.css", "plotly.min.js"):
        r = requests.get(f"{url}/static/{name}", timeout=10)
        assert r.status_code == 200 and len(r.content) > 100, name


def test_metrics_incremental_with_malformed_and_partial_lines(hub):
    url, root = hub
    first = get(url, "metrics", run="live").json()
    assert first["columns"]["step"] == [1, 2, 3] and first["next"] == 3
    assert first["keys"] == ["loss/total", "reward/all", "step"]
    with open(root / "live" / "metrics.jsonl", "a") as f:
        f.write("{not json\n")
        f.write("[1, 2]\n")
        f.write(json.dumps({"step": 4, "reward/all": float("nan"), "note": "text"}) + "\n")
        f.write('{"step": 5, "reward/all": 0.')  # being written
    second = get(url, "metrics", run="live", start=first["next"]).json()
    assert second["columns"]["step"] == [4]
    assert second["columns"]["reward/all"] == [None]  # NaN has no JSON number
    assert second["columns"]["loss/total"] == [None]  # absent from that line
    assert second["columns"]["note"] == [None]  # not a number
    assert second["bad_lines"] == 2 and second["first_bad_lines"] == [4, 5]
    with open(root / "live" / "metrics.jsonl", "a") as f:
        f.write("5}\n")
    third = get(url, "metrics", run="live", start=second["next"], keys="step,reward/all").json()
    assert third["columns"] == {"step": [5], "reward/all": [0.5]}
    whole = get(url, "metrics", run="live", keys="reward/all,nope").json()
    assert whole["columns"]["reward/all"] == [0.1, 0.2, 0.3, None, 0.5]
    assert whole["unknown"] == ["nope"] and "nope" not in whole["columns"]
    assert whole["next"] == 5


@pytest.mark.parametrize("params", [{"start": "-1"}, {"start": "x"}])
def test_metrics_bad_parameters(hub, params):
    url, _ = hub
    r = get(url, "metrics", run="live", **params)
    assert r.status_code == 400 and "start" in r.json()["error"]


def test_trajectory_filters_and_pages(hub):
    url, _ = hub
    everything = get(url, "trajectories", run="done").json()
    assert everything["total"] == everything["matched"] == 3
    assert everything["values"]["env"] == ["babyai", "textcraft"]
    assert [r["group"] for r in everything["rows"]] == ["level 0", "level 1", None]
    assert "tokens" not in everything["rows"][0]

    def ids(**filters):
        return [
            r["episode_id"] for r in get(url, "trajectories", run="done", **filters).json()["rows"]
        ]

    assert ids(env="textcraft") == [2]
    assert ids(success="false") == [1]
    assert ids(success="true", env="babyai") == [0]
    assert ids(task_id="41") == [1]
    assert ids(version="3") == [1] and ids(version="2") == [1] and ids(version="4") == []
    assert ids(group="level 0") == [0]
    assert ids(offset="1", limit="1") == [1]
    assert get(url, "trajectories", run="done", version="new").status_code == 400


def test_replay_splits_turns_and_parses_actions(hub):
    url, _ = hub
    ep = get(url, "trajectory", run="done", index=1).json()
    replies = [t for t in ep["turns"] if t["kind"] == "reply"]
    contexts = [t for t in ep["turns"] if t["kind"] == "context"]
    assert [t["kind"] for t in ep["turns"]] == ["context", "reply", "context", "reply"]
    assert "observation 0" in contexts[0]["text"] and "observation 1" in contexts[1]["text"]
    assert replies[0]["action"] is None and "Action:" in replies[0]["error"]
    assert replies[1]["action"] == "turn left" and replies[1]["error"] is None
    assert "".join(replies[1]["pieces"]) == "Action: turn left"
    assert replies[1]["logprobs"] == [-0.5] * len(replies[1]["pieces"])
    assert "text" not in ep and "tokens" not in ep
    r = get(url, "trajectory", run="done", index=3)
    assert r.status_code == 404
    assert get(url, "trajectory", run="done").status_code == 400


def test_trajectory_file_written_while_read(hub, tokenizer):
    url, root = hub
    path = root / "done" / "trajectories.jsonl"
    line = json.dumps(episode(tokenizer, 7, ["Action: turn left"]))
    with open(path, "a") as f:
        f.write("garbage\n")
        f.write(line[:40])
    page = get(url, "trajectories", run="done").json()
    assert page["total"] == 3 and page["bad_lines"] == 1
    with open(path, "a") as f:
        f.write(line[40:] + "\n")
    page = get(url, "trajectories", run="done").json()
    assert page["total"] == 4 and page["rows"][-1]["episode_id"] == 7
    assert get(url, "trajectory", run="done", index=3).json()["episode_id"] == 7


def test_unknown_route(hub):
    url, _ = hub
    r = get(url, "secrets", run="done")
    assert r.status_code == 404 and "no such API route" in r.json()["error"]
    r = get(url, "secrets")  # an unknown route, not a known one missing its run
    assert r.status_code == 404 and r.json()["error"] == "no such API route: 'secrets'"
    r = get(url, "metrics")
    assert r.status_code == 400 and "missing query parameter 'run'" in r.json()["error"]


def test_trajectories_are_grouped_as_eval_groups_them(tmp_path, tokenizer):
    """webnav's and TextCraft's groups come from the episode (site and kind, goal depth), read
    from a session of the run's own env; BabyAI's from the task id."""
    import yaml

    root = tmp_path / "runs"
    webnav = [episode(tokenizer, i, ["Action: stop [x]"], env="webnav", task_id=t)
              for i, t in enumerate((0, 17, 30))]  # fmt: skip
    run = make_run(root / "web", tokenizer, episodes=webnav)
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "env": {"name": "webnav"}}))
    multi = [episode(tokenizer, 0, ["Action: x"], env="textcraft", task_id=200),
             episode(tokenizer, 1, ["Action: x"], task_id=43)]  # fmt: skip
    run = make_run(root / "multi", tokenizer, episodes=multi)
    envs = [{"env": {"name": "textcraft"}}, {"env": {"name": "babyai"}}]
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "envs": envs}))
    server = make_server(Hub([root]), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        rows = get(url, "trajectories", run="web").json()["rows"]
        assert [r["group"] for r in rows] == [
            "shop/information_seeking", "forum/information_seeking", "code/information_seeking"
        ]  # fmt: skip
        page = get(url, "trajectories", run="multi").json()
        assert [r["group"] for r in page["rows"]] == ["depth 2", "level 3"]
        assert page["values"]["group"] == ["depth 2", "level 3"]
    finally:
        server.shutdown()
        server.server_close()


def test_token_required_when_set(tmp_path):
    make_run(tmp_path / "r")
    server = make_server(Hub([tmp_path], token="s3cret"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api/runs"
    try:
        assert requests.get(url, timeout=10).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert requests.get(url, headers=wrong, timeout=10).status_code == 401
        right = {"Authorization": "bearer s3cret"}
        assert requests.get(url, headers=right, timeout=10).json()["runs"][0]["id"] == "r"
    finally:
        server.shutdown()
        server.server_close()


def test_cli_serves_and_refuses_a_missing_directory(tmp_path):
    make_run(tmp_path / "runs" / "a")
    bad = subprocess.run(
        [sys.executable, "-m", "agentgym.cli.main", "hub", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "no such directory" in bad.stderr
    with subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli.main", "hub", str(tmp_path / "runs"), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        try:
            lines = [proc.stdout.readline() for _ in range(2)]
            assert "1 run(s)" in lines[0]
            url = lines[1].strip().rsplit(" ", 1)[1]
            assert requests.get(url + "api/runs", timeout=10).json()["runs"][0]["id"] == "a"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def post(url, route, body=None, raw=None):
    data = raw if raw is not None else json.dumps(body)
    json_type = {"Content-Type": "application/json"}
    return requests.post(f"{url}/api/{route}", data=data, headers=json_type, timeout=30)


def test_play_babyai_and_textcraft_to_success(hub):
    url, _ = hub
    envs = {e["name"]: e["num_tasks"] for e in get(url, "envs").json()["envs"]}
    assert {"babyai", "textcraft"} <= set(envs)
    start = post(url, "play", {"env": "babyai", "task_id": 3}).json()
    assert "go to the blue key" in start["observation"] and not start["ended"]
    assert "go to blue key 1" in start["actions"]
    view = post(url, "play/step", {"session": start["session"], "action": "Go to blue key 1."})
    view = view.json()
    assert view["sent"] == "go to blue key 1"
    assert view["done"] and view["ended"] and view["success"] and view["reward"] > 0
    again = post(url, "play/step", {"session": start["session"], "action": "turn left"})
    assert again.status_code == 400 and "ended" in again.json()["error"]

    craft = post(url, "play", {"env": "textcraft", "task_id": 3}).json()
    assert "Goal: craft birch planks" in craft["observation"]
    session = craft["session"]
    post(url, "play/step", {"session": session, "action": "get 1 birch logs"})
    craft_planks = "craft 4 birch planks using 1 birch logs"
    view = post(url, "play/step", {"session": session, "action": craft_planks}).json()
    assert view["success"] and view["steps"] == 2


def test_play_search_with_env_options(tmp_path, tokenizer):
    """The search env needs an index and a QA set: without them it is listed as unavailable with
    the flag to give; with them a question can be answered by hand."""
    from agentgym.cli.hub import parse_env_options
    from agentgym.envs.search import build_index
    from agentgym.envs.search_data import write_dataset

    data = write_dataset(tmp_path / "w", seed=0, num_questions=5)
    build_index(tmp_path / "w" / "corpus.jsonl", tmp_path / "w" / "index", threads=1)
    plain = {e["name"]: e for e in Hub([tmp_path]).play.envs()}
    assert "--env-option search:KEY=VALUE" in plain["search"]["unavailable"]
    options = parse_env_options(
        [f"search:index={tmp_path / 'w' / 'index'}", f"search:qa={tmp_path / 'w' / 'qa.jsonl'}"]
    )
    server = make_server(Hub([tmp_path], env_options=options), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        envs = {e["name"]: e for e in get(url, "envs").json()["envs"]}
        assert envs["search"]["num_tasks"] == 5 and "unavailable" not in envs["search"]
        start = post(url, "play", {"env": "search", "task_id": 0}).json()
        assert data.questions[0]["question"] in start["observation"]
        answer = data.questions[0]["golden_answers"][0]
        view = post(url, "play/step", {"session": start["session"], "action": "<search>x"})
        assert not view.json()["ended"]  # an unclosed tag gets the corrective text, no crash
        view = post(
            url, "play/step", {"session": start["session"], "action": f"<answer>{answer}</answer>"}
        )
        assert view.json()["success"] and view.json()["ended"]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "pairs", [["search"], ["search:index"], [":index=x"], ["chess:index=x"], ["search:=x"]]
)
def test_bad_env_options_are_refused(pairs):
    from agentgym.cli.hub import parse_env_options

    with pytest.raises(ValueError, match="ENV:KEY=VALUE|unknown env"):
        parse_env_options(pairs)


@pytest.mark.parametrize(
    ("route", "body", "message"),
    [
        ("play", {"env": "chess", "task_id": 0}, "unknown env"),
        ("play", {"env": "babyai", "task_id": -1}, "task_id"),
        ("play", {"env": "babyai", "task_id": "7"}, "task_id"),
        ("play", {"env": "babyai", "task_id": True}, "task_id"),
        ("play", {"env": "babyai", "task_id": 10**12}, "below"),
        ("play", [1, 2], "JSON object"),
        ("play/step", {"session": 999, "action": "turn left"}, "no play session"),
        ("play/step", {"session": "1", "action": "turn left"}, "no play session"),
        ("play/step", {"session": 1, "action": ""}, "non-empty"),
        ("play/step", {"session": 1, "action": 5}, "non-empty"),
        ("play/step", {"session": 1, "action": "x" * 5000}, "longer"),
    ],
)
def test_play_bad_input(hub, route, body, message):
    url, _ = hub
    post(url, "play", {"env": "babyai", "task_id": 0})  # so that play session number 1 exists
    r = post(url, route, body)
    assert r.status_code == 400 and message in r.json()["error"], r.text


def test_play_garbage_action_and_bodies(hub):
    url, _ = hub
    session = post(url, "play", {"env": "babyai", "task_id": 0}).json()["session"]
    r = post(url, "play/step", {"session": session, "action": "!!!"})
    assert r.status_code == 400 and "no action" in r.json()["error"]
    view = post(url, "play/step", {"session": session, "action": "fly to the moon"}).json()
    assert view["steps"] == 1 and not view["ended"]  # the env answers an invalid action
    assert post(url, "play", raw=b"{nope").status_code == 400
    big = requests.post(
        f"{url}/api/play",
        headers={"Content-Length": str(10**7), "Content-Type": "application/json"},
        timeout=10,
    )
    assert big.status_code == 400
    assert post(url, "nothing", {}).status_code == 404


def _write_eval(run_dir, name, step, avg):
    row = {"tasks": 2, "episodes": 8, "avg@4": avg, "pass@4": 1.0, "score": avg}
    rows = {"babyai": row, "level 0": row}
    (run_dir / "eval").mkdir(exist_ok=True)
    result = {"env": "babyai", "k": 4, "rows": rows, "episodes": [], "step": step}
    (run_dir / "eval" / f"{name}.json").write_text(json.dumps(result))


def test_evals_in_step_order_and_bad_files_named(hub):
    url, root = hub
    assert get(url, "evals", run="done").json() == {"evals": []}
    _write_eval(root / "done", "step_10", 10, 0.75)
    _write_eval(root / "done", "model", None, 0.25)
    _write_eval(root / "done", "step_2", 2, 0.5)
    (root / "done" / "eval" / "broken.json").write_text("{")
    (root / "done" / "eval" / "norows.json").write_text('{"k": 4}')
    evals = get(url, "evals", run="done").json()["evals"]
    good = [e for e in evals if "error" not in e]
    assert [e["name"] for e in good] == ["step_2", "step_10", "model"]
    assert good[1]["rows"]["level 0"]["avg@4"] == 0.75 and "episodes" not in good[1]
    assert {e["name"] for e in evals if "error" in e} == {"broken", "norows"}


def test_eval_episodes_list_tasks_and_split_a_tasks_episodes_into_turns(hub, tokenizer):
    """``agentgym eval`` keeps each result's episodes beside it; the hub lists the tasks with
    each sample's outcome and returns one task's episodes as turns."""
    url, root = hub
    _write_eval(root / "done", "step_2", 2, 0.5)
    _write_eval(root / "done", "model", None, 0.0)
    records = [
        episode(tokenizer, 10, ["Thought: go.\nAction: go to red ball 1"], task_id=40),
        episode(tokenizer, 11, ["Action: turn left"], task_id=40, success=False),
        episode(tokenizer, 12, ["Action: turn right"], task_id=41),
    ]
    path = root / "done" / "eval" / "step_2.episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "{bad\n")
    listed = {e["name"]: e["has_episodes"] for e in get(url, "evals", run="done").json()["evals"]}
    assert listed == {"step_2": True, "model": False}
    tasks = get(url, "eval_episodes", run="done", name="step_2").json()
    assert tasks["tasks"] == [
        {"task_id": 40, "env": "babyai", "success": [True, False]},
        {"task_id": 41, "env": "babyai", "success": [True]},
    ]
    assert tasks["bad_lines"] == 1
    one = get(url, "eval_episodes", run="done", name="step_2", task=40).json()["episodes"]
    assert [e["episode_id"] for e in one] == [10, 11] and "tokens" not in one[0]
    replies = [t for t in one[0]["turns"] if t["kind"] == "reply"]
    assert replies[0]["action"] == "go to red ball 1"
    for name in ("model", "../config", "nope"):
        assert get(url, "eval_episodes", run="done", name=name).status_code == 404
    assert get(url, "eval_episodes", run="done", name="step_2", task="x").status_code == 400


def test_play_textcraft_draws_the_goal_tree_with_the_inventory(hub):
    url, _ = hub
    view = post(url, "play", {"env": "textcraft", "task_id": 3}).json()
    tree = view["picture"]["tree"]
    assert view["picture"]["kind"] == "textcraft-tree"
    assert tree["item"] == "birch planks" and tree["have"] == 0
    [recipe] = tree["recipes"]
    assert recipe["count"] == 4
    assert [(i["need"], i["item"], i["recipes"]) for i in recipe["ingredients"]] == [
        (1, "birch logs", [])
    ]
    view = post(url, "play/step", {"session": view["session"], "action": "get 1 birch logs"})
    ingredient = view.json()["picture"]["tree"]["recipes"][0]["ingredients"][0]
    assert ingredient["have"] == 1


def test_play_babyai_draws_the_grid_and_the_agent(hub):
    url, _ = hub
    view = post(url, "play", {"env": "babyai", "task_id": 3}).json()
    pic = view["picture"]
    assert pic["kind"] == "babyai-grid" and "grid" not in view["info"]
    assert pic["agent"] == view["info"]["agent_pos"] and pic["dir"] == view["info"]["agent_dir"]
    rows = pic["rows"]
    assert len({len(r) for r in rows}) == 1 and all(c == "WE" for c in _cells(rows[0]))
    assert "KB" in _cells("".join(rows))  # the blue key of "go to the blue key"
    x, y = pic["agent"]
    assert _cells(rows[y])[x] == "  "  # the agent stands on an empty cell


def _cells(row):
    return [row[i : i + 2] for i in range(0, len(row), 2)]
