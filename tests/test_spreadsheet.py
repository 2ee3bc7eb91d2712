"""The spreadsheet page and the Office add-in's functions script, driven in a real headless
Chromium (Debian's) against a real server on the session engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from server_fixtures import running_server
from waits import run_within

from relserve import RelQuery
from relserve.planner.cache import ResultCache

pytestmark = [pytest.mark.browser, pytest.mark.engine]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TEMPLATE = "Is this review positive? {A} Answer yes or no."
FORMULA = '=LLM("Is this review positive? {A} Answer yes or no.", A2)'
VALUES = ["I loved this film", "Terrible and boring", "I loved this film", "Great acting", "Awful plot"]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    cache = ResultCache(tmp_path_factory.mktemp("sheet-cache") / "results.sqlite")
    with running_server(engine, cache=cache) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "Chromium is not installed (scripts/install.sh --test installs Debian's chromium)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context()
    outside: list[str] = []

    def only_loopback(route):  # nothing may be fetched from anywhere but the server
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_loopback)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.outside, pg.errors = outside, errors
    yield pg
    context.close()


def expected_answers(engine, values, max_tokens=MAX_TOKENS):
    return run_within(engine, RelQuery(TEMPLATE, [{"A": v} for v in values], max_tokens=max_tokens)).texts


def cells_posts(pg):
    posts: list[dict] = []
    pg.on("request", lambda r: posts.append(json.loads(r.post_data)) if r.url.endswith("/v1/cells") else None)
    return posts


def type_into(pg, ref: str, text: str) -> None:
    pg.click(f"#cell-{ref}")
    pg.fill("#formula", text)
    pg.press("#formula", "Enter")


def state(pg, ref: str) -> dict:
    return pg.eval_on_selector(
        f"#cell-{ref}",
        "e => ({text: e.textContent, state: e.dataset.state, cached: e.dataset.cached, at: Number(e.dataset.filledAt), title: e.title})",
    )


def test_fill_down_sends_one_batch_and_fills_cells_as_rows_finish(engine, server, page):
    want = expected_answers(engine, VALUES)
    posts = cells_posts(page)
    page.goto(server.url + "/sheet")
    page.fill("#max-tokens", str(MAX_TOKENS))
    for i, v in enumerate(VALUES):
        type_into(page, f"A{i + 2}", v)
    type_into(page, "B2", FORMULA)
    page.wait_for_selector('#cell-B2[data-state="done"]', timeout=60_000)
    assert len(posts) == 1 and [c["id"] for c in posts[0]["cells"]] == ["B2"]

    page.click("#cell-B2")
    page.click("#cell-B6", modifiers=["Shift"])
    page.keyboard.press("Control+d")
    page.wait_for_function(
        "['B3','B4','B5','B6'].every(r => ['done','error'].includes(document.getElementById('cell-' + r).dataset.state))",
        timeout=120_000,
    )
    # one recalculation, one batch: the four new cells, with references shifted down
    assert len(posts) == 2
    assert posts[1]["cells"] == [
        {"id": f"B{r}", "template": TEMPLATE, "args": [VALUES[r - 2]]} for r in (3, 4, 5, 6)
    ]
    cells = {r: state(page, f"B{r}") for r in range(2, 7)}
    assert [cells[r]["text"] for r in range(2, 7)] == want
    assert {r: c["state"] for r, c in cells.items()} == {r: "done" for r in range(2, 7)}
    # B4 repeats B2's prompt: answered from the cache at once, before the engine's rows came back
    assert [cells[r]["cached"] for r in range(3, 7)] == ["false", "true", "false", "false"]
    assert cells[4]["at"] <= min(cells[r]["at"] for r in (3, 5, 6))  # the cached row first (no time window)
    assert page.outside == [] and page.errors == []

    # recalculating everything: every answer now comes from the cache, in one batch
    page.click("#recalc")
    page.wait_for_function("window.relserveSheet.log.batches.length === 3 && window.relserveSheet.log.batches[2].status === 'finished'")
    assert len(posts) == 3 and len(posts[2]["cells"]) == 5
    assert [state(page, f"B{r}")["cached"] for r in range(2, 7)] == ["true"] * 5
    assert [state(page, f"B{r}")["text"] for r in range(2, 7)] == want


def test_a_bad_formula_is_an_error_cell_and_the_others_still_compute(engine, server, page):
    posts = cells_posts(page)
    page.goto(server.url + "/sheet")
    page.fill("#max-tokens", str(MAX_TOKENS))
    type_into(page, "A2", "Great acting")
    type_into(page, "A3", "Awful plot")
    type_into(page, "C2", '=LLM("Compare {A} with {B}", A2)')
    type_into(page, "C3", '=SUM(A2)')
    page.wait_for_selector('#cell-C2[data-state="error"]', timeout=60_000)
    c2, c3 = state(page, "C2"), state(page, "C3")
    assert c2["text"] == "#ERROR" and c2["title"] == (
        "cell C2: the template has 2 placeholder(s) ({A}, {B}) but 1 value(s) were given; "
        "values fill the placeholders in order of first appearance"
    )
    assert c3["state"] == "error" and c3["title"] == "#NAME? unknown function SUM: only LLM is known"
    assert len(posts) == 1 and [c["id"] for c in posts[0]["cells"]] == ["C2"]  # =SUM never reaches the server
    type_into(page, "B2", FORMULA)
    page.wait_for_selector('#cell-B2[data-state="done"]', timeout=60_000)
    assert state(page, "B2")["text"] == expected_answers(engine, ["Great acting"])[0]


FAKE_OFFICE = """
window.CustomFunctions = {
  registered: {},
  associate(id, fn) { this.registered[id] = fn; },
  ErrorCode: { invalidValue: "#VALUE!", notAvailable: "#N/A" },
  Error: class extends Error { constructor(code, message) { super(message); this.code = code; } },
};
"""


def test_office_addin_batches_one_recalculation_into_one_request(engine, server, page):
    # the add-in sends no max_tokens: llm_map's default of 64 applies
    want = expected_answers(engine, ["Best film ever", "Dreadful", "Best film ever"], max_tokens=64)
    posts = cells_posts(page)
    page.goto(server.url + "/health")  # the add-in runs on the server's origin
    page.add_script_tag(content=FAKE_OFFICE)
    page.add_script_tag(url=server.url + "/addin/functions.js")
    results = page.evaluate(
        """async () => {
            const llm = CustomFunctions.registered["LLM"];
            const inv = (address) => ({ address });
            // what Excel does when a column is filled down: one call per cell, in the same tick
            const calls = [
                llm("Is this review positive? {A} Answer yes or no.", ["Best film ever"], inv("Sheet1!B2")),
                llm("Is this review positive? {A} Answer yes or no.", ["Dreadful"], inv("Sheet1!B3")),
                llm("Is this review positive? {A} Answer yes or no.", ["Best film ever"], inv("Sheet1!B4")),
                llm("Compare {A} with {B}", ["x"], inv("Sheet1!B5")),
            ];
            return Promise.all(calls.map(p => p.then(v => ({ value: v }), e => ({ code: e.code, message: e.message }))));
        }"""
    )
    assert len(posts) == 1 and posts[0]["stream"] is True
    assert [c["template"] for c in posts[0]["cells"]] == ["Is this review positive? {A} Answer yes or no."] * 3 + ["Compare {A} with {B}"]
    assert [r.get("value") for r in results[:3]] == want
    assert results[3] == {
        "code": "#VALUE!",
        "message": "cell Sheet1!B5#4: the template has 2 placeholder(s) ({A}, {B}) but 1 value(s) were given; "
        "values fill the placeholders in order of first appearance",
    }
    assert page.outside == [] and page.errors == []
