"""The Python of the PostgreSQL extension (relserve.postgres) without a database: a fake ``plpy``
for the pure logic. The real thing runs in test_postgres*.py and test_fdw.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from relserve.postgres.errors import PgError
from relserve.postgres.settings import (
    SETTING_NAMES,
    Settings,
    call_request,
    key_for,
    refused,
    settings_from_row,
    typed,
)
from relserve.postgres.source import as_json_rows_sql

C_SOURCE = Path(__file__).resolve().parents[1] / "udfs" / "relserve" / "settings.c"


def test_the_c_part_defines_exactly_the_settings_the_python_reads():
    names = re.search(r"rs_setting_names\[\] = \{(.*?)NULL", C_SOURCE.read_text(), re.S).group(1)
    assert tuple(re.findall(r'"(\w+)"', names)) == SETTING_NAMES
    count = int(re.search(r"#define RS_NSETTINGS (\d+)", C_SOURCE.read_text()).group(1))
    assert count == len(SETTING_NAMES)


def test_settings_are_typed_and_unset_ones_absent():
    row = {n: None for n in SETTING_NAMES} | {"max_tokens": "8", "cache": "off", "temperature": " 0.5 ", "system": ""}
    s = settings_from_row(row)
    assert s.values == {"max_tokens": 8, "cache": False, "temperature": 0.5}
    assert (s.timeout_s, s.on_error, s.on_server_error) == (120.0, "null", "raise")


@pytest.mark.parametrize(("name", "value", "message"), [
    ("max_tokens", "eight", r"relserve.max_tokens must be a whole number, got 'eight'"),
    ("max_tokens", 2.5, r"must be a whole number, got 2.5"),
    ("temperature", "nan", r"must be a finite number, got 'nan'"),
    ("cache", "maybe", r"must be a boolean \(on or off\), got 'maybe'"),
    ("on_error", "sometimes", r"must be 'null' or 'raise', got 'sometimes'"),
    ("examples", "[1,", r"must be JSON"),
    # relserve's own rule for the cascade (relserve.validation.cascade), its range and its off
    ("cascade", "0.3", r"^relserve.cascade must be an agreement target between 0.5 and 0.999 .*, or 0 for off; got 0.3$"),
    ("cascade", "abc", r"^relserve.cascade must be an agreement target between 0.5 and 0.999 .*, or 0 for off; got 'abc'$"),
    ("cascade", "1", r"^relserve.cascade must be an agreement target .*; got 1.0$"),
])
def test_a_bad_value_names_the_setting_and_the_expected_form(name, value, message):
    with pytest.raises(PgError, match=message):
        typed(name, value, f"relserve.{name}")


def test_a_renamed_value_says_what_it_is_now():
    with pytest.raises(PgError) as e:
        typed("on_error", "fail", "relserve.on_error")
    assert e.value.hint == "'fail' is now 'raise' (a failed row fails the statement)"


def test_call_options_come_from_the_settings_overridden_by_the_call():
    s = Settings({"max_tokens": 8, "on_error": "raise", "cache": False})
    r = call_request("llm_classify_query", s, "classify", ["a", "b"], {"max_tokens": "3", "on_error": "null"})
    assert r.options == {"function": "classify", "labels": ["a", "b"], "max_tokens": 3, "cache": False, "on_error": "null"}
    assert (r.on_error, r.on_server_error, r.timeout_s) == ("null", "raise", 120.0)
    with pytest.raises(PgError, match=r"llm_map_query: unknown option\(s\) max_token; known options: timeout, "):
        call_request("llm_map_query", s, "map", None, {"max_token": 3})
    with pytest.raises(PgError, match=r"llm_extract: the JSON schema is not valid JSON"):
        call_request("llm_extract", s, "extract", "{", None)


def test_a_label_option_of_a_call_without_labels_is_refused_and_a_sessions_is_not_sent():
    s = Settings({"max_tokens": 8, "method": "score", "cascade": 0.9})
    assert call_request("llm_map", s, "map").options == {"function": "map", "max_tokens": 8, "on_error": "null"}
    assert call_request("llm_filter", s, "filter").options == {
        "function": "filter", "max_tokens": 8, "method": "score", "cascade": 0.9, "on_error": "null"}
    with pytest.raises(PgError) as e:
        call_request("llm_map_query", s, "map", None, {"prompt_shape": "completion"})
    assert (e.value.message, e.value.sqlstate) == (
        "llm_map_query: option prompt_shape applies to llm_filter and llm_classify (how a request that scores the "
        "labels is laid out), not to llm_map", "22023")
    with pytest.raises(PgError, match=r"^llm_extract_query: option label_plan applies to llm_filter and "
                                      r"llm_classify \(what the call does with its label plan\), not to llm_extract$"):
        call_request("llm_extract_query", s, "extract", {"type": "object"}, {"label_plan": "refresh"})


def test_a_key_is_sent_only_to_the_server_it_was_stored_for():
    rows = [{"api_key": "k1", "url": "http://a:1"}, {"api_key": "k2", "url": "http://b:2/"}]
    assert key_for(rows, "http://b:2") == "k2"
    assert key_for([], "http://a:1") == ""
    with pytest.raises(PgError, match=r"stored for http://a:1, not for the configured server http://c:3") as e:
        key_for(rows[:1], "http://c:3")
    assert e.value.sqlstate == "28000"


def test_a_refused_setting_set_before_the_library_loaded_is_an_error():
    refused({"url": "", "python_path": None})
    with pytest.raises(PgError, match=r"relserve.url is not a setting") as e:
        refused({"url": "http://evil:1/"})
    assert e.value.sqlstate == "42501"


def test_the_source_query_is_wrapped_so_a_trailing_comment_cannot_escape():
    assert as_json_rows_sql("SELECT 1 AS a; ") == "SELECT pg_catalog.row_to_json(q)::pg_catalog.text AS row FROM (\nSELECT 1 AS a\n) AS q"
    assert as_json_rows_sql("SELECT 1 -- note").endswith("-- note\n) AS q")
    with pytest.raises(PgError, match="the source query is empty"):
        as_json_rows_sql(" ; ")


class FakePlpy:
    """Just enough of plpy for scan_poll: warnings are recorded."""

    class SPIError(Exception):
        pass

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def test_scan_poll_flattens_events_for_the_c_side(monkeypatch):
    from relserve.postgres import foreign_scan
    from relserve.postgres.answers import Accepted, Answer, Broken, Finished
    from relserve.results import RowResult

    class Stream:
        def __init__(self, events):
            self.events, self.ended = events, False

        def poll(self, wait_s):
            out, self.events = self.events, []
            return out

        def cancel(self):
            return None

    request = call_request("x", Settings(), "filter")
    events = [Accepted("rq1", 2), Answer(RowResult(1, value=True)), Answer(RowResult(0, error="too long")),
              Finished("done", {"rows": 2, "engine_rows": 1}, None)]
    h = foreign_scan.register(foreign_scan.Scan("relserve_fdw (filter)", request, Stream(events), 2))
    assert foreign_scan.scan_poll(FakePlpy(), h, 0.1) == [
        "accepted", "rq1", "2", None,
        "row", "1", "true", None,
        "row", "0", None, "too long",
        "stat", "rows", "2", None, "stat", "engine_rows", "1", None,
        "done", None, None, None,
    ]
    # a server that cannot be reached: the error with its SQLSTATE and hint, or NULL rows when asked
    foreign_scan.scan_close(FakePlpy(), h)
    h = foreign_scan.register(foreign_scan.Scan("relserve_fdw (map)", request, Stream([Broken(0, "down")]), 2))
    assert foreign_scan.scan_poll(FakePlpy(), h, 0.1)[:3] == ["error", "08001", "relserve_fdw (map): down"]
    foreign_scan.scan_close(FakePlpy(), h)
    lenient = call_request("x", Settings({"on_server_error": "null"}), "map")
    h = foreign_scan.register(foreign_scan.Scan("relserve_fdw (map)", lenient, Stream([Broken(0, "down")]), 2))
    plpy = FakePlpy()
    assert foreign_scan.scan_poll(plpy, h, 0.1) == ["row", "0", None, "down", "row", "1", None, "down", "done", None, None, None]
    assert plpy.warnings == ["relserve_fdw (map): relserve server error, NULL returned for every row: down"]
    assert foreign_scan.scan_poll(plpy, "nope", 0.1)[:2] == ["error", "XX000"]
    foreign_scan.scan_close(plpy, h)


def test_operator_options_take_only_what_the_operator_takes():
    from relserve.postgres.operators import REDUCE_OPTIONS, TOPK_OPTIONS, _options, _state

    s = Settings({"max_tokens": 8, "on_error": "raise", "cache": False, "reorder_fields": True})
    # settings the operator does not take (cache, reorder_fields) are left out, not errors
    assert _options("llm_reduce", s, REDUCE_OPTIONS) == {"max_tokens": 8, "on_error": "raise"}
    assert _options("llm_reduce_query", s, REDUCE_OPTIONS, {"max_tokens": "16", "context_tokens": 300}) == {
        "max_tokens": 16, "on_error": "raise"}
    with pytest.raises(PgError, match=r"^llm_reduce_query: unknown option\(s\) colour"):
        _options("llm_reduce_query", s, REDUCE_OPTIONS, {"colour": 1})
    with pytest.raises(PgError, match=r"^llm_reduce_query takes no option\(s\) examples"):
        _options("llm_reduce_query", s, REDUCE_OPTIONS, {"examples": []})
    with pytest.raises(PgError, match=r"llm_reduce_query: option max_tokens must be a whole number"):
        _options("llm_reduce_query", s, REDUCE_OPTIONS, {"max_tokens": "many"})
    assert "temperature" not in TOPK_OPTIONS
    # the aggregates' state: the template (and k) first, then the non-NULL values
    assert _state("llm_topk", ["{x}", "2", "a", None, "b"], 2) == (["{x}", "2"], ["a", "b"])
    assert _state("llm_reduce", None, 1) is None


def test_python_path_is_site_packages_for_an_install_there_and_a_folder_of_its_own_first(monkeypatch, tmp_path):
    import types

    from relserve.postgres import python_path as pp

    site = pp.site_packages()
    assert pp.python_path().endswith(str(site[-1]))
    # relserve installed in site-packages itself (a non-editable install): nothing more
    monkeypatch.setattr(pp, "relserve", types.SimpleNamespace(__file__=str(site[0] / "relserve" / "__init__.py")))
    assert pp.installed_from() is None and pp.python_path() == ":".join(map(str, site))
    # relserve imported from a folder of its own (pip install --target, on PYTHONPATH): that folder first
    (tmp_path / "relserve").mkdir()
    monkeypatch.setattr(pp, "relserve", types.SimpleNamespace(__file__=str(tmp_path / "relserve" / "__init__.py")))
    assert pp.installed_from() == tmp_path.resolve()
    assert pp.python_path() == ":".join(map(str, [tmp_path.resolve(), *site]))


def test_label_plan_is_an_option_of_one_call_and_never_a_setting():
    from relserve.postgres.settings import PER_CALL_NAMES

    assert "label_plan" in PER_CALL_NAMES and "label_plan" not in SETTING_NAMES
    s = Settings({"max_tokens": 8})
    # sent as DuckDB sends it: the action, and nothing for 'auto' (the default)
    assert call_request("llm_filter_query", s, "filter", None, {"label_plan": "refresh"}).options == {
        "function": "filter", "max_tokens": 8, "label_plan": "refresh", "on_error": "null"}
    assert call_request("llm_filter_query", s, "filter", None, {"label_plan": "auto"}).options == {
        "function": "filter", "max_tokens": 8, "on_error": "null"}
    with pytest.raises(PgError) as e:
        call_request("llm_classify_query", s, "classify", ["a", "b"], {"label_plan": "Refresh"})
    assert (e.value.message, e.value.sqlstate) == (
        "llm_classify_query: option label_plan must be one of auto, refresh, pin, unpin, got 'Refresh'", "22023")
    with pytest.raises(PgError, match=r"^llm_filter_query: option label_plan must be text, got \['pin'\]$"):
        call_request("llm_filter_query", s, "filter", None, {"label_plan": ["pin"]})


class RefusingPlpy:
    """plpy's ``error``: the message, SQLSTATE and hint, raised."""

    class Error(Exception):
        pass

    def error(self, message: str, sqlstate: str | None = None, hint: str | None = None) -> None:
        raise self.Error(message, sqlstate, hint)


