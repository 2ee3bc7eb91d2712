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
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/explain.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/extensible.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/clauses.h"
#include "optimizer/optimizer.h"
#include "optimizer/paths.h"
#include "optimizer/planner.h"
#include "parser/parse_func.h"
#include "parser/parsetree.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/ruleutils.h"
#include "utils/snapmgr.h"

#include "poll_events.h"
#include "relserve.h"

#define RS_DEFAULT_BATCH_WINDOW 2000
#define RS_FIELDS_PER_SITE 6
#define RS_LEVEL_UNKNOWN (-1)

static planner_hook_type prev_planner_hook = NULL;
static set_rel_pathlist_hook_type prev_set_rel_pathlist_hook = NULL;

/* ------------------------------------------------------------------ finding the calls */

typedef struct RsSite
{
	FuncExpr   *call;
	const char *kind;			/* map, filter, classify, extract */
	char	   *template;
	char	   *spec;			/* labels as a JSON array, or the JSON schema; NULL for none */
	const char *form;			/* "args" (VARIADIC text[]) or "fields" (jsonb) */
	int			qual;			/* the qual it is in (0-based), -1 for the target list */
	int			batch;			/* 1, 2, ...: which batch sends it (the target list's is the last) */
} RsSite;

typedef struct RsFind
{
	Oid			schema;			/* the extension: only its llm_* functions count */
	List	   *sites;			/* RsSite * */
	int			qual;			/* the qual being walked, -1 for the target list */
	const char *refused;		/* why the node cannot be batched, or NULL */
} RsFind;

static const char *
rs_llm_kind(Oid funcid, Oid schema)
{
	static const char *const names[] = {"map", "filter", "classify", "extract", "score", NULL};
	char	   *name = get_func_name(funcid);
	int			i;

	if (name == NULL || strncmp(name, "llm_", 4) != 0)
		return NULL;
	for (i = 0; names[i]; i++)
		if (strcmp(name + 4, names[i]) == 0)
			/* relserve's own function, not one of the same name elsewhere */
			return getExtensionOfObject(ProcedureRelationId, funcid) == schema ? names[i] : NULL;
	return NULL;
}

static char *
rs_const_text(Node *node)
{
	if (node == NULL || !IsA(node, Const) || ((Const *) node)->constisnull)
		return NULL;
	{
		Const	   *c = (Const *) node;
		Oid			out;
		bool		varlena;

		getTypeOutputInfo(c->consttype, &out, &varlena);
		return OidOutputFunctionCall(out, c->constvalue);
	}
}

static char *
rs_labels_json(Node *node)
{
	Datum	   *items;
	bool	   *nulls;
	int			n,
				i;
	StringInfoData buf;

	if (node == NULL || !IsA(node, Const) || ((Const *) node)->constisnull ||
		((Const *) node)->consttype != TEXTARRAYOID)
		return NULL;
	deconstruct_array(DatumGetArrayTypeP(((Const *) node)->constvalue), TEXTOID, -1, false, TYPALIGN_INT,
					  &items, &nulls, &n);
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		if (nulls[i])
			appendStringInfoString(&buf, "null");
		else
			escape_json(&buf, TextDatumGetCString(items[i]));
	}
	appendStringInfoChar(&buf, ']');
	return buf.data;
}

static bool rs_find_walker(Node *node, RsFind *f);

/* an llm_* call found where it is evaluated for every row: a call site, or why not */
static bool
rs_site(FuncExpr *call, const char *kind, RsFind *f)
{
	RsSite	   *site = palloc0(sizeof(RsSite));
	Node	   *last = llast(call->args);
	Oid			last_type = exprType(last);

	site->call = call;
	site->kind = kind;
	site->qual = f->qual;
	site->template = rs_const_text(linitial(call->args));
	if (site->template == NULL)
	{
		f->refused = "the template of an llm_* call is not a constant";
		return true;
	}
	if (strcmp(kind, "classify") == 0)
	{
		site->spec = rs_labels_json(lsecond(call->args));
		if (site->spec == NULL)
		{
			f->refused = "the labels of an llm_classify call are not a constant";
			return true;
		}
	}
	else if (strcmp(kind, "extract") == 0)
	{
		site->spec = rs_const_text(lsecond(call->args));
		if (site->spec == NULL)
		{
			f->refused = "the JSON schema of an llm_extract call is not a constant";
			return true;
		}
	}
	site->form = last_type == JSONBOID ? "fields" : "args";
	if (contain_subplans(last))
	{
		f->refused = "the arguments of an llm_* call contain a sub-select";
		return true;
	}
	/* a call inside the arguments of another runs per row */
	{
		RsFind		inner = *f;

		inner.sites = NIL;
		rs_find_walker(last, &inner);
		if (inner.sites != NIL || inner.refused)
		{
			f->refused = "an llm_* call is inside the arguments of another";
			return true;
		}
	}
	f->sites = lappend(f->sites, site);
	return false;
}

