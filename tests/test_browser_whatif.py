"""The "What if" tab in a real browser (Debian chromium through playwright, tiny-llama pair, n = 7,
1440x900): a short greedy race on the Race tab, then the tab's journey. Selecting the tab lists the
race, Replay records it ("Modeled replay"), and a moved alpha slider re-plans on the server and is
redrawn in the page; each move is timed in the page itself (performance.now() from the field's input
event to the first mutation that shows the new values) and the times are printed, never asserted.
The figure's title names the modeled replay and the profile; the synthetic profile says so.
Screenshots of the tab go to /tmp/whatif_*.png. Never runs `playwright install`.
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

from apptools import neutral_lookup_calibration  # noqa: E402

VIEWPORT = {"width": 1440, "height": 900}
TIMEOUT_MS = 180_000
PROMPT = "Count to ten, then count back to one."
SHOTS = "/tmp/whatif_{}.png"
# the CPU time of the re-plan: its wall time also holds waiting for cores the browser and others hold
REPLANNED = re.compile(r"re-planned in \d+ ms \((\d+) ms of CPU")

# Arms a timer: t0 is the first `input` or `mousedown` event after this call (typing into a slider's
# number box dispatches its change at once; a dropdown option is picked on mousedown), `done` the first
# moment every named condition holds, checked on every DOM mutation and every 5 ms besides.
TIMER = """(conditions) => {
  const tests = Object.fromEntries(Object.entries(conditions).map(([k, body]) => [k, new Function(body)]));
  const timer = window.lsTimer = {t0: null, seen: {}, done: null};
  const start = () => { if (timer.t0 === null) timer.t0 = performance.now(); };
  document.addEventListener('input', start, {capture: true});
  document.addEventListener('mousedown', start, {capture: true});
  const check = () => {
    if (timer.t0 === null || timer.done !== null) return;
    const now = performance.now();
    for (const [k, test] of Object.entries(tests)) {
      let ok = false;
      try { ok = !!test(); } catch (e) { ok = false; }
      if (ok && !(k in timer.seen)) timer.seen[k] = now - timer.t0;
      if (!ok) delete timer.seen[k];
    }
    if (Object.keys(tests).every(k => k in timer.seen)) {
      timer.done = now - timer.t0;
      observer.disconnect();
      clearInterval(poll);
      document.removeEventListener('input', start, {capture: true});
      document.removeEventListener('mousedown', start, {capture: true});
    }
  };
  const observer = new MutationObserver(check);
  observer.observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
  const poll = setInterval(check, 5);
}"""
# JS bodies of the conditions
STATUS = "document.querySelector('#ls-whatif-status').innerText"
LENGTHS = "document.querySelector('#ls-whatif-lengths .js-plotly-plot')"
GRID = "document.querySelector('#ls-whatif-grid .js-plotly-plot')"
LEGEND = f"[...{LENGTHS}.querySelectorAll('.legendtext')].map(e => e.textContent)"
TABLE = "document.querySelector('#ls-whatif-table').innerText"
# the lengths figure: title, legend and the traces' lengths; the grid's outlined cell (alpha row, d_max column)
FIGURES = f"""() => {{
  const gd = {LENGTHS}, grid = {GRID};
  const shape = (grid?._fullLayout.shapes || [])[0];
  const title = gd.querySelector('.gtitle').getBoundingClientRect(), box = gd.getBoundingClientRect();
  return {{
    title: gd._fullLayout.title.text, legend: {LEGEND},
    traces: gd.data.map(t => ({{name: t.name, y: Array.from(t.y || [])}})),
    titleShown: title.width > 0 && title.left >= box.left && title.right <= box.right,
    gridTitle: grid?._fullLayout.title.text,
    chosen: shape ? [grid.data[0].y[Math.round(shape.y0 + 0.5)],
                     grid.data[0].x[Math.round(shape.x0 + 0.5)].split(" ")[0]] : null,
  }};
}}"""


@pytest.fixture(scope="module", autouse=True)
def lookup_calibration(tmp_path_factory):
    with neutral_lookup_calibration(tmp_path_factory.mktemp("lookup")) as path:
        yield path


@contextlib.contextmanager
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-background-networking"]
        )
        try:
            yield chromium
        finally:
            chromium.close()


def number(page, elem_id: str):
    return page.locator(f"#{elem_id} input[type=number]")


def type_into(page, elem_id: str, value) -> None:
    box = number(page, elem_id)
    box.fill(str(value))
    box.press("Tab")  # leaving the field checks it


def timed(page, change, **conditions: str) -> dict:
    """Arm the page's timer, make `change`, and wait until every condition (a JS expression) holds;
    returns the page's times in ms: "done" (all hold) and each condition's first moment."""
    page.evaluate(TIMER, {name: f"return ({body});" for name, body in conditions.items()})
    change()
    page.wait_for_function("window.lsTimer.done !== null", timeout=TIMEOUT_MS)
    return page.evaluate("window.lsTimer")


def server_ms(page) -> int:
    status = page.locator("#ls-whatif-status").inner_text()
    found = REPLANNED.search(status)
    assert found, status
    return int(found.group(1))


def test_replay_a_race_and_replan_it_in_the_browser_at_1440x900(server):
    with browser() as chromium:
        page = chromium.new_page(viewport=VIEWPORT)
        page.goto(server)
        page.wait_for_selector("#ls-status:has-text('Ready')", timeout=TIMEOUT_MS)

        # a short greedy race on the Race tab
        page.locator("#ls-prompt textarea").fill(PROMPT)
        type_into(page, "ls-temperature", 0)
        type_into(page, "ls-max-new", 32)
        page.locator("#ls-run").click()
        page.wait_for_selector("#ls-status:has-text('Finished')", timeout=TIMEOUT_MS)
        page.wait_for_selector("#ls-run:not([disabled])", timeout=TIMEOUT_MS)

        # selecting the tab lists the race; Replay records it
        page.get_by_role("tab", name="What if").click()
        page.wait_for_function(
            "document.querySelector('#ls-whatif-race input').value.includes('Count to ten')", timeout=TIMEOUT_MS
        )
        assert re.search(r"^\w+: Count to ten.*32 tokens\)$", page.locator("#ls-whatif-race input").input_value())
        page.locator("#ls-whatif-replay").click()
        page.wait_for_selector("#ls-whatif-status:has-text('Modeled replay')", timeout=TIMEOUT_MS)
        page.wait_for_selector("#ls-whatif-lengths .js-plotly-plot .gtitle", timeout=TIMEOUT_MS)
        page.wait_for_selector("#ls-whatif-grid .js-plotly-plot .gtitle", timeout=TIMEOUT_MS)
        status = page.locator("#ls-whatif-status").inner_text()
        assert re.search(r"Recorded the drafter's proposals in [\d.]+ s\. Modeled replay of 32 tokens", status), status
        profile = re.search(r"under (.+); re-planned in", status).group(1)
        figures = page.evaluate(FIGURES)
        assert figures["title"].startswith("Modeled replay") and profile in figures["title"], (figures, profile)
        assert figures["titleShown"], figures
        assert profile in figures["gridTitle"]
        static = int(number(page, "ls-whatif-static").input_value()) or 7  # 0 = n, 7 on tiny-llama
        assert any(name.startswith(f"static d = {static}:") for name in figures["legend"]), figures["legend"]
        assert "best schedule (hindsight)" in page.locator("#ls-whatif-table").inner_text()
        server_ms(page)  # the status reports the re-plan's CPU time (printed below; the suite asserts no time)
        for name, elem_id in (("tab", None), ("lengths", "ls-whatif-lengths"), ("grid", "ls-whatif-grid")):
            if elem_id:
                page.locator(f"#{elem_id}").scroll_into_view_if_needed()
            page.screenshot(path=SHOTS.format(name), full_page=name == "tab")

        times = {}
        # the alpha slider, moved five times: the grid outlines the chosen cell (alpha, d_max 24) once redrawn
        assert figures["chosen"] == ["2.2", "24"], figures["chosen"]  # the chosen alpha has its own row
        moves = []
        for alpha in ("4", "16", "1", "8", "2"):
            # the outlined cell's row label is the new alpha (the chosen alpha has a row of its own, so
            # the rows move: 2.2 sits between 2 and 4 until alpha moves to a grid value)
            chosen = (
                f"(() => {{ const s = {GRID}._fullLayout.shapes[0]; "
                f"return !!s && {GRID}.data[0].y[Math.round(s.y0 + 0.5)] === '{alpha}'; }})()"
            )
            moved = timed(page, lambda: number(page, "ls-whatif-alpha").fill(alpha), grid=chosen)
            assert page.evaluate(FIGURES)["chosen"] == [alpha, "24"]
            moved["server"] = server_ms(page)
            moves.append(moved)
        alpha_ms = sorted(m["done"] for m in moves)
        times["alpha"] = {"server": max(m["server"] for m in moves), "done": alpha_ms[len(alpha_ms) // 2]}

        # the static length: the static line and the table's row say the new length once redrawn
        new = 3 if static != 3 else 5
        times["static"] = timed(
            page,
            lambda: number(page, "ls-whatif-static").fill(str(new)),
            lengths=f"{LEGEND}.some(n => n.startsWith('static d = {new}:'))",
            table=f"{TABLE}.includes('static d = {new}')",
        )  # the status comes with them; its text changes in its ms figure at most (read below)
        traces = {t["name"].split(":")[0]: t for t in page.evaluate(FIGURES)["traces"]}
        lengths = traces[f"static d = {new}"]["y"]
        assert lengths[0] == max(lengths) == new, traces  # rounds near the text's end verify fewer
        times["static"]["server"] = server_ms(page)

        # the synthetic profile: the status and both titles name it
        page.locator("#ls-whatif-profile input").click()
        times["synthetic"] = timed(
            page,
            lambda: page.get_by_role("option", name=re.compile(r"^synthetic")).click(),
            status=f"{STATUS}.includes('synthetic')",
            lengths=f"{LENGTHS}._fullLayout.title.text.includes('synthetic')",
        )
        status = page.locator("#ls-whatif-status").inner_text()
        assert "under synthetic" in status and "The synthetic profile is made up" in status, status
        synthetic = re.search(r"under (.+); re-planned in", status).group(1)
        figures = page.evaluate(FIGURES)
        assert figures["title"].startswith("Modeled replay") and synthetic in figures["title"], figures
        assert "synthetic" in figures["gridTitle"]
        times["synthetic"]["server"] = server_ms(page)
        page.screenshot(path=SHOTS.format("synthetic"), full_page=True)

        # a lock-step profile not measured yet: a slider's re-plan never measures, so the status says
        # so, the figures stay under the synthetic profile and the dropdown goes back to it (issue 45)
        page.locator("#ls-whatif-profile input").click()
        page.get_by_role("option", name=re.compile(r"8 requests like this one")).click()
        page.wait_for_selector("#ls-whatif-status:has-text('Not re-planned')", timeout=TIMEOUT_MS)
        page.wait_for_function(
            "document.querySelector('#ls-whatif-profile input').value.startsWith('synthetic')", timeout=TIMEOUT_MS
        )
        page.wait_for_timeout(2000)  # the reverted choice must not re-plan over the message
        status = page.locator("#ls-whatif-status").inner_text()
        assert "press Replay to measure them" in status and "still show the replay under 'synthetic" in status
        assert synthetic in page.evaluate(FIGURES)["title"]

        print("what-if times (ms):", {name: (t["server"], round(t["done"])) for name, t in times.items()})
        print("alpha moves, redrawn after (ms):", [round(ms) for ms in alpha_ms])
        for name, measured in times.items():
            assert set(measured) >= {"server", "done"}, (name, measured)  # each move was timed and printed
            # the browser's redraw is wall clock (printed above, never asserted: a test asserts no wall time)
