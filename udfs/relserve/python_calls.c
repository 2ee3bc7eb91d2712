/*
 * relserve's Python functions as the C parts call them: through fmgr, never through SQL. No role
 * may EXECUTE them (the server address and key come only from the catalog), and fmgr does not
 * check EXECUTE, so only this library reaches them.
 */
#include "postgres.h"

#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "nodes/pg_list.h"
#include "nodes/value.h"
#include "parser/parse_func.h"

#include "relserve.h"

void
rs_lookup(FmgrInfo *fn, const char *name, int nargs, Oid *argtypes, MemoryContext cxt)
{
	Oid			oid = LookupFuncName(list_make2(makeString("relserve"), makeString((char *) name)), nargs, argtypes, false);

	fmgr_info_cxt(oid, fn, cxt);
}
