/*
 * relserve_fdw: LLM answers over a source query's rows as a foreign table.
 *
 * A scan is ONE relQuery: the C side only plans (which quals reach the source query), reads the
 * server's url and the caller's key from the catalog, and runs relserve.fdw_scan() (udfs/install.sql)
 * through SPI. That function sends the rows to the relserve server and waits in slices that
 * honour cancel and statement_timeout, so binding, planning, caching and cancellation live in one
 * place for the plpython3u functions and the foreign tables.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "access/table.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "commands/explain.h"
#include "common/jsonapi.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/restrictinfo.h"
#include "parser/parsetree.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(relserve_fdw_handler);
PG_FUNCTION_INFO_V1(relserve_fdw_validator);

/* ------------------------------------------------------------------ options */

typedef struct RsOption
{
	const char *name;
	Oid			context;		/* catalog the option belongs to */
} RsOption;

static const RsOption rs_options[] = {
	{"url", ForeignServerRelationId},
	{"api_key", UserMappingRelationId},
	{"source", ForeignTableRelationId},
	{"template", ForeignTableRelationId},
	{"kind", ForeignTableRelationId},
	{"labels", ForeignTableRelationId},
	{"json_schema", ForeignTableRelationId},
	{"output", ForeignTableRelationId},
	{"max_tokens", ForeignTableRelationId},
	{"temperature", ForeignTableRelationId},
	{"method", ForeignTableRelationId},
	{"cache", ForeignTableRelationId},
	{"on_error", ForeignTableRelationId},
	{NULL, InvalidOid}
};

/* options passed to the server as the relQuery's options (the rest describe the call itself) */
static const char *rs_passed_options[] = {"max_tokens", "temperature", "method", "cache", "on_error", NULL};

/* what a relQuery reports, read from the stats row fdw_scan() ends with (EXPLAIN ANALYZE) */
#define RS_NSTATS 11
static const char *rs_stat_keys[RS_NSTATS] = {
	"id", "rows", "engine_rows", "cached_rows", "latency_s", "waiting_s", "core_s", "tail_s",
	"prompt_tokens", "cached_tokens", "sqlstate"
};
#define RS_STAT_SQLSTATE 10
#define RS_FIXED_COLUMNS (2 + RS_NSTATS)	/* event, error, the stats fields */

static bool
rs_one_of(const char *value, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (strcmp(value, *allowed) == 0)
			return true;
	return false;
}

static void
rs_bad_value(const char *option, const char *value, const char *expected)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
			 errmsg("relserve_fdw: option \"%s\" must be %s, got \"%s\"", option, expected, value)));
}

/* options whose value is one of a few words */
typedef struct RsChoice
{
	const char *option;
	const char *const *allowed;
	const char *expected;
} RsChoice;

static const char *const rs_kinds[] = {"map", "filter", "classify", "extract", NULL};
/* relserve's one on_error vocabulary (relserve.validation.OnError) */
static const char *const rs_on_errors[] = {"null", "raise", NULL};
static const char *const rs_methods[] = {"generate", "score", "calibrate", NULL};
static const RsChoice rs_choices[] = {
	{"kind", rs_kinds, "one of map, filter, classify, extract"},
	{"on_error", rs_on_errors, "one of null, raise"},
	{"method", rs_methods, "one of generate, score, calibrate"},
	{NULL, NULL, NULL}
};

