"""A LabelWarning names the user's line, not relserve's: through ``run_call``, a DuckDB statement
(fresh and from the result cache) and a polars expression. Before, a DuckDB statement's warning
pointed at relserve/duckdb_ext/session.py, where the UDF calls the planner."""

from __future__ import annotations

import linecache
import os
import warnings
from pathlib import Path

import polars as pl
import pytest
from label_doubles import LabelEngine
from test_label_guesses import LABELS, TEMPLATE, blind, tickets

import relserve.duckdb
import relserve.polars  # noqa: F401 (registers the .llm namespaces)
from relserve.errors import LabelWarning, warn_at_caller
from relserve.functions import make_call
from relserve.labels.memory import LabelMemory, forget_all, use_memory
from relserve.planner.plan_and_run import run_call


@pytest.fixture(autouse=True)
def _fresh_memory():
    forget_all()
    yield
    forget_all()


def where(seen: list[warnings.WarningMessage]) -> list[tuple[str, str]]:
    """(file, the line's source) of each warning."""
    return [(w.filename, linecache.getline(w.filename, w.lineno).strip()) for w in seen]


def label_warnings(run) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", LabelWarning)
        run()
    return [w for w in seen if issubclass(w.category, LabelWarning)]


def test_run_call_warns_at_the_callers_line():
    rows, _ = tickets(60, 0.25)
    call = make_call("llm_classify", TEMPLATE, labels=LABELS)
    seen = label_warnings(lambda: run_call(call, [rows], engine=LabelEngine(blind), cache=False, progress=False))
    assert where(seen) == [(__file__, "seen = label_warnings(lambda: run_call(call, [rows], engine=LabelEngine(blind), "
                                      "cache=False, progress=False))")]


def test_a_duckdb_statement_warns_at_the_statement_fresh_and_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))
    rows, _ = tickets(60, 0.25)
    con = relserve.duckdb.connect(engine=LabelEngine(blind), progress=False)
    con.execute("CREATE TABLE tickets (t VARCHAR)")
    con.executemany("INSERT INTO tickets VALUES (?)", [[r] for r in rows])
    query = f"SELECT llm_classify('{TEMPLATE}', ['damage', 'account', 'billing'], t) FROM tickets"
    use_memory(LabelMemory(tmp_path / "plans.sqlite"))
    fresh = label_warnings(lambda: con.sql(query).fetchall())
    use_memory(LabelMemory(tmp_path / "plans.sqlite"))  # a new process: the plan and the cache kept
    cached = label_warnings(lambda: con.sql(query).fetchall())
    assert where(fresh) == [(__file__, "fresh = label_warnings(lambda: con.sql(query).fetchall())")]
    assert where(cached) == [(__file__, "cached = label_warnings(lambda: con.sql(query).fetchall())")]
    assert "answers from the result cache" in str(cached[0].message)


def test_a_polars_expression_warns_at_the_users_line():
    rows, _ = tickets(60, 0.25)
    df = pl.DataFrame({"t": rows})
    seen = label_warnings(lambda: df.with_columns(kind=pl.col("t").llm.classify(
        TEMPLATE, LABELS, engine=LabelEngine(blind))))
    assert where(seen) == [(__file__, 'seen = label_warnings(lambda: df.with_columns(kind=pl.col("t").llm.classify(')]


def test_on_a_thread_with_no_frame_outside_relserve_the_warning_names_relserves_line(monkeypatch):
    # a server's worker thread: every frame is relserve's or the standard library's, and no
    # DuckDB statement named a line
    import threading

    from relserve import errors

    monkeypatch.setattr(errors, "_last_statement", None)
    monkeypatch.setattr(errors, "_package_dirs", lambda: (str(Path(__file__).parent) + os.sep,
                                                          str(Path(threading.__file__).parent) + os.sep))
    got: list[warnings.WarningMessage] = []
    t = threading.Thread(target=lambda: got.extend(label_warnings(lambda: warn_at_caller("guesses"))))
    t.start()
    t.join()
    # (this file stands in for relserve here, so the line named is the one that called warn_at_caller)
    assert where(got) == [(__file__, 't = threading.Thread(target=lambda: got.extend(label_warnings(lambda: '
                                     'warn_at_caller("guesses"))))')]


def test_on_a_pool_thread_the_warning_names_the_statement_that_started_the_work(monkeypatch):
    # relserve runs a statement's calls on a thread pool of its own (relserve/duckdb_ext): above
    # relserve's frames there is only the pool's worker, so the statement's line is named
    from concurrent.futures import ThreadPoolExecutor

    from relserve import errors

    monkeypatch.setattr(errors, "_package_dirs", lambda: (str(Path(__file__).parent) + os.sep,))
    monkeypatch.setattr(errors, "_last_statement", ("users_script.py", 12, "__main__", {}))
    with ThreadPoolExecutor(1) as pool:
        got = pool.submit(label_warnings, lambda: warn_at_caller("guesses")).result()
    assert [(w.filename, w.lineno, str(w.message)) for w in got] == [("users_script.py", 12, "guesses")]
