"""Doubles for the model cascade's fast tests (not a test module): an engine that answers by a
rule on the row's own text, with the engine's handle (sync and async readers, cancel), and an
embedder whose features carry the same rule (or nothing)."""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable

import numpy as np
from engine_doubles import best_label
from waits import StillWaiting

from relserve.engine.handle import RelQueryHandle
from relserve.results import RelQueryResult, RelQueryStats, RowResult

#: rel_id prefixes of the label machinery's own relQueries (not a call's rows)
LABEL_MACHINERY = ("bootstrap-", "prior-", "answer-field-", "adaptive-")


def own_text(prompt: str) -> str:
    """The row's text: what follows the last 'Review:' (the examples in front end before it)."""
    return prompt.rsplit("Review:", 1)[-1]


def good_rule(text: str) -> str:
    return "yes" if "good" in text else "no"


class RuleEngine:
    """Answers each row by ``rule(own text)``; a row whose text ``fails(text)`` is an engine
    error. ``hold(rel_id)``, when it gives a number n for a relQuery of rows, answers its first n
    rows and holds the rest until the relQuery is cancelled (``holding`` is set then): a test
    cancels at a point it chose, not after a delay."""

    model_id = "rule-model"
    policy = "rule"
    uses_plugin = False
    max_model_len = 2048
    #: seconds a held relQuery waits for its cancel before it fails naming the cancel (a test
    #: that never cancels fails, not hangs)
    hold_limit_s = 120.0

    def __init__(self, rule: Callable[[str], str] = good_rule, *, hold: Callable[[str], int | None] | None = None,
                 fails: Callable[[str], bool] | None = None) -> None:
        self.rule, self.hold, self.fails = rule, hold, fails
        #: prompts of every relQuery of rows (not first passes or probes), in submission order
        self.submitted: list[list[str]] = []
        self.rel_ids: list[str] = []
        self.cancelled: list[str] = []
        #: set once a held relQuery has answered its first rows and waits for its cancel
        self.holding = threading.Event()
        #: rows answered so far, per relQuery id
        self.answered: dict[str, int] = {}

    def warm_prefix(self, text: str = "", system: str | None = None) -> int:
        return 0

    def submit(self, rq) -> RelQueryHandle:
        prompts = [str(p) for p in rq.render()]
        if not str(rq.rel_id).startswith(LABEL_MACHINERY):
            self.submitted.append(prompts)
            self.rel_ids.append(rq.rel_id)
        stop = threading.Event()

        def cancel():
            self.cancelled.append(rq.rel_id)
            stop.set()

        handle = RelQueryHandle(rq.rel_id, len(prompts), rq.on_error, cancel)
        held_after = None if self.hold is None or str(rq.rel_id).startswith(LABEL_MACHINERY) else self.hold(str(rq.rel_id))

        def work():
            try:
                answer_rows()
            except StillWaiting as e:  # every caller waiting on the relQuery hears what it waited for
                handle.finish(e)

        def answer_rows():
            rows = []
            for i, p in enumerate(prompts):
                if i == held_after:
                    self.holding.set()
                    if not stop.wait(self.hold_limit_s):
                        raise StillWaiting(self.hold_limit_s, f"the test to cancel relQuery {rq.rel_id}, held after {i} rows")
                text = own_text(p)
                if stop.is_set():
                    row = RowResult(i, error="cancelled", finish_reason="abort")
                elif self.fails is not None and self.fails(text):
                    row = RowResult(i, error="engine: row too long for the model", finish_reason="error")
                else:
                    answer = self.rule(text)
                    row = RowResult(i, text=answer, prompt_tokens=len(p.split()), output_tokens=1, finish_reason="stop")
                    if rq.score_labels:  # the rule's answer holds 90% of the labels' probability
                        rest = 0.1 / (len(rq.choices) - 1)
                        row.label_logprobs = {c: math.log(0.9 if c == answer else rest) for c in rq.choices}
                        row.text = best_label(row.label_logprobs, rq.label_prior)
                rows.append(row)
                self.answered[rq.rel_id] = self.answered.get(rq.rel_id, 0) + 1
                handle.row_done(row)
            stats = RelQueryStats(rq.rel_id, len(rows), num_errors=sum(r.error is not None for r in rows), policy=self.policy)
            stats.latency_s = 0.0
            handle.finish(RelQueryResult(rows, stats, cancelled=stop.is_set()))

        threading.Thread(target=work, daemon=True).start()
        return handle

    def wait_holding(self, timeout: float = 60.0) -> None:
        assert self.holding.wait(timeout), f"still waiting after {timeout:.0f} s for a held relQuery"


class RuleEmbedder:
    """Features that carry ``good_rule`` (the word 'good'), plus noise from the text's hash;
    ``informative=False``: the noise only (a proxy learns nothing)."""

    name = "rule"

    def __init__(self, informative: bool = True) -> None:
        self.informative = informative
        #: the size of every chunk embedded
        self.calls: list[int] = []

    def embed(self, texts):
        self.calls.append(len(texts))
        out = []
        for t in texts:
            seed = int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)
            noise = np.random.default_rng(seed).normal(size=4)
            signal = (3.0 if "good" in t else -3.0) if self.informative else 0.0
            out.append([signal, *noise])
        return np.array(out, dtype=np.float32)


def reviews(n: int) -> list[str]:
    """Rows whose every third one is 'good'."""
    return [f"item {i} is {'good' if i % 3 == 0 else 'bad'} value" for i in range(n)]
