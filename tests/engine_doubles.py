"""Test doubles of the engine. ``ScriptedEngine`` has the engine's API with answers from a Python
function: the fast layer of the planner and surface tests (the real engine runs in the
``*_engine.py`` tests). ``RecordingEngine`` wraps the real engine and records what reached it.

It records every relQuery it gets, so a test can check how many calls and which prompts reached
the engine.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from relserve.planner.hit_rate import PrefixCacheModel
from relserve.planner.tokens import approximate_tokens
from relserve.policy.cost_model import CostModel
from relserve.results import RowResult

Answer = Callable[[str, Any], str]
_EXAMPLES = re.compile(r"\n[A-Z][A-Za-z0-9 _'-]*: [^\n]*\n\n")


def own_text(prompt: str) -> str:
    """A prompt without the examples in front of it (the call's own, or those ``bootstrap``
    labelled in its first pass: each ends with its answer field and answer, "Answer: ...", a blank line)."""
    return _EXAMPLES.split(prompt)[-1]


def default_answer(prompt: str, rq: Any) -> str:
    """Deterministic answers that respect the relQuery's constraint."""
    choices = getattr(rq, "choices", None)
    if choices:
        return choices[sum(prompt.encode()) % len(choices)]
    if getattr(rq, "json_schema", None) is not None:
        return "{}"
    return "answer to: " + prompt[-40:]


def _Row(index: int, text: str | None = None, error: str | None = None, prompt_tokens: int = 0, output_tokens: int = 0,
         cached_tokens: int = 0, finish_reason: str | None = "stop", label_logprobs: dict[str, float] | None = None) -> RowResult:
    """The engine's own row type, with the double's defaults."""
    return RowResult(index, text, error, prompt_tokens, output_tokens, cached_tokens, finish_reason, label_logprobs)


@dataclass
class _Stats:
    rel_id: str
    num_rows: int
    num_errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0

    @property
    def prefix_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class _Result:
    rows: list[RowResult]
    stats: _Stats

    @property
    def texts(self) -> list[str | None]:
        return [r.text for r in self.rows]


class _Handle:
    def __init__(self, result: _Result) -> None:
        self._result = result
        self.cancelled = False

    def __iter__(self) -> Iterator[RowResult]:
        return iter(self._result.rows)

    @property
    def progress(self) -> tuple[int, int]:
        return len(self._result.rows), len(self._result.rows)

    def cancel(self) -> None:
        self.cancelled = True

    def result(self, timeout: float | None = None) -> _Result:
        return self._result  # answered when submitted: ready within any limit, as a real handle's would be


def best_label(label_logprobs: dict[str, float], prior: dict[str, float] | None) -> str:
    """The answer the engine's label scoring gives, written out here from its rule rather than
    taken from relserve (a double that called relserve's own pick would agree with any change to
    it): the label of the highest log-probability less the log of its prior probability (none:
    the log-probability alone); a tie (to 1e-9) goes to the label of the higher log-probability,
    then to the label listed first."""
    best, best_key = None, None
    for position, (label, lp) in enumerate(label_logprobs.items()):
        adjusted = lp - math.log(max(prior[label], 1e-12)) if prior else lp
        key = (round(adjusted, 9), lp, -position)
        if best_key is None or key > best_key:
            best, best_key = label, key
    return best


def _scored_row(index: int, answer: str, rq: Any, prompt_tokens: int, cached: int) -> RowResult:
    """What the engine's label scoring gives: the scripted answer holds 90% of the probability,
    and the answer is the best label after the relQuery's prior, as the engine picks it."""
    labels = list(rq.choices)
    rest = 0.1 / (len(labels) - 1) if len(labels) > 1 else 0.0
    lps = {lab: math.log(0.9 if lab == answer else rest) if lab == answer or rest else -math.inf for lab in labels}
    return _Row(index, best_label(lps, rq.label_prior), None, prompt_tokens, 1, cached, "scored", lps)


