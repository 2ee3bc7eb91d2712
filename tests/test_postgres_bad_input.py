"""Bad input to the PostgreSQL extension (issue 63), as a role without rights (alice) on a real
PostgreSQL 15 cluster and a real server on loopback (the stand-in engine: nothing here reaches
it). Three tables, one test each: every ``relserve.*`` setting, the options of a ``*_query`` call,
and the SQL functions' own arguments. Each bad value is an error with a SQLSTATE and a message
naming the setting, option or argument, raised before any request is sent (never the server's
HTTP 422 under the server's field name, never a Python exception's own text)."""

from __future__ import annotations

import re

import psycopg
import pytest
from server_fixtures import FakeEngine, running_server
from test_postgres import KEY, ROLE_KEYS, cluster, connect  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.postgres]

BAD_PARAMETER = psycopg.errors.InvalidParameterValue


@pytest.fixture(scope="module")
def fake():
    return FakeEngine()


@pytest.fixture(scope="module")
def server(fake):
    """The cluster's server (test_postgres.py's fixture of the same name is replaced here)."""
    tenants = {"pg": {"key": KEY}, **{role: {"key": key} for role, key in ROLE_KEYS.items()}}
    with running_server(fake, tenants={"tenants": tenants}, cache=False) as srv:
        yield srv


def refused(cluster, fake, statements: list[str], error: type, message: str) -> None:
    """Run ``statements`` as alice; the last must fail with ``error`` and a message matching
    ``message`` (from its start), and nothing may reach the engine."""
    before = len(fake.submitted)
    with connect(cluster, "alice") as db:
        *setup, last = statements
        for sql in setup:
            db.execute(sql)
        with pytest.raises(error) as e:
            db.execute(last)
    got = e.value.diag.message_primary
    assert re.match(message, got), got
    assert "HTTP 422" not in got and "Traceback" not in got
    assert len(fake.submitted) == before


ONE_CALL = "SELECT llm_map('Say {x}', 'a')"
BATCHED = "SELECT llm_map('Say {r}', review) FROM reviews"

#: (setting, value, the message's start); each is SET, then ONE_CALL runs
SETTINGS = [
    ("on_server_error", "sometimes", r"relserve.on_server_error must be 'null' or 'raise', got 'sometimes'"),
    ("batch_calls", "maybe", r"relserve.batch_calls must be a boolean \(on or off\), got .maybe."),
    ("order_quals", "sometimes", r"relserve.order_quals must be a boolean \(on or off\), got .sometimes."),
    ("batch_window", "0", r"relserve.batch_window must be a whole number of rows from 1 to 10000, got 0"),
    ("batch_window", "20000", r"relserve.batch_window must be a whole number of rows from 1 to 10000, got 20000"),
    ("batch_window", "many", r"relserve.batch_window must be a whole number, got 'many'"),
    ("top_p", "5", r"relserve.top_p must be a number in \(0, 1\], got 5.0"),
    ("top_p", "0", r"relserve.top_p must be a number in \(0, 1\], got 0.0"),
    ("seed", "abc", r"relserve.seed must be a whole number, got 'abc'"),
    ("seed", "1.5", r"relserve.seed must be a whole number, got '1.5'"),
    ("reorder_fields", "sometimes", r"relserve.reorder_fields must be a boolean \(on or off\), got 'sometimes'"),
    ("method", "magic", r"relserve.method must be one of generate, score, prior, batch, bootstrap, adaptive, got 'magic'"),
    ("prompt_shape", "json", r"relserve.prompt_shape must be one of chat, chat_answer, completion, question_first, got 'json'"),
    ("answer_field", "!!", r"relserve.answer_field must be 'auto' or a short name of words"),
    ("examples", "[1,", r"relserve.examples must be JSON, got '\[1,'"),
    ("examples", '{"x": 1}', r"relserve.examples must be a list of rows"),
    ("max_tokens", "0", r"relserve.max_tokens must be a positive integer, got 0; the largest allowed is 32768"),
    ("max_tokens", "99999", r"relserve.max_tokens must be a positive integer, got 99999"),
    ("temperature", "-1", r"relserve.temperature must be a number >= 0, got -1.0"),
    ("cascade", "0.3", r"relserve.cascade must be an agreement target between 0.5 and 0.999"),
    ("max_tokens_total", "0", r"relserve.max_tokens_total must be a positive whole number of tokens, got 0"),
    ("max_tokens_total", "-5", r"relserve.max_tokens_total must be a positive whole number of tokens, got -5"),
    ("max_tokens_total", "1e400", r"relserve.max_tokens_total must be a whole number, got '1e400'"),
    ("max_seconds", "0", r"relserve.max_seconds must be a positive, finite number of seconds, got 0.0"),
    ("max_seconds", "-2", r"relserve.max_seconds must be a positive, finite number of seconds, got -2.0"),
    ("max_seconds", "1e400", r"relserve.max_seconds must be a finite number, got '1e400'"),
    ("on_budget", "truncate", r"relserve.on_budget must be 'refuse' \(refuse before starting"),
    ("priority", "5000", r"relserve.priority must be an integer from -1000 to 1000 \(lower runs sooner\), got 5000"),
    ("priority", "high", r"relserve.priority must be a whole number, got 'high'"),
    ("deadline_s", "0", r"relserve.deadline_s must be a positive, finite number of seconds, got 0.0"),
    ("deadline_s", "-1", r"relserve.deadline_s must be a positive, finite number of seconds, got -1.0"),
    ("timeout", "0", r"relserve.timeout must be a positive, finite number of seconds, got 0.0"),
    ("timeout", "-1", r"relserve.timeout must be a positive, finite number of seconds, got -1.0"),
    ("cache", "maybe", r"relserve.cache must be a boolean \(on or off\), got 'maybe'"),
    ("on_error", "fail", r"relserve.on_error must be 'null' or 'raise', got 'fail'"),
]


