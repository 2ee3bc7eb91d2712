"""How much of a label call's rows the prefix cache cannot serve: the rows' prompts share a prefix,
but the engine's cache serves whole KV blocks only (``engine.block_size`` tokens), so the part of
the shared prefix past the last whole block is computed again for every row.

Per task and label method: the rows' relQuery as the call sends it (recorded on the real
engine), the token prefix its prompts share as the engine tokenizes them, and the tokens of it
each row computes again. ``--pad``: the same rows scored as they are and with a run of ``" \\n"``
tokens in front that ends the shared prefix on a block boundary, each from an empty prefix cache:
the tokens computed and how far the rows' margins move (Spearman between the two, the mean
change, rows changing sides of 0). docs/notebook/benchmark-passes.md, "half-filled KV blocks".

    .venv/bin/python bench/experiments/shared_prefix_blocks.py --tasks rt_positive_15 --rows 600
    .venv/bin/python bench/experiments/shared_prefix_blocks.py --tasks rt_positive_15,am_automotive_10 --pad
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1] / "tests"))


def common_prefix(token_lists: list[list[int]]) -> int:
    first = token_lists[0]
    n = min(len(t) for t in token_lists)
    for k in range(n):
        if any(t[k] != first[k] for t in token_lists[1:]):
            return k
    return n


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(xs):
        out = [0] * len(xs)
        for r, i in enumerate(sorted(range(len(xs)), key=lambda i: xs[i])):
            out[i] = r
        return out

    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return num / math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="rt_positive_15", help="tasks of bench/prevalence_tasks.py")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--methods", default="adaptive,bootstrap")
    ap.add_argument("--pad", action="store_true", help="score the adaptive rows with a block-aligning pad too")
    args = ap.parse_args()

    from engine_doubles import RecordingEngine
    from prevalence_tasks import prevalence_tasks

    from relserve import Engine
    from relserve.engine.admission import layout_token_ids
    from relserve.functions import make_call
    from relserve.labels.memory import forget_all
    from relserve.planner.plan_and_run import run_call
    from relserve.relquery import RelQuery

    names = args.tasks.split(",")
    tasks = [t for t in prevalence_tasks(args.rows) if t.name in names]
    with Engine() as engine:
        block = engine.block_size

        def token_ids(rq, prompts):
            return layout_token_ids(engine.tokenizer, engine._prompter(rq.system), prompts, rq.system,
                                    getattr(rq, "prompt_shape", "chat"), rq.answer_field)

        print(f"block size {block} tokens")
        for task in tasks:
            columns = [list(c) for c in zip(*task.values)]
            for method in args.methods.split(","):
                forget_all()
                engine.reset_prefix_cache()
                rec = RecordingEngine(engine)
                run_call(make_call("llm_filter", task.template, method=method), columns, engine=rec, cache=False,
                         progress=False)
                rq = rec.relqueries[-1]
                prompts = [str(p) for p in rq.render()]
                ids = token_ids(rq, prompts)
                shared = common_prefix(ids)
                again = shared - shared // block * block
                print(f"{task.name} {method}: {len(prompts)} rows, {statistics.mean(map(len, ids)):.0f} tokens a row, "
                      f"shared prefix {shared} tokens, {shared // block * block} served from whole blocks, "
                      f"{again} computed again for every row", flush=True)
                if not args.pad or method != "adaptive":
                    continue
                pad = " \n" * ((-shared) % block)
                padded = [pad + p for p in prompts]
                margins, computed = {}, {}
                for name, texts in (("plain", prompts), ("padded", padded)):
                    engine.reset_prefix_cache()
                    q = RelQuery.from_prompts(texts, choices=rq.choices, score_labels=True, prompt_shape=rq.prompt_shape,
                                              answer_field=rq.answer_field, rel_id=f"pad-{name}-{time.monotonic_ns()}")
                    res = engine.submit(q).result()
                    first, second = rq.choices[0], rq.choices[1]
                    margins[name] = [r.label_logprobs[first] - r.label_logprobs[second] for r in res.rows]
                    computed[name] = res.stats.prompt_tokens - res.stats.cached_tokens
                a, b = margins["plain"], margins["padded"]
                print(f"  pad of {len(pad) // 2} tokens: shared prefix {common_prefix(token_ids(rq, padded))} tokens; "
                      f"computed {computed['plain']:,} -> {computed['padded']:,} tokens; margins: Spearman "
                      f"{spearman(a, b):.3f}, mean change {statistics.mean(abs(x - y) for x, y in zip(a, b)):.3f} nats, "
                      f"{sum((x > 0) != (y > 0) for x, y in zip(a, b))} of {len(a)} rows change sides of 0", flush=True)


if __name__ == "__main__":
    main()
