"""End-to-end: the ``SubmitPanel`` in a real JupyterLab page, in headless Chromium.

The test opens ``panel_e2e.ipynb`` (simulated SGLang servers on the kernel loop, a
``RolloutController``, a ``SingleTurnWorkflow`` with an exact-match reward, and a panel
pre-filled with arithmetic prompts), runs all cells from the Run menu, clicks the panel's
Submit button in the page, waits until the counts shown in the page say every task is done,
then reads the task ids, statuses and rewards from the page. Screenshots of the panel
before, during and after go to ``ROLLOUT_KIT_ARTIFACTS``; with ``ROLLOUT_KIT_UPDATE_DOCS=1``
the "after" one is also written to ``docs/panel.png`` (and the error one to
``docs/panel-error.png``).

Everything read here is what the browser renders, never kernel state.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "panel_e2e.ipynb"
RUN_TIMEOUT_S = 60.0
DONE_TIMEOUT_S = 60.0
TERMINAL = {"accepted", "rejected", "failed", "cancelled"}
COUNT_KEYS = ("submitted", "queued", "running", "accepted", "rejected", "failed", "cancelled")
DOCS_MAX_BYTES = 200_000


# -- reading the page -------------------------------------------------------------------------
def parse_counts(text: str) -> dict[str, int]:
    """``"submitted 6 · queued 0 · …"`` → ``{"submitted": 6, "queued": 0, …}``."""
    found = {k: int(v) for k, v in re.findall(r"([a-z]+)\s+(\d+)", text)}
    missing = [k for k in COUNT_KEYS if k not in found]
    if missing:
        raise AssertionError(f"counts line {text!r} lacks {missing}")
    return {k: found[k] for k in COUNT_KEYS}


def parse_ids(text: str) -> list[int]:
    """``"task ids: 0, 1, 2"`` → ``[0, 1, 2]`` (``[]`` before any submission)."""
    _head, sep, rest = text.partition("task ids:")
    assert sep, f"not a task-id line: {text!r}"
    return [int(tok) for tok in re.findall(r"\d+", rest.split("(")[0])]


def test_parsers() -> None:
    assert parse_ids("task ids: –") == []
    assert parse_ids("task ids: 0, 1, 12") == [0, 1, 12]
    assert parse_ids("task ids: 20, 21 (+20 earlier)") == [20, 21]
    counts = parse_counts("submitted 6 · queued 0 · running 1 · accepted 4 · rejected 1"
                          " · failed 0 · cancelled 0")
    assert counts == {"submitted": 6, "queued": 0, "running": 1, "accepted": 4,
                      "rejected": 1, "failed": 0, "cancelled": 0}
    with pytest.raises(AssertionError):
        parse_counts("submitted 6")


class PanelPage:
    """The rendered panel in the page, located by what a user sees."""

    def __init__(self, page: Any) -> None:
        self.page = page
        submit = page.get_by_role("button", name="Submit", exact=True)
        self.root = page.locator(".jp-OutputArea-output").filter(has=submit).last
        self.submit = self.root.get_by_role("button", name="Submit", exact=True)
        self.prompt = self.root.locator(".widget-textarea textarea").first
        self.counts = self.root.locator(".widget-html-content").filter(has_text="submitted ")
        self.ids = self.root.locator(".widget-html-content").filter(has_text="task ids:")
        self.error = self.root.locator(".widget-html-content span[style*='color']")
        self.table = self.root.locator("table.dataframe").last  # the newest one

    def read_counts(self) -> dict[str, int]:
        return parse_counts(self.counts.first.inner_text())

    def read_ids(self) -> list[int]:
        return parse_ids(self.ids.first.inner_text())

    def read_table(self) -> list[dict[str, str]]:
        """Rows of the results table as shown: ``task_id`` plus one key per column."""
        rows: list[dict[str, str]] = self.table.evaluate("""t => {
            // pandas writes column names in the first header row (index name in a second)
            const heads = t.querySelector('thead tr');
            const cols = [...heads.querySelectorAll('th')].map(h => h.innerText.trim());
            return [...t.querySelectorAll('tbody tr')].map(tr => {
                const cells = [...tr.querySelectorAll('th, td')].map(c => c.innerText.trim());
                const row = {task_id: cells[0]};
                cols.slice(1).forEach((c, i) => { row[c] = cells[i + 1]; });
                return row;
            });
        }""")
        return rows

    def shot(self, path: Path) -> Path:
        self.root.scroll_into_view_if_needed()
        self.root.screenshot(path=str(path))
        return path


def wait_for_kernel(page: Any) -> None:
    """Wait until the notebook's kernel is started and idle (Run All before that races the
    session start and JupyterLab asks for a kernel); accept that dialog if it shows anyway."""
    # the status bar reads "No Kernel | Initializing" until the session has its kernel
    idle = page.locator(".jp-StatusBar-Widget").get_by_text(re.compile(r"\(ipykernel\) \| Idle"))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        dialog = page.locator(".jp-Dialog").filter(has_text="Select Kernel")
        if dialog.count():
            dialog.get_by_role("button", name="Select", exact=True).click()
        if idle.count():
            return
        page.wait_for_timeout(200)
    raise AssertionError(f"the kernel did not become idle in {RUN_TIMEOUT_S:.0f} s")


def run_all_cells(page: Any) -> None:
    """Run every cell from JupyterLab's Run menu, as a user would."""
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def wait_for_panel(page: Any, lab: Any) -> PanelPage:
    """Wait until the panel's Submit button is rendered; fail early on a cell error."""
    submit = page.locator(".jp-OutputArea-output").get_by_role("button", name="Submit",
                                                                exact=True)
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                          ", .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        if submit.count():
            submit.first.wait_for(state="visible", timeout=5_000)
            return PanelPage(page)
        if page.locator("[data-mime-type='application/vnd.jupyter.error']").count():
            raise AssertionError("a notebook cell raised:\n"
                                 + "\n".join(errors.all_inner_texts())[-3000:])
        page.wait_for_timeout(200)
    raise AssertionError(f"the panel did not render in {RUN_TIMEOUT_S:.0f} s; "
                         f"console errors: {page.console_errors[-5:]}\n"
                         f"server log:\n{lab.log_tail(2000)}")


