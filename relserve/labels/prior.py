"""The model's prior over a call's labels, for contextual calibration (Zhao et al., "Calibrate
Before Use", ICML 2021).

A small model prefers some labels whatever the row says ("no" for every review, "spam" for every
SMS). The prior is measured by scoring the labels on content-free rows: the call's own prompt
with every placeholder replaced by "N/A", by "" and by "[MASK]". Dividing each row's label
probabilities by the average of those (the paper's diagonal correction with no bias) leaves what
the row itself contributes. It is measured once per model and call (template, labels, examples)
and kept for the life of the process: three short scoring requests.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from relserve.backend.protocol import Backend
from relserve.engine.handle import RelQueryHandle
from relserve.engine.label_scoring import pick
from relserve.functions import SCORING_METHODS, LLMCall
from relserve.labels.guesses import AnswerSpread
from relserve.labels.interface import LabelContext, LabelRequest, LabelRun, probabilities
from relserve.labels.keys import template_key
from relserve.prompt_rendering import Renderer
from relserve.results import RowResult

#: rel_id prefix of the probe relQueries (they are not a user's rows)
PROBE_PREFIX = "prior-"
#: the paper's content-free inputs
CONTENT_FREE = ("N/A", "", "[MASK]")

_priors: dict[tuple, dict[str, float]] = {}
#: rows each call's relQueries decided so far under the prior (the guess check's few-rows rule
#: stops once a call has had enough: a scalar call per row would otherwise warn on every row)
_decided: dict[tuple, int] = {}
_lock = threading.Lock()


def content_free_prompts(call: LLMCall) -> list[str]:
    """The call's prompt with every placeholder set to each content-free value."""
    render = Renderer(call)
    if render.shaped is not None:
        # under the shaped layouts a row's long values stand apart from the question; a probe's "N/A" would
        # stay inside the question, a layout no row has. Laid out like the rows, the prior fits
        # them better (docs/quality.md: tiny relQueries)
        render.shaped.move_chars = 0
    n = len(call.template.columns)
    return [render((value,) * n) for value in CONTENT_FREE]


def label_options(call: LLMCall, model_id: str, method: str | None) -> dict[str, Any]:
    """The ``RelQuery`` options that make the engine choose labels as ``method`` (the one the
    relQuery runs, label_calibration.method_ran) says: the prior only for ``calibrate``, and only
    once it is known (``known_prior``); until then the executor measures it beside the rows
    (``submit_probes``) and picks their labels itself. Under ``batch`` and ``bootstrap`` the
    executor picks after every row is scored."""
    if method not in SCORING_METHODS:
        return {}
    scoring: dict[str, Any] = {"score_labels": True, "prompt_shape": call.prompt_shape, "answer_field": call.answer_field}
    if method in ("prior", "calibrate"):
        prior = known_prior(call, model_id)
        if prior is not None:
            scoring["label_prior"] = prior
    return scoring


def known_prior(call: LLMCall, model_id: str) -> dict[str, float] | None:
    """The prior of ``call`` measured earlier in this process (None: not yet)."""
    with _lock:
        return _priors.get(template_key(call, model_id))


def submit_probes(call: LLMCall, engine: Backend) -> RelQueryHandle:
    """Send the content-free probes of ``call`` as their own small relQuery and return at once,
    so they run beside the call's rows instead of before them (issue 28: the prior off a small
    relQuery's critical path); ``prior_from`` reads the result."""
    from relserve.relquery import RelQuery

    rq = RelQuery.from_prompts(
        content_free_prompts(call), choices=list(call.choices or ()), score_labels=True,
        prompt_shape=call.prompt_shape, answer_field=call.answer_field, on_error="raise", rel_id=PROBE_PREFIX + uuid.uuid4().hex[:8],
        system=call.options.system,
    )
    return engine.submit(rq)


def prior_from(call: LLMCall, model_id: str, probes: RelQueryHandle) -> dict[str, float]:
    """The prior from the probes' scores (waits for them), remembered for the call's next
    relQueries: each label's average probability over the probes, normalised to sum to 1."""
    rows = probes.result().rows
    labels = list(call.choices or ())
    mean = {label: sum(math.exp(r.label_logprobs[label]) for r in rows) / len(rows) for label in labels}
    total = sum(mean.values())
    prior = {label: p / total for label, p in mean.items()}
    with _lock:
        _priors[template_key(call, model_id)] = prior
    return prior


def known_priors() -> dict[tuple, dict[str, float]]:
    """The priors measured so far in this process (for EXPLAIN and the benchmark)."""
    with _lock:
        return dict(_priors)


def forget_priors() -> None:
    """Forget every measured prior (tests, and the benchmark between configurations)."""
    with _lock:
        _priors.clear()
        _decided.clear()


class PriorRun(LabelRun):
    """``method := 'prior'`` (named ``calibrate`` before): each row's label probabilities divided
    by the call's content-free prior. The prior is measured once per call: by the call's first
    relQuery, whose probes run beside its rows (``submit_probes``); later relQueries hand it to
    the engine, which picks each row's label itself."""

    holds = False

    def __init__(self, ctx: LabelContext) -> None:
        self.ctx = ctx
        self.options = label_options(ctx.call, ctx.model_id, "prior")
        self._probes: RelQueryHandle | None = None
        self._prior: dict[str, float] | None = None
        self._key = template_key(ctx.call, ctx.model_id)
        with _lock:
            self.spread = AnswerSpread("prior", earlier=_decided.get(self._key, 0))

    def request(self) -> LabelRequest:
        if "label_prior" not in self.options:
            # the call's first relQuery: its prior's probes run beside its rows, not before them
            self._probes = submit_probes(self.ctx.call, self.ctx.engine)
        return LabelRequest(list(self.ctx.prompts), self.options)

    def submitted(self, handle: RelQueryHandle) -> None:
        if self._probes is not None:
            # the rows are scored meanwhile; their labels are picked here once it is known
            self._prior = prior_from(self.ctx.call, self.ctx.model_id, self._probes)

    def decide(self, rows: Sequence[RowResult]) -> list[RowResult]:
        prior = self._prior or self.options.get("label_prior")
        out = []
        for r in rows:
            # the engine picked with a known prior; with the one measured beside the rows, here
            label = pick(r.label_logprobs, prior) if self._prior is not None else r.text
            divided = {k: v - math.log(max(prior[k], 1e-12)) for k, v in r.label_logprobs.items()} if prior else r.label_logprobs
            self.spread.add(divided, label)
            out.append(replace(r, text=label, confidence=probabilities(divided).get(label)))
        with _lock:
            _decided[self._key] = _decided.get(self._key, 0) + len(rows)
        return out

    @property
    def report(self) -> AnswerSpread:
        return self.spread
