"""llm_extract's answers are checked against the call's schema with a validator made once per
schema (issue 65: jsonschema.validate checked the schema itself against its meta-schema again for
every row, most of an extract row's cost), naming the error jsonschema.validate names."""

from __future__ import annotations

import json

import jsonschema
import pytest

from relserve.errors import RowError
from relserve.functions import make_call

RATING = {"type": "object", "properties": {"rating": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}, "required": ["rating"]}
# the same keywords in another order
RATING_ENUM_FIRST = {"required": ["rating"], "properties": {"rating": {"enum": [1, 2, 3, 4, 5], "type": "integer"}}, "type": "object"}


def expected(value, schema) -> str | None:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return e.message
    return None


@pytest.mark.parametrize("schema", [RATING, RATING_ENUM_FIRST])
@pytest.mark.parametrize("value", [{"rating": 3}, {"rating": 9}, {}, {"rating": "x"}, [1], {"rating": 2.5}])
def test_an_extract_answer_fails_as_jsonschema_validate_says(schema, value):
    call = make_call("llm_extract", "Review: {r}", json_schema=schema)
    # the schema as the call keeps it (canonical: its keys sorted), which rows were checked against
    why = expected(value, call.json_schema)
    if why is None:
        assert call.convert(json.dumps(value)) == json.dumps(value)
    else:
        with pytest.raises(RowError) as e:
            call.convert(json.dumps(value))
        assert str(e.value) == f"llm_extract answer does not match the schema: {why}"


def test_the_schema_is_not_checked_again_per_row(monkeypatch):
    call = make_call("llm_extract", "Review: {r}", json_schema=RATING)
    checks = []
    cls = jsonschema.validators.validator_for(RATING)
    real = cls.check_schema.__func__
    monkeypatch.setattr(cls, "check_schema", classmethod(lambda c, s, *a, **k: checks.append(s) or real(c, s, *a, **k)))
    for n in range(1, 6):
        assert call.convert(json.dumps({"rating": n})) == json.dumps({"rating": n})
    assert checks == []
