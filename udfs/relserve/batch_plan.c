/*
 * The batch node in the plan: each plan node whose target list or quals call llm_* functions gets
 * the custom scan in its place, over a copy of the node that computes what the calls read and keeps
 * the quals that may run first (or, where the calls cannot be batched, the pass-through node).
 */
#include "postgres.h"

#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/clauses.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"

#include "batch_calls.h"
#include "relserve.h"

/* the input list: every Var the node's expressions read, computed by the input node */
typedef struct RsRewrite
{
	List	   *input;			/* TargetEntry list: what the input node computes */
	List	   *sites;			/* RsSite *, in answer order */
	int			answers_from;	/* attno of the first answer in the custom scan tuple */
} RsRewrite;

static int
rs_input_col(RsRewrite *rw, Expr *expr)
{
	ListCell   *lc;
	int			i = 0;

	foreach(lc, rw->input)
	{
		i++;
		if (equal(((TargetEntry *) lfirst(lc))->expr, expr))
			return i;
	}
	rw->input = lappend(rw->input, makeTargetEntry((Expr *) copyObject(expr), list_length(rw->input) + 1, NULL, false));
	return list_length(rw->input);
}

static bool
rs_collect_vars(Node *node, RsRewrite *rw)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		rs_input_col(rw, (Expr *) node);
		return false;
	}
	return expression_tree_walker(node, rs_collect_vars, rw);
}

/* the node's expressions over the custom scan's tuple: Vars by input column, calls by answer */
static Node *
rs_to_scan_tuple(Node *node, RsRewrite *rw)
{
	ListCell   *lc;
	int			k = 0;

	if (node == NULL)
		return NULL;
	foreach(lc, rw->sites)
	{
		RsSite	   *site = lfirst(lc);

		if (node == (Node *) site->call)
			return (Node *) makeVar(INDEX_VAR, rw->answers_from + k, site->call->funcresulttype, -1,
									site->call->funccollid, 0);
		k++;
	}
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) node;

		return (Node *) makeVar(INDEX_VAR, rs_input_col(rw, (Expr *) node), v->vartype, v->vartypmod,
								v->varcollid, 0);
	}
	return expression_tree_mutator(node, rs_to_scan_tuple, rw);
}

static bool
rs_wrappable(Plan *plan)
{
	switch (nodeTag(plan))
	{
		case T_SeqScan:
		case T_SampleScan:
		case T_IndexScan:
		case T_IndexOnlyScan:
		case T_BitmapHeapScan:
		case T_TidScan:
		case T_TidRangeScan:
		case T_SubqueryScan:
		case T_FunctionScan:
		case T_ValuesScan:
		case T_CteScan:
		case T_WorkTableScan:
		case T_ForeignScan:
			return true;
		case T_Result:
			return plan->lefttree != NULL;	/* a projection over a child */
		default:
			return false;
	}
}

/* the relation a scan reads, InvalidOid for anything else (a subquery, a function, a projection) */
static Oid
rs_scan_relid(Plan *plan, List *rtable)
{
	Index		scanrelid;
	RangeTblEntry *rte;

	if (IsA(plan, Result))
		return InvalidOid;
	scanrelid = ((Scan *) plan)->scanrelid;
	if (scanrelid == 0)
		return InvalidOid;
	rte = rt_fetch(scanrelid, rtable);
	return rte->rtekind == RTE_RELATION ? rte->relid : InvalidOid;
}

/*
 * Each qual with calls gets a batch of its own, so that a later one sees only the rows the earlier
 * ones kept (issue 64): security stage by security stage, and in a stage its label quals (filter,
 * classify) before those that generate text, each in the planner's order. The label quals of one
 * stage may run in any order (PostgreSQL would run them side by side in one stage): the run
 * measures them on its first window and, under relserve.order_quals, orders them by LLM cost per
 * row removed (batch_scan.c). Sets each qual's batch, and each batch's stage and whether it is a
 * label qual as lists; returns how many batches the quals take.
 */
static int
rs_stage_batches(RsQual *quals, int n, int nstages, List **groups, List **labels)
{
	int			nb = 0;
	int			stage,
				pass,
				i;

	for (stage = 1; stage <= nstages; stage++)
		for (pass = 0; pass < 2; pass++)
			for (i = 0; i < n; i++)
			{
				if (!quals[i].calls || quals[i].slot != 2 * stage - 1 || quals[i].labels_only != (pass == 0))
					continue;
				quals[i].batch = ++nb;
				*groups = lappend(*groups, makeInteger(stage));
				*labels = lappend(*labels, makeBoolean(quals[i].labels_only));
			}
	return nb;
}

