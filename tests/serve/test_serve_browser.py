"""The pages in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by selenium).

Each test waits on the DOM (``WebDriverWait``), never sleeps. Screenshots go to ``$MARINBUILD_SCREENSHOTS``
when it is set (``docs/img`` for the documentation: ``MARINBUILD_SCREENSHOTS=docs/img pytest -m browser
tests/serve``), else to the test's temporary folder. These tests have a workspace and server of their own,
since the live test builds a step the HTTP tests expect unbuilt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from serve_ws import EVIL_NAME, Server, build_workspace, env_for, mb

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
]


@pytest.fixture(scope="module")
def bws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_workspace(tmp_path_factory.mktemp("browser") / "ws")


@pytest.fixture(scope="module")
def bserver(bws: Path) -> Iterator[Server]:
    running = Server(bws)
    yield running
    running.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("MARINBUILD_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / name))


def open_page(driver: Any, url: str) -> None:
    driver.get(url)
    WebDriverWait(driver, 60).until(
        lambda d: d.execute_script("return document.body.dataset.ready === '1' || !!document.getElementById('error')")
    )
    error = driver.find_elements(By.ID, "error")
    assert not error, error[0].text


def node_states(driver: Any) -> dict[str, str]:
    return driver.execute_script(
        "const out = {}; for (const g of document.querySelectorAll('svg.graph g.node')) "
        "out[g.dataset.name] = g.dataset.state; return out;"
    )


def test_the_graph_renders_each_step_with_its_state(browser: Any, bserver: Server, tmp_path: Path) -> None:
    open_page(browser, bserver.url + "/")
    states = node_states(browser)
    expected = {n["name"]: n["state"] for n in bserver.json("/api/graph")["nodes"]}
    assert states == expected
    assert {"built", "failed", "dep_failed", "missing", "stale"} <= set(states.values())
    drawn = browser.execute_script("return document.querySelectorAll('svg.graph path.edge').length")
    assert drawn == len(bserver.json("/api/graph")["edges"])
    screenshot(browser, "serve-graph.png", tmp_path)
    # the state filter dims every other node
    browser.find_element(By.CSS_SELECTOR, "#state-filter option[value='failed']").click()
    dimmed = browser.execute_script(
        "return [...document.querySelectorAll('svg.graph g.node')].filter(g => !g.classList.contains('dim'))"
        ".map(g => g.dataset.name)"
    )
    assert dimmed == ["pipe/bad"]


def test_a_step_page_shows_its_why(browser: Any, bserver: Server, bws: Path, tmp_path: Path) -> None:
    open_page(browser, bserver.url + "/")
    browser.find_element(By.CSS_SELECTOR, "svg.graph g.node[data-name='pipe/changed'] rect").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "why"))
    assert "/step/pipe/changed-" in browser.current_url
    cli = mb(bws, "why", "//pipe:changed")
    assert browser.find_element(By.ID, "why").text.strip() == cli.stdout.strip()
    assert "version changed" in cli.stdout
    screenshot(browser, "serve-step.png", tmp_path)


def test_html_in_step_names_and_configs_is_shown_as_text(browser: Any, bserver: Server, tmp_path: Path) -> None:
    node = next(n for n in bserver.json("/api/graph")["nodes"] if n["name"].startswith("evil/"))
    open_page(browser, bserver.url + "/")
    label = browser.find_element(By.CSS_SELECTOR, "svg.graph g.node[data-name^='evil/'] text").text
    assert label == EVIL_NAME
    open_page(browser, bserver.url + "/step/" + "/".join(quote(p, safe="") for p in node["relative"].split("/")))
    assert browser.find_element(By.ID, "step-name").text.startswith(EVIL_NAME)
    assert "<script>window.pwned=2</script>" in browser.find_element(By.ID, "config").text
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.execute_script("return document.querySelectorAll('main img, main script').length") == 0


def test_a_live_build_changes_a_nodes_state_on_the_open_page(
    browser: Any, bserver: Server, bws: Path, tmp_path: Path
) -> None:
    open_page(browser, bserver.url + "/")
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "live").text == "live")  # the stream is open
    assert node_states(browser)["live/slow"] == "missing"
    release = tmp_path / "release"
    build = subprocess.Popen(
        [sys.executable, "-m", "marinbuild", "//live:slow"],
        cwd=bws,
        env=env_for(bws, release),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        WebDriverWait(browser, 120).until(lambda d: node_states(d)["live/slow"] == "running")
        screenshot(browser, "serve-live.png", tmp_path)
        release.touch()
        WebDriverWait(browser, 120).until(lambda d: node_states(d)["live/slow"] == "built")
    finally:
        release.touch()
        assert build.wait(timeout=120) == 0
    assert browser.execute_script("return performance.getEntriesByType('navigation').length") == 1  # no reload


def stroke_pixels(driver: Any, chart_id: str) -> list[int]:
    """How many pixels of each run's colour the chart's canvas has (uPlot draws on one canvas)."""
    return driver.execute_script(
        """
        const canvas = document.querySelector('#' + arguments[0] + ' canvas');
        const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        const colours = [[0x15, 0x65, 0xc0], [0xc6, 0x28, 0x28]];
        const counts = colours.map(() => 0);
        for (let i = 0; i < data.length; i += 4) {
          colours.forEach((c, k) => {
            if (Math.abs(data[i] - c[0]) < 24 && Math.abs(data[i + 1] - c[1]) < 24 && Math.abs(data[i + 2] - c[2]) < 24
                && data[i + 3] > 200) counts[k] += 1;
          });
        }
        return counts;""",
        chart_id,
    )


def test_a_training_page_draws_two_overlaid_runs(browser: Any, bserver: Server, tmp_path: Path) -> None:
    open_page(browser, bserver.url + "/training")
    legend = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#legend li")]
    assert len(legend) == 2
    assert any("lr 0.001, batch 8, 200 steps" in text for text in legend)
    assert any("lr 0.01, batch 8, 200 steps" in text for text in legend)
    for chart in ("train-chart", "eval-chart"):
        series = browser.find_elements(By.CSS_SELECTOR, f"#{chart} .u-legend .u-series")
        assert len(series) == 3  # the x axis and two runs
        first, second = stroke_pixels(browser, chart)
        assert first > 50 and second > 50, (chart, first, second)  # both curves are drawn on the one chart
    screenshot(browser, "serve-training.png", tmp_path)


def test_the_runs_and_a_runs_timeline(browser: Any, bserver: Server, tmp_path: Path) -> None:
    open_page(browser, bserver.url + "/runs")
    rows = browser.find_elements(By.CSS_SELECTOR, "#builds tr[data-id]")
    assert rows
    screenshot(browser, "serve-runs.png", tmp_path)
    rows[-1].find_element(By.TAG_NAME, "a").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline tr"))
    steps = [tr.get_attribute("data-step") for tr in browser.find_elements(By.CSS_SELECTOR, "#timeline tr")]
    assert "pipe/a" in steps and "pipe/bad" in steps
    assert browser.find_elements(By.CSS_SELECTOR, "#timeline tr[data-step='pipe/bad'] .badge[data-state='failed']")
    screenshot(browser, "serve-run.png", tmp_path)
