"""The dashboard in a real headless browser (issue 25, item 2): Debian's ``chromium`` driven by
``chromedriver`` through selenium, against ``engram serve`` as a subprocess.

A person logs in (after a wrong token), searches their memory, opens a pattern, forgets it
(the confirmation dialog accepted; then the database is checked), sees the cost plot rendered
(a screenshot of the chart area is not blank), watches a new message arrive on the live feed,
and logs out. ``.ci/run`` installs ``chromium`` and ``chromium-driver`` when they are missing.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
from dashboard_outside import TOKEN, A, add_pattern, add_usage, serving
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from runtime.db import Database

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser() -> Any:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    assert not missing, f"install Debian's chromium and chromium-driver (missing {missing})"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1800"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def blank(png: bytes) -> bool:
    """Whether a screenshot is (nearly) one colour: no plot drawn."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1_000_000) or []
    non_white = sum(n for n, c in colours if c != (255, 255, 255))
    return len(colours) < 4 or non_white < image.width * image.height * 0.01


def session(base: str) -> dict[str, Any]:
    """The browser's part (blocking: run in a thread). What it saw."""
    seen: dict[str, Any] = {}
    driver = browser()
    wait = WebDriverWait(driver, 15)
    try:
        driver.get(f"{base}/")
        wait.until(expected_conditions.presence_of_element_located((By.ID, "token")))
        driver.find_element(By.ID, "token").send_keys("not-the-token-at-all")
        driver.find_element(By.ID, "login").click()
        seen["wrong"] = wait.until(
            expected_conditions.presence_of_element_located((By.ID, "error"))
        ).text
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(expected_conditions.presence_of_element_located((By.ID, "logout")))
        driver.get(f"{base}/chats/{A}/memory")
        driver.find_element(By.ID, "q").send_keys("bees")
        driver.find_element(By.ID, "go").click()
        row = wait.until(
            expected_conditions.presence_of_element_located(
                (By.PARTIAL_LINK_TEXT, "User keeps bees")
            )
        )
        row.click()
        seen["pattern"] = wait.until(
            expected_conditions.presence_of_element_located((By.ID, "content"))
        ).text
        driver.find_element(By.ID, "forget").click()
        wait.until(expected_conditions.alert_is_present()).accept()
        seen["done"] = wait.until(
            expected_conditions.presence_of_element_located((By.ID, "done"))
        ).text
        driver.get(f"{base}/usage?chat={A}")
        chart = wait.until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#plot-purpose svg"))
        )
        seen["plot_blank"] = blank(chart.screenshot_as_png)
        seen["empty_blank"] = blank(
            driver.find_element(By.ID, "latency").screenshot_as_png
        )  # a table of text: the check is not fooled by any element
        driver.get(f"{base}/chats/{A}/conversation")
        wait.until(expected_conditions.presence_of_element_located((By.ID, "feed")))
        seen["feed_ready"] = True
        seen["driver"] = driver
    except BaseException:
        driver.quit()
        raise
    return seen


def feed_and_logout(seen: dict[str, Any], base: str) -> None:
    driver = seen.pop("driver")
    try:
        wait = WebDriverWait(driver, 20)
        seen["feed"] = wait.until(lambda d: d.find_element(By.ID, "feed").text or False)
        driver.find_element(By.ID, "logout").click()
        wait.until(expected_conditions.presence_of_element_located((By.ID, "token")))
        driver.get(f"{base}/chats/{A}/memory")
        seen["after_logout"] = driver.current_url
    finally:
        driver.quit()


async def test_a_person_uses_the_dashboard_in_a_browser(
    tmp_path: Path, db: Database, database_url: str
) -> None:
    pid = await add_pattern(db, A, "User keeps bees on the allotment", "preference")
    await add_pattern(db, A, "User runs on Sunday mornings")
    await add_usage(db, A)
    async with serving(tmp_path, database_url, DASHBOARD_TOKEN=TOKEN) as engram:
        base = f"http://127.0.0.1:{engram.port}/dashboard"
        seen = await trio.to_thread.run_sync(session, base)
        await db.execute(
            "INSERT INTO chat_messages (chat_id, role, content) VALUES ($1, 'user', $2)",
            A,
            "The first swarm of the year",
        )
        await trio.to_thread.run_sync(feed_and_logout, seen, base)
    assert "not right" in seen["wrong"]
    assert seen["pattern"] == "User keeps bees on the allotment"
    assert "Forgotten" in seen["done"]
    assert await db.fetchval("SELECT count(*) FROM patterns WHERE id = $1", pid) == 0
    assert seen["plot_blank"] is False
    assert "first swarm" in seen["feed"]
    assert seen["after_logout"].endswith("/dashboard/login")
