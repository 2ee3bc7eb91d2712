"""Two tenants on one server: one floods it, the other sends 1-row relQueries (issue 23).

Starts ``relserve serve --tenants`` as a subprocess on a loopback port, then

1. the small tenant alone: ``--small`` 1-row relQueries, one after the other;
2. the same again while the flood tenant streams ``--flood-rows`` rows (in ``--flood-parts``
   relQueries, at the most urgent priority its tenants entry allows, the same class 0 as the
   small tenant's).

Prints the small tenant's latency (median, p95) alone and under the flood, side by side with
the p95 ratio (target: within 2x), rows lost or duplicated (every row of every relQuery must
come back exactly once), and the peak RSS of the server process (and of its engine processes)
sampled every 0.2 s.

    .venv/bin/python bench/bench_tenants.py                  # 3000 flood rows: 20 min on 2 busy cores
    .venv/bin/python bench/bench_tenants.py --flood-rows 1000 --max-num-seqs 32

On CPU a decode step's time grows with the number of sequences in it, so the small tenant's row,
decoded in the same steps as the flood's rows, is slower than alone however early the scheduler
ranks it; ``--max-num-seqs`` (the engine's batch) trades the flood's throughput against that.

Results also go to bench/out/tenants.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

OUT = Path(__file__).resolve().parent / "out"
RELSERVE = str(Path(sys.executable).parent / "relserve")
FLOOD_KEY, SMALL_KEY = "flood-tenant-key", "small-tenant-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(0.95 * len(xs)) - 1))]


class RssSampler(threading.Thread):
    """Peak RSS of the server process and of the server plus its engine processes."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak_server = self.peak_total = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                own = self.proc.memory_info().rss
                total = own + sum(c.memory_info().rss for c in self.proc.children(recursive=True))
            except psutil.Error:
                break
            self.peak_server = max(self.peak_server, own)
            self.peak_total = max(self.peak_total, total)
            self.stop.wait(0.2)


def _stream(url: str, key: str, body: dict) -> tuple[int, int, int, str]:
    """Submit ``body`` streaming; (rows expected, distinct rows received, duplicates, status)."""
    body = {**body, "stream": "ndjson"}
    seen: set[int] = set()
    dup = 0
    expected, status = 0, "?"
    with httpx.stream("POST", url + "/v1/relqueries", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=3600) as r:
        if r.status_code != 201:
            r.read()
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if not line.strip():
                continue
            e = json.loads(line)
            if e["event"] == "accepted":
                expected = e["rows"]
            elif e["event"] == "row":
                if e["index"] in seen:
                    dup += 1
                seen.add(e["index"])
                if e.get("error"):
                    status = f"row error: {e['error']}"
            elif e["event"] == "done":
                status = e["status"] if status == "?" else status
    return expected, len(seen), dup, status


