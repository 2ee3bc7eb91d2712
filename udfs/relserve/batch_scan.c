/*
 * Running the batch node: it reads its input in windows of relserve.batch_window rows, sends each
 * batch's call sites over the window's rows still in play as one relQuery each, polls them, runs
 * the quals that waited for a batch, and emits the rows in their input order once their answers
 * are in.
 *
 * The llm quals of one security stage run one after another, each over the rows the earlier ones
 * kept, cheapest per row removed first (issue 64): on the first window, each of them answers the
 * same spread sample of up to RS_ORDER_SAMPLE_ROWS rows (so each call's label plan, if it has none
 * yet, is made from the same rows whatever the order, relserve.order_quals on or off), the share
 * of the sample each keeps and its prompt's length give its rank, (characters +
 * RS_ROW_OVERHEAD_CHARS) / (1 - share kept), as DuckDB's planner ranks its filters, and that order
 * holds for every later window. The sample's answers are kept: those rows are not sent again.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/explain.h"
#include "executor/executor.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/extensible.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/ruleutils.h"
#include "utils/snapmgr.h"

#include "batch_calls.h"
#include "poll_events.h"
#include "relserve.h"

CustomScanMethods rs_batch_scan_methods;

typedef struct RsExecSite
{
	char	   *kind;
	char	   *template;
	char	   *spec;
	char	   *form;
	int			batch;
	bool		in_qual;
	bool		isolated;		/* a security qual's call: sent isolated (batch_plan.c) */
	char	   *name;			/* llm_<kind>, for messages */
	Oid			result_type;
	ExprState  *value;			/* its value argument, over the scan tuple */
	char	   *handle;			/* its relQuery for the current window, while it runs */
	int		   *window_index;	/* the window row of each row sent */
	int			nsent;
	int			sent_chars;		/* the JSON of the rows last sent: what a row's value costs */
} RsExecSite;

typedef struct RsWinRow
{
	Datum	   *values;			/* the scan tuple: inputs, then one answer per site */
	bool	   *nulls;
	int			pending;		/* answers still to come in the current batch */
	bool		dropped;		/* a qual removed it */
	bool	   *answered;		/* per site: its answer is in (the order's sample answered it) */
} RsWinRow;

