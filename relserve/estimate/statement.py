"""A statement's estimate: its call sites replayed together, each stage of sites after the one it
waits for, with the statement's passes over its rows between them (DuckDB runs a planned
statement in collection passes: relserve/duckdb_ext/planned.py).

A site that waits for a filter sees only the rows the filter keeps, which is not known before the
filter runs: its seconds are replayed over the share of rows the filter kept in its earlier
relQueries (``selectivity``; half before any), its tokens stay the upper bound EXPLAIN counts
(every row let through). Both replays start with the prompt blocks the engine's prefix cache
holds now (relserve/estimate/prefix_cache.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from relserve.estimate.call_work import ROWS, CallWork, RelQueryWork
from relserve.estimate.estimate import EngineView
from relserve.estimate.prefix_cache import cached_prompts
from relserve.estimate.timing import Chain, SimulationError, replay
from relserve.labels.batch import sample_indices


@dataclass(frozen=True)
class SiteWork:
    """One call site: its calls' work, its statement stage and the share of its rows expected."""

    name: str
    #: 1 for sites that wait for none; a site runs after every site of the stage before
    stage: int
    works: list[CallWork]
    #: the share of the rows counted that are expected to reach it (the filters before it)
    share: float = 1.0


@dataclass(frozen=True)
class StatementEstimate:
    #: the engine's prompt tokens of every site (an upper bound when a site waits for a filter)
    prompt_tokens: int
    most_answer_tokens: int
    #: the counts are the engine's (no site after a filter, no examples still to choose)
    exact: bool
    idle_s: float | None
    now_s: float | None
    #: passes over the statement's rows, and the seconds of one (measured by EXPLAIN's own pass)
    passes: int
    pass_s: float
    #: per site: its idle end
    site_ends: dict[str, float] = field(default_factory=dict)
    problem: str | None = None

    @property
    def most_tokens(self) -> int:
        return self.prompt_tokens + self.most_answer_tokens

    def to_dict(self) -> dict[str, object]:
        return {**self.__dict__, "most_tokens": self.most_tokens}

    def line(self) -> str:
        bound = "" if self.exact else " at most"
        tokens = f"{self.prompt_tokens:,} engine prompt tokens{bound}, {self.most_answer_tokens:,} answer tokens at most"
        if self.idle_s is None:
            return f"estimate: {tokens}; seconds: ? ({self.problem})"
        now = "" if self.now_s is None else f", {self.now_s:.2f}s behind what the engine holds now"
        return (f"estimate: {self.idle_s:.2f}s alone{now} ({self.passes} passes over the rows of {self.pass_s * 1000:.0f} ms "
                f"each included); {tokens}")


def thinned(work: CallWork, share: float) -> CallWork:
    """``work`` with its rows thinned to ``share`` of them (spread evenly): the rows expected to
    pass the filters before its site."""
    if share >= 1.0:
        return work
    stages = []
    for stage in work.stages:
        out = []
        for w in stage:
            if w.kind == ROWS and w.rows:
                keep = sample_indices(w.rows, max(1, round(w.rows * share)))
                w = replace(w, prompt_ids=[w.prompt_ids[i] for i in keep], answer_tokens=[w.answer_tokens[i] for i in keep])
            out.append(w)
        stages.append(out)
    return replace(work, stages=stages)


def estimate_statement(sites: Sequence[SiteWork], view: EngineView, pass_s: float) -> StatementEstimate:
    """Replay every site of a statement (see the module docstring) alone and behind ``view``'s
    queue. The statement runs one pass per stage of sites and a last one for its result."""
    stages = sorted({s.stage for s in sites})
    passes = len(stages) + 1
    tokens = sum(w.prompt_tokens for s in sites for w in s.works)
    answers = sum(w.most_answer_tokens for s in sites for w in s.works)
    exact = all(s.share >= 1.0 and all(w.exact for w in s.works) for s in sites)
    chains = []
    for s in sites:
        work_stages: list[list[RelQueryWork]] = [st for w in s.works for st in thinned(w, s.share).stages]
        before = tuple(o.name for o in sites if stages.index(o.stage) == stages.index(s.stage) - 1)
        chains.append(Chain(s.name, work_stages, [pass_s], before))
    base = dict(prompt_tokens=tokens, most_answer_tokens=answers, exact=exact, passes=passes, pass_s=pass_s)
    if not chains:
        return StatementEstimate(idle_s=pass_s, now_s=None, **base)
    works = [w for chain in chains for stage in chain.stages for w in stage]
    held = cached_prompts(view.prefix_lookup, works, view.machine.limits.block_size, view.salt).blocks
    try:
        alone = replay(chains, view.machine, cached=held, salt=view.salt)
        now = replay(chains, view.machine, view.background, held, view.salt) if view.background is not None else None
    except SimulationError as e:
        return StatementEstimate(idle_s=None, now_s=None, problem=str(e), **base)

    def total(r) -> float:
        # the last pass runs after every site; a site of no relQuery ends after its pass
        return max((max(t.seconds, pass_s) for t in r.chains.values()), default=pass_s) + pass_s

    ends = {name: t.seconds for name, t in alone.chains.items()}
    return StatementEstimate(idle_s=total(alone), now_s=total(now) if now is not None else None, site_ends=ends, **base)
