"""The headline benchmark: relserve against what users run today, end to end, in one run.

Sessions (DuckDB connections, one thread each) run real SQL statements with LLM calls
(``sql/bench_e2e/*.sql``: llm_filter, llm_classify, llm_map, llm_extract over 1-300 rows of the
tables in ../shared/datasets) at seeded Poisson arrivals. Every contender gets the same statements
at the same arrival times, on the same model folder, one after another on this machine:

1. ``vllm-serve``: vLLM's own OpenAI server (``vllm serve``, prefix caching on), called once per row
   in table order from DuckDB UDFs, one row at a time per session (``--row-concurrency``), as
   pgai-style database functions and most DuckDB LLM extensions do;
2. ``vllm-offline``: vLLM's ``LLM.generate``, each call site's rows of a statement as one batch in
   table order (as LOTUS-style dataframe libraries do), statements one after another (FIFO);
3. ``relserve``: the same statements through ``relserve.duckdb.sql`` on connections made with
   ``relserve.duckdb.connect(server=URL, api_key=...)`` against one ``relserve serve`` (scheduler
   ``relserve``), result cache off;
4. ``relserve-cache``: the same server with its result cache on, over a second pass of the
   workload at the highest load (the first pass, which fills the cache, is reported too).

A session runs its statements in order, each once it has arrived and the previous one has ended
(a connection runs one statement at a time); latency = end - arrival. The loads (``--loads``,
fractions of ``--rate`` statements/s) share the statement mix and arrival pattern, with rows drawn
afresh per load (so the engine's prefix cache does not carry answers from one load to the next).

Prompts are the same token ids everywhere (relserve's own rendering and chat template; the UDFs of
contenders 1-2 decode their arguments with relserve's argument parser), decoding is greedy, and
structured output (choice / JSON schema) is the same for 1-2 as relserve's engine uses. relserve's
llm_filter / llm_classify choose labels by calibrated scoring (its default, which is what a
server connection runs), contenders 1-2 by constrained decoding: so the identity check compares
the generated columns (llm_map, llm_extract) row by row, and reports label agreement apart.

    .venv/bin/python bench/bench_e2e.py --quick     # a few minutes: small sizes, short window
    .venv/bin/python bench/bench_e2e.py             # the full run (41 min on 2 quiet AMD EPYC cores)

    .venv/bin/python bench/bench_e2e.py --workload other   # the second workload: other tables,
                                                          # templates and prompt/answer lengths

Results: bench/out/e2e.json, bench/out/e2e.md, bench/out/e2e_latency_vs_load.png
(--quick writes e2e_quick.*, --workload other e2e_other.*).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = ROOT / "sql" / "bench_e2e"
#: --workload: the headline's statements, and a second set over other tables, templates and
#: prompt/answer lengths (a check that the headline holds on work it was not sized on)
WORKLOADS = {"main": SQL_DIR, "other": ROOT / "sql" / "bench_e2e_other"}
OUT = Path(__file__).resolve().parent / "out"
DATASETS = Path(os.environ.get("RELSERVE_DATASETS", ROOT.parent / "shared" / "datasets"))

#: statement sizes (rows) and their weights: mostly small, some large (1-300; mean 32.8 rows)
SIZES = ((1, 0.19), (3, 0.18), (8, 0.18), (20, 0.18), (50, 0.14), (100, 0.08), (200, 0.03), (300, 0.02))
#: --quick: 1-30 rows (mean 10.3)
QUICK_SIZES = ((1, 0.25), (3, 0.2), (8, 0.2), (15, 0.2), (30, 0.15))
#: rows per table of the main workload (its tables.sql says "-- rows: 3000")
TABLE_ROWS = 3000
CONTENDERS = ("vllm-serve", "vllm-offline", "relserve", "relserve-cache")
LABELS = {
    "vllm-serve": "vLLM serve, per-row client",
    "vllm-offline": "vLLM offline, batch per statement",
    "relserve": "relserve (cache off)",
    "relserve-cache-1st": "relserve, cache on, 1st pass",
    "relserve-cache": "relserve, cache on, 2nd pass",
}
#: engine limits shared by every contender (relserve's defaults, relserve/engine/settings.py)
ENGINE = dict(max_model_len=2048, max_num_seqs=256, max_num_batched_tokens=1024, block_size=32, kv_cache_gb=2.0, dtype="float32")


# ---------------------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Statement:
    """One file of sql/bench_e2e/: SQL with ``$offset`` and ``$rows``, and what its columns are."""

    name: str
    text: str
    table: str
    #: columns written by llm_map / llm_extract (greedy decoding: compared row by row)
    generated: tuple[str, ...] = ()
    #: columns holding labels (llm_classify), compared as agreement
    labels: tuple[str, ...] = ()
    #: an llm_filter in WHERE decides which rows come out
    filters_rows: bool = False

    def sql(self, offset: int, rows: int) -> str:
        return Template(self.text).substitute(offset=offset, rows=rows)


def load_statements(sql_dir: Path = SQL_DIR) -> list[Statement]:
    out = []
    for path in sorted(sql_dir.glob("*.sql")):
        if path.name == "tables.sql":
            continue
        text = path.read_text()
        meta = dict(re.findall(r"^-- (table|generated|labels|filter): *(.*)$", text, flags=re.M))
        if "table" not in meta:
            raise ValueError(f"{path}: no '-- table: NAME' line")
        cols = lambda key: tuple(c.strip() for c in meta.get(key, "").split(",") if c.strip())  # noqa: E731
        out.append(Statement(path.stem, text, meta["table"], cols("generated"), cols("labels"), "filter" in meta))
    return out


def tables_sql(datasets: Path = DATASETS, sql_dir: Path = SQL_DIR) -> str:
    return Template((sql_dir / "tables.sql").read_text()).substitute(datasets=str(datasets))


def table_rows(sql_dir: Path = SQL_DIR) -> int:
    """The rows every table of a workload has (its tables.sql's "-- rows: N" line)."""
    m = re.search(r"^-- rows: *(\d+)$", (sql_dir / "tables.sql").read_text(), flags=re.MULTILINE)
    if m is None:
        raise ValueError(f"{sql_dir / 'tables.sql'}: no '-- rows: N' line")
    return int(m.group(1))


@dataclass(frozen=True)
class Item:
    """One statement of one session: which, over how many rows, when (at load 1)."""

    session: int
    seq: int
    name: str
    rows: int
    #: seconds from the start at load 1.0; at load x it arrives at base_arrival / x
    base_arrival: float

    @property
    def key(self) -> str:
        return f"s{self.session}-{self.seq}"


@dataclass(frozen=True)
class Scheduled:
    item: Item
    load: float
    arrival: float
    offset: int
    sql: str

    @property
    def key(self) -> str:
        return self.item.key


def build_workload(
    statements: list[Statement], *, sessions: int, rate: float, horizon: float, seed: int, sizes=SIZES
) -> list[Item]:
    """Each session's stream of statements: Poisson arrivals at ``rate / sessions`` per second
    (load 1.0) until ``horizon`` seconds. Statements and sizes are drawn in arrival order by a
    low-discrepancy sequence (golden-ratio steps from a seeded start over the size distribution,
    and over the statements), so that every prefix of the stream, which is what a lower load or
    a shorter window takes, has close to the intended mix; a few large statements drawn i.i.d.
    would otherwise decide the row count of a short run."""
    if sessions < 1 or rate <= 0 or horizon <= 0:
        raise ValueError("sessions >= 1, rate > 0 and horizon > 0 are needed")
    rng = random.Random(seed)
    arrivals = []
    for s in range(sessions):
        t = 0.0
        while True:
            t += rng.expovariate(rate / sessions)
            if t >= horizon:
                break
            arrivals.append((round(t, 4), s))
    arrivals.sort()
    values, weights = zip(*sizes)
    cdf = [sum(weights[: i + 1]) / sum(weights) for i in range(len(weights))]
    u_size, u_name = rng.random(), rng.random()
    phi, sqrt2 = (math.sqrt(5) - 1) / 2, math.sqrt(2) - 1
    seqs: dict[int, int] = {}
    items = []
    for i, (t, s) in enumerate(arrivals):
        q = (u_size + i * phi) % 1.0
        size = values[next(k for k, c in enumerate(cdf) if q < c or k == len(cdf) - 1)]
        st = statements[int(((u_name + i * sqrt2) % 1.0) * len(statements))]
        items.append(Item(s, seqs.get(s, 0), st.name, size, t))
        seqs[s] = seqs.get(s, 0) + 1
    return items


def at_load(
    items: list[Item], statements: list[Statement], load: float, window: float, seed: int, table_rows: int = TABLE_ROWS
) -> list[Scheduled]:
    """The items arriving within ``window`` seconds at ``load`` (arrivals / load), with row ranges
    drawn for this load (seeded by seed and load, so every contender gets the same)."""
    by_name = {s.name: s for s in statements}
    rng = random.Random(f"{seed}-{load}")
    out = []
    for it in items:
        arrival = it.base_arrival / load
        offset = rng.randrange(0, table_rows - it.rows + 1)
        if arrival < window:
            out.append(Scheduled(it, load, round(arrival, 4), offset, by_name[it.name].sql(offset, it.rows)))
    return out


# ---------------------------------------------------------------------------------------- sessions


@dataclass
class Record:
    key: str
    session: int
    name: str
    rows: int
    load: float
    arrival: float
    start: float
    end: float
    #: rows the LLM functions were called on (call sites x rows reaching them; relserve's SQL
    #: planner calls them once per distinct argument tuple, so it counts fewer)
    llm_rows: int = 0
    out_rows: int = 0
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.end - self.arrival


class FifoLock:
    """Statements one after another, in the order they asked (vLLM offline: one process, one batch at a time)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[int] = []
        self._next = 0

    def __enter__(self) -> None:
        with self._cond:
            ticket = self._next
            self._next += 1
            self._queue.append(ticket)
            self._cond.wait_for(lambda: self._queue[0] == ticket)

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._queue.pop(0)
            self._cond.notify_all()


def run_sessions(
    work: list[Scheduled],
    connect: Callable[[int], Any],
    execute: Callable[[Any, Scheduled], tuple[list[str], list[tuple], int]],
) -> tuple[list[Record], dict[str, dict]]:
    """Run every session's statements at their arrival times; returns the records and the answers."""
    sessions: dict[int, list[Scheduled]] = {}
    for w in work:
        sessions.setdefault(w.item.session, []).append(w)
    conns = {s: connect(s) for s in sessions}
    records: list[Record] = []
    answers: dict[str, dict] = {}
    lock = threading.Lock()
    t0 = time.perf_counter() + 0.5

    def session(s: int) -> None:
        for w in sorted(sessions[s], key=lambda w: w.item.seq):
            delay = t0 + w.arrival - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            start = time.perf_counter()
            cols, rows, llm_rows, err = [], [], 0, None
            try:
                cols, rows, llm_rows = execute(conns[s], w)
            except Exception as e:  # a failed statement is recorded, the session goes on
                err = f"{type(e).__name__}: {e}"[:500]
            end = time.perf_counter()
            rec = Record(w.key, s, w.item.name, w.item.rows, w.load, w.arrival, start - t0, end - t0, llm_rows, len(rows), err)
            with lock:
                records.append(rec)
                answers[w.key] = {"columns": cols, "rows": [list(r) for r in rows]}

    threads = [threading.Thread(target=session, args=(s,), name=f"session-{s}") for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns.values():
        try:
            c.close()
        except Exception:
            pass
    return sorted(records, key=lambda r: r.arrival), answers


def new_duckdb(datasets: Path, sql_dir: Path = SQL_DIR):
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    con.execute(tables_sql(datasets, sql_dir))
    return con


# ---------------------------------------------------------------------------------------- contenders 1-2


class Prompter:
    """Prompt text -> the token ids relserve's engine would send (its chat template)."""

    def __init__(self, model_path: str) -> None:
        from transformers import AutoTokenizer

        from relserve.engine.prompts import ChatPrompter

        self._p = ChatPrompter(AutoTokenizer.from_pretrained(model_path))
        self._lock = threading.Lock()

    def ids(self, prompts: list[str]) -> list[list[int]]:
        with self._lock:  # HF fast tokenizers are not safe to call from many threads at once
            return self._p.token_ids(prompts)


class RowUDF:
    """An LLM function as a DuckDB UDF of a per-row or per-batch client: the arguments decoded by
    relserve's own parser and rendered to relserve's prompt text, then ``backend(call, prompts)``."""

    def __init__(self, fn, backend: Callable, counter: list[int]) -> None:
        self.fn = fn
        self.backend = backend
        self.counter = counter

    def __call__(self, *arrays):
        from relserve.duckdb_ext.arguments import decode_chunk
        from relserve.duckdb_ext.udf import to_arrow
        from relserve.errors import RowError
        from relserve.functions import CallOptions
        from relserve.planner.prompts import Renderer, null_error

        chunk = decode_chunk(self.fn, arrays, CallOptions())
        out: list[Any] = [None] * chunk.size
        for g in chunk.groups:
            render = Renderer(g.call)
            prompts = [None if null_error(g.call, v) else render(v) for v in g.values]
            self.counter[0] += len(prompts)
            texts = self.backend(g.call, prompts)
            for r, text in zip(g.rows, texts):
                try:
                    out[r] = g.call.convert(text) if text is not None else None
                except RowError:
                    out[r] = None
        return to_arrow(self.fn, out)


def udf_connection(datasets: Path, sql_dir: Path, backend: Callable):
    import duckdb

    from relserve.duckdb_ext.arguments import options_macro_sql
    from relserve.duckdb_ext.udf import RETURN_TYPES
    from relserve.functions import FUNCTIONS

    con = new_duckdb(datasets, sql_dir)
    counter = [0]
    for fn in FUNCTIONS.values():
        con.create_function(fn.name, RowUDF(fn, backend, counter), None, RETURN_TYPES[fn.kind], type="arrow",
                            null_handling="special", side_effects=True)
    con.execute(options_macro_sql())
    return con, counter, duckdb


def structured(call) -> dict | None:
    if call.choices:
        return {"choice": list(call.choices)}
    if call.json_schema is not None:
        return {"json": call.json_schema}
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 900.0) -> None:
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it answered {url}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no answer from {url} after {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def vllm_env() -> dict[str, str]:
    env = dict(os.environ)
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", cores)  # all cores, as relserve's engine does
    env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_USE_AOT_COMPILE", "0")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return env


def prom(url: str, key: str | None = None) -> dict[str, float]:
    """Prometheus counters summed over their labels (plus relserve_tokens by kind)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=30, headers=headers).text):
        for s in fam.samples:
            name = s.name
            if name == "relserve_tokens_total":
                name = f"relserve_tokens_total:{s.labels.get('kind')}"
            out[name] = out.get(name, 0.0) + s.value
    return out


def prom_tokens(url: str, prompt: str, cached: str, key: str | None = None) -> Callable[[], tuple[float, float]]:
    """A reader of a server's prompt-token and prefix-cached-token counters (``key``: a key that
    may read relserve's /metrics)."""
    def read() -> tuple[float, float]:
        got = prom(url + "/metrics", key)
        return got.get(prompt, 0.0), got.get(cached, 0.0)
    return read


def measured_pass(work: list[Scheduled], connect, execute, tokens: Callable[[], tuple[float, float]]) -> dict:
    """Run one pass of sessions; ``tokens()`` reads the contender's (prompt, prefix-cached) token
    counters, before and after."""
    prompt0, cached0 = tokens()
    t0 = time.perf_counter()
    records, answers = run_sessions(work, connect, execute)
    wall = time.perf_counter() - t0
    prompt1, cached1 = tokens()
    return _load_result(records, answers, wall, prompt1 - prompt0, cached1 - cached0)


def phase_vllm_serve(args, work_by_load: dict[float, list[Scheduled]], model_path: str, log) -> dict:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # `vllm serve` is this module's server; vllm-cpu 0.32's `vllm` console script fails looking up
    # the version of a distribution named "vllm", so the module is run directly
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port),
           "--dtype", ENGINE["dtype"], "--max-model-len", str(ENGINE["max_model_len"]), "--max-num-seqs", str(ENGINE["max_num_seqs"]),
           "--max-num-batched-tokens", str(ENGINE["max_num_batched_tokens"]), "--block-size", str(ENGINE["block_size"]),
           "--kv-cache-memory-bytes", str(int(ENGINE["kv_cache_gb"] * (1 << 30))), "--enable-prefix-caching",
           "--enforce-eager", "--gpu-memory-utilization", "0.4", "--seed", "0", "--uvicorn-log-level", "warning"]
    log(f"vllm-serve: starting the OpenAI server of vLLM (port {port})")
    t_start = time.perf_counter()
    with open(Path(args.workdir) / "vllm_serve.log", "w") as out:
        proc = subprocess.Popen(cmd, env=vllm_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(url + "/health", proc)
        started = time.perf_counter() - t_start
        prompter = Prompter(model_path)
        http = httpx.Client(base_url=url, timeout=3600)

        def per_row(call, prompts):
            # a per-row client: one request per row, in table order, waiting for each answer
            texts = []
            for p in prompts:
                if p is None:
                    texts.append(None)
                    continue
                body = {"model": "smollm2", "prompt": prompter.ids([p])[0], "max_tokens": call.max_tokens, "temperature": 0.0}
                so = structured(call)
                if so:
                    body["structured_outputs"] = so
                r = http.post("/v1/completions", json=body)
                texts.append(r.json()["choices"][0]["text"] if r.status_code == 200 else None)
            return texts

        per_row(_Warm(), ["Say hi."])  # warm-up request
        result = {"engine_start_s": started, "loads": {}}
        tokens = prom_tokens(url, "vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total")

        def connect(s):
            con, counter, _ = udf_connection(args.datasets, WORKLOADS[args.workload], per_row)
            return _Conn(con, counter)

        for load, work in work_by_load.items():
            result["loads"][str(load)] = done = measured_pass(work, connect, _execute_plain, tokens)
            log(f"vllm-serve: load {load} done in {done['wall_s']:.0f} s")
        http.close()
        return result
    finally:
        stop(proc)


class _Warm:
    max_tokens = 2
    choices = None
    json_schema = None


class _Conn:
    def __init__(self, con, counter) -> None:
        self.con = con
        self.counter = counter

    def close(self) -> None:
        self.con.close()


def _execute_plain(conn: _Conn, w: Scheduled) -> tuple[list[str], list[tuple], int]:
    before = conn.counter[0]
    rel = conn.con.sql(w.sql)
    rows = rel.fetchall()
    return list(rel.columns), rows, conn.counter[0] - before


def phase_vllm_offline(args, work_by_load: dict[float, list[Scheduled]], model_path: str, log) -> dict:
    os.environ.update(vllm_env())
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.sampling_params import StructuredOutputsParams

    t_start = time.perf_counter()
    llm = LLM(model=model_path, tokenizer=model_path, dtype=ENGINE["dtype"], max_model_len=ENGINE["max_model_len"],
              max_num_seqs=ENGINE["max_num_seqs"], max_num_batched_tokens=ENGINE["max_num_batched_tokens"],
              block_size=ENGINE["block_size"], enable_prefix_caching=True, gpu_memory_utilization=0.4,
              kv_cache_memory_bytes=int(ENGINE["kv_cache_gb"] * (1 << 30)), enforce_eager=True, seed=0)
    started = time.perf_counter() - t_start
    prompter = Prompter(model_path)
    gen_lock = threading.Lock()
    tokens = {"prompt": 0, "cached": 0}

    def batch(call, prompts):
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

    batch(_Warm(), ["Say hi."])
    result = {"engine_start_s": started, "loads": {}}
    fifo = FifoLock()

    def connect(s):
        con, counter, _ = udf_connection(args.datasets, WORKLOADS[args.workload], batch)
        return _Conn(con, counter)

    def execute(conn, w):
        with fifo:  # statements one after another, in arrival order
            return _execute_plain(conn, w)

    for load, work in work_by_load.items():
        result["loads"][str(load)] = done = measured_pass(work, connect, execute, lambda: (tokens["prompt"], tokens["cached"]))
        log(f"vllm-offline: load {load} done in {done['wall_s']:.0f} s")
    return result


# ---------------------------------------------------------------------------------------- contenders 3-4


@contextlib.contextmanager
def relserve_server(args, tenants: Path, log, name: str):
    """A ``relserve serve`` of its own (a fresh engine: an empty prefix cache), warmed up; yields
    its URL and how long it took to answer."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    relserve_bin = str(Path(sys.executable).parent / "relserve")
    cmd = [relserve_bin, "serve", "--port", str(port), "--tenants", str(tenants), "--policy", "relserve", "--log-level", "warning"]
    log(f"relserve: starting relserve serve (port {port}) for {name}")
    t_start = time.perf_counter()
    with open(Path(args.workdir) / f"relserve_serve_{name}.log", "w") as out:
        proc = subprocess.Popen(cmd, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(url + "/health", proc)
        yield url, time.perf_counter() - t_start
    finally:
        stop(proc)


def phase_relserve(args, work_by_load: dict[float, list[Scheduled]], model_path: str, log) -> dict:
    import relserve.duckdb
    from relserve.client import Client
    from relserve.duckdb_ext.connections import session_of

    key = "bench-e2e-" + os.urandom(8).hex()
    # a tenant of its own: a result-cache scope no earlier run has filled
    tenants = Path(args.workdir) / "tenants.toml"
    tenants.write_text(f'[tenants.bench-{int(time.time())}]\nkey = "{key}"\nadmin = true\n')  # admin: reads /metrics

    def run_pass(url: str, work: list[Scheduled], cache: bool) -> dict:
        def connect(s):
            con = relserve.duckdb.connect(config={"threads": 1}, server=url, api_key=key, cache=cache, progress=False)
            con.execute(tables_sql(args.datasets, WORKLOADS[args.workload]))
            return con

        served: dict[str, tuple[int, int]] = {}

        def execute(con, w):
            session = session_of(con.con)
            n = len(session.calls)
            rel = relserve.duckdb.sql(con.con, w.sql)
            rows = rel.fetchall() if rel is not None else []
            calls = session.calls[n:]
            served[w.key] = (sum(c.cached_rows for c in calls), sum(c.engine_rows for c in calls))
            return list(rel.columns) if rel is not None else [], rows, sum(c.rows for c in calls)

        tokens = prom_tokens(url, "relserve_tokens_total:prompt", "relserve_tokens_total:prefix_cached", key)
        out = measured_pass(work, connect, execute, tokens)
        out["result_cache_rows"] = sum(c for c, _ in served.values())
        out["engine_rows"] = sum(e for _, e in served.values())
        return out

    def warm_up(url: str) -> None:
        with Client(url, api_key=key) as c:  # as for the other contenders
            c.run(prompts=["Say hi."], max_tokens=2, cache=False)

    result: dict[str, Any] = {"loads": {}, "cache_loads": {}}
    with relserve_server(args, tenants, log, "cache-off") as (url, started):
        warm_up(url)
        result["engine_start_s"] = started
        for load, work in work_by_load.items():
            result["loads"][str(load)] = run_pass(url, work, cache=False)
            log(f"relserve: load {load} (cache off) done in {result['loads'][str(load)]['wall_s']:.0f} s")
    if "relserve-cache" in args.contenders:
        # a new server, so that the first pass starts from an empty prefix cache as the cache-off
        # pass of the same rows did, not from the KV blocks that pass left behind
        top = max(work_by_load)
        with relserve_server(args, tenants, log, "cache-on") as (url, _):
            warm_up(url)
            first = run_pass(url, work_by_load[top], cache=True)
            log(f"relserve: load {top} cache on, 1st pass done in {first['wall_s']:.0f} s")
            second = run_pass(url, work_by_load[top], cache=True)
            log(f"relserve: load {top} cache on, 2nd pass done in {second['wall_s']:.0f} s")
        result["cache_loads"] = {"first": first, "second": second, "load": top}
    return result


# ---------------------------------------------------------------------------------------- reporting


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def throughput(records: list[dict[str, Any]]) -> dict[str, float]:
    """Rows per second over the pass's makespan (first arrival to last end). ``rows_per_s`` counts
    the statements' table rows, the same work for every contender; ``llm_rows`` counts the rows the
    LLM functions were called on, which deduplication lowers."""
    span = (max(r["end"] for r in records) - min(r["arrival"] for r in records)) if records else 0.0
    table_rows = sum(r["rows"] for r in records)
    return {"makespan_s": span, "table_rows": table_rows, "rows_per_s": table_rows / span if span > 0 else float("nan"),
            "llm_rows": sum(r["llm_rows"] for r in records)}


def _load_result(records: list[Record], answers: dict, wall: float, prompt_tokens: float, cached_tokens: float) -> dict:
    lat = [r.latency for r in records]
    return {
        "statements": len(records),
        "failed_statements": sum(r.error is not None for r in records),
        "errors": sorted({r.error for r in records if r.error})[:5],
        "mean_latency_s": statistics.fmean(lat) if lat else float("nan"),
        "p95_latency_s": _pct(lat, 0.95),
        "max_latency_s": max(lat) if lat else float("nan"),
        "wall_s": wall,
        "prompt_tokens": int(prompt_tokens),
        "prompt_tokens_cached": int(cached_tokens),
        "prompt_tokens_computed": int(prompt_tokens - cached_tokens),
        "records": [asdict(r) | {"latency": r.latency} for r in records],
        "answers": answers,
    }


def compare_answers(statements: list[Statement], reference: dict[str, dict], other: dict[str, dict]) -> dict:
    """Row by row, by id: generated columns (greedy llm_map / llm_extract) identical or not;
    label columns and rows kept by llm_filter as agreement."""
    meta = {s.name: s for s in statements}
    gen_same = gen_diff = label_same = label_diff = rows_both = rows_one = 0
    examples = []
    for key, ref in reference.items():
        got = other.get(key)
        if got is None or not ref["columns"] or not got["columns"]:
            continue
        name = ref.get("name")
        st = meta.get(name) if name else None
        if st is None:
            continue
        ri, gi = ref["columns"].index("id"), got["columns"].index("id")
        a = {row[ri]: dict(zip(ref["columns"], row)) for row in ref["rows"]}
        b = {row[gi]: dict(zip(got["columns"], row)) for row in got["rows"]}
        rows_both += len(a.keys() & b.keys())
        rows_one += len(a.keys() ^ b.keys())
        for i in a.keys() & b.keys():
            for col in st.generated:
                if a[i].get(col) == b[i].get(col):
                    gen_same += 1
                else:
                    gen_diff += 1
                    if len(examples) < 5:
                        examples.append({"statement": key, "id": i, "column": col, "reference": a[i].get(col), "other": b[i].get(col)})
            for col in st.labels:
                if a[i].get(col) == b[i].get(col):
                    label_same += 1
                else:
                    label_diff += 1
    return {"generated_identical": gen_same, "generated_different": gen_diff, "label_same": label_same,
            "label_different": label_diff, "rows_in_both": rows_both, "rows_in_one_only": rows_one,
            "different_examples": examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small run (a few minutes): short window, small statements")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--rate", type=float, default=None, help="statements per second over all sessions at load 1.0")
    ap.add_argument("--window", type=float, default=None, help="seconds of arrivals per load")
    ap.add_argument("--loads", default=None, help="comma-separated fractions of --rate (the last, highest, is the headline)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--datasets", type=Path, default=DATASETS)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="main",
                    help="main: the headline's statements (sql/bench_e2e); other: other tables, templates and lengths (sql/bench_e2e_other)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--report", type=Path, metavar="DIR",
                    help="write the report again from the phase files a run left in DIR (give the run's other options too)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)  # internal: run one contender in this process
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.rate = args.rate or 0.3
        args.window = args.window or 30.0
        args.loads = args.loads or "0.5,1.0"
    else:
        # sized for the 2-core AMD EPYC machines (~3 rows/s for relserve): at load 1.0 about
        # 3 rows/s are offered, 27 statements over all 8 sessions
        args.rate = args.rate or 0.1
        args.window = args.window or 240.0
        args.loads = args.loads or "0.5,1.0"
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    loads = sorted(float(x) for x in args.loads.split(","))
    sql_dir = WORKLOADS[args.workload]
    statements = load_statements(sql_dir)
    items = build_workload(statements, sessions=args.sessions, rate=args.rate, horizon=args.window * max(loads),
                           seed=args.seed, sizes=QUICK_SIZES if args.quick else SIZES)
    work_by_load = {load: at_load(items, statements, load, args.window, args.seed, table_rows(sql_dir)) for load in loads}

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    if args.phase:
        from relserve.model import resolve_model

        model_path = str(resolve_model("smollm2").path)
        fn = {"vllm-serve": phase_vllm_serve, "vllm-offline": phase_vllm_offline, "relserve": phase_relserve}[args.phase]
        result = fn(args, work_by_load, model_path, log)
        Path(args.workdir, f"{args.phase}.json").write_text(json.dumps(result, default=str))
        return

    args.out.mkdir(parents=True, exist_ok=True)
    workdir = args.report or Path(tempfile.mkdtemp(prefix="bench_e2e_"))
    stem = "e2e" + ("" if args.workload == "main" else f"_{args.workload}") + ("_quick" if args.quick else "")
    log(f"{len(items)} statements in the stream; per load: " + ", ".join(f"{l}: {len(w)} statements, {sum(x.item.rows for x in w)} rows" for l, w in work_by_load.items()))
    t_all = time.perf_counter()
    phases = [p for p in ("vllm-serve", "vllm-offline", "relserve") if p in args.contenders or (p == "relserve" and "relserve-cache" in args.contenders)]
    results: dict[str, Any] = {}
    for phase in phases:
        path = workdir / f"{phase}.json"
        if args.report:  # the report again from a finished run's phase files, nothing run
            if path.exists():
                results[phase] = json.loads(path.read_text())
            continue
        cmd = [sys.executable, __file__, "--phase", phase, "--workdir", str(workdir), "--sessions", str(args.sessions),
               "--rate", str(args.rate), "--window", str(args.window), "--loads", args.loads, "--seed", str(args.seed),
               "--datasets", str(args.datasets), "--workload", args.workload, "--contenders", ",".join(args.contenders)] + (["--quick"] if args.quick else [])
        t0 = time.perf_counter()
        rc = subprocess.call(cmd)
        if rc != 0 or not path.exists():
            log(f"{phase} failed (exit {rc}); see {workdir}")
            continue
        results[phase] = json.loads(path.read_text())
        results[phase]["phase_s"] = time.perf_counter() - t0
    total_s = float("nan") if args.report else time.perf_counter() - t_all
    report = summarize(args, statements, work_by_load, results, total_s)
    # answers are kept out of the summary JSON except for the comparison counts
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / f"{stem}.md").write_text(markdown(report))
    plot(report, args.out / f"{stem}_latency_vs_load.png")
    print(markdown(report))
    log(f"total {_f(total_s / 60, '.1f')} min; wrote {args.out / stem}.json, .md and _latency_vs_load.png; raw runs in {workdir}")


def summarize(args, statements, work_by_load, results: dict, total_s: float) -> dict:
    loads = sorted(work_by_load)
    top = str(max(loads))
    names = {s.name: s for s in statements}
    # the statement's name travels with its answers, for the comparison
    for res in results.values():
        for bucket in [*res.get("loads", {}).values(), *[v for k, v in res.get("cache_loads", {}).items() if k != "load"]]:
            for rec in bucket["records"]:
                if rec["key"] in bucket["answers"]:
                    bucket["answers"][rec["key"]]["name"] = rec["name"]
            bucket.update(throughput(bucket["records"]))
    runs: dict[str, dict[str, dict]] = {}
    for phase, res in results.items():
        key = phase
        runs[key] = res["loads"]
        if phase == "relserve" and res.get("cache_loads"):
            runs["relserve-cache-1st"] = {top: res["cache_loads"]["first"]}
            runs["relserve-cache"] = {top: res["cache_loads"]["second"]}
        if phase == "relserve" and "relserve" not in args.contenders:
            del runs["relserve"]
    ref = runs.get("relserve", {}).get(top)
    table = []
    for name, by_load in runs.items():
        r = by_load.get(top)
        if r is None:
            continue
        row = {k: v for k, v in r.items() if k not in ("records", "answers")}
        row["contender"] = name
        if ref is not None:
            row["mean_vs_relserve"] = r["mean_latency_s"] / ref["mean_latency_s"]
            row["p95_vs_relserve"] = r["p95_latency_s"] / ref["p95_latency_s"]
            row["rows_per_s_vs_relserve"] = r["rows_per_s"] / ref["rows_per_s"] if ref["rows_per_s"] else float("nan")
            if name != "relserve":
                row["answers_vs_relserve"] = compare_answers(statements, ref["answers"], r["answers"])
        table.append(row)
    curve = {
        name: [{"load": float(l), "statements_per_s": args.rate * float(l), "mean_latency_s": r["mean_latency_s"],
                "p95_latency_s": r["p95_latency_s"], "rows_per_s": r["rows_per_s"], "statements": r["statements"]}
               for l, r in sorted(by_load.items(), key=lambda kv: float(kv[0]))]
        for name, by_load in runs.items()
    }
    return {
        "command": " ".join(sys.argv),
        "quick": args.quick,
        "machine": {"cpus": len(os.sched_getaffinity(0)), "note": "2-core CPU machine; see the README for how quiet it was"},
        "workload": {"name": args.workload, "sessions": args.sessions, "rate_at_load_1": args.rate, "window_s": args.window, "loads": loads,
                     "seed": args.seed, "statements": sorted(names),
                     "per_load": {str(l): {"statements": len(w), "rows": sum(x.item.rows for x in w)} for l, w in work_by_load.items()}},
        "engine": ENGINE,
        "engine_start_s": {p: r.get("engine_start_s") for p, r in results.items()},
        "phase_s": {p: r.get("phase_s") for p, r in results.items()},
        "total_s": total_s,
        "headline_load": float(top),
        "table": table,
        "curve": curve,
        "statements_detail": {name: {l: r["records"] for l, r in by_load.items()} for name, by_load in runs.items()},
    }


def _f(x: Any, fmt: str = ".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def markdown(report: dict) -> str:
    w = report["workload"]
    lines = [
        f"# relserve end to end: workload {w.get('name', 'main')} ({'quick' if report['quick'] else 'full'} run)",
        "",
        f"{w['sessions']} sessions, Poisson arrivals, {w['rate_at_load_1']} statements/s at load 1.0, "
        f"{w['window_s']:.0f} s of arrivals per load, loads {', '.join(map(str, w['loads']))}; "
        f"statements: {', '.join(w['statements'])}. Total {_f(report['total_s'] / 60, '.1f')} min.",
        "",
        f"At load {report['headline_load']} ({w['per_load'][str(report['headline_load'])]['statements']} statements, "
        f"{w['per_load'][str(report['headline_load'])]['rows']} table rows):",
        "",
        "| contender | statements (failed) | mean latency s | p95 latency s | table rows/s | rows the LLM functions ran on | prompt tokens computed | cached | mean / relserve | p95 / relserve | generated rows identical / different | classify labels same / different | rows llm_filter kept on one side only |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["table"]:
        cmp = row.get("answers_vs_relserve")
        ident = f"{cmp['generated_identical']} / {cmp['generated_different']}" if cmp else "(reference)"
        labels = f"{cmp['label_same']} / {cmp['label_different']} | {cmp['rows_in_one_only']}" if cmp else " |"
        lines.append(
            f"| {LABELS.get(row['contender'], row['contender'])} | {row['statements']} ({row['failed_statements']}) | "
            f"{_f(row['mean_latency_s'])} | {_f(row['p95_latency_s'])} | {_f(row['rows_per_s'], '.2f')} | {row['llm_rows']} | "
            f"{row['prompt_tokens_computed']:,} | {row['prompt_tokens_cached']:,} | {_f(row.get('mean_vs_relserve'))}x | "
            f"{_f(row.get('p95_vs_relserve'))}x | {ident} | {labels} |"
        )
    ratios = {row["contender"]: row.get("mean_vs_relserve") for row in report["table"]}
    lines.append("")
    for name, target in (("vllm-serve", 5.0), ("vllm-offline", 2.0)):
        got = ratios.get(name)
        if got is not None and not math.isnan(got):
            verdict = "met" if got >= target else f"missed by {target / got:.2f}x"
            lines.append(f"Target: relserve's mean latency {target:.0f}x lower than {LABELS[name]}: {got:.2f}x, {verdict}.")
    lines += ["", "Mean statement latency (s) by load:", "", "| contender | " + " | ".join(f"load {l}" for l in w["loads"]) + " |",
              "|---|" + "---|" * len(w["loads"])]
    for name, pts in report["curve"].items():
        by = {p["load"]: p for p in pts}
        lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(_f(by[l]["mean_latency_s"]) if l in by else "" for l in w["loads"]) + " |")
    lines += ["", "Engine start (s): " + ", ".join(f"{k} {_f(v, '.0f')}" for k, v in report["engine_start_s"].items()), ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, pts in report["curve"].items():
        xs = [p["statements_per_s"] for p in pts]
        if len(pts) == 1:
            ax.plot(xs, [p["mean_latency_s"] for p in pts], "*", markersize=11, label=LABELS.get(name, name) + " (mean)")
            continue
        line, = ax.plot(xs, [p["mean_latency_s"] for p in pts], "o-", label=LABELS.get(name, name) + " (mean)")
        ax.plot(xs, [p["p95_latency_s"] for p in pts], "--", color=line.get_color(), alpha=0.6)
    ax.set_xlabel("offered load (statements/s over all sessions)")
    ax.set_ylabel("statement latency, s (dashed: p95)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("relserve vs vLLM, end to end" + (" (quick run)" if report["quick"] else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
