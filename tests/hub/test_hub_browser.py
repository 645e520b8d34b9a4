"""agentgym hub in headless Chromium (Debian's chromium + chromium-driver, driven by selenium).

Skipped, with the reason, where selenium or the browser is missing; `AGENTGYM_BROWSER_TESTS=1
bash tests/run.sh` (as root) installs the browser with apt-get.
"""

from __future__ import annotations

import json
import shutil
import threading

import pytest

pytest.importorskip("plotly")
pytest.importorskip("transformers")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")

from hub_helpers import CORPUS, episode, make_run  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from agentgym.hub.server import Hub, make_server  # noqa: E402


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/lib/chromium/chromedriver"
    if browser is None or not shutil.which(driver):
        pytest.skip(
            "needs Debian's chromium and chromium-driver: apt-get install them, or run "
            "AGENTGYM_BROWSER_TESTS=1 bash tests/run.sh as root"
        )
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    binary, driver_path = _chromium()
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def hub_url(tmp_path):
    from agentgym.models import train_tokenizer

    tok = train_tokenizer(CORPUS, vocab_size=300)
    episodes = [
        episode(tok, 0, ["no action here", "Action: turn left", "Action: go to red ball 1"]),
        episode(tok, 1, ["Action: turn right"], success=False),
    ]
    root = tmp_path / "runs"
    make_run(root / "run-a", tok, steps=5, summary_code=None, episodes=episodes)
    server = make_server(Hub([root]), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", root / "run-a"
    server.shutdown()
    server.server_close()


def _severe(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _wait(driver, condition, timeout=15):
    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def test_pages_curves_live_and_replay(browser, hub_url):
    url, run_dir = hub_url
    browser.get(url)
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr"))
    row = browser.find_element(By.CSS_SELECTOR, "#runs-table tbody tr")
    assert "run-a" in row.text and "running" in row.text

    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="curves"]').click()
    plot = '.plot[data-metric="reward/all"]'
    _wait(browser, lambda d: d.execute_script(f"return document.querySelector('{plot}')?.data"))
    ys = browser.execute_script(f"return document.querySelector('{plot}').data[0].y")
    assert ys == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])

    with open(run_dir / "metrics.jsonl", "a") as f:  # live: a new step shows up by polling
        f.write(json.dumps({"step": 6, "reward/all": 0.9}) + "\n")
    _wait(browser, lambda d: len(d.execute_script(
        f"return document.querySelector('{plot}').data[0].y")) == 6)  # fmt: skip

    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="trajectories"]').click()
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#traj-table tbody tr")) == 2)
    browser.find_element(By.CSS_SELECTOR, "#traj-table tbody tr").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#turns .turn"))
    assert browser.find_element(By.ID, "turn-pos").text == "turn 1 of 3"
    browser.find_element(By.ID, "turn-last").click()
    assert browser.find_element(By.ID, "turn-pos").text == "turn 3 of 3"
    hidden = browser.find_elements(By.CSS_SELECTOR, "#turns .turn.future")
    assert hidden == []
    replies = browser.find_elements(By.CSS_SELECTOR, "#turns .turn.reply")
    assert "parse error" in replies[0].text and "action: turn left" in replies[1].text
    assert "action: go to red ball 1" in replies[2].text
    browser.find_element(By.ID, "turn-first").click()
    assert browser.find_element(By.ID, "turn-pos").text == "turn 0 of 3"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#turns .turn:not(.future)")) == 1
    assert _severe(browser) == []


