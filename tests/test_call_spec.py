"""One call specification for every surface (issue 13): its fields, its result-cache key, the
server's request body mapped onto it, the one on_error vocabulary, the one binding, and
``relserve.configure``. Fast checks without an engine; test_call_spec_engine.py runs the real one."""

from __future__ import annotations

import doctest
import hashlib
import json

import pytest

import relserve
import relserve.binding
import relserve.cpu_features
import relserve.polars
import relserve.settings
from relserve.binding import Binding
from relserve.errors import ConfigError, TemplateError
from relserve.functions import HINT_NAMES, OPTION_NAMES, CallOptions, SchedulingHints, make_call
from relserve.planner import cost
from relserve.planner.cache import cache_key
from relserve.relquery import RelQuery
from relserve.server.schemas import CallBody, CellsRequest, RelQueryRequest
from relserve.template import Template
from relserve.validation import ON_ERROR_VALUES, OnError


def test_the_call_specification_is_immutable_and_hashable():
    call = make_call("llm_map", "Say {x}", max_tokens=4, system="Be brief.")
    with pytest.raises(AttributeError):
        call.options.system = "other"  # type: ignore[misc]
    assert call == make_call("llm_map", "Say {x}", max_tokens=4, system="Be brief.")
    assert len({call, make_call("llm_map", "Say {x}", max_tokens=4, system="Be brief.")}) == 1
    with pytest.raises(TypeError):
        CallOptions(None, 4)  # type: ignore[misc]  # keyword-only: no option by position


def test_the_cache_key_is_what_changes_an_answer_and_nothing_else():
    plain = make_call("llm_map", "Say {x}", max_tokens=4)
    assert plain.sampling_settings() == {"max_tokens": 4, "temperature": 0.0, "choices": None, "json_schema": None}
    with_system = make_call("llm_map", "Say {x}", max_tokens=4, system="Answer in French.")
    assert with_system.sampling_settings() == {**plain.sampling_settings(), "system": "Answer in French."}
    # greedy decoding ignores top_p and seed, and only greedy answers are cached
    sampled = make_call("llm_map", "Say {x}", max_tokens=4, top_p=0.5, seed=7)
    assert sampled.sampling_settings() == plain.sampling_settings()
    # what does not change the answer is not in the key: what a failed row does, scheduling hints
    assert make_call("llm_map", "Say {x}", max_tokens=4, on_error="raise").sampling_settings() == plain.sampling_settings()
    assert "priority" not in OPTION_NAMES and "deadline_s" not in OPTION_NAMES
    assert HINT_NAMES == ("priority", "deadline_s")


def test_the_system_message_key_is_the_one_the_server_used_before():
    # the server keyed a system message as an extra "system" field of the settings (a cache
    # view): the same bytes, so answers cached before are found
    call = make_call("llm_map", "Say {x}", max_tokens=4, system="Answer in French.")
    old_settings = {"max_tokens": 4, "temperature": 0.0, "choices": None, "json_schema": None, "system": "Answer in French."}
    h = hashlib.sha256()
    for part in (b"m", b"\0", json.dumps(old_settings, sort_keys=True, separators=(",", ":")).encode(), b"\0", b"Say a"):
        h.update(part)
    assert cache_key("m", call.sampling_settings(), "Say a") == h.digest()[:16]


def test_the_server_body_maps_onto_the_specification_field_by_field():
    body_fields = set(CallBody.model_fields) | set(RelQueryRequest.model_fields)
    spec_arguments = {"function", "labels", "json_schema"}
    transport = {"template", "rows", "prompts", "cache", "stream", "estimate", "isolated"}
    # every body field is a specification field, a hint, or how the rows travel
    assert body_fields - spec_arguments - transport == (set(OPTION_NAMES) - {"model"}) | set(HINT_NAMES)
    body = RelQueryRequest(
        template="Is {r} good?", rows=[{"r": "x"}], function="llm_filter", max_tokens=3, temperature=0.0, top_p=0.9,
        seed=5, system="Be fair.", method="score", reorder_fields=True, on_error="raise", priority=-2, deadline_s=9.0,
    )
    assert body.call("Is {r} good?") == make_call(
        "llm_filter", "Is {r} good?", max_tokens=3, temperature=0.0, top_p=0.9, seed=5, system="Be fair.",
        method="score", reorder_fields=True, on_error="raise",
    )
    assert body.hints() == SchedulingHints(priority=-2, deadline_s=9.0)
    cells = CellsRequest(cells=[{"id": "A1", "template": "Say {A}", "args": ["a"]}], function="classify", labels=["a", "b"])
    assert cells.call("Say {A}").options.on_error == OnError.NULL