typedef struct RsBatchState
{
	CustomScanState css;
	RsExecSite *sites;
	int			nsites;
	int			ninputs;
	int			nbatches;		/* the quals' batches; the target list's calls come after them */
	ExprState **stage_quals;	/* per batch of the quals: the qual that runs once its answers are in */
	ExprState **waits;			/* per place in the run: quals that waited for a security stage */
	int		   *order;			/* per place (1-based): the batch that runs there */
	int		   *group;			/* per place (1-based): its security stage, whose batches share places */
	bool	   *movable;		/* per batch (1-based): a label qual, measured on the first window */
	bool		order_quals;	/* relserve.order_quals when planned: the measured ones run cheapest first */
	bool	   *ordered;		/* per security stage: its movable batches are ordered */
	bool	   *sample;			/* per window row, while a stage's sample runs; NULL otherwise */
	int			sampling;		/* the security stage whose sample runs, 0 for none */
	StringInfoData order_note;	/* EXPLAIN ANALYZE: the order chosen and why */
	char	   *qual_order;		/* why quals wait for a batch (EXPLAIN), or "" */
	int			window_rows;
	int			row_bound;		/* a LIMIT or EXISTS above needs only this many rows (0: every row; batch_plan.c) */
	char	   *bound_by;		/* what set it: "a LIMIT", "an EXISTS" */
	int			next_window;	/* under a row bound: the next window's rows, doubling up to window_rows */
	long		rows_read;
	FmgrInfo	open_fn;
	FmgrInfo	poll_fn;
	FmgrInfo	close_fn;
	MemoryContext window_cxt;
	RsWinRow   *rows;
	int			nrows;
	int			place;			/* 0: no window; 1..nbatches: the quals' places (order[place] runs there);
								 * nbatches + 1: the target list's batch, rows go out */
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
	List	   *waits = lthird(cscan->custom_exprs);
	List	   *groups = list_nth(priv, 3);
	List	   *movable = list_nth(priv, 4);
	const char *window = rs_setting("batch_window");
	const char *on_error = rs_setting("on_error");
	int			i;

	node->custom_ps = list_make1(ExecInitNode(linitial(cscan->custom_plans), estate, eflags));
	st->nbatches = intVal(linitial(priv));
	st->qual_order = strVal(lsecond(priv));
	st->row_bound = intVal(lthird(priv));
	/*
	 * read when the statement runs, not when it is planned: a prepared statement (psycopg prepares
	 * one it has run five times) keeps its plan across a SET relserve.order_quals
	 */
	st->order_quals = rs_setting_bool("order_quals", true);
	st->bound_by = strVal(list_nth(priv, 5));
	st->nsites = (list_length(priv) - RS_PRIV_HEAD) / RS_FIELDS_PER_SITE;
	st->sites = palloc0(sizeof(RsExecSite) * st->nsites);
	st->ninputs = list_length(cscan->custom_scan_tlist) - st->nsites;
	for (i = 0; i < st->nsites; i++)
	{
		RsExecSite *s = &st->sites[i];
		TargetEntry *te = list_nth(cscan->custom_scan_tlist, st->ninputs + i);
		int			at = RS_PRIV_HEAD + i * RS_FIELDS_PER_SITE;

		s->kind = strVal(list_nth(priv, at));
		s->template = strVal(list_nth(priv, at + 1));
		s->spec = strVal(list_nth(priv, at + 2));
		s->form = strVal(list_nth(priv, at + 3));
		s->batch = intVal(list_nth(priv, at + 4));
		s->in_qual = boolVal(list_nth(priv, at + 5));
		s->isolated = boolVal(list_nth(priv, at + 6));
		s->name = psprintf("llm_%s", s->kind);
		s->result_type = exprType((Node *) te->expr);
		s->value = ExecInitExpr(list_nth(values, i), &node->ss.ps);
	}
	st->stage_quals = palloc0(sizeof(ExprState *) * Max(st->nbatches, 1));
	st->waits = palloc0(sizeof(ExprState *) * Max(st->nbatches, 1));
	st->order = palloc0(sizeof(int) * (st->nbatches + 2));
	st->group = palloc0(sizeof(int) * (st->nbatches + 2));
	st->movable = palloc0(sizeof(bool) * (st->nbatches + 2));
	st->ordered = palloc0(sizeof(bool) * (st->nbatches + 2));
	for (i = 0; i < st->nbatches; i++)
	{
		st->stage_quals[i] = ExecInitQual(list_nth(stages, i), &node->ss.ps);
		st->waits[i] = ExecInitQual(list_nth(waits, i), &node->ss.ps);
		st->order[i + 1] = i + 1;	/* the planner's order until the first window orders a stage */
		st->group[i + 1] = intVal(list_nth(groups, i));
		st->movable[i + 1] = boolVal(list_nth(movable, i));
	}
	initStringInfo(&st->order_note);
	st->window_rows = window[0] ? atoi(window) : RS_DEFAULT_BATCH_WINDOW;
	if (st->window_rows < 1 || st->window_rows > 10000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("relserve.batch_window must be a whole number of rows from 1 to 10000, got \"%s\"", window)));
	st->next_window = st->row_bound > 0 ? Min(st->window_rows, Max(RS_FIRST_BOUNDED_WINDOW, st->row_bound)) : st->window_rows;
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
rs_open_site(RsBatchState *st, RsExecSite *s, const bool *only)
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

		if (row->dropped || row->answered[s - st->sites] || (only != NULL && !only[r]))
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
	s->sent_chars = rows.len;
	if (s->nsent == 0)
		return;
	/* the form says how a row's value binds, and whether the call goes out isolated */
	h = FunctionCall5Coll(&st->open_fn, InvalidOid, CStringGetTextDatum(s->kind), CStringGetTextDatum(s->template),
						  CStringGetTextDatum(s->spec),
						  CStringGetTextDatum(s->isolated ? psprintf("%s isolated", s->form) : s->form),
						  CStringGetTextDatum(rows.data));
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
				row->answered[i] = true;
				if (e->answer != NULL)
				{
					MemoryContext old = MemoryContextSwitchTo(st->window_cxt);

					row->values[col] = rs_answer(s, e->answer);
					row->nulls[col] = false;
					MemoryContextSwitchTo(old);
				}
				else if (e->reason != NULL && !s->isolated)
					/* (not a security qual's row: the reader may not see it, nor why it failed) */
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