static bool
rs_find_walker(Node *node, RsFind *f)
{
	if (node == NULL || f->refused)
		return false;
	if (IsA(node, FuncExpr))
	{
		FuncExpr   *call = (FuncExpr *) node;
		const char *kind = rs_llm_kind(call->funcid, f->schema);

		if (kind)
			return rs_site(call, kind, f);
	}
	/*
	 * Under these, a call runs only for some rows (or not at all): batching it would call the model
	 * for rows the query never asks about.
	 */
	if (IsA(node, CaseExpr) || IsA(node, CoalesceExpr) || IsA(node, MinMaxExpr) || IsA(node, NullIfExpr) ||
		(IsA(node, BoolExpr) && ((BoolExpr *) node)->boolop != NOT_EXPR) || IsA(node, SubPlan) ||
		IsA(node, AlternativeSubPlan))
	{
		RsFind		probe = *f;

		probe.sites = NIL;
		expression_tree_walker(node, rs_find_walker, &probe);
		if (probe.sites != NIL || probe.refused)
			f->refused = "an llm_* call is inside CASE, COALESCE, AND/OR or a sub-select, where it runs for some rows only";
		return false;
	}
	return expression_tree_walker(node, rs_find_walker, f);
}

/* ------------------------------------------------------------------ the planner's security levels */

/*
 * What the planner knew of a relation's quals while it planned the statement: each qual's
 * security_level (RestrictInfo), which the finished plan no longer carries.
 */
typedef struct RsKnownQual
{
	Expr	   *clause;
	Oid			relid;			/* the relation it restricts; InvalidOid for a subquery, function... */
	Index		security_level;
} RsKnownQual;

typedef struct RsPlanning
{
	MemoryContext cxt;
	Oid			extension;		/* relserve's: only its llm_* functions are batched */
	List	   *known;			/* RsKnownQual *, of every relation planned */
	Index		max_security_level; /* the highest qual_security_level seen: 0 without security quals */
} RsPlanning;

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

/* a copy of an expression whose Vars do not say which range table entry they read: setrefs renumbers them */
static Node *
rs_without_varnos(Node *node, void *context)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) copyObject(node);

		v->varno = 1;
		v->varnosyn = 0;
		v->varattnosyn = 0;
		return (Node *) v;
	}
	return expression_tree_mutator(node, rs_without_varnos, context);
}

/* a plan qual's security level as the planner knew it, or RS_LEVEL_UNKNOWN */
static int
rs_security_level(Expr *qual, Oid relid, RsPlanning *planning)
{
	Node	   *mine = NULL;
	int			level = RS_LEVEL_UNKNOWN;
	ListCell   *lc;

	if (planning->max_security_level == 0)
		return 0;				/* no security quals in the statement: every qual is level 0 */
	foreach(lc, planning->known)
	{
		RsKnownQual *k = lfirst(lc);

		if (k->relid != relid)
			continue;
		if (mine == NULL)
			mine = rs_without_varnos((Node *) qual, NULL);
		if (!equal(mine, rs_without_varnos((Node *) k->clause, NULL)))
			continue;
		if (level != RS_LEVEL_UNKNOWN && level != (int) k->security_level)
			return RS_LEVEL_UNKNOWN;	/* the same qual at two levels: it keeps its place */
		level = (int) k->security_level;
	}
	return level;
}

/* ------------------------------------------------------------------ where each qual runs */

typedef struct RsQual
{
	Expr	   *expr;
	bool		calls;			/* it has batched llm_* call sites */
	int			level;			/* its security level, or RS_LEVEL_UNKNOWN */
	bool		leakproof;
	int			slot;			/* 0: on the input node; 2k-1: in batch k; 2k: here, right after batch k */
} RsQual;