@pytest.mark.parametrize("name,value,message", SETTINGS, ids=[f"{n}={v}" for n, v, _ in SETTINGS])
def test_a_bad_setting_is_refused_naming_it(cluster, fake, name, value, message):
    refused(cluster, fake, [f"SET relserve.{name} = '{value}'", ONE_CALL], BAD_PARAMETER, message)


def test_a_bad_batch_window_is_refused_by_the_batch_node_too(cluster, fake):
    refused(cluster, fake, ["SET relserve.batch_window = '0'", BATCHED], BAD_PARAMETER,
            r'relserve.batch_window must be a whole number of rows from 1 to 10000, got "0"')


def test_a_bad_order_quals_is_refused_by_the_batch_node_when_it_runs(cluster, fake):
    # the node reads the setting when a WHERE of llm quals starts to run (udfs/relserve/batch_scan.c)
    where = "SELECT id FROM reviews WHERE llm_filter('Good? {r}', review) AND llm_filter('Long? {r}', review)"
    refused(cluster, fake, ["SET relserve.order_quals = 'sometimes'", where], BAD_PARAMETER,
            r'relserve.order_quals must be a boolean \(on or off\), got "sometimes"')


MAP_QUERY = "SELECT * FROM llm_map_query('Say {x}', 'SELECT 1::text AS x', %s)"
CLASSIFY_QUERY = "SELECT * FROM llm_classify_query('Say {x}', %s, 'SELECT 1::text AS x')"
REDUCE_QUERY = "SELECT * FROM llm_reduce_query('Sum up: {x}', 'SELECT 1::text AS x', %s)"

