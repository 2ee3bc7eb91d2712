/*
 * What the files of the batch node share (batch_calls.c has the overview): the llm_* call sites
 * found in a plan node (batch_call_sites.c), what the planner knew of each qual's security level
 * and where each qual runs (batch_qual_order.c), the custom scan in place of the node
 * (batch_plan.c), running it (batch_scan.c), and the pass-through node for calls that cannot be
 * batched (batch_per_row.c).
 */
#ifndef RELSERVE_BATCH_CALLS_H
#define RELSERVE_BATCH_CALLS_H

#include "nodes/extensible.h"
#include "nodes/pg_list.h"
#include "nodes/plannodes.h"
#include "nodes/primnodes.h"

#define RS_DEFAULT_BATCH_WINDOW 2000
#define RS_PRIV_HEAD 6				/* custom_private's fields before the call sites: batches, qual order, row bound,
								 * each batch's stage, whether each is a label qual, what set the row
								 * bound */
#define RS_FIELDS_PER_SITE 7		/* custom_private's fields per call site (batch_plan.c writes them) */
#define RS_FIRST_BOUNDED_WINDOW 64	/* under a LIMIT: the first window's rows (a label plan's sample), doubling after */
#define RS_MAX_ROW_BOUND 1000000	/* a LIMIT above this keeps the full windows */
#define RS_LEVEL_UNKNOWN (-1)
#define RS_ORDER_SAMPLE_ROWS 64		/* the first window's rows that measure each llm qual before they are ordered */
#define RS_ROW_OVERHEAD_CHARS 128	/* what a request costs beside its prompt (as DuckDB's planner counts it) */

/* ------------------------------------------------------------------ batch_call_sites.c */

typedef struct RsSite
{
	FuncExpr   *call;
	const char *kind;			/* map, filter, classify, extract */
	char	   *template;
	char	   *spec;			/* labels as a JSON array, or the JSON schema; NULL for none */
	const char *form;			/* "args" (VARIADIC text[]) or "fields" (jsonb) */
	int			qual;			/* the qual it is in (0-based), -1 for the target list */
	int			batch;			/* 1, 2, ...: which batch sends it (the target list's is the last) */
	bool		isolated;		/* a security qual's call (a policy's, a security_barrier view's): sent
								 * isolated, out of the reader's caches (issue 63) */
} RsSite;

typedef struct RsFind
{
	Oid			schema;			/* the extension: only its llm_* functions count */
	List	   *sites;			/* RsSite * */
	int			qual;			/* the qual being walked, -1 for the target list */
	const char *refused;		/* why the node cannot be batched, or NULL */
} RsFind;

/* find the llm_* call sites under node (f->refused says why they cannot be batched) */
extern bool rs_find_walker(Node *node, RsFind *f);

/* ------------------------------------------------------------------ batch_qual_order.c */

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
	bool		security_only;	/* relserve.batch_calls is off: only nodes with a security qual's call */
} RsPlanning;

typedef struct RsQual
{
	Expr	   *expr;
	bool		calls;			/* it has batched llm_* call sites */
	int			level;			/* its security level, or RS_LEVEL_UNKNOWN */
	bool		leakproof;
	int			slot;			/* 0: on the input node; 2k-1: in security stage k; 2k: here, right after it */
	bool		labels_only;	/* its calls all score labels (llm_filter, llm_classify): no text generated */
	int			batch;			/* the batch that sends its calls (1, 2, ...), 0 for none */
} RsQual;

/* a plan qual's security level as the planner knew it, or RS_LEVEL_UNKNOWN */
extern int	rs_security_level(Expr *qual, Oid relid, RsPlanning *planning);
/* each qual's slot; returns how many security stages the quals' calls take */
extern int	rs_place_quals(RsQual *quals, int n);

/* ------------------------------------------------------------------ batch_plan.c */

/* the plan with a custom scan in place of each node that calls llm_* functions */
extern Plan *rs_walk_plan(Plan *plan, RsPlanning *planning, List *rtable);
/* bound the batch node of each EXISTS sublink's plan (of ``subplans``) under ``plan`` to one row */
extern void rs_bound_exists(Plan *plan, List *subplans);

/* ------------------------------------------------------------------ batch_scan.c */

extern CustomScanMethods rs_batch_scan_methods;
extern void rs_batch_scan_init(void);

/* ------------------------------------------------------------------ batch_per_row.c */

/* the node as planned, under a pass-through node that says in EXPLAIN why its calls run per row */
extern Plan *rs_per_row_plan(Plan *plan, const char *reason);
extern void rs_per_row_init(void);

#endif
