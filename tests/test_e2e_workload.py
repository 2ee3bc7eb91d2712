"""The end-to-end benchmark's workload builder (bench/bench_e2e.py, sql/bench_e2e/) and the DuckDB
surface against a server (``relserve.duckdb.connect(server=...)``): the latter for real, on the
session's shared engine behind a real relserve HTTP server, answers compared with a local
connection's."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import duckdb
import pytest
from server_fixtures import running_server
from waits import Worker, finish_all, wait_until

import relserve.duckdb
from relserve.client import ServerError
from relserve.errors import ConfigError
from relserve.planner.cache import ResultCache

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("bench_e2e", ROOT / "bench" / "bench_e2e.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_e2e"] = mod
    spec.loader.exec_module(mod)
    return mod


b = _bench()


# ------------------------------------------------------------------------------ workload builder


def test_statements_cover_the_four_functions_and_say_what_to_compare():
    st = b.load_statements()
    text = " ".join(s.text for s in st)
    for fn in ("llm_filter(", "llm_classify(", "llm_map(", "llm_extract("):
        assert fn in text
    assert all("$offset" in s.text and "$rows" in s.text for s in st)
    assert {s.table for s in st} <= {"rotten", "products", "beers"}
    assert any(s.generated for s in st) and any(s.labels for s in st) and any(s.filters_rows for s in st)
    sql = st[0].sql(10, 5)
    assert "$" not in sql and "10 + 5" in sql


def test_workload_is_seeded_poisson_per_session_with_sizes_in_range():
    st = b.load_statements()
    a = b.build_workload(st, sessions=8, rate=2.0, horizon=200, seed=3)
    assert a == b.build_workload(st, sessions=8, rate=2.0, horizon=200, seed=3)
    assert a != b.build_workload(st, sessions=8, rate=2.0, horizon=200, seed=4)
    assert {i.session for i in a} == set(range(8))
    assert all(1 <= i.rows <= 300 and 0 <= i.base_arrival < 200 for i in a)
    # about rate * horizon statements, each session a sequence numbered from 0
    assert 300 < len(a) < 500
    for s in range(8):
        seqs = [i.seq for i in a if i.session == s]
        assert sorted(seqs) == list(range(len(seqs)))
    # exponential gaps: mean about sessions / rate
    gaps = []
    for s in range(8):
        t = sorted(i.base_arrival for i in a if i.session == s)
        gaps += [y - x for x, y in zip([0.0] + t, t)]
    assert 3.0 < sum(gaps) / len(gaps) < 5.0
    assert {i.name for i in a} == {s.name for s in st}


def test_loads_nest_and_rows_are_the_same_for_every_contender():
    st = b.load_statements()
    items = b.build_workload(st, sessions=8, rate=1.0, horizon=60, seed=1)
    low = b.at_load(items, st, 0.5, 60, seed=1)
    high = b.at_load(items, st, 1.0, 60, seed=1)
    assert {w.key for w in low} < {w.key for w in high}
    assert all(w.arrival < 60 for w in low + high)
    by_key = {w.key: w for w in high}
    assert all(abs(w.arrival - 2 * by_key[w.key].arrival) < 1e-3 for w in low)
    assert high == b.at_load(items, st, 1.0, 60, seed=1)  # the same for every contender
    for w in high:
        assert 0 <= w.offset <= b.TABLE_ROWS - w.item.rows and f"id > {w.offset} " in w.sql


@pytest.mark.parametrize("workload, tables", [("main", ("rotten", "products", "beers")), ("other", ("films", "ratings")),
                                              ("third", ("shop", "critics", "brews"))])
def test_tables_come_from_the_shared_datasets(workload, tables):
    sql_dir = b.WORKLOADS[workload]
    needed = re.findall(r"\$\{?datasets\}?/([\w.]+)", (sql_dir / "tables.sql").read_text())
    assert needed, f"{sql_dir / 'tables.sql'} reads no dataset file"
    missing = [f for f in needed if not (b.DATASETS / f).is_file()]
    assert not missing, (
        f"the shared datasets are missing: {', '.join(missing)} not found in {b.DATASETS} "
        "(set RELSERVE_DATASETS to the folder holding the benchmark Parquet files)"
    )
    n_rows = b.table_rows(sql_dir)
    assert n_rows == {"main": b.TABLE_ROWS, "other": 1000, "third": 1000}[workload]
    con = b.new_duckdb(b.DATASETS, sql_dir)
    for t in tables:
        n, lo, hi = con.sql(f"SELECT count(*), min(id), max(id) FROM {t}").fetchall()[0]
        assert (n, lo, hi) == (n_rows, 1, n_rows)
    statements = b.load_statements(sql_dir)
    assert {s.table for s in statements} == set(tables)
    # every statement is valid SQL over those tables (the LLM functions replaced by stand-ins)
    import pyarrow as pa

    for fn, ret, value in (("llm_filter", "BOOLEAN", True), ("llm_map", "VARCHAR", "x"), ("llm_classify", "VARCHAR", "x"), ("llm_extract", "VARCHAR", "{}")):
        con.create_function(fn, lambda *a, v=value: pa.array([v] * len(a[0])), None, ret, type="arrow",
                            null_handling="special", side_effects=True)
    con.execute("CREATE MACRO llm_options(max_tokens := NULL) AS NULL")
    for s in statements:
        assert con.sql(s.sql(100, 3)).fetchall(), s.name


def test_the_second_workload_differs_from_the_first_in_tables_templates_and_lengths():
    main, other = b.load_statements(b.WORKLOADS["main"]), b.load_statements(b.WORKLOADS["other"])
    assert not {s.table for s in main} & {s.table for s in other}
    assert not {s.text for s in main} & {s.text for s in other}
    text = " ".join(s.text for s in other)
    for fn in ("llm_filter(", "llm_classify(", "llm_map(", "llm_extract("):
        assert fn in text
    # longer answers than any statement of the main workload asks for
    longest = lambda sts: max(int(m) for s in sts for m in re.findall(r"max_tokens := (\d+)", s.text))  # noqa: E731
    assert longest(other) > 2 * longest(main)


def test_the_third_workload_shares_no_table_template_or_row_with_the_others():
    main, other, third = (b.load_statements(b.WORKLOADS[w]) for w in ("main", "other", "third"))
    assert len(third) == 5
    assert not {s.table for s in third} & {s.table for s in main + other}
    assert not {p.name for p in b.WORKLOADS["third"].glob("*.sql")} & {p.name for w in ("main", "other") for p in b.WORKLOADS[w].glob("*.sql")} - {"tables.sql"}
    # no template of the others: the first argument of every LLM call differs
    templates = lambda sts: set(re.findall(r"llm_\w+\('([^']*)'", " ".join(s.text for s in sts)))  # noqa: E731
    assert len(templates(third)) == 6 and not templates(third) & templates(main + other)
    text = " ".join(s.text for s in third)
    for fn in ("llm_filter(", "llm_classify(", "llm_map(", "llm_extract("):
        assert fn in text
    # labels of more than one word; a filter then a map; short and long answers
    labels = re.findall(r"\['([^\]]*)'\]", text)
    assert any(" " in lab for group in labels for lab in group.split("', '"))
    assert any(s.filters_rows and "llm_map(" in s.text for s in third)
    answers = sorted(int(m) for s in third if "llm_map(" in s.text for m in re.findall(r"max_tokens := (\d+)", s.text))
    assert answers[0] <= 10 and answers[-1] >= 30
    # none of its rows is a row the main workload reads (the second reads other files)
    from e2e.workload import tables_sql

    con = b.new_duckdb(b.DATASETS, b.WORKLOADS["main"])
    con.execute(tables_sql(b.DATASETS, b.WORKLOADS["third"]))
    assert con.sql("SELECT min(src_row) FROM (SELECT src_row FROM shop UNION ALL SELECT src_row FROM critics "
                   "UNION ALL SELECT src_row FROM brews)").fetchall() == [(3000,)]
    shared = (
        "SELECT count(*) FROM shop s JOIN products p ON left(s.product, 120) = p.name AND left(s.body, 500) = p.text",
        "SELECT count(*) FROM critics c JOIN rotten r ON c.movie_id = r.movie_id AND c.review = r.review",
        "SELECT count(*) FROM brews w JOIN beers x ON w.beer = x.beer_name AND left(w.review, 400) = x.review",
    )
    for q in shared:
        assert con.sql(q).fetchall() == [(0,)], q


def test_a_workload_without_a_row_count_is_refused(tmp_path):
    (tmp_path / "tables.sql").write_text("CREATE TABLE t AS SELECT 1 AS id;\n")
    with pytest.raises(ValueError, match=r"tables.sql: no '-- rows: N' line"):
        b.table_rows(tmp_path)


def test_throughput_counts_table_rows_the_same_for_every_contender():
    recs = [{"rows": 20, "llm_rows": 20, "arrival": 1.0, "end": 5.0}, {"rows": 30, "llm_rows": 12, "arrival": 2.0, "end": 11.0}]
    assert b.throughput(recs) == {"makespan_s": 10.0, "table_rows": 50, "rows_per_s": 5.0, "llm_rows": 32}
    assert b.throughput([])["table_rows"] == 0


def test_alone_runs_every_statement_back_to_back_in_arrival_order_timed_from_its_own_start():
    from dataclasses import replace

    from e2e.sessions import run_sessions
    from e2e.workload import one_at_a_time

    st = b.load_statements()
    work = b.at_load(b.build_workload(st, sessions=4, rate=1.0, horizon=20, seed=2), st, 1.0, 20, seed=2)
    alone = one_at_a_time(work)
    assert [w.key for w in alone] == [w.key for w in sorted(work, key=lambda w: w.arrival)]
    assert all(w.back_to_back for w in alone) and [replace(w, back_to_back=False) for w in alone] == sorted(
        work, key=lambda w: w.arrival)

    running, connections = [], []

    def connect(s):
        connections.append(s)
        return duckdb.connect()

    def execute(_con, w):
        running.append(w.key)
        assert len(running) == 1, "two statements at once"
        running.remove(w.key)
        return ["a"], [(1,)], w.item.rows

    records, _ = run_sessions(alone, connect, execute)
    assert connections == [0] and [r.key for r in records] == [w.key for w in alone]
    # each timed from its own start, each started after the one before ended
    assert all(r.arrival == r.start and r.latency == r.end - r.start for r in records)
    assert all(later.start >= earlier.end for earlier, later in zip(records, records[1:]))
    # without --alone a statement's latency counts its wait from the arrival
    soon = [replace(w, arrival=0.01 * k) for k, w in enumerate(work[:3])]
    queued, _ = run_sessions(soon, lambda s: duckdb.connect(), execute)
    assert sorted(r.arrival for r in queued) == [0.0, 0.01, 0.02]


@pytest.mark.parametrize("method", ["bootstrap", "prior", "adaptive", "generate"])
def test_the_decoding_contenders_render_a_label_call_as_relserve_renders_a_decoded_one(monkeypatch, method):
    """The vLLM contenders decode every label; their prompt is relserve's for method 'generate'
    (the chat shape, with its answer line) whatever RELSERVE_LABEL_METHOD says."""
    from e2e.contenders.relserve_udfs import RowUDF

    import relserve.functions as functions
    import relserve.label_names as label_names
    from relserve.duckdb_ext.udf import RETURN_TYPES
    from relserve.prompt_rendering import Renderer

    monkeypatch.setattr(label_names, "DEFAULT_LABEL_METHOD", method)
    seen = []

    def backend(call, prompts):
        seen.append((call.label_method, call.prompt_shape, prompts))
        return ["yes", "no"]

    con = duckdb.connect()
    fn = functions.function("llm_filter")
    con.create_function(fn.name, RowUDF(fn, backend, [0]), None, RETURN_TYPES[fn.kind], type="arrow",
                        null_handling="special", side_effects=True)
    kept = con.sql("SELECT x FROM (VALUES ('broke at once'), ('works')) t(x) "
                   "WHERE llm_filter('Is this review negative? Review: {x}', x)").fetchall()
    decoded = functions.make_call("llm_filter", "Is this review negative? Review: {x}",
                                  options=functions.CallOptions(method="generate"))
    assert kept == [("broke at once",)]
    assert seen == [("generate", "chat", [Renderer(decoded)(("broke at once",)), Renderer(decoded)(("works",))])]
    assert seen[0][2][0] == "Is this review negative? Review: broke at once\nAnswer yes or no."


def test_fifo_lock_runs_in_the_order_asked():
    lock, order = b.FifoLock(), []

    def worker(i):
        with lock:
            order.append(i)

    threads = [Worker(worker, i, what=f"worker {i} to take and release the lock in its turn") for i in range(5)]
    with lock:  # held while the workers line up, one after another
        for i, t in enumerate(threads):
            t.start()
            # i + 2 tickets: the test's own (holding the lock) and workers 0..i waiting
            wait_until(lambda n=i + 2: lock.lined_up >= n, f"worker {i} to ask for the lock", timeout=30, poll=0.005)
        assert order == []
    finish_all(threads, timeout=30)
    assert order == list(range(5))


def test_answer_comparison_counts_generated_and_label_columns():
    st = [b.Statement("m", "", "t", generated=("g",), labels=("l",))]
    ref = {"s0-0": {"name": "m", "columns": ["id", "g", "l"], "rows": [[1, "a", "x"], [2, "b", "y"], [3, "c", "z"]]}}
    other = {"s0-0": {"name": "m", "columns": ["id", "l", "g"], "rows": [[1, "x", "a"], [2, "q", "B"], [4, "z", "c"]]}}
    got = b.compare_answers(st, ref, other)
    assert (got["generated_identical"], got["generated_different"]) == (1, 1)
    assert (got["label_same"], got["label_different"]) == (1, 1)
    assert (got["rows_in_both"], got["rows_in_one_only"]) == (2, 2)


def test_summary_percentiles():
    assert b._pct([1, 2, 3, 4, 5], 0.5) == 3
    assert b._pct([1.0, 2.0], 0.95) == pytest.approx(1.95)


# ------------------------------------------------------------------------------ remote DuckDB mode

KEY = "e2e-remote-test-key"
REVIEWS = [(1, "Alien", "A tense, beautifully made film."), (2, "Alien", "Too slow for me, I left early."),
           (3, "Heat", "Two great actors at their best."), (4, "Heat", "A tense, beautifully made film."),
           (5, "Up", None), (6, "Up", "Made me cry, in the best way.")]


def _reviews(con) -> None:
    con.execute("CREATE TABLE reviews(id INTEGER, movie VARCHAR, review VARCHAR)")
    con.executemany("INSERT INTO reviews VALUES (?, ?, ?)", REVIEWS)


STATEMENT = """
SELECT id,
       llm_classify('Tone of this review: {review}', ['enthusiastic', 'mixed', 'negative'], review) AS tone,
       llm_map('Movie {movie}. In three words, what did the critic think? {review}', movie, review, llm_options(max_tokens := 6)) AS gist,
       llm_extract('Review: {review}', '{"type": "object", "properties": {"stars": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}, "required": ["stars"]}', review, llm_options(max_tokens := 12)) AS facts,
       llm_filter('Is this a review of a movie? {review}', review) AS about_a_movie
