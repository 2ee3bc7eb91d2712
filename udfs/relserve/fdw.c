/*
 * relserve_fdw: LLM answers over a source query's rows as a foreign table. The scan reads its
 *    source query itself, through an SPI cursor with the caller's rights, in windows of rows; it
 *    keeps each row's values and sends the window's rows (as PostgreSQL's own JSON) as ONE
 *    relQuery through relserve._scan_open(), then polls relserve._scan_poll() for the answers as
 *    they finish, checking for interrupts between polls. Those functions (relserve.postgres) are
 *    called through fmgr, never through SQL: no role may execute them, so the server address and
 *    the key only ever come from the catalog (a server's url, which only a superuser sets, and the
 *    caller's user mapping).
 *
 * Plain EXPLAIN runs nothing and sends nothing: the source query runs only when the scan does.
 *
 * This file holds the FDW callbacks (planning and the scan); the options and their validator are
 * in fdw_options.c, the source query's text in fdw_deparse.c.
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_foreign_table.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "catalog/pg_user_mapping.h"
#include "commands/explain.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/restrictinfo.h"
#include "parser/parsetree.h"
#include "parser/parse_func.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/varlena.h"

#include "fdw.h"
#include "poll_events.h"
#include "relserve.h"

PG_FUNCTION_INFO_V1(relserve_fdw_handler);

/* ------------------------------------------------------------------ planning */

/* fdw_private of the plan */
enum RsPrivate
{
	RS_SOURCE_SQL,				/* the source query with the pushed quals, each row with its JSON */
	RS_SHOWN_SQL,				/* the source query with the pushed quals, as EXPLAIN shows it */
	RS_KIND,
	RS_TEMPLATE,
	RS_OPTIONS_JSON,
	RS_SPEC,					/* labels or JSON schema, "" for none */
	RS_WINDOW_ROWS,
	RS_ON_ERROR					/* the table's on_error, "" for the setting's */
};

typedef struct RsPlanState
{
	AttrNumber	output_attno;	/* the column the answers go to */
	List	   *pushed;			/* RestrictInfos sent into the source query */
} RsPlanState;

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

		/*
		 * The source runs before every local qual: a qual goes there only if PostgreSQL itself would
		 * run it first (its security level is the lowest here, or it is leakproof), as an index qual.
		 */
		if (!restriction_is_securely_promotable(ri, baserel))
			continue;
		initStringInfo(&probe);
		if (rs_deparse_expr((Node *) ri->clause, rel, baserel->relid, ps->output_attno, &probe))
			ps->pushed = lappend(ps->pushed, ri);
	}
	table_close(rel, NoLock);

	/*
	 * No statistics, and nothing is run to get some: planning the source would evaluate its
	 * immutable functions, and a foreign table's owner chose them. Assume 1000 source rows, cut
	 * by the quals.
	 */
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