/* send the window's batch ``batch``: each of its call sites over the rows still in play (of ``only``) */
static void
rs_open_batch(RsBatchState *st, int batch, const bool *only)
{
	int			i;

	for (i = 0; i < st->nsites; i++)
		if (st->sites[i].batch == batch)
			rs_open_site(st, &st->sites[i], only);
}

/* the batch's calls, named for EXPLAIN: "llm_filter" or "llm_filter + llm_classify" */
static char *
rs_batch_names(RsBatchState *st, int batch)
{
	StringInfoData names;
	int			i;

	initStringInfo(&names);
	for (i = 0; i < st->nsites; i++)
		if (st->sites[i].batch == batch)
			appendStringInfo(&names, "%s%s", names.len ? " + " : "", st->sites[i].name);
	return names.data;
}

/*
 * Go to a place in the run: send the batch that runs there, or first, where the place starts a
 * security stage with two or more label quals not yet ordered, a spread sample of the rows in play
 * to each of them (the first window's: the order then holds for the scan).
 */
static void
rs_start_place(RsBatchState *st, int place)
{
	int			stage,
				movable = 0,
				inplay = 0,
				taken = 0,
				want,
				k = 0,
				b,
				r;

	st->place = place;
	if (place > st->nbatches)
	{
		rs_open_batch(st, place, NULL);
		return;
	}
	stage = st->group[place];
	for (b = 1; b <= st->nbatches; b++)
		movable += st->group[b] == stage && st->movable[b];
	for (r = 0; r < st->nrows; r++)
		inplay += !st->rows[r].dropped;
	/*
	 * only a stage's first place may order it, and only over rows: a window whose rows an earlier
	 * stage all dropped runs the planner's order and leaves the choice to the next window
	 */
	if (st->ordered[stage] || movable < 2 || (place > 1 && st->group[place - 1] == stage) || inplay == 0)
	{
		rs_open_batch(st, st->order[place], NULL);
		return;
	}
	want = Min(inplay, RS_ORDER_SAMPLE_ROWS);
	st->sample = MemoryContextAllocZero(st->window_cxt, sizeof(bool) * Max(st->nrows, 1));
	for (r = 0; r < st->nrows; r++)
	{
		if (st->rows[r].dropped)
			continue;
		/* the j-th of the sample is the floor(j * inplay / want)-th row in play: spread over the window */
		if (taken < want && k == (int) ((int64) taken * inplay / want))
		{
			st->sample[r] = true;
			taken++;
		}
		k++;
	}
	st->sampling = stage;
	for (b = 1; b <= st->nbatches; b++)
		if (st->group[b] == stage && st->movable[b])
			rs_open_batch(st, b, st->sample);
}

/*
 * The sample is in: each movable batch's share of the sample its qual keeps and its row's prompt
 * length give its rank, and the stage's places take its movable batches cheapest first (ties keep
 * the planner's order); the batches that generate text keep their places after them.
 */