def test_one_on_error_vocabulary_everywhere():
    assert ON_ERROR_VALUES == ("null", "raise")
    for build in (lambda v: CallOptions(on_error=v), lambda v: RelQuery("Say {x}", [{"x": "a"}], on_error=v)):
        assert build("raise").on_error is OnError.RAISE
        with pytest.raises(ConfigError, match=r"^on_error must be 'null' or 'raise', got 'fail'$"):
            build("fail")
    with pytest.raises(ValueError, match=r"on_error\n  Input should be 'null' or 'raise'"):
        RelQueryRequest(prompts=["a"], on_error="fail")


def test_settings_are_checked_once_with_the_same_message_everywhere():
    message = r"^temperature must be a number >= 0, got -1; the largest allowed is 10$"
    with pytest.raises(ConfigError, match=message):
        make_call("llm_map", "Say {x}", temperature=-1)
    with pytest.raises(ConfigError, match=message):
        RelQuery("Say {x}", [{"x": "a"}], temperature=-1)
    with pytest.raises(ConfigError, match=r"^deadline_s must be a positive, finite number of seconds, got 0$"):
        SchedulingHints(deadline_s=0)


def test_binding_by_position_and_by_name():
    b = Binding(Template.parse("Compare {a} with {b} and {a}"), "llm_map")
    assert b.row(args=[1, 2]) == (1, 2)
    assert b.row(values={"b": 2, "a": 1, "c": 3}) == (1, 2)
    assert b.columns(fields={"b": [2], "a": [1]}) == [[1], [2]]
    assert b.rows([{"a": 1, "b": 2}, {"b": 4, "a": 3}]) == [[1, 3], [2, 4]]
    with pytest.raises(TemplateError, match=r"^llm_map: the template has 2 placeholder\(s\) \(\{a\}, \{b\}\) but 3 value\(s\) were given; values fill"):
        b.row(args=[1, 2, 3])
    with pytest.raises(TemplateError, match=r"^llm_map: template names unknown column\(s\) 'b'; available columns: 'a'$"):
        b.row(values={"a": 1})
    with pytest.raises(TemplateError, match=r"^row 1 has no column\(s\) 'b' named in the template$"):
        b.rows([{"a": 1, "b": 2}, {"a": 3}])


def test_relserve_configure_rejects_unknown_keys_and_keeps_what_it_is_not_given():
    before = relserve.settings.current()
    try:
        engine = object()
        relserve.configure(engine=engine, optimize=False)
        relserve.polars.configure(progress=False)  # must not reset the engine
        now = relserve.settings.current()
        assert (now.engine, now.optimize, now.progress) == (engine, False, False)
        relserve.polars.configure(engine=None)
        assert relserve.settings.current().engine is None
        with pytest.raises(ConfigError, match=r"^unknown setting\(s\) engin; known settings: engine, optimize, progress$"):
            relserve.configure(engin=engine)
        with pytest.raises(ConfigError, match=r"^relserve.configure: progress: Input should be a valid boolean"):
            relserve.configure(progress="sometimes")
    finally:
        relserve.configure(**{k: getattr(before, k) for k in type(before).model_fields})


def test_the_planner_estimates_with_the_engines_own_limits():
    from relserve.engine.settings import EngineSettings

    defaults = EngineSettings.model_fields
    assert (cost.DEFAULT_MAX_SEQS, cost.DEFAULT_TOKEN_BUDGET) == (defaults["max_num_seqs"].default, defaults["max_num_batched_tokens"].default)
    assert cost.engine_limits(None) == (256, 1024)


@pytest.mark.parametrize("module", [relserve.binding, relserve.cpu_features, relserve.polars, relserve.settings])
def test_docstring_examples_run(module):
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0