static ForeignScan *
relserveGetForeignPlan(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid, ForeignPath *best_path,
					   List *tlist, List *scan_clauses, Plan *outer_plan)
{
	RsPlanState *ps = (RsPlanState *) baserel->fdw_private;
	ForeignTable *table = GetForeignTable(foreigntableid);
	Relation	rel = table_open(foreigntableid, NoLock);
	char	   *source,
			   *shown;
	List	   *local = NIL;
	ListCell   *lc;
	const char *kind = rs_option(table->options, "kind");
	const char *window = rs_option(table->options, "window_rows");
	const char *on_error = rs_option(table->options, "on_error");
	const char *spec = NULL;
	int			limit = -1;

	/* what the source query filters is not checked again here (as postgres_fdw does) */
	foreach(lc, scan_clauses)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);

		if (!ri->pseudoconstant && !list_member_ptr(ps->pushed, ri))
			local = lappend(local, ri->clause);
	}

	/*
	 * LIMIT goes into the source when the scan's rows are the query's rows: this table alone, every
	 * qual pushed, nothing that needs all rows first (ORDER BY, GROUP BY, aggregates, DISTINCT,
	 * window functions, set-returning functions).
	 */
	{
		Query	   *parse = root->parse;

		if (local == NIL && parse->limitCount && IsA(parse->limitCount, Const) &&
			!((Const *) parse->limitCount)->constisnull && parse->limitOption == LIMIT_OPTION_COUNT &&
			(parse->limitOffset == NULL || (IsA(parse->limitOffset, Const) && !((Const *) parse->limitOffset)->constisnull)) &&
			bms_membership(root->all_baserels) == BMS_SINGLETON && parse->sortClause == NIL &&
			parse->groupClause == NIL && !parse->hasAggs && parse->distinctClause == NIL &&
			!parse->hasWindowFuncs && !parse->hasTargetSRFs && parse->groupingSets == NIL && parse->havingQual == NULL &&
			root->query_level == 1)
		{
			int64		count = DatumGetInt64(((Const *) parse->limitCount)->constvalue);
			int64		offset = parse->limitOffset ? DatumGetInt64(((Const *) parse->limitOffset)->constvalue) : 0;

			if (count >= 0 && offset >= 0 && count + offset < PG_INT32_MAX)
				limit = (int) (count + offset);
		}
	}
	rs_deparse_source(rs_option(table->options, "source"), ps->pushed, limit, rel, baserel->relid,
					  ps->output_attno, &source, &shown);

	if (strcmp(kind, "classify") == 0)
		spec = rs_option(table->options, "labels");
	else if (strcmp(kind, "extract") == 0)
		spec = rs_option(table->options, "json_schema");

	table_close(rel, NoLock);
	{
		List	   *priv = list_make5(makeString(source), makeString(shown), makeString(pstrdup(kind)),
									  makeString(pstrdup(rs_option(table->options, "template"))),
									  makeString(rs_call_options_json(table->options)));

		priv = lappend(priv, makeString(pstrdup(spec ? spec : "")));
		priv = lappend(priv, makeInteger(window ? atoi(window) : RS_DEFAULT_WINDOW_ROWS));
		priv = lappend(priv, makeString(pstrdup(on_error ? on_error : "")));
		return make_foreignscan(tlist, local, baserel->relid, NIL, priv, NIL, NIL, outer_plan);
	}
}

/* ------------------------------------------------------------------ execution */

/* one source row of the window: the foreign table's column values (the answer column empty) */
typedef struct RsRow
{
	Datum	   *values;
	bool	   *nulls;
} RsRow;

#define RS_NSTATS 11
static const char *const rs_stat_names[RS_NSTATS] = {
	"rows", "engine_rows", "cached_rows", "latency_s", "waiting_s", "core_s", "tail_s",
	"prompt_tokens", "cached_tokens", "estimated_s", "estimated_prompt_tokens"
};
/* the estimate each window's relQuery had when it started (issue 47), beside what it took */
static const char *const rs_stat_labels[RS_NSTATS] = {
	"Rows Sent", "Distinct Prompts", "Cached Rows", "Latency (s)", "Waiting (s)", "Core Running (s)",
	"Tail Running (s)", "Prompt Tokens", "Prompt Tokens From Cache", "Estimated (s)", "Estimated Prompt Tokens"
};

typedef struct RsScanState
{
	char	   *source_sql;
	char	   *shown_sql;
	char	   *kind;
	char	   *template;
	char	   *options_json;
	char	   *spec;
	int			window_rows;
	bool		raise_on_error; /* a row whose answer does not fit the column fails the statement */
	char	   *url;
	char	   *api_key;
	Oid			as_user;		/* whose key and settings the calls are (a view's owner), or InvalidOid */
	char	   *source_path;	/* with as_user: the search_path the source is read in (rs_owner_path) */
	AttrNumber	output_attno;
	bool		keep_answers;	/* a rescan replays them (EXEC_FLAG_REWIND) */

	/* the Python side, called through fmgr (EXECUTE is revoked from every role) */
	FmgrInfo	open_fn;
	FmgrInfo	poll_fn;
	FmgrInfo	close_fn;

	MemoryContext scan_cxt;		/* lives as long as the scan */
	MemoryContext window_cxt;	/* one window's rows, reset between windows */
	char	   *portal;			/* the source cursor's name, while it is open */
	bool		source_done;
	int		   *source_cols;	/* per column of the table: its column in the source (1-based), 0: none */
	Oid		   *source_types;
	int			json_col;
	char	   *handle;			/* the open window's relQuery, while it runs */
	RsRow	   *window;
	int			window_len;
	bool		done;			/* every window is answered */

	HeapTuple  *tuples;			/* answers ready to return (all of them when keep_answers) */
	int			ntuples;
	int			capacity;
	int			next;

	int			relqueries;
	double		stats[RS_NSTATS];
	bool		have_stats[RS_NSTATS];
} RsScanState;