def test_the_label_plan_functions_ask_the_server_with_the_roles_client(monkeypatch):
    from relserve.client import ServerError
    from relserve.postgres import backend
    from relserve.postgres import plans as lp

    listed = {"function": "llm_filter", "template": "Is {r} good?", "labels": ["yes", "no"], "model": "m",
              "pinned": True, "created": 0.5, "id": "0123456789abcdef", "plan": "method prior, ...",
              "detail": {"method": "prior", "sample": 3}}
    asked: list[tuple] = []

    class Client:
        def label_plans(self, template):
            asked.append(("list", template))
            return [listed]

        def forget_label_plans(self, template, *, pinned):
            asked.append(("forget", template, pinned))
            return 2

        def pin_label_plans(self, template, *, unpin):
            asked.append(("pin", template, unpin))
            if template == "down":
                raise ServerError(401, "unknown API key")
            return 1

    monkeypatch.setattr(backend, "settings", lambda plpy: Settings({"timeout": 5.0}))
    monkeypatch.setattr(backend, "client", lambda plpy, timeout_s: Client())
    plpy = RefusingPlpy()
    assert lp.label_plans(plpy, None) == [{
        "function": "llm_filter", "template": "Is {r} good?", "labels": ["yes", "no"], "model": "m", "pinned": True,
        "created": "1970-01-01T00:00:00.500000+00:00", "id": "0123456789abcdef", "plan": "method prior, ...",
        "detail": '{"method": "prior", "sample": 3}'}]
    assert lp.forget_label_plans(plpy, "Is {r} good?", True) == 2
    assert lp.pin_label_plans(plpy, "Is {r} good?", False) == 1
    assert asked == [("list", None), ("forget", "Is {r} good?", True), ("pin", "Is {r} good?", False)]
    # NULL arguments and an empty template (which the endpoint would read as every plan) send nothing
    for call, message in [(lambda: lp.pin_label_plans(plpy, None, False), "relserve.pin_label_plans: the template is NULL"),
                          (lambda: lp.pin_label_plans(plpy, "x", None), "relserve.pin_label_plans: the unpin is NULL"),
                          (lambda: lp.forget_label_plans(plpy, "x", None), "relserve.forget_label_plans: the pinned is NULL"),
                          (lambda: lp.forget_label_plans(plpy, " ", False),
                           "relserve.forget_label_plans: the template is empty (NULL: every plan of the role's tenant)")]:
        with pytest.raises(RefusingPlpy.Error) as e:
            call()
        assert e.value.args[:2] == (message, "22023")
    assert len(asked) == 3
    # the server's refusal as the function's error, with the SQLSTATE and hint of every call's
    with pytest.raises(RefusingPlpy.Error) as e:
        lp.pin_label_plans(plpy, "down", False)
    message, sqlstate, hint = e.value.args
    assert (message, sqlstate) == ("relserve.pin_label_plans: unknown API key", "28000")
    assert "relserve.api_keys" in hint
