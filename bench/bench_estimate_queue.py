"""CPU a one-row estimate costs behind the engine's queue (issue 63, item 5).

An estimate's "now" figure replays the work the engine holds (``Engine.queued()``) with the
engine's policy in the simulator. That replay is bounded: at most
``relserve.estimate.snapshot.MAX_REPLAYED_REQUESTS`` queued requests are replayed (a sample of
every relQuery in flight, its running requests first), the rest is summarised per relQuery as
tokens, and the replay stops once the estimated call has finished. This script measures the
CPU seconds (``time.process_time``) of one estimate of a one-row ``llm_map`` behind queues of
every size given, with the engine's queue held by a stand-in that answers ``queued()`` as a
running engine does (relQueries of ``--rows-per-relquery`` waiting rows, the first of them
with ``--running`` rows decoding); the prompts are counted with the default model's tokenizer,
as on the server (``relserve model prepare`` first).

    .venv/bin/python bench/bench_estimate_queue.py                       # 500, 2,000 and 8,000 rows queued
    .venv/bin/python bench/bench_estimate_queue.py --rows 8000 --policy fcfs

Prints, per queue size and policy, the CPU seconds of the estimate (the median of ``--repeat``
runs), the requests the replay held and its ``now_s``. A few seconds in all.
"""

from __future__ import annotations

import argparse
import statistics
import time

from relserve.engine.queued import QueuedRelQuery, QueuedRequest
from relserve.estimate.estimate import estimate_call
from relserve.estimate.prompt_tokens import model_tokenizer
from relserve.functions import make_call

TEMPLATE = "Summarize this review in one sentence: {review}"


class QueuedEngine:
    """An engine as the estimates see it: its settings and step-cost model (this machine's
    calibration of the default model, as an engine started now would have), a queue of
    relQueries in flight, and nothing else (no prefix-cache lookup: the replay starts from an
    empty cache)."""

    block_size = 16

    def __init__(self, queued: list[QueuedRelQuery], policy: str) -> None:
        from relserve.calibration import machine_cost_model
        from relserve.engine.settings import EngineSettings
        from relserve.model import resolve_model

        self.model_id = resolve_model(None, prepare=False).model_id
        self.settings = EngineSettings()
        self.cost_model = machine_cost_model(self.model_id, self.settings.resolved_dtype)
        self.policy = policy
        self._queued = queued

    def queued(self) -> list[QueuedRelQuery]:
        return self._queued


def queue_of(rows: int, per_relquery: int, running: int, prompt_ids: list[int]) -> list[QueuedRelQuery]:
    """``rows`` waiting rows in relQueries of ``per_relquery``, each row a distinct prompt of the
    given length; the first relQuery's first ``running`` rows decoding."""
    now = time.monotonic()
    out, made = [], 0
    while made < rows:
        n = min(per_relquery, rows - made)
        requests = []
        for i in range(n):
            ids = [(made + i) * 7919 % 49000 + 100] + prompt_ids[1:]  # distinct first token: no shared prefix
            on = not out and i < running
            requests.append(QueuedRequest(ids, computed=len(ids) + 3 if on else 0, generated=4 if on else 0, running=on))
        out.append(QueuedRelQuery(f"q{len(out)}", now - 1.0 + len(out) * 0.001, 48, f"call-{len(out) % 7}",
                                  f"tenant{len(out) % 3}", 0, False, requests))
        made += n
    return out


def measure(rows: int, args: argparse.Namespace) -> tuple[float, object]:
    tokens = model_tokenizer()
    call = make_call("llm_map", TEMPLATE, max_tokens=32)
    prompt = TEMPLATE.format(review="A quiet film that stays with you.")
    ids = tokens.ids([prompt])[0]
    engine = QueuedEngine(queue_of(rows, args.rows_per_relquery, args.running, ids), args.policy)
    times, est = [], None
    for _ in range(args.repeat):
        t0 = time.process_time()
        est = estimate_call(call, [prompt], engine=engine, model_id=engine.model_id, tokens=tokens)
        times.append(time.process_time() - t0)
    return statistics.median(times), est


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[500, 2000, 8000], help="queued rows, one run each")
    p.add_argument("--rows-per-relquery", type=int, default=50)
    p.add_argument("--running", type=int, default=16, help="rows of the first relQuery decoding")
    p.add_argument("--policy", default="relserve", help="the engine's policy the replay runs (relserve, fcfs, ...)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    model_tokenizer()  # loaded once, outside the measurement
    print(f"one-row llm_map estimate behind a queue (policy {args.policy}, {args.rows_per_relquery} rows per relQuery)")
    print(f"{'queued rows':>12}  {'CPU s':>8}  {'now_s':>8}  {'queued requests':>16}")
    for rows in args.rows:
        cpu, est = measure(rows, args)
        print(f"{rows:>12,}  {cpu:>8.3f}  {est.now_s:>8.2f}  {est.queued_requests:>16,}")


if __name__ == "__main__":
    main()