/* PostgreSQL's rule: a qual may run before one that comes earlier in the planner's order only if it is leakproof or its level is not higher */
static bool
rs_may_run_before(const RsQual *later, const RsQual *earlier)
{
	return later->leakproof ||
		(later->level != RS_LEVEL_UNKNOWN && earlier->level != RS_LEVEL_UNKNOWN && later->level <= earlier->level);
}

/*
 * Each qual's slot, in the planner's order: the earliest one after every earlier qual it may not run
 * ahead of. A qual with calls joins a batch only after such a qual's batch or slot (never in the same
 * batch: its calls would see the rows that qual drops); a qual without calls runs right after it.
 * Returns how many batches the quals' calls take.
 */
static int
rs_place_quals(RsQual *quals, int n)
{
	int			nbatches = 0;
	int			i,
				j;

	for (j = 0; j < n; j++)
	{
		int			after = -1;

		for (i = 0; i < j; i++)
			if (!rs_may_run_before(&quals[j], &quals[i]))
				after = Max(after, quals[i].slot);
		if (quals[j].calls)
			quals[j].slot = after < 0 ? 1 : (after % 2 == 1 ? after + 2 : after + 1);
		else
			quals[j].slot = after < 0 ? 0 : (after % 2 == 1 ? after + 1 : after);
		nbatches = Max(nbatches, (quals[j].slot + 1) / 2);
	}
	return nbatches;
}

/* ------------------------------------------------------------------ rewriting the plan */

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

static CustomScanMethods rs_batch_scan_methods;
static CustomScanMethods rs_per_row_scan_methods;

/*
 * Where the calls cannot be batched, the node runs as planned under a pass-through node whose only
 * job is to say so in EXPLAIN, with the reason.
 */
static Plan *
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
	int			nbatches = 0;
	bool		levels_known = true,
				waits;
	List	   *input_qual = NIL,
			   *stages = NIL,
			   *values = NIL,
			   *priv,
			   *scan_tlist;
	ListCell   *lc;
	int			i,
				k;

	if (!rs_wrappable(plan))
	{
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
		return rs_per_row_plan(plan, f.refused);
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
		}
		nbatches = rs_place_quals(quals, nquals);
	}
	foreach(lc, f.sites)
	{
		RsSite	   *site = lfirst(lc);

		site->batch = site->qual >= 0 ? (quals[site->qual].slot + 1) / 2 : nbatches + 1;
	}
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

	/* each batch's quals: its calls' quals, then those that waited for them, in the planner's order */
	for (k = 1; k <= nbatches; k++)
	{
		List	   *stage = NIL;

		for (i = 0; i < nquals; i++)
			if (quals[i].slot == 2 * k - 1)
				stage = lappend(stage, rs_to_scan_tuple((Node *) quals[i].expr, &rw));
		for (i = 0; i < nquals; i++)
			if (quals[i].slot == 2 * k)
				stage = lappend(stage, rs_to_scan_tuple((Node *) quals[i].expr, &rw));
		stages = lappend(stages, stage);
	}
	foreach(lc, rw.sites)
		values = lappend(values, rs_to_scan_tuple(llast(((RsSite *) lfirst(lc))->call->args), &rw));

	cscan = makeNode(CustomScan);
	cscan->scan.plan.targetlist = (List *) rs_to_scan_tuple((Node *) plan->targetlist, &rw);
	cscan->scan.plan.qual = NIL;	/* the batches' quals run in rs_next, each in its place */
	Assert(list_length(rw.input) == rw.answers_from - 1);
	scan_tlist = list_copy(rw.input);
	/* EXPLAIN says why quals wait for a batch: they keep PostgreSQL's security order */
	waits = nbatches > 1;
	for (i = 0; i < nquals; i++)
		waits = waits || (!quals[i].calls && quals[i].slot > 0);
	priv = list_make2(makeInteger(nbatches),
					  makeString(!waits ? "" : levels_known
								 ? "PostgreSQL's: a qual of a higher security level (the query's own, above a row-level "
								 "security policy's or a security_barrier view's) sees only the rows the lower levels kept"
								 : "the planner's: a qual whose security level is not known keeps its place"));
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
	}
	cscan->custom_scan_tlist = scan_tlist;
	cscan->custom_private = priv;
	cscan->custom_exprs = list_make2(values, stages);
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

