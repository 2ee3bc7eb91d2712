#!/usr/bin/env python3
"""The mutation check (issue 66): does the test suite notice when the code's key decisions change?

Each mutant below changes one line of relserve (or of the PostgreSQL extension's C part) the way a
plausible bug would: a sign, a comparison, a sort order. For each, the script copies the working
tree into a throwaway folder, applies the one change there (the real tree is never touched), and
runs the tests that should catch it. A mutant the tests catch is *killed*; one they pass with
*survives*, and a survivor is a missing test. Before any mutant, the same tests run on the
unchanged copy and must pass (a failing test would kill every mutant for nothing).

    .venv/bin/python scripts/mutation_check.py              # every mutant
    .venv/bin/python scripts/mutation_check.py --fast       # only those whose tests need no engine or PostgreSQL
    .venv/bin/python scripts/mutation_check.py --only topk-first-round-order,join-positive
    .venv/bin/python scripts/mutation_check.py --list

The C mutants build the mutated extension and install it into a private copy of PostgreSQL 15's
folders (``RELSERVE_PG_DESTDIR``, with ``RELSERVE_PG_BIN`` naming its binaries: PostgreSQL finds its
share and library folders relative to them), so the system's extension is not replaced either.
Exit status: 0 when every mutant was killed, 1 when one survived, 2 when a check could not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PG_VERSION = "15"


@dataclass(frozen=True)
class Mutant:
    name: str
    #: the file, relative to the repository
    path: str
    #: the exact text replaced (it must occur exactly once in the file) and its replacement
    old: str
    new: str
    #: pytest arguments: the tests that should catch it
    tests: tuple[str, ...]
    #: what the change means
    why: str

    @property
    def fast(self) -> bool:
        return not self.path.endswith(".c") and not needs_services(self.tests)


#: the tests that need no engine, PostgreSQL or Ray cluster (the Makefile's test-fast)
FAST = "not engine and not postgres and not cluster and not gpu"


def needs_services(tests: tuple[str, ...]) -> bool:
    """Whether the tests are of the engine's or PostgreSQL's modules (else only their fast tier runs)."""
    return any(s in t for t in tests for s in ("_engine.py", "test_postgres", "test_fdw", "test_golden"))


MUTANTS: list[Mutant] = [
    # -- labels: the margin, the plan's decision rule, the boundary ---------------------------------------
    Mutant("label-margin-sign", "relserve/labels/plan.py",
           "return scores[a] - scores[b] if a in scores and b in scores else math.nan",
           "return scores[b] - scores[a] if a in scores and b in scores else math.nan",
           ("tests/test_label_plans.py", "tests/test_labels_adaptive.py"),
           "a 2-label row's margin: the second label's score minus the first's"),
    Mutant("plan-decide-at-one-half", "relserve/labels/plan.py",
           "return (self.labels[0], p) if p > 0.5 else (self.labels[1], 1 - p)",
           "return (self.labels[0], p) if p >= 0.5 else (self.labels[1], 1 - p)",
           ("tests/test_label_plans.py", "tests/test_labels_adaptive.py"),
           "a row exactly at one half (no margin: a label without a score) takes the first label"),
    Mutant("plan-probability-direction", "relserve/labels/plan.py",
           "z = max(min((margin - self.boundary) / (self.spread or 1.0), 50.0), -50.0)",
           "z = max(min((self.boundary - margin) / (self.spread or 1.0), 50.0), -50.0)",
           ("tests/test_label_plans.py", "tests/test_labels_adaptive.py", "tests/test_label_confidence.py"),
           "the confidence falls as the margin rises above the boundary"),
    Mutant("plan-boundary-inclusive", "relserve/labels/plan.py",
           "if margin > self.boundary and p <= 0.5:",
           "if margin >= self.boundary and p <= 0.5:",
           ("tests/test_label_plans.py", "tests/test_labels_adaptive.py"),
           "a margin exactly on the boundary takes the first label"),
    Mutant("plan-offsets-added", "relserve/labels/plan.py",
           "corrected = {label: scores[label] - offsets.get(label, 0.0) for label in scores}",
           "corrected = {label: scores[label] + offsets.get(label, 0.0) for label in scores}",
           ("tests/test_label_plans.py", "tests/test_labels_adaptive.py", "tests/test_label_calibration.py"),
           "3+ labels: each label's offset added to its score instead of subtracted"),
    Mutant("boundary-all-sure", "relserve/labels/decide.py",
           "if xs and sureness_is_the_rows and (min(xs) >= SURE or max(xs) <= -SURE):",
           "if xs and sureness_is_the_rows and (max(xs) >= SURE or min(xs) <= -SURE):",
           ("tests/test_labels_adaptive.py", "tests/test_label_plans.py"),
           "one sure row makes every row 'all alike'"),
    Mutant("boundary-content-free-mean", "relserve/labels/decide.py",
           "value = sum(free) / len(free)",
           "value = max(free)",
           ("tests/test_labels_adaptive.py", "tests/test_label_plans.py"),
           "the content-free boundary at the highest content-free margin instead of their mean"),
    Mutant("boundary-gap-middle", "relserve/labels/decide.py",
           "return (ordered[i] + ordered[i - 1]) / 2",
           "return ordered[i]",
           ("tests/test_labels_adaptive.py", "tests/test_label_plans.py"),
           "two crowds split at the upper crowd's lowest margin instead of the gap's middle"),
    Mutant("boundary-share-below", "relserve/labels/decide.py",
           "return sum(x > value for x in xs) / len(xs) if xs else 0.0",
           "return sum(x < value for x in xs) / len(xs) if xs else 0.0",
           ("tests/test_labels_adaptive.py", "tests/test_label_plans.py"),
           "the kept share counted below the boundary"),
    # -- the scheduler: priority and starvation ---------------------------------------------------------
    Mutant("dpu-starvation-inverted", "relserve/policy/dpu.py",
           "if threshold is not None and g.waiting and (view.now - g.arrival) / max(g.size, 1) > threshold:",
           "if threshold is not None and g.waiting and (view.now - g.arrival) / max(g.size, 1) < threshold:",
           ("tests/test_policy.py", "tests/test_sim.py"),
           "starvation prevention promotes the relQueries that have NOT waited long"),
    Mutant("dpu-starvation-per-request", "relserve/policy/dpu.py",
           "if threshold is not None and g.waiting and (view.now - g.arrival) / max(g.size, 1) > threshold:",
           "if threshold is not None and g.waiting and (view.now - g.arrival) > threshold:",
           ("tests/test_policy.py", "tests/test_sim.py"),
           "the waiting time not divided by the relQuery's size (Eq. 13's unit waiting time)"),
    Mutant("dpu-deadline-inverted", "relserve/policy/dpu.py",
           "elif g.deadline is not None and view.now + prio >= g.deadline:",
           "elif g.deadline is not None and view.now + prio < g.deadline:",
           ("tests/test_policy.py",),
           "a relQuery whose deadline is safe runs first"),
    Mutant("aba-priority-reversed", "relserve/policy/aba.py",
           "return (g.priority, g.share, prios[g.rel_id], g.arrival, g.seq)",
           "return (g.priority, g.share, -prios[g.rel_id], g.arrival, g.seq)",
           ("tests/test_policy.py", "tests/test_sim.py"),
           "the relQuery with the LONGEST estimated remaining time goes first"),
    Mutant("aba-priority-class-reversed", "relserve/policy/aba.py",
           "return (g.priority, g.share, prios[g.rel_id], g.arrival, g.seq)",
           "return (-g.priority, g.share, prios[g.rel_id], g.arrival, g.seq)",
           ("tests/test_policy.py", "tests/test_sim.py"),
           "the user's priority classes ranked backwards"),
    Mutant("preemption-rank-reversed", "relserve/policy/preemption.py",
           "return (r.priority, shares.get(r.tenant, 0.0), priorities.get(r.rel_id, inf), r.arrival)",
           "return (r.priority, shares.get(r.tenant, 0.0), -priorities.get(r.rel_id, inf), r.arrival)",
           ("tests/test_policy.py", "tests/test_policy_blocks.py"),
           "preemption takes blocks from the relQuery that should run soonest"),
    # -- top-k and join ----------------------------------------------------------------------------------
    Mutant("topk-first-round-order", "relserve/operators/topk.py",
           "candidates = sorted(first_of.values(), key=lambda i: (-scores[i], i))",
           "candidates = sorted(first_of.values(), key=lambda i: (scores[i], i))",
           ("tests/test_operators.py",),
           "the pool of round 2 taken from the LOWEST first-round scores"),
    Mutant("topk-wins-order", "relserve/operators/topk.py",
           "ranked = sorted(pool, key=lambda i: (-wins[i], -scores[i], i))[: tc.k]",
           "ranked = sorted(pool, key=lambda i: (wins[i], -scores[i], i))[: tc.k]",
           ("tests/test_operators.py",),
           "the final order by fewest wins"),
    Mutant("topk-comparison-sign", "relserve/operators/topk.py",
           "if m > 0:",
           "if m < 0:",
           ("tests/test_operators.py",),
           "a comparison's win given to the loser"),
    Mutant("join-positive", "relserve/operators/join.py",
           "elif value:",
           "elif not value:",
           ("tests/test_operators.py", "tests/test_join_sql.py"),
           "the join keeps the pairs the model says NO to"),
    # -- budgets: the call's, the statement's, the tenant's ------------------------------------------------
    Mutant("budget-estimate-check", "relserve/budget.py",
           "if budget.max_tokens_total is not None and most_tokens > budget.max_tokens_total:",
           "if budget.max_tokens_total is not None and most_tokens > budget.max_tokens_total + 1000:",
           ("tests/test_estimate.py", "tests/test_duckdb.py", "tests/test_server_api.py"),
           "a call whose estimate is over its budget by less than 1,000 tokens is not refused"),
    Mutant("budget-seconds-check", "relserve/budget.py",
           "if budget.max_seconds is not None and seconds is not None and seconds > budget.max_seconds:",
           "if budget.max_seconds is not None and seconds is not None and seconds < budget.max_seconds:",
           ("tests/test_estimate.py", "tests/test_duckdb.py", "tests/test_server_api.py"),
           "a call refused when its estimated seconds are UNDER its budget"),
    Mutant("budget-reserve", "relserve/budget.py",
           "if any(a.max_tokens is not None and a.spent + a.reserved + tokens > a.max_tokens for a in self.chain):",
           "if any(a.max_tokens is not None and a.spent + tokens > a.max_tokens for a in self.chain):",
           ("tests/test_estimate.py", "tests/test_duckdb.py", "tests/test_server_api.py"),
           "a row's reservation ignores what other running rows hold: the budget can be overspent"),
    Mutant("tenant-day-check", "relserve/server/budget.py",
           'if on_budget == "refuse" and most_tokens > left:',
           'if on_budget == "refuse" and most_tokens > left + 1000:',
           ("tests/test_server_budget_limits.py", "tests/test_server_api.py", "tests/test_server_operator_budgets.py",
            "tests/test_server_hostile.py"),
           "a request over what is left of the tenant's day by less than 1,000 tokens is not refused"),
    Mutant("tenant-in-flight-check", "relserve/server/budget.py",
           "if cost.tokens > lim.max_tokens_in_flight:",
           "if cost.tokens > 2 * lim.max_tokens_in_flight:",
           ("tests/test_server_budget_limits.py", "tests/test_server_api.py", "tests/test_server_hostile.py",
            "tests/test_server_bad_input.py"),
           "one request of up to twice the tenant's tokens in flight is accepted"),
    # -- the cascade -------------------------------------------------------------------------------------
    Mutant("cascade-threshold-test", "relserve/cascade/threshold.py",
           "if binomial.upper_bound(wrong, half, delta) > allowed:",
           "if binomial.upper_bound(wrong, half, delta) > 2 * allowed:",
           ("tests/test_cascade.py",),
           "the threshold's test allows twice the disagreement the target does"),
    Mutant("cascade-min-rows", "relserve/cascade/policy.py",
           "if rows < MIN_ROWS:",
           "if rows <= MIN_ROWS:",
           ("tests/test_cascade.py",),
           "a relQuery of exactly MIN_ROWS prompts runs without the cascade"),
    # -- label plans kept per call ------------------------------------------------------------------------
    Mutant("plan-key-without-method", "relserve/labels/resolution.py",
           "ident = json.dumps([list(_plain(template_key(call, model_id))), method.value if method else None], default=str)",
           "ident = json.dumps([list(_plain(template_key(call, model_id))), None], default=str)",
           ("tests/test_label_plans.py", "tests/test_labels_adaptive.py"),
           "a call that asks for another label method reads the plan another method made for its template"),
    # (dropping the labels, call.choices, from the key is an equivalent mutant: the answer
    # instruction beside them names every label, in order)
    Mutant("plan-key-without-system", "relserve/labels/keys.py",
           "call.options.system, call.prompt_shape, call.options.answer_field)",
           "None, call.prompt_shape, call.options.answer_field)",
           ("tests/test_label_plans.py", "tests/test_labels_adaptive.py"),
           "a call under another system message reads the plan made under the first one (per-template "
           "measurements too)"),
    # -- LIMIT: stopping early ------------------------------------------------------------------------------
    Mutant("duckdb-limit-under-order-by", "relserve/duckdb_ext/statement.py",
           'return not (tree.args.get("order") is not None or tree.args.get("group") is not None',
           'return not (tree.args.get("group") is not None',
           ("tests/test_duckdb_limit.py",),
           "a LIMIT (or an EXISTS) over an ORDER BY stops its filter early (its first passing rows are not its "
           "answer)"),
    Mutant("duckdb-limit-enough", "relserve/duckdb_ext/planned.py",
           "return table is not None and len(table) >= needed",
           "return table is not None and len(table) > needed",
           ("tests/test_duckdb_limit.py",),
           "a LIMIT k statement keeps asking once k rows pass (it stops only at k + 1)"),
    Mutant("polars-limit-enough", "relserve/polars.py",
           "return kept >= limit",
           "return kept > limit",
           ("tests/test_polars_limit.py",),
           "df.llm.filter(limit=k) keeps asking once k rows are kept"),
    # -- the PostgreSQL batch node's qual order (C) ------------------------------------------------------
    Mutant("pg-qual-level-order", "udfs/relserve/batch_qual_order.c",
           "(later->level != RS_LEVEL_UNKNOWN && earlier->level != RS_LEVEL_UNKNOWN && later->level <= earlier->level);",
           "(later->level != RS_LEVEL_UNKNOWN && earlier->level != RS_LEVEL_UNKNOWN && later->level >= earlier->level);",
           ("tests/test_postgres_rls.py",),
           "a qual of a higher security level may run before a lower one (a user's function before a policy)"),
    Mutant("pg-qual-same-batch", "udfs/relserve/batch_qual_order.c",
           "quals[j].slot = after < 0 ? 1 : (after % 2 == 1 ? after + 2 : after + 1);",
           "quals[j].slot = after < 0 ? 1 : (after % 2 == 1 ? after : after + 1);",
           ("tests/test_postgres_rls.py",),
           "a call joins the batch of a qual it may not run ahead of (its calls see the rows that qual drops)"),
    # -- the PostgreSQL batch node's order of llm quals (C) ---------------------------------------------
    Mutant("pg-order-rank-inverted", "udfs/relserve/batch_scan.c",
           "rank[b] = chars / Max(1.0 - (seen ? (double) kept / seen : 1.0), 0.01);",
           "rank[b] = chars * Max(1.0 - (seen ? (double) kept / seen : 1.0), 0.01);",
           ("tests/test_postgres_batch.py::test_the_llm_quals_of_a_where_run_cheapest_first_each_over_the_rows_the_earlier_kept",),
           "the llm qual that removes the fewest rows runs first"),
    Mutant("pg-order-sample-sent-again", "udfs/relserve/batch_scan.c",
           "if (row->dropped || row->answered[s - st->sites] || (only != NULL && !only[r]))",
           "if (row->dropped || (only != NULL && !only[r]))",
           ("tests/test_postgres_batch.py::test_the_llm_quals_of_a_where_run_cheapest_first_each_over_the_rows_the_earlier_kept",),
           "the rows of the order's sample are sent again in their batches"),
    Mutant("pg-order-generating-first", "udfs/relserve/batch_plan.c",
           "quals[i].labels_only != (pass == 0))",
           "quals[i].labels_only != (pass == 1))",
           ("tests/test_postgres_rls.py::test_without_security_quals_the_cheap_quals_stay_on_the_input_and_each_calls_qual_has_a_batch",),
           "a qual that generates text runs before the label quals of its security level"),
    # -- the PostgreSQL batch node under a LIMIT (C) -----------------------------------------------------
    Mutant("pg-limit-windows-double", "udfs/relserve/batch_scan.c",
           "st->next_window = Min(st->window_rows, size * 2);",
           "st->next_window = Min(st->window_rows, size);",
           ("tests/test_postgres_limit.py::test_windows_double_while_the_limit_is_short_of_rows",),
           "under a LIMIT the windows stay at their first size instead of doubling while rows are missing"),
    Mutant("pg-exists-unbounded", "udfs/relserve/batch_plan.c",
           "if (IsA(node, SubPlan) && ((SubPlan *) node)->subLinkType == EXISTS_SUBLINK)",
           "if (IsA(node, SubPlan) && ((SubPlan *) node)->subLinkType == ALL_SUBLINK)",
           ("tests/test_postgres_limit.py::test_an_exists_reads_a_small_window_first_and_more_only_while_no_row_has_passed",),
           "an EXISTS sublink's batch node reads full windows (every row) for its one row"),
    Mutant("pg-order-empty-window", "udfs/relserve/batch_scan.c",
           "(place > 1 && st->group[place - 1] == stage) || inplay == 0)",
           "(place > 1 && st->group[place - 1] == stage))",
           ("tests/test_postgres_batch.py::test_a_first_window_an_earlier_security_stage_emptied_leaves_the_order_to_the_next",),
           "a window whose rows a lower security level all dropped fixes the order on an empty sample"),
    Mutant("pg-limit-bound-offset", "udfs/relserve/batch_plan.c",
           "bound = DatumGetInt64(count->constvalue) + (offset ? DatumGetInt64(offset->constvalue) : 0);",
           "bound = DatumGetInt64(count->constvalue);",
           ("tests/test_postgres_limit.py::test_a_limit_right_above_the_node_bounds_its_windows_and_one_that_needs_every_row_does_not",),
           "LIMIT k OFFSET n bounds the node at k rows, not k + n"),
]


def tree_copy(into: Path) -> Path:
    """The working tree's files (tracked and new, not ignored) copied into ``into``/repo, readable
    by every OS user (the PostgreSQL backends import relserve from it as ``postgres``)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    root = into / "repo"
    for name in filter(None, listed):
        src = REPO / name
        if not src.is_file():
            continue  # deleted in the working tree
        dst = root / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    for d in [into, *(p for p in root.rglob("*") if p.is_dir()), root]:
        d.chmod(0o755)
    return root


