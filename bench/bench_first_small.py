"""The first small relQuery of a filter/classify template: its content-free probes before the rows
(how relserve ran it until issue 28's last pass) or beside them (how it runs now).

A relQuery of fewer than 16 prompts whose call has no history runs as ``calibrate``: its labels are
picked after dividing out the model's prior, measured once per template from three content-free
probes (relserve/labels/prior.py). The probes used to run as their own relQuery before the
rows were sent; now they are sent together and the executor picks the rows' labels once the probes
are in. Per trial, a new template (so no prior is remembered) runs twice on one engine, each way
once, in alternating order, with and without a 100-row ``llm_map`` running beside it (the busy
engine of a shared server); printed: the mean statement latency of each way and their ratio.

    .venv/bin/python bench/bench_first_small.py                # 10 trials per setting, about 5 minutes
    .venv/bin/python bench/bench_first_small.py --trials 10 --rows 3
    .venv/bin/python bench/bench_first_small.py --paper-ranking   # the scheduler's rule before issue 28's last pass

``--paper-ranking`` runs the engine with ``count_admitted_decode`` off (relserve/policy/settings.py):
a relQuery whose rows all run then ranks ahead of every waiting one, and on the busy engine the
small statement waits for the whole map (docs/benchmarks.md).

Each statement has a template of its own, so neither way finds the other's rows in the prefix
cache. That both ways pick the same labels is a test (tests/test_label_scoring_engine.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REVIEWS = [
    "Loved it, works perfectly.", "Broke after two days.", "Exactly as described, great value.",
    "Terrible smell, sent it back.", "My kids use it every day.", "The lid never fit.",
    "Five stars, would buy again.", "Cheap plastic, cracked at once.",
]
#: the busy engine's statement: long answers, so it occupies the engine for the whole trial
BACKGROUND_ROWS = 100


def one_statement(engine, template: str, reviews: list[str], *, probes_first: bool) -> float:
    """Seconds for one llm_filter over ``reviews`` as a fresh template's first relQuery (both
    orders give the same labels: tests/test_label_scoring_engine.py)."""
    from relserve.functions import make_call
    from relserve.labels.prior import prior_from, submit_probes
    from relserve.planner.plan_and_run import run_call

    call = make_call("llm_filter", template)
    t0 = time.monotonic()
    if probes_first:
        # the old order: the prior measured (and remembered) before the rows are sent
        prior_from(call, engine.model_id, submit_probes(call, engine))
    run_call(call, [reviews], engine=engine, cache=False, progress=False)
    return time.monotonic() - t0


def background(engine, stop: threading.Event) -> None:
    from relserve.functions import make_call
    from relserve.planner.plan_and_run import run_call

    call = make_call("llm_map", "Write a long product description for item number {n}.", max_tokens=64)
    while not stop.is_set():
        run_call(call, [[str(i + int(time.time())) for i in range(BACKGROUND_ROWS)]], engine=engine, cache=False, progress=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--rows", type=int, default=4, help="rows of each small statement (under 16)")
    ap.add_argument("--paper-ranking", action="store_true", help="the scheduler with count_admitted_decode off")
    a = ap.parse_args()

    from relserve import Engine
    from relserve.policy import PolicySettings

    reviews = REVIEWS[: a.rows]
    # the engine limits relserve serves with by default (256 sequences; a 2 GiB KV cache, as bench_e2e)
    settings = PolicySettings(count_admitted_decode=not a.paper_ranking)
    with Engine(model=a.model, kv_cache_gb=2.0, policy_settings=settings) as engine:
        one_statement(engine, "Warm-up: is this review kind? Review: {r}", reviews, probes_first=False)
        for busy in (False, True):
            stop = threading.Event()
            worker = threading.Thread(target=background, args=(engine, stop), daemon=True) if busy else None
            if worker:
                worker.start()
                time.sleep(5)  # the map's rows are decoding before the first trial
            times: dict[bool, list[float]] = {True: [], False: []}
            for trial in range(a.trials):
                order = (True, False) if trial % 2 == 0 else (False, True)
                for probes_first in order:
                    # a template no trial used before: nothing remembered
                    template = f"Trial {int(busy)}-{trial}-{int(probes_first)}: is this review positive? Review: {{r}}"
                    secs = one_statement(engine, template, reviews, probes_first=probes_first)
                    times[probes_first].append(secs)
                print(f"{'busy' if busy else 'idle'} trial {trial}: probes first {times[True][-1]:.2f} s, "
                      f"beside {times[False][-1]:.2f} s", flush=True)
            if worker:
                stop.set()
                worker.join()
            before, now = statistics.mean(times[True]), statistics.mean(times[False])
            print(f"\n{'busy engine (a 100-row llm_map beside)' if busy else 'idle engine'}, {a.rows}-row llm_filter, "
                  f"{a.trials} trials: probes first {before:.2f} s, probes beside the rows {now:.2f} s, "
                  f"ratio {before / now:.2f}x\n", flush=True)


if __name__ == "__main__":
    main()