def test_play_babyai_to_success_by_clicking(browser, hub_url):
    from selenium.webdriver.support.ui import Select

    url, _ = hub_url
    browser.get(url)
    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="play"]').click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#play-env option"))
    search = browser.find_element(By.CSS_SELECTOR, '#play-env option[value="search"]')
    assert not search.is_enabled() and "--env-option" in search.get_attribute("title")
    Select(browser.find_element(By.ID, "play-env")).select_by_value("babyai")
    task = browser.find_element(By.ID, "play-task")
    task.clear()
    task.send_keys("3")  # GoToObjS6: "go to the blue key", the key in view
    browser.find_element(By.ID, "play-start").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#play-actions button"))
    assert "go to the blue key" in browser.find_element(By.ID, "play-observation").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#play-picture .bcell.agent")) == 1
    assert browser.find_elements(By.CSS_SELECTOR, "#play-picture .bcell.view")
    buttons = browser.find_elements(By.CSS_SELECTOR, "#play-actions button")
    [go] = [b for b in buttons if b.text == "go to blue key 1"]
    go.click()
    _wait(
        browser, lambda d: d.find_element(By.ID, "play-title").get_attribute("class") == "success"
    )
    assert "(success)" in browser.find_element(By.ID, "play-title").text
    assert browser.find_elements(By.CSS_SELECTOR, "#play-actions button") == []
    assert "go to blue key 1" in browser.find_element(By.ID, "play-history").text

    Select(browser.find_element(By.ID, "play-env")).select_by_value("textcraft")
    task.clear()
    task.send_keys("3")
    browser.find_element(By.ID, "play-start").click()
    _wait(browser, lambda d: "birch planks (have 0)" in d.find_element(By.ID, "play-picture").text)
    browser.find_element(By.ID, "play-input").send_keys("get 1 birch logs\n")
    _wait(
        browser, lambda d: "1 x birch logs (have 1)" in d.find_element(By.ID, "play-picture").text
    )
    assert _severe(browser) == []


def test_eval_table_compares_two_results(browser, hub_url):
    from selenium.webdriver.support.ui import Select

    url, run_dir = hub_url
    (run_dir / "eval").mkdir()
    for name, step, avg in (("model", None, 0.25), ("step_5", 5, 0.75)):
        rows = {"babyai": {"avg@4": avg, "pass@4": 1.0}, "level 0": {"avg@4": avg, "pass@4": 1.0}}
        result = {"env": "babyai", "k": 4, "rows": rows, "step": step}
        (run_dir / "eval" / f"{name}.json").write_text(json.dumps(result))
    browser.get(url)
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr"))
    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="eval"]').click()
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#eval-table tbody tr")) == 2)
    # it opens on the untrained result against the trained one: what training changed
    assert browser.find_element(By.ID, "eval-a").get_attribute("value") == "model"
    assert browser.find_element(By.ID, "eval-b").get_attribute("value") == "step_5"
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#eval-table thead th")]
    assert heads == ["", "model", "step_5 (step 5)", "step_5 - model"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#eval-table tbody tr")
    assert rows[1].text == "level 0 0.250 0.750 +0.500"
    assert rows[1].find_elements(By.TAG_NAME, "td")[3].get_attribute("class") == "better"
    # columns follow the order picked
    Select(browser.find_element(By.ID, "eval-a")).select_by_value("step_5")
    Select(browser.find_element(By.ID, "eval-b")).select_by_value("model")
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#eval-table thead th")]
    assert heads == ["", "step_5 (step 5)", "model", "model - step_5"]
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#eval-table tbody tr")]
    assert rows[1] == "level 0 0.750 0.250 -0.500"
    assert _severe(browser) == []


def test_run_config_as_yaml_header_per_page_and_smoothed_curves(browser, hub_url):
    import yaml

    url, run_dir = hub_url
    for step in range(6, 30):  # a jagged curve
        with open(run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "reward/all": step % 2}) + "\n")
    browser.get(url)
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr"))
    _wait(browser, lambda d: d.find_element(By.ID, "status").text == "1 run(s)")
    browser.find_element(By.CSS_SELECTOR, "#runs-table tbody tr td:nth-child(2)").click()
    _wait(browser, lambda d: d.find_element(By.ID, "run-config").text)
    shown = browser.find_element(By.ID, "run-config").text
    assert "env:\n  name: babyai\n" in shown and "{" not in shown  # as YAML, not JSON
    assert yaml.safe_load(shown) == yaml.safe_load((run_dir / "config.yaml").read_text())

    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="play"]').click()
    assert browser.find_element(By.ID, "status").text == ""  # not the runs page's "1 run(s)"

    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="curves"]').click()
    plot = '.plot[data-metric="reward/all"]'
    traces = f"return document.querySelector('{plot}')?.data"
    _wait(browser, lambda d: d.execute_script(traces))
    assert len(browser.execute_script(traces)) == 1
    browser.execute_script(
        "const s = document.getElementById('smoothing'); s.value = '0.9';"
        "s.dispatchEvent(new Event('input'));"
    )
    _wait(browser, lambda d: len(d.execute_script(traces)) == 2)
    raw, smoothed = browser.execute_script(traces)
    assert raw["opacity"] == 0.25 and raw["y"][-4:] == [0, 1, 0, 1]
    tail = smoothed["y"][-10:]
    jumps = [abs(a - b) for a, b in zip(tail, tail[1:], strict=False)]
    assert max(jumps) < 0.2  # the 0/1 alternation smoothed out
    assert browser.find_element(By.ID, "smoothing-value").text == "0.90"
    assert _severe(browser) == []


