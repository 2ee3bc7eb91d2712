"""Token counts before running (issue 47) against the real engine's own counts: ``llm_count_tokens``
row by row, and EXPLAIN's engine prompt tokens of a whole call (every relQuery it sends)."""

from __future__ import annotations

import threading
from typing import Any

import duckdb
import pytest
from waits import result_within

import relserve.duckdb
from relserve.estimate.prompt_tokens import count_row_tokens, engine_tokenizer, model_tokenizer
from relserve.functions import make_call
from relserve.planner.plan_and_run import run_rows

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]

REVIEWS = [
    "A wonderful, moving film with a score I still hum.",
    "Boring and far too long; I left before the end.",
    "I loved every minute, and the lead is a revelation.",
    "Ünïcödé — emoji 🎬 and tabs\tinside.",
    "Fine.",
]
SCHEMA = {"type": "object", "properties": {"rating": {"type": "integer"}}, "required": ["rating"]}


class Counting:
    """The real engine, keeping every relQuery's prompts and handle: after a call, the engine's
    own prompt tokens of each prompt and of everything the call sent."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.sent: list[tuple[Any, Any]] = []
        self._lock = threading.Lock()

    def submit(self, rq: Any, *args: Any, **kwargs: Any) -> Any:
        handle = self._engine.submit(rq, *args, **kwargs)
        with self._lock:
            self.sent.append((rq, handle))
        return handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    # (both read after the call returned, when every relQuery it sent has ended: the limit guards a hang)
    def prompt_tokens(self) -> int:
        return sum(result_within(h, 120, f"relQuery {h.rel_id} to end after its call did").stats.prompt_tokens for _, h in self.sent)

    def per_prompt(self) -> dict[str, int]:
        out = {}
        for rq, h in self.sent:
            for prompt, row in zip(rq.prompts, result_within(h, 120, f"relQuery {h.rel_id} to end after its call did").rows):
                out[prompt] = row.prompt_tokens
        return out


@pytest.mark.parametrize(
    "fn, template, extra",
    [
        ("llm_map", "Summarize in three words: {review}", dict(max_tokens=4)),
        ("llm_map", "Summarize: {review}", dict(max_tokens=4, system="You answer in French.")),
        ("llm_filter", "Review: {review}\nIs this review positive?", dict(method="score")),
        ("llm_filter", "Is this review positive? {review}", dict(method="generate")),
        ("llm_classify", "Review: {review}\nWhat is the tone of this review?", dict(method="score", labels=["positive", "negative", "mixed"])),
        ("llm_classify", "Tone of {review}", dict(method="score", labels=["positive", "negative"], prompt_shape="chat_answer")),
        ("llm_extract", "Rate this review from 1 to 5: {review}", dict(json_schema=SCHEMA, max_tokens=8)),
    ],
)
def test_each_rows_count_is_the_engines_own(engine, fn, template, extra):
    call = make_call(fn, template, **extra)
    counting = Counting(engine)
    rows = [(r,) for r in REVIEWS]
    run_rows(call, rows, engine=counting, cache=False, progress=False)
    engine_counts = counting.per_prompt()
    plan_prompts = list(engine_counts)
    assert len(plan_prompts) == len(REVIEWS)
    counted = count_row_tokens(call, rows, engine_tokenizer(engine))
    # the model's tokenizer loaded without the engine counts the same
    assert count_row_tokens(call, rows, model_tokenizer(engine.model_path)) == counted
    # each row's count is the engine's count of that row's prompt
    from relserve.prompt_rendering import render

    assert counted == [engine_counts[render(call, r)] for r in rows]


def test_llm_count_tokens_in_duckdb_is_the_engines_count(engine):
    con = duckdb.connect()
    relserve.duckdb.install(con, engine=engine, progress=False)
    con.execute("CREATE TABLE r AS SELECT * FROM (VALUES (1, ?), (2, ?), (3, ?), (4, NULL)) t(id, review)", REVIEWS[:3])
    counted = con.sql(
        "SELECT id, llm_count_tokens('Summarize in three words: {review}', review, llm_options(max_tokens := 4)) AS m, "
        "llm_count_tokens('llm_classify', 'Tone of {review}', ['positive', 'negative'], review, "
        "llm_options(method := 'score', prompt_shape := 'chat_answer')) AS c FROM r ORDER BY id"
    ).fetchall()
    assert counted[3] == (4, None, None)
    counting = Counting(engine)
    relserve.duckdb.install(con, engine=counting, progress=False, cache=False)
    con.sql("SELECT llm_map('Summarize in three words: {review}', review, llm_options(max_tokens := 4)) FROM r WHERE id < 4").fetchall()
    maps = counting.per_prompt()
    counting.sent.clear()
    con.sql("SELECT llm_classify('Tone of {review}', ['positive', 'negative'], review, "
            "llm_options(method := 'score', prompt_shape := 'chat_answer')) FROM r WHERE id < 4").fetchall()
    classes = counting.per_prompt()
    assert [m for _, m, _ in counted[:3]] == [maps[f"Summarize in three words: {r}"] for r in REVIEWS[:3]]
    assert sorted(c for _, _, c in counted[:3]) == sorted(classes.values())
    # the NULL row is logged like a failed call
    assert "placeholder {review} is NULL" in relserve.duckdb.errors(con).fetchall()[0][3]


def test_explain_counts_what_the_call_sends(engine):
    """EXPLAIN's engine prompt tokens are the sum of the engine's prompt tokens of every relQuery
    the call sends: exact for a map, and for a filter whose layout and examples its first
    relQuery chose (its second relQuery); the first one's count is an estimate that says so."""
    rows = [(f"Review {i}: " + REVIEWS[i % len(REVIEWS)],) for i in range(50)]
    for call, part, exact in [
        (make_call("llm_map", "Summarize in three words: {review}", max_tokens=4), rows[:10], True),
        (make_call("llm_filter", "Review: {review}\nIs this review positive?"), rows[:30], False),
        (make_call("llm_filter", "Review: {review}\nIs this review positive?"), rows[30:], True),
        (make_call("llm_classify", "Review: {review}\nTone?", labels=["positive", "negative", "mixed"]), rows[:30], False),
        (make_call("llm_classify", "Review: {review}\nTone?", labels=["positive", "negative", "mixed"]), rows[30:], True),
    ]:
        counting = Counting(engine)
        ex = run_rows(call, part, engine=counting, cache=False, explain_only=True).explain
        run_rows(call, part, engine=counting, cache=False, progress=False)
        assert ex.estimate.exact is exact, ex.estimate.inexact
        sent_rows = sum(len(rq.prompts) for rq, _ in counting.sent)
        if exact:
            assert ex.estimate.prompt_tokens == counting.prompt_tokens()
            assert ex.estimate.engine_rows == sent_rows
        else:  # which rows (and layout) the first pass picks is known once it ran: counted near
            assert "first pass" in " ".join(ex.estimate.inexact)
            assert abs(ex.estimate.prompt_tokens - counting.prompt_tokens()) < 0.5 * counting.prompt_tokens()
            # (and the three content-free rows, which a template has scored once per process: the
            # estimate counts them whether or not an earlier call of the template scored them)
            assert abs(ex.estimate.engine_rows - sent_rows) <= len(call.choices) + 3