def private_postgres(into: Path) -> Path:
    """A copy of PostgreSQL's folders under ``into`` (its binaries find the copy's share and
    library folders, where a mutant's extension is installed)."""
    for sub in (f"usr/lib/postgresql/{PG_VERSION}", f"usr/share/postgresql/{PG_VERSION}"):
        shutil.copytree(Path("/") / sub, into / sub, symlinks=True)
    for d in [into, *(p for p in into.rglob("*") if p.is_dir() and not p.is_symlink())]:
        d.chmod(0o755)
    return into


def apply(root: Path, m: Mutant) -> None:
    f = root / m.path
    text = f.read_text()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutant {m.name}: the text to replace occurs {n} times in {m.path} (must be once)")
    f.write_text(text.replace(m.old, m.new))


def run_tests(root: Path, tests: tuple[str, ...], env: dict[str, str], timeout: float, *, first_failure: bool = True,
              deselect: tuple[str, ...] = ()) -> tuple[int, float, list[str]]:
    """pytest's exit status, the seconds it took and its output's lines."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:randomly",
           *(["-x"] if first_failure else []), *tests, *(f"--deselect={d}" for d in deselect)]
    if not needs_services(tests):  # the fast tier of those modules: what the mutant's tests are
        cmd += ["-m", FAST]
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, time.monotonic() - t0, ["timed out"]
    lines = [line for line in out.stdout.splitlines() if line.strip()] or out.stderr.splitlines()[-3:]
    return out.returncode, time.monotonic() - t0, lines


def failed_ids(lines: list[str]) -> list[str]:
    """The node ids pytest's short summary names as failed or in error."""
    return [line.split(" ", 1)[1].split(" - ", 1)[0] for line in lines if line.startswith(("FAILED ", "ERROR "))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="only the mutants whose tests need no engine or PostgreSQL")
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one mutant's tests may take")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if (not args.fast or m.fast) and (not args.only or m.name in args.only.split(","))]
    if args.list:
        for m in chosen:
            print(f"{m.name:30} {m.path}: {m.why}\n{'':30} tests: {' '.join(m.tests)}")
        return 0
    if not chosen:
        raise SystemExit("no mutant chosen")

    work = Path(tempfile.mkdtemp(prefix="relserve-mutants-"))
    # (mkdtemp's folder is its owner's alone: PostgreSQL's own user must reach the copies in it,
    # the private PostgreSQL's binaries and the tree its backends import relserve from)
    work.chmod(0o755)
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RELSERVE_PG_BIN", "RELSERVE_PG_DESTDIR")}
        env["HF_HUB_OFFLINE"] = "1"
        # the tables beside the repository (relserve/workloads/tables.py): the copy is elsewhere
        datasets = REPO.parent / "shared" / "datasets"
        if "RELSERVE_DATASETS" not in env and datasets.is_dir():
            env["RELSERVE_DATASETS"] = str(datasets)
        pg = None
        if any(m.path.endswith(".c") or not m.fast for m in chosen):
            pg = private_postgres(work / "pg")
            env["RELSERVE_PG_DESTDIR"] = str(pg)
            env["RELSERVE_PG_BIN"] = str(pg / f"usr/lib/postgresql/{PG_VERSION}/bin")
        # the unchanged tree first: a test that fails there says nothing about a mutant, so it is
        # left out of the mutants' runs (and named)
        clean = tree_copy(work / "clean")
        env_clean = {**env, "PYTHONPATH": str(clean)}
        failing: dict[tuple[str, ...], tuple[str, ...]] = {}
        for tests in dict.fromkeys(m.tests for m in chosen):
            rc, took, lines = run_tests(clean, tests, env_clean, args.timeout, first_failure=False)
            failing[tests] = tuple(failed_ids(lines))
            print(f"{'(unchanged tree)':30} {'pass' if rc == 0 else 'fail':8} {took:6.0f} s  {' '.join(tests)}: {lines[-1]}",
                  flush=True)
            for nodeid in failing[tests]:
                print(f"{'':30} left out (fails unchanged): {nodeid}")
            if rc not in (0, 1) or (rc == 1 and not failing[tests]):
                print("the tests cannot run on the unchanged tree", file=sys.stderr)
                return 2
        survivors, broken, flaky = [], [], []
        for m in chosen:
            root = tree_copy(work / m.name)
            apply(root, m)
            env_mutant = {**env, "PYTHONPATH": str(root)}
            skipped = list(failing[m.tests])
            while True:
                rc, took, lines = run_tests(root, m.tests, env_mutant, args.timeout, deselect=tuple(skipped))
                caught = failed_ids(lines)
                if rc != 1 or not caught:
                    break
                # a kill counts when the test that failed fails again on the mutant and passes on the
                # unchanged tree (on a loaded machine a timing-sensitive test can fail by itself)
                again, _, _ = run_tests(root, (caught[0],), env_mutant, args.timeout)
                unchanged, _, _ = run_tests(clean, (caught[0],), env_clean, args.timeout)
                if again == 1 and unchanged == 0:
                    break
                flaky.append(caught[0])
                skipped.append(caught[0])
            # pytest exits 1 when a test failed; anything else (no tests, a collection error, a
            # timeout) says nothing about the mutant
            verdict = "killed" if rc == 1 else "SURVIVED" if rc == 0 else f"error {rc}"
            (survivors if rc == 0 else broken if rc != 1 else []).append(m.name)
            print(f"{m.name:30} {verdict:8} {took:6.0f} s  {caught[0] if caught else lines[-1]}", flush=True)
            shutil.rmtree(work / m.name, ignore_errors=True)
        for nodeid in dict.fromkeys(flaky):
            print(f"(a failure not confirmed on a second run, or also on the unchanged tree, left out: {nodeid})")
        print(f"\n{len(chosen)} mutants: {len(chosen) - len(survivors) - len(broken)} killed, "
              f"{len(survivors)} survived{': ' + ', '.join(survivors) if survivors else ''}"
              f"{f', {len(broken)} could not be checked: ' + ', '.join(broken) if broken else ''}")
        return 1 if survivors else 2 if broken else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