/*
 * The search_path a scan read through another role's view reads its source in: that role's
 * default in this database (pg_db_role_setting: ALTER ROLE ... IN DATABASE, ALTER ROLE, ALTER
 * DATABASE, ALTER ROLE ALL), else the server's built-in value; never the session's, which the
 * reader sets. "$user" is the owner (the source still runs as the reader, whose name it would
 * be), and pg_temp goes last unless the owner's value places it: otherwise the reader's
 * temporary schema, searched first, would lend the source a table of the reader's.
 */
static char *
rs_owner_path(Oid owner)
{
	const char *value = rs_role_default(owner, "search_path");
	char	   *raw;
	List	   *names;
	ListCell   *lc;
	StringInfoData path;
	bool		has_temp = false;

	if (value == NULL)
	{
		struct config_generic **vars = get_guc_variables();
		int			n = GetNumConfigOptions();
		int			i;

		for (i = 0; i < n && value == NULL; i++)
			if (vars[i]->vartype == PGC_STRING && strcmp(vars[i]->name, "search_path") == 0)
				value = ((struct config_string *) vars[i])->boot_val;
		if (value == NULL)
			value = "\"$user\", public";
	}
	raw = pstrdup(value);
	if (!SplitIdentifierString(raw, ',', &names))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("relserve_fdw: the default search_path of role \"%s\" is not a list of names: %s",
						GetUserNameFromId(owner, false), value)));
	initStringInfo(&path);
	foreach(lc, names)
	{
		const char *name = lfirst(lc);

		if (strcmp(name, "$user") == 0)
			name = GetUserNameFromId(owner, false);
		else if (strcmp(name, "pg_temp") == 0)
			has_temp = true;
		appendStringInfo(&path, "%s%s", path.len ? ", " : "", quote_identifier(name));
	}
	if (!has_temp)
		appendStringInfo(&path, "%spg_temp", path.len ? ", " : "");
	return path.data;
}