FROM reviews
ORDER BY id
"""


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    cache = ResultCache(tmp_path_factory.mktemp("e2e-cache") / "results.sqlite")
    with running_server(engine, tenants={"tenants": {"t": {"key": KEY}}}, cache=cache) as srv:
        yield srv


@pytest.mark.engine
def test_a_server_connection_answers_as_a_local_one(engine, server, tmp_path):
    local = relserve.duckdb.connect(engine=engine, cache=ResultCache(tmp_path / "local.sqlite"), progress=False)
    _reviews(local)
    expected = relserve.duckdb.sql(local.con, STATEMENT).fetchall()

    remote = relserve.duckdb.connect(server=server.url, api_key=KEY, cache=False, progress=False)
    _reviews(remote)
    got = remote.sql(STATEMENT).fetchall()
    assert got == expected
    assert got[4][1:] == (None, None, None, None)  # the NULL review: NULL answers
    errs = remote.errors().fetchall()
    assert errs and all("NULL" in e[3] or "null" in e[3].lower() for e in errs)
    # one relQuery per call site over its distinct argument tuples (rows 1 and 4 share a review)
    calls = relserve.duckdb_ext.connections.session_of(remote.con).calls
    assert sorted(c.function for c in calls) == ["llm_classify", "llm_extract", "llm_filter", "llm_map"]
    assert all(c.rows == (6 if c.function == "llm_map" else 5) for c in calls)
    assert all(c.cached_rows == 0 and c.prompt_tokens > 0 for c in calls)


@pytest.mark.engine
def test_the_whole_call_specification_reaches_the_server(engine, server, tmp_path):
    """method, examples and a system message travel field by field and answer as locally."""
    q = """SELECT id,
        llm_filter('Is {review} good?', review, llm_options(method := 'generate', max_tokens := 2)) AS g,
        llm_filter('Is {review} good?', review, llm_options(examples := [{'review': 'Loved it', 'answer': true}])) AS e,
        llm_map('Say {review}', review, llm_options(system := 'Answer in French.', max_tokens := 5)) AS s
      FROM reviews ORDER BY id"""
    local = relserve.duckdb.connect(engine=engine, cache=ResultCache(tmp_path / "local.sqlite"), progress=False)
    _reviews(local)
    remote = relserve.duckdb.connect(server=server.url, api_key=KEY, cache=False, progress=False)
    _reviews(remote)
    assert remote.sql(q).fetchall() == relserve.duckdb.sql(local.con, q).fetchall()


@pytest.mark.engine
def test_a_server_connection_uses_the_servers_result_cache_when_asked(engine, server):
    q = "SELECT id, llm_map('Summarize in two words: {review}', review, llm_options(max_tokens := 4)) AS s FROM reviews ORDER BY id"
    con = relserve.duckdb.connect(server=server.url, api_key=KEY, progress=False)  # cache on (the default)
    _reviews(con)
    first = con.sql(q).fetchall()
    again = con.sql(q).fetchall()
    assert again == first
    calls = relserve.duckdb_ext.connections.session_of(con.con).calls
    # 5 distinct reviews sent (one NULL, which fails), the 4 others answered from the cache
    assert (calls[-1].rows, calls[-1].cached_rows, calls[-1].engine_rows) == (5, 4, 0)
    off = relserve.duckdb.connect(server=server.url, api_key=KEY, cache=False, progress=False)
    _reviews(off)
    assert off.sql(q).fetchall() == first
    assert relserve.duckdb_ext.connections.session_of(off.con).calls[-1].cached_rows == 0
    # the plain (per chunk) path of the same connection goes to the server too
    assert [r[0] for r in con.con.sql(q.replace("ORDER BY id", "ORDER BY id LIMIT 2")).fetchall()] == [1, 2]


@pytest.mark.engine
def test_explain_on_a_server_connection_asks_the_server(server):
    con = relserve.duckdb.connect(server=server.url, api_key=KEY, progress=False)
    _reviews(con)
    ex = con.explain("SELECT llm_filter('Is {review} about a film?', review) FROM reviews")
    text = str(ex)
    assert "on the server" in text and "6 row(s)" in text and "cannot run" in text


@pytest.mark.engine
def test_server_connection_errors_name_the_problem(server, tmp_path):
    with pytest.raises(ConfigError, match="server must be"):
        relserve.duckdb.connect(server="localhost:8000")
    with pytest.raises(ConfigError, match="engine or server"):
        relserve.duckdb.install(duckdb.connect(), engine=object(), server=server.url)
    with pytest.raises(ConfigError, match="cache"):
        relserve.duckdb.connect(server=server.url, cache=ResultCache(tmp_path / "never-used.sqlite"))
    con = relserve.duckdb.connect(server=server.url, api_key=KEY, progress=False)
    _reviews(con)
    with pytest.raises(Exception, match="unknown model 'no-such-model'"):
        relserve.duckdb.sql(con.con, "SELECT llm_map('Say {review}', review, llm_options(model := 'no-such-model')) FROM reviews")
    bad = relserve.duckdb.connect(server=server.url, api_key="wrong-key-123", progress=False)
    _reviews(bad)
    with pytest.raises(ServerError, match="401"):
        relserve.duckdb.sql(bad.con, "SELECT llm_map('Say {review}', review) FROM reviews")


# ------------------------------------------------------------------------------ statement traces


def test_the_reports_overhead_is_the_mean_of_each_kinds_traces():
    from e2e.overhead import markdown, overhead_rows

    from relserve.duckdb_ext.trace import CallTrace, PassTrace, StageTrace, StatementTrace

    def trace(total: float, server: float) -> dict:
        t = StatementTrace(parse_s=0.002, parses=1, total_s=total,
                           passes=[PassTrace("collect", 0.05), PassTrace("collect", 0.03)],
                           stages=[StageTrace("relqueries", (0,), 0.5)],
                           calls=[CallTrace(0, "llm_map", 10, 0.5, engine_s=0.3, server_s=server, round_trip_s=0.5 - server)])
        return t.to_dict()

    records = [
        {"key": "a", "name": "map_movies", "arrival": 0.0, "start": 1.0, "end": 2.0, "error": None},
        {"key": "b", "name": "map_movies", "arrival": 0.0, "start": 0.0, "end": 3.0, "error": None},
        {"key": "c", "name": "map_movies", "arrival": 0.0, "start": 0.0, "end": 9.0, "error": "boom"},  # failed: left out
        {"key": "d", "name": "extract_beers", "arrival": 0.0, "start": 0.0, "end": 1.0, "error": None},  # no trace
    ]
    (row,) = overhead_rows(records, {"a": trace(0.6, 0.4), "b": trace(0.7, 0.2), "c": trace(5.0, 1.0)})
    assert (row.name, row.statements, row.passes) == ("map_movies", 2, 2.0)
    assert row.latency_s == pytest.approx(2.5) and row.before_start_s == pytest.approx(0.5)
    assert row.total_s == pytest.approx(0.65) and row.parse_s == pytest.approx(0.002)
    assert row.passes_s == pytest.approx(0.08) and row.waves_s == pytest.approx(0.5)
    assert row.other_s == pytest.approx(0.65 - 0.002 - 0.08 - 0.5)
    assert row.server_s == pytest.approx(0.3) and row.round_trip_s == pytest.approx(0.2) and row.engine_s == pytest.approx(0.3)
    text = "\n".join(markdown({"0.5": [row.as_dict()]}))
    assert "| map_movies | 2 | 2500 | 500 | 650 | 2 | 80 (2.0) | 500 | 68 | 300 | 200 | 0 | 300 |" in text
    assert markdown({"0.5": []}) == []


# ------------------------------------------------------------------------------ one dtype for every contender


def test_every_phase_is_started_with_the_runs_dtype(monkeypatch):
    from e2e.limits import ENGINE
    from e2e.runner import phase_command

    opts = b.options(b.parse_args(["--quick", "--dtype", "float32", "--contenders", "vllm-offline,relserve"]))
    assert opts.dtype == "float32"
    cmd = phase_command(Path("bench_e2e.py"), opts, "relserve", Path("/tmp/w"))
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    # what every contender reads: RELSERVE_DTYPE, as relserve's engine resolves it
    monkeypatch.setenv("RELSERVE_DTYPE", "float32")
    assert ENGINE.dtype == "float32" and ENGINE.as_dict()["dtype"] == "float32"
    monkeypatch.setenv("RELSERVE_DTYPE", "bfloat16")
    assert ENGINE.dtype == "bfloat16"


def test_the_report_says_when_the_contenders_dtypes_differ():
    from e2e.report import dtypes_line

    engine = {"dtype": "bfloat16"}
    assert dtypes_line({"dtypes": {"vllm-offline": "bfloat16", "relserve": "bfloat16"}, "engine": engine}) == "bfloat16, every contender"
    assert dtypes_line({"dtypes": {"vllm-offline": "float32", "relserve": "bfloat16"}, "engine": engine}) == (
        "NOT THE SAME for every contender: vllm-offline float32, relserve bfloat16")
    assert dtypes_line({"dtypes": {"relserve": None}, "engine": engine}) == "bfloat16 (the phases did not record theirs)"


def test_the_reports_kinds_compare_each_statement_kind_with_relserves():
    from e2e.kinds import kind_latencies, markdown

    def rec(name: str, latency: float, error: str | None = None) -> dict:
        return {"name": name, "arrival": 1.0, "end": 1.0 + latency, "error": error}

    runs = {
        "relserve": {"0.5": {"records": [rec("map_movies", 2.0), rec("map_movies", 4.0), rec("map_movies", 99.0, "boom")]}},
        "vllm-offline": {"0.5": {"records": [rec("map_movies", 3.3), rec("extract_beers", 1.0)]}},
    }
    kinds = kind_latencies(runs)
    assert [(k.load, k.statement, k.means) for k in kinds] == [
        ("0.5", "extract_beers", {"vllm-offline": 1.0}), ("0.5", "map_movies", {"relserve": 3.0, "vllm-offline": 3.3})]
    assert kinds[1].vs_relserve("vllm-offline") == pytest.approx(1.1) and kinds[0].vs_relserve("vllm-offline") is None
    lines = markdown([k.as_dict() for k in kinds], ["vllm-offline", "relserve"])
    assert "| 0.5 | map_movies | 3.00 | 3.30 (1.10x) |" in lines and "| 0.5 | extract_beers |  | 1.00 |" in lines


# ------------------------------------------------------------------------------ label plans at each load's start


def test_the_plan_making_statements_read_rows_no_measured_statement_reads():
    from e2e.workload import PLAN_WARM_ROWS, plan_statements

    statements = b.load_statements(b.WORKLOADS["main"])
    items = b.build_workload(statements, sessions=8, rate=0.1, horizon=480.0, seed=16)
    work = {load: b.at_load(items, statements, load, 240.0, 16) for load in (0.5, 1.0)}
    made = plan_statements(statements, work)
    # the statements whose calls have label plans: a filter in WHERE, a classify
    assert [m.item.name for m in made] == ["classify_products", "complaints", "filter_reviews"]
    assert {m.item.rows for m in made} == {PLAN_WARM_ROWS}
    table = {s.name: s.table for s in statements}
    for m in made:
        ids = set(range(m.offset + 1, m.offset + PLAN_WARM_ROWS + 1))
        assert ids <= set(range(1, b.TABLE_ROWS + 1)), m
        # no measured row of any load, nor another plan-making statement's rows of the same table
        measured = {i for ws in work.values() for w in ws if table[w.item.name] == table[m.item.name]
                    for i in range(w.offset + 1, w.offset + w.item.rows + 1)}
        others = {i for o in made if o is not m and table[o.item.name] == table[m.item.name]
                  for i in range(o.offset + 1, o.offset + PLAN_WARM_ROWS + 1)}
        assert not ids & measured and not ids & others, m.item.name
        assert f"id > {m.offset} AND id <= {m.offset} + {PLAN_WARM_ROWS}" in m.sql


@pytest.mark.parametrize("ranges,want", [
    ([], 0),
    ([(0, 10)], 10),
    ([(5, 10)], 10),           # 5 free rows before it: too few for 8
    ([(8, 20)], 0),            # exactly 8 free rows before it
    ([(0, 10), (12, 30), (25, 40)], 40),
    ([(0, 93)], None),         # 7 rows left of 100
])
def test_the_first_free_offset_of_a_table(ranges, want):
    from e2e.workload import _free_offset

    assert _free_offset(ranges, 8, 100) == want


def test_the_phase_gets_the_plans_state_and_the_report_says_it():
    from e2e.report import plans_line
    from e2e.runner import phase_command

    opts = b.options(b.parse_args(["--quick", "--plans", "cold", "--contenders", "vllm-offline,relserve"]))
    cmd = phase_command(Path("bench_e2e.py"), opts, "relserve", Path("/tmp/w"))
    assert cmd[cmd.index("--plans") + 1] == "cold"
    assert b.options(b.parse_args(["--quick"])).plans == "warm"
    with pytest.raises(SystemExit):
        b.parse_args(["--plans", "tepid"])
    warm = {"plans": "warm", "plans_made": {"statements": 5, "rows": 320, "seconds": 12.4}}
    assert plans_line(warm) == ("relserve's label plans: warm. Before the measured passes, 5 statements (320 rows that "
                                "no measured statement reads) made each call's plan in 12 s, not measured.")
    assert plans_line({"plans": "cold"}).startswith("relserve's label plans: cold. Each load ran as a tenant of its own")
    assert plans_line({}).startswith("relserve's label plans: not recorded")
