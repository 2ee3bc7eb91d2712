"""The workload: statements (sql/bench_e2e*/), sessions with seeded Poisson arrivals, and the
rows each statement runs on at each load (the same for every contender)."""

from __future__ import annotations

import math
import os
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parents[2]
SQL_DIR = ROOT / "sql" / "bench_e2e"
#: --workload: the headline's statements, a second set over other tables, templates and
#: prompt/answer lengths (a check that the headline holds on work it was not sized on), and a third
#: over rows neither reads, with other columns and templates, built after both and used to tune nothing
WORKLOADS = {"main": SQL_DIR, "other": ROOT / "sql" / "bench_e2e_other", "third": ROOT / "sql" / "bench_e2e_third"}
DATASETS = Path(os.environ.get("RELSERVE_DATASETS", ROOT.parent / "shared" / "datasets"))

#: statement sizes (rows) and their weights: mostly small, some large (1-300; mean 32.8 rows)
SIZES = ((1, 0.19), (3, 0.18), (8, 0.18), (20, 0.18), (50, 0.14), (100, 0.08), (200, 0.03), (300, 0.02))
#: --quick: 1-30 rows (mean 10.3)
QUICK_SIZES = ((1, 0.25), (3, 0.2), (8, 0.2), (15, 0.2), (30, 0.15))
#: rows per table of the main workload (its tables.sql says "-- rows: 3000")
TABLE_ROWS = 3000


@dataclass(frozen=True)
class Statement:
    """One file of sql/bench_e2e/: SQL with ``$offset`` and ``$rows``, and what its columns are."""

    name: str
    text: str
    table: str
    #: columns written by llm_map / llm_extract (greedy decoding: compared row by row)
    generated: tuple[str, ...] = ()
    #: columns holding labels (llm_classify), compared as agreement
    labels: tuple[str, ...] = ()
    #: an llm_filter in WHERE decides which rows come out
    filters_rows: bool = False

    def sql(self, offset: int, rows: int) -> str:
        return Template(self.text).substitute(offset=offset, rows=rows)


def load_statements(sql_dir: Path = SQL_DIR) -> list[Statement]:
    out = []
    for path in sorted(sql_dir.glob("*.sql")):
        if path.name == "tables.sql":
            continue
        text = path.read_text()
        meta = dict(re.findall(r"^-- (table|generated|labels|filter): *(.*)$", text, flags=re.M))
        if "table" not in meta:
            raise ValueError(f"{path}: no '-- table: NAME' line")
        out.append(Statement(path.stem, text, meta["table"], _columns(meta, "generated"), _columns(meta, "labels"), "filter" in meta))
    return out


def _columns(meta: dict[str, str], key: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in meta.get(key, "").split(",") if c.strip())


def tables_sql(datasets: Path = DATASETS, sql_dir: Path = SQL_DIR) -> str:
    return Template((sql_dir / "tables.sql").read_text()).substitute(datasets=str(datasets))


def table_rows(sql_dir: Path = SQL_DIR) -> int:
    """The rows every table of a workload has (its tables.sql's "-- rows: N" line)."""
    m = re.search(r"^-- rows: *(\d+)$", (sql_dir / "tables.sql").read_text(), flags=re.MULTILINE)
    if m is None:
        raise ValueError(f"{sql_dir / 'tables.sql'}: no '-- rows: N' line")
    return int(m.group(1))


@dataclass(frozen=True)
class Item:
    """One statement of one session: which, over how many rows, when (at load 1)."""

    session: int
    seq: int
    name: str
    rows: int
    #: seconds from the start at load 1.0; at load x it arrives at base_arrival / x
    base_arrival: float

    @property
    def key(self) -> str:
        return f"s{self.session}-{self.seq}"


@dataclass(frozen=True)
class Scheduled:
    item: Item
    load: float
    arrival: float
    offset: int
    sql: str
    #: arrives when the statement before it ends (``--alone``): its latency is its own run time
    back_to_back: bool = False

    @property
    def key(self) -> str:
        return self.item.key


