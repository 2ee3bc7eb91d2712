"""Choosing the Adaptive Batch Arranger's settings for a machine, by simulation.

Which candidates pay off depends on the machine: where every step has a large fixed cost (these
CPUs), mixed steps and filled prefills save whole steps; where a prefill is cheap against the
decode steps it merges (an A100), a larger Eq. 16 gain wins. ``tune_arranger`` replays one
standard trace in the simulator with the machine's fitted cost model under each candidate
setting (and the baselines, for the margin) at two loads and picks the setting with the lowest
mean latency, relative to the best at each load, among those that keep at least ``MIN_THROUGHPUT_SHARE`` of the best
baseline's rows/s at the higher load (no latency bought with throughput). ``relserve calibrate`` stores the choice with
the calibration and engines on that machine use it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from relserve.policy import CostModel, Limits, PolicySettings
from relserve.sim.prepared_trace import Renderer, Tokenizer
from relserve.sim.run import as_prepared, simulate
from relserve.workloads.traces import TraceQuery, scale_arrivals

#: the arranger's knobs that tuning sets (a subset of PolicySettings)
ARRANGER_KNOBS: tuple[str, ...] = ("fill_prefill", "mixed_steps", "mixed_chunk_tokens", "transitional_gain", "backlog_weight")

#: a candidate must keep this share of the best baseline's rows/s at the highest load (the
#: project's target for relserve at saturation)
MIN_THROUGHPUT_SHARE = 0.97

#: baselines replayed beside the candidates, for the report's margin
BASELINES: tuple[str, ...] = ("fcfs", "sp", "sarathi", "vllm")


def candidate_settings(
    gains: Sequence[float] = (1.0, 4.0), backlog_weights: Sequence[float] = (0.0, 1.0, 2.0)
) -> list[dict]:
    """The grid: filled prefill or not, x (no mixed steps, or mixed with each backlog weight), x
    each Eq. 16 gain."""
    out = []
    for fill, gain in itertools.product((False, True), gains):
        base = {"fill_prefill": fill, "mixed_chunk_tokens": None, "transitional_gain": gain}
        out.append({**base, "mixed_steps": False, "backlog_weight": 0.0})
        for w in backlog_weights:
            out.append({**base, "mixed_steps": True, "backlog_weight": w})
    return out


def tuning_trace(datasets_dir=None, seed: int = 101) -> list[TraceQuery]:
    """The standard tuning trace: 60 relQueries of 1-40 rows over three tables, the five query
    types. Other tables and seed than the benchmark traces, so the benchmarks validate the choice
    on work it was not tuned on."""
    from relserve.workloads import generate_trace

    return generate_trace(["beer_reviews", "movies_small", "amazon_reviews"], 60, 0.25, rows=(1, 40), seed=seed, datasets_dir=datasets_dir)


@dataclass
class TuningRow:
    name: str
    settings: dict | None
    #: mean latency (s) at each load
    mean_latency: dict[float, float]
    #: rows per second at each load
    rows_per_s: dict[float, float]
    #: mean over loads of mean latency / best candidate's mean latency at that load
    score: float = 0.0
    #: rows/s at the highest load over the best baseline's
    throughput_share: float = 0.0


@dataclass
class Tuning:
    chosen: dict
    rows: list[TuningRow]
    loads: tuple[float, ...]
    #: the runner-up candidate's score over the chosen one's, less 1 (how clearly it won)
    margin: float
    #: the paper's arranger (no fill, no mixed steps, gain 1) against the chosen one
    paper_score: float
    cost_model: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "chosen": self.chosen,
            "margin": self.margin,
            "paper_score": self.paper_score,
            "loads": list(self.loads),
            "rows": [
                {"name": r.name, "settings": r.settings, "score": r.score, "throughput_share": r.throughput_share,
                 "mean_latency": {str(k): v for k, v in r.mean_latency.items()},
                 "rows_per_s": {str(k): v for k, v in r.rows_per_s.items()}}
                for r in self.rows
            ],
        }


#: the offered load of the tuning replays, as shares of what the machine can serve
LOAD_SHARES: tuple[float, ...] = (0.7, 1.2)


def saturating_loads(
    trace: Sequence[TraceQuery], cost: CostModel, limits: Limits, *, tokenize=None, render=None, shares=LOAD_SHARES
) -> tuple[float, ...]:
    """Load factors at which ``trace`` offers ``shares`` of the machine's capacity.

    The capacity is measured in the simulator: every relQuery at once under FCFS, whose makespan
    is the work of the whole trace. A fast machine gets higher factors than a slow one, so the
    tuning always looks at a busy engine, not an idle or hopelessly overloaded one.
    """
    burst = [q.model_copy(update={"arrival_s": 0.0}) for q in trace]
    makespan = simulate(burst, "fcfs", cost, limits, tokenize=tokenize, render=render, isolated=False).summary.simulated_seconds
    span = max(q.arrival_s for q in trace) - min(q.arrival_s for q in trace)
    return tuple(round(share * span / makespan, 3) for share in shares)


def _describe(s: dict) -> str:
    parts = ["fill" if s["fill_prefill"] else "head"]
    if s["mixed_steps"]:
        parts.append(f"mixed/{s['mixed_chunk_tokens'] or 'budget'}, backlog {s.get('backlog_weight', 0):g}")
    parts.append(f"gain {s['transitional_gain']:g}")
    return "relserve " + ", ".join(parts)


def tune_arranger(
    cost: CostModel,
    limits: Limits,
    trace: Sequence[TraceQuery] | None = None,
    *,
    loads: Sequence[float] | None = None,
    candidates: Sequence[dict] | None = None,
    base: PolicySettings | None = None,
    tokenize: Tokenizer | None = None,
    render: Renderer | None = None,
    baselines: Sequence[str] = BASELINES,
) -> Tuning:
    """Replay ``trace`` (default ``tuning_trace()``) at each load factor under every candidate
    setting of relserve's arranger and under ``baselines``; choose the best candidate."""
    trace = list(trace) if trace is not None else tuning_trace()
    base = base or PolicySettings()
    if loads is None:
        loads = saturating_loads(trace, cost, limits, tokenize=tokenize, render=render)
    candidates = list(candidates) if candidates is not None else candidate_settings()
    rows: list[TuningRow] = []
    prepared = {load: as_prepared(scale_arrivals(trace, load), limits, tokenize=tokenize, render=render) for load in loads}
    n_rows = sum(len(q.rows) for q in trace)

    def run(name: str, policy: str, settings: PolicySettings, knobs: dict | None) -> None:
        lat, tput = {}, {}
        for load in loads:
            res = simulate(prepared[load], policy, cost, limits, settings=settings, isolated=False)
            lat[load] = res.summary.mean_latency
            span = max(t.finish for t in res.relqueries) - min(t.arrival for t in res.relqueries)
            tput[load] = n_rows / span if span > 0 else 0.0
        rows.append(TuningRow(name, knobs, lat, tput))

    for knobs in candidates:
        run(_describe(knobs), "relserve", base.model_copy(update=knobs), knobs)
    for b in baselines:
        run(b, b, base, None)
    cands = [r for r in rows if r.settings is not None]
    top = max(loads)
    best_base = max((r.rows_per_s[top] for r in rows if r.settings is None), default=0.0)
    for r in rows:
        r.score = sum(r.mean_latency[load] / min(c.mean_latency[load] for c in cands) for load in loads) / len(loads)
        r.throughput_share = r.rows_per_s[top] / best_base if best_base else 1.0
    keep = [r for r in cands if r.throughput_share >= MIN_THROUGHPUT_SHARE] or [max(cands, key=lambda r: r.throughput_share)]
    ranked = sorted(keep, key=lambda r: r.score)
    best = ranked[0]
    margin = ranked[1].score / best.score - 1 if len(ranked) > 1 else 0.0
    paper = next(
        (r for r in cands if not r.settings["fill_prefill"] and not r.settings["mixed_steps"] and r.settings["transitional_gain"] == 1.0),
        None,
    )
    return Tuning(
        chosen=dict(best.settings),
        rows=rows,
        loads=tuple(loads),
        margin=margin,
        paper_score=paper.score if paper else float("nan"),
        cost_model=cost.model_dump(),
    )


def tuning_markdown(t: Tuning) -> str:
    loads = t.loads
    head = "| setting | score | " + " | ".join(f"mean latency x{x:g} (s)" for x in loads) + " | " + " | ".join(f"rows/s x{x:g}" for x in loads) + " | rows/s vs best baseline |"
    lines = [head, "|" + "---|" * (3 + 2 * len(loads))]
    for r in sorted(t.rows, key=lambda r: r.score):
        mark = " **(chosen)**" if r.settings == t.chosen else ""
        lat = " | ".join(f"{r.mean_latency[x]:.2f}" for x in loads)
        tput = " | ".join(f"{r.rows_per_s[x]:.2f}" for x in loads)
        lines.append(f"| {r.name}{mark} | {r.score:.3f} | {lat} | {tput} | {r.throughput_share:.2f} |")
    lines.append("")
    lines.append(
        f"Chosen: {_describe(t.chosen)} (lowest score among settings keeping {MIN_THROUGHPUT_SHARE:.0%} of the best "
        f"baseline's rows/s); margin over the runner-up {t.margin:.1%}; the paper's arranger scores {t.paper_score:.3f}."
    )
    return "\n".join(lines)