/* the custom scan in place of ``plan``, or ``plan`` as it was */
static Plan *
rs_batch_plan(Plan *plan, RsPlanning *planning, List *rtable)
{
	RsFind		f = {planning->extension, NIL, -1, NULL};
	RsRewrite	rw = {NIL, NIL, 0};
	CustomScan *cscan;
	Plan	   *input;
	RsQual	   *quals;
	int			nquals = list_length(plan->qual);
	int			nbatches = 0,
				nstages = 0;
	bool		levels_known = true,
				any_isolated = false,
				waits;
	List	   *input_qual = NIL,
			   *stages = NIL,
			   *waits_after = NIL,
			   *groups = NIL,
			   *labels = NIL,
			   *values = NIL,
			   *priv,
			   *scan_tlist;
	ListCell   *lc;
	int			i,
				k;

	if (!rs_wrappable(plan))
	{
		if (planning->security_only)
			return plan;
		/* an aggregate's argument, a window function's, a join's: evaluated by this node, per row */
		rs_find_walker((Node *) plan->targetlist, &f);
		rs_find_walker((Node *) plan->qual, &f);
		if (f.sites != NIL || f.refused)
			return rs_per_row_plan(plan, "an llm_* call in an aggregate's or window function's arguments or in a join's "
								   "condition runs per row (compute it in a subquery: SELECT count(a) FROM "
								   "(SELECT llm_map(...) AS a FROM t) s)");
		return plan;
	}
	rs_find_walker((Node *) plan->targetlist, &f);
	quals = palloc0(sizeof(RsQual) * Max(nquals, 1));
	i = 0;
	foreach(lc, plan->qual)
	{
		int			before = list_length(f.sites);

		f.qual = i;
		rs_find_walker((Node *) lfirst(lc), &f);
		quals[i].expr = lfirst(lc);
		quals[i].calls = list_length(f.sites) > before;
		i++;
	}
	if (f.refused)
		return planning->security_only ? plan : rs_per_row_plan(plan, f.refused);
	if (f.sites == NIL)
		return plan;

	/* where each qual runs: only the quals' calls make the order matter */
	for (i = 0; i < nquals; i++)
		if (quals[i].calls)
			break;
	if (i < nquals)
	{
		Oid			relid = rs_scan_relid(plan, rtable);

		for (i = 0; i < nquals; i++)
		{
			quals[i].level = rs_security_level(quals[i].expr, relid, planning);
			quals[i].leakproof = !quals[i].calls && !contain_leaked_vars((Node *) quals[i].expr);
			levels_known = levels_known && quals[i].level != RS_LEVEL_UNKNOWN;
			quals[i].labels_only = quals[i].calls;
		}
		foreach(lc, f.sites)
		{
			RsSite	   *site = lfirst(lc);

			if (site->qual >= 0 && strcmp(site->kind, "filter") != 0 && strcmp(site->kind, "classify") != 0)
				quals[site->qual].labels_only = false;
		}
		nstages = rs_place_quals(quals, nquals);
		nbatches = rs_stage_batches(quals, nquals, nstages, &groups, &labels);
	}
	foreach(lc, f.sites)
	{
		RsSite	   *site = lfirst(lc);

		site->batch = site->qual >= 0 ? quals[site->qual].batch : nbatches + 1;
		/*
		 * a call in a qual below the statement's own security level (a row-level security policy's,
		 * a security_barrier view's; one whose level is not known, when there are such quals) runs
		 * over rows the reader may not see: it goes out isolated (issue 63)
		 */
		site->isolated = site->qual >= 0 && planning->max_security_level > 0 &&
			(quals[site->qual].level == RS_LEVEL_UNKNOWN ||
			 quals[site->qual].level < (int) planning->max_security_level);
		any_isolated = any_isolated || site->isolated;
	}
	if (planning->security_only && !any_isolated)
		return plan;			/* batching is off and no call here is a security qual's */
	/* the answers in batch order */
	for (k = 1; k <= nbatches + 1; k++)
		foreach(lc, f.sites)
			if (((RsSite *) lfirst(lc))->batch == k)
				rw.sites = lappend(rw.sites, lfirst(lc));

	/* the input node: the same node, computing every Var the rest reads and keeping the quals of slot 0 */
	rs_collect_vars((Node *) plan->targetlist, &rw);
	for (i = 0; i < nquals; i++)
	{
		if (quals[i].slot == 0)
			input_qual = lappend(input_qual, quals[i].expr);
		else
			rs_collect_vars((Node *) quals[i].expr, &rw);
	}
	input = (Plan *) copyObject(plan);
	input->targetlist = rw.input;
	input->qual = input_qual;
	rw.answers_from = list_length(rw.input) + 1;

	/*
	 * each batch's qual, and at each place in the run the quals that waited for a security stage:
	 * they run after the stage's last batch, whichever of its quals the run puts there
	 */
	for (k = 1; k <= nbatches; k++)
	{
		List	   *wait = NIL;
		int			stage = intVal(list_nth(groups, k - 1));

		for (i = 0; i < nquals; i++)
			if (quals[i].batch == k)
				stages = lappend(stages, list_make1(rs_to_scan_tuple((Node *) quals[i].expr, &rw)));
		if (k == nbatches || intVal(list_nth(groups, k)) != stage)
			for (i = 0; i < nquals; i++)
				if (quals[i].slot == 2 * stage)
					wait = lappend(wait, rs_to_scan_tuple((Node *) quals[i].expr, &rw));
		waits_after = lappend(waits_after, wait);
	}
	foreach(lc, rw.sites)
		values = lappend(values, rs_to_scan_tuple(llast(((RsSite *) lfirst(lc))->call->args), &rw));

	cscan = makeNode(CustomScan);
	cscan->scan.plan.targetlist = (List *) rs_to_scan_tuple((Node *) plan->targetlist, &rw);
	cscan->scan.plan.qual = NIL;	/* the batches' quals run in rs_next, each in its place */
	Assert(list_length(rw.input) == rw.answers_from - 1);
	scan_tlist = list_copy(rw.input);
	/* EXPLAIN says why quals wait for a batch: they keep PostgreSQL's security order */
	waits = nstages > 1;
	for (i = 0; i < nquals; i++)
		waits = waits || (!quals[i].calls && quals[i].slot > 0);
	priv = list_make3(makeInteger(nbatches),
					  makeString(!waits ? "" : levels_known
								 ? "PostgreSQL's: a qual of a higher security level (the query's own, above a row-level "
								 "security policy's or a security_barrier view's) sees only the rows the lower levels kept"
								 : "the planner's: a qual whose security level is not known keeps its place"),
					  makeInteger(0));	/* the row bound: a LIMIT above sets it (rs_bound_batch) */
	priv = lappend(priv, groups);
	priv = lappend(priv, labels);
	priv = lappend(priv, makeString(pstrdup("")));	/* what set the row bound: "a LIMIT", "an EXISTS" */
	k = 0;
	foreach(lc, rw.sites)
	{
		RsSite	   *site = lfirst(lc);

		scan_tlist = lappend(scan_tlist, makeTargetEntry((Expr *) site->call, rw.answers_from + k++, NULL, false));
		priv = lappend(priv, makeString(pstrdup(site->kind)));
		priv = lappend(priv, makeString(site->template));
		priv = lappend(priv, makeString(site->spec ? site->spec : pstrdup("")));
		priv = lappend(priv, makeString(pstrdup(site->form)));
		priv = lappend(priv, makeInteger(site->batch));
		priv = lappend(priv, makeBoolean(site->qual >= 0));
		priv = lappend(priv, makeBoolean(site->isolated));
	}
	cscan->custom_scan_tlist = scan_tlist;
	cscan->custom_private = priv;
	cscan->custom_exprs = list_make3(values, stages, waits_after);
	cscan->custom_plans = list_make1(input);
	cscan->scan.scanrelid = 0;
	cscan->methods = &rs_batch_scan_methods;
	cscan->scan.plan.startup_cost = plan->startup_cost;
	cscan->scan.plan.total_cost = plan->total_cost;
	cscan->scan.plan.plan_rows = plan->plan_rows;
	cscan->scan.plan.plan_width = plan->plan_width;
	cscan->scan.plan.parallel_aware = false;
	cscan->scan.plan.parallel_safe = false;
	cscan->scan.plan.plan_node_id = plan->plan_node_id;
	cscan->scan.plan.extParam = bms_copy(plan->extParam);
	cscan->scan.plan.allParam = bms_copy(plan->allParam);
	return (Plan *) cscan;
}