def build_workload(
    statements: list[Statement], *, sessions: int, rate: float, horizon: float, seed: int,
    sizes: tuple[tuple[int, float], ...] = SIZES,
) -> list[Item]:
    """Each session's stream of statements: Poisson arrivals at ``rate / sessions`` per second
    (load 1.0) until ``horizon`` seconds. Statements and sizes are drawn in arrival order by a
    low-discrepancy sequence (golden-ratio steps from a seeded start over the size distribution,
    and over the statements), so that every prefix of the stream, which is what a lower load or
    a shorter window takes, has close to the intended mix; a few large statements drawn i.i.d.
    would otherwise decide the row count of a short run."""
    if sessions < 1 or rate <= 0 or horizon <= 0:
        raise ValueError("sessions >= 1, rate > 0 and horizon > 0 are needed")
    rng = random.Random(seed)
    arrivals = []
    for s in range(sessions):
        t = 0.0
        while True:
            t += rng.expovariate(rate / sessions)
            if t >= horizon:
                break
            arrivals.append((round(t, 4), s))
    arrivals.sort()
    values, weights = zip(*sizes)
    cdf = [sum(weights[: i + 1]) / sum(weights) for i in range(len(weights))]
    u_size, u_name = rng.random(), rng.random()
    phi, sqrt2 = (math.sqrt(5) - 1) / 2, math.sqrt(2) - 1
    seqs: dict[int, int] = {}
    items = []
    for i, (t, s) in enumerate(arrivals):
        q = (u_size + i * phi) % 1.0
        size = values[next(k for k, c in enumerate(cdf) if q < c or k == len(cdf) - 1)]
        st = statements[int(((u_name + i * sqrt2) % 1.0) * len(statements))]
        items.append(Item(s, seqs.get(s, 0), st.name, size, t))
        seqs[s] = seqs.get(s, 0) + 1
    return items


def at_load(
    items: list[Item], statements: list[Statement], load: float, window: float, seed: int, table_rows: int = TABLE_ROWS
) -> list[Scheduled]:
    """The items arriving within ``window`` seconds at ``load`` (arrivals / load), with row ranges
    drawn for this load (seeded by seed and load, so every contender gets the same)."""
    by_name = {s.name: s for s in statements}
    rng = random.Random(f"{seed}-{load}")
    out = []
    for it in items:
        arrival = it.base_arrival / load
        offset = rng.randrange(0, table_rows - it.rows + 1)
        if arrival < window:
            out.append(Scheduled(it, load, round(arrival, 4), offset, by_name[it.name].sql(offset, it.rows)))
    return out


def one_at_a_time(work: list[Scheduled]) -> list[Scheduled]:
    """``work`` run back to back in arrival order on one connection, each statement timed from its
    own start (``bench_e2e.py --alone``): every statement alone on the machine, so the mean
    latency is what the contender's work costs with no queue, the least any scheduling of that
    work can reach at any load (statements keep their order, so caches warm as in the run)."""
    return [replace(w, back_to_back=True) for w in sorted(work, key=lambda w: (w.arrival, w.item.session, w.item.seq))]


#: rows of each statement's plan-making run (``--plans warm``): enough for a label plan that is
#: not provisional (relserve/labels/resolution.py: 16) and the adaptive method's 64-row sample
PLAN_WARM_ROWS = 64


def plan_statements(
    statements: list[Statement], work_by_load: dict[float, list[Scheduled]], table_rows: int = TABLE_ROWS,
    rows: int = PLAN_WARM_ROWS,
) -> list[Scheduled]:
    """Each statement with a label call (``llm_filter`` in WHERE, ``llm_classify``) once over
    ``rows`` rows of its table that no measured statement of any load reads (``--plans warm``): a
    user's earlier statement of the same call, which made its label plan. Their answers are not
    measured, and the measured rows are not in them: the engine's prefix cache and relserve's
    result cache hold none of the measured rows' prompts."""
    taken: dict[str, list[tuple[int, int]]] = {}
    by_name = {s.name: s for s in statements}
    for work in work_by_load.values():
        for w in work:
            taken.setdefault(by_name[w.item.name].table, []).append((w.offset, w.offset + w.item.rows))
    out = []
    for st in statements:
        if not (st.filters_rows or st.labels):
            continue
        offset = _free_offset(taken.get(st.table, []), rows, table_rows)
        if offset is None:
            raise ValueError(f"{st.table}: no {rows} rows that no measured statement reads, for {st.name}'s label plan")
        taken.setdefault(st.table, []).append((offset, offset + rows))  # two statements of one table: apart
        item = Item(session=-1, seq=len(out), name=st.name, rows=rows, base_arrival=0.0)
        out.append(Scheduled(item, load=0.0, arrival=0.0, offset=offset, sql=st.sql(offset, rows), back_to_back=True))
    return out


def _free_offset(ranges: list[tuple[int, int]], rows: int, table_rows: int) -> int | None:
    """The first offset o with ids o+1..o+rows inside the table and in none of ``ranges`` (each
    (offset, offset + rows): ids offset+1..offset+rows, as the statements' ``id > $offset AND id
    <= $offset + $rows``)."""
    at = 0
    for lo, hi in sorted(ranges):
        if lo - at >= rows:
            break
        at = max(at, hi)
    return at if at + rows <= table_rows else None