def wait_for_partial_progress(panel: PanelPage, n: int, patience_s: float = 5.0
                              ) -> dict[str, int]:
    """Best effort, for the "during" screenshot: wait a little for some but not all tasks
    to be done. Returns the counts shown either way (no assertion on timing)."""
    deadline = time.monotonic() + patience_s
    counts = panel.read_counts()
    while time.monotonic() < deadline:
        done = sum(counts[k] for k in TERMINAL)
        if 0 < done < n or done == n:
            break
        panel.page.wait_for_timeout(100)
        counts = panel.read_counts()
    return counts


def wait_until_done(panel: PanelPage, n: int) -> dict[str, int]:
    """Poll the counts shown in the page until ``n`` tasks are submitted and all done."""
    deadline = time.monotonic() + DONE_TIMEOUT_S
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = panel.read_counts()
        done = sum(counts[k] for k in TERMINAL)
        if counts["submitted"] == n and done == n and not counts["queued"] + counts["running"]:
            return counts
        panel.page.wait_for_timeout(200)
    raise AssertionError(f"tasks not done after {DONE_TIMEOUT_S:.0f} s; page shows {counts}; "
                         f"panel error: {panel.error.all_inner_texts()}")


def wait_for_final_table(panel: PanelPage, n: int) -> list[dict[str, str]]:
    """Poll the newest results table until it lists ``n`` tasks, none of them pending."""
    deadline = time.monotonic() + 10.0
    rows: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        if panel.table.count():
            try:
                rows = panel.read_table()
            except Exception:  # redrawn (detached) between locating and reading it
                rows = []
            if len(rows) == n and all(r.get("status") in TERMINAL for r in rows):
                return rows
        panel.page.wait_for_timeout(200)
    raise AssertionError(f"the results table never showed {n} finished tasks: {rows}")


def save_doc(src: Path, name: str) -> None:
    """Copy a screenshot into ``docs/`` (only with ``ROLLOUT_KIT_UPDATE_DOCS=1``), shrunk to a
    palette PNG when it is larger than ``DOCS_MAX_BYTES``."""
    if os.environ.get("ROLLOUT_KIT_UPDATE_DOCS") != "1":
        return
    from PIL import Image

    dest = REPO / "docs" / name
    dest.parent.mkdir(exist_ok=True)
    shutil.copyfile(src, dest)
    if dest.stat().st_size > DOCS_MAX_BYTES:
        with Image.open(src) as img:
            img.convert("RGB").quantize(colors=128).save(dest, optimize=True)
    assert dest.stat().st_size <= DOCS_MAX_BYTES, f"{dest} is {dest.stat().st_size} bytes"


