/*
 * The pass-through node: where a node's llm_* calls cannot be batched it runs as planned, one call
 * per row, under this node, whose only job is to say so in EXPLAIN, with the reason.
 */
#include "postgres.h"

#include "commands/explain.h"
#include "executor/executor.h"
#include "nodes/extensible.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"

#include "batch_calls.h"

static CustomScanMethods rs_per_row_scan_methods;

/*
 * Where the calls cannot be batched, the node runs as planned under a pass-through node whose only
 * job is to say so in EXPLAIN, with the reason.
 */
Plan *
rs_per_row_plan(Plan *plan, const char *reason)
{
	CustomScan *cscan = makeNode(CustomScan);
	List	   *tlist = NIL;
	ListCell   *lc;
	int			i = 0;

	foreach(lc, plan->targetlist)
	{
		TargetEntry *te = lfirst(lc);

		i++;
		tlist = lappend(tlist, makeTargetEntry((Expr *) makeVar(INDEX_VAR, i, exprType((Node *) te->expr),
																exprTypmod((Node *) te->expr),
																exprCollation((Node *) te->expr), 0),
											   i, te->resname, te->resjunk));
	}
	cscan->scan.plan.targetlist = tlist;
	cscan->custom_scan_tlist = plan->targetlist;
	cscan->custom_private = list_make1(makeString(pstrdup(reason)));
	cscan->custom_plans = list_make1(plan);
	cscan->methods = &rs_per_row_scan_methods;
	cscan->scan.plan.startup_cost = plan->startup_cost;
	cscan->scan.plan.total_cost = plan->total_cost;
	cscan->scan.plan.plan_rows = plan->plan_rows;
	cscan->scan.plan.plan_width = plan->plan_width;
	cscan->scan.plan.extParam = bms_copy(plan->extParam);
	cscan->scan.plan.allParam = bms_copy(plan->allParam);
	return (Plan *) cscan;
}

static bool
rs_per_row_recheck(ScanState *ss, TupleTableSlot *slot)
{
	return true;
}

static CustomExecMethods rs_per_row_exec_methods;

static Node *
rs_per_row_create(CustomScan *cscan)
{
	CustomScanState *css = (CustomScanState *) newNode(sizeof(CustomScanState), T_CustomScanState);

	css->methods = &rs_per_row_exec_methods;
	return (Node *) css;
}

static void
rs_per_row_begin(CustomScanState *node, EState *estate, int eflags)
{
	node->custom_ps = list_make1(ExecInitNode(linitial(((CustomScan *) node->ss.ps.plan)->custom_plans), estate, eflags));
}

static TupleTableSlot *
rs_per_row_next(ScanState *ss)
{
	TupleTableSlot *in = ExecProcNode(linitial(((CustomScanState *) ss)->custom_ps));

	if (TupIsNull(in))
		return ExecClearTuple(ss->ss_ScanTupleSlot);
	return ExecCopySlot(ss->ss_ScanTupleSlot, in);
}

static TupleTableSlot *
rs_per_row_exec(CustomScanState *node)
{
	return ExecScan(&node->ss, rs_per_row_next, rs_per_row_recheck);
}

static void
rs_per_row_end(CustomScanState *node)
{
	ExecEndNode(linitial(node->custom_ps));
}

static void
rs_per_row_rescan(CustomScanState *node)
{
	ExecReScan(linitial(node->custom_ps));
}

static void
rs_per_row_explain(CustomScanState *node, List *ancestors, ExplainState *es)
{
	ExplainPropertyText("LLM Calls", "one per row, not batched", es);
	ExplainPropertyText("Why", strVal(linitial(((CustomScan *) node->ss.ps.plan)->custom_private)), es);
}

void
rs_per_row_init(void)
{
	rs_per_row_scan_methods.CustomName = "relserve per-row";
	rs_per_row_scan_methods.CreateCustomScanState = rs_per_row_create;
	RegisterCustomScanMethods(&rs_per_row_scan_methods);
	rs_per_row_exec_methods.CustomName = "relserve per-row";
	rs_per_row_exec_methods.BeginCustomScan = rs_per_row_begin;
	rs_per_row_exec_methods.ExecCustomScan = rs_per_row_exec;
	rs_per_row_exec_methods.EndCustomScan = rs_per_row_end;
	rs_per_row_exec_methods.ReScanCustomScan = rs_per_row_rescan;
	rs_per_row_exec_methods.ExplainCustomScan = rs_per_row_explain;
}