static Plan *rs_walk_plan(Plan *plan, RsPlanning *planning, List *rtable);

static List *
rs_walk_list(List *plans, RsPlanning *planning, List *rtable)
{
	ListCell   *lc;

	foreach(lc, plans)
		lfirst(lc) = rs_walk_plan((Plan *) lfirst(lc), planning, rtable);
	return plans;
}

static Plan *
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
		default:
			break;
	}
	return rs_batch_plan(plan, planning, rtable);
}

static bool
rs_batching_on(void)
{
	const char *v = rs_setting("batch_calls");
	bool		on = true;

	if (v[0] != '\0' && !parse_bool(v, &on))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("relserve.batch_calls must be a boolean (on or off), got \"%s\"", v)));
	return on;
}

static PlannedStmt *
rs_planner(Query *parse, const char *query_string, int cursorOptions, ParamListInfo boundParams)
{
	RsPlanning	planning = {CurrentMemoryContext, InvalidOid, NIL, 0};
	RsPlanning *outer = rs_planning;
	bool		batching;
	PlannedStmt *stmt;
	ListCell   *lc;

	batching = parse->commandType == CMD_SELECT && IsTransactionState() && rs_batching_on() &&
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
	stmt->planTree = rs_walk_plan(stmt->planTree, &planning, stmt->rtable);
	foreach(lc, stmt->subplans)
		lfirst(lc) = rs_walk_plan((Plan *) lfirst(lc), &planning, stmt->rtable);
	return stmt;
}

/* ------------------------------------------------------------------ execution */

typedef struct RsExecSite
{
	char	   *kind;
	char	   *template;
	char	   *spec;
	char	   *form;
	int			batch;
	bool		in_qual;
	char	   *name;			/* llm_<kind>, for messages */
	Oid			result_type;
	ExprState  *value;			/* its value argument, over the scan tuple */
	char	   *handle;			/* its relQuery for the current window, while it runs */
	int		   *window_index;	/* the window row of each row sent */
	int			nsent;
} RsExecSite;

typedef struct RsWinRow
{
	Datum	   *values;			/* the scan tuple: inputs, then one answer per site */
	bool	   *nulls;
	int			pending;		/* answers still to come in the current batch */
	bool		dropped;		/* a qual removed it */
} RsWinRow;

typedef struct RsBatchState
{
	CustomScanState css;
	RsExecSite *sites;
	int			nsites;
	int			ninputs;
	int			nbatches;		/* the quals' batches; the target list's calls come after them */
	ExprState **stage_quals;	/* per batch of the quals: the quals that run once its answers are in */
	char	   *qual_order;		/* why quals wait for a batch (EXPLAIN), or "" */
	int			window_rows;
	FmgrInfo	open_fn;
	FmgrInfo	poll_fn;
	FmgrInfo	close_fn;
	MemoryContext window_cxt;
	RsWinRow   *rows;
	int			nrows;
	int			batch;			/* 0: no window; 1..nbatches: the quals' batches; nbatches + 1: the target list's, rows go out */
	int			next_emit;		/* rows go out in their input order: a Sort or an index below may have ordered them */
	bool		input_done;
	bool		raise_on_error;
	int			relqueries;
	long		rows_sent;
	/* EXPLAIN ANALYZE: the windows' relQueries, as estimated when each started and as they ran (issue 47) */
	double		estimated_s;
	double		latency_s;
	bool		have_estimate;
} RsBatchState;

static CustomExecMethods rs_batch_exec_methods;

static Node *
rs_create_state(CustomScan *cscan)
{
	RsBatchState *st = (RsBatchState *) newNode(sizeof(RsBatchState), T_CustomScanState);

	st->css.methods = &rs_batch_exec_methods;
	return (Node *) st;
}

