"""Operators benchmark (issue 26): each operator against the obvious Python loop, in one run.

The loop is what a LOTUS-style library does with an engine: one call per group (llm_reduce: the
group's own tree, level by level), per value and per pair (llm_topk's two rounds), per pair
(llm_join). Both sides send the same prompts through the same planner and engine, with the
result cache off and the engine's prefix cache reset before each side, so the difference is the
batching alone: the operators put every group's chunk of a level, every round, every candidate
pair into ONE relQuery.

    python bench/bench_operators.py                   # amazon_reviews from ../shared/datasets
    python bench/bench_operators.py --groups 6 --per-group 12

Prints a table (latency, relQueries, prompts, prompt tokens, prefix-cached tokens) and writes
bench/out/operators.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent


def load(groups: int, per_group: int):
    from relserve.workloads.tables import load_table

    df = load_table("amazon_reviews", columns=["category", "title", "text"])
    cats = df.group_by("category").len().sort(["len", "category"], descending=[True, False])["category"][:groups]
    out = {}
    for i, c in enumerate(cats):
        # groups of different sizes: a small group should not wait for a big one
        n = max(2, per_group * (i % 3 + 1) // 2)
        rows = df.filter(df["category"] == c).head(n)
        out[c] = [t[:300] for t in rows["text"].to_list()]
    titles = df["title"].unique(maintain_order=True).head(16).to_list()
    return out, titles


def labelled_pairs(n: int):
    """n reviews of n different products, and those products' names: review i is about product i."""
    from relserve.workloads.tables import load_table

    df = load_table("amazon_reviews", columns=["name", "title", "text"]).unique("name", keep="first", maintain_order=True)
    df = df.head(n)
    reviews = [f"{t}. {x[:200]}" for t, x in zip(df["title"], df["text"])]
    return reviews, [name[:120] for name in df["name"]]


class Meter:
    """Counts relQueries, prompts and tokens of everything an engine runs."""

    def __init__(self, engine):
        self.engine = engine
        self.relqueries = self.prompts = self.prompt_tokens = self.cached_tokens = 0
        self.handles = []

    def submit(self, rq):
        self.relqueries += 1
        self.prompts += len(rq)
        h = self.engine.submit(rq)
        self.handles.append(h)
        return h

    def totals(self):
        for h in self.handles:
            s = h.result().stats
            self.prompt_tokens += s.prompt_tokens
            self.cached_tokens += s.cached_tokens
        self.handles = []
        return {"relqueries": self.relqueries, "prompts": self.prompts,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens}

    def __getattr__(self, name):
        return getattr(self.engine, name)


