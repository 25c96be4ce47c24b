"""The Dagster UI in a real browser: Debian's Chromium driven by Playwright.

Starts `cortex dev` on a free loopback port with a temporary CORTEX_HOME, sends a message with
`cortex send`, waits for the sensor-triggered run, materializes the memory assets with
`cortex run`, then opens the asset graph, the runs list and the memory_bulletin asset page and
checks that the run, the materialization and the bulletin preview are visible. Screenshots go to
test-artifacts/ui/.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.dagster_dev import cli, cortex_dev, successful_run, wait_for

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "ui"
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _browser(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)


def _dismiss_popups(page) -> None:
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()


def test_graph_run_and_bulletin_preview_are_visible(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_BRAIN_LINGER_SECONDS", "2")  # the run ends soon after its answer
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with cortex_dev(tmp_path / "home", tmp_path / "dev.log") as (port, env, _):
        cli("send", "telegram", "I prefer window seats on long flights.", env=env)
        wait_for(lambda: successful_run(port, "process_messages"), 90, "the run started for the message")
        cli("run", env=env, timeout=300)  # materializes memory and the bulletin into this instance
        base = f"http://127.0.0.1:{port}"
        with sync_api.sync_playwright() as playwright:
            browser = _browser(playwright)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})

            page.goto(f"{base}/asset-groups")
            page.get_by_text("Global asset lineage").first.wait_for(timeout=60_000)
            page.get_by_text("publish").first.wait_for(timeout=60_000)
            _dismiss_popups(page)
            for group in ("ingest", "brain", "memory", "publish"):  # the architecture, as groups
                assert page.get_by_text(group, exact=True).count() > 0
            page.screenshot(path=str(ARTIFACTS / "asset-graph.png"))

            page.goto(f"{base}/runs")
            page.get_by_text("process_messages").first.wait_for(timeout=60_000)
            _dismiss_popups(page)
            # why the run exists: `cortex dev` started it as the message arrived (the sensor is the fallback)
            assert page.get_by_text(re.compile("run_starter|inbox_sensor")).count() > 0
            assert page.get_by_text("Success").count() >= 2
            page.screenshot(path=str(ARTIFACTS / "runs.png"))

            page.goto(f"{base}/assets/memory_bulletin")
            page.get_by_text("Latest materialization").first.wait_for(timeout=60_000)
            _dismiss_popups(page)
            page.get_by_text("preview", exact=True).first.wait_for(timeout=30_000)
            show = page.get_by_role("button", name="Show Markdown")
            if show.count():
                show.first.click()
            heading = page.get_by_text("Memory Bulletin").first
            heading.wait_for(timeout=30_000)
            heading.scroll_into_view_if_needed()
            assert page.get_by_text("window seats").count() > 0
            page.screenshot(path=str(ARTIFACTS / "memory-bulletin.png"))
            browser.close()
