"""The real-engine benchmark: one trace, several loads, every policy, in one run.

Plug-in policies share one engine (switched with ``Engine.set_policy``, prefix cache reset before
each replay); stock ``vllm`` gets its own engine with the same settings. Each relQuery's isolated
execution time (alone on an idle engine, cold prefix cache, FCFS) is measured once for the
slowdown metric. The simulator then replays the same trace with the engine's calibrated cost
model, limits, tokenizer and the output lengths each policy really produced, so simulated and
measured latencies can be compared side by side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from relserve.benchmark.replay import ReplayResult, replay
from relserve.benchmark.summary import RunSummary, summarize
from relserve.policy import POLICY_NAMES, CostModel, Limits, PolicySettings, policy_class
from relserve.relquery import RelQuery
from relserve.workloads.traces import TraceQuery, scale_arrivals


class BenchmarkConfig(BaseModel):
    policies: list[str] = Field(default_factory=lambda: list(POLICY_NAMES))
    #: load factors: arrivals come this many times as fast as in the trace
    loads: list[float] = Field(default_factory=lambda: [1.0])
    engine: dict[str, Any] = Field(default_factory=dict)
    isolated: bool = True
    simulate: bool = True


@dataclass
class BenchmarkReport:
    config: BenchmarkConfig
    trace_rate: float
    summaries: list[RunSummary] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)
    isolated: dict[str, float] = field(default_factory=dict)
    simulated: list[dict] = field(default_factory=list)
    cost_model: dict | None = None
    limits: dict | None = None
    #: the plug-in policies' settings the engine ran (the simulator runs the same)
    policy_settings: dict | None = None
    #: the dtype every policy's engine ran in (resolved: "auto" is never stored)
    dtype: str | None = None
    wall_s: float = 0.0

    def as_dict(self) -> dict:
        return {
            "config": self.config.model_dump(),
            "trace_rate": self.trace_rate,
            "summaries": [s.model_dump() for s in self.summaries],
            "simulated": self.simulated,
            "isolated": self.isolated,
            "cost_model": self.cost_model,
            "limits": self.limits,
            "policy_settings": self.policy_settings,
            "dtype": self.dtype,
            "wall_s": self.wall_s,
            "runs": self.runs,
        }

    @classmethod
    def from_dict(cls, d: dict) -> BenchmarkReport:
        """The report as :meth:`as_dict` wrote it (to render a saved run again)."""
        return cls(
            config=BenchmarkConfig.model_validate(d["config"]),
            trace_rate=d["trace_rate"],
            summaries=[RunSummary.model_validate(s) for s in d["summaries"]],
            runs=d.get("runs", {}),
            isolated=d.get("isolated", {}),
            simulated=d.get("simulated", []),
            cost_model=d.get("cost_model"),
            limits=d.get("limits"),
            policy_settings=d.get("policy_settings"),
            dtype=d.get("dtype"),
            wall_s=d.get("wall_s", 0.0),
        )


def trace_rate(trace: Sequence[TraceQuery]) -> float:
    """relQueries per second offered by the trace (N over the arrival span)."""
    last = max((q.arrival_s for q in trace), default=0.0)
    return (len(trace) - 1) / last if last > 0 and len(trace) > 1 else float("inf")


def measure_isolated(engine, trace: Sequence[TraceQuery], progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Each relQuery alone on the idle engine with a cold prefix cache, under FCFS."""
    previous = engine.policy
    if engine.uses_plugin and previous != "fcfs":
        engine.set_policy("fcfs")
    out: dict[str, float] = {}
    try:
        for q in trace:
            engine.reset_prefix_cache()
            res = engine.run(RelQuery(q.template, q.rows, max_tokens=q.max_tokens, ignore_eos=bool(q.extras.get("ignore_eos", False))))
            out[q.id] = res.stats.latency_s
            if progress:
                progress(f"isolated {q.id}: {res.stats.latency_s:.2f} s")
    finally:
        if engine.uses_plugin and previous != "fcfs":
            engine.set_policy(previous)
    return out


def run_benchmark(
    trace: Sequence[TraceQuery],
    config: BenchmarkConfig,
    progress: Callable[[str], None] | None = None,
) -> BenchmarkReport:
    from relserve.engine import Engine

    say = progress or (lambda msg: None)
    for p in config.policies:
        policy_class(p)  # unknown names fail before any engine starts
    t_start = time.monotonic()
    rate = trace_rate(trace)
    report = BenchmarkReport(config, rate)
    plugin = [p for p in config.policies if policy_class(p).uses_plugin]
    stock = [p for p in config.policies if not policy_class(p).uses_plugin]
    prepared_for_sim: dict[str, Any] = {}

    def one(engine, policy: str, load: float) -> None:
        if engine.uses_plugin:
            engine.set_policy(policy)
        engine.reset_prefix_cache()
        say(f"load x{load:g} ({rate * load:.3f} relQueries/s), policy {policy}: replaying {len(trace)} relQueries")
        run: ReplayResult = replay(engine, scale_arrivals(trace, load))
        s = summarize(policy, load, rate * load, run, report.isolated or None)
        report.summaries.append(s)
        report.runs[f"{policy}@{load:g}"] = run.as_dict()
        say(f"  mean latency {s.mean_latency:.2f} s, p95 {s.p95_latency:.2f} s, span {s.span_s:.1f} s")

    for group in (plugin, stock):
        if not group:
            continue
        engine = Engine(policy=group[0], **config.engine)
        try:
            # the plug-in policies and stock vLLM get the same settings, so the same dtype; a
            # difference would make the comparison one of dtypes, not of schedulers
            dtype = engine.settings.resolved_dtype
            if report.dtype not in (None, dtype):
                raise RuntimeError(f"the engines ran different dtypes: {report.dtype} and {dtype}")
            report.dtype = dtype
            if config.isolated and not report.isolated:
                say(f"measuring isolated execution times of {len(trace)} relQueries")
                report.isolated = measure_isolated(engine, trace)
            if report.cost_model is None or engine.uses_plugin:
                report.cost_model = engine.cost_model.model_dump()
                prepared_for_sim["engine"] = _sim_inputs(engine)
                report.limits = prepared_for_sim["engine"]["limits_dict"]
                report.policy_settings = engine.policy_settings.model_dump()
            for load in config.loads:
                for policy in group:
                    one(engine, policy, load)
        finally:
            engine.close()

    if config.simulate and prepared_for_sim:
        report.simulated = simulate_like(trace, report, prepared_for_sim["engine"])
    report.wall_s = time.monotonic() - t_start
    return report


