"""Semantic join in DuckDB SQL, with optional blocking by embedding.

    SELECT r.id, p.id FROM reviews r JOIN products p
      ON llm_filter('Review: {review}\\nProduct: {title}\\nIs the review about the product?',
                    r.text, p.title, llm_options(block := 3))

Under ``relserve.duckdb.sql`` an ``llm_filter`` in ``JOIN ... ON`` is a call site like any other:
the planner's collection pass records every pair the join meets (after the ON clause's other
conditions and anything upstream) and asks them all as ONE relQuery, sorted so that pairs which
share the template's first value (put the left row's there) sit side by side for the prefix cache.

``block := k`` is this module's: the rewrite strips it from ``llm_options`` (DuckDB never sees
it), and the statement runs on the planned path with a session that, for that call only, keeps
each left value's k most similar right values (embedding cosine, ``relserve.operators.blocking``)
among the pairs the join met, asks only those, and answers FALSE for the rest. EXPLAIN says how
many pairs it kept. Which placeholder belongs to which side comes from the column qualifiers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import duckdb

from relserve.duckdb_ext import planned_sql
from relserve.duckdb_ext.connections import session_of
from relserve.duckdb_ext.params import Params
from relserve.duckdb_ext.planned import explain_planned, run_planned
from relserve.duckdb_ext.script import read_script
from relserve.duckdb_ext.statement import analyze, quiet_sqlglot, split_statements, within
from relserve.duckdb_ext.statement_explain import statement_explain
from relserve.errors import ConfigError
from relserve.functions import LLMCall
from relserve.operators.blocking import KeptPairs, keep_met_pairs
from relserve.planner.plan_and_run import CallOutcome

if TYPE_CHECKING:  # sqlglot is imported where it is used: it is slow to import
    from sqlglot import exp

    from relserve.duckdb_ext.session import Session
    from relserve.duckdb_ext.statement import CallSite, Statement
    from relserve.duckdb_ext.statement_explain import SiteExplain, StatementExplain

WHO = "llm_filter in JOIN ... ON"


@dataclass(frozen=True)
class JoinBlock:
    """One blocked join call: which of the call's placeholder values come from which side."""

    #: the llm_filter template (identifies the call among the statement's sites)
    template: str
    k: int
    #: positions in the call's value tuple (placeholders in order of first appearance)
    left: tuple[int, ...]
    right: tuple[int, ...]
    sql: str


@dataclass
class BlockReport:
    """What blocking did for one call, for EXPLAIN and tests."""

    sql: str
    k: int
    pairs_met: int = 0
    pairs_kept: int = 0
    #: pairs dropped because a value was NULL
    null_pairs: int = 0
    left_values: int = 0
    right_values: int = 0
    embed_s: float = 0.0

    def line(self) -> str:
        return (
            f"blocking (k={self.k}): kept {self.pairs_kept} of {self.pairs_met} pairs the join met "
            f"({self.left_values} left values x up to {self.k} of {self.right_values} right values"
            + (f"; {self.null_pairs} pairs with a NULL value dropped" if self.null_pairs else "")
            + f"; embedding {self.embed_s:.1f} s): {self.sql}"
        )

    def add(self, kept: KeptPairs) -> None:
        """Count one batch of pairs (a call may meet its pairs in several batches)."""
        self.pairs_met += kept.pairs_met
        self.pairs_kept += kept.pairs_kept
        self.null_pairs += kept.null_pairs
        self.left_values += kept.left_values
        self.right_values = max(self.right_values, kept.right_values)
        self.embed_s += kept.embed_s


def rewrite(text: str) -> tuple[str, list[JoinBlock]]:
    """The statement without ``block := k`` and the blocked calls it had; clear errors for a
    ``block`` that is not on an ``llm_filter`` in ``JOIN ... ON`` or whose sides are unclear."""
    import sqlglot
    from sqlglot import exp

    try:
        with quiet_sqlglot():
            tree = sqlglot.parse_one(text, dialect="duckdb")
    except Exception:
        return text, []  # DuckDB will say what is wrong with it
    blocks: list[JoinBlock] = []
    for options in _options_calls(tree):
        given = _block_arguments(options)
        if not given:
            continue
        call = options.parent
        if not (isinstance(call, exp.Anonymous) and str(call.name).lower() == "llm_filter"):
            raise ConfigError(
                "llm_options(block := k) is only for llm_filter in JOIN ... ON (the right rows kept per left row); "
                f"found it in {call.sql(dialect='duckdb') if call is not None else options.sql(dialect='duckdb')}"
            )
        k = _block_k(given[-1].expression)
        join = call.find_ancestor(exp.Join)
        if join is None or not within(call, join.args.get("on")):
            raise ConfigError(
                f"llm_options(block := {k}) needs the llm_filter in a JOIN ... ON clause, e.g. "
                "FROM reviews r JOIN products p ON llm_filter('{review} / {title}: same product?', r.text, p.title, "
                "llm_options(block := 3))"
            )
        blocks.append(_sides(call, join, k))
        for a in given:
            a.pop()
    return (tree.sql(dialect="duckdb") if blocks else text), blocks