static void
relserveBeginForeignScan(ForeignScanState *node, int eflags)
{
	ForeignScan *fsplan = (ForeignScan *) node->ss.ps.plan;
	EState	   *estate = node->ss.ps.state;
	RsScanState *st = palloc0(sizeof(RsScanState));
	Relation	rel = node->ss.ss_currentRelation;
	List	   *priv = fsplan->fdw_private;
	const char *on_error;

	node->fdw_state = st;
	st->scan_cxt = CurrentMemoryContext;
	st->window_cxt = AllocSetContextCreate(st->scan_cxt, "relserve window", ALLOCSET_DEFAULT_SIZES);
	st->source_sql = strVal(list_nth(priv, RS_SOURCE_SQL));
	st->shown_sql = strVal(list_nth(priv, RS_SHOWN_SQL));
	st->kind = strVal(list_nth(priv, RS_KIND));
	st->template = strVal(list_nth(priv, RS_TEMPLATE));
	st->options_json = strVal(list_nth(priv, RS_OPTIONS_JSON));
	st->spec = strVal(list_nth(priv, RS_SPEC));
	if (st->spec[0] == '\0')
		st->spec = NULL;
	st->window_rows = intVal(list_nth(priv, RS_WINDOW_ROWS));
	on_error = strVal(list_nth(priv, RS_ON_ERROR));
	if (on_error[0] == '\0')
	{
		/*
		 * the setting as the scan's calls read it: read through a view, its owner's (a value the
		 * reader chose is not read there: settings.c), as _scan_open reads the others
		 */
		RangeTblEntry *rte = exec_rt_fetch(fsplan->scan.scanrelid, estate);
		Oid			save_userid;
		int			save_sec_context;

		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		if (OidIsValid(rte->checkAsUser) && rte->checkAsUser != save_userid)
			SetUserIdAndSecContext(rte->checkAsUser, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
		PG_TRY();
		{
			on_error = pstrdup(rs_setting("on_error"));
		}
		PG_FINALLY();
		{
			SetUserIdAndSecContext(save_userid, save_sec_context);
		}
		PG_END_TRY();
	}
	st->raise_on_error = pg_strcasecmp(on_error, "raise") == 0;
	st->output_attno = rs_output_attno(rel, GetForeignTable(RelationGetRelid(rel))->options);
	st->keep_answers = (eflags & EXEC_FLAG_REWIND) != 0;

	/* plain EXPLAIN stops here: it runs nothing and sends nothing */
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;

	/* the server (its url only a superuser sets) and the caller's key from the user mapping */
	{
		RangeTblEntry *rte = exec_rt_fetch(fsplan->scan.scanrelid, estate);
		Oid			userid = OidIsValid(rte->checkAsUser) ? rte->checkAsUser : GetUserId();
		ForeignTable *table = GetForeignTable(RelationGetRelid(rel));
		ForeignServer *server = GetForeignServer(table->serverid);
		UserMapping *user = GetUserMapping(userid, server->serverid);	/* errors when there is none */
		const char *url = rs_option(server->options, "url");
		const char *key = rs_option(user->options, "api_key");
		Oid			open_args[7] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Oid			poll_args[2] = {TEXTOID, FLOAT8OID};
		Oid			close_args[1] = {TEXTOID};

		if (url == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
					 errmsg("relserve_fdw: server \"%s\" has no option \"url\"", server->servername),
					 errhint("A superuser runs: ALTER SERVER %s OPTIONS (ADD url 'http://127.0.0.1:8000')",
							 quote_identifier(server->servername))));
		st->url = pstrdup(url);
		st->api_key = key ? pstrdup(key) : NULL;
		/* read through a view: the key is its owner's, so are the settings and the ceiling */
		st->as_user = userid != GetUserId() ? userid : InvalidOid;
		/* and its source is read in that role's search_path: the reader's must not pick its tables */
		if (OidIsValid(st->as_user))
			st->source_path = MemoryContextStrdup(st->scan_cxt, rs_owner_path(st->as_user));
		rs_lookup(&st->open_fn, "_scan_open", 7, open_args, st->scan_cxt);
		rs_lookup(&st->poll_fn, "_scan_poll", 2, poll_args, st->scan_cxt);
		rs_lookup(&st->close_fn, "_scan_close", 1, close_args, st->scan_cxt);
	}
}

/* the source cursor, or NULL when it is gone (closed, or dropped by ROLLBACK TO SAVEPOINT) */
static Portal
rs_portal(RsScanState *st)
{
	return st->portal ? GetPortalByName(st->portal) : NULL;
}

static void
rs_close_source(RsScanState *st)
{
	Portal		portal = rs_portal(st);

	if (portal != NULL)
		SPI_cursor_close(portal);
	st->portal = NULL;
}

/* a value read as type "from", given to a column of type "to" (through text when they differ) */
static Datum
rs_convert(Datum d, Oid from, Oid to, int32 typmod)
{
	Oid			out,
				in,
				ioparam;
	bool		varlena;

	if (from == to)
		return d;
	getTypeOutputInfo(from, &out, &varlena);
	getTypeInputInfo(to, &in, &ioparam);
	return OidInputFunctionCall(in, OidOutputFunctionCall(out, d), ioparam, typmod);
}

/*
 * Read the next window of source rows and send it as one relQuery. False when the source has no
 * more rows.
 */
