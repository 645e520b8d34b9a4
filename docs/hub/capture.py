"""Screenshots of agentgym hub's pages, for docs/hub.md.

    agentgym train configs/quickstart.yaml --set run_dir=/tmp/hubruns/quickstart
    python docs/hub/capture.py /tmp/hubruns docs/hub [--eval-run RUN_ID --eval-task TASK_ID]

Serves the runs under RUNS_DIR with the hub in this process and saves runs.png, curves.png,
trajectories.png (an episode replayed to its last turn) and play.png (BabyAI task 3 played to
success) into OUT_DIR, using headless Chromium (Debian's chromium and chromium-driver). With
``--eval-run``, also eval.png: that run's first and last `agentgym eval` results side by side
with one task's episodes under both (the run needs two results saved with their episodes).
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from agentgym.hub.server import Hub, make_server


def _until(driver, condition, timeout=60):
    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def capture_eval(driver, url: str, out: Path, run: str, task: str | None) -> None:
    """The Eval page of ``run``: its first and last results and one task's episodes."""
    driver.get(url)
    driver.find_element(By.CSS_SELECTOR, 'nav button[data-view="eval"]').click()
    _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#eval-run option"))
    Select(driver.find_element(By.ID, "eval-run")).select_by_value(run)
    _until(driver, lambda d: len(Select(d.find_element(By.ID, "eval-task")).options) > 0)
    if task is not None:
        Select(driver.find_element(By.ID, "eval-task")).select_by_value(task)
    _until(driver, lambda d: d.find_element(By.ID, "eval-episodes-b").text)
    time.sleep(1)
    driver.save_screenshot(str(out / "eval.png"))


def capture(driver, url: str, out: Path) -> None:
    """Visit each page and save its screenshot."""
    driver.get(url)
    _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr"))
    driver.find_element(By.CSS_SELECTOR, "#runs-table tbody tr td:nth-child(2)").click()
    _until(driver, lambda d: d.find_element(By.ID, "run-config").text)
    driver.save_screenshot(str(out / "runs.png"))

    driver.find_element(By.CSS_SELECTOR, 'nav button[data-view="curves"]').click()
    _until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".plot .main-svg")) >= 4)
    time.sleep(1)
    driver.save_screenshot(str(out / "curves.png"))

    driver.find_element(By.CSS_SELECTOR, 'nav button[data-view="trajectories"]').click()
    _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#traj-table tbody tr"))
    Select(driver.find_element(By.ID, "f-success")).select_by_value("true")
    driver.find_element(By.ID, "traj-apply").click()
    time.sleep(1)
    rows = driver.find_elements(By.CSS_SELECTOR, "#traj-table tbody tr")
    rows[min(len(rows) - 1, 5)].click()
    _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#turns .turn"))
    driver.find_element(By.ID, "turn-last").click()
    driver.save_screenshot(str(out / "trajectories.png"))

    driver.find_element(By.CSS_SELECTOR, 'nav button[data-view="play"]').click()
    _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#play-env option"))
    Select(driver.find_element(By.ID, "play-env")).select_by_value("babyai")
    task = driver.find_element(By.ID, "play-task")
    task.clear()
    task.send_keys("3")
    driver.find_element(By.ID, "play-start").click()
    _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#play-actions button"))
    [go] = [b for b in driver.find_elements(By.CSS_SELECTOR, "#play-actions button")
            if b.text.startswith("go to green key")]  # fmt: skip
    go.click()
    _until(driver, lambda d: d.find_element(By.ID, "play-title").get_attribute("class"))
    driver.save_screenshot(str(out / "play.png"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--eval-run", help="run id whose eval results go into eval.png")
    ap.add_argument("--eval-task", help="task id shown in eval.png (default: the first)")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    server = make_server(Hub([args.runs_dir]), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        capture(driver, url, args.out_dir)
        if args.eval_run:
            capture_eval(driver, url, args.out_dir, args.eval_run, args.eval_task)
    finally:
        driver.quit()
        server.shutdown()
    print(f"screenshots in {args.out_dir}")


if __name__ == "__main__":
    main()