def _sim_inputs(engine) -> dict:
    """What the simulator needs to imitate this engine: tokenizer, chat template, limits, and the
    settings its policies run with."""
    s = engine.settings
    kv = engine.kv_capacity_tokens or int(s.kv_cache_gb * (1 << 30)) // 46_080
    limits = Limits(
        max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=s.max_num_seqs,
        kv_capacity_tokens=kv,
        kv_free_tokens=kv,
        block_size=engine.block_size,
    )
    # a calibrated arranger (`relserve calibrate`) when the engine runs one: the simulator must
    # run the same settings, or it checks another policy than the one measured
    return sim_inputs(engine.tokenizer, limits, engine.policy_settings)


def sim_inputs(tokenizer, limits: Limits, settings: PolicySettings) -> dict:
    """The simulator's view of an engine from its tokenizer, limits and policy settings."""
    from relserve.engine.chat_template import ChatPrompter

    prompter = ChatPrompter(tokenizer)
    return {
        "policy_settings": settings,
        "render_wrap": prompter.text,
        "tokenize": lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
        "limits": limits,
        "limits_dict": {
            "max_num_batched_tokens": limits.max_num_batched_tokens,
            "max_num_seqs": limits.max_num_seqs,
            "kv_capacity_tokens": limits.kv_capacity_tokens,
            "block_size": limits.block_size,
        },
    }


def resimulate(trace: Sequence[TraceQuery], report: BenchmarkReport, model: str | None = None) -> list[dict]:
    """The simulator's side of a saved run again, without an engine: ``trace`` is the run's trace,
    ``model`` the model it ran (its tokenizer). A run saved before its report kept the policy
    settings is simulated with this machine's calibrated settings for the model."""
    from transformers import AutoTokenizer

    from relserve.calibration import load_policy_settings
    from relserve.engine.settings import EngineSettings
    from relserve.model import resolve_model

    if report.cost_model is None or report.limits is None:
        raise ValueError("this saved run has no cost model or limits: it ran no plug-in policy, nothing to simulate")
    spec = resolve_model(model)
    if report.policy_settings is not None:
        settings = PolicySettings.model_validate(report.policy_settings)
    else:
        settings = load_policy_settings(spec.model_id, EngineSettings().resolved_dtype) or PolicySettings()
    # the saved limits are ``sim_inputs``'s limits_dict: a fresh engine's, every block free
    limits = Limits(**report.limits, kv_free_tokens=report.limits["kv_capacity_tokens"])
    return simulate_like(trace, report, sim_inputs(AutoTokenizer.from_pretrained(spec.path), limits, settings))


def simulate_like(trace: Sequence[TraceQuery], report: BenchmarkReport, inputs: dict) -> list[dict]:
    """The simulator on the same trace, loads and policies, with each run's real output lengths;
    and per load the clairvoyant schedule with the relserve run's answer lengths (the first
    policy's where relserve did not run), to which every run's measured mean is compared."""
    from relserve.sim import simulate, template_renderer
    from relserve.sim.run import limit_of

    cost = CostModel(**report.cost_model)
    render = template_renderer(wrap=inputs["render_wrap"])
    lengths_of = {
        (s.policy, s.load): {r["id"]: r["output_lengths"] for r in report.runs[f"{s.policy}@{s.load:g}"]["records"]}
        for s in report.summaries
    }
    best: dict[float, float | None] = {}
    for load in sorted({s.load for s in report.summaries}):
        ref = next((s for s in report.summaries if s.load == load and s.policy == "relserve"), None)
        ref = ref or next(s for s in report.summaries if s.load == load)
        limit = limit_of(scale_arrivals(trace, load), cost, inputs["limits"], tokenize=inputs["tokenize"], render=render,
                         output_lengths=lengths_of[(ref.policy, load)])
        best[load] = limit.clairvoyant.mean if limit.clairvoyant else None
    out = []
    for s in report.summaries:
        res = simulate(
            scale_arrivals(trace, s.load),
            s.policy,
            cost,
            inputs["limits"],
            tokenize=inputs["tokenize"],
            render=render,
            output_lengths=lengths_of[(s.policy, s.load)],
            isolated=False,
            settings=inputs["policy_settings"],
        )
        clair = best[s.load]
        out.append(
            {
                "policy": s.policy,
                "load": s.load,
                "measured_mean_latency": s.mean_latency,
                "simulated_mean_latency": res.summary.mean_latency,
                "relative_error": (res.summary.mean_latency - s.mean_latency) / s.mean_latency if s.mean_latency else None,
                "simulated_p95_latency": res.summary.p95_latency,
                "simulated_span_s": res.summary.simulated_seconds,
                "simulated_steps": sum(v for k, v in res.summary.steps.items() if k != "idle"),
                "clairvoyant_mean_latency": clair,
                "measured_over_clairvoyant": s.mean_latency / clair if clair else None,
            }
        )
    return out
