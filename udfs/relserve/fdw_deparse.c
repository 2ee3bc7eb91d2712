/*
 * The text of relserve_fdw's source query as the scan runs it: the table's source option, with
 * the quals that may go there in its WHERE and the query's LIMIT when the scan's rows are the
 * query's rows (as postgres_fdw's deparse.c builds the remote query's text).
 */
#include "postgres.h"

#include "access/transam.h"
#include "lib/stringinfo.h"
#include "nodes/nodeFuncs.h"
#include "nodes/pathnodes.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "fdw.h"

/* A Var of this relation that is a source column (not the answer), possibly under a relabel. */
static Var *
rs_source_var(Node *node, Index relid, AttrNumber output_attno)
{
	if (node && IsA(node, RelabelType))
		node = (Node *) ((RelabelType *) node)->arg;
	if (node && IsA(node, Var))
	{
		Var		   *v = (Var *) node;

		if (v->varno == relid && v->varlevelsup == 0 && v->varattno > 0 && v->varattno != output_attno)
			return v;
	}
	return NULL;
}

static void
rs_deparse_const(Const *c, StringInfo buf)
{
	Oid			typoutput;
	bool		isvarlena;

	if (c->constisnull)
	{
		appendStringInfo(buf, "NULL::%s", format_type_with_typemod(c->consttype, c->consttypmod));
		return;
	}
	getTypeOutputInfo(c->consttype, &typoutput, &isvarlena);
	appendStringInfo(buf, "%s::%s",
					 quote_literal_cstr(OidOutputFunctionCall(typoutput, c->constvalue)),
					 format_type_with_typemod(c->consttype, c->consttypmod));
}

static void
rs_deparse_operator(Oid opno, StringInfo buf)
{
	char	   *name = get_opname(opno);

	/* built-in operators only (checked by the caller), spelled with their schema */
	appendStringInfo(buf, " OPERATOR(pg_catalog.%s) ", name);
}

/*
 * Deparse a qual into SQL over the source query's columns, or return false if it cannot go there:
 * only source columns compared with constants by built-in operators on non-collatable types (a text
 * comparison could run under another collation in the source), IS [NOT] NULL, and AND/OR/NOT
 * of those. Anything else (the answer column, parameters, functions) is evaluated here.
 */
bool
rs_deparse_expr(Node *node, Relation rel, Index relid, AttrNumber output_attno, StringInfo buf)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_Var:
			{
				Var		   *v = rs_source_var(node, relid, output_attno);

				if (!v)
					return false;
				appendStringInfo(buf, "s.%s",
								 quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), v->varattno - 1)->attname)));
				return true;
			}
		case T_RelabelType:
			return rs_deparse_expr((Node *) ((RelabelType *) node)->arg, rel, relid, output_attno, buf);
		case T_Const:
			rs_deparse_const((Const *) node, buf);
			return true;
		case T_OpExpr:
			{
				OpExpr	   *op = (OpExpr *) node;
				Node	   *l,
						   *r;

				if (list_length(op->args) != 2 || op->opno >= FirstNormalObjectId || OidIsValid(op->inputcollid))
					return false;
				l = linitial(op->args);
				r = lsecond(op->args);
				/* a source column against a constant */
				if (!((rs_source_var(l, relid, output_attno) && IsA(r, Const)) ||
					  (rs_source_var(r, relid, output_attno) && IsA(l, Const))))
					return false;
				appendStringInfoChar(buf, '(');
				if (!rs_deparse_expr(l, rel, relid, output_attno, buf))
					return false;
				rs_deparse_operator(op->opno, buf);
				if (!rs_deparse_expr(r, rel, relid, output_attno, buf))
					return false;
				appendStringInfoChar(buf, ')');
				return true;
			}
		case T_ScalarArrayOpExpr:
			{
				ScalarArrayOpExpr *op = (ScalarArrayOpExpr *) node;
				Node	   *l = linitial(op->args),
						   *r = lsecond(op->args);

				if (op->opno >= FirstNormalObjectId || OidIsValid(op->inputcollid) ||
					!rs_source_var(l, relid, output_attno) || !IsA(r, Const))
					return false;
				appendStringInfoChar(buf, '(');
				rs_deparse_expr(l, rel, relid, output_attno, buf);
				rs_deparse_operator(op->opno, buf);
				appendStringInfoString(buf, op->useOr ? "ANY (" : "ALL (");
				rs_deparse_const((Const *) r, buf);
				appendStringInfoString(buf, "))");
				return true;
			}
		case T_NullTest:
			{
				NullTest   *nt = (NullTest *) node;

				if (nt->argisrow || !rs_source_var((Node *) nt->arg, relid, output_attno))
					return false;
				appendStringInfoChar(buf, '(');
				rs_deparse_expr((Node *) nt->arg, rel, relid, output_attno, buf);
				appendStringInfoString(buf, nt->nulltesttype == IS_NULL ? " IS NULL)" : " IS NOT NULL)");
				return true;
			}
		case T_BoolExpr:
			{
				BoolExpr   *b = (BoolExpr *) node;
				ListCell   *lc;
				bool		first = true;

				appendStringInfoChar(buf, '(');
				if (b->boolop == NOT_EXPR)
					appendStringInfoString(buf, "NOT ");
				foreach(lc, b->args)
				{
					if (!first)
						appendStringInfoString(buf, b->boolop == AND_EXPR ? " AND " : " OR ");
					if (!rs_deparse_expr((Node *) lfirst(lc), rel, relid, output_attno, buf))
						return false;
					first = false;
				}
				appendStringInfoChar(buf, ')');
				return true;
			}
		default:
			return false;
	}
}

static char *
rs_strip_semicolons(const char *sql)
{
	char	   *s = pstrdup(sql);
	int			n = strlen(s);

	while (n > 0 && (isspace((unsigned char) s[n - 1]) || s[n - 1] == ';'))
		s[--n] = '\0';
	return s;
}

void
rs_deparse_source(const char *source, List *pushed, int limit, Relation rel, Index relid,
				  AttrNumber output_attno, char **source_sql, char **shown_sql)
{
	char	   *body = rs_strip_semicolons(source);
	StringInfoData quals,
				buf;
	ListCell   *lc;

	/* every pushable qual in the source's WHERE */
	initStringInfo(&quals);
	foreach(lc, pushed)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);

		appendStringInfoString(&quals, lc == list_head(pushed) ? " WHERE " : " AND ");
		rs_deparse_expr((Node *) ri->clause, rel, relid, output_attno, &quals);
	}
	if (limit >= 0)
		appendStringInfo(&quals, " LIMIT %d", limit);

	/*
	 * The newlines keep a trailing "--" comment of the source from swallowing the closing
	 * parenthesis; the validator checked that the source is one SELECT on its own.
	 */
	initStringInfo(&buf);
	appendStringInfo(&buf, "SELECT s.*, pg_catalog.row_to_json(s.*)::pg_catalog.text FROM (\n%s\n) AS s%s",
					 body, quals.data);
	*source_sql = buf.data;
	initStringInfo(&buf);
	appendStringInfo(&buf, "SELECT * FROM (%s) AS s%s", body, quals.data);
	*shown_sql = buf.data;
}
