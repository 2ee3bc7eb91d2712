"""The label vocabulary of the call specification: the names of the label methods, what a call does
with its label plan, which method a call runs and what of its label work enters its result-cache
key. It sits below the call specification (relserve/functions.py) and the label methods
(relserve/labels/), which both read it, and imports only the errors; the methods themselves, and
the resolution of a relQuery's method and plan, live in relserve/labels/."""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum

from relserve.errors import ConfigError


class LabelMethodName(StrEnum):
    """The label methods of ``llm_filter`` / ``llm_classify`` (``method :=``)."""

    #: constrained decoding (also what any ``temperature > 0`` does)
    GENERATE = "generate"
    #: the best-scored label, uncorrected
    SCORE = "score"
    #: each label's probability divided by the model's answer on content-free rows
    PRIOR = "prior"
    #: each label's score minus its mean over a sample of the call's rows
    BATCH = "batch"
    #: ``batch`` behind worked examples the model labelled itself
    BOOTSTRAP = "bootstrap"
    #: for two labels: the request's layout chosen per call, rows decided against a boundary
    ADAPTIVE = "adaptive"


class PlanAction(StrEnum):
    """``label_plan :=``: what a call does with its label plan (think of ANALYZE)."""

    #: use the kept plan; make one from this call's rows when there is none
    AUTO = "auto"
    #: make a new plan from this call's rows and keep it over the old one (refused when pinned)
    REFRESH = "refresh"
    #: as ``auto``, and pin the plan: never replaced nor forgotten until unpinned
    PIN = "pin"
    #: as ``auto``, and unpin the plan
    UNPIN = "unpin"


LABEL_METHODS: tuple[str, ...] = tuple(m.value for m in LabelMethodName)
#: old names still accepted
LABEL_METHOD_ALIASES = {"calibrate": LabelMethodName.PRIOR.value}
#: the method of a call that names none; the environment variable is for the benchmark (it
#: measures the default against another end to end, docs/benchmarks.md), not for users
DEFAULT_LABEL_METHOD = os.environ.get("RELSERVE_LABEL_METHOD", LabelMethodName.ADAPTIVE.value)
if DEFAULT_LABEL_METHOD not in LABEL_METHODS:
    raise ValueError(f"RELSERVE_LABEL_METHOD must be one of {', '.join(LABEL_METHODS)}, got {DEFAULT_LABEL_METHOD!r}")
PLAN_ACTIONS: tuple[str, ...] = tuple(a.value for a in PlanAction)

#: the methods that score labels instead of decoding one
SCORING_METHODS: tuple[str, ...] = tuple(m for m in LABEL_METHODS if m != LabelMethodName.GENERATE)


def checked_method(method: str | None) -> str | None:
    """A call's ``method :=`` as the methods name it (old names accepted); ``ConfigError`` for
    one no method has."""
    method = LABEL_METHOD_ALIASES.get(method, method) if method is not None else None
    if method is not None and method not in LABEL_METHODS:
        raise ConfigError(f"method must be one of {', '.join(LABEL_METHODS)}, got {method!r}")
    return method


def label_method(closed: bool, temperature: float, method: str | None) -> str | None:
    """How a call picks its label: None for free text and JSON (``closed`` False); sampling
    (``temperature`` above 0) asks for variation, which scoring cannot give, so it decodes;
    else the method the call names, or the default."""
    if not closed:
        return None
    if temperature > 0:
        return LabelMethodName.GENERATE.value
    return method or DEFAULT_LABEL_METHOD


def cache_key_settings(method: str | None, *, prompt_shape: str, answer_field: str | None, template: str,
                       examples: str | None, plan_id: str | None) -> Mapping[str, object]:
    """What of a call's label work changes its answers, for its result-cache key (empty when it
    decodes: keys as before, so answers cached by earlier versions stay valid)."""
    if method is None or method == LabelMethodName.GENERATE:
        return {}
    out: dict[str, object] = {"method": method}
    if prompt_shape != "chat":
        out["prompt_shape"] = prompt_shape  # chat: keys as before issue 22
        if answer_field:
            out["answer_field"] = answer_field  # none: keys as before it existed
    if method != LabelMethodName.SCORE:
        # prior: the prior is measured on this template (and examples), so two templates
        # rendering one prompt differ; batch, bootstrap, adaptive: the answer also depends on
        # the call's label plan, read from its rows
        out["template"] = template
        out["examples"] = examples or None
        if plan_id is not None:
            out["label_plan"] = plan_id
    return out