@dataclass
class ScriptedEngine:
    answer: Answer = default_answer
    model_id: str = "scripted-model"
    block_size: int = 16
    cost_model: CostModel = field(default_factory=CostModel)
    #: prompts of every relQuery submitted, in submission order
    submitted: list[list[str]] = field(default_factory=list)
    #: the relQueries themselves (options such as max_tokens and choices)
    relqueries: list[Any] = field(default_factory=list)
    warmed: list[str] = field(default_factory=list)
    warmed_systems: list[str | None] = field(default_factory=list)
    #: calibration probes (content-free prompts of llm_filter / llm_classify), kept apart from
    #: ``submitted`` so tests count the relQueries of the rows
    probes: list[list[str]] = field(default_factory=list)
    #: the first passes of ``method := 'bootstrap'`` and ``'adaptive'`` (a sample of a
    #: relQuery's prompts; adaptive: one per candidate layout), apart from ``submitted`` for the
    #: same reason
    first_passes: list[list[str]] = field(default_factory=list)
    #: every relQuery submitted, in order (first passes and probes too)
    every_relquery: list[Any] = field(default_factory=list)
    #: prefix-cache capacity in tokens for the cached-token counts (None: unbounded)
    kv_capacity_tokens: int | None = None
    #: the probes that choose an ``answer_field := 'auto'`` call's field (one prompt each), apart
    #: from ``submitted`` for the same reason; with the field each was asked after
    field_probes: list[tuple[str, str]] = field(default_factory=list)
    #: a scored row's label mass from its relQuery (its ``answer_field``); None: not reported
    label_mass: Callable[[Any], float] | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        blocks = self.kv_capacity_tokens // self.block_size if self.kv_capacity_tokens else None
        self._prefix_cache = PrefixCacheModel(self.block_size, blocks)

    def prompt_token_ids(self, text: str) -> list[int]:
        return [1] + approximate_tokens(text) + [2]

    def warm_prefix(self, text: str = "", system: str | None = None) -> None:
        self.warmed.append(text)
        self.warmed_systems.append(system)
        self._prefix_cache.admit(self.prompt_token_ids(text))

    def submit(self, rq: Any) -> _Handle:
        prompts = [r["prompt"] for r in rq.rows] if getattr(rq, "prompts", None) is None else list(rq.prompts)
        with self._lock:
            self.every_relquery.append(rq)
            if str(getattr(rq, "rel_id", "")).startswith("answer-field-"):
                self.field_probes += [(p, rq.answer_field) for p in prompts]
            elif str(getattr(rq, "rel_id", "")).startswith("prior-"):
                self.probes.append(prompts)
            elif str(getattr(rq, "rel_id", "")).startswith(("bootstrap-", "adaptive-")):
                self.first_passes.append(prompts)
            else:
                self.submitted.append(prompts)
                self.relqueries.append(rq)
            rows = []
            for i, p in enumerate(prompts):
                ids = self.prompt_token_ids(p)
                cached = self._prefix_cache.admit(ids)
                try:
                    # a row is answered by its own text, not by the examples in front of it
                    text = self.answer(own_text(p), rq)
                    if getattr(rq, "score_labels", False):
                        row = _scored_row(i, text, rq, len(ids), cached)
                        if self.label_mass is not None:
                            row.label_mass = self.label_mass(rq)
                        rows.append(row)
                        continue
                    rows.append(_Row(i, text, None, len(ids), 1, cached))
                except Exception as e:  # a failing row, as the engine reports it
                    rows.append(_Row(i, None, str(e), len(ids), 0, cached, "error"))
        stats = _Stats(
            rel_id=str(getattr(rq, "rel_id", "")),
            num_rows=len(rows),
            num_errors=sum(r.error is not None for r in rows),
            prompt_tokens=sum(r.prompt_tokens for r in rows),
            cached_tokens=sum(r.cached_tokens for r in rows),
            output_tokens=sum(r.output_tokens for r in rows),
        )
        return _Handle(_Result(rows, stats))

    @property
    def rows_answered(self) -> int:
        return sum(len(p) for p in self.submitted)


class TenantAwareEngine(ScriptedEngine):
    """The scripted engine with tenancy (the tenancy itself is not recorded)."""

    supports_tenancy = True

    def submit(self, rq, tenancy=None):
        return super().submit(rq)

    def warm_prefix(self, text="", system=None, tenancy=None):
        return super().warm_prefix(text)