static void
rs_check_value(const char *name, const char *value)
{
	const RsChoice *c;

	for (c = rs_choices; c->option; c++)
		if (strcmp(name, c->option) == 0)
		{
			if (!rs_one_of(value, c->allowed))
				rs_bad_value(name, value, c->expected);
			return;
		}

	if (strcmp(name, "url") == 0)
	{
		if (strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0)
			rs_bad_value(name, value, "an http:// or https:// address");
	}
	else if (strcmp(name, "max_tokens") == 0)
	{
		char	   *end;
		long		n = strtol(value, &end, 10);

		if (*value == '\0' || *end != '\0' || n < 1 || n > 1000000)
			rs_bad_value(name, value, "a whole number of tokens from 1 to 1000000");
	}
	else if (strcmp(name, "temperature") == 0)
	{
		char	   *end;
		double		t = strtod(value, &end);

		if (*value == '\0' || *end != '\0' || !(t >= 0.0 && t <= 2.0))
			rs_bad_value(name, value, "a number from 0 to 2");
	}
	else if (strcmp(name, "cache") == 0)
	{
		bool		b;

		if (!parse_bool(value, &b))
			rs_bad_value(name, value, "a boolean (true or false)");
	}
	else if (strcmp(name, "json_schema") == 0)
	{
		JsonLexContext *lex = makeJsonLexContextCstringLen(pstrdup(value), strlen(value),
														   GetDatabaseEncoding(), true);
		JsonParseErrorType err = pg_parse_json(lex, &nullSemAction);

		if (err != JSON_SUCCESS)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("relserve_fdw: option \"json_schema\" is not valid JSON: %s",
							json_errdetail(err, lex))));
	}
	else if (strcmp(name, "labels") == 0)
	{
		/* comma-separated, none empty */
		const char *p = value;

		for (;;)
		{
			const char *comma = strchr(p, ',');
			const char *end = comma ? comma : p + strlen(p);
			const char *q = p;

			while (q < end && isspace((unsigned char) *q))
				q++;
			if (q == end)
				rs_bad_value(name, value, "a comma-separated list of labels, none of them empty");
			if (!comma)
				break;
			p = comma + 1;
		}
	}
	else if ((strcmp(name, "source") == 0 || strcmp(name, "template") == 0) && value[0] == '\0')
		rs_bad_value(name, value, "not empty");
}

static const char *
rs_option(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, name) == 0)
			return defGetString(def);
	}
	return NULL;
}

Datum
relserve_fdw_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			catalog = PG_GETARG_OID(1);
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);
		const RsOption *opt;
		bool		known = false;

		for (opt = rs_options; opt->name; opt++)
			if (opt->context == catalog && strcmp(opt->name, def->defname) == 0)
				known = true;
		if (!known)
		{
			StringInfoData valid;

			initStringInfo(&valid);
			for (opt = rs_options; opt->name; opt++)
				if (opt->context == catalog)
					appendStringInfo(&valid, "%s%s", valid.len ? ", " : "", opt->name);
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("relserve_fdw: invalid option \"%s\"", def->defname),
					 valid.len ? errhint("Valid options here are: %s.", valid.data)
					 : errhint("There are no valid options here.")));
		}
		rs_check_value(def->defname, defGetString(def));
	}

	if (catalog == ForeignTableRelationId)
	{
		const char *kind = rs_option(options, "kind");
		const char *required[] = {"source", "template", "kind", NULL};
		const char **r;

		for (r = required; *r; r++)
			if (rs_option(options, *r) == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
						 errmsg("relserve_fdw: a foreign table needs the option \"%s\"", *r),
						 errhint("OPTIONS (source 'SELECT ...', template '... {column} ...', kind 'map')")));
		if (strcmp(kind, "classify") == 0 && rs_option(options, "labels") == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
					 errmsg("relserve_fdw: kind 'classify' needs the option \"labels\" (e.g. 'positive,negative')")));
		if (strcmp(kind, "classify") != 0 && rs_option(options, "labels") != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("relserve_fdw: option \"labels\" is only for kind 'classify', not '%s'", kind)));
		if (strcmp(kind, "extract") == 0 && rs_option(options, "json_schema") == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
					 errmsg("relserve_fdw: kind 'extract' needs the option \"json_schema\"")));
		if (strcmp(kind, "extract") != 0 && rs_option(options, "json_schema") != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("relserve_fdw: option \"json_schema\" is only for kind 'extract', not '%s'", kind)));
	}
	PG_RETURN_VOID();
}

/* ------------------------------------------------------------------ planning */