def asks_blocking(tree: exp.Expression) -> bool:
    """Whether a parsed statement has ``block := k`` in an ``llm_options(...)``."""
    return any(_block_arguments(options) for options in _options_calls(tree))


def _options_calls(tree: exp.Expression) -> list[exp.Anonymous]:
    from sqlglot import exp

    return [n for n in tree.find_all(exp.Anonymous) if str(n.name).lower() == "llm_options"]


def _block_arguments(options: exp.Anonymous) -> list[exp.PropertyEQ]:
    from sqlglot import exp

    return [a for a in options.expressions if isinstance(a, exp.PropertyEQ) and a.this.name.lower() == "block"]


def _block_k(value: exp.Expression) -> int:
    from sqlglot import exp

    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit() and int(value.this) >= 1:
        return int(value.this)
    raise ConfigError(
        f"llm_options(block := ...) takes a positive integer literal (right rows kept per left row), got {value.sql()}"
    )


def _sides(call: exp.Anonymous, join: exp.Join, k: int) -> JoinBlock:
    """Which values come from the joined (right) table and which from the rows before it."""
    from sqlglot import exp

    from relserve.template import Template

    args = list(call.expressions)
    if not args or not isinstance(args[0], exp.Literal) or not args[0].is_string:
        raise ConfigError(f"{WHO} with block: the template must be a string literal, got {call.sql(dialect='duckdb')}")
    template = args[0].this
    values = [a for a in args[1:] if not (isinstance(a, exp.Anonymous) and str(a.name).lower() == "llm_options")]
    columns = Template.parse(template).columns
    if len(values) != len(columns):
        raise ConfigError(
            f"{WHO} with block: pass one value per placeholder ({', '.join(columns)}), each a column of one side; "
            f"got {len(values)} values"
        )
    right_name = join.this.alias_or_name.lower()
    left, right = [], []
    for i, v in enumerate(values):
        tables = {c.table.lower() for c in v.find_all(exp.Column)}
        if not tables or "" in tables:
            raise ConfigError(
                f"{WHO} with block: qualify the columns of value {i + 1} ({v.sql(dialect='duckdb')}) with their "
                f"table, e.g. {right_name}.{columns[i]}, so relserve knows which side of the join it comes from"
            )
        if tables == {right_name}:
            right.append(i)
        elif right_name not in tables:
            left.append(i)
        else:
            raise ConfigError(
                f"{WHO} with block: value {i + 1} ({v.sql(dialect='duckdb')}) mixes both sides of the join; "
                "each value must come from one side"
            )
    if not left or not right:
        side = "right (the joined table)" if not right else "left"
        raise ConfigError(f"{WHO} with block: no value comes from the {side} side, so there is nothing to block on")
    return JoinBlock(template, k, tuple(left), tuple(right), call.sql(dialect="duckdb"))


# -- choosing the pairs -------------------------------------------------------------------------


def keep_pairs(values: Sequence[tuple], block: JoinBlock, report: BlockReport) -> list[int]:
    """Positions in ``values`` of the pairs blocking keeps (``keep_met_pairs``), counted in ``report``."""
    kept = keep_met_pairs(values, block.left, block.right, block.k)
    report.add(kept)
    return kept.positions


