"""The names of the label methods and of what a call does with its label plan: a leaf module (no
imports of relserve) so that the call specification (relserve/functions.py) can check options
against them without importing the methods themselves."""

from __future__ import annotations

import os
from enum import StrEnum


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
