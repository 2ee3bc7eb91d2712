/*
 * The batch node's call sites: the llm_* calls of a plan node's target list and quals that run for
 * every row (batch_calls.c says why a call under CASE, COALESCE, AND/OR does not), each with its
 * constant template and labels or JSON schema, or why the node's calls cannot be batched.
 */
#include "postgres.h"

#include "catalog/dependency.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/clauses.h"
#include "optimizer/optimizer.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"

#include "batch_calls.h"

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

bool
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
