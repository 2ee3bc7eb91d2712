"""What EXPLAIN says of a planned statement: its call sites, their stages and plans, the
statement's estimate and, with EXPLAIN ANALYZE, what running it took."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from relserve.duckdb_ext.estimates import Measured, site_stages
from relserve.duckdb_ext.planned import StatementRun
from relserve.duckdb_ext.trace import StatementTrace
from relserve.estimate.statement import StatementEstimate
from relserve.planner.explain import Analyzed, Explain


@dataclass
class SiteExplain:
    index: int
    call: str
    depends_on: list[int]
    stage: int
    #: rows the collection pass sent to this site (an upper bound when it depends on other sites)
    rows_seen: int
    plans: list[Explain] = field(default_factory=list)
    #: EXPLAIN ANALYZE: what the site's relQueries did when the statement ran
    analyzed: list[Analyzed] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["plans"] = [p.to_dict() for p in self.plans]
        d["analyzed"] = [a.to_dict() for a in self.analyzed]
        return d


@dataclass
class StatementExplain:
    statement: str
    sites: list[SiteExplain]
    #: why the statement is not planned, if it is not
    unplanned_reason: str | None
    #: reading the rows (one collection pass)
    collect_s: float
    #: the whole EXPLAIN, tokenizing the prompts included
    explain_s: float = 0.0
    #: issue 47: the statement's tokens and seconds, its sites replayed together (None: unknown)
    estimate: StatementEstimate | None = None
    #: EXPLAIN ANALYZE: what running it took (None: not run)
    measured: Measured | None = None
    #: the order the AND-ed llm filters of a WHERE ran in, and why
    filter_orders: list[str] = field(default_factory=list)
    #: EXPLAIN ANALYZE: where the run's time went (parse, passes, waves, each relQuery)
    trace: StatementTrace | None = None

    @property
    def stages(self) -> int:
        return max((s.stage for s in self.sites), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "statement": self.statement,
            "stages": self.stages,
            "unplanned_reason": self.unplanned_reason,
            "collect_s": self.collect_s,
            "explain_s": self.explain_s,
            "sites": [s.to_dict() for s in self.sites],
            "estimate": self.estimate.to_dict() if self.estimate is not None else None,
            "measured": asdict(self.measured) if self.measured is not None else None,
            "filter_orders": list(self.filter_orders),
            "trace": self.trace.to_dict() if self.trace is not None else None,
        }

    def __str__(self) -> str:
        if self.unplanned_reason:
            return f"LLM EXPLAIN: not planned: {self.unplanned_reason}"
        if not self.sites:
            return "LLM EXPLAIN: no LLM calls in this statement"
        lines = [
            f"LLM EXPLAIN: {len(self.sites)} call site(s) in {self.stages} stage(s); "
            f"reading the rows {self.collect_s * 1000:.0f} ms, explaining {self.explain_s * 1000:.0f} ms"
        ]
        if self.estimate is not None:
            lines.append(self.estimate.line())
        if self.measured is not None:
            lines.append(self.measured.line(self.estimate))
        if self.trace is not None:
            lines.extend(self.trace.lines())
        lines.extend(self.filter_orders)
        for s in self.sites:
            waits = f", waits for #{', #'.join(map(str, s.depends_on))}" if s.depends_on else ""
            lines.append(f"#{s.index} stage {s.stage}{waits}: {s.call}")
            if s.depends_on:
                lines.append(
                    "   (rows counted as if the sites it waits for let every row through: an upper bound)"
                )
            if not s.plans and not s.analyzed:
                lines.append("   no rows reach this call")
            for plan in s.plans:
                lines.extend("   " + line for line in str(plan).splitlines())
            for ran in s.analyzed:
                lines.extend("   " + line for line in str(ran).splitlines())
            if s.analyzed:
                lines.append(f"   measured              {sum(a.seconds for a in s.analyzed):>9.2f}s   (its relQueries, when the "
                             f"statement ran; estimated above: {_site_estimate(s)})")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _site_estimate(site: SiteExplain) -> str:
    ests = [p.estimate for p in site.plans if getattr(p, "estimate", None) is not None]
    if not ests or any(e.idle_s is None for e in ests):
        return "none"
    idle = sum(e.idle_s for e in ests)
    now = [e.now_s for e in ests if e.now_s is not None]
    return f"{idle:.2f}s alone" + (f", {sum(now):.2f}s now" if now else "")


def statement_explain(run: StatementRun) -> StatementExplain:
    stages = site_stages(run)
    out = [
        SiteExplain(
            s.site.index, s.site.text, sorted(s.site.depends_on), stages[s.site.index], s.rows_seen, list(s.explains),
            list(s.analyzed),
        )
        for s in run.sites
    ]
    return StatementExplain(run.statement.text, out, None, run.collect_s, run.seconds)