static void
rs_begin(CustomScanState *node, EState *estate, int eflags)
{
	RsBatchState *st = (RsBatchState *) node;
	CustomScan *cscan = (CustomScan *) node->ss.ps.plan;
	List	   *priv = cscan->custom_private;
	List	   *values = linitial(cscan->custom_exprs);
	List	   *stages = lsecond(cscan->custom_exprs);
	const char *window = rs_setting("batch_window");
	const char *on_error = rs_setting("on_error");
	int			i;

	node->custom_ps = list_make1(ExecInitNode(linitial(cscan->custom_plans), estate, eflags));
	st->nbatches = intVal(linitial(priv));
	st->qual_order = strVal(lsecond(priv));
	st->nsites = (list_length(priv) - 2) / RS_FIELDS_PER_SITE;
	st->sites = palloc0(sizeof(RsExecSite) * st->nsites);
	st->ninputs = list_length(cscan->custom_scan_tlist) - st->nsites;
	for (i = 0; i < st->nsites; i++)
	{
		RsExecSite *s = &st->sites[i];
		TargetEntry *te = list_nth(cscan->custom_scan_tlist, st->ninputs + i);
		int			at = 2 + i * RS_FIELDS_PER_SITE;

		s->kind = strVal(list_nth(priv, at));
		s->template = strVal(list_nth(priv, at + 1));
		s->spec = strVal(list_nth(priv, at + 2));
		s->form = strVal(list_nth(priv, at + 3));
		s->batch = intVal(list_nth(priv, at + 4));
		s->in_qual = boolVal(list_nth(priv, at + 5));
		s->name = psprintf("llm_%s", s->kind);
		s->result_type = exprType((Node *) te->expr);
		s->value = ExecInitExpr(list_nth(values, i), &node->ss.ps);
	}
	st->stage_quals = palloc0(sizeof(ExprState *) * Max(st->nbatches, 1));
	for (i = 0; i < st->nbatches; i++)
		st->stage_quals[i] = ExecInitQual(list_nth(stages, i), &node->ss.ps);
	st->window_rows = window[0] ? atoi(window) : RS_DEFAULT_BATCH_WINDOW;
	if (st->window_rows < 1 || st->window_rows > 10000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("relserve.batch_window must be a whole number of rows from 1 to 10000, got \"%s\"", window)));
	st->raise_on_error = pg_strcasecmp(on_error, "raise") == 0;
	st->window_cxt = AllocSetContextCreate(CurrentMemoryContext, "relserve batch window", ALLOCSET_DEFAULT_SIZES);
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	{
		Oid			open_args[5] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Oid			poll_args[2] = {TEXTOID, FLOAT8OID};
		Oid			close_args[1] = {TEXTOID};

		rs_lookup(&st->open_fn, "_batch_open", 5, open_args, CurrentMemoryContext);
		rs_lookup(&st->poll_fn, "_scan_poll", 2, poll_args, CurrentMemoryContext);
		rs_lookup(&st->close_fn, "_scan_close", 1, close_args, CurrentMemoryContext);
	}
}

/* the scan tuple of a window row, ready for an expression */
static TupleTableSlot *
rs_row_slot(RsBatchState *st, RsWinRow *row)
{
	TupleTableSlot *slot = st->css.ss.ss_ScanTupleSlot;
	int			natts = slot->tts_tupleDescriptor->natts;

	ExecClearTuple(slot);
	memcpy(slot->tts_values, row->values, sizeof(Datum) * natts);
	memcpy(slot->tts_isnull, row->nulls, sizeof(bool) * natts);
	return ExecStoreVirtualTuple(slot);
}

/* one row's value argument as JSON: an array of the VARIADIC values, or the jsonb object */
static void
rs_value_json(StringInfo buf, RsExecSite *s, Datum d, bool isnull)
{
	if (isnull)
	{
		appendStringInfoString(buf, "null");
		return;
	}
	if (strcmp(s->form, "fields") == 0)
	{
		appendStringInfoString(buf, OidOutputFunctionCall(F_JSONB_OUT, d));
		return;
	}
	{
		Datum	   *items;
		bool	   *nulls;
		int			n,
					i;

		deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &items, &nulls, &n);
		appendStringInfoChar(buf, '[');
		for (i = 0; i < n; i++)
		{
			if (i > 0)
				appendStringInfoChar(buf, ',');
			if (nulls[i])
				appendStringInfoString(buf, "null");
			else
				escape_json(buf, TextDatumGetCString(items[i]));
		}
		appendStringInfoChar(buf, ']');
	}
}

static void
rs_close_site(RsBatchState *st, RsExecSite *s)
{
	if (s->handle)
	{
		char	   *h = s->handle;

		s->handle = NULL;
		FunctionCall1Coll(&st->close_fn, InvalidOid, CStringGetTextDatum(h));
	}
}

