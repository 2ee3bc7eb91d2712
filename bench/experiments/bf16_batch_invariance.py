"""Does a row's label score depend on the rows scored beside it? bfloat16 against float32.

Real engine (vLLM's ``LLM``, the default model) and the GEMM kernels vLLM calls on this CPU. Two
parts:

1. **Kernels.** For the model's linear shapes, a product over M rows at once against the same
   rows taken 8 at a time, through the three paths vLLM's CPU backend takes (oneDNN ``onednn_mm``, the
   SGL packed kernel for weights under 1 MiB, torch's ``F.linear``) and oneDNN in float32;
   prints how many of the M rows came out with other bits.
2. **The engine.** 96 critics' snippets (rotten_tomatoes; ``--task products``: customer reviews
   of products), a yes/no question, each row's margin
   ``log p(yes) - log p(no)`` read with ``logprob_token_ids``, scored as one batch, in batches of 7
   in reverse order, alone (every third row), and as one batch again over a warm prefix cache;
   per dtype (``bfloat16``, ``bfloat16`` with the lm_head in float32 through vLLM's
   ``hf_overrides={"head_dtype": "float32"}``, ``float32``), how many margins equal the one-batch
   run's bit for bit, their mean and largest difference, and how many rows cross the median.

    .venv/bin/python bench/experiments/bf16_batch_invariance.py            # about 3 minutes
    .venv/bin/python bench/experiments/bf16_batch_invariance.py --kernels  # part 1 only, seconds
    # a second task: customer reviews of products (amazon_reviews), another question
    .venv/bin/python bench/experiments/bf16_batch_invariance.py --task products --modes bfloat16,float32
    # what does not remove it: vLLM's split of the attention over the KV cache off, no prefix
    # cache, no prompt split across steps
    VLLM_CPU_ATTN_SPLIT_KV=0 .venv/bin/python bench/experiments/bf16_batch_invariance.py
    .venv/bin/python bench/experiments/bf16_batch_invariance.py --no-prefix-cache --batched-tokens 16384

Written up in docs/quality.md ("The same answer wherever the row is asked") and the notebook.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time

from relserve.engine.settings import EngineSettings

#: the default model's linear shapes (out, in): o_proj, qkv, gate_up, down, lm_head
SHAPES = ((576, 576), (960, 576), (3072, 576), (576, 1536), (49152, 576))
MODES = ("bfloat16", "bfloat16-head-float32", "float32")
#: (table, column, question): the critics' snippets, and customer reviews of products for a second task
TASKS = {"critics": ("rotten_tomatoes", "review_content", "Does the critic like the film? Review: {}\nAnswer yes or no."),
         "products": ("amazon_reviews", "text", "Is this customer satisfied with the product? Review: {}\nAnswer yes or no.")}


def kernels() -> None:
    import torch
    import torch.nn.functional as F
    from vllm import _custom_ops as ops

    torch.manual_seed(0)
    print("rows of an M-row product whose bits differ from the same row computed 8 rows at a time:")
    for n, k in SHAPES:
        w = torch.randn(n, k)
        x = torch.randn(300, k)
        f32 = ops.create_onednn_mm(w.t().contiguous(), 32)  # what vLLM runs in float32
        bf16 = ops.create_onednn_mm(w.bfloat16().t(), 32)
        paths = {"oneDNN float32": (lambda a, h=f32: ops.onednn_mm(h, a.contiguous(), None), x),
                 "oneDNN bfloat16": (lambda a, h=bf16: ops.onednn_mm(h, a.contiguous(), None), x.bfloat16()),
                 "torch bfloat16": (lambda a, w=w.bfloat16(): F.linear(a, w), x.bfloat16())}
        if n * k * 2 <= 1 << 20:  # vLLM gives weights under 1 MiB to the SGL kernel
            packed = torch.ops._C.convert_weight_packed(w.bfloat16())
            paths["SGL bfloat16"] = (lambda a, p=packed, n=n: ops.weight_packed_linear_cpu(a.contiguous(), p, n, None),
                                     x.bfloat16())
        for name, (f, xs) in paths.items():
            # (against products of 8 rows: a single row takes a kernel of its own in float32)
            eights = torch.cat([f(xs[i:i + 8]) for i in range(0, 300, 8)])
            counts = [int(((f(xs[:m]) - eights[:m]).abs().amax(dim=1) > 0).sum()) for m in (16, 33, 100, 300)]
            print(f"  {n}x{k} {name:16s} M=16: {counts[0]}, M=33: {counts[1]}, M=100: {counts[2]}, M=300: {counts[3]}")


def engine_run(mode: str, task: str, n: int, prefix_cache: bool, batched_tokens: int) -> dict:
    """One dtype's margins in four arrangements (run in a process of its own)."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from relserve.model import resolve_model
    from relserve.workloads import load_table

    path = resolve_model(None).path
    table, column, question = TASKS[task]
    texts = [t for t in load_table(table, columns=[column])[column].to_list() if t][:n]
    tok = AutoTokenizer.from_pretrained(path)
    prompts = []
    for t in texts:
        chat = tok.apply_chat_template([{"role": "user", "content": question.format(t)}], add_generation_prompt=True,
                                       tokenize=False)
        prompts.append({"prompt_token_ids": tok.encode(chat, add_special_tokens=False)})
    yes, no, cap_yes, cap_no = (tok.encode(w, add_special_tokens=False)[0] for w in ("yes", "no", "Yes", "No"))
    options = {"dtype": "float32" if mode == "float32" else "bfloat16"}
    if mode == "bfloat16-head-float32":
        options["hf_overrides"] = {"head_dtype": "float32"}
    s = EngineSettings()  # relserve's engine, but for the dtype and the two settings under test
    llm = LLM(model=path, tokenizer=path, max_model_len=s.max_model_len, max_num_seqs=s.max_num_seqs,
              max_num_batched_tokens=batched_tokens, block_size=s.block_size, enable_prefix_caching=prefix_cache,
              enforce_eager=True, seed=0, kv_cache_memory_bytes=int(s.kv_cache_gb * (1 << 30)), **options)
    params = SamplingParams(max_tokens=1, temperature=0, logprob_token_ids=[yes, no, cap_yes, cap_no])

    def margins(outs) -> list[float]:
        def lse(a: float, b: float) -> float:
            return math.log(math.exp(a) + math.exp(b))

        out = []
        for o in outs:
            lp = o.outputs[0].logprobs[0]
            out.append(lse(lp[yes].logprob, lp[cap_yes].logprob) - lse(lp[no].logprob, lp[cap_no].logprob))
        return out

    def scored(groups: list[list[int]], cold: bool = True) -> list[float | None]:
        if cold:
            llm.reset_prefix_cache()
        got: list[float | None] = [None] * n
        for g in groups:
            for i, m in zip(g, margins(llm.generate([prompts[i] for i in g], params, use_tqdm=False))):
                got[i] = m
        return got

    start = time.time()
    rows = list(range(n))
    one = scored([rows])
    runs = {"one batch": one,
            "batches of 7, reversed": scored([rows[::-1][i:i + 7] for i in range(0, n, 7)]),
            "alone": scored([[i] for i in range(0, n, 3)]),
            "one batch, warm prefix cache": scored([rows], cold=False)}
    return {"mode": mode, "seconds": round(time.time() - start, 1), "runs": runs}