/* fdw_private of the plan: the SQL that runs the scan, and what EXPLAIN shows */
enum RsPrivate
{
	RS_SCAN_SQL,				/* SELECT ... FROM relserve.fdw_scan($1..$8) */
	RS_SOURCE_SQL,				/* the source query with the pushed quals */
	RS_KIND,
	RS_TEMPLATE,
	RS_OPTIONS_JSON,
	RS_SPEC,					/* labels or JSON schema, "" for none */
	RS_COLUMNS					/* from here on: the source columns the table reads */
};

typedef struct RsPlanState
{
	AttrNumber	output_attno;	/* the column the answers go to */
	List	   *pushed;			/* RestrictInfos sent into the source query */
} RsPlanState;

static AttrNumber
rs_output_attno(Relation rel, List *options)
{
	const char *output = rs_option(options, "output");
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	last = InvalidAttrNumber;
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		if (output && strcmp(NameStr(att->attname), output) == 0)
			return att->attnum;
		last = att->attnum;
	}
	if (output)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("relserve_fdw: option \"output\" names column \"%s\", which foreign table \"%s\" does not have",
						output, RelationGetRelationName(rel))));
	if (last == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("relserve_fdw: foreign table \"%s\" has no column for the answers",
						RelationGetRelationName(rel))));
	return last;				/* by default the answers go to the last column */
}

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
 * only source columns compared with constants by built-in operators, IS [NOT] NULL, and AND/OR/NOT
 * of those. Anything else (the answer column, parameters, functions) is evaluated here.
 */
static bool
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

				if (list_length(op->args) != 2 || op->opno >= FirstNormalObjectId)
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

				if (op->opno >= FirstNormalObjectId || !rs_source_var(l, relid, output_attno) || !IsA(r, Const))
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

static void
relserveGetForeignRelSize(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	RsPlanState *ps = palloc0(sizeof(RsPlanState));
	ForeignTable *table = GetForeignTable(foreigntableid);
	Relation	rel = table_open(foreigntableid, NoLock);
	ListCell   *lc;
	Selectivity sel;

	ps->output_attno = rs_output_attno(rel, table->options);
	foreach(lc, baserel->baserestrictinfo)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);
		StringInfoData probe;

		initStringInfo(&probe);
		if (rs_deparse_expr((Node *) ri->clause, rel, baserel->relid, ps->output_attno, &probe))
			ps->pushed = lappend(ps->pushed, ri);
	}
	table_close(rel, NoLock);

	/* no statistics: assume 1000 source rows, cut by the quals */
	sel = clauselist_selectivity(root, extract_actual_clauses(baserel->baserestrictinfo, false),
								 baserel->relid, JOIN_INNER, NULL);
	baserel->tuples = 1000;
	baserel->rows = clamp_row_est(1000 * sel);
	baserel->fdw_private = ps;
}

