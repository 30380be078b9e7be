"""A real browser (Debian chromium driven by playwright) runs a race in the app.

Checks what a user sees: the model loads on page open, a typed prompt races, all three
columns fill with round-grouped text, the prompt is shown escaped, and the inspector's
Plotly charts render. Never runs `playwright install`: it uses /usr/bin/chromium.
"""

from __future__ import annotations

import contextlib
import os
import re

import pytest

CHROMIUM = "/usr/bin/chromium"
LAYER = "e2e"  # tests/conftest.py
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install chromium)"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")

PROMPT = "Compare <b>two</b> & three"
SWEEP_STATUS = "#ls-sweep-status"
CANCEL_NOTE = "#ls-sweep-cancel-note"
TIMEOUT_MS = 180_000


@contextlib.contextmanager
def ready_page(url):
    """A headless chromium page on the app, once the model has loaded."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-background-networking"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_selector("#ls-status:has-text('Ready')", timeout=TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def set_number(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def test_race_in_a_real_browser(server, tmp_path):
    with ready_page(server) as page:
        page.locator("#ls-prompt textarea").fill(PROMPT)
        set_number(page, "ls-max-new", 32)
        page.locator("#ls-run").click()
        page.wait_for_selector("#ls-status:has-text('Finished')", timeout=TIMEOUT_MS)
        texts = [page.locator(f"#ls-col-{m} .ls-text").inner_text() for m in ("static", "libraspec", "oracle")]
        assert all(t.strip() for t in texts) and texts[0] == texts[1] == texts[2]
        for mode in ("static", "libraspec", "oracle"):
            assert page.locator(f"#ls-col-{mode} [title^='round']").count() >= 1
            assert "finished" in page.locator(f"#ls-col-{mode}").inner_text()
        assert PROMPT in page.locator("#ls-status").inner_text()  # shown as text, not markup
        assert page.locator("#ls-status b:has-text('two')").count() == 0
        page.screenshot(path=str(tmp_path / "race.png"), full_page=True)
        page.get_by_role("tab", name="Round inspector").click()
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4", timeout=TIMEOUT_MS)
        page.screenshot(path=str(tmp_path / "inspector.png"), full_page=True)
    assert (tmp_path / "race.png").stat().st_size > 0 and (tmp_path / "inspector.png").stat().st_size > 0


def test_teaching_and_tuning_tabs_in_a_real_browser(server, tmp_path):
    """Step-through, Sweep and Calibration tabs each render their Plotly figures."""
    with ready_page(server) as page:
        page.get_by_role("tab", name="Algorithm step-through").click()
        page.wait_for_selector("#ls-teach-step .js-plotly-plot", timeout=TIMEOUT_MS)
        page.wait_for_selector("#ls-teach-expected .js-plotly-plot", timeout=TIMEOUT_MS)
        page.locator("#ls-teach-next").click()
        page.wait_for_selector("#ls-teach-text:has-text('Step 1 of')", timeout=TIMEOUT_MS)
        page.screenshot(path=str(tmp_path / "teach.png"), full_page=True)
        page.get_by_role("tab", name="Sweep").click()
        page.wait_for_selector("#ls-sweep-plot .js-plotly-plot", timeout=TIMEOUT_MS)
        page.locator("#ls-sweep-alphas textarea").fill("2.2, auto")
        page.locator("#ls-sweep-dmax textarea").fill("8")
        set_number(page, "ls-sweep-count", 1)
        set_number(page, "ls-sweep-max-new", 8)
        page.locator("#ls-sweep-run").click()
        page.wait_for_selector("#ls-sweep-status:has-text('Finished')", timeout=TIMEOUT_MS)
        # AR on the prompt, the two cells replayed, then each cell of its own decisions decoded for real
        assert re.search(r"Finished: ([23])/\1 runs", page.locator(SWEEP_STATUS).inner_text())
        page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)
        page.get_by_role("tab", name="Calibration").click()
        page.locator("#ls-calib-show").click()
        page.wait_for_selector("#ls-calib-plot .js-plotly-plot", timeout=TIMEOUT_MS)
        assert "drafts" in page.locator("#ls-calib-summary").inner_text()
        page.screenshot(path=str(tmp_path / "calibration.png"), full_page=True)
    assert all((tmp_path / f"{name}.png").stat().st_size > 0 for name in ("teach", "sweep", "calibration"))


def test_two_visitors_in_a_real_browser(server):
    """Two pages (two gradio sessions): one's Cancel leaves the other's sweep running past its next run,
    the other's own Cancel stops it, and one's fresh calibration run is not the other's."""
    with ready_page(server) as alice:
        bob = alice.context.browser.new_page(viewport={"width": 1400, "height": 1000})
        bob.goto(server)
        bob.wait_for_selector("#ls-status:has-text('Ready')", timeout=TIMEOUT_MS)
        for page in (alice, bob):
            page.get_by_role("tab", name="Sweep").click()
        alice.locator("#ls-sweep-alphas textarea").fill("1.6, 2.2, 2.6, auto")
        alice.locator("#ls-sweep-dmax textarea").fill("8, 16")
        set_number(alice, "ls-sweep-max-new", 256)  # long enough that Bob's Cancel lands mid-sweep
        alice.locator("#ls-sweep-run").click()  # AR on 3 prompts, 8 cells replayed, up to 3 decoded: 6-12 runs
        alice.wait_for_selector("#ls-sweep-status:has-text('Running')", timeout=TIMEOUT_MS)
        bob.locator("#ls-sweep-cancel").click()
        bob.wait_for_selector(f"{CANCEL_NOTE}:has-text('No sweep of yours is running')", timeout=TIMEOUT_MS)
        status = alice.locator(SWEEP_STATUS).inner_text()
        done = int(re.search(r"Running: (\d+)/\d+ runs", status).group(1))  # Bob's Cancel came mid-sweep
        # a Cancel stops a sweep before its next run: the run under way at Bob's Cancel ends, and Alice's
        # finishing the run after it shows that his Cancel was not hers
        alice.wait_for_function(
            "([selector, done]) => { const m = document.querySelector(selector).innerText"
            ".match(/(Running|Finished): (\\d+)\\//); return m && Number(m[2]) >= done + 2; }",
            arg=[SWEEP_STATUS, done],
            timeout=TIMEOUT_MS,
        )
        assert "Set the grid" in bob.locator(SWEEP_STATUS).inner_text()  # Bob's status: his own, untouched
        assert "Running" in alice.locator(SWEEP_STATUS).inner_text()  # 256 tokens: runs left to cancel
        alice.locator("#ls-sweep-cancel").click()  # acknowledged on its own line; the status is the sweep's
        alice.wait_for_selector(f"{CANCEL_NOTE}:has-text('Cancelling after the current run')", timeout=TIMEOUT_MS)
        alice.wait_for_selector("#ls-sweep-status:has-text('Cancelled')", timeout=TIMEOUT_MS)
        for page in (alice, bob):
            page.get_by_role("tab", name="Calibration").click()
        set_number(alice, "ls-calib-max-new", 8)
        alice.locator("#ls-calib-fresh").click()
        alice.wait_for_selector("#ls-calib-summary:has-text('submitted drafts')", timeout=TIMEOUT_MS)
        assert "(static)" in alice.locator("#ls-calib-summary").inner_text()
        bob.get_by_label("fresh run on the example prompts").check()
        bob.wait_for_selector("#ls-calib-summary:has-text('No submitted drafts yet')", timeout=TIMEOUT_MS)