class BlockingSession:
    """The connection's session for one statement, except that a blocked join call asks only
    the pairs blocking keeps (the rest answer FALSE). Everything else is the session's own."""

    def __init__(self, session: Session, blocks: Sequence[JoinBlock]) -> None:
        self._session = session
        self._blocks = {b.template: b for b in blocks}
        self.reports: dict[str, BlockReport] = {b.template: BlockReport(b.sql, b.k) for b in blocks}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def _block(self, call: LLMCall) -> JoinBlock | None:
        return self._blocks.get(call.template.source) if call.function.kind == "filter" else None

    def cached(self, call: LLMCall, values: list[tuple]) -> dict:
        # a cached answer of a pair blocking drops must not let that pair through
        return {} if self._block(call) is not None else self._session.cached(call, values)

    def run(self, call: LLMCall, values: list[tuple], *, explain_only: bool = False) -> CallOutcome:
        block = self._block(call)
        if block is None:
            return self._session.run(call, values, explain_only=explain_only)
        kept = keep_pairs(values, block, self.reports[block.template])
        outcome = self._session.run(call, [values[i] for i in kept], explain_only=explain_only)
        answers: list[object] = [False] * len(values)
        errors: list[str | None] = [None] * len(values)
        for i, value, err in zip(kept, outcome.values, outcome.errors):
            answers[i], errors[i] = value, err
        return CallOutcome(answers, errors, outcome.plan, outcome.engine_stats, outcome.explain, outcome.ran)


# -- the surface --------------------------------------------------------------------------------


@dataclass
class JoinExplain:
    """EXPLAIN of a statement with a blocked join: the planner's EXPLAIN (its join site counts
    the pairs blocking kept) plus what blocking did."""

    plan: StatementExplain
    blocks: list[BlockReport] = field(default_factory=list)

    @property
    def sites(self) -> list[SiteExplain]:
        return self.plan.sites

    def to_dict(self) -> dict[str, Any]:
        d = self.plan.to_dict()
        d["blocking"] = [vars(b).copy() for b in self.blocks]
        return d

    def __str__(self) -> str:
        return "\n".join([str(self.plan), *(b.line() for b in self.blocks)])


def _statement(con: duckdb.DuckDBPyConnection, text: str) -> tuple[Session, Statement, list[JoinBlock]]:
    rewritten, blocks = rewrite(text)
    statement = analyze(rewritten)
    if blocks and not statement.planned:
        raise ConfigError(
            f"{WHO} with block: this statement is not planned ({statement.unplanned_reason or 'no LLM call site'}), "
            "so blocking cannot apply"
        )
    templates = [b.template for b in blocks]
    sites = [s for s in statement.sites if s.function.kind == "filter"]
    for t in templates:
        found = [s for s in sites if _template_of(s) == t]
        if len(found) > 1:
            raise ConfigError(
                f"{WHO} with block: the template {t!r} is used by {len(found)} llm_filter calls in this statement; "
                "blocking needs the joined call's template to be its own"
            )
    return session_of(con), statement, blocks


def _template_of(site: CallSite) -> str | None:
    from sqlglot import exp

    first = site.node.expressions[0] if site.node.expressions else None
    return first.this if isinstance(first, exp.Literal) and first.is_string else None


def run_sql(con: duckdb.DuckDBPyConnection, query: str, params: Params = None) -> duckdb.DuckDBPyRelation | None:
    """``relserve.duckdb.sql`` for a script with blocked joins; other statements as usual."""
    texts = split_statements(query)
    if params is not None and len(texts) > 1:
        raise ConfigError("parameters can only be given for a single statement")
    result = None
    for text in texts:
        session, statement, blocks = _statement(con, text)
        if not blocks:
            result = planned_sql.sql(con, read_script(text), params)
            continue
        with session.lock:
            session.failures.clear()
        blocking = BlockingSession(session, blocks)
        result, run = run_planned(con, blocking, statement, params)
        run.blocking = list(blocking.reports.values())
        session.last_run = run
    return result


def explain_sql(con: duckdb.DuckDBPyConnection, query: str, params: Params = None) -> StatementExplain | JoinExplain:
    """What ``run_sql`` would do for one statement: the planner's EXPLAIN over the pairs blocking
    keeps, and the pairs met and kept (the embedding runs; the engine does not)."""
    texts = split_statements(query)
    if len(texts) != 1:
        raise ConfigError(f"explain takes one statement, got {len(texts)}")
    session, statement, blocks = _statement(con, texts[0])
    if not blocks:
        return planned_sql.explain(con, read_script(texts[0]), params)
    blocking = BlockingSession(session, blocks)
    run = explain_planned(con, blocking, statement, params)
    return JoinExplain(statement_explain(run), list(blocking.reports.values()))