static void
relserveGetForeignPaths(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	/* an LLM answer costs far more than reading a row: a scan is worth running once, not per loop */
	Cost		startup = 1000.0;
	Cost		total = startup + baserel->rows * 1000.0;

	add_path(baserel, (Path *) create_foreignscan_path(root, baserel, NULL, baserel->rows, startup, total,
													   NIL, baserel->lateral_relids, NULL, NIL));
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

static ForeignScan *
relserveGetForeignPlan(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid, ForeignPath *best_path,
					   List *tlist, List *scan_clauses, Plan *outer_plan)
{
	RsPlanState *ps = (RsPlanState *) baserel->fdw_private;
	ForeignTable *table = GetForeignTable(foreigntableid);
	Relation	rel = table_open(foreigntableid, NoLock);
	TupleDesc	desc = RelationGetDescr(rel);
	StringInfoData source,
				scan,
				opts;
	List	   *columns = NIL;
	List	   *local = NIL;
	ListCell   *lc;
	const char *kind = rs_option(table->options, "kind");
	const char *spec = NULL;
	const char **p;
	int			i;

	/* the source query, with every pushable qual in its WHERE */
	initStringInfo(&source);
	appendStringInfo(&source, "SELECT * FROM (%s) AS s",
					 rs_strip_semicolons(rs_option(table->options, "source")));
	foreach(lc, ps->pushed)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);

		appendStringInfoString(&source, lc == list_head(ps->pushed) ? " WHERE " : " AND ");
		rs_deparse_expr((Node *) ri->clause, rel, baserel->relid, ps->output_attno, &source);
	}

	/*
	 * The scan: the event, its message and the stats fields first, then the table's columns cast
	 * from the answers' text. fdw_scan() is called in a SELECT list, where a set-returning
	 * function runs one value per call: the answers stream (in FROM it would be materialized).
	 */
	initStringInfo(&scan);
	appendStringInfoString(&scan, "SELECT r.event, r.error, ");
	for (i = 0; i < RS_NSTATS; i++)
		appendStringInfo(&scan, "r.stats->>%s, ", quote_literal_cstr(rs_stat_keys[i]));
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		char	   *type = format_type_with_typemod(att->atttypid, att->atttypmod);

		if (i > 0)
			appendStringInfoString(&scan, ", ");
		if (att->attisdropped)
			appendStringInfoString(&scan, "NULL");
		else if (att->attnum == ps->output_attno)
			appendStringInfo(&scan, "r.answer::%s", type);
		else
		{
			appendStringInfo(&scan, "(r.input->>%s)::%s", quote_literal_cstr(NameStr(att->attname)), type);
			columns = lappend(columns, makeString(pstrdup(NameStr(att->attname))));
		}
	}
	/* (f()).* would call f once per column: take the fields of one call instead */
	appendStringInfoString(&scan,
						   " FROM (SELECT (q.e).event, (q.e).error, (q.e).answer, (q.e).input, (q.e).stats FROM"
						   " (SELECT relserve.fdw_scan($1, $2, $3, $4, $5::jsonb, $6, $7, $8) AS e OFFSET 0) AS q) AS r");

	/* the relQuery's options, as a JSON object (values checked by the validator) */
	initStringInfo(&opts);
	appendStringInfoChar(&opts, '{');
	for (p = rs_passed_options; *p; p++)
	{
		const char *v = rs_option(table->options, *p);

		if (v == NULL)
			continue;
		if (opts.len > 1)
			appendStringInfoString(&opts, ", ");
		escape_json(&opts, *p);
		appendStringInfoString(&opts, ": ");
		if (strcmp(*p, "max_tokens") == 0 || strcmp(*p, "temperature") == 0)
			appendStringInfoString(&opts, v);
		else if (strcmp(*p, "cache") == 0)
		{
			bool		b = false;

			parse_bool(v, &b);
			appendStringInfoString(&opts, b ? "true" : "false");
		}
		else
			escape_json(&opts, v);
	}
	appendStringInfoChar(&opts, '}');

	if (strcmp(kind, "classify") == 0)
		spec = rs_option(table->options, "labels");
	else if (strcmp(kind, "extract") == 0)
		spec = rs_option(table->options, "json_schema");

	/* what the source query filters is not checked again here (as postgres_fdw does) */
	foreach(lc, scan_clauses)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);

		if (!ri->pseudoconstant && !list_member_ptr(ps->pushed, ri))
			local = lappend(local, ri->clause);
	}

	table_close(rel, NoLock);
	return make_foreignscan(tlist, local, baserel->relid, NIL,
							list_concat(list_make5(makeString(scan.data), makeString(source.data),
												   makeString(pstrdup(kind)),
												   makeString(pstrdup(rs_option(table->options, "template"))),
												   makeString(opts.data)),
										lcons(makeString(pstrdup(spec ? spec : "")), columns)),
							NIL, NIL, outer_plan);
}

/* ------------------------------------------------------------------ execution */

typedef struct RsScanState
{
	char	   *scan_sql;
	char	   *source_sql;
	char	   *kind;
	char	   *template;
	char	   *options_json;
	char	   *spec;
	List	   *columns;
	char	   *url;
	char	   *api_key;
	MemoryContext mcxt;			/* where the answers are kept, for rescans */
	char	   *portal;			/* the SPI cursor over fdw_scan(), while it runs */
	char	   *relquery_id;	/* the server's id of the scan's relQuery */
	bool		started;
	bool		done;			/* every answer and the stats are here */
	HeapTuple  *tuples;
	int			ntuples;
	int			capacity;
	int			next;
	char	   *stats[RS_NSTATS];
} RsScanState;

