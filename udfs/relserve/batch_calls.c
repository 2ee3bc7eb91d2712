/*
 * Batched scalar calls: SELECT id, llm_map('...{r}...', review) FROM reviews as one relQuery.
 *
 * PostgreSQL calls a scalar function once per row and waits for it, so the query everyone writes
 * first would send one request per row. A planner hook finds plan nodes (scans, and a Result over
 * a child) whose target list or quals call relserve's scalar llm_* functions, and puts a custom scan
 * in their place. It pulls the node's input in windows of relserve.batch_window rows, evaluates
 * each call site's arguments there, sends each call site's window as ONE relQuery (the same request
 * the *_query functions send), and emits each row, in its input order, once its answers are in. Cheap quals stay on the
 * input node and run first; the llm_* calls in quals run before those in the target list, which
 * only see the rows the quals kept (as AlloyDB's AI function node does).
 *
 * Where a call cannot be batched (inside CASE, COALESCE, AND/OR, where evaluating it for every row
 * would change which rows call the model; a template that is not a constant; arguments with a
 * sub-select) the node runs as planned, one call per row, under a pass-through node that says why in
 * EXPLAIN. relserve.batch_calls = off turns the
 * hook off. The hook works from the moment the library is loaded: session_preload_libraries =
 * 'relserve' loads it at connection start.
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
#include "optimizer/planner.h"
#include "parser/parse_func.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "relserve.h"

#define RS_DEFAULT_BATCH_WINDOW 2000
#define RS_FIELDS_PER_SITE 6

static planner_hook_type prev_planner_hook = NULL;

/* ------------------------------------------------------------------ finding the calls */

typedef struct RsSite
{
	FuncExpr   *call;
	const char *kind;			/* map, filter, classify, extract */
	char	   *template;
	char	   *spec;			/* labels as a JSON array, or the JSON schema; NULL for none */
	const char *form;			/* "args" (VARIADIC text[]) or "fields" (jsonb) */
	bool		in_qual;
	int			value_col;		/* the value argument's column in the input list (1-based) */
} RsSite;

