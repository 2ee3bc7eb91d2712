"""The label methods by name, which one a relQuery runs, and the factory of their runs (issue 43;
the enum and its factory beside the interface, as vLLM's ``v1/core/sched/request_queue.py``).

A call names a method (``method :=``, or the default); a relQuery may run another one where the
named one cannot work with what it has (``method_ran``): ``batch`` and ``bootstrap`` need at
least ``MIN_BATCH_ROWS`` rows for label means of their own (or means an earlier relQuery of the
call pooled), and below that run as ``prior``; ``bootstrap`` with the user's own examples runs
as ``batch`` (given examples beat guessed ones); ``adaptive`` is for two labels, and with three
or more (or the user's examples) runs as ``bootstrap`` would.
"""

from __future__ import annotations

from enum import StrEnum

from relserve.functions import BATCH_METHODS
from relserve.labels.batch import BatchRun
from relserve.labels.bootstrap import BootstrapRun, remembered_examples
from relserve.labels.interface import LabelContext, LabelRun
from relserve.labels.means import MIN_BATCH_ROWS, min_batch_rows
from relserve.labels.pools import means_key, pooled_rows
from relserve.labels.prior import PriorRun
from relserve.labels.score import ScoreRun


class LabelMethodName(StrEnum):
    """The label methods of ``llm_filter`` / ``llm_classify`` (``method :=``)."""

    GENERATE = "generate"
    SCORE = "score"
    PRIOR = "prior"
    BATCH = "batch"
    BOOTSTRAP = "bootstrap"
    ADAPTIVE = "adaptive"


def start_run(method: str, ctx: LabelContext) -> LabelRun:
    """The run of ``method`` (the one the relQuery runs, ``method_ran``) for one relQuery;
    ``generate`` has none (it decodes)."""
    from relserve.labels.adaptive import AdaptiveRun

    name = LabelMethodName(method)
    if name is LabelMethodName.SCORE:
        return ScoreRun(ctx)
    if name is LabelMethodName.PRIOR:
        return PriorRun(ctx)
    if name is LabelMethodName.BATCH:
        return BatchRun(ctx)
    if name is LabelMethodName.BOOTSTRAP:
        return BootstrapRun(ctx)
    if name is LabelMethodName.ADAPTIVE:
        return AdaptiveRun(ctx)
    raise ValueError(f"label method {method!r} decodes: it has no scoring run")

def asked(call) -> str | None:
    """The method ``call`` asks for as its relQueries read it: ``adaptive`` is for two labels, so
    a call of three or more, or with the user's own examples, asks for ``bootstrap``."""
    method = call.label_method
    if method == "adaptive" and (len(call.choices or ()) != 2 or call.options.examples):
        return "bootstrap"
    return method


def method_ran(
    method: str | None, rows: int, examples: bool = False, pooled: int = 0, labels: int = 2, pooled_plain: int = 0
) -> str | None:
    """The label method a relQuery of ``rows`` prompts over ``labels`` labels actually runs:
    ``batch`` and ``bootstrap`` fall back to ``prior`` below ``min_batch_rows(labels)``,
    unless the call's earlier relQueries already pooled ``MIN_BATCH_ROWS`` rows' means
    (``pooled``, relserve/labels/pools.py); between the two thresholds (three labels
    or more) ``bootstrap`` runs as ``batch``, and so does a smaller relQuery of a ``bootstrap``
    call whose earlier small relQueries, run with no examples, pooled ``MIN_BATCH_ROWS`` rows
    (``pooled_plain``); ``bootstrap`` also runs as ``batch`` when the call has the user's own
    ``examples`` (relserve/labels/bootstrap.py)."""
    if method == "adaptive":
        # layouts are for two labels; with more, or with the user's own examples, the
        # bootstrapped examples and batch means decide as before
        if labels != 2 or examples:
            method = "bootstrap"
        else:
            return method
    if method in BATCH_METHODS and rows < MIN_BATCH_ROWS and pooled < MIN_BATCH_ROWS:
        if rows >= min_batch_rows(labels) or pooled_plain >= MIN_BATCH_ROWS:
            return "batch"
        return "prior"
    if method == "bootstrap" and examples:
        return "batch"
    return method


def method_of(call, rows: int, pooled: int = 0, pooled_plain: int = 0) -> str | None:
    """``method_ran`` for a relQuery of ``rows`` prompts of ``call`` (an ``LLMCall``): its label
    method, its own examples and its number of labels."""
    return method_ran(asked(call), rows, bool(call.options.examples), pooled,
                      labels=len(call.choices or ()), pooled_plain=pooled_plain)


def pooled_history(call, engine, model_id: str) -> int:
    """How many rows' label means earlier relQueries of ``call`` pooled in ``engine``'s namespace,
    behind the examples this relQuery would get (relserve/labels/pools.py): 0 for a ``bootstrap`` call
    whose examples are not chosen yet, and for every method but ``batch`` and ``bootstrap``."""
    method = asked(call)
    if method == "adaptive":
        from relserve.labels.adaptive import pooled_margins

        return pooled_margins(call, engine, model_id)
    if method not in BATCH_METHODS:
        return 0
    examples = ""
    if method == "bootstrap" and not call.options.examples:
        examples = remembered_examples(call, engine, model_id)
        if examples is None:
            return 0
    return pooled_rows(means_key(call, engine, model_id, examples))


def method_and_pool(call, engine, model_id: str, rows: int) -> tuple[str | None, int]:
    """The label method a relQuery of ``rows`` prompts of ``call`` runs on ``engine``
    (``method_ran``) and how many earlier rows its label means pool with.

    A ``bootstrap`` call whose examples are not chosen yet pools, when it runs as ``batch``
    (three labels or more, too few rows to choose examples from), with its earlier relQueries
    that ran so: no examples in front of either."""
    pooled = pooled_history(call, engine, model_id)
    without_examples = asked(call) == "bootstrap" and not call.options.examples
    plain = pooled_rows(means_key(call, engine, model_id, "")) if without_examples and not pooled else 0
    ran = method_of(call, rows, pooled, pooled_plain=plain)
    return ran, plain if ran == "batch" and without_examples else pooled



def first_pass_requests(call, rows: int) -> int:
    """At most how many scoring requests a relQuery of ``rows`` prompts of ``call`` sends before
    its rows (a first pass; 0 once an earlier relQuery of the call chose): ``bootstrap`` a spread
    sample of its prompts, ``adaptive`` a spread sample in its layouts, in two stages. For the
    server's tenant limits and the time estimates, which count every request the engine runs."""
    from relserve.labels.adaptive import FINALISTS, FIRST_STAGE_ROWS, SAMPLE_ROWS
    from relserve.labels.bootstrap import sample_rows
    from relserve.labels.layouts import layouts_for

    ran = method_of(call, rows)
    if ran == "bootstrap":
        return sample_rows(call.function.kind, rows)
    if ran == "adaptive":
        layouts, sampled = len(layouts_for(call)), min(rows, SAMPLE_ROWS)
        first = min(sampled, FIRST_STAGE_ROWS)
        return first * layouts + (sampled - first) * min(layouts, FINALISTS)
    return 0