static void
rs_unpack_private(List *fdw_private, RsScanState *st)
{
	int			i;

	st->scan_sql = strVal(list_nth(fdw_private, RS_SCAN_SQL));
	st->source_sql = strVal(list_nth(fdw_private, RS_SOURCE_SQL));
	st->kind = strVal(list_nth(fdw_private, RS_KIND));
	st->template = strVal(list_nth(fdw_private, RS_TEMPLATE));
	st->options_json = strVal(list_nth(fdw_private, RS_OPTIONS_JSON));
	st->spec = strVal(list_nth(fdw_private, RS_SPEC));
	if (st->spec[0] == '\0')
		st->spec = NULL;
	for (i = RS_COLUMNS; i < list_length(fdw_private); i++)
		st->columns = lappend(st->columns, strVal(list_nth(fdw_private, i)));
}

static void
relserveBeginForeignScan(ForeignScanState *node, int eflags)
{
	ForeignScan *fsplan = (ForeignScan *) node->ss.ps.plan;
	EState	   *estate = node->ss.ps.state;
	RsScanState *st = palloc0(sizeof(RsScanState));
	Relation	rel = node->ss.ss_currentRelation;

	node->fdw_state = st;
	st->mcxt = CurrentMemoryContext;
	rs_unpack_private(fsplan->fdw_private, st);

	/* the server and the caller's key, also for EXPLAIN (it asks the server for a plan) */
	{
		RangeTblEntry *rte = exec_rt_fetch(fsplan->scan.scanrelid, estate);
		Oid			userid = OidIsValid(rte->checkAsUser) ? rte->checkAsUser : GetUserId();
		ForeignTable *table = GetForeignTable(RelationGetRelid(rel));
		ForeignServer *server = GetForeignServer(table->serverid);
		UserMapping *user = GetUserMapping(userid, server->serverid);	/* errors when there is none */
		const char *url = rs_option(server->options, "url");
		const char *key = rs_option(user->options, "api_key");

		if (url == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
					 errmsg("relserve_fdw: server \"%s\" has no option \"url\"", server->servername),
					 errhint("ALTER SERVER %s OPTIONS (ADD url 'http://127.0.0.1:8000')",
							 quote_identifier(server->servername))));
		st->url = pstrdup(url);
		st->api_key = key ? pstrdup(key) : NULL;
	}
}

static Oid	rs_argtypes[8] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID};

/* The arguments of fdw_scan() and fdw_plan(): the call, the source query, the server, the key. */
static void
rs_arguments(RsScanState *st, Datum *values, char *nulls)
{
	Datum	   *names = palloc(sizeof(Datum) * (list_length(st->columns) + 1));
	int			ncols = 0;
	ListCell   *lc;

	memset(nulls, ' ', 8);

	foreach(lc, st->columns)
		names[ncols++] = CStringGetTextDatum((char *) lfirst(lc));
	values[0] = CStringGetTextDatum(st->kind);
	values[1] = CStringGetTextDatum(st->template);
	if (st->spec)
		values[2] = CStringGetTextDatum(st->spec);
	else
		nulls[2] = 'n';
	values[3] = CStringGetTextDatum(st->source_sql);
	values[4] = CStringGetTextDatum(st->options_json);
	values[5] = CStringGetTextDatum(st->url);
	if (st->api_key)
		values[6] = CStringGetTextDatum(st->api_key);
	else
		nulls[6] = 'n';
	values[7] = PointerGetDatum(construct_array(names, ncols, TEXTOID, -1, false, TYPALIGN_INT));
}

/* Open the cursor over fdw_scan(): the source query runs and the server accepts the relQuery. */
static void
rs_start(RsScanState *st)
{
	Datum		values[8];
	char		nulls[8];
	Portal		portal;

	rs_arguments(st, values, nulls);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "relserve_fdw: SPI_connect failed");
	portal = SPI_cursor_open_with_args(NULL, st->scan_sql, 8, rs_argtypes, values, nulls, false, 0);
	st->portal = MemoryContextStrdup(st->mcxt, portal->name);
	SPI_finish();
	st->started = true;
}