static bool
rs_open_window(ForeignScanState *node, RsScanState *st)
{
	TupleDesc	desc = RelationGetDescr(node->ss.ss_currentRelation);
	Portal		portal;
	StringInfoData rows;
	MemoryContext old;
	uint64		n,
				i;
	Datum		args[7];
	bool		args_null[7] = {false, st->api_key == NULL, false, false, st->spec == NULL, false, false};
	int			save_nestlevel = -1;
	LOCAL_FCINFO(fcinfo, 7);

	if (st->source_done)
		return false;
	MemoryContextReset(st->window_cxt);
	st->window = NULL;
	st->window_len = 0;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "relserve_fdw: SPI_connect failed");

	/*
	 * Read through another role's view: the source is parsed (and its rows fetched) in the
	 * owner's search_path, as a function's SET search_path clause applies (fmgr_security_definer);
	 * an error on the way unwinds it with the (sub)transaction. The names of a view's own SQL
	 * are bound when it is made; a reader must not be able to put a "reviews" of their own first
	 * in their path and have the owner's key answer their rows.
	 */
	if (st->source_path != NULL)
	{
		save_nestlevel = NewGUCNestLevel();
		(void) set_config_option("search_path", st->source_path, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	if (st->portal == NULL)
	{
		/* one statement, run as the caller: a cursor refuses several */
		portal = SPI_cursor_open_with_args(NULL, st->source_sql, 0, NULL, NULL, NULL, true, 0);
		st->portal = MemoryContextStrdup(st->scan_cxt, portal->name);
	}
	else if ((portal = rs_portal(st)) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_CURSOR_STATE),
				 errmsg("relserve_fdw: the scan's source cursor is gone (closed by ROLLBACK TO SAVEPOINT)"),
				 errhint("Run the statement again.")));
	SPI_cursor_fetch(portal, true, st->window_rows);
	n = SPI_processed;
	if (save_nestlevel >= 0)
		AtEOXact_GUC(true, save_nestlevel);

	old = MemoryContextSwitchTo(st->window_cxt);
	if (st->source_cols == NULL && n > 0)
	{
		/* the table's columns by name among the source's; the last source column is the row's JSON */
		TupleDesc	sdesc = SPI_tuptable->tupdesc;
		int			a;

		MemoryContextSwitchTo(st->scan_cxt);
		st->source_cols = palloc0(sizeof(int) * desc->natts);
		st->source_types = palloc0(sizeof(Oid) * desc->natts);
		st->json_col = sdesc->natts;
		for (a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);
			int			col;

			if (att->attisdropped || att->attnum == st->output_attno)
				continue;
			col = SPI_fnumber(sdesc, NameStr(att->attname));
			if (col <= 0 || col >= st->json_col)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_COLUMN),
						 errmsg("relserve_fdw: column \"%s\" of foreign table \"%s\" is not among the source query's columns",
								NameStr(att->attname), RelationGetRelationName(node->ss.ss_currentRelation)),
						 errhint("Name the foreign table's columns as the source query does.")));
			st->source_cols[a] = col;
			st->source_types[a] = SPI_gettypeid(sdesc, col);
		}
		MemoryContextSwitchTo(st->window_cxt);
	}
	st->window = palloc(sizeof(RsRow) * (n ? n : 1));
	initStringInfo(&rows);
	appendStringInfoChar(&rows, '[');
	for (i = 0; i < n; i++)
	{
		HeapTuple	t = SPI_tuptable->vals[i];
		TupleDesc	sdesc = SPI_tuptable->tupdesc;
		RsRow	   *row = &st->window[i];
		int			a;

		row->values = palloc0(sizeof(Datum) * desc->natts);
		row->nulls = palloc(sizeof(bool) * desc->natts);
		for (a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			row->nulls[a] = true;
			if (st->source_cols[a] > 0)
			{
				Datum		d = SPI_getbinval(t, sdesc, st->source_cols[a], &row->nulls[a]);

				if (!row->nulls[a])
					row->values[a] = datumCopy(rs_convert(d, st->source_types[a], att->atttypid, att->atttypmod),
											   att->attbyval, att->attlen);
			}
		}
		if (i > 0)
			appendStringInfoChar(&rows, ',');
		appendStringInfoString(&rows, SPI_getvalue(t, sdesc, st->json_col));
	}
	appendStringInfoChar(&rows, ']');
	MemoryContextSwitchTo(old);
	st->window_len = (int) n;
	if (n < (uint64) st->window_rows)
	{
		rs_close_source(st);
		st->source_done = true;
	}
	SPI_finish();
	if (n == 0)
		return false;

	args[0] = CStringGetTextDatum(st->url);
	args[1] = st->api_key ? CStringGetTextDatum(st->api_key) : (Datum) 0;
	args[2] = CStringGetTextDatum(st->kind);
	args[3] = CStringGetTextDatum(st->template);
	args[4] = st->spec ? CStringGetTextDatum(st->spec) : (Datum) 0;
	args[5] = CStringGetTextDatum(st->options_json);
	args[6] = CStringGetTextDatum(rows.data);
	InitFunctionCallInfoData(*fcinfo, &st->open_fn, 7, InvalidOid, NULL, NULL);
	for (i = 0; i < 7; i++)
	{
		fcinfo->args[i].value = args[i];
		fcinfo->args[i].isnull = args_null[i];
	}
	{
		volatile Datum h = (Datum) 0;
		Oid			save_userid;
		int			save_sec_context;

		/*
		 * A scan that reads with another role's rights (a view's owner) sends that role's key: its
		 * call reads that role's relserve.* settings and ceiling, as a SECURITY DEFINER
		 * function's call does (relserve/postgres/definer.py), and not the reader's.
		 */
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		if (OidIsValid(st->as_user))
			SetUserIdAndSecContext(st->as_user, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
		PG_TRY();
		{
			h = FunctionCallInvoke(fcinfo);
		}
		PG_FINALLY();
		{
			SetUserIdAndSecContext(save_userid, save_sec_context);
		}
		PG_END_TRY();
		if (fcinfo->isnull)
			elog(ERROR, "relserve_fdw: relserve._scan_open returned NULL");
		st->handle = MemoryContextStrdup(st->scan_cxt, TextDatumGetCString(h));
	}
	pfree(rows.data);
	st->relqueries++;
	return true;
}

