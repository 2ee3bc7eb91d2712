/*
 * Where each qual of a batched node runs, so that the batches keep PostgreSQL's security order
 * (batch_calls.c explains the stages): each qual's security level, looked up in what the planner
 * knew while it planned the statement, and the slot each qual takes.
 */
#include "postgres.h"

#include "nodes/nodeFuncs.h"

#include "batch_calls.h"

/* a copy of an expression whose Vars do not say which range table entry they read: setrefs renumbers them */
static Node *
rs_without_varnos(Node *node, void *context)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) copyObject(node);

		v->varno = 1;
		v->varnosyn = 0;
		v->varattnosyn = 0;
		return (Node *) v;
	}
	return expression_tree_mutator(node, rs_without_varnos, context);
}

/* a plan qual's security level as the planner knew it, or RS_LEVEL_UNKNOWN */
int
rs_security_level(Expr *qual, Oid relid, RsPlanning *planning)
{
	Node	   *mine = NULL;
	int			level = RS_LEVEL_UNKNOWN;
	ListCell   *lc;

	if (planning->max_security_level == 0)
		return 0;				/* no security quals in the statement: every qual is level 0 */
	foreach(lc, planning->known)
	{
		RsKnownQual *k = lfirst(lc);

		if (k->relid != relid)
			continue;
		if (mine == NULL)
			mine = rs_without_varnos((Node *) qual, NULL);
		if (!equal(mine, rs_without_varnos((Node *) k->clause, NULL)))
			continue;
		if (level != RS_LEVEL_UNKNOWN && level != (int) k->security_level)
			return RS_LEVEL_UNKNOWN;	/* the same qual at two levels: it keeps its place */
		level = (int) k->security_level;
	}
	return level;
}

/* PostgreSQL's rule: a qual may run before one that comes earlier in the planner's order only if it is leakproof or its level is not higher */
static bool
rs_may_run_before(const RsQual *later, const RsQual *earlier)
{
	return later->leakproof ||
		(later->level != RS_LEVEL_UNKNOWN && earlier->level != RS_LEVEL_UNKNOWN && later->level <= earlier->level);
}

/*
 * Each qual's slot, in the planner's order: the earliest one after every earlier qual it may not run
 * ahead of. A qual with calls joins a stage only after such a qual's stage or slot (never in the same
 * stage: its calls would see the rows that qual drops); a qual without calls runs right after it.
 * Returns how many security stages the quals' calls take (batch_plan.c gives each of a stage's
 * quals a batch of its own).
 */
int
rs_place_quals(RsQual *quals, int n)
{
	int			nbatches = 0;
	int			i,
				j;

	for (j = 0; j < n; j++)
	{
		int			after = -1;

		for (i = 0; i < j; i++)
			if (!rs_may_run_before(&quals[j], &quals[i]))
				after = Max(after, quals[i].slot);
		if (quals[j].calls)
			quals[j].slot = after < 0 ? 1 : (after % 2 == 1 ? after + 2 : after + 1);
		else
			quals[j].slot = after < 0 ? 0 : (after % 2 == 1 ? after + 1 : after);
		nbatches = Max(nbatches, (quals[j].slot + 1) / 2);
	}
	return nbatches;
}