static void
rs_keep(RsScanState *st, HeapTuple tuple)
{
	if (st->ntuples == st->capacity)
	{
		st->capacity = st->capacity ? 2 * st->capacity : 64;
		st->tuples = st->tuples
			? repalloc(st->tuples, sizeof(HeapTuple) * st->capacity)
			: MemoryContextAlloc(st->mcxt, sizeof(HeapTuple) * st->capacity);
	}
	st->tuples[st->ntuples++] = tuple;
}

/*
 * Fetch events until the next answer is kept (true) or the relQuery is over (false). Between
 * events this backend checks for interrupts: a cancel or statement timeout ends the statement
 * here, and closing the cursor makes fdw_scan() cancel the relQuery on the server.
 */
static bool
rs_next_answer(ForeignScanState *node, RsScanState *st)
{
	TupleDesc	desc = RelationGetDescr(node->ss.ss_currentRelation);

	while (!st->done)
	{
		HeapTuple	t;
		TupleDesc	spi_desc;
		char	   *event;
		bool		kept = false;

		CHECK_FOR_INTERRUPTS();
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "relserve_fdw: SPI_connect failed");
		SPI_cursor_fetch(SPI_cursor_find(st->portal), true, 1);
		if (SPI_processed == 0)
		{
			SPI_cursor_close(SPI_cursor_find(st->portal));
			st->portal = NULL;
			st->done = true;
			SPI_finish();
			break;
		}
		t = SPI_tuptable->vals[0];
		spi_desc = SPI_tuptable->tupdesc;
		event = SPI_getvalue(t, spi_desc, 1);
		if (strcmp(event, "error") == 0)
		{
			char	   *sqlstate = SPI_getvalue(t, spi_desc, 3 + RS_STAT_SQLSTATE);

			ereport(ERROR,
					(errcode(sqlstate ? MAKE_SQLSTATE(sqlstate[0], sqlstate[1], sqlstate[2], sqlstate[3], sqlstate[4])
							 : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("%s", SPI_getvalue(t, spi_desc, 2))));
		}
		else if (strcmp(event, "accepted") == 0)
		{
			char	   *id = SPI_getvalue(t, spi_desc, 3);

			st->relquery_id = id ? MemoryContextStrdup(st->mcxt, id) : NULL;
		}
		else if (strcmp(event, "stats") == 0)
		{
			int			k;

			for (k = 0; k < RS_NSTATS; k++)
			{
				char	   *v = SPI_getvalue(t, spi_desc, 3 + k);

				st->stats[k] = v ? MemoryContextStrdup(st->mcxt, v) : NULL;
			}
		}
		else if (strcmp(event, "row") == 0)
		{
			MemoryContext old = MemoryContextSwitchTo(st->mcxt);
			Datum	   *v = palloc(sizeof(Datum) * desc->natts);
			bool	   *nl = palloc(sizeof(bool) * desc->natts);
			int			a;

			for (a = 0; a < desc->natts; a++)
			{
				Form_pg_attribute att = TupleDescAttr(desc, a);
				Datum		d = SPI_getbinval(t, spi_desc, RS_FIXED_COLUMNS + a + 1, &nl[a]);

				v[a] = nl[a] ? (Datum) 0 : datumCopy(d, att->attbyval, att->attlen);
			}
			rs_keep(st, heap_form_tuple(desc, v, nl));
			MemoryContextSwitchTo(old);
			kept = true;
		}
		/* "wait": nothing yet, check for interrupts and ask again */
		SPI_finish();
		if (kept)
			return true;
	}
	return false;
}

static TupleTableSlot *
relserveIterateForeignScan(ForeignScanState *node)
{
	RsScanState *st = (RsScanState *) node->fdw_state;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;

	if (!st->started)
		rs_start(st);
	ExecClearTuple(slot);
	if (st->next < st->ntuples || rs_next_answer(node, st))
		ExecStoreHeapTuple(st->tuples[st->next++], slot, false);
	return slot;
}

