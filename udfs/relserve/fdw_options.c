/*
 * relserve_fdw's options: which catalog takes which (a server its url, a user mapping its
 * api_key, a foreign table its source query, template, kind... and every call option), their
 * values checked when a server, user mapping or foreign table is created or altered
 * (relserve_fdw_validator), and how planning reads them.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/rel.h"

#include "fdw.h"
#include "relserve.h"

PG_FUNCTION_INFO_V1(relserve_fdw_validator);

/* options of a foreign server, a user mapping, and a foreign table (besides the call options) */
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
	{"window_rows", ForeignTableRelationId},
	{NULL, InvalidOid}
};

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

static const char *const rs_kinds[] = {"map", "filter", "classify", "extract", NULL};
static const char *const rs_on_errors[] = {"null", "raise", NULL};

/*
 * The source runs as one SELECT statement, checked here by PostgreSQL's own parser (no catalog
 * access, nothing runs): several statements, or anything but a plain SELECT, are refused when the
 * table is created or altered. "Plain" holds at every depth: a data-modifying statement in a WITH
 * item, however deep (inside another WITH, a sub-select, a UNION arm), and row locks (FOR UPDATE
 * and the like, which write to the rows they lock) are refused too.
 */
typedef struct RsSourceWalk
{
	const char *cte;			/* the WITH item being walked, for the message; NULL outside one */
} RsSourceWalk;

static bool
rs_source_walker(Node *node, RsSourceWalk *walk)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_InsertStmt:
		case T_UpdateStmt:
		case T_DeleteStmt:
		case T_MergeStmt:
			/* the grammar has them in a SELECT only as a WITH item */
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("relserve_fdw: option \"source\" must only read: WITH \"%s\" modifies data",
							walk->cte ? walk->cte : "?")));
			break;
		case T_CommonTableExpr:
			{
				const char *outer = walk->cte;
				bool		found;

				walk->cte = ((CommonTableExpr *) node)->ctename;
				found = rs_source_walker(((CommonTableExpr *) node)->ctequery, walk);
				walk->cte = outer;
				return found;
			}
		case T_SelectStmt:
			if (((SelectStmt *) node)->lockingClause != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
						 errmsg("relserve_fdw: option \"source\" must only read: FOR UPDATE/SHARE locks the rows it reads")));
			break;
		default:
			break;
	}
	return raw_expression_tree_walker(node, rs_source_walker, walk);
}

static void
rs_check_source(const char *value)
{
	List	   *stmts;
	RawStmt    *raw;
	RsSourceWalk walk = {NULL};

	if (value[0] == '\0')
		rs_bad_value("source", value, "a SELECT statement");
	stmts = raw_parser(value, RAW_PARSE_DEFAULT);
	if (list_length(stmts) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("relserve_fdw: option \"source\" must be one SELECT statement, got %d statements",
						list_length(stmts))));
	raw = linitial_node(RawStmt, stmts);
	if (!IsA(raw->stmt, SelectStmt))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("relserve_fdw: option \"source\" must be a SELECT statement")));
	if (((SelectStmt *) raw->stmt)->intoClause)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("relserve_fdw: option \"source\" must not be SELECT INTO")));
	rs_source_walker(raw->stmt, &walk);
}

