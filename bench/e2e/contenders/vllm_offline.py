"""Contender 2: vLLM offline batching, ``LLM.generate`` over each call site's rows of a statement
as one batch in table order (as LOTUS-style dataframe libraries do), statements one after another
in arrival order (one process, one batch at a time)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from e2e.contenders.context import PhaseContext
from e2e.contenders.relserve_udfs import CallLimits, Prompter, UDFConnection, WarmUpCall, structured
from e2e.limits import ENGINE
from e2e.passes import measured_pass
from e2e.processes import vllm_env
from e2e.sessions import FifoLock
from e2e.workload import Scheduled


def run(ctx: PhaseContext) -> dict[str, Any]:
    os.environ.update(vllm_env())
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.sampling_params import StructuredOutputsParams

    t_start = time.perf_counter()
    llm = LLM(model=ctx.model_path, tokenizer=ctx.model_path, dtype=ENGINE.dtype, max_model_len=ENGINE.max_model_len,
              max_num_seqs=ENGINE.max_num_seqs, max_num_batched_tokens=ENGINE.max_num_batched_tokens,
              block_size=ENGINE.block_size, enable_prefix_caching=True, gpu_memory_utilization=0.4,
              kv_cache_memory_bytes=ENGINE.kv_cache_bytes, enforce_eager=True, seed=0)
    started = time.perf_counter() - t_start
    prompter = Prompter(ctx.model_path)
    gen_lock = threading.Lock()
    tokens = {"prompt": 0, "cached": 0}

    def batch(call: CallLimits, prompts: list[str | None]) -> list[str | None]:
        # one LLM.generate over the call site's rows, in table order (no deduplication, no reordering)
        live = [i for i, p in enumerate(prompts) if p is not None]
        texts: list[str | None] = [None] * len(prompts)
        if not live:
            return texts
        ids = prompter.ids([prompts[i] for i in live])
        so = structured(call)
        sp = SamplingParams(max_tokens=call.max_tokens, temperature=0.0,
                            structured_outputs=StructuredOutputsParams(**so) if so else None)
        with gen_lock:
            outs = llm.generate([TokensPrompt(prompt_token_ids=x) for x in ids], sp, use_tqdm=False)
        for i, o in zip(live, outs):
            texts[i] = o.outputs[0].text
            tokens["prompt"] += len(o.prompt_token_ids or [])
            tokens["cached"] += o.num_cached_tokens or 0
        return texts

    batch(WarmUpCall(), ["Say hi."])
    result: dict[str, Any] = {"engine_start_s": started, "loads": {}, "dtype": ENGINE.dtype}
    fifo = FifoLock()

    def connect(s: int) -> UDFConnection:
        return UDFConnection(ctx.datasets, ctx.sql_dir, batch)

    def execute(conn: UDFConnection, w: Scheduled):
        with fifo:  # statements one after another, in arrival order
            return conn.execute(w)

    for load, work in ctx.work_by_load.items():
        result["loads"][str(load)] = done = measured_pass(work, connect, execute, lambda: (tokens["prompt"], tokens["cached"]))
        ctx.log(f"vllm-offline: load {load} done in {done['wall_s']:.0f} s")
    return result