static void
relserveReScanForeignScan(ForeignScanState *node)
{
	/* the answers do not change within a statement: replay those here, fetch the rest as before */
	((RsScanState *) node->fdw_state)->next = 0;
}

static void
relserveEndForeignScan(ForeignScanState *node)
{
	RsScanState *st = (RsScanState *) node->fdw_state;

	/* ended early (LIMIT): the rest of the relQuery is not wanted, cancel it on the server */
	if (st && st->portal)
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "relserve_fdw: SPI_connect failed");
		SPI_cursor_close(SPI_cursor_find(st->portal));
		st->portal = NULL;
		if (st->relquery_id)
		{
			Oid			argtypes[3] = {TEXTOID, TEXTOID, TEXTOID};
			Datum		values[3];
			char		nulls[3] = {' ', ' ', ' '};

			values[0] = CStringGetTextDatum(st->url);
			if (st->api_key)
				values[1] = CStringGetTextDatum(st->api_key);
			else
				nulls[1] = 'n';
			values[2] = CStringGetTextDatum(st->relquery_id);
			/* the executor is ending: the cancel needs a snapshot of its own */
			PushActiveSnapshot(GetTransactionSnapshot());
			SPI_execute_with_args("SELECT relserve.fdw_cancel($1, $2, $3)", 3, argtypes, values, nulls, false, 0);
			PopActiveSnapshot();
		}
		SPI_finish();
	}
}

static void
relserveExplainForeignScan(ForeignScanState *node, ExplainState *es)
{
	RsScanState *st = (RsScanState *) node->fdw_state;
	static const char *labels[RS_NSTATS] = {
		"relQuery", "Rows Sent", "Distinct Prompts", "Cached Rows", "Latency (s)", "Waiting (s)",
		"Core Running (s)", "Tail Running (s)", "Prompt Tokens", "Prompt Tokens From Cache", "SQLSTATE"
	};
	int			k;

	ExplainPropertyText("relserve Kind", st->kind, es);
	ExplainPropertyText("Template", st->template, es);
	ExplainPropertyText("Source Query", st->source_sql, es);
	if (es->verbose && strcmp(st->options_json, "{}") != 0)
		ExplainPropertyText("relQuery Options", st->options_json, es);
	if (es->analyze && st->started)
		for (k = 0; k < RS_STAT_SQLSTATE; k++)
		{
			if (st->stats[k] != NULL)
				ExplainPropertyText(labels[k], st->stats[k], es);
		}
	else if (!es->analyze)
	{
		/* what the scan would send: the source query runs, the server plans, nothing is answered */
		static const char *plan_labels[4] = {"Rows To Send", "Distinct Prompts", "Cached Rows", "Plan Unavailable"};
		Datum		values[8];
		char		nulls[8];

		rs_arguments(st, values, nulls);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "relserve_fdw: SPI_connect failed");
		if (SPI_execute_with_args("SELECT p->>'rows', p->>'engine_rows', p->>'cached_rows', p->>'error'"
								  " FROM relserve.fdw_plan($1, $2, $3, $4, $5::jsonb, $6, $7, $8) AS p",
								  8, rs_argtypes, values, nulls, false, 0) == SPI_OK_SELECT && SPI_processed == 1)
		{
			for (k = 0; k < 4; k++)
			{
				char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, k + 1);

				if (v != NULL)
					ExplainPropertyText(plan_labels[k], v, es);
			}
		}
		SPI_finish();
	}
}

Datum
relserve_fdw_handler(PG_FUNCTION_ARGS)
{
	FdwRoutine *routine = makeNode(FdwRoutine);

	routine->GetForeignRelSize = relserveGetForeignRelSize;
	routine->GetForeignPaths = relserveGetForeignPaths;
	routine->GetForeignPlan = relserveGetForeignPlan;
	routine->BeginForeignScan = relserveBeginForeignScan;
	routine->IterateForeignScan = relserveIterateForeignScan;
	routine->ReScanForeignScan = relserveReScanForeignScan;
	routine->EndForeignScan = relserveEndForeignScan;
	routine->ExplainForeignScan = relserveExplainForeignScan;
	PG_RETURN_POINTER(routine);
}