static List *
rs_walk_list(List *plans, RsPlanning *planning, List *rtable)
{
	ListCell   *lc;

	foreach(lc, plans)
		lfirst(lc) = rs_walk_plan((Plan *) lfirst(lc), planning, rtable);
	return plans;
}

/*
 * A LIMIT whose count (and offset) are constants, right above a batch node or above projections and
 * qual-free subquery scans of one, needs only count + offset of its rows: the node reads its input
 * in windows that grow from a small one and stops reading once the LIMIT has its rows (issue 64).
 * Anything that needs every row first (a Sort, an aggregate, a join, a qual between) keeps the
 * node's full windows.
 */
static void
rs_bound_child(Plan *child, int64 bound, const char *by)
{
	while (child != NULL && child->qual == NIL)
	{
		if (IsA(child, Result) && ((Result *) child)->resconstantqual == NULL)
			child = child->lefttree;
		else if (IsA(child, SubqueryScan))
			child = ((SubqueryScan *) child)->subplan;
		else
			break;
	}
	if (child != NULL && IsA(child, CustomScan) && ((CustomScan *) child)->methods == &rs_batch_scan_methods)
	{
		List	   *priv = ((CustomScan *) child)->custom_private;

		lthird(priv) = makeInteger((int) bound);
		list_nth_cell(priv, 5)->ptr_value = makeString(pstrdup(by));
	}
}