typedef struct RsFind
{
	Oid			schema;			/* the extension: only its llm_* functions count */
	List	   *sites;			/* RsSite * */
	bool		in_qual;
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
	site->in_qual = f->in_qual;
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

/* ------------------------------------------------------------------ rewriting the plan */

/* the input list: every Var the node's outputs need outside the calls, then each call's value */
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
	ListCell   *lc;

	if (node == NULL)
		return false;
	foreach(lc, rw->sites)
		if (node == (Node *) ((RsSite *) lfirst(lc))->call)
			return false;		/* its value argument is an input of its own */
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

/* the custom scan in place of ``plan``, or ``plan`` as it was */
static Plan *
rs_batch_plan(Plan *plan, Oid schema)
{
	RsFind		f = {schema, NIL, false, NULL};
	RsRewrite	rw = {NIL, NIL, 0};
	CustomScan *cscan;
	Plan	   *input;
	List	   *keep_qual = NIL,
			   *llm_qual = NIL,
			   *priv = NIL,
			   *scan_tlist;
	ListCell   *lc;
	int			k;

	if (!rs_wrappable(plan))
	{
		/* an aggregate's argument, a window function's: evaluated by this node, per row */
		rs_find_walker((Node *) plan->targetlist, &f);
		rs_find_walker((Node *) plan->qual, &f);
		if (f.sites != NIL || f.refused)
			return rs_per_row_plan(plan, "an llm_* call in an aggregate's or window function's arguments runs per row "
								   "(compute it in a subquery: SELECT count(a) FROM (SELECT llm_map(...) AS a FROM t) s)");
		return plan;
	}
	rs_find_walker((Node *) plan->targetlist, &f);
	f.in_qual = true;
	foreach(lc, plan->qual)
	{
		int			before = list_length(f.sites);

		rs_find_walker((Node *) lfirst(lc), &f);
		if (list_length(f.sites) > before)
			llm_qual = lappend(llm_qual, lfirst(lc));
		else
			keep_qual = lappend(keep_qual, lfirst(lc));
	}
	if (f.refused)
		return rs_per_row_plan(plan, f.refused);
	if (f.sites == NIL)
		return plan;

	/* the quals' calls first: the target list's calls only see the rows the quals keep */
	foreach(lc, f.sites)
		if (((RsSite *) lfirst(lc))->in_qual)
			rw.sites = lappend(rw.sites, lfirst(lc));
	foreach(lc, f.sites)
		if (!((RsSite *) lfirst(lc))->in_qual)
			rw.sites = lappend(rw.sites, lfirst(lc));
	rs_collect_vars((Node *) plan->targetlist, &rw);
	rs_collect_vars((Node *) llm_qual, &rw);
	foreach(lc, rw.sites)
		((RsSite *) lfirst(lc))->value_col = rs_input_col(&rw, (Expr *) llast(((RsSite *) lfirst(lc))->call->args));

	/* the input node: the same node, computing the input list and keeping its cheap quals */
	input = (Plan *) copyObject(plan);
	input->targetlist = rw.input;
	input->qual = keep_qual;
	rw.answers_from = list_length(rw.input) + 1;

	cscan = makeNode(CustomScan);
	cscan->scan.plan.targetlist = (List *) rs_to_scan_tuple((Node *) plan->targetlist, &rw);
	cscan->scan.plan.qual = (List *) rs_to_scan_tuple((Node *) llm_qual, &rw);
	Assert(list_length(rw.input) == rw.answers_from - 1);
	scan_tlist = list_copy(rw.input);
	k = 0;
	foreach(lc, rw.sites)
	{
		RsSite	   *site = lfirst(lc);

		scan_tlist = lappend(scan_tlist, makeTargetEntry((Expr *) site->call, rw.answers_from + k++, NULL, false));
		priv = lappend(priv, makeString(pstrdup(site->kind)));
		priv = lappend(priv, makeString(site->template));
		priv = lappend(priv, makeString(site->spec ? site->spec : pstrdup("")));
		priv = lappend(priv, makeString(pstrdup(site->form)));
		priv = lappend(priv, makeInteger(site->value_col));
		priv = lappend(priv, makeInteger(site->in_qual));
	}
	cscan->custom_scan_tlist = scan_tlist;
	cscan->custom_private = priv;
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

static Plan *rs_walk_plan(Plan *plan, Oid schema);

static List *
rs_walk_list(List *plans, Oid schema)
{
	ListCell   *lc;

	foreach(lc, plans)
		lfirst(lc) = rs_walk_plan((Plan *) lfirst(lc), schema);
	return plans;
}

static Plan *
rs_walk_plan(Plan *plan, Oid schema)
{
	if (plan == NULL)
		return NULL;
	plan->lefttree = rs_walk_plan(plan->lefttree, schema);
	plan->righttree = rs_walk_plan(plan->righttree, schema);
	switch (nodeTag(plan))
	{
		case T_Append:
			rs_walk_list(((Append *) plan)->appendplans, schema);
			break;
		case T_MergeAppend:
			rs_walk_list(((MergeAppend *) plan)->mergeplans, schema);
			break;
		case T_SubqueryScan:
			((SubqueryScan *) plan)->subplan = rs_walk_plan(((SubqueryScan *) plan)->subplan, schema);
			break;
		case T_CustomScan:
			rs_walk_list(((CustomScan *) plan)->custom_plans, schema);
			break;
		default:
			break;
	}
	return rs_batch_plan(plan, schema);
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
	PlannedStmt *stmt = prev_planner_hook
		? prev_planner_hook(parse, query_string, cursorOptions, boundParams)
		: standard_planner(parse, query_string, cursorOptions, boundParams);
	Oid			ext;
	ListCell   *lc;

	if (stmt->commandType != CMD_SELECT || !IsTransactionState() || !rs_batching_on())
		return stmt;
	ext = get_extension_oid("relserve", true);
	if (!OidIsValid(ext))
		return stmt;
	stmt->planTree = rs_walk_plan(stmt->planTree, ext);
	foreach(lc, stmt->subplans)
		lfirst(lc) = rs_walk_plan((Plan *) lfirst(lc), ext);
	return stmt;
}

/* ------------------------------------------------------------------ execution */

typedef struct RsExecSite
{
	char	   *kind;
	char	   *template;
	char	   *spec;
	char	   *form;
	int			value_col;
	bool		in_qual;
	char	   *name;			/* llm_<kind>, for messages */
	Oid			result_type;
	char	   *handle;			/* its relQuery for the current window, while it runs */
	int		   *window_index;	/* the window row of each row sent */
	int			nsent;
} RsExecSite;

typedef struct RsWinRow
{
	Datum	   *values;			/* the scan tuple: inputs, then one answer per site */
	bool	   *nulls;
	int			pending;		/* answers still to come for the current phase */
	bool		dropped;		/* a qual's answer removed it */
} RsWinRow;

typedef struct RsBatchState
{
	CustomScanState css;
	RsExecSite *sites;
	int			nsites;
	int			ninputs;
	int			window_rows;
	FmgrInfo	open_fn;
	FmgrInfo	poll_fn;
	FmgrInfo	close_fn;
	MemoryContext window_cxt;
	RsWinRow   *rows;
	int			nrows;
	int			phase;			/* 0: no window, 1: quals' calls, 2: target list's calls, 3: emit the rest */
	int			next_emit;		/* rows go out in their input order: a Sort or an index below may have ordered them */
	bool		input_done;
	bool		raise_on_error;
	int			relqueries;
	long		rows_sent;
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
	const char *window = rs_setting("batch_window");
	const char *on_error = rs_setting("on_error");
	int			i;

	node->custom_ps = list_make1(ExecInitNode(linitial(cscan->custom_plans), estate, eflags));
	st->nsites = list_length(priv) / RS_FIELDS_PER_SITE;
	st->sites = palloc0(sizeof(RsExecSite) * st->nsites);
	st->ninputs = list_length(cscan->custom_scan_tlist) - st->nsites;
	for (i = 0; i < st->nsites; i++)
	{
		RsExecSite *s = &st->sites[i];
		TargetEntry *te = list_nth(cscan->custom_scan_tlist, st->ninputs + i);

		s->kind = strVal(list_nth(priv, i * RS_FIELDS_PER_SITE));
		s->template = strVal(list_nth(priv, i * RS_FIELDS_PER_SITE + 1));
		s->spec = strVal(list_nth(priv, i * RS_FIELDS_PER_SITE + 2));
		s->form = strVal(list_nth(priv, i * RS_FIELDS_PER_SITE + 3));
		s->value_col = intVal(list_nth(priv, i * RS_FIELDS_PER_SITE + 4));
		s->in_qual = intVal(list_nth(priv, i * RS_FIELDS_PER_SITE + 5)) != 0;
		s->name = psprintf("llm_%s", s->kind);
		s->result_type = exprType((Node *) te->expr);
	}
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

/* send the window rows still in play as call site s's relQuery */
static void
rs_open_site(RsBatchState *st, RsExecSite *s)
{
	StringInfoData rows;
	MemoryContext old = MemoryContextSwitchTo(st->window_cxt);
	int			r;
	Datum		h;

	s->window_index = palloc(sizeof(int) * (st->nrows ? st->nrows : 1));
	s->nsent = 0;
	initStringInfo(&rows);
	appendStringInfoChar(&rows, '[');
	for (r = 0; r < st->nrows; r++)
	{
		RsWinRow   *row = &st->rows[r];

		if (row->dropped)
			continue;
		if (s->nsent > 0)
			appendStringInfoChar(&rows, ',');
		rs_value_json(&rows, s, row->values[s->value_col - 1], row->nulls[s->value_col - 1]);
		s->window_index[s->nsent++] = r;
		row->pending++;
	}
	appendStringInfoChar(&rows, ']');
	MemoryContextSwitchTo(old);
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

/* Poll every open relQuery once; rows whose answers are all in become ready (or are dropped). */
static void
rs_poll_sites(RsBatchState *st)
{
	ExprContext *econtext = st->css.ss.ps.ps_ExprContext;
	TupleTableSlot *slot = st->css.ss.ss_ScanTupleSlot;
	int			i;

	for (i = 0; i < st->nsites; i++)
	{
		RsExecSite *s = &st->sites[i];
		Datum	   *items;
		bool	   *nulls;
		int			n,
					k;

		if (s->handle == NULL)
			continue;
		CHECK_FOR_INTERRUPTS();
		deconstruct_array(DatumGetArrayTypeP(FunctionCall2Coll(&st->poll_fn, InvalidOid, CStringGetTextDatum(s->handle),
															   Float8GetDatum(0.05))),
						  TEXTOID, -1, false, TYPALIGN_INT, &items, &nulls, &n);
		for (k = 0; k + 3 < n; k += 4)
		{
			char	   *event = TextDatumGetCString(items[k]);
			char	   *a = nulls[k + 1] ? NULL : TextDatumGetCString(items[k + 1]);
			char	   *b = nulls[k + 2] ? NULL : TextDatumGetCString(items[k + 2]);
			char	   *c = nulls[k + 3] ? NULL : TextDatumGetCString(items[k + 3]);

			if (strcmp(event, "row") == 0)
			{
				int			sent = atoi(a);
				int			r;
				RsWinRow   *row;
				int			col = st->ninputs + i;

				if (sent < 0 || sent >= s->nsent)
					elog(ERROR, "relserve: the server answered row %d of %d", sent, s->nsent);
				r = s->window_index[sent];
				row = &st->rows[r];
				if (b != NULL)
				{
					MemoryContext old = MemoryContextSwitchTo(st->window_cxt);

					row->values[col] = rs_answer(s, b);
					row->nulls[col] = false;
					MemoryContextSwitchTo(old);
				}
				else if (c != NULL)
					ereport(NOTICE, (errmsg("%s: NULL for this row: %s", s->name, c)));
				if (--row->pending == 0 && st->phase == 1)
				{
					/* every qual call of the row answered: does the row stay? */
					ExecClearTuple(slot);
					memcpy(slot->tts_values, row->values, sizeof(Datum) * slot->tts_tupleDescriptor->natts);
					memcpy(slot->tts_isnull, row->nulls, sizeof(bool) * slot->tts_tupleDescriptor->natts);
					ExecStoreVirtualTuple(slot);
					econtext->ecxt_scantuple = slot;
					row->dropped = !ExecQual(st->css.ss.ps.qual, econtext);
					ResetExprContext(econtext);
				}
			}
			else if (strcmp(event, "done") == 0)
				rs_close_site(st, s);
			else if (strcmp(event, "error") == 0)
			{
				rs_close_site(st, s);
				ereport(ERROR,
						(errcode(a && strlen(a) == 5 ? MAKE_SQLSTATE(a[0], a[1], a[2], a[3], a[4])
								 : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
						 errmsg("%s", b ? b : "relserve: the batched call failed"),
						 c ? errhint("%s", c) : 0));
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
	TupleTableSlot *slot = ss->ss_ScanTupleSlot;
	int			i;

	for (;;)
	{
		while (st->phase == 2 && st->next_emit < st->nrows)
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
			ExecClearTuple(slot);
			memcpy(slot->tts_values, row->values, sizeof(Datum) * slot->tts_tupleDescriptor->natts);
			memcpy(slot->tts_isnull, row->nulls, sizeof(bool) * slot->tts_tupleDescriptor->natts);
			return ExecStoreVirtualTuple(slot);
		}
		if (st->phase != 0 && rs_sites_open(st))
		{
			rs_poll_sites(st);
			continue;
		}
		switch (st->phase)
		{
			case 0:
				if (!rs_read_window(st))
					return ExecClearTuple(slot);
				st->phase = 1;
				for (i = 0; i < st->nsites; i++)
					if (st->sites[i].in_qual)
						rs_open_site(st, &st->sites[i]);
				break;
			case 1:
				/* the quals' answers are in: the target list's calls for the rows that stay */
				for (i = 0; i < st->nrows; i++)
					st->rows[i].pending = 0;	/* a row the server did not answer stays NULL */
				st->phase = 2;
				for (i = 0; i < st->nsites; i++)
					if (!st->sites[i].in_qual)
						rs_open_site(st, &st->sites[i]);
				break;
			default:
				if (st->next_emit < st->nrows)
				{
					for (i = st->next_emit; i < st->nrows; i++)
						st->rows[i].pending = 0;
					break;
				}
				st->phase = 0;	/* the window is done: the next one */
				break;
		}
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
	st->phase = 0;
	st->input_done = false;
	ExecReScan(linitial(node->custom_ps));
}

static void
rs_explain(CustomScanState *node, List *ancestors, ExplainState *es)
{
	RsBatchState *st = (RsBatchState *) node;
	StringInfoData calls;
	int			i;

	initStringInfo(&calls);
	for (i = 0; i < st->nsites; i++)
		appendStringInfo(&calls, "%s%s (%s)", i ? ", " : "", st->sites[i].name, st->sites[i].in_qual ? "filter" : "target list");
	ExplainPropertyText("LLM Calls", calls.data, es);
	ExplainPropertyInteger("Window Rows", NULL, st->window_rows, es);
	if (es->analyze)
	{
		ExplainPropertyInteger("relQueries", NULL, st->relqueries, es);
		ExplainPropertyInteger("Rows Sent", NULL, st->rows_sent, es);
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
}