static void
rs_close_window(RsScanState *st)
{
	if (st->handle)
	{
		char	   *handle = st->handle;

		st->handle = NULL;
		FunctionCall1Coll(&st->close_fn, InvalidOid, CStringGetTextDatum(handle));
	}
}

static void
rs_keep(RsScanState *st, HeapTuple tuple)
{
	if (st->ntuples == st->capacity)
	{
		st->capacity = st->capacity ? 2 * st->capacity : 64;
		st->tuples = st->tuples
			? repalloc(st->tuples, sizeof(HeapTuple) * st->capacity)
			: MemoryContextAlloc(st->scan_cxt, sizeof(HeapTuple) * st->capacity);
	}
	st->tuples[st->ntuples++] = tuple;
}

/*
 * The answer's text as the output column's type. A text that does not fit the type (the model
 * answered "maybe" for an integer column) fails this row only: NULL and a WARNING, unless
 * on_error is raise.
 */
static Datum
rs_answer_datum(RsScanState *st, Form_pg_attribute att, const char *text, int row, bool *isnull)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			in,
				ioparam;
	Datum		d = (Datum) 0;

	*isnull = false;
	if (att->atttypid == TEXTOID)
		return CStringGetTextDatum(text);
	getTypeInputInfo(att->atttypid, &in, &ioparam);
	if (st->raise_on_error)
		return OidInputFunctionCall(in, (char *) text, ioparam, att->atttypmod);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		d = OidInputFunctionCall(in, (char *) text, ioparam, att->atttypmod);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		ereport(WARNING,
				(errmsg("relserve_fdw: row %d: the answer \"%s\" is not a valid %s (%s); NULL instead",
						row + 1, text, format_type_be(att->atttypid), e->message)));
		FreeErrorData(e);
		*isnull = true;
	}
	PG_END_TRY();
	return d;
}