static void
rs_bound_batch(Limit *limit)
{
	Const	   *count = (Const *) limit->limitCount;
	Const	   *offset = (Const *) limit->limitOffset;
	int64		bound;

	if (limit->limitOption != LIMIT_OPTION_COUNT || count == NULL || !IsA(count, Const) || count->constisnull)
		return;
	if (offset != NULL && (!IsA(offset, Const) || offset->constisnull))
		return;
	bound = DatumGetInt64(count->constvalue) + (offset ? DatumGetInt64(offset->constvalue) : 0);
	if (bound < 1 || bound > RS_MAX_ROW_BOUND)
		return;
	rs_bound_child(limit->plan.lefttree, bound, "a LIMIT");
}

/* an EXISTS sublink's plan: the executor stops it at its first row (ExecScanSubPlan) */
static bool
rs_exists_walker(Node *node, List *subplans)
{
	if (node == NULL)
		return false;
	if (IsA(node, SubPlan) && ((SubPlan *) node)->subLinkType == EXISTS_SUBLINK)
		rs_bound_child(list_nth(subplans, ((SubPlan *) node)->plan_id - 1), 1, "an EXISTS");
	return expression_tree_walker(node, rs_exists_walker, subplans);
}

/*
 * An EXISTS needs one row of its subquery, as a LIMIT 1 would: the batch node at the top of an
 * EXISTS sublink's plan (uncorrelated, an InitPlan; correlated, a SubPlan run again per outer row)
 * reads a small window first and more only while no row has passed. The sublinks are found in
 * the expressions of every plan node, its initPlans included.
 */
void
rs_bound_exists(Plan *plan, List *subplans)
{
	ListCell   *lc;

	if (plan == NULL)
		return;
	rs_exists_walker((Node *) plan->targetlist, subplans);
	rs_exists_walker((Node *) plan->qual, subplans);
	rs_exists_walker((Node *) plan->initPlan, subplans);
	rs_bound_exists(plan->lefttree, subplans);
	rs_bound_exists(plan->righttree, subplans);
	switch (nodeTag(plan))
	{
		case T_NestLoop:
		case T_MergeJoin:
		case T_HashJoin:
			rs_exists_walker((Node *) ((Join *) plan)->joinqual, subplans);
			break;
		case T_Result:
			rs_exists_walker(((Result *) plan)->resconstantqual, subplans);
			break;
		case T_Append:
			foreach(lc, ((Append *) plan)->appendplans)
				rs_bound_exists(lfirst(lc), subplans);
			break;
		case T_MergeAppend:
			foreach(lc, ((MergeAppend *) plan)->mergeplans)
				rs_bound_exists(lfirst(lc), subplans);
			break;
		case T_SubqueryScan:
			rs_bound_exists(((SubqueryScan *) plan)->subplan, subplans);
			break;
		case T_CustomScan:
			rs_exists_walker((Node *) ((CustomScan *) plan)->custom_exprs, subplans);
			foreach(lc, ((CustomScan *) plan)->custom_plans)
				rs_bound_exists(lfirst(lc), subplans);
			break;
		default:
			break;
	}
}

Plan *
rs_walk_plan(Plan *plan, RsPlanning *planning, List *rtable)
{
	if (plan == NULL)
		return NULL;
	plan->lefttree = rs_walk_plan(plan->lefttree, planning, rtable);
	plan->righttree = rs_walk_plan(plan->righttree, planning, rtable);
	switch (nodeTag(plan))
	{
		case T_Append:
			rs_walk_list(((Append *) plan)->appendplans, planning, rtable);
			break;
		case T_MergeAppend:
			rs_walk_list(((MergeAppend *) plan)->mergeplans, planning, rtable);
			break;
		case T_SubqueryScan:
			((SubqueryScan *) plan)->subplan = rs_walk_plan(((SubqueryScan *) plan)->subplan, planning, rtable);
			break;
		case T_CustomScan:
			rs_walk_list(((CustomScan *) plan)->custom_plans, planning, rtable);
			break;
		case T_Limit:
			rs_bound_batch((Limit *) plan);
			break;
		default:
			break;
	}
	return rs_batch_plan(plan, planning, rtable);
}