static void
rs_check_value(const char *name, const char *value)
{
	if (strcmp(name, "kind") == 0 && !rs_one_of(value, rs_kinds))
		rs_bad_value(name, value, "one of map, filter, classify, extract");
	else if ((strcmp(name, "on_error") == 0 || strcmp(name, "on_server_error") == 0) && !rs_one_of(value, rs_on_errors))
		rs_bad_value(name, value, "one of null, raise");
	else if (strcmp(name, "url") == 0)
	{
		/* scheme, host and port only: a path or query of its own would change where requests go */
		const char *host = strncmp(value, "http://", 7) == 0 ? value + 7
			: strncmp(value, "https://", 8) == 0 ? value + 8 : NULL;

		if (host == NULL || host[0] == '\0' || strpbrk(host, "?#@ ") != NULL ||
			(strchr(host, '/') != NULL && strchr(host, '/')[1] != '\0'))
			rs_bad_value(name, value, "an http:// or https:// address with a host and port only");
	}
	else if (strcmp(name, "max_tokens") == 0 || strcmp(name, "window_rows") == 0)
	{
		char	   *end;
		long		n = strtol(value, &end, 10);
		long		top = strcmp(name, "max_tokens") == 0 ? 1000000 : RS_MAX_WINDOW_ROWS;

		if (*value == '\0' || *end != '\0' || n < 1 || n > top)
			rs_bad_value(name, value, psprintf("a whole number from 1 to %ld", top));
	}
	else if (strcmp(name, "temperature") == 0)
	{
		char	   *end;
		double		t = strtod(value, &end);

		if (*value == '\0' || *end != '\0' || !(t >= 0.0 && t <= 2.0))
			rs_bad_value(name, value, "a number from 0 to 2");
	}
	else if (strcmp(name, "cache") == 0 || strcmp(name, "reorder_fields") == 0)
	{
		bool		b;

		if (!parse_bool(value, &b))
			rs_bad_value(name, value, "a boolean (true or false)");
	}
	else if (strcmp(name, "json_schema") == 0 || strcmp(name, "examples") == 0)
	{
		JsonLexContext *lex = makeJsonLexContextCstringLen(pstrdup(value), strlen(value),
														   GetDatabaseEncoding(), true);
		JsonParseErrorType err = pg_parse_json(lex, &nullSemAction);

		if (err != JSON_SUCCESS)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("relserve_fdw: option \"%s\" is not valid JSON: %s", name, json_errdetail(err, lex))));
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
	else if (strcmp(name, "source") == 0)
		rs_check_source(value);
	else if (strcmp(name, "template") == 0 && value[0] == '\0')
		rs_bad_value(name, value, "not empty");
}

const char *
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

static bool
rs_known_option(const char *name, Oid catalog)
{
	const RsOption *opt;

	for (opt = rs_options; opt->name; opt++)
		if (opt->context == catalog && strcmp(opt->name, name) == 0)
			return true;
	/*
	 * a foreign table takes every call option a setting may be, not the ones of one call only
	 * (label_plan, cascade_recall...: relserve.postgres.settings.CALL_ONLY): its options hold for
	 * every scan, and label_plan 'refresh' there would make a new plan on every statement
	 */
	return catalog == ForeignTableRelationId && rs_one_of(name, rs_setting_names) &&
		strncmp(name, "batch_", 6) != 0;
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

		if (!rs_known_option(def->defname, catalog))
		{
			StringInfoData valid;
			const RsOption *opt;
			int			i;

			initStringInfo(&valid);
			for (opt = rs_options; opt->name; opt++)
				if (opt->context == catalog)
					appendStringInfo(&valid, "%s%s", valid.len ? ", " : "", opt->name);
			if (catalog == ForeignTableRelationId)
				for (i = 0; rs_setting_names[i]; i++)
					if (strncmp(rs_setting_names[i], "batch_", 6) != 0)
						appendStringInfo(&valid, ", %s", rs_setting_names[i]);
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("relserve_fdw: invalid option \"%s\"", def->defname),
					 valid.len ? errhint("Valid options here are: %s.", valid.data)
					 : errhint("There are no valid options here.")));
		}
		/* where the database sends requests is a superuser's decision (CREATE/ALTER SERVER) */
		if (catalog == ForeignServerRelationId && strcmp(def->defname, "url") == 0 && !superuser())
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("relserve_fdw: only a superuser may set a server's url"),
					 errhint("The url decides where the database sends requests and the keys of user mappings.")));
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

AttrNumber
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

/* the call options of the table, as a JSON object of text values (checked by the Python side) */
char *
rs_call_options_json(List *options)
{
	StringInfoData opts;
	int			i;

	initStringInfo(&opts);
	appendStringInfoChar(&opts, '{');
	for (i = 0; rs_setting_names[i]; i++)
	{
		const char *v = rs_option(options, rs_setting_names[i]);

		if (v == NULL)
			continue;
		if (opts.len > 1)
			appendStringInfoString(&opts, ", ");
		escape_json(&opts, rs_setting_names[i]);
		appendStringInfoString(&opts, ": ");
		escape_json(&opts, v);
	}
	appendStringInfoChar(&opts, '}');
	return opts.data;
}
