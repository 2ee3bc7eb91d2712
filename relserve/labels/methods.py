"""The label methods' runs by name, and what each says of its own work (issues 43, 62; the enum
in relserve/label_names.py, the factory here beside the interface, as vLLM's
``v1/core/sched/request_queue.py``). Which method a relQuery runs, and with which plan, is
resolved once by relserve/labels/resolution.py."""

from __future__ import annotations

from relserve.label_names import LabelMethodName, PlanAction
from relserve.labels.resolution import LabelResolution, resolve


def _work(method: LabelMethodName):
    """The method's own description of its work (each method module says it)."""
    from relserve.labels import adaptive, batch, bootstrap, prior, score

    return {LabelMethodName.GENERATE: lambda call, rows, plan: "constrained decoding",
            LabelMethodName.SCORE: score.describe_work, LabelMethodName.PRIOR: prior.describe_work,
            LabelMethodName.BATCH: batch.describe_work, LabelMethodName.BOOTSTRAP: bootstrap.describe_work,
            LabelMethodName.ADAPTIVE: adaptive.describe_work}[method]


def _plan_work(method: LabelMethodName):
    """What the method's first pass will choose a plan from (EXPLAIN, no plan kept)."""
    from relserve.labels import adaptive, batch, bootstrap, prior

    return {LabelMethodName.PRIOR: prior.describe_first_pass, LabelMethodName.BATCH: batch.describe_first_pass,
            LabelMethodName.BOOTSTRAP: bootstrap.describe_first_pass,
            LabelMethodName.ADAPTIVE: adaptive.describe_first_pass}.get(method, lambda call: "none needed")


def start_run(resolution: LabelResolution, ctx):
    """The run of the resolved method for one relQuery (``ctx``: its ``LabelContext``);
    ``generate`` has none (it decodes)."""
    from relserve.labels.adaptive import AdaptiveRun
    from relserve.labels.batch import BatchRun
    from relserve.labels.bootstrap import BootstrapRun
    from relserve.labels.prior import PriorRun
    from relserve.labels.score import ScoreRun

    name = resolution.method
    runs = {LabelMethodName.SCORE: ScoreRun, LabelMethodName.PRIOR: PriorRun, LabelMethodName.BATCH: BatchRun,
            LabelMethodName.BOOTSTRAP: BootstrapRun, LabelMethodName.ADAPTIVE: AdaptiveRun}
    if name not in runs:
        raise ValueError(f"label method {name!r} decodes: it has no scoring run")
    return runs[name](ctx)


def describe_work(resolution: LabelResolution, call, rows: int) -> str | None:
    """What the resolved method does for a relQuery of ``rows`` prompts, in its own words (EXPLAIN)."""
    if resolution.method is None:
        return None
    return _work(resolution.method)(call, rows, resolution.plan)


def describe_plan(resolution: LabelResolution, call) -> str | None:
    """The call's label plan for EXPLAIN: the kept one, or what a first pass will choose."""
    if resolution.key is None:
        return None
    plan = resolution.plan
    if plan is not None:
        pinned = ", pinned" if resolution.stored is not None and resolution.stored.pinned else ""
        return f"kept{pinned}: {plan.describe()} (label_plan := 'refresh' makes a new one)"
    if resolution.stored is not None and resolution.stored.plan.provisional and resolution.action is PlanAction.REFRESH:
        why = "provisional one replaced by this statement (the call's first of enough rows)"
    else:
        why = "refreshed by this statement" if resolution.action is PlanAction.REFRESH else "none kept yet"
    return f"{why}: " + _plan_work(resolution.method)(call)


def first_pass_requests(call, rows: int, resolution: LabelResolution | None = None) -> int:
    """At most how many scoring requests a relQuery of ``rows`` prompts of ``call`` sends before its
    rows (0 with a kept plan; ``resolution`` None: counted as if no plan were kept, an upper
    bound: a server tenant's limits count it)."""
    if resolution is None:
        resolution = resolve(call, rows, memory=None, namespace=None, model_id="")
    if not resolution.makes_plan:
        return 0
    from relserve.labels.adaptive import first_pass_size
    from relserve.labels.bootstrap import sample_rows
    from relserve.labels.prior import CONTENT_FREE

    if resolution.method is LabelMethodName.ADAPTIVE:
        return first_pass_size(call, rows)
    if resolution.method is LabelMethodName.BOOTSTRAP:
        # (the sample scored again behind the examples is those rows' answers: no extra request)
        return sample_rows(call.function.kind, rows)
    if resolution.method is LabelMethodName.PRIOR:
        return len(CONTENT_FREE)
    return 0