static void
rs_finish_sample(RsBatchState *st)
{
	ExprContext *econtext = st->css.ss.ps.ps_ExprContext;
	int			stage = st->sampling;
	int			first = 0,
				n = 0,
				b,
				i,
				j,
				r;
	int		   *batches = palloc(sizeof(int) * st->nbatches);
	double	   *rank = palloc(sizeof(double) * (st->nbatches + 1));
	StringInfoData said;

	initStringInfo(&said);
	for (b = 1; b <= st->nbatches; b++)
		if (st->group[b] == stage && st->movable[b])
		{
			int			seen = 0,
						kept = 0;
			double		chars = 0;

			if (first == 0)
				first = b;
			for (r = 0; r < st->nrows; r++)
			{
				RsWinRow   *row = &st->rows[r];

				row->pending = 0;
				if (!st->sample[r] || row->dropped)
					continue;
				econtext->ecxt_scantuple = rs_row_slot(st, row);
				seen++;
				kept += ExecQual(st->stage_quals[b - 1], econtext);
				ResetExprContext(econtext);
			}
			for (i = 0; i < st->nsites; i++)
				if (st->sites[i].batch == b)
					chars += strlen(st->sites[i].template) + RS_ROW_OVERHEAD_CHARS +
						(double) st->sites[i].sent_chars / Max(st->sites[i].nsent, 1);
			rank[b] = chars / Max(1.0 - (seen ? (double) kept / seen : 1.0), 0.01);
			appendStringInfo(&said, "; batch %d (%s) kept %d of %d sampled rows, %.0f characters a row",
							 b, rs_batch_names(st, b), kept, seen, chars);
			/* insertion in rank order, stable: a tie keeps the planner's order (as does order_quals off) */
			for (j = n; j > 0 && st->order_quals && rank[batches[j - 1]] > rank[b]; j--)
				batches[j] = batches[j - 1];
			batches[j] = b;
			n++;
		}
	/* the stage's movable batches hold its first places (batch_plan.c puts them before the others) */
	for (j = 0; j < n; j++)
		st->order[first + j] = batches[j];
	appendStringInfo(&st->order_note, "%sbatches ", st->order_note.len ? "; then " : "");
	for (j = 0; j < n; j++)
		appendStringInfo(&st->order_note, "%s%d", j ? ", " : "", batches[j]);
	appendStringInfo(&st->order_note, " in this order, %s%s",
					 st->order_quals ? "cheapest per row removed first" : "the planner's (relserve.order_quals is off)",
					 said.data);
	st->ordered[stage] = true;
	st->sampling = 0;
	st->sample = NULL;
}

/*
 * The batch at this place is in: its qual runs on each row still in play (a row the server did
 * not answer has NULL there), then the quals that waited for its security stage if this is the
 * stage's last place; the rows they reject are dropped.
 */
