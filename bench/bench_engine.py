"""The engine at the machine's limit: engine-level settings side by side, against the machine's peak.

For each variant (its own process, one after another in one run): the engine's start time, then
a compact probe grid of `relserve calibrate` (prefills of 128-1,024 tokens, decodes of 1-256
requests, mixed steps) fitted by the step model, giving the fixed cost of a step and the cost of
a prefill token and of a decoded request. The variants are engine-level, so every policy pays
the same steps: the allocator and OpenMP runtime preloaded into vLLM's processes (tcmalloc,
Intel or LLVM OpenMP), bfloat16 weights, torch.compile (``enforce_eager`` off) and the model's
threads. The machine's peak is measured first in this process: a torch matmul's GFLOP/s on the
engine's threads in float32 and bfloat16, and the memory bandwidth of reading a 1 GiB tensor.
The report sets each cost against it: a prefill token's FLOPs over its time (GFLOP/s achieved),
and the weights' bytes read once per step over the fixed cost (GB/s).

    .venv/bin/python bench/bench_engine.py            # ~15 minutes
    .venv/bin/python bench/bench_engine.py --variants base,tcmalloc

Results: bench/out/engine_settings.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"

#: name -> (Engine options, environment); every variant on the engine's default limits and, unless it
#: names one, the default dtype (bfloat16 where the CPU computes it natively, else float32), so
#: the variants that are not about the dtype compare in the same one; the report names each's
VARIANTS: dict[str, tuple[dict, dict]] = {
    "base": ({"cpu_allocator": "system", "cpu_openmp": "gnu"}, {}),
    "fp32": ({"cpu_allocator": "system", "cpu_openmp": "gnu", "dtype": "float32"}, {}),
    "tcmalloc": ({"cpu_allocator": "tcmalloc", "cpu_openmp": "gnu"}, {}),
    "tcmalloc+intel-omp": ({"cpu_allocator": "tcmalloc", "cpu_openmp": "intel"}, {}),
    "tcmalloc+llvm-omp": ({"cpu_allocator": "tcmalloc", "cpu_openmp": "llvm"}, {}),
    "bf16": ({"cpu_allocator": "system", "cpu_openmp": "gnu", "dtype": "bfloat16"}, {}),
    "tcmalloc+bf16": ({"cpu_allocator": "tcmalloc", "cpu_openmp": "gnu", "dtype": "bfloat16"}, {}),
    "compiled": ({"cpu_allocator": "system", "cpu_openmp": "gnu", "enforce_eager": False}, {}),
    "tcmalloc+compiled": ({"cpu_allocator": "tcmalloc", "cpu_openmp": "gnu", "enforce_eager": False}, {}),
    "omp-passive": ({"cpu_allocator": "system", "cpu_openmp": "gnu"}, {"OMP_WAIT_POLICY": "PASSIVE"}),
    "one-thread": ({"cpu_allocator": "system", "cpu_openmp": "gnu"}, {"VLLM_CPU_OMP_THREADS_BIND": "0"}),
}


def _grid():
    from relserve.engine.calibrate import ProbeGrid

    return ProbeGrid(
        prefill_lengths=(128, 512),
        prefill_fractions=(0.25, 1.0),
        cached_fractions=(0.0,),
        decode_sizes=(1, 32, 128, 256),
        decode_contexts=(64,),
        decode_steps=12,
        mixed_sizes=(16,),
        mixed_contexts=(128,),
        mixed_fill=(1.0,),
        held_out_every=1000,  # nothing held out: every probe fits
    )


def measure_peak(threads: int) -> dict:
    """GFLOP/s of a torch matmul in float32 and bfloat16, and the GB/s of reading 1 GiB."""
    import torch

    torch.set_num_threads(threads)
    out = {"threads": threads}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        best = 0.0
        for m, k, n in ((2048, 2048, 2048), (1024, 576, 1536)):  # square, and the model's MLP shape
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            for _ in range(3):
                a @ b
            t, reps = time.perf_counter(), 0
            while time.perf_counter() - t < 1.5:
                a @ b
                reps += 1
            best = max(best, 2 * m * k * n * reps / (time.perf_counter() - t) / 1e9)
        out[f"{name}_gflops"] = best
    x = torch.ones(1 << 28, dtype=torch.float32)  # 1 GiB
    x.sum()
    t, reps = time.perf_counter(), 0
    while time.perf_counter() - t < 1.5:
        x.sum()
        reps += 1
    out["read_gbs"] = x.numel() * 4 * reps / (time.perf_counter() - t) / 1e9
    return out


def model_figures() -> dict:
    """FLOPs per prefill token and per decoded row (the LM head runs for each decoded row, and
    once per prefilled request), and the weights' parameter count."""
    from relserve.model import resolve_model

    cfg = json.loads((Path(resolve_model().path) / "config.json").read_text())
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    kv = h * cfg["num_key_value_heads"] // cfg["num_attention_heads"]
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter
    body = per_layer * layers
    head = h * cfg["vocab_size"]
    return {"body_params": body, "head_params": head, "prefill_token_gflop": 2 * body / 1e9,
            "decode_row_gflop": 2 * (body + head) / 1e9, "params": body + head}