/* Poll the open window's relQuery once (at most 0.1 s); answers are kept, errors raised. */
static void
rs_poll(ForeignScanState *node, RsScanState *st)
{
	TupleDesc	desc = RelationGetDescr(node->ss.ss_currentRelation);
	RsPollEvent *events;
	int			n = rs_poll_events(&st->poll_fn, st->handle, 0.1, &events),
				k;

	for (k = 0; k < n; k++)
	{
		RsPollEvent *e = &events[k];

		if (e->kind == RS_EVENT_ROW)
		{
			int			index = e->row;
			RsRow	   *row;
			MemoryContext old;
			Datum	   *values;
			bool	   *isnull;
			int			att;

			if (index < 0 || index >= st->window_len)
				elog(ERROR, "relserve_fdw: the server answered row %d of a window of %d", index, st->window_len);
			row = &st->window[index];
			old = MemoryContextSwitchTo(st->keep_answers ? st->scan_cxt : st->window_cxt);
			values = palloc(sizeof(Datum) * desc->natts);
			isnull = palloc(sizeof(bool) * desc->natts);
			memcpy(values, row->values, sizeof(Datum) * desc->natts);
			memcpy(isnull, row->nulls, sizeof(bool) * desc->natts);
			att = st->output_attno - 1;
			if (e->answer != NULL)
				values[att] = rs_answer_datum(st, TupleDescAttr(desc, att), e->answer, index, &isnull[att]);
			else
				isnull[att] = true;
			rs_keep(st, heap_form_tuple(desc, values, isnull));
			MemoryContextSwitchTo(old);
		}
		else if (e->kind == RS_EVENT_STAT)
		{
			int			s;

			for (s = 0; s < RS_NSTATS; s++)
				if (strcmp(e->stat, rs_stat_names[s]) == 0)
				{
					st->stats[s] += e->value;
					st->have_stats[s] = true;
				}
		}
		else if (e->kind == RS_EVENT_DONE)
			rs_close_window(st);
		else if (e->kind == RS_EVENT_ERROR)
		{
			rs_close_window(st);
			rs_raise_poll_error(e, "relserve_fdw: the scan failed");
		}
		/* "accepted": the relQuery runs */
	}
}

static TupleTableSlot *
relserveIterateForeignScan(ForeignScanState *node)
{
	RsScanState *st = (RsScanState *) node->fdw_state;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;

	ExecClearTuple(slot);
	while (st->next >= st->ntuples && !st->done)
	{
		CHECK_FOR_INTERRUPTS();
		if (st->handle == NULL)
		{
			/* the last window's answers are all returned: its rows are not needed any more */
			if (!st->keep_answers)
				st->ntuples = st->next = 0;
			if (!rs_open_window(node, st))
			{
				st->done = true;
				break;
			}
		}
		rs_poll(node, st);
	}
	if (st->next < st->ntuples)
		ExecStoreHeapTuple(st->tuples[st->next++], slot, false);
	return slot;
}

static void
rs_stop(RsScanState *st)
{
	/* the executor may be ending: the Python side runs SQL, which needs a snapshot */
	PushActiveSnapshot(GetTransactionSnapshot());
	rs_close_window(st);
	PopActiveSnapshot();
	rs_close_source(st);
}

static void
relserveReScanForeignScan(ForeignScanState *node)
{
	RsScanState *st = (RsScanState *) node->fdw_state;

	if (st->keep_answers)
	{
		/* the answers do not change within a statement: replay those here, fetch the rest as before */
		st->next = 0;
		return;
	}
	/* nothing kept: start over (repeated prompts come from the server's result cache) */
	rs_stop(st);
	st->source_done = st->done = false;
	st->ntuples = st->next = 0;
	MemoryContextReset(st->window_cxt);
}

static void
relserveEndForeignScan(ForeignScanState *node)
{
	RsScanState *st = (RsScanState *) node->fdw_state;

	/* ended early (LIMIT): the rest of the relQuery is not wanted, cancel it on the server */
	if (st && (st->handle || st->portal))
		rs_stop(st);
}

static void
relserveExplainForeignScan(ForeignScanState *node, ExplainState *es)
{
	RsScanState *st = (RsScanState *) node->fdw_state;
	int			k;

	ExplainPropertyText("relserve Kind", st->kind, es);
	ExplainPropertyText("Template", st->template, es);
	ExplainPropertyText("Source Query", st->shown_sql, es);
	ExplainPropertyInteger("Window Rows", NULL, st->window_rows, es);
	if (es->verbose && strcmp(st->options_json, "{}") != 0)
		ExplainPropertyText("relQuery Options", st->options_json, es);
	if (es->analyze)
	{
		ExplainPropertyInteger("relQueries", NULL, st->relqueries, es);
		for (k = 0; k < RS_NSTATS; k++)
			if (st->have_stats[k])
				ExplainPropertyFloat(rs_stat_labels[k], NULL, st->stats[k], (k >= 3 && k <= 6) || k == 9 ? 3 : 0, es);
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