#: (statement, its parameter, the message's start)
OPTIONS = [
    (MAP_QUERY, '{"seed": 1.5}', r"llm_map_query: option seed must be a whole number, got 1.5"),
    (MAP_QUERY, '{"seed": "soon"}', r"llm_map_query: option seed must be a whole number, got 'soon'"),
    (MAP_QUERY, '{"model": ""}', r"llm_map_query: unknown option\(s\) model; known options: timeout, "),
    (MAP_QUERY, '{"system": 5}', r"llm_map_query: option system must be text, got 5"),
    (MAP_QUERY, '{"system": ["a"]}', r"llm_map_query: option system must be text, got \['a'\]"),
    (MAP_QUERY, '{"max_tokens_total": 0}', r"llm_map_query: option max_tokens_total must be a positive whole number of tokens, got 0"),
    (MAP_QUERY, '{"max_tokens_total": -3}', r"llm_map_query: option max_tokens_total must be a positive whole number"),
    (MAP_QUERY, '{"max_seconds": 1e400}', r"llm_map_query: option max_seconds must be a finite number, got 1000000"),
    (MAP_QUERY, '{"max_seconds": 0}', r"llm_map_query: option max_seconds must be a positive, finite number of seconds"),
    (MAP_QUERY, '{"top_p": 2}', r"llm_map_query: option top_p must be a number in \(0, 1\], got 2.0"),
    (MAP_QUERY, '{"deadline_s": -1}', r"llm_map_query: option deadline_s must be a positive, finite number of seconds"),
    (MAP_QUERY, '{"priority": 1.5}', r"llm_map_query: option priority must be a whole number, got 1.5"),
    (MAP_QUERY, '{"cache": "sometimes"}', r"llm_map_query: option cache must be a boolean \(on or off\), got 'sometimes'"),
    (MAP_QUERY, '{"examples": [1, 2]}', r"llm_map_query: option examples: example 0 is a int, not a mapping"),
    (MAP_QUERY, '[1, 2]', r"llm_map_query: options must be a jsonb object, e.g. '\{\"max_tokens\": 8\}', got \[1, 2\]"),
    (MAP_QUERY, '"fast"', r"llm_map_query: options must be a jsonb object"),
    (MAP_QUERY, 'null', r"llm_map_query: options must be a jsonb object"),
    (CLASSIFY_QUERY, ["yes", ""], r"llm_classify_query labels must be non-empty strings; bad label\(s\): \[''\]"),
    (CLASSIFY_QUERY, ["yes", "yes"], r"llm_classify_query labels must be distinct; repeated: \['yes'\]"),
    (CLASSIFY_QUERY, [], r"llm_classify_query labels must be a non-empty list of strings, got an empty list"),
    (REDUCE_QUERY, '{"context_tokens": 0}', r"llm_reduce_query: option context_tokens must be a positive whole number"),
    (REDUCE_QUERY, '{"json_schema": 5}', r"llm_reduce_query: option json_schema must be a JSON object"),
    (REDUCE_QUERY, '{"max_tokens_total": 0}', r"llm_reduce_query: option max_tokens_total must be a positive whole number"),
    (REDUCE_QUERY, '{"on_budget": "all"}', r"llm_reduce_query: option on_budget must be 'refuse'"),
]


@pytest.mark.parametrize("sql,param,message", OPTIONS, ids=[f"{s.split('(')[0][14:]} {p}" for s, p, _ in OPTIONS])
def test_a_bad_option_is_refused_naming_it(cluster, fake, sql, param, message):
    before = len(fake.submitted)
    with connect(cluster, "alice") as db:
        with pytest.raises(BAD_PARAMETER) as e:
            db.execute(sql, [param])
    assert re.match(message, e.value.diag.message_primary), e.value.diag.message_primary
    assert len(fake.submitted) == before


