"""Find the LLM call sites of a SQL statement and which of them must wait for which (sqlglot).

A call site is one ``llm_*(...)`` in the text. Site B waits for site A when A's answers can change
which rows reach B or what B's arguments are:
* A is nested in B's arguments;
* A sits in a SELECT whose output flows into B's (a CTE, a derived table, and what those read);
* A filters or groups rows in B's own SELECT before B is evaluated (JOIN ... ON, WHERE, GROUP BY,
  HAVING, QUALIFY; filters in one clause apply in the order written), or B sits in a subquery
  evaluated per row of A's SELECT;
* B names the column alias that A's result gets in the same SELECT.
Missing a dependency never gives wrong answers (the statement runs until no site has unknown
rows); it only costs LLM calls on rows a filter would have removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from relserve.duckdb_ext.quiet import quiet_sqlglot
from relserve.duckdb_ext.script import ScriptStatement, read_script
from relserve.functions import FUNCTIONS, LLMFunction

__all__ = ["CallSite", "Statement", "analyze", "quiet_sqlglot", "split_statements", "statement_of", "within"]

_PHASE = {"joins": 0, "where": 1, "group": 2, "having": 3, "qualify": 4, "expressions": 5, "order": 6}
_ROW_SHAPING = {"joins", "where", "group", "having", "qualify"}
# sqlglot renamed some args over versions (from -> from_, with -> with_); accept both
_SOURCE_CLAUSES = ("from", "from_", "joins", "with", "with_", "laterals")
#: arguments DuckDB may not count as one positional argument each: an expansion to several
#: (``*COLUMNS(*)``) or a named one (``x := 1``); a sqlglot without one of these classes parses
#: no such thing
_NOT_COUNTED = tuple(getattr(exp, name) for name in ("Star", "Columns", "PropertyEQ", "Kwarg") if hasattr(exp, name))


@dataclass
class CallSite:
    index: int
    function: LLMFunction
    node: exp.Anonymous = field(repr=False)
    #: span of the function's name in the statement text (end exclusive)
    name_start: int
    name_end: int
    #: the call's SQL text, for EXPLAIN and error messages
    text: str
    depends_on: frozenset[int] = frozenset()

    @property
    def arity(self) -> int | None:
        """How many arguments DuckDB passes the call (None: not known before DuckDB binds the
        statement, as with ``*COLUMNS(*)``)."""
        args = self.node.expressions
        return None if any(isinstance(a, _NOT_COUNTED) for a in args) else len(args)


@dataclass
class Statement:
    text: str
    tree: exp.Expression | None
    sites: list[CallSite]
    #: a statement that changes data (CREATE TABLE AS, INSERT, UPDATE, DELETE, COPY) runs once,
    #: so its rows are collected with a read-only query over the same rows
    writes: bool
    #: the read-only query for collection passes, or None when the statement itself is one
    read_query: exp.Expression | None = None
    #: why the statement is not planned (sites in a statement kind that is not executed now)
    unplanned_reason: str | None = None
    #: a query that needs only its first rows: ``LIMIT k`` over a SELECT whose rows come out as
    #: they pass its WHERE (no ORDER BY, grouping, DISTINCT or window), every llm filter in that
    #: WHERE: the k rows it returns (None: every row)
    rows_needed: int | None = None
    #: the sites the ``LIMIT`` stops early: the llm filters of that WHERE
    limit_sites: frozenset[int] = frozenset()
    #: ``SELECT EXISTS (subquery)``: the subquery, whose first row passing its llm filters
    #: decides the statement (``rows_needed`` is 1 of its rows, not of the statement's)
    exists_query: exp.Select | None = None
    #: llm filters AND-ed in one WHERE, in the order written: the rows that pass them all do not
    #: depend on the order they run in, so the planner runs them cheapest first (``planned.py``)
    conjunct_groups: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def planned(self) -> bool:
        return bool(self.sites) and self.unplanned_reason is None

    def with_site_names(self, names: list[str], placed: Mapping[int, int] | None = None) -> str:
        """The statement's own text with each site's function renamed (nothing else changes);
        ``placed``: site -> the site whose call stands in its place (AND-ed llm filters of one
        WHERE put in the order they run in: DuckDB evaluates the terms of an AND in the order
        written, each on the rows the ones before it kept)."""
        if placed:
            return self._reordered(names, placed)
        out = []
        pos = 0
        for site in sorted(self.sites, key=lambda s: s.name_start):
            out.append(self.text[pos : site.name_start])
            out.append(names[site.index])
            pos = site.name_end
        out.append(self.text[pos:])
        return "".join(out)

    def _reordered(self, names: list[str], placed: Mapping[int, int]) -> str:
        def call_text(site: CallSite) -> str:
            return names[site.index] + site.text[site.name_end - site.name_start :]

        out = []
        pos = 0
        for site in sorted(self.sites, key=lambda s: s.name_start):
            if site.name_start < pos:
                continue  # inside a moved call (never: only calls with no site inside are moved)
            out.append(self.text[pos : site.name_start])
            if site.index in placed:
                out.append(call_text(self.sites[placed[site.index]]))
                pos = site.name_start + len(site.text)
            else:
                out.append(names[site.index])
                pos = site.name_end
        out.append(self.text[pos:])
        return "".join(out)

    @property
    def stops_at(self) -> str:
        """What a stopped relQuery had its rows for (EXPLAIN ANALYZE's words)."""
        return "the EXISTS had its row" if self.exists_query is not None else "the LIMIT had its rows"

    def limit_check_sql(self, names: list[str], placed: Mapping[int, int] | None = None) -> str:
        """SQL whose rows count towards ``rows_needed``: the statement's own rows, or those of
        its EXISTS subquery (at most one)."""
        if self.exists_query is None:
            return self.collection_sql(names, placed)
        return self._tree_sql(self.exists_query, names, limit=1)

    def collection_sql(self, names: list[str], placed: Mapping[int, int] | None = None) -> str:
        """SQL that evaluates every site over the statement's rows without changing any data."""
        if self.read_query is None:
            return self.with_site_names(names, placed)
        return self._tree_sql(self.read_query, names)

    def _tree_sql(self, tree: exp.Expression, names: list[str], *, limit: int | None = None) -> str:
        """``tree``, a part of the statement's tree, as SQL with each site's function renamed (and
        ``limit`` added, on a copy); the statement's tree is left as it was."""
        saved = [(s.node, s.node.this) for s in self.sites]
        try:
            for s in self.sites:
                s.node.set("this", names[s.index])
            # (the copy is made here, after the renaming, so that it carries the new names)
            return (tree.limit(limit, copy=True) if limit is not None else tree).sql(dialect="duckdb")
        finally:
            for node, name in saved:
                node.set("this", name)


def split_statements(sql: str) -> list[str]:
    """Statement texts of a script, split at top-level semicolons."""
    try:
        tokens = sqlglot.Dialect.get_or_raise("duckdb").tokenize(sql)
    except Exception:
        return [sql]
    parts = []
    start = 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            parts.append(sql[start : tok.start])
            start = tok.end + 1
    parts.append(sql[start:])
    return [p for p in parts if p.strip()]


def analyze(text: str) -> Statement:
    """The call sites of one statement's text (read here: a script's statements are read once
    by ``script.read_script`` and go to ``statement_of``)."""
    script = read_script(text)
    if len(script.statements) != 1:
        return Statement(text, None, [], False, unplanned_reason="sqlglot cannot parse it")
    return statement_of(script.statements[0])


def statement_of(parsed: ScriptStatement) -> Statement:
    """The call sites of a statement sqlglot has read, and which wait for which."""
    text, tree, shift = parsed.text, parsed.tree, parsed.offset
    if tree is None:
        return Statement(text, None, [], False, unplanned_reason="sqlglot cannot parse it")
    call_ends = {start - shift: end - shift for start, end in _call_ends(parsed.tokens).items()}
    sites: list[CallSite] = []
    nodes = [n for n in tree.find_all(exp.Anonymous) if str(n.name).lower() in FUNCTIONS and "start" in n.meta]
    for node in sorted(nodes, key=lambda n: n.meta["start"]):
        # sqlglot's positions are the script's; the sites' are the statement's
        start, end = node.meta["start"] - shift, node.meta["end"] + 1 - shift
        if text[start:end].lower() != str(node.name).lower():
            return Statement(text, tree, [], False, unplanned_reason="cannot locate a call in the text")
        call_end = call_ends.get(start, end)
        sites.append(CallSite(len(sites), FUNCTIONS[str(node.name).lower()], node, start, end, text[start:call_end]))
    statement = Statement(text, tree, sites, writes=False)
    if not sites:
        return statement
    _classify(statement)
    if statement.unplanned_reason is None:
        _set_dependencies(statement)
        _set_limit(statement)
        _set_conjunct_groups(statement)
    return statement


def _set_conjunct_groups(st: Statement) -> None:
    """``conjunct_groups``: the llm filters that are AND-ed terms of one WHERE, of two or more."""
    groups: dict[int, list[int]] = {}
    for site in st.sites:
        if site.function.kind != "filter":
            continue
        scope = _scope_of(site.node)
        where = scope.args.get("where")
        if where is not None and _clause_of(site.node, scope) == "where" and _conjunct(site.node, where.this):
            groups.setdefault(id(scope), []).append(site.index)
    # a filter with another site inside its call cannot be moved in the text
    movable = {s.index for s in st.sites
               if not any(o is not s and s.name_start < o.name_start < s.name_start + len(s.text) for o in st.sites)}
    st.conjunct_groups = [tuple(g) for g in groups.values() if len(g) > 1 and set(g) <= movable]


def _set_limit(st: Statement) -> None:
    """``rows_needed`` and ``limit_sites`` of a query whose first passing rows are its answer
    (see ``Statement.rows_needed``): any k rows that pass the WHERE are as right as any other k,
    so a filter's rows can be answered a few at a time until k pass."""
    tree = st.tree
    if st.writes or not isinstance(tree, exp.Select):
        return
    if _set_exists(st, tree):
        return
    limit = tree.args.get("limit")
    count = limit.expression if isinstance(limit, exp.Limit) else None
    if not isinstance(count, exp.Literal) or not count.is_int:
        return
    offset = tree.args.get("offset")
    skip = offset.expression if isinstance(offset, exp.Offset) else None
    if skip is not None and not (isinstance(skip, exp.Literal) and skip.is_int):
        return
    if not _rows_come_out_as_they_pass(tree):
        return
    sites = _where_filters(st, tree, clauses=("where", "expressions"))
    if sites:
        # (the query returns at most k rows: it returns k once k + OFFSET rows pass)
        st.rows_needed = int(count.this)
        st.limit_sites = frozenset(sites)


def _set_exists(st: Statement, tree: exp.Select) -> bool:
    """``SELECT EXISTS (SELECT ... FROM t WHERE llm_filter(...))`` with every site an llm
    filter AND-ed in that subquery's WHERE: its first row that passes decides the statement.
    Only with no FROM, WITH or WHERE of its own, so the subquery cannot reach an outer row
    (uncorrelated) and runs alone as the check."""
    if any(tree.args.get(k) is not None for k in ("from", "with", "where", "joins")):
        return False
    exists = {id(site.node.find_ancestor(exp.Exists)): site.node.find_ancestor(exp.Exists) for site in st.sites}
    if len(exists) != 1 or None in exists.values():
        return False
    (node,) = exists.values()
    sub = node.this
    if not isinstance(sub, exp.Select) or not _rows_come_out_as_they_pass(sub) or sub.find(exp.Exists) is not None:
        return False
    limit = sub.args.get("limit")
    if limit is not None and not (isinstance(limit.expression, exp.Literal) and limit.expression.is_int
                                  and int(limit.expression.this) > 0) or sub.args.get("offset") is not None:
        return False
    sites = _where_filters(st, sub, clauses=("where",))
    if not sites:
        return False
    st.rows_needed, st.limit_sites, st.exists_query = 1, frozenset(sites), sub
    return True


def _rows_come_out_as_they_pass(tree: exp.Select) -> bool:
    """Whether a SELECT's rows come out as they pass its WHERE: no ORDER BY, grouping, DISTINCT,
    aggregate or window."""
    return not (tree.args.get("order") is not None or tree.args.get("group") is not None
                or tree.args.get("distinct") is not None or tree.args.get("having") is not None
                or tree.args.get("qualify") is not None
                or any(isinstance(e, (exp.AggFunc, exp.Window)) for p in tree.expressions for e in p.walk()))


def _where_filters(st: Statement, tree: exp.Select, *, clauses: tuple[str, ...]) -> set[int]:
    """The sites that are llm filters AND-ed in ``tree``'s WHERE (empty: a site elsewhere than
    ``clauses`` of ``tree``, or a WHERE call that is not such a filter)."""
    sites = set()
    for site in st.sites:
        scope = _scope_of(site.node)
        clause = _clause_of(site.node, scope)
        if scope is not tree or clause not in clauses:
            return set()  # a call in a subquery, a join or a CTE: every row (not stopped early)
        if clause == "where":
            if site.function.kind != "filter" or not _conjunct(site.node, tree.args["where"].this):
                return set()
            sites.add(site.index)
    return sites


def _conjunct(node: exp.Expression, where: exp.Expression) -> bool:
    """Whether ``node`` is one of the AND-ed terms of ``where`` (so a row it rejects is out)."""
    terms = list(where.flatten()) if isinstance(where, exp.And) else [where]
    return any(term is node for term in terms)


def _call_ends(tokens) -> dict[int, int]:
    """Start of a function name -> end of its closing parenthesis (exclusive)."""
    ends = {}
    for i, tok in enumerate(tokens[:-1]):
        if tokens[i + 1].token_type != TokenType.L_PAREN:
            continue
        depth = 0
        for later in tokens[i + 1 :]:
            if later.token_type == TokenType.L_PAREN:
                depth += 1
            elif later.token_type == TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    ends[tok.start] = later.end + 1
                    break
    return ends


def _classify(st: Statement) -> None:
    """Decide whether the statement reads or writes, and find the query over its rows."""
    tree = st.tree
    if isinstance(tree, exp.Query):
        return
    st.writes = True
    if isinstance(tree, exp.Create) and isinstance(tree.expression, exp.Query) and str(tree.kind).upper() == "TABLE":
        st.read_query = tree.expression
    elif isinstance(tree, exp.Insert) and isinstance(tree.expression, exp.Query):
        st.read_query = tree.expression
    elif isinstance(tree, exp.Insert) and isinstance(tree.expression, exp.Values):
        st.read_query = exp.Select().select(exp.Star(), copy=False).from_(tree.expression, copy=False)
    elif isinstance(tree, exp.Copy) and isinstance(tree.this, exp.Subquery):
        st.read_query = tree.this.this
    elif isinstance(tree, exp.Update):
        st.read_query = _update_query(tree)
    elif isinstance(tree, exp.Delete):
        st.read_query = _delete_query(tree)
    else:
        st.writes = False
        st.unplanned_reason = f"{type(tree).__name__.upper()} statements are not planned (the calls run per chunk)"


def _update_query(tree: exp.Update) -> exp.Expression:
    # SELECT <new values> FROM <table> [, <FROM tables>] WHERE <condition>: the rows UPDATE
    # touches. Built from the statement's own nodes (copy=False), so renaming a site's node
    # renames it in this query too.
    select = exp.Select().select(*[eq.expression for eq in tree.expressions], copy=False)
    select = select.from_(tree.this, copy=False)
    extra = _arg(tree, "from")
    if extra is not None:
        select = select.join(extra.this, join_type="cross", copy=False)
    return _with_where_and_ctes(select, tree)


def _delete_query(tree: exp.Delete) -> exp.Expression:
    select = exp.Select().select(exp.Literal.number(1), copy=False).from_(tree.this, copy=False)
    for table in tree.args.get("using") or []:
        select = select.join(table, join_type="cross", copy=False)
    return _with_where_and_ctes(select, tree)


def _with_where_and_ctes(select: exp.Select, tree: exp.Expression) -> exp.Select:
    where = tree.args.get("where")
    if where is not None:
        select = select.where(where.this, copy=False)
    with_ = _arg(tree, "with")
    if with_ is not None:
        select.set("with_" if "with_" in exp.Select.arg_types else "with", with_)
    return select


def _arg(node: exp.Expression, name: str) -> exp.Expression | None:
    value = node.args.get(name + "_")
    return value if value is not None else node.args.get(name)


# -- dependencies -------------------------------------------------------------------------------


def _scope_of(node: exp.Expression) -> exp.Expression:
    scope = node.find_ancestor(exp.Select)
    return scope if scope is not None else node.root()


def _clause_of(node: exp.Expression, scope: exp.Expression) -> str:
    child = node
    while child.parent is not None and child.parent is not scope:
        child = child.parent
    return child.arg_key or ""


def _cte_bodies(tree: exp.Expression) -> dict[str, list[exp.Expression]]:
    bodies: dict[str, list[exp.Expression]] = {}
    for cte in tree.find_all(exp.CTE):
        bodies.setdefault(cte.alias_or_name.lower(), []).append(cte.this)
    return bodies


def _direct_sources(scope: exp.Expression, ctes: dict[str, list[exp.Expression]]) -> list[exp.Expression]:
    """SELECTs evaluated before ``scope`` whose rows flow into it."""
    out: list[exp.Expression] = []
    for key in _SOURCE_CLAUSES:
        value = scope.args.get(key)
        for part in value if isinstance(value, list) else [value]:
            if part is None:
                continue
            out.extend(part.find_all(exp.Select))
            for table in part.find_all(exp.Table):
                for body in ctes.get(table.name.lower(), []):
                    out.extend(body.find_all(exp.Select))
    return [s for s in out if s is not scope]


def _enclosing(scope: exp.Expression) -> tuple[exp.Expression | None, str]:
    """The SELECT around ``scope`` and whether ``scope`` is its source or a per-row subquery."""
    if scope.parent is None:
        return None, ""
    outer = scope.parent.find_ancestor(exp.Select)
    if outer is None:
        return None, ""
    clause = _clause_of(scope, outer)
    return outer, ("source" if clause in _SOURCE_CLAUSES else "inner")


def _upstream(scope: exp.Expression, ctes: dict[str, list[exp.Expression]]) -> set[int]:
    """ids of every SELECT whose output can reach ``scope``."""
    seen: set[int] = set()
    result: set[int] = set()
    stack = [scope]
    while stack:
        s = stack.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        for src in _direct_sources(s, ctes):
            result.add(id(src))
            stack.append(src)
        outer, relation = _enclosing(s)
        if outer is not None and relation == "inner":
            stack.append(outer)  # a per-row subquery also sees what its outer SELECT reads
    return result


def _alias_of(node: exp.Expression, scope: exp.Expression) -> str | None:
    child = node
    while child.parent is not None and child.parent is not scope:
        child = child.parent
    return child.alias.lower() if isinstance(child, exp.Alias) and child.alias else None


def _is_inner_of(scope: exp.Expression, outer: exp.Expression) -> bool:
    s = scope
    while True:
        up, relation = _enclosing(s)
        if up is None:
            return False
        if up is outer:
            return relation == "inner"
        s = up


def _set_dependencies(st: Statement) -> None:
    ctes = _cte_bodies(st.tree)
    info = []
    for site in st.sites:
        scope = _scope_of(site.node)
        clause = _clause_of(site.node, scope)
        info.append((scope, clause, _upstream(scope, ctes), _alias_of(site.node, scope) if clause == "expressions" else None))
    for b in st.sites:
        scope_b, clause_b, upstream_b, _ = info[b.index]
        columns_b = {c.name.lower() for c in b.node.find_all(exp.Column)}
        deps = set()
        for a in st.sites:
            if a is b:
                continue
            scope_a, clause_a, _, alias_a = info[a.index]
            if within(a.node.parent, b.node) or id(scope_a) in upstream_b:  # a inside b
                deps.add(a.index)
            elif scope_a is scope_b:
                phase_a, phase_b = _PHASE.get(clause_a, 5), _PHASE.get(clause_b, 5)
                if clause_a in _ROW_SHAPING and (
                    phase_a < phase_b or (phase_a == phase_b and a.name_start < b.name_start)
                ):
                    deps.add(a.index)
                elif alias_a is not None and alias_a in columns_b:
                    deps.add(a.index)
            elif clause_a in _ROW_SHAPING and _is_inner_of(scope_b, scope_a):
                deps.add(a.index)
        b.depends_on = frozenset(deps)


def within(node: exp.Expression | None, root: exp.Expression | None) -> bool:
    """Whether ``node`` is ``root`` or lies inside it."""
    while node is not None:
        if node is root:
            return True
        node = node.parent
    return False