def measure(engine, fn):
    engine.wait_idle()
    engine.reset_prefix_cache()
    meter = Meter(engine)
    t0 = time.perf_counter()
    result = fn(meter)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, **meter.totals()}, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--per-group", type=int, default=10)
    ap.add_argument("--context", type=int, default=1024, help="context_tokens of llm_reduce (a tree for big groups)")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--block", type=int, default=3, help="llm_join blocking: right rows kept per left row (0: skip)")
    ap.add_argument("--match", type=int, default=12, help="reviews (and their products) of the labelled join")
    ap.add_argument("--sql-join", action="store_true",
                    help="only the labelled join in DuckDB SQL (relserve.duckdb.sql), full and llm_options(block := k)")
    ap.add_argument("--method", default="score", help="label method of the --sql-join runs (score or batch)")
    args = ap.parse_args()
    if args.sql_join:
        return sql_join_main(args)

    from relserve import Engine
    from relserve.operators import join_call, reduce_call, run_join, run_reduce
    from relserve.operators.scoring import label_scores
    from relserve.operators.topk import run_topk, topk_call
    from relserve.planner.engine_ref import EngineRef
    from relserve.planner.plan_and_run import run_call

    groups, titles = load(args.groups, args.per_group)
    t0 = time.perf_counter()
    engine = Engine()
    print(f"engine started in {time.perf_counter() - t0:.0f}s; {len(groups)} groups of "
          f"{', '.join(str(len(v)) for v in groups.values())} reviews; {len(titles)} titles")
    rows = []

    # -- llm_reduce ------------------------------------------------------------------------------
    rc = reduce_call("Summarize these product reviews in one sentence:\n{review}", max_tokens=24,
                     context_tokens=args.context)
    values = list(groups.values())
    op, out_op = measure(engine, lambda e: run_reduce(rc, values, engine=e, cache=False))
    loop, out_loop = measure(engine, lambda e: [run_reduce(rc, [g], engine=e, cache=False) for g in values])
    levels = len(out_op.levels)
    same = sum(a == b.values[0] for a, b in zip(out_op.values, out_loop))
    rows.append(("llm_reduce", f"{len(values)} groups, {levels} levels", op, loop, f"{same}/{len(values)} equal"))

    # -- llm_topk --------------------------------------------------------------------------------
    tc = topk_call("Is this review title enthusiastic about the product? {title}", args.k)

    def topk_loop(e):
        ref = EngineRef(e)
        scores = {}
        for t in titles:  # one call per value
            lp = label_scores(tc.score, [[t]], ref).logprobs[0]
            scores[t] = lp["yes"] - lp["no"]
        pool = sorted(scores, key=lambda t: -scores[t])[: tc.pool_size(len(scores))]
        wins = {t: 0 for t in pool}
        margin = {}
        for a in pool:  # one call per ordered pair
            for b in pool:
                if a != b:
                    lp = label_scores(tc.compare, [[a], [b]], ref).logprobs[0]
                    margin[(a, b)] = lp["first"] - lp["second"]
        for x, a in enumerate(pool):
            for b in pool[x + 1 :]:
                m = margin[(a, b)] - margin[(b, a)]
                wins[a if m > 0 else b] += m != 0
        return sorted(pool, key=lambda t: (-wins[t], -scores[t]))[: tc.k]

    op, out_op = measure(engine, lambda e: run_topk(tc, titles, engine=e))
    loop, out_loop = measure(engine, topk_loop)
    rows.append(("llm_topk", f"{len(titles)} values, k={tc.k}, pool {tc.pool_size(len(titles))}", op, loop,
                 "same top-k" if out_op.values == out_loop else f"{out_op.values} vs {out_loop}"))

    # -- llm_join --------------------------------------------------------------------------------
    left = [g[0] for g in values]
    right = [c.split(",")[0] for c in groups]
    jc = join_call("Review: {review}\nProduct category: {category}\nIs the review about a product of this category?")
    op, out_op = measure(engine, lambda e: run_join(jc, left, right, engine=e, cache=False))

    def join_loop(e):
        kept = []
        for i, lv in enumerate(left):
            for j, rv in enumerate(right):
                o = run_call(jc, [[lv], [rv]], engine=e, cache=False, progress=False)
                if o.values[0]:
                    kept.append((i, j))
        return kept

    loop, out_loop = measure(engine, join_loop)
    rows.append(("llm_join", f"{len(left)}x{len(right)} pairs", op, loop,
                 f"{len(out_op.pairs)} vs {len(out_loop)} pairs kept (batch calibration sees all pairs at once)"))

    # -- llm_join with blocking, on a labelled task ---------------------------------------------
    blocking = None
    if args.block:
        from relserve.operators.blocking import block

        reviews, products = labelled_pairs(args.match)
        mc = join_call("Review: {review}\nProduct: {product}\nIs the review about this product?")
        t0 = time.perf_counter()
        kept = block(reviews, products, args.block)
        block_s = time.perf_counter() - t0
        full, out_full = measure(engine, lambda e: run_join(mc, reviews, products, engine=e, cache=False))
        blocked, out_blocked = measure(engine, lambda e: run_join(mc, reviews, products, candidates=kept, engine=e, cache=False))
        truth = {(i, i) for i in range(len(reviews))}
        full_set, blocked_set = set(out_full.pairs), set(out_blocked.pairs)
        blocking = {
            "left": len(reviews), "right": len(products), "k": args.block, "pairs_full": out_full.asked,
            "pairs_blocked": out_blocked.asked, "embedding_s": block_s,
            "candidates_recall_of_truth": len(truth & set(kept)) / len(truth),
            "blocked_recall_of_full": len(full_set & blocked_set) / len(full_set) if full_set else None,
            "full_kept_pairs_in_candidates": len(full_set & set(kept)) / len(full_set) if full_set else None,
            "full_recall_of_truth": len(truth & full_set) / len(truth),
            "blocked_recall_of_truth": len(truth & blocked_set) / len(truth),
            "full_pairs_kept": len(full_set), "blocked_pairs_kept": len(blocked_set),
            "full": full, "blocked": blocked,
        }

    print()
    print(f"{'operator':<11} {'size':<30} {'side':<9} {'latency':>8} {'relQ':>5} {'prompts':>7} {'prompt tok':>10} {'cached':>7}")
    for name, size, op, loop, note in rows:
        for side, m in (("operator", op), ("loop", loop)):
            print(f"{name:<11} {size:<30} {side:<9} {m['seconds']:>7.1f}s {m['relqueries']:>5} {m['prompts']:>7} "
                  f"{m['prompt_tokens']:>10,} {m['cached_tokens']:>7,}")
        print(f"{'':<11} {'':<30} speedup {loop['seconds'] / op['seconds']:.1f}x; {note}")
    if blocking is not None:
        b = blocking
        print(f"\nllm_join with blocking: {b['left']} reviews x {b['right']} products (truth: each review's own product)")
        for side in ("full", "blocked"):
            m = b[side]
            print(f"  {side:<8} {b['pairs_' + side]:>4} pairs  {m['seconds']:>6.1f}s  {m['prompt_tokens']:>7,} prompt tokens  "
                  f"kept {b[side + '_pairs_kept']:>3}  recall of truth {b[side + '_recall_of_truth']:.0%}")
        print(f"  blocking (k={b['k']}, {b['embedding_s']:.1f}s to embed): candidates hold {b['candidates_recall_of_truth']:.0%} of the "
              f"true pairs and {b['full_kept_pairs_in_candidates']:.0%} of the pairs the full join kept; the blocked join "
              f"kept {b['blocked_recall_of_full']:.0%} of the full join's pairs (recall vs full)")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "operators.json").write_text(json.dumps(
        {"rows": [{"operator": n, "size": s, "operator_run": o, "loop": lp, "note": note} for n, s, o, lp, note in rows],
         "join_blocking": blocking}, indent=1))
    engine.close()


