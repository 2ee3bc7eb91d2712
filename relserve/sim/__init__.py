"""A discrete-event simulator of one vLLM engine driven by the same policy objects as the engine.

* ``engine.py``: the step loop and its host semantics (PREFILL / DECODE / MIXED / IDLE, KV blocks,
  preemption), matching the vLLM scheduler plug-in;
* ``prefix_cache.py``: vLLM-style automatic prefix caching (chained block hashes, LRU eviction);
* ``prepared_trace.py``: rendering and tokenizing each row once (``render``, ``tokenize`` are pluggable);
* ``run.py``: ``simulate`` / ``simulate_many`` and the isolated latencies behind the slowdown
  metric (each relQuery alone on an empty engine under FCFS, the same reference for every policy);
* ``metrics.py``: Eq. 2 waiting / core / tail per relQuery and the per-policy summary;
* ``sweep.py``: the starvation-threshold sweep and the rule that picks a threshold;
* ``report.py``: JSON and Markdown output.

Typical use::

    from relserve.sim import simulate_many, markdown_table
    from relserve.workloads import generate_trace
    results = simulate_many(generate_trace("beer_reviews", 100, 0.5), ["vllm", "fcfs", "relserve"])
    print(markdown_table(results))
"""

from relserve.block_hashes import block_hashes
from relserve.sim.engine import EngineSim, EngineStats, SimulationError
from relserve.sim.metrics import PolicySummary, RelQueryTiming, SimResult
from relserve.sim.prefix_cache import BlockPool
from relserve.sim.prepared_trace import PreparedTrace, prepare_trace, template_renderer, word_tokenizer
from relserve.sim.report import markdown_table, results_to_dict, sweep_markdown, write_results
from relserve.sim.run import (
    DEFAULT_LIMITS,
    ISOLATED_POLICY,
    as_prepared,
    default_limits,
    isolated_latencies,
    simulate,
    simulate_many,
)
from relserve.sim.sweep import DEFAULT_THRESHOLDS, StarvationSweep, SweepPoint, choose_threshold, sweep_starvation
from relserve.workloads.traces import generate_trace, read_trace, write_trace

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_THRESHOLDS",
    "ISOLATED_POLICY",
    "BlockPool",
    "EngineSim",
    "EngineStats",
    "PolicySummary",
    "PreparedTrace",
    "RelQueryTiming",
    "SimResult",
    "SimulationError",
    "StarvationSweep",
    "SweepPoint",
    "as_prepared",
    "block_hashes",
    "choose_threshold",
    "default_limits",
    "generate_trace",
    "isolated_latencies",
    "markdown_table",
    "prepare_trace",
    "read_trace",
    "results_to_dict",
    "simulate",
    "simulate_many",
    "sweep_markdown",
    "sweep_starvation",
    "template_renderer",
    "word_tokenizer",
    "write_results",
    "write_trace",
]