@pytest.fixture(scope="module")
def panel(browser: Any, lab: Any, artifacts: Path) -> Iterator[PanelPage]:
    """The notebook opened in Chromium with all its cells run and the panel rendered."""
    page = browser.new_page()
    page.console_errors = []
    page.on("console", lambda m: page.console_errors.append(m.text)
            if m.type == "error" else None)
    try:
        page.goto(lab.url(f"lab/tree/{NOTEBOOK}"))
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=RUN_TIMEOUT_S * 1000)
        wait_for_kernel(page)
        run_all_cells(page)
        try:
            ready = wait_for_panel(page, lab)
        except AssertionError:
            page.screenshot(path=str(artifacts / "page-on-failure.png"))
            raise
        yield ready
    finally:
        page.close()


# -- tests ------------------------------------------------------------------------------------
def test_submit_runs_every_prompt_to_a_terminal_status(panel: PanelPage,
                                                       artifacts: Path) -> None:
    prompts = [ln for ln in panel.prompt.input_value().splitlines() if ln.strip()]
    n = len(prompts)
    assert n >= 2, f"the notebook should pre-fill several prompts, page shows {prompts}"
    assert panel.read_ids() == []
    assert panel.read_counts()["submitted"] == 0
    before = panel.shot(artifacts / "panel-before.png")

    panel.submit.click()
    panel.page.wait_for_function(
        "el => /task ids: \\d/.test(el.innerText)", arg=panel.ids.first.element_handle(),
        timeout=20_000)
    during_counts = wait_for_partial_progress(panel, n)
    during = panel.shot(artifacts / "panel-during.png")

    counts = wait_until_done(panel, n)
    rows = wait_for_final_table(panel, n)  # redrawn on the same refresh tick as the counts
    panel.page.wait_for_timeout(300)  # let the timeline image paint
    after = panel.shot(artifacts / "panel-after.png")

    # what the page shows: ids, one up-to-date table, statuses, rewards, servers, the bar
    ids = panel.read_ids()
    assert ids == list(range(n)), f"page shows task ids {ids}"
    tables = panel.root.locator("table.dataframe").count()
    assert tables == 1, f"the panel shows {tables} results tables (old ones not cleared)"
    assert [int(r["task_id"]) for r in rows] == ids
    statuses = {int(r["task_id"]): r["status"] for r in rows}
    assert set(statuses.values()) <= TERMINAL, statuses
    assert counts["failed"] == 0 and counts["cancelled"] == 0, counts
    assert counts["accepted"] + counts["rejected"] == n
    assert sum(s == "accepted" for s in statuses.values()) == counts["accepted"]
    # the simulated model can only add: exact match is right on sums, wrong on products;
    # task i ran prompt line i, so rewards line up with the prompts shown in the page
    rewards = [float(r["reward"]) for r in rows]
    assert rewards == [1.0 if "+" in p else 0.0 for p in prompts], (prompts, rewards)
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", r["server"]) for r in rows), rows
    bar = panel.root.locator(".widget-hprogress .progress-bar").first
    assert bar.evaluate("b => b.style.width") == "100%"
    assert "progress-bar-success" in (bar.get_attribute("class") or "")
    assert panel.root.locator("img").count() == 1, "expected one timeline image"
    assert panel.error.count() == 0 or not panel.error.first.inner_text().strip()
    for path in (before, during, after):
        assert path.stat().st_size > 1000
    print(f"\nduring: {during_counts}\nafter: {counts}\nrows: {rows}\nartifacts: {artifacts}")
    save_doc(after, "panel.png")


def test_empty_prompt_shows_the_panel_error(panel: PanelPage, artifacts: Path) -> None:
    kept = panel.prompt.input_value()
    panel.prompt.fill("")
    panel.prompt.blur()
    panel.submit.click()
    try:
        panel.error.first.wait_for(state="visible", timeout=10_000)
        message = panel.error.first.inner_text()
        assert "enter at least one prompt" in message, message
        color = panel.error.first.evaluate("el => getComputedStyle(el).color")
        assert color == "rgb(185, 28, 28)", color  # the panel's red
        shot = panel.shot(artifacts / "panel-error.png")
        save_doc(shot, "panel-error.png")
    finally:
        panel.prompt.fill(kept)