/*
 * Send the window rows still in play as call site s's relQuery. Its value argument is evaluated
 * here, for those rows only: the quals before its batch have dropped the others.
 */
static void
rs_open_site(RsBatchState *st, RsExecSite *s)
{
	ExprContext *econtext = st->css.ss.ps.ps_ExprContext;
	StringInfoData rows;
	MemoryContext old = MemoryContextSwitchTo(st->window_cxt);
	int			r;
	Datum		h;

	s->window_index = palloc(sizeof(int) * (st->nrows ? st->nrows : 1));
	s->nsent = 0;
	initStringInfo(&rows);
	appendStringInfoChar(&rows, '[');
	MemoryContextSwitchTo(old);
	for (r = 0; r < st->nrows; r++)
	{
		RsWinRow   *row = &st->rows[r];
		Datum		value;
		bool		isnull;

		if (row->dropped)
			continue;
		econtext->ecxt_scantuple = rs_row_slot(st, row);
		old = MemoryContextSwitchTo(econtext->ecxt_per_tuple_memory);
		value = ExecEvalExpr(s->value, econtext, &isnull);
		if (s->nsent > 0)
			appendStringInfoChar(&rows, ',');
		rs_value_json(&rows, s, value, isnull);
		MemoryContextSwitchTo(old);
		ResetExprContext(econtext);
		s->window_index[s->nsent++] = r;
		row->pending++;
	}
	appendStringInfoChar(&rows, ']');
	if (s->nsent == 0)
		return;
	h = FunctionCall5Coll(&st->open_fn, InvalidOid, CStringGetTextDatum(s->kind), CStringGetTextDatum(s->template),
						  CStringGetTextDatum(s->spec), CStringGetTextDatum(s->form), CStringGetTextDatum(rows.data));
	s->handle = MemoryContextStrdup(st->window_cxt, TextDatumGetCString(h));
	st->relqueries++;
	st->rows_sent += s->nsent;
}

static Datum
rs_answer(RsExecSite *s, const char *text)
{
	Oid			in,
				ioparam;

	if (s->result_type == TEXTOID)
		return CStringGetTextDatum(text);
	getTypeInputInfo(s->result_type, &in, &ioparam);
	return OidInputFunctionCall(in, (char *) text, ioparam, -1);
}

/* Poll every open relQuery once and keep the answers that arrived. */
static void
rs_poll_sites(RsBatchState *st)
{
	int			i;

	for (i = 0; i < st->nsites; i++)
	{
		RsExecSite *s = &st->sites[i];
		RsPollEvent *events;
		int			n,
					k;

		if (s->handle == NULL)
			continue;
		CHECK_FOR_INTERRUPTS();
		n = rs_poll_events(&st->poll_fn, s->handle, 0.05, &events);
		for (k = 0; k < n; k++)
		{
			RsPollEvent *e = &events[k];

			if (e->kind == RS_EVENT_ROW)
			{
				int			sent = e->row;
				RsWinRow   *row;
				int			col = st->ninputs + i;

				if (sent < 0 || sent >= s->nsent)
					elog(ERROR, "relserve: the server answered row %d of %d", sent, s->nsent);
				row = &st->rows[s->window_index[sent]];
				if (e->answer != NULL)
				{
					MemoryContext old = MemoryContextSwitchTo(st->window_cxt);

					row->values[col] = rs_answer(s, e->answer);
					row->nulls[col] = false;
					MemoryContextSwitchTo(old);
				}
				else if (e->reason != NULL)
					ereport(NOTICE, (errmsg("%s: NULL for this row: %s", s->name, e->reason)));
				row->pending--;
			}
			else if (e->kind == RS_EVENT_STAT)
			{
				if (strcmp(e->stat, "estimated_s") == 0)
				{
					st->estimated_s += e->value;
					st->have_estimate = true;
				}
				else if (strcmp(e->stat, "latency_s") == 0)
					st->latency_s += e->value;
			}
			else if (e->kind == RS_EVENT_DONE)
				rs_close_site(st, s);
			else if (e->kind == RS_EVENT_ERROR)
			{
				rs_close_site(st, s);
				rs_raise_poll_error(e, "relserve: the batched call failed");
			}
		}
	}
}

