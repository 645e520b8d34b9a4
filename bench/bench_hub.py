"""agentgym hub under a big run: API latency and page load with 100,000 metrics lines and 10,000
sampled trajectories.

Builds a synthetic run directory (metrics rows shaped like the learner's, trajectory samples of
`--tokens` tokens with a real tokenizer saved in the run), serves it with the hub in this process
and times each API call as the page makes it: cold (first read, the file is indexed) and warm
(nothing new), and a live poll after one appended line. With `--browser`, also the time until the
curves page has drawn every default plot in headless Chromium.

    python bench/bench_hub.py [--metrics 100000] [--trajectories 10000] [--browser]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import requests
import yaml

from agentgym.hub.server import Hub, make_server
from agentgym.models import train_tokenizer

METRIC_KEYS = [
    "loss/total", "loss/policy", "loss/kl", "loss/entropy", "clip_fraction", "is_weight_mean",
    "is_weight_max", "approx_kl_prox", "grad_norm", "reward/all", "success/all", "truncated/all",
    "turns/all", "reward/babyai", "success/babyai", "version", "horizon_cap", "step_time_s",
    "tokens", "tokens_per_s", "generated_tokens", "dropped_stale_total", "received_total",
]  # fmt: skip


def build_run(root: Path, metrics: int, trajectories: int, tokens: int) -> Path:
    """A run directory as `agentgym train` leaves it, with synthetic content."""
    run = root / "big"
    (run / "model").mkdir(parents=True)
    corpus = [f"Action: go to red ball {i}. You see a blue key {i}." for i in range(200)]
    tok = train_tokenizer(corpus, vocab_size=400)
    tok.save_pretrained(run / "model")
    config = {
        "env": {"name": "babyai"},
        "learner": {"max_steps": metrics, "advantage": {"estimator": "grpo"}},
        "actor": {"reply_format": "action_line"},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    rng = random.Random(0)
    with open(run / "metrics.jsonl", "w") as f:
        for step in range(1, metrics + 1):
            row = {"step": step, **{k: rng.random() for k in METRIC_KEYS}}
            f.write(json.dumps(row) + "\n")
    context = tok.encode(
        "<|im_start|>user\nYou see a blue key 3.<|im_end|>\n<|im_start|>assistant\n"
    )
    reply = tok.encode("Action: go to red ball 1<|im_end|>")
    turn = len(context) + len(reply)
    with open(run / "trajectories.jsonl", "w") as f:
        for i in range(trajectories):
            turns = max(1, tokens // turn)
            ids = (context + reply) * turns
            mask = ([0] * len(context) + [1] * len(reply)) * turns
            record = {
                "episode_id": i, "group_id": i // 8, "env": "babyai", "task_id": i % 4000,
                "horizon_cap": 8, "reward": rng.random(), "success": rng.random() < 0.5,
                "truncated": False, "num_turns": turns, "versions": [i // 64] * turns,
                "num_tokens": len(ids), "text": tok.decode(ids), "tokens": ids, "loss_mask": mask,
                "logprobs": [round(-rng.random(), 4) if m else 0.0 for m in mask],
            }  # fmt: skip
            f.write(json.dumps(record) + "\n")
    return run


def timed(url: str, route: str, **params) -> tuple[float, dict]:
    start = time.perf_counter()
    r = requests.get(f"{url}/api/{route}", params=params, timeout=600)
    r.raise_for_status()
    body = r.json()
    return time.perf_counter() - start, body


DEFAULT_CURVES = "step,reward/all,success/all,horizon_cap,loss/total,tokens_per_s,approx_kl_prox"


def curves(url: str, keys: str | None) -> tuple[float, int]:
    """Seconds to fetch metric columns as the curves page does (``keys``; None: all), and the
    number of lines they cover."""
    params = {"run": "big"} if keys is None else {"run": "big", "keys": keys}
    seconds, page = timed(url, "metrics", **params)
    return seconds, page["next"]


def page_load(url: str) -> float:
    """Seconds from opening the page to every default curve drawn (headless Chromium)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        start = time.perf_counter()
        driver.get(url + "/")
        WebDriverWait(driver, 120).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")
        )
        driver.find_element(By.CSS_SELECTOR, 'nav button[data-view="curves"]').click()
        WebDriverWait(driver, 300).until(
            lambda d: d.execute_script(
                "const p = document.querySelectorAll('.plot');"
                "return p.length >= 8 && [...p].every(x => x.data && x.data[0].y.length > 0)"
            )
        )
        return time.perf_counter() - start
    finally:
        driver.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", type=int, default=100_000)
    ap.add_argument("--trajectories", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per sampled trajectory")
    ap.add_argument("--repeats", type=int, default=5, help="warm calls per figure (median)")
    ap.add_argument("--browser", action="store_true", help="also time the page in Chromium")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agentgym-bench-hub-"))
    start = time.perf_counter()
    run = build_run(root, args.metrics, args.trajectories, args.tokens)
    sizes = {n: os.path.getsize(run / n) / 2**20 for n in ("metrics.jsonl", "trajectories.jsonl")}
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; run built in "
          f"{time.perf_counter() - start:.1f} s: {args.metrics:,} metrics lines "
          f"({sizes['metrics.jsonl']:.0f} MiB), {args.trajectories:,} trajectories "
          f"({sizes['trajectories.jsonl']:.0f} MiB)\n")  # fmt: skip
    server = make_server(Hub([root]), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rows: list[tuple[str, float]] = []
    try:
        rows.append(("runs list, cold (metrics indexed)", timed(url, "runs")[0]))
        rows.append(("runs list, warm", _median(args.repeats, lambda: timed(url, "runs")[0])))
        seconds, n = curves(url, DEFAULT_CURVES)
        assert n == args.metrics, n
        rows.append((f"7 default curves x {n:,} steps", seconds))
        rows.append((f"all {len(METRIC_KEYS) + 1} metrics x {n:,} steps", curves(url, None)[0]))
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": n + 1, "reward/all": 0.5}) + "\n")
        rows.append(("live poll, one new line", timed(url, "metrics", run="big", start=n)[0]))

        def listing(**filters) -> float:
            return timed(url, "trajectories", run="big", limit=50, **filters)[0]

        def replay() -> float:
            return timed(url, "trajectory", run="big", index=args.trajectories - 1)[0]

        rows.append(("trajectory list, cold (file indexed)", listing()))
        rows.append(("trajectory list, warm", _median(args.repeats, listing)))
        filtered = _median(args.repeats, lambda: listing(success="true", version="100"))
        rows.append(("trajectory list, filtered (success, version)", filtered))
        rows.append(("one episode split into turns (replay)", _median(args.repeats, replay)))
        if args.browser:
            rows.append(("page load to all default curves drawn (Chromium)", page_load(url)))
    finally:
        server.shutdown()
        server.server_close()
    print("| call | seconds |\n|---|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} |")


def _median(repeats: int, fn) -> float:
    return statistics.median(fn() for _ in range(max(1, repeats)))


if __name__ == "__main__":
    main()
