/*
 * What the parts of the relserve extension's C library share.
 */
#ifndef RELSERVE_H
#define RELSERVE_H

#include "fmgr.h"

/* batch_calls.c: the planner hook and the custom scan that batch scalar llm_* calls */
extern void rs_batch_calls_init(void);

/* a relserve.* setting's text ("" when unset) */
extern const char *rs_setting(const char *name);

/* a function of the schema relserve, ready to call through fmgr (no EXECUTE check: roles may not) */
extern void rs_lookup(FmgrInfo *fn, const char *name, int nargs, Oid *argtypes, MemoryContext cxt);

#endif