static bool
rs_sites_open(RsBatchState *st)
{
	int			i;

	for (i = 0; i < st->nsites; i++)
		if (st->sites[i].handle)
			return true;
	return false;
}

/* send the window's batch ``batch``: each of its call sites over the rows still in play */
static void
rs_open_batch(RsBatchState *st, int batch)
{
	int			i;

	st->batch = batch;
	for (i = 0; i < st->nsites; i++)
		if (st->sites[i].batch == batch)
			rs_open_site(st, &st->sites[i]);
}

/*
 * The quals' batch is in: its quals run on each row still in play (a row the server did not answer
 * has NULL there), and the quals that waited for them; the rows they reject are dropped.
 */
static void
rs_finish_qual_batch(RsBatchState *st)
{
	ExprContext *econtext = st->css.ss.ps.ps_ExprContext;
	ExprState  *qual = st->stage_quals[st->batch - 1];
	int			r;

	for (r = 0; r < st->nrows; r++)
	{
		RsWinRow   *row = &st->rows[r];

		row->pending = 0;
		if (row->dropped)
			continue;
		econtext->ecxt_scantuple = rs_row_slot(st, row);
		row->dropped = !ExecQual(qual, econtext);
		ResetExprContext(econtext);
		if (row->dropped)
			InstrCountFiltered1(&st->css, 1);
	}
}

/* read the next window of input rows; false when the input has no more */
static bool
rs_read_window(RsBatchState *st)
{
	PlanState  *input = linitial(st->css.custom_ps);
	int			natts = st->css.ss.ss_ScanTupleSlot->tts_tupleDescriptor->natts;
	TupleDesc	desc = st->css.ss.ss_ScanTupleSlot->tts_tupleDescriptor;
	MemoryContext old;

	MemoryContextReset(st->window_cxt);
	st->nrows = st->next_emit = 0;
	if (st->input_done)
		return false;
	old = MemoryContextSwitchTo(st->window_cxt);
	st->rows = palloc0(sizeof(RsWinRow) * st->window_rows);
	while (st->nrows < st->window_rows)
	{
		TupleTableSlot *in;
		RsWinRow   *row;
		int			a;

		MemoryContextSwitchTo(old);
		in = ExecProcNode(input);
		MemoryContextSwitchTo(st->window_cxt);
		if (TupIsNull(in))
		{
			st->input_done = true;
			break;
		}
		slot_getallattrs(in);
		row = &st->rows[st->nrows++];
		row->values = palloc0(sizeof(Datum) * natts);
		row->nulls = palloc(sizeof(bool) * natts);
		for (a = 0; a < natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			row->nulls[a] = a < st->ninputs ? in->tts_isnull[a] : true;
			if (a < st->ninputs && !row->nulls[a])
				row->values[a] = datumCopy(in->tts_values[a], att->attbyval, att->attlen);
		}
	}
	MemoryContextSwitchTo(old);
	return st->nrows > 0;
}

static TupleTableSlot *
rs_next(ScanState *ss)
{
	RsBatchState *st = (RsBatchState *) ss;
	int			last = st->nbatches + 1;	/* the target list's batch: rows go out as their answers arrive */

	for (;;)
	{
		while (st->batch == last && st->next_emit < st->nrows)
		{
			RsWinRow   *row = &st->rows[st->next_emit];

			if (row->dropped)
			{
				st->next_emit++;
				continue;
			}
			if (row->pending > 0)
				break;
			st->next_emit++;
			return rs_row_slot(st, row);
		}
		if (st->batch != 0 && rs_sites_open(st))
		{
			rs_poll_sites(st);
			continue;
		}
		if (st->batch == 0)
		{
			if (!rs_read_window(st))
				return ExecClearTuple(ss->ss_ScanTupleSlot);
			rs_open_batch(st, 1);
		}
		else if (st->batch < last)
		{
			rs_finish_qual_batch(st);
			rs_open_batch(st, st->batch + 1);
		}
		else if (st->next_emit < st->nrows)
		{
			int			r;

			for (r = st->next_emit; r < st->nrows; r++)
				st->rows[r].pending = 0;	/* a row the server did not answer goes out with NULL */
		}
		else
			st->batch = 0;		/* the window is done: the next one */
	}
}

static bool
rs_recheck(ScanState *ss, TupleTableSlot *slot)
{
	return true;
}

