"""Which settings a call inside a SECURITY DEFINER function reads (relserve/postgres/definer.py),
without a database: the rule the real cluster runs in test_postgres_privileges.py, in its corners
(a library that cannot say who chose a value, the definer's defaults' precedence)."""

from __future__ import annotations

from relserve.postgres.definer import as_the_definer_chose, chosen_by_others, definer_defaults
from relserve.postgres.settings import SETTING_NAMES, settings_from_row


def test_outside_a_definer_context_every_value_is_read():
    assert chosen_by_others({"in_definer": False, "chosen_by_others": "system"}, SETTING_NAMES) is None


def test_inside_one_the_values_another_role_chose_are_not_and_an_older_library_counts_them_all():
    row = {"in_definer": True, "chosen_by_others": "system,examples"}
    assert chosen_by_others(row, SETTING_NAMES) == {"system", "examples"}
    assert chosen_by_others({"in_definer": True, "chosen_by_others": ""}, SETTING_NAMES) == frozenset()
    # a library without relserve.chosen_by_others cannot tell: every value is the caller's
    assert chosen_by_others({"in_definer": True, "chosen_by_others": None}, SETTING_NAMES) == set(SETTING_NAMES)


def test_the_definers_defaults_take_the_ignored_values_place_in_postgresqls_order():
    rows = [
        {"for_role": False, "for_database": False, "setting": "relserve.system=every role"},
        {"for_role": False, "for_database": True, "setting": "relserve.system=the database"},
        {"for_role": True, "for_database": False, "setting": "relserve.max_tokens=7"},
        {"for_role": True, "for_database": True, "setting": "relserve.max_tokens=9"},
        {"for_role": False, "for_database": False, "setting": "relserve.examples=[]"},
    ]
    defaults = definer_defaults(rows)
    assert defaults == {"system": "the database", "max_tokens": "9", "examples": "[]"}
    caller = {"system": "the caller's", "max_tokens": "5000", "cache": "off", "temperature": "0.5"}
    row = as_the_definer_chose(caller, frozenset({"system", "max_tokens", "cache"}), defaults)
    # cache falls back to unset (relserve's default); temperature was chosen by the definer and stays
    assert settings_from_row(row).values == {"system": "the database", "max_tokens": 9, "temperature": 0.5}
