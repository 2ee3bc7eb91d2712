/*
 * The events relserve._scan_poll() returns, decoded once for both of its callers (fdw.c's foreign
 * scan and the batch node): a flat text[] of four fields an event, as foreign_scan.scan_poll
 * writes them:
 *     accepted, relquery id, total rows, NULL
 *     row,      index among the rows sent, answer or NULL, why no answer or NULL
 *     stat,     name, value, NULL
 *     done,     NULL, NULL, NULL
 *     error,    SQLSTATE, message, hint or NULL
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "poll_events.h"

static RsPollEventKind
rs_event_kind(const char *name)
{
	if (strcmp(name, "row") == 0)
		return RS_EVENT_ROW;
	if (strcmp(name, "stat") == 0)
		return RS_EVENT_STAT;
	if (strcmp(name, "done") == 0)
		return RS_EVENT_DONE;
	if (strcmp(name, "error") == 0)
		return RS_EVENT_ERROR;
	return RS_EVENT_OTHER;
}

int
rs_poll_events(FmgrInfo *poll_fn, const char *handle, double wait_s, RsPollEvent **events)
{
	Datum		polled = FunctionCall2Coll(poll_fn, InvalidOid, CStringGetTextDatum(handle), Float8GetDatum(wait_s));
	Datum	   *items;
	bool	   *nulls;
	int			n,
				k,
				count = 0;
	RsPollEvent *out;

	deconstruct_array(DatumGetArrayTypeP(polled), TEXTOID, -1, false, TYPALIGN_INT, &items, &nulls, &n);
	out = palloc0(sizeof(RsPollEvent) * (n / 4 + 1));
	for (k = 0; k + 3 < n; k += 4)
	{
		RsPollEvent *e = &out[count++];
		char	   *a = nulls[k + 1] ? NULL : TextDatumGetCString(items[k + 1]);
		char	   *b = nulls[k + 2] ? NULL : TextDatumGetCString(items[k + 2]);
		char	   *c = nulls[k + 3] ? NULL : TextDatumGetCString(items[k + 3]);

		e->kind = nulls[k] ? RS_EVENT_OTHER : rs_event_kind(TextDatumGetCString(items[k]));
		switch (e->kind)
		{
			case RS_EVENT_ROW:
				e->row = a ? atoi(a) : -1;
				e->answer = b;
				e->reason = c;
				break;
			case RS_EVENT_STAT:
				if (a == NULL || b == NULL)
					e->kind = RS_EVENT_OTHER;
				else
				{
					e->stat = a;
					e->value = strtod(b, NULL);
				}
				break;
			case RS_EVENT_ERROR:
				e->sqlstate = a && strlen(a) == 5 ? a : NULL;
				e->message = b;
				e->hint = c;
				break;
			default:
				break;
		}
	}
	*events = out;
	return count;
}

void
rs_raise_poll_error(const RsPollEvent *event, const char *fallback)
{
	const char *s = event->sqlstate;

	ereport(ERROR,
			(errcode(s ? MAKE_SQLSTATE(s[0], s[1], s[2], s[3], s[4]) : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("%s", event->message ? event->message : fallback),
			 event->hint ? errhint("%s", event->hint) : 0));
	pg_unreachable();
}