def run_variant(name: str) -> dict:
    from relserve import Engine
    from relserve.engine.calibrate import calibrate

    options, env = VARIANTS[name]
    os.environ.update(env)
    t0 = time.monotonic()
    engine = Engine(policy="fcfs", **options)
    start_s = time.monotonic() - t0
    dtype = engine.settings.resolved_dtype
    try:
        cal = calibrate(engine, _grid())
    finally:
        engine.close()
    c = cal.fit.coef
    samples = cal.samples
    periods = [s.seconds for s in samples]
    return {
        "variant": name, "options": options, "env": env, "start_s": start_s, "dtype": dtype,
        "fixed_prefill_s": c["b0"] + c["bP"], "fixed_decode_s": c["b0"] + c["bD"], "fixed_mixed_s": c["b0"] + c["bP"] + c["bD"],
        "per_prefill_token_s": c["alpha_p"], "per_pair_s": c["gamma_p"], "per_decode_row_s": c["alpha_d"],
        "per_context_token_s": c["gamma_d"], "r2": cal.fit.r2, "steps": len(periods), "probe_seconds": sum(periods),
        "coef": c,
    }


def markdown(peak: dict, model: dict, rows: list[dict]) -> str:
    base = next((r for r in rows if r["variant"] == "base"), rows[0])
    lines = [
        f"Machine peak on {peak['threads']} threads: fp32 {peak['fp32_gflops']:.0f} GFLOP/s, bf16 "
        f"{peak['bf16_gflops']:.0f} GFLOP/s (torch matmul), memory read {peak['read_gbs']:.1f} GB/s. "
        f"Model: {model['params'] / 1e6:.0f}M parameters; {model['prefill_token_gflop'] * 1e3:.0f} MFLOP per prefill "
        f"token, {model['decode_row_gflop'] * 1e3:.0f} MFLOP per decoded row.",
        "",
        "| variant | dtype | engine start | fixed cost of a step (prefill / decode / mixed) | prefill token | decoded row "
        "| prefill GFLOP/s (share of peak) | decode-row GFLOP/s | weights read per fixed cost | vs base: token / row / fixed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        # the dtype the variant ran in (a result from before it was recorded: its option, else float32)
        dtype = r.get("dtype") or r["options"].get("dtype") or "float32"
        bf16 = dtype == "bfloat16"
        peak_f = peak["bf16_gflops"] if bf16 else peak["fp32_gflops"]
        tok_gf = model["prefill_token_gflop"] / r["per_prefill_token_s"] if r["per_prefill_token_s"] else float("nan")
        row_gf = model["decode_row_gflop"] / r["per_decode_row_s"] if r["per_decode_row_s"] else float("nan")
        weights_gb = model["params"] * (2 if bf16 else 4) / 1e9
        bw = weights_gb / r["fixed_decode_s"] if r["fixed_decode_s"] else float("nan")
        lines.append(
            f"| {r['variant']} | {dtype} | {r['start_s']:.0f} s | {r['fixed_prefill_s'] * 1e3:.1f} / {r['fixed_decode_s'] * 1e3:.1f} / "
            f"{r['fixed_mixed_s'] * 1e3:.1f} ms | {r['per_prefill_token_s'] * 1e3:.3f} ms | {r['per_decode_row_s'] * 1e3:.3f} ms "
            f"| {tok_gf:.0f} ({tok_gf / peak_f:.0%}) | {row_gf:.0f} | {bw:.1f} GB/s ({bw / peak['read_gbs']:.0%} of read) "
            f"| {r['per_prefill_token_s'] / base['per_prefill_token_s']:.2f} / {r['per_decode_row_s'] / max(base['per_decode_row_s'], 1e-12):.2f} "
            f"/ {r['fixed_decode_s'] / base['fixed_decode_s']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # internal: run one variant in this process
    ap.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        args.json.write_text(json.dumps(run_variant(args.variant)))
        return
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    peak = measure_peak(len(os.sched_getaffinity(0)))
    model = model_figures()
    print(json.dumps(peak), flush=True)
    rows = []
    for name in names:
        path = args.out / f"engine_variant_{name}.json"
        print(f"[{time.strftime('%H:%M:%S')}] variant {name}", flush=True)
        done = subprocess.run([sys.executable, __file__, "--variant", name, "--json", str(path)], check=False)
        if done.returncode != 0:
            print(f"  variant {name} failed (exit {done.returncode})", flush=True)
            continue
        rows.append(json.loads(path.read_text()))
        r = rows[-1]
        print(f"  start {r['start_s']:.0f} s, fixed {r['fixed_decode_s'] * 1e3:.1f} ms, token {r['per_prefill_token_s'] * 1e3:.3f} ms, "
              f"row {r['per_decode_row_s'] * 1e3:.3f} ms", flush=True)
    (args.out / "engine_settings.json").write_text(json.dumps({"peak": peak, "model": model, "variants": rows}, indent=1))
    md = markdown(peak, model, rows)
    (args.out / "engine_settings.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
