"""The names an ``llm_options(...)`` call may give, checked in the parsed statement before DuckDB
binds it: DuckDB's own error for a name its macro lacks ("does not support the supplied
arguments. You might need to add explicit type casts") names neither the word nor the fix."""

from __future__ import annotations

import difflib

from sqlglot import exp

from relserve.duckdb_ext.script import Script, read_script
from relserve.errors import ConfigError
from relserve.functions import OPTION_NAMES

#: ``block := k`` is the blocked join's (blocked_join.py strips it before DuckDB sees it)
ALLOWED: tuple[str, ...] = (*OPTION_NAMES, "block")


def check_option_names(script: Script | str) -> None:
    """A ConfigError naming the first name an ``llm_options(...)`` of ``query`` gives that is no
    option (with the nearest option when one is close), and the options there are."""
    for tree in (read_script(script) if isinstance(script, str) else script).trees:
        for call in tree.find_all(exp.Anonymous):
            if str(call.name).lower() != "llm_options":
                continue
            for arg in call.expressions:
                if isinstance(arg, exp.PropertyEQ) and arg.this.name.lower() not in ALLOWED:
                    raise ConfigError(_unknown(arg.this.name))


def _unknown(name: str) -> str:
    near = difflib.get_close_matches(name.lower(), ALLOWED, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return f"llm_options: unknown option {name!r}{hint}; known options: {', '.join(ALLOWED)}"
