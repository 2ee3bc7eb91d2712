"""Trace generation, the JSON Lines round trip, and the reader's error messages."""

from __future__ import annotations

import json

import pytest

from relserve.errors import ConfigError
from relserve.template import Template
from relserve.workloads import TraceFormatError, TraceQuery, generate_trace, read_trace, write_trace
from relserve.workloads.queries import query_spec


def _line(**over):
    rec = {"id": "a", "arrival_s": 1.5, "template": "Is {x} good? Answer yes or no.", "max_tokens": 5, "rows": [{"x": "tea"}]}
    rec.update(over)
    return json.dumps(rec)


def test_round_trip_keeps_everything(tmp_path):
    trace = generate_trace("rotten_tomatoes", 12, 2.0, rows=(1, 7), seed=5)
    path = write_trace(trace, tmp_path / "t.jsonl")
    back = read_trace(path)
    assert [q.model_dump() for q in back] == [q.model_dump() for q in trace]
    assert back[0].extras == {"type": trace[0].extras["type"], "table": "rotten_tomatoes"}


def test_reader_sorts_by_arrival_and_keeps_extra_keys(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        _line(id="late", arrival_s=3.0, tenant="t1") + "\n\n" + _line(id="early", arrival_s=0.25) + "\n" + _line(id="mid", arrival_s=1) + "\n"
    )
    qs = read_trace(p)
    assert [q.id for q in qs] == ["early", "mid", "late"]
    assert qs[2].extras == {"tenant": "t1"}
    assert qs[1].arrival_s == 1.0


BAD_LINES = [
    ("{not json", "bad JSON"),
    ("[1, 2]", "expected a JSON object"),
    (_line(rows=[]), "rows: List should have at least 1 item"),
    (_line(max_tokens=0), "max_tokens: Input should be greater than 0"),
    (_line(max_tokens=-3), "max_tokens: Input should be greater than 0"),
    (_line(max_tokens="5"), "max_tokens: Input should be a valid integer"),
    (_line(arrival_s=-0.5), "arrival_s: Input should be greater than or equal to 0"),
    (_line(rows=[{"x": "a"}, {"y": "b"}]), "rows[1] has no column 'x' used by the template"),
    (_line(rows=[{"x": None}]), "rows[0] column 'x' is null"),
    (_line(template="no placeholder"), "has no {column} placeholder"),
    (_line(template="bad {x"), "unclosed"),
    (json.dumps({"arrival_s": 0, "template": "{x}", "max_tokens": 1, "rows": [{"x": 1}]}), "id: Field required"),
]


@pytest.mark.parametrize("bad,why", BAD_LINES)
def test_bad_line_is_rejected_with_its_line_number(tmp_path, bad, why):
    p = tmp_path / "bad.jsonl"
    p.write_text(_line(id="ok1") + "\n" + _line(id="ok2") + "\n\n" + bad + "\n" + _line(id="ok3") + "\n")
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:4: "), msg
    assert why in msg


def test_duplicate_ids_name_both_lines(tmp_path):
    p = tmp_path / "dup.jsonl"
    p.write_text(_line(id="a") + "\n" + _line(id="b") + "\n" + _line(id="a") + "\n")
    with pytest.raises(TraceFormatError, match=r"dup.jsonl:3: duplicate relQuery id 'a' \(first on line 1\)"):
        read_trace(p)


def test_placeholder_with_slash_is_a_column(tmp_path):
    p = tmp_path / "beer.jsonl"
    p.write_text(_line(template="Score {review/overall}?", rows=[{"review/overall": "13/20"}]) + "\n")
    (q,) = read_trace(p)
    assert Template.parse(q.template).render(q.rows[0]) == "Score 13/20?"


def test_generator_is_reproducible_by_seed():
    a = generate_trace("beer_reviews", 20, 1.0, seed=11)
    b = generate_trace("beer_reviews", 20, 1.0, seed=11)
    c = generate_trace("beer_reviews", 20, 1.0, seed=12)
    assert [q.model_dump() for q in a] == [q.model_dump() for q in b]
    assert [q.model_dump() for q in a] != [q.model_dump() for q in c]


def test_generator_bounds_types_and_columns():
    trace = generate_trace("amazon_reviews", 60, 4.0, rows=(3, 9), types=["rating", "filtering"], seed=2)
    assert len(trace) == 60
    assert {q.extras["type"] for q in trace} == {"rating", "filtering"}
    assert min(len(q.rows) for q in trace) == 3
    assert max(len(q.rows) for q in trace) == 9
    arrivals = [q.arrival_s for q in trace]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    for q in trace:
        spec = query_spec("amazon_reviews", q.extras["type"])
        assert q.template == spec.template and q.max_tokens == spec.max_tokens
        assert all(list(r) == list(spec.columns) for r in q.rows)
        assert all(str(v).strip() for r in q.rows for v in r.values())
    assert len({q.id for q in trace}) == 60


def test_generator_default_row_bounds_and_rate():
    trace = generate_trace("beer_ratings", 400, 5.0, seed=0)
    sizes = [len(q.rows) for q in trace]
    assert 1 <= min(sizes) <= 3 and 98 <= max(sizes) <= 100
    # Poisson arrivals at 5/s: 400 gaps average 0.2 s (the tolerance is about 4 standard errors)
    assert trace[-1].arrival_s / 400 == pytest.approx(0.2, rel=0.2)


def test_generator_rows_are_distinct_rows_in_table_order():
    from relserve.workloads import load_table

    texts = load_table("amazon_reviews", columns=["text"])["text"].to_list()
    first = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    (q,) = generate_trace("amazon_reviews", 1, 1.0, rows=(60, 60), types=["filtering"], seed=4)
    idx = [first[r["text"]] for r in q.rows]
    assert len(q.rows) == 60
    assert idx == sorted(idx) and len(set(idx)) == 60  # distinct rows (texts are unique), table order


def test_generator_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="rows must be"):
        generate_trace("movies_small", 1, 1.0, rows=(0, 3))
    with pytest.raises(ConfigError, match="rate must be > 0"):
        generate_trace("movies_small", 1, 0.0)
    with pytest.raises(ConfigError, match="only 794 rows usable for classification"):
        generate_trace("movies_small", 1, 1.0, rows=(1, 900), types=["classification"])


def test_trace_query_validates_in_code():
    with pytest.raises(ValueError, match=r"rows\[0\] has no column 'a' used by the template \(row columns: 'b'\)"):
        TraceQuery(id="x", arrival_s=0.0, template="{a}", max_tokens=1, rows=[{"b": 1}])