static void
rs_finish_qual_batch(RsBatchState *st)
{
	ExprContext *econtext = st->css.ss.ps.ps_ExprContext;
	ExprState  *qual = st->stage_quals[st->order[st->place] - 1];
	ExprState  *waits = st->waits[st->place - 1];
	int			r;

	for (r = 0; r < st->nrows; r++)
	{
		RsWinRow   *row = &st->rows[r];

		row->pending = 0;
		if (row->dropped)
			continue;
		econtext->ecxt_scantuple = rs_row_slot(st, row);
		row->dropped = !ExecQual(qual, econtext) || !ExecQual(waits, econtext);
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
	int			size = st->next_window;

	MemoryContextReset(st->window_cxt);
	st->nrows = st->next_emit = 0;
	if (st->input_done)
		return false;
	/* under a LIMIT the LLM answers a small window first and more only while rows are missing */
	st->next_window = Min(st->window_rows, size * 2);
	old = MemoryContextSwitchTo(st->window_cxt);
	st->rows = palloc0(sizeof(RsWinRow) * size);
	while (st->nrows < size)
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
		st->rows_read++;
		row = &st->rows[st->nrows++];
		row->answered = palloc0(sizeof(bool) * Max(st->nsites, 1));
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
		while (st->place == last && st->next_emit < st->nrows)
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
		if (st->place != 0 && rs_sites_open(st))
		{
			rs_poll_sites(st);
			continue;
		}
		if (st->sampling)
		{
			rs_finish_sample(st);
			rs_open_batch(st, st->order[st->place], NULL);
		}
		else if (st->place == 0)
		{
			if (!rs_read_window(st))
				return ExecClearTuple(ss->ss_ScanTupleSlot);
			rs_start_place(st, 1);
		}
		else if (st->place < last)
		{
			rs_finish_qual_batch(st);
			rs_start_place(st, st->place + 1);
		}
		else if (st->next_emit < st->nrows)
		{
			int			r;

			for (r = st->next_emit; r < st->nrows; r++)
				st->rows[r].pending = 0;	/* a row the server did not answer goes out with NULL */
		}
		else
			st->place = 0;		/* the window is done: the next one */
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
	st->place = 0;
	st->sampling = 0;			/* a stage whose sample did not finish is sampled again */
	st->sample = NULL;
	st->input_done = false;
	st->next_window = st->row_bound > 0 ? Min(st->window_rows, Max(RS_FIRST_BOUNDED_WINDOW, st->row_bound)) : st->window_rows;
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
	int			i;

	/* the quals that run here, in the planner's order of batches (the plan's own Filter line is empty) */
	for (i = 0; i < list_length(stages); i++)
	{
		quals = list_concat(quals, (List *) list_nth(stages, i));
		quals = list_concat(quals, (List *) list_nth(lthird(cscan->custom_exprs), i));
	}
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
	if (es->analyze && st->order_note.len > 0)
		ExplainPropertyText("Order of LLM Quals", st->order_note.data, es);
	else
	{
		int			movable = 0,
					b;

		for (b = 1; b <= st->nbatches; b++)
			movable += st->movable[b];
		if (movable >= 2)
			ExplainPropertyText("Order of LLM Quals",
								psprintf("one after another, the label quals of a security stage %s, measured on a "
										 "sample of up to %d rows of the first window",
										 st->order_quals ? "cheapest per row removed first"
										 : "in the planner's order (relserve.order_quals is off)",
										 RS_ORDER_SAMPLE_ROWS),
								es);
		else if (st->nbatches >= 2)
			ExplainPropertyText("Order of LLM Quals", "one after another, in the batches' order", es);
	}
	ExplainPropertyInteger("Window Rows", NULL, st->window_rows, es);
	if (st->row_bound > 0)
		ExplainPropertyText("Row Bound",
							psprintf("%d (%s above): windows of %d rows first, doubling while rows are missing",
									 st->row_bound, st->bound_by,
									 Min(st->window_rows, Max(RS_FIRST_BOUNDED_WINDOW, st->row_bound))),
							es);
	if (es->analyze)
	{
		ExplainPropertyInteger("relQueries", NULL, st->relqueries, es);
		ExplainPropertyInteger("Rows Sent", NULL, st->rows_sent, es);
		ExplainPropertyInteger("Rows Read", NULL, st->rows_read, es);
		if (st->row_bound > 0 && !st->input_done)
			ExplainPropertyText("Stopped",
								strcmp(st->bound_by, "an EXISTS") == 0
								? psprintf("the EXISTS had its row after %ld input rows; the rest were not read or sent",
										   st->rows_read)
								: psprintf("the LIMIT had its %d rows after %ld input rows; the rest were not read or sent",
										   st->row_bound, st->rows_read),
								es);
		if (st->have_estimate)
		{
			ExplainPropertyFloat("Estimated (s)", NULL, st->estimated_s, 3, es);
			ExplainPropertyFloat("Latency (s)", NULL, st->latency_s, 3, es);
		}
	}
}

void
rs_batch_scan_init(void)
{
	rs_batch_scan_methods.CustomName = "relserve batch";
	rs_batch_scan_methods.CreateCustomScanState = rs_create_state;
	RegisterCustomScanMethods(&rs_batch_scan_methods);

	rs_batch_exec_methods.CustomName = "relserve batch";
	rs_batch_exec_methods.BeginCustomScan = rs_begin;
	rs_batch_exec_methods.ExecCustomScan = rs_exec;
	rs_batch_exec_methods.EndCustomScan = rs_end;
	rs_batch_exec_methods.ReScanCustomScan = rs_rescan;
	rs_batch_exec_methods.ExplainCustomScan = rs_explain;
}
