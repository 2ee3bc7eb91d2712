"""Knobs of the scheduling policies."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PolicySettings(BaseModel):
    #: Starvation prevention (Eq. 13): a relQuery whose waiting time divided by its request count
    #: exceeds this many seconds gets priority 0. None turns it off. The waiting time runs from
    #: arrival until all of its requests are admitted, so a big relQuery cannot starve in its
    #: core phase either. 5 s/request came from `relserve sim --sweep` on this machine's
    #: benchmark trace with an earlier, slower calibration (2 boosted so many relQueries that the
    #: mean rose); with the current one no threshold from 1 to 13 changes that trace's mean
    #: (docs/benchmarks.md#simulator-speed-and-starvation), so 5 stays as a guard. Scale it with
    #: the per-request service time of the hardware (the paper's GPUs are far faster).
    starvation_threshold: float | None = Field(default=5.0, gt=0)
    #: Requests sampled per relQuery to estimate its prefix-cache miss ratio (Eq. 11).
    cache_sample_size: int = Field(default=8, ge=1)
    #: Reuse a relQuery's priority while all its requests keep waiting (Eq. 12).
    reuse_priorities: bool = True
    #: The paper drops already-prefilled requests from the decomposition (Section 4.2). When
    #: True, a relQuery's remaining decode steps are added to its priority instead.
    count_running_decode: bool = False
    #: A relQuery whose requests have all been admitted ranks by the decode they still need,
    #: not by 0 (the paper's rule: only unprefilled requests count). With the paper's rule a
    #: 4-row relQuery arriving beside a 100-row one decoding 64-token answers ranked behind it
    #: and waited for all of it
    #: (docs/benchmarks.md#a-small-relquery-beside-one-whose-rows-all-decode). A relQuery with
    #: requests still waiting keeps the paper's rule (counting them too cost mean latency on a
    #: saturated trace; ``count_running_decode``).
    count_admitted_decode: bool = True
    #: Adaptive Batch Arranger candidates (policy/aba.py). ``fill_prefill``: a prefill step
    #: filled past the head relQuery with the next ones in priority order, instead of the
    #: paper's one-relQuery candidate.
    fill_prefill: bool = False
    #: A prefill step also takes, past the head relQuery, every waiting relQuery that answers in
    #: that step (one token left per request: label scoring, probes) and whose prefill costs at
    #: most the step's fixed cost, in priority order (``aba.ride_along``). Such a relQuery never
    #: decodes, so it slows no decode step; alone it would pay a fixed cost of its own. 20
    #: one-row scoring relQueries submitted together took 1.33 s with the paper's one-relQuery
    #: candidate, and one relQuery of the same 20 rows 0.53 s (docs/benchmarks.md).
    fill_one_token: bool = True
    #: Consider a mixed step (decode every running request plus a prefill chunk in priority
    #: order) beside the pure prefill and decode steps.
    mixed_steps: bool = False
    #: Prefill tokens of a mixed step (None: the step's whole token budget).
    mixed_chunk_tokens: int | None = Field(default=None, ge=16)
    #: Weight of Eq. 16 (what waiting relQueries gain from decoding together) in the
    #: transitional case; 1 is the paper's rule.
    transitional_gain: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    #: How much a fixed step cost saved now counts for the relQueries expected to arrive before
    #: the queued work is done (arrival rate x queued work); 0 looks at the relQueries present
    #: only, as the paper does. Only with ``mixed_steps``.
    backlog_weight: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    #: While another tenant has work, a tenant without its own cap (the tenants file's
    #: ``max_running_shared``) holds at most the running requests whose decode step costs at most
    #: this many times a step of one request (cost model; see policy/tenant_cap.py). None: no
    #: default cap. One tenant alone is never capped.
    tenant_step_slowdown: float | None = Field(default=2.0, gt=1, allow_inf_nan=False)
    #: A tenant counts as having work for this long after its last request left the engine, so a
    #: tenant sending one small relQuery after another keeps others capped in the gaps between them
    #: (in bench/bench_tenants_sim.py 1 s, shorter than those gaps, did not protect the small
    #: tenant and 3 s did: docs/benchmarks.md#two-tenants-one-flooding-simulator).
    tenant_linger_s: float = Field(default=3.0, ge=0, allow_inf_nan=False)
    #: In a decode step, running relQueries ranked behind sit out while the ones ahead decode,
    #: when their requests cost those more than the fixed step cost the held ones pay again
    #: (``aba.decode_hold``; never on hardware whose decode step barely grows with its batch).
    decode_subset: bool = True
    #: Estimate a relQuery's answer length from its finished rows (the longest answer seen so
    #: far, never above max_tokens) instead of max_tokens (``RelQueryTracker``).
    learn_output: bool = False
    #: Estimate a relQuery's answer length from the earlier relQueries of the same call (the
    #: longest answer of each of its last finished relQueries) instead of max_tokens
    #: (``RelQueryTracker``).
    output_history: bool = False
    #: Sarathi's chunk: the token budget of each mixed step.
    sarathi_chunk_tokens: int = Field(default=512, ge=16)
    #: Seed for the cache-miss sampling, so simulations repeat exactly.
    seed: int = 0
