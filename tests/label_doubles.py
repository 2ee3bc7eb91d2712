"""An engine double for the label methods' fast tests (not a test module): each scored row's
margin (its first label's log-odds over its second) comes from a function of the row's own text
and the relQuery (its layout: choices and answer field), with the engine's own handle, so the
synchronous surfaces and the server read it alike."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from typing import Any

from relserve.engine.handle import RelQueryHandle
from relserve.results import RelQueryResult, RelQueryStats, RowResult

Margin = Callable[[str, Any], float]


def own_text(prompt: str) -> str:
    """The row's own text: after the worked examples in front (blocks ending in a blank line)."""
    return prompt.rsplit("\n\n", 1)[-1]


class MarginEngine:
    """Scores every row of a ``score_labels`` relQuery by ``margin(own text, relQuery)``."""

    model_id = "margin-model"
    policy = "margin"
    uses_plugin = False
    max_model_len = 2048
    block_size = 16

    def __init__(self, margin: Margin, *, whole_prompt: bool = False) -> None:
        self.margin = margin
        #: the margin function reads the whole prompt (worked examples in front included), not
        #: the row's own text
        self.whole_prompt = whole_prompt
        #: every relQuery submitted (first passes included), in order
        self.relqueries: list[Any] = []
        self._lock = threading.Lock()

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy: Any = None) -> int:
        return 0

    def prompt_token_ids(self, text: str, system: str | None = None) -> list[int]:
        return list(range(len(text.split()) + 2))

    def submit(self, rq: Any, tenancy: Any = None) -> RelQueryHandle:
        with self._lock:
            self.relqueries.append(rq)
        prompts = [str(p) for p in rq.render()]
        handle = RelQueryHandle(rq.rel_id, len(prompts), rq.on_error, lambda: None)
        rows = []
        for i, p in enumerate(prompts):
            text, lps = self.score(p if self.whole_prompt else own_text(p), rq)
            row = RowResult(i, text=text, prompt_tokens=len(p.split()), output_tokens=1,
                            finish_reason="scored", label_logprobs=lps)
            rows.append(row)
            handle.row_done(row)
        stats = RelQueryStats(rq.rel_id, len(rows), policy=self.policy)
        handle.finish(RelQueryResult(rows, stats))
        return handle

    def score(self, text: str, rq: Any) -> tuple[str, dict[str, float]]:
        """A row's answer and label log-probabilities, from its margin over the two labels (any
        other number of labels: no opinion, every label alike)."""
        if len(rq.choices) != 2:
            return rq.choices[0], dict.fromkeys(rq.choices, -math.log(len(rq.choices)))
        m = self.margin(text, rq)
        a, b = rq.choices
        return a if m > 0 else b, {a: -math.log1p(math.exp(-m)), b: -math.log1p(math.exp(m))}


class ChoiceScoresEngine(MarginEngine):
    """Scores every row of a ``score_labels`` relQuery by ``scores(own text, relQuery)``: a log-
    probability per choice, for any number of choices (a join's layout of a row's own value);
    the answer is the best-scored choice."""

    def __init__(self, scores: Callable[[str, Any], dict[str, float]]) -> None:
        super().__init__(lambda text, rq: 0.0)
        self.scores = scores

    def score(self, text: str, rq: Any) -> tuple[str, dict[str, float]]:
        lps = self.scores(text, rq)
        return max(lps, key=lps.get), lps


def strong_engine(is_true: Callable[[str], bool]) -> MarginEngine:
    """A model that separates the rows cleanly in every layout: log-odds +4..+8 for a true row,
    -4..-8 otherwise (the spread from the row's text, so no two rows score alike)."""

    def margin(text: str, rq: Any) -> float:
        spread = 4 + (sum(text.encode()) % 97) / 24
        return spread if is_true(text) else -spread

    return MarginEngine(margin)


def noise_engine(seed: int = 1) -> MarginEngine:
    """A model that cannot tell the rows apart: every margin is noise around 0."""
    rng = random.Random(seed)
    return MarginEngine(lambda text, rq: rng.gauss(0, 0.3))


class LabelEngine:
    """Any number of labels: each label of a row scored by ``scores(own text, labels)``
    (normalised into log-probabilities over the labels)."""

    model_id = "label-model"
    policy = "scripted"
    uses_plugin = False
    max_model_len = 2048
    block_size = 16

    def __init__(self, scores: Callable[[str, list[str]], dict[str, float]]) -> None:
        self.scores = scores
        #: every relQuery submitted (first passes included), in order
        self.relqueries: list[Any] = []

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy=None) -> int:
        return 0

    def prompt_token_ids(self, text: str, system: str | None = None) -> list[int]:
        return list(range(len(text.split()) + 2))

    def submit(self, rq, tenancy=None) -> RelQueryHandle:
        self.relqueries.append(rq)
        prompts = [str(p) for p in rq.render()]
        handle = RelQueryHandle(rq.rel_id, len(prompts), rq.on_error, lambda: None)
        rows = []
        for i, p in enumerate(prompts):
            raw = self.scores(own_text(p), list(rq.choices))
            z = math.log(sum(math.exp(v) for v in raw.values()))
            lps = {label: v - z for label, v in raw.items()}
            row = RowResult(i, text=max(lps, key=lps.get), prompt_tokens=3, output_tokens=1, finish_reason="scored",
                            label_logprobs=lps)
            rows.append(row)
            handle.row_done(row)
        handle.finish(RelQueryResult(rows, RelQueryStats(rq.rel_id, len(rows), policy=self.policy)))
        return handle