static TupleTableSlot *
rs_exec(CustomScanState *node)
{
	return ExecScan(&node->ss, rs_next, rs_recheck);
}

static void
rs_stop(RsBatchState *st)
{
	int			i;

	PushActiveSnapshot(GetTransactionSnapshot());
	for (i = 0; i < st->nsites; i++)
		rs_close_site(st, &st->sites[i]);
	PopActiveSnapshot();
}

static void
rs_end(CustomScanState *node)
{
	RsBatchState *st = (RsBatchState *) node;

	if (st->sites && st->open_fn.fn_oid != InvalidOid)
		rs_stop(st);
	ExecEndNode(linitial(node->custom_ps));
}

static void
rs_rescan(CustomScanState *node)
{
	RsBatchState *st = (RsBatchState *) node;

	rs_stop(st);
	MemoryContextReset(st->window_cxt);
	st->nrows = st->next_emit = 0;
	st->batch = 0;
	st->input_done = false;
	ExecReScan(linitial(node->custom_ps));
}

static void
rs_explain(CustomScanState *node, List *ancestors, ExplainState *es)
{
	RsBatchState *st = (RsBatchState *) node;
	CustomScan *cscan = (CustomScan *) node->ss.ps.plan;
	List	   *stages = lsecond(cscan->custom_exprs);
	List	   *quals = NIL;
	StringInfoData calls;
	ListCell   *lc;
	int			i;

	/* the quals that run here, in the order they run (the plan's own Filter line is empty) */
	foreach(lc, stages)
		quals = list_concat(quals, (List *) lfirst(lc));
	if (quals != NIL)
	{
		List	   *context = set_deparse_context_plan(es->deparse_cxt, node->ss.ps.plan, ancestors);

		ExplainPropertyText("Filter", deparse_expression((Node *) make_ands_explicit(quals), context, es->verbose, false), es);
		if (es->analyze && node->ss.ps.instrument && node->ss.ps.instrument->nloops > 0)
			ExplainPropertyFloat("Rows Removed by Filter", NULL,
								 node->ss.ps.instrument->nfiltered1 / node->ss.ps.instrument->nloops, 0, es);
	}
	initStringInfo(&calls);
	for (i = 0; i < st->nsites; i++)
	{
		RsExecSite *s = &st->sites[i];

		appendStringInfo(&calls, "%s%s (%s", i ? ", " : "", s->name, s->in_qual ? "filter" : "target list");
		if (s->in_qual && st->nbatches > 1)
			appendStringInfo(&calls, ", batch %d", s->batch);
		appendStringInfoChar(&calls, ')');
	}
	ExplainPropertyText("LLM Calls", calls.data, es);
	if (st->qual_order[0] != '\0')
		ExplainPropertyText("Qual Order", st->qual_order, es);
	ExplainPropertyInteger("Window Rows", NULL, st->window_rows, es);
	if (es->analyze)
	{
		ExplainPropertyInteger("relQueries", NULL, st->relqueries, es);
		ExplainPropertyInteger("Rows Sent", NULL, st->rows_sent, es);
		if (st->have_estimate)
		{
			ExplainPropertyFloat("Estimated (s)", NULL, st->estimated_s, 3, es);
			ExplainPropertyFloat("Latency (s)", NULL, st->latency_s, 3, es);
		}
	}
}

/* ------------------------------------------------------------------ the pass-through node */

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
	return ExecScan(&node->ss, rs_per_row_next, rs_recheck);
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
rs_batch_calls_init(void)
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

	rs_batch_scan_methods.CustomName = "relserve batch";
	rs_batch_scan_methods.CreateCustomScanState = rs_create_state;
	RegisterCustomScanMethods(&rs_batch_scan_methods);

	rs_batch_exec_methods.CustomName = "relserve batch";
	rs_batch_exec_methods.BeginCustomScan = rs_begin;
	rs_batch_exec_methods.ExecCustomScan = rs_exec;
	rs_batch_exec_methods.EndCustomScan = rs_end;
	rs_batch_exec_methods.ReScanCustomScan = rs_rescan;
	rs_batch_exec_methods.ExplainCustomScan = rs_explain;

	prev_planner_hook = planner_hook;
	planner_hook = rs_planner;
	prev_set_rel_pathlist_hook = set_rel_pathlist_hook;
	set_rel_pathlist_hook = rs_set_rel_pathlist;
}
