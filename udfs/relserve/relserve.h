/*
 * What the parts of the relserve extension's C library share.
 */
#ifndef RELSERVE_H
#define RELSERVE_H

#include "fmgr.h"

/* settings.c: define the relserve.* settings; a setting's text ("" when unset), as the current call reads it
 * (inside a SECURITY DEFINER function, a value the caller chose is not read: the definer's default instead) */
extern void rs_settings_init(void);
extern const char *rs_setting(const char *name);
extern bool rs_setting_bool(const char *name, bool dflt);
/* a role's default for any setting in this database (pg_db_role_setting, as a session of it starts), NULL for none */
extern const char *rs_role_default(Oid role, const char *full_name);
/* the names of the call settings (and of the call options of a foreign table), NULL-terminated */
extern const char *const rs_setting_names[];

/* log_redaction.c: strip PL/Python's wrapping from relserve's own errors */
extern void rs_log_redaction_init(void);

/* batch_calls.c: the planner hook and the custom scan that batch scalar llm_* calls */
extern void rs_batch_calls_init(void);

/* python_calls.c: a function of the schema relserve, ready to call through fmgr (no EXECUTE check: roles may not) */
extern void rs_lookup(FmgrInfo *fn, const char *name, int nargs, Oid *argtypes, MemoryContext cxt);

#endif
