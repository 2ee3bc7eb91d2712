/*
 * Batched scalar calls: SELECT id, llm_map('...{r}...', review) FROM reviews as one relQuery.
 *
 * PostgreSQL calls a scalar function once per row and waits for it, so the query everyone writes
 * first would send one request per row. A planner hook finds plan nodes (scans, and a Result over
 * a child) whose target list or quals call relserve's scalar llm_* functions, and puts a custom scan
 * in their place. It pulls the node's input in windows of relserve.batch_window rows, evaluates
 * each call site's arguments there, sends each call site's window as ONE relQuery (the same request
 * the *_query functions send), and emits each row, in its input order, once its answers are in.
 *
 * The node keeps the order in which PostgreSQL runs a scan's quals wherever it matters for
 * security (order_qual_clauses): a row-level security policy's quals and a security_barrier view's
 * have a lower security_level than the query's own, and a qual runs before one of a lower level
 * only if it is leakproof. So the quals run in stages: those that may run first stay on the input
 * node; then the llm_* calls of the lowest level are sent as one batch over the rows the input kept,
 * then the quals that had to wait for them run here, row by row, then the next level's batch goes
 * out over the rows still in play, and so on; the target list's calls go last, over the rows every
 * qual kept (as AlloyDB's AI function node does). A call's arguments are evaluated here, when its
 * batch is sent, for the rows in play only. Without security quals in the statement every qual has
 * the same level: cheap quals on the input, one batch of the quals' calls, then the target list's.
 * The finished plan no longer says which qual had which level: set_rel_pathlist_hook notes every
 * relation's quals with their levels while the statement is planned, and a qual the notes do not
 * identify keeps its place in the planner's order.
 *
 * Where a call cannot be batched (inside CASE, COALESCE, AND/OR, where evaluating it for every row
 * would change which rows call the model; a template that is not a constant; arguments with a
 * sub-select) the node runs as planned, one call per row, under a pass-through node that says why in
 * EXPLAIN. relserve.batch_calls = off turns the hook off. The hook works from the moment the library
 * is loaded: session_preload_libraries = 'relserve' loads it at connection start.
 *
 * This file holds the planner hooks; batch_calls.h lists the files that do the rest.
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "optimizer/paths.h"
#include "optimizer/planner.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "batch_calls.h"
#include "relserve.h"

static planner_hook_type prev_planner_hook = NULL;
static set_rel_pathlist_hook_type prev_set_rel_pathlist_hook = NULL;

/* the statement being planned (planning nests, through SPI: saved and restored around it) */
static RsPlanning *rs_planning = NULL;

static void
rs_set_rel_pathlist(PlannerInfo *root, RelOptInfo *rel, Index rti, RangeTblEntry *rte)
{
	if (prev_set_rel_pathlist_hook)
		prev_set_rel_pathlist_hook(root, rel, rti, rte);
	if (rs_planning != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(rs_planning->cxt);
		ListCell   *lc;

		rs_planning->max_security_level = Max(rs_planning->max_security_level, root->qual_security_level);
		foreach(lc, rel->baserestrictinfo)
		{
			RestrictInfo *ri = lfirst_node(RestrictInfo, lc);
			RsKnownQual *k = palloc(sizeof(RsKnownQual));

			k->clause = ri->clause;
			k->relid = rte->rtekind == RTE_RELATION ? rte->relid : InvalidOid;
			k->security_level = ri->security_level;
			rs_planning->known = lappend(rs_planning->known, k);
		}
		MemoryContextSwitchTo(old);
	}
}

static PlannedStmt *
rs_planner(Query *parse, const char *query_string, int cursorOptions, ParamListInfo boundParams)
{
	RsPlanning	planning = {CurrentMemoryContext, InvalidOid, NIL, 0, false};
	RsPlanning *outer = rs_planning;
	bool		batching;
	PlannedStmt *stmt;
	ListCell   *lc;

	batching = parse->commandType == CMD_SELECT && IsTransactionState() &&
		OidIsValid(planning.extension = get_extension_oid("relserve", true));
	/* the quals' security levels are noted while the statement is planned (rs_set_rel_pathlist) */
	rs_planning = batching ? &planning : NULL;
	PG_TRY();
	{
		stmt = prev_planner_hook
			? prev_planner_hook(parse, query_string, cursorOptions, boundParams)
			: standard_planner(parse, query_string, cursorOptions, boundParams);
	}
	PG_FINALLY();
	{
		rs_planning = outer;
	}
	PG_END_TRY();
	if (!batching || stmt->commandType != CMD_SELECT)
		return stmt;
	/*
	 * relserve.batch_calls = off is the reader's choice for its own calls, not for a policy's or a
	 * security_barrier view's: a node with such a call is batched all the same, so that the call
	 * goes out isolated (issue 63)
	 */
	if (!rs_setting_bool("batch_calls", true))
	{
		if (planning.max_security_level == 0)
			return stmt;
		planning.security_only = true;
	}
	stmt->planTree = rs_walk_plan(stmt->planTree, &planning, stmt->rtable);
	foreach(lc, stmt->subplans)
		lfirst(lc) = rs_walk_plan((Plan *) lfirst(lc), &planning, stmt->rtable);
	/* an EXISTS sublink needs one row of its plan (the plans are batched by now) */
	rs_bound_exists(stmt->planTree, stmt->subplans);
	foreach(lc, stmt->subplans)
		rs_bound_exists((Plan *) lfirst(lc), stmt->subplans);
	return stmt;
}

void
rs_batch_calls_init(void)
{
	rs_per_row_init();
	rs_batch_scan_init();

	prev_planner_hook = planner_hook;
	planner_hook = rs_planner;
	prev_set_rel_pathlist_hook = set_rel_pathlist_hook;
	set_rel_pathlist_hook = rs_set_rel_pathlist;
}
