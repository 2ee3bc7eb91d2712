/*
 * The events relserve._scan_poll() returns to the C parts: a flat text[], four fields an event
 * (relserve/postgres/foreign_scan.py), decoded here once for the foreign scan and the batch node.
 */
#ifndef RELSERVE_POLL_EVENTS_H
#define RELSERVE_POLL_EVENTS_H

#include "fmgr.h"

typedef enum RsPollEventKind
{
	RS_EVENT_OTHER,				/* "accepted" (the relQuery runs), or anything the C parts do not act on */
	RS_EVENT_ROW,				/* one row's answer */
	RS_EVENT_STAT,				/* one statistic of the finished relQuery */
	RS_EVENT_DONE,				/* the relQuery is over */
	RS_EVENT_ERROR				/* the relQuery failed */
} RsPollEventKind;

typedef struct RsPollEvent
{
	RsPollEventKind kind;
	/* RS_EVENT_ROW */
	int			row;			/* which of the rows sent (0-based); -1 when not given */
	const char *answer;			/* the answer's text, NULL for none */
	const char *reason;			/* why there is no answer, or NULL */
	/* RS_EVENT_STAT (both given: a statistic without either is RS_EVENT_OTHER) */
	const char *stat;			/* its name (foreign_scan.STAT_NAMES) */
	double		value;
	/* RS_EVENT_ERROR */
	const char *sqlstate;		/* five characters, or NULL */
	const char *message;
	const char *hint;
} RsPollEvent;

/*
 * Poll the relQuery ``handle`` once through poll_fn (relserve._scan_poll, waiting at most wait_s
 * seconds): the events that arrived, in order, in *events; returns how many.
 */
extern int	rs_poll_events(FmgrInfo *poll_fn, const char *handle, double wait_s, RsPollEvent **events);

/* Raise an RS_EVENT_ERROR as the error it reports (fallback: its message when it has none). */
extern void rs_raise_poll_error(const RsPollEvent *event, const char *fallback) pg_attribute_noreturn();

#endif
