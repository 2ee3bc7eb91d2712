"""A DuckDB script read once (issue 65): tokenized and parsed by sqlglot one time, its statements
split at top-level semicolons, each with its tree and tokens. The option check
(``option_names.py``), the routing (``routing.py``) and the call sites (``statement.py``) all
read this, where each used to parse the script again (three parses per script).

sqlglot's positions (a node's ``meta``, a token's ``start``) stay the script's; ``offset`` says
where a statement's text starts in it."""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from relserve.duckdb_ext.quiet import quiet_sqlglot


@dataclass(frozen=True)
class ScriptStatement:
    """One statement of a script."""

    text: str
    #: where ``text`` starts in the script (sqlglot's positions are the script's)
    offset: int
    #: None: sqlglot cannot parse it (DuckDB runs it and says what is wrong, if anything)
    tree: exp.Expression | None
    tokens: tuple[Token, ...]


@dataclass(frozen=True)
class Script:
    text: str
    statements: tuple[ScriptStatement, ...]
    #: seconds sqlglot took to tokenize and parse the script
    read_s: float
    #: calls of sqlglot's parser: 1, or 1 + one per statement when the script as a whole fails to
    #: parse (each statement then parsed alone, so a bad one does not hide the others' calls)
    parses: int

    @property
    def trees(self) -> list[exp.Expression]:
        """The statements sqlglot parsed; one it cannot parse is left out."""
        return [s.tree for s in self.statements if s.tree is not None]


def read_script(query: str) -> Script:
    """Tokenize ``query`` once, split it at top-level semicolons (blank statements dropped) and
    parse its statements in one call of sqlglot's parser."""
    t0 = time.perf_counter()
    dialect = sqlglot.Dialect.get_or_raise("duckdb")
    try:
        tokens = dialect.tokenize(query)
    except Exception:
        return Script(query, (ScriptStatement(query, 0, None, ()),), time.perf_counter() - t0, 0)
    parts: list[tuple[str, int, list[Token]]] = []
    start, chunk = 0, []
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            parts.append((query[start : tok.start], start, chunk))
            start, chunk = tok.end + 1, []
        else:
            chunk.append(tok)
    parts.append((query[start:], start, chunk))
    parts = [p for p in parts if p[0].strip()]
    trees, parses = _parse(dialect, query, [chunk for _, _, chunk in parts])
    statements = tuple(ScriptStatement(text, offset, tree, tuple(chunk))
                       for (text, offset, chunk), tree in zip(parts, trees))
    return Script(query, statements, time.perf_counter() - t0, parses)


def _parse(dialect: sqlglot.Dialect, query: str, chunks: list[list[Token]]) -> tuple[list[exp.Expression | None], int]:
    """Each chunk's tree (None: no tokens, or it does not parse) and the parser calls made. The
    chunks go to the parser joined by plain semicolons (a semicolon carrying a comment would make
    a statement of its own there), so its trees are the chunks' one for one."""
    joined: list[Token] = []
    parsed = [c for c in chunks if c]
    for i, chunk in enumerate(parsed):
        if i:
            last = chunk[0]
            joined.append(Token(TokenType.SEMICOLON, ";", last.line, last.col, last.start, last.start))
        joined.extend(chunk)
    trees: list[exp.Expression | None] | None = None
    parses = 0
    if joined:
        parses = 1
        try:
            with quiet_sqlglot():
                got = dialect.parser().parse(joined, query)
            if len(got) == len(parsed):
                trees = got
        except Exception:
            pass
    if trees is None and joined:
        trees = []
        for chunk in parsed:
            parses += 1
            try:
                with quiet_sqlglot():
                    trees.append(dialect.parser().parse(chunk, query)[0])
            except Exception:
                trees.append(None)
    out: list[exp.Expression | None] = []
    it = iter(trees or [])
    for chunk in chunks:
        out.append(next(it) if chunk else None)
    return out, parses
