"""``df.llm.filter(..., limit=k)`` (issue 64): the frame's rows stream through one relQuery that
is cancelled once k rows are kept. Scripted engines (tests/label_doubles.py); the real engine and
the measurement: bench/bench_limit.py."""

from __future__ import annotations

import random

import polars as pl
import pytest
from label_doubles import strong_engine

import relserve.polars
from relserve.errors import ConfigError

FILTER = "Is this news article about athletics? Article: {a}"


def _frame(n: int, share: float) -> pl.DataFrame:
    rng = random.Random(4)
    return pl.DataFrame({"a": [f"sports story {i}" if rng.random() < share else f"other story {i}" for i in range(n)],
                         "n": list(range(n))})


@pytest.fixture
def engine():
    eng = strong_engine(lambda text: "sports" in text)
    relserve.polars.configure(engine=eng, progress=False)
    yield eng
    relserve.polars.configure(engine=None)


def test_a_limited_filter_answers_a_few_rows_and_returns_rows_the_full_filter_keeps(engine):
    frame = _frame(2000, 0.25)
    got = []
    explained = relserve.polars.explain(lambda: got.append(frame.lazy().llm.filter(FILTER, limit=10).collect()),
                                        analyze=True)
    (got,) = got
    # (the rows the limited call answered come from the result cache now; the rest are asked)
    full = frame.lazy().llm.filter(FILTER).collect()
    assert got.height == 10 and set(got["a"]) <= set(full["a"])
    # kept rows come back in frame order among themselves
    assert got["n"].to_list() == sorted(got["n"].to_list())
    (record,) = explained
    # the plan's first pass and sample, then a few more rows: not the 2,000
    assert record.llm_rows <= 200, record
    assert record.stopped is not None and record.stopped.startswith("stopped: limit=10 had its rows after ")
    # cancelled rows are not failures (the log is the process's: only this template's rows are ours)
    assert relserve.polars.errors().filter(pl.col("template") == FILTER).is_empty()


def test_a_limited_filter_stops_at_the_row_that_completes_the_limit(engine, tmp_path, monkeypatch):
    """With the call's plan kept (no first pass) and an empty result cache, the relQuery's rows
    stream in their spread order and the k-th kept row is the last one answered: not one row more."""
    monkeypatch.setenv("RELSERVE_HOME", str(tmp_path / "home"))  # no answer from an earlier run's cache
    pl.DataFrame({"a": [f"sports plan row {i}" if i % 3 == 0 else f"other plan row {i}" for i in range(200)]}) \
        .lazy().llm.filter(FILTER).collect()  # makes and keeps the call's plan
    # (zero-padded numbers first: the order the planner sorts rows in for prefix sharing is frame order)
    rows = [f"limit row {i:03}: {'sports' if i in (4, 9, 17, 30, 31) else 'other'}" for i in range(300)]
    got = []
    explained = relserve.polars.explain(
        lambda: got.append(pl.DataFrame({"a": rows}).lazy().llm.filter(FILTER, limit=4).collect()), analyze=True)
    # the rows stream in a spread order over the planned one (docs/sql-and-dataframes.md): a
    # stride of 187 over 300 rows (the first near 300 / 1.618 with no common factor with 300)
    stream = [(k * 187) % 300 for k in range(300)]
    passing = [k for k, i in enumerate(stream) if i in (4, 9, 17, 30, 31)]
    answered = passing[3] + 1
    # (this double answers the cancelled rows too: the frame's first 4 kept rows come back)
    assert got[0]["a"].to_list() == [rows[i] for i in (4, 9, 17, 30)]
    (record,) = explained
    assert record.llm_rows == answered, record
    assert record.stopped == (f"stopped: limit=4 had its rows after {answered} of 300 rows; "
                              f"the other {300 - answered} were cancelled")


def test_a_limit_the_rows_cannot_fill_returns_every_row_that_passes(engine):
    frame = _frame(300, 0.02)
    got = frame.llm.filter(FILTER, limit=50)  # eager: runs now
    assert sorted(got["a"]) == sorted(a for a in frame["a"] if "sports" in a)


def test_a_limited_filter_works_after_other_lazy_steps_and_before_a_head(engine):
    frame = _frame(400, 0.5)
    got = (frame.lazy().filter(pl.col("n") >= 100).llm.filter(FILTER, limit=5)
           .with_columns(m=pl.col("n") * 2).head(3).collect())
    assert got.height == 3 and all(n >= 100 and "sports" in a for a, n in zip(got["a"], got["n"]))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_a_bad_limit_is_named_before_any_row_runs(bad):
    with pytest.raises(ConfigError, match="limit must be a whole number of rows >= 1"):
        _frame(5, 0.5).lazy().llm.filter(FILTER, limit=bad)