def sql_join_main(args) -> None:
    """The labelled join through relserve.duckdb.sql: ``JOIN ... ON llm_filter(...)`` over every
    pair, then with ``llm_options(block := k)``; recall of each against the truth and of the
    blocked join against the full one."""
    import pyarrow as pa

    import relserve.duckdb
    from relserve import Engine

    reviews, products = labelled_pairs(args.match)
    t0 = time.perf_counter()
    engine = Engine()
    print(f"engine started in {time.perf_counter() - t0:.0f}s; {len(reviews)} reviews x {len(products)} products")
    template = "Review: {review}\nProduct: {product}\nIs the review about this product?"
    sides = {}
    for name, extra in (("full", ""), ("blocked", f", block := {args.block}")):
        def run(e, extra=extra):
            con = relserve.duckdb.connect(engine=e, progress=False)
            con.con.register("r", pa.table({"id": list(range(len(reviews))), "text": reviews}))
            con.con.register("p", pa.table({"id": list(range(len(products))), "name": products}))
            q = (f"SELECT r.id, p.id FROM r JOIN p ON llm_filter('{template}', r.text, p.name, "
                 f"llm_options(method := '{args.method}'{extra}))")
            ex = con.explain(q)
            return set(con.sql(q).fetchall()), ex
        # a fresh result cache per side: the blocked join must not read the full join's answers
        os.environ["RELSERVE_HOME"] = tempfile.mkdtemp(prefix=f"relserve-sql-join-{name}-")
        m, (pairs, ex) = measure(engine, run)
        blocks = getattr(ex, "blocks", [])
        sides[name] = {"measure": m, "pairs": sorted(pairs), "asked": blocks[0].pairs_kept if blocks else
                       len(reviews) * len(products), "embed_s": blocks[0].embed_s if blocks else 0.0}
    truth = {(i, i) for i in range(len(reviews))}
    full, blocked = set(map(tuple, sides["full"]["pairs"])), set(map(tuple, sides["blocked"]["pairs"]))
    result = {
        "method": args.method, "k": args.block, "left": len(reviews), "right": len(products),
        "full_recall_of_truth": len(truth & full) / len(truth),
        "blocked_recall_of_truth": len(truth & blocked) / len(truth),
        "blocked_recall_of_full": len(full & blocked) / len(full) if full else None,
        "full_precision": len(truth & full) / len(full) if full else None,
        "blocked_precision": len(truth & blocked) / len(blocked) if blocked else None,
        **{name: {k: v for k, v in side.items() if k != "pairs"} for name, side in sides.items()},
    }
    for name in ("full", "blocked"):
        m = sides[name]["measure"]
        print(f"  SQL {name:<8} {sides[name]['asked']:>4} pairs asked  {m['seconds']:>6.1f}s  {m['relqueries']} relQuery  "
              f"{m['prompt_tokens']:>7,} prompt tokens  accepted {len(full if name == 'full' else blocked):>3}  "
              f"recall of truth {result[name + '_recall_of_truth']:.0%}")
    print(f"  blocked join (k={args.block}, method={args.method}, embedding {sides['blocked']['embed_s']:.1f}s): "
          f"recall vs the full join {result['blocked_recall_of_full'] if result['blocked_recall_of_full'] is None else format(result['blocked_recall_of_full'], '.0%')}")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"operators_sql_join_{args.method}.json").write_text(json.dumps(result, indent=1))
    engine.close()


if __name__ == "__main__":
    main()