def report(result: dict) -> None:
    one = result["runs"]["one batch"]
    median = statistics.median(one)
    print(f"{result['mode']} ({result['seconds']} s for the four runs):")
    for name, got in result["runs"].items():
        if name == "one batch":
            continue
        pairs = [(a, b) for a, b in zip(one, got) if b is not None]
        diffs = [abs(a - b) for a, b in pairs]
        same = sum(a == b for a, b in pairs)
        crossed = sum((a > median) != (b > median) for a, b in pairs)
        print(f"  {name:30s} identical {same}/{len(pairs)}, mean |difference| {statistics.mean(diffs):.4f}, "
              f"largest {max(diffs):.3f}, rows across the median {crossed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", action="store_true", help="part 1 only")
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--task", choices=sorted(TASKS), default="critics")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated dtypes to run (default: all three)")
    ap.add_argument("--no-prefix-cache", action="store_true", help="the engine without its prefix cache")
    ap.add_argument("--batched-tokens", type=int, default=EngineSettings().max_num_batched_tokens,
                    help="max_num_batched_tokens (relserve's 1024; 16384: no prompt is split across steps)")
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one dtype, in a process of its own
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(engine_run(args.mode, args.task, args.rows, not args.no_prefix_cache, args.batched_tokens)))
        return
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        ap.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")
    kernels()
    if args.kernels:
        return
    for mode in modes:
        more = ["--no-prefix-cache"] * args.no_prefix_cache + ["--batched-tokens", str(args.batched_tokens)]
        done = subprocess.run([sys.executable, __file__, "--mode", mode, "--rows", str(args.rows), "--task", args.task, *more],
                              capture_output=True, text=True, check=True)
        # (vLLM logs to stdout too: the result is the one JSON line)
        report(json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"mode"'))))


if __name__ == "__main__":
    main()