class RecordingEngine:
    """Wraps a real engine and records what reaches it: every relQuery's prompts and answers.

    Lets a test on the real engine check that each row got the answer the engine gave for that
    row's prompt, and count relQueries, without relying on the model's wording.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        #: prompts of every relQuery submitted, in submission order
        self.submitted: list[list[str]] = []
        #: prompt -> answer text, from every finished relQuery
        self.answers: dict[str, str | None] = {}
        self.relqueries: list[Any] = []
        #: calibration probes and bootstrap first passes, kept apart from ``submitted`` (see
        #: ScriptedEngine.probes)
        self.probes: list[list[str]] = []
        self.first_passes: list[list[str]] = []
        #: the probes that choose an ``answer_field := 'auto'`` call's field
        self.field_probes: list[list[str]] = []
        #: probes not yet matched with the rows sent beside them: (choices, prompts, handle).
        #: Sites of one statement run on threads, so several can be pending at once.
        self._pending_probes: list[tuple[tuple[str, ...], list[str], Any]] = []
        self._lock = threading.Lock()

    def submit(self, rq: Any) -> Any:
        prompts = list(rq.prompts) if getattr(rq, "prompts", None) is not None else [str(r) for r in rq.rows]
        rel_id = str(getattr(rq, "rel_id", ""))
        if rel_id.startswith("answer-field-"):
            self.field_probes.append(prompts)
            return self._engine.submit(rq)
        if rel_id.startswith(("prior-", "bootstrap-", "adaptive-")):
            (self.probes if rel_id.startswith("prior-") else self.first_passes).append(prompts)
            handle = self._engine.submit(rq)
            if rel_id.startswith("prior-"):
                with self._lock:
                    self._pending_probes.append((tuple(rq.choices or ()), prompts, handle))
            return handle
        self.submitted.append(prompts)
        self.relqueries.append(rq)
        handle = self._engine.submit(rq)
        # a call's first small relQuery runs beside its content-free probes and its labels are
        # picked with their prior by the executor, not the engine: record that answer
        probes = None
        if getattr(rq, "score_labels", False) and getattr(rq, "label_prior", None) is None:
            probes = self._take_probes(tuple(rq.choices or ()), prompts)
        return _RecordingHandle(handle, prompts, self.answers, probes)

    def _take_probes(self, choices: tuple[str, ...], prompts: list[str]) -> Any:
        """The pending probes of this call: same labels, and the probe prompt sharing the
        longest prefix with the rows' (the template's text before its first placeholder)."""
        def shared(probe_prompts: list[str]) -> int:
            return len(os.path.commonprefix([probe_prompts[0], prompts[0]])) if prompts else 0

        with self._lock:
            same = [p for p in self._pending_probes if p[0] == choices]
            if not same:
                return None
            best = max(same, key=lambda p: shared(p[1]))
            self._pending_probes.remove(best)
            return best[2]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class _RecordingHandle:
    def __init__(self, handle: Any, prompts: list[str], answers: dict[str, str | None], probes: Any = None) -> None:
        self._handle = handle
        self._prompts = prompts
        self._answers = answers
        self._probes = probes

    def __iter__(self):
        return iter(self._handle)

    def result(self, *args: Any, **kwargs: Any) -> Any:
        result = self._handle.result(*args, **kwargs)
        prior = None
        if self._probes is not None:
            # contextual calibration's prior: each label's probability averaged over the probes
            # (within the limit the caller gave the rows: a probe that hangs fails that wait too)
            probe_rows = self._probes.result(*args, **kwargs).rows
            labels = list(probe_rows[0].label_logprobs)
            mean = {lab: sum(math.exp(r.label_logprobs[lab]) for r in probe_rows) for lab in labels}
            prior = {lab: m / sum(mean.values()) for lab, m in mean.items()}
        for row in result.rows:
            text = row.text
            if prior is not None and row.label_logprobs is not None:
                text = best_label(row.label_logprobs, prior)
            self._answers[self._prompts[row.index]] = text
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)