def test_eval_choices_do_not_carry_over_to_another_run(browser, hub_url):
    """A run with one result shows it on both sides; switching to a run with two shows both."""
    from selenium.webdriver.support.ui import Select

    url, run_dir = hub_url
    other = make_run(run_dir.parent / "run-b")
    for where, names in ((run_dir, ("model", "step_5")), (other, ("step_5",))):
        (where / "eval").mkdir()
        for name in names:
            rows = {"babyai": {"avg@4": 0.5, "pass@4": 1.0}}
            result = {"env": "babyai", "k": 4, "rows": rows, "step": None}
            (where / "eval" / f"{name}.json").write_text(json.dumps(result))
    browser.get(url)
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr"))
    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="eval"]').click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#eval-run option"))
    pick = lambda run: Select(browser.find_element(By.ID, "eval-run")).select_by_value(run)  # noqa: E731
    chosen = lambda d: (d.find_element(By.ID, "eval-a").get_attribute("value"),  # noqa: E731
                        d.find_element(By.ID, "eval-b").get_attribute("value"))  # fmt: skip
    pick("run-b")
    _wait(browser, lambda d: chosen(d) == ("step_5", "step_5"))
    pick("run-a")
    _wait(browser, lambda d: len(Select(d.find_element(By.ID, "eval-a")).options) == 2)
    _wait(browser, lambda d: sorted(chosen(d)) == ["model", "step_5"])
    assert _severe(browser) == []


def test_eval_episodes_of_one_task_side_by_side(browser, hub_url):
    """Two results' episodes of the chosen task, each in its column, as turns."""
    from selenium.webdriver.support.ui import Select

    from agentgym.models import load_tokenizer

    url, run_dir = hub_url
    tok = load_tokenizer(run_dir / "model")
    (run_dir / "eval").mkdir()
    cases = (("model", None, "no action here", False),
             ("step_5", 5, "Action: go to red ball 1", True))  # fmt: skip
    for name, step, reply, success in cases:
        rows = {"babyai": {"avg@1": float(success)}}
        result = {"env": "babyai", "k": 1, "rows": rows, "step": step}
        (run_dir / "eval" / f"{name}.json").write_text(json.dumps(result))
        records = [episode(tok, 7, [reply], task_id=40, success=success),
                   episode(tok, 8, ["Action: turn left"], task_id=81, success=False)]  # fmt: skip
        lines = "".join(json.dumps(r) + "\n" for r in records)
        (run_dir / "eval" / f"{name}.episodes.jsonl").write_text(lines)
    browser.get(url)
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr"))
    browser.find_element(By.CSS_SELECTOR, 'nav button[data-view="eval"]').click()
    _wait(browser, lambda d: len(Select(d.find_element(By.ID, "eval-task")).options) == 2)
    Select(browser.find_element(By.ID, "eval-a")).select_by_value("model")
    Select(browser.find_element(By.ID, "eval-b")).select_by_value("step_5")
    _wait(browser, lambda d: "\u2717 | \u2713" in d.find_element(By.ID, "eval-task").text)
    Select(browser.find_element(By.ID, "eval-task")).select_by_value("40")
    right = lambda d: d.find_element(By.ID, "eval-episodes-b").text  # noqa: E731
    _wait(browser, lambda d: "action: go to red ball 1" in right(d))
    left = browser.find_element(By.ID, "eval-episodes-a").text
    assert "truncated" in left and "parse error" in left
    assert "success" in browser.find_element(By.ID, "eval-episodes-b").text
    assert _severe(browser) == []
