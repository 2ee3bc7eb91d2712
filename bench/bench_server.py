"""Load run of the HTTP server on loopback: 16 concurrent client sessions send relQueries of
mixed sizes for a while, once under the relserve policy and once under fcfs, on the same engine
and the same seeded sequence of requests.

By default the sessions are open loop: each sends its relQueries at seeded Poisson times
(``--rate`` relQueries per second over all sessions) whether or not the previous ones have
finished, as independent users do, so both policies see the same arrivals. ``--closed-loop``
makes each session wait for its relQuery before sending the next; that keeps the engine
saturated, and by Little's law the mean latency then follows throughput, whatever the order.

Checks that every submitted row gets exactly one answer or one error (nothing lost, nothing
duplicated), and reports each session's throughput and latency and the mean relQuery latency of
relserve against fcfs: over everything finished in each phase, and paired (the relQueries that
finished in both phases, which compares the same requests).

    .venv/bin/python bench/bench_server.py                 # defaults: 16 sessions, 90 s per policy
    .venv/bin/python bench/bench_server.py --duration 300  # several minutes per policy

Results go to bench/out/server.json (and a table on stdout).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"

#: relQuery sizes (rows) and how often each is drawn: mostly small, sometimes large
SIZE_MIX = ((1, 0.22), (2, 0.2), (4, 0.2), (8, 0.16), (16, 0.12), (32, 0.1))
TEMPLATES = (
    "Summarize this movie review in five words: {review}",
    "Is this movie review positive or negative? {review} Answer in one word.",
    "Which actor or director does this review mention, if any? {review}",
)


@dataclass
class Done:
    session: int
    seq: int
    rows: int
    latency_s: float
    answers: int
    errors: int
    missing: int
    duplicated: int
    status: str


@dataclass
class SessionReport:
    session: int
    relqueries: int
    rows: int
    rows_per_s: float
    mean_latency_s: float
    p50_latency_s: float
    p95_latency_s: float
    errors: int


@dataclass
class PhaseReport:
    policy: str
    wall_s: float
    relqueries: int
    rows: int
    rows_per_s: float
    mean_latency_s: float
    p95_latency_s: float
    mean_latency_by_size: dict[int, float]
    lost_rows: int
    duplicated_rows: int
    row_errors: int
    scheduler: dict
    sessions: list[SessionReport] = field(default_factory=list)


def load_texts(n: int = 4000) -> list[str]:
    try:
        from relserve.workloads.tables import load_table

        df = load_table("rotten_tomatoes", columns=["review_content"])
        return [t for t in df["review_content"].to_list()[:n] if t]
    except Exception as e:  # the shared datasets are not on every machine
        print(f"(rotten_tomatoes not available: {e}; using generated reviews)")
        rng = random.Random(0)
        words = "film plot actor scene music story director ending boring brilliant slow funny dark moving".split()
        return [" ".join(rng.choice(words) for _ in range(25)) for _ in range(n)]


def plan_session(session: int, texts: list[str], count: int, seed: int, mean_gap_s: float) -> list[tuple[str, list[dict], float]]:
    """The session's relQueries (template, rows, gap before it): the same in every phase.

    Open loop: the gap is the time since the session's previous submission (Poisson arrivals).
    Closed loop: it is a think time after the previous relQuery finished."""
    rng = random.Random(seed * 1000 + session)
    sizes, weights = zip(*SIZE_MIX)
    out = []
    for _ in range(count):
        n = rng.choices(sizes, weights)[0]
        rows = [{"review": t} for t in rng.sample(texts, n)]
        out.append((rng.choice(TEMPLATES), rows, rng.expovariate(1 / mean_gap_s)))
    return out


def run_relquery(client, session: int, seq: int, template: str, rows: list[dict], max_tokens: int) -> Done:
    """Stream one relQuery and check that each row came back exactly once, with an answer or an error."""
    from relserve.client import ServerError

    t0 = time.monotonic()
    seen: list[int] = []
    answers = errors = 0
    status = "error"
    try:
        with client.stream(template, rows, max_tokens=max_tokens, cache=False) as s:
            for row in s:
                seen.append(row.index)
                if (row.text is None) == (row.error is None):
                    errors += 1  # neither or both: a broken row
                elif row.error is None:
                    answers += 1
                else:
                    errors += 1
            status = (s.done or {}).get("status", "unknown")
    except ServerError as e:
        print(f"session {session}: {e}")
    latency = time.monotonic() - t0
    counts = {i: seen.count(i) for i in set(seen)}
    missing = sum(1 for i in range(len(rows)) if i not in counts)
    duplicated = sum(c - 1 for c in counts.values()) + sum(1 for i in counts if not 0 <= i < len(rows))
    return Done(session, seq, len(rows), latency, answers, errors, missing, duplicated, status)


def run_session(url: str, session: int, plan, start: float, end: float, max_tokens: int, open_loop: bool,
                results: list[Done], lock: threading.Lock) -> None:
    from relserve.client import Client

    def record(done: Done) -> None:
        with lock:
            results.append(done)

    with Client(url, timeout=1800) as client:
        if not open_loop:
            for seq, (template, rows, think) in enumerate(plan):
                time.sleep(think)
                if time.monotonic() >= end:
                    return
                record(run_relquery(client, session, seq, template, rows, max_tokens))
            return
        workers = []
        due = start
        for seq, (template, rows, gap) in enumerate(plan):
            due += gap
            if due >= end:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            t = threading.Thread(
                target=lambda *a: record(run_relquery(*a)), args=(client, session, seq, template, rows, max_tokens), daemon=True
            )
            t.start()
            workers.append(t)
        for t in workers:
            t.join()


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def run_phase(engine, url: str, policy: str, plans, duration: float, max_tokens: int, open_loop: bool) -> tuple[PhaseReport, list[Done]]:
    engine.wait_idle()
    engine.set_policy(policy)
    engine.reset_prefix_cache()
    engine.reset_scheduler_stats()
    results: list[Done] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    end = t0 + duration
    threads = [
        threading.Thread(target=run_session, args=(url, s, plan, t0, end, max_tokens, open_loop, results, lock), daemon=True)
        for s, plan in enumerate(plans)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()  # sessions stop submitting at `end` and wait for what they sent
    wall = time.monotonic() - t0
    st = engine.scheduler_stats()
    sessions = []
    for s in range(len(plans)):
        mine = [d for d in results if d.session == s]
        lat = [d.latency_s for d in mine]
        rows = sum(d.rows for d in mine)
        sessions.append(
            SessionReport(s, len(mine), rows, rows / wall, statistics.fmean(lat) if lat else 0.0, pct(lat, 0.5), pct(lat, 0.95),
                          sum(d.errors for d in mine))
        )
    lat = [d.latency_s for d in results]
    by_size = {}
    for n, _ in SIZE_MIX:
        xs = [d.latency_s for d in results if d.rows == n]
        if xs:
            by_size[n] = round(statistics.fmean(xs), 3)
    report = PhaseReport(
        policy=policy,
        wall_s=wall,
        relqueries=len(results),
        rows=sum(d.rows for d in results),
        rows_per_s=sum(d.rows for d in results) / wall,
        mean_latency_s=statistics.fmean(lat) if lat else 0.0,
        p95_latency_s=pct(lat, 0.95),
        mean_latency_by_size=by_size,
        lost_rows=sum(d.missing for d in results),
        duplicated_rows=sum(d.duplicated for d in results),
        row_errors=sum(d.errors for d in results),
        scheduler=st.model_dump(include={"steps", "dpu_seconds", "aba_seconds"}),
        sessions=sessions,
    )
    return report, results


def print_phase(r: PhaseReport) -> None:
    print(f"\n== {r.policy}: {r.relqueries} relQueries, {r.rows} rows in {r.wall_s:.0f} s "
          f"({r.rows_per_s:.2f} rows/s); mean latency {r.mean_latency_s:.2f} s, p95 {r.p95_latency_s:.2f} s")
    print(f"   rows lost: {r.lost_rows}, duplicated: {r.duplicated_rows}, row errors: {r.row_errors}; "
          f"policy time {1000 * (r.scheduler['dpu_seconds'] + r.scheduler['aba_seconds']):.1f} ms over {r.scheduler['steps']} steps")
    print("   mean latency by relQuery size: " + ", ".join(f"{n} rows {v:.2f} s" for n, v in r.mean_latency_by_size.items()))
    print("   session  relQs  rows  rows/s  mean_s  p50_s  p95_s  errors")
    for s in r.sessions:
        print(f"   {s.session:7d} {s.relqueries:6d} {s.rows:5d} {s.rows_per_s:7.2f} {s.mean_latency_s:7.2f} "
              f"{s.p50_latency_s:6.2f} {s.p95_latency_s:6.2f} {s.errors:7d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--duration", type=float, default=90.0, help="seconds of load per policy")
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--policies", default="relserve,fcfs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--rate", type=float, default=1.0,
                    help="open loop: relQueries per second over all sessions (this machine serves about 1.2/s of this mix)")
    ap.add_argument("--closed-loop", action="store_true",
                    help="each session waits for its relQuery, thinks ~0.3 s, sends the next (saturates the engine)")
    ap.add_argument("--out", type=Path, default=OUT / "server.json")
    args = ap.parse_args()

    from relserve import Engine
    from relserve.server import ServerThread, create_app

    texts = load_texts()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    # enough relQueries per session for any duration; a phase stops at its time limit
    mean_gap = 0.3 if args.closed_loop else args.sessions / args.rate
    plans = [plan_session(s, texts, 400, args.seed, mean_gap) for s in range(args.sessions)]
    t0 = time.monotonic()
    engine = Engine(policy=policies[0], max_num_seqs=args.max_num_seqs)
    load = "closed loop" if args.closed_loop else f"open loop, {args.rate} relQueries/s"
    print(f"engine ready in {time.monotonic() - t0:.0f} s ({engine.model_id}); "
          f"{args.sessions} sessions x {args.duration:.0f} s per policy, {load}, max_tokens {args.max_tokens}")
    reports: list[PhaseReport] = []
    raw: dict[str, list[Done]] = {}
    try:
        with ServerThread(create_app(engine, cache=False)) as srv:
            for policy in policies:
                report, done = run_phase(engine, srv.url, policy, plans, args.duration, args.max_tokens, not args.closed_loop)
                reports.append(report)
                raw[policy] = done
                print_phase(report)
    finally:
        engine.close()

    summary: dict = {"sessions": args.sessions, "duration_s": args.duration, "max_tokens": args.max_tokens,
                     "load": "closed" if args.closed_loop else {"open_loop_rate_per_s": args.rate},
                     "size_mix": SIZE_MIX, "phases": [asdict(r) for r in reports]}
    if len(reports) >= 2:
        a, b = reports[0], reports[1]
        key = lambda d: (d.session, d.seq)  # noqa: E731
        la = {key(d): d.latency_s for d in raw[a.policy] if d.status == "finished"}
        lb = {key(d): d.latency_s for d in raw[b.policy] if d.status == "finished"}
        common = sorted(set(la) & set(lb))
        paired_a = statistics.fmean(la[k] for k in common) if common else 0.0
        paired_b = statistics.fmean(lb[k] for k in common) if common else 0.0
        summary["comparison"] = {
            "policies": [a.policy, b.policy],
            "mean_latency_s": [a.mean_latency_s, b.mean_latency_s],
            "ratio_all": b.mean_latency_s / a.mean_latency_s if a.mean_latency_s else None,
            "paired_relqueries": len(common),
            "paired_mean_latency_s": [paired_a, paired_b],
            "ratio_paired": paired_b / paired_a if paired_a else None,
            "throughput_rows_per_s": [a.rows_per_s, b.rows_per_s],
        }
        c = summary["comparison"]
        print(f"\n{b.policy} / {a.policy} mean relQuery latency: {c['ratio_all']:.2f}x over all finished "
              f"({b.mean_latency_s:.2f} s vs {a.mean_latency_s:.2f} s); {c['ratio_paired']:.2f}x paired over "
              f"{len(common)} relQueries that finished in both ({paired_b:.2f} s vs {paired_a:.2f} s)")
    ok = all(r.lost_rows == 0 and r.duplicated_rows == 0 for r in reports)
    print("every submitted row got exactly one answer or one error: " + ("yes" if ok else "NO"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