#: (statement, the message's start): the functions' own arguments
ARGUMENTS = [
    *[(f"SELECT llm_{f}(NULL, 'a')", rf"llm_{f}: the template is NULL") for f in ("map", "filter", "score")],
    ("SELECT llm_classify(NULL, ARRAY['yes', 'no'], 'a')", r"llm_classify: the template is NULL"),
    ("SELECT llm_classify('Is {x}?', NULL, 'a')", r"llm_classify: the labels are NULL"),
    ("SELECT llm_classify('Is {x}?', ARRAY[]::text[], 'a')", r"llm_classify labels must be a non-empty list of strings"),
    ("SELECT llm_classify('Is {x}?', ARRAY['yes', NULL], 'a')", r"llm_classify labels must be non-empty strings"),
    ("SELECT llm_extract(NULL, '{\"type\": \"object\"}', 'a')", r"llm_extract: the template is NULL"),
    ("SELECT llm_extract('Facts in {x}', NULL, 'a')", r"llm_extract: the json schema is NULL"),
    ("SELECT llm_extract('Facts in {x}', '{\"type\": 5}', 'a')", r"llm_extract: invalid JSON schema: 5 is not valid"),
    ("SELECT llm_map('Say {x}', '[1]'::jsonb)", r"llm_map: the jsonb argument must be an object of placeholder values, got list"),
    ("SELECT * FROM llm_map_query(NULL, 'SELECT 1 AS x')", r"llm_map_query: the template is NULL"),
    ("SELECT * FROM llm_filter_query('Is {x}?', NULL)", r"llm_filter_query: the query is NULL"),
    ("SELECT * FROM llm_classify_query('Is {x}?', NULL, 'SELECT 1 AS x')", r"llm_classify_query: the labels are NULL"),
    ("SELECT * FROM llm_extract_query('Facts in {x}', NULL, 'SELECT 1 AS x')", r"llm_extract_query: the json schema is NULL"),
    ("SELECT llm_count_tokens(NULL, 'a')", r"llm_count_tokens: the template is NULL"),
    ("SELECT llm_count_tokens('Say {x}', '{\"x\": 1}'::jsonb, '{\"function\": \"summarize\"}')",
     r"llm_count_tokens: option function must be one of map, filter, classify, extract, score, got 'summarize'"),
    ("SELECT llm_count_tokens('Say {x}', '{\"x\": 1}'::jsonb, '{\"function\": \"classify\"}')",
     r"llm_count_tokens: option function 'classify' needs the option labels"),
    ("SELECT llm_count_tokens('Say {x}', '{\"x\": 1}'::jsonb, '[1]')", r"llm_count_tokens: options must be a jsonb object"),
    ("SELECT llm_count_tokens('Say {x}', '{\"x\": 1}'::jsonb, '{\"top_p\": 9}')", r"llm_count_tokens: option top_p must be a number in"),
    ("SELECT * FROM llm_count_tokens_query(NULL, 'SELECT 1 AS x')", r"llm_count_tokens_query: the template is NULL"),
    ("SELECT * FROM llm_count_tokens_query('Say {x}', NULL)", r"llm_count_tokens_query: the query is NULL"),
    ("SELECT * FROM llm_count_tokens_query('Say {x}', 'SELECT 1 AS x', '{\"function\": \"extract\"}')",
     r"llm_count_tokens_query: option function 'extract' needs the option json_schema"),
    ("SELECT llm_estimate_query(NULL, 'SELECT 1 AS x')", r"llm_estimate_query: the template is NULL"),
    ("SELECT llm_estimate_query('Say {x}', NULL)", r"llm_estimate_query: the query is NULL"),
    ("SELECT llm_estimate_query('Say {x}', 'SELECT 1 AS x', '{\"max_tokens_total\": 0}')",
     r"llm_estimate_query: option max_tokens_total must be a positive whole number of tokens, got 0"),
    ("SELECT llm_estimate_query('Say {x}', 'SELECT 1 AS x', '\"filter\"')", r"llm_estimate_query: options must be a jsonb object"),
    ("SELECT * FROM llm_reduce_query(NULL, 'SELECT 1 AS x')", r"llm_reduce_query: the template is NULL"),
    ("SELECT * FROM llm_reduce_query('Sum up: {x}', NULL)", r"llm_reduce_query: the query is NULL"),
    ("SELECT llm_topk('Good? {r}', review, NULL) FROM reviews", r"llm_topk: k must be a positive integer, got NULL"),
]


@pytest.mark.parametrize("sql,message", ARGUMENTS, ids=[s[7:60] for s, _ in ARGUMENTS])
def test_a_bad_argument_is_refused_naming_it(cluster, fake, sql, message):
    refused(cluster, fake, [sql], BAD_PARAMETER, message)