def small_run(url: str, n: int, tag: str, max_tokens: int, stop: threading.Event | None = None) -> tuple[list[float], int, int]:
    lat: list[float] = []
    lost = dup = 0
    for i in range(n):
        if stop is not None and stop.is_set():
            break
        body = {"prompts": [f"Name one colour ({tag} {i})."], "max_tokens": max_tokens, "cache": False}
        t0 = time.monotonic()
        expected, got, d, _ = _stream(url, SMALL_KEY, body)
        lat.append(time.monotonic() - t0)
        print(f"  {tag} {i}: {lat[-1]:.2f} s", flush=True)
        lost += expected - got
        dup += d
    return lat, lost, dup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flood-rows", type=int, default=3000)
    ap.add_argument("--flood-parts", type=int, default=3, help="relQueries the flood is split into (sent at once)")
    ap.add_argument("--small", type=int, default=30, help="1-row relQueries of the small tenant per phase")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--policy", default="relserve")
    ap.add_argument("--max-num-seqs", type=int, default=None, help="the engine's max_num_seqs (default: relserve serve's)")
    ap.add_argument("--cap", type=int, default=None,
                    help="max_running_shared of both tenants in the tenants file (default: the scheduler's own)")
    ap.add_argument("--slowdown", type=float, default=None,
                    help="the scheduler's tenant_step_slowdown (0: no default cap; default: the scheduler's)")
    ap.add_argument("--linger", type=float, default=None, help="the scheduler's tenant_linger_s (default: the scheduler's)")
    ap.add_argument("--no-decode-subset", action="store_true", help="the scheduler's decode_subset off")
    ap.add_argument("--out", default="tenants.json", help="report file name under bench/out/")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-tenants-"))
    tenants = home / "tenants.toml"
    cap = f"max_running_shared = {args.cap}\n" if args.cap else ""
    tenants.write_text(
        f'[tenants.flood]\nkey = "{FLOOD_KEY}"\n{cap}\n[tenants.small]\nkey = "{SMALL_KEY}"\n{cap}'
    )
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, RELSERVE_HOME=str(home / "home"))
    if args.max_num_seqs:
        env["RELSERVE_MAX_NUM_SEQS"] = str(args.max_num_seqs)
    policy_settings: dict[str, float | None] = {}
    if args.slowdown is not None:
        policy_settings["tenant_step_slowdown"] = args.slowdown or None
    if args.linger is not None:
        policy_settings["tenant_linger_s"] = args.linger
    if args.no_decode_subset:
        policy_settings["decode_subset"] = False
    if policy_settings:
        env["RELSERVE_POLICY_SETTINGS"] = json.dumps(policy_settings)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [RELSERVE, "serve", "--port", str(port), "--tenants", str(tenants), "--no-cache", "--policy", args.policy,
         "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    try:
        t_start = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited: {(home / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        print(f"server up in {time.monotonic() - t_start:.0f} s (pid {proc.pid}, policy {args.policy})", flush=True)
        rss = RssSampler(proc.pid)
        rss.start()
        small_run(url, 3, "warm-up", args.max_tokens)

        alone, lost_a, dup_a = small_run(url, args.small, "alone", args.max_tokens)
        print(f"alone: {len(alone)} relQueries, p95 {_p95(alone):.3f} s", flush=True)

        per = args.flood_rows // args.flood_parts
        flood_out: list[tuple[int, int, int, str]] = []
        flood_done = threading.Event()

        def flood_part(k: int) -> None:
            rows = [{"topic": f"topic {k}-{i}: the history of city number {i}"} for i in range(per)]
            body = {"template": "Give one fact about {topic}.", "rows": rows, "max_tokens": args.max_tokens, "priority": 0, "cache": False}
            flood_out.append(_stream(url, FLOOD_KEY, body))

        t_flood = time.monotonic()
        threads = [threading.Thread(target=flood_part, args=(k,)) for k in range(args.flood_parts)]
        for t in threads:
            t.start()
        threading.Thread(target=lambda: ([t.join() for t in threads], flood_done.set()), daemon=True).start()
        time.sleep(2.0)  # the flood is submitted and planned, and fills the engine
        under, lost_u, dup_u = small_run(url, args.small, "flood", args.max_tokens, flood_done)
        still_flooding = any(t.is_alive() for t in threads)
        for t in threads:
            t.join()
        flood_s = time.monotonic() - t_flood
        rss.stop.set()
        rss.join()

        flood_expected = sum(o[0] for o in flood_out)
        flood_lost = sum(o[0] - o[1] for o in flood_out)
        flood_dup = sum(o[2] for o in flood_out)
        report = {
            "policy": args.policy,
            "max_num_seqs": args.max_num_seqs or "default",
            "max_running_shared": args.cap or "default",
            "tenant_step_slowdown": "default" if args.slowdown is None else (args.slowdown or None),
            "tenant_linger_s": "default" if args.linger is None else args.linger,
            "decode_subset": not args.no_decode_subset,
            "load_average_1m_at_end": round(os.getloadavg()[0], 1),
            "flood_rows": flood_expected,
            "flood_relqueries": len(flood_out),
            "flood_seconds": round(flood_s, 1),
            "flood_statuses": sorted({o[3] for o in flood_out}),
            "small_relqueries": [len(alone), len(under)],
            "small_alone_median_s": round(statistics.median(alone), 3),
            "small_alone_p95_s": round(_p95(alone), 3),
            "small_under_flood_median_s": round(statistics.median(under), 3),
            "small_under_flood_p95_s": round(_p95(under), 3),
            "p95_ratio": round(_p95(under) / _p95(alone), 2),
            "flood_still_running_after_small_phase": still_flooding,
            "rows_lost": flood_lost + lost_a + lost_u,
            "rows_duplicated": flood_dup + dup_a + dup_u,
            "server_peak_rss_mb": round(rss.peak_server / 2**20),
            "server_and_engine_peak_rss_mb": round(rss.peak_total / 2**20),
        }
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    OUT.mkdir(exist_ok=True)
    (OUT / args.out).write_text(json.dumps(report, indent=2))
    print()
    print(f"{'small tenant, 1-row relQueries':34} {'alone':>8} {'under flood':>12}")
    print(f"{'median latency (s)':34} {report['small_alone_median_s']:>8.3f} {report['small_under_flood_median_s']:>12.3f}")
    print(f"{'p95 latency (s)':34} {report['small_alone_p95_s']:>8.3f} {report['small_under_flood_p95_s']:>12.3f}")
    print(f"p95 ratio under flood / alone: {report['p95_ratio']:.2f}x (target: within 2x)")
    print(f"flood: {report['flood_rows']} rows in {report['flood_relqueries']} relQueries, {report['flood_seconds']} s, "
          f"{report['flood_statuses']}; still running when the small phase ended: {still_flooding}")
    print(f"variant: max_num_seqs {report['max_num_seqs']}, max_running_shared {report['max_running_shared']}, "
          f"tenant_step_slowdown {report['tenant_step_slowdown']}, tenant_linger_s {report['tenant_linger_s']}, "
          f"decode_subset {report['decode_subset']}")
    print(f"rows lost: {report['rows_lost']}, duplicated: {report['rows_duplicated']}")
    print(f"machine: {os.cpu_count()} cores, load average {report['load_average_1m_at_end']} at the end (other jobs count)")
    print(f"peak RSS: server process {report['server_peak_rss_mb']} MB, with its engine processes {report['server_and_engine_peak_rss_mb']} MB")


if __name__ == "__main__":
    main()
