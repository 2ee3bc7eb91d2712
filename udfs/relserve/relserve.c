/*
 * relserve: the C part of the relserve extension. This file only loads the parts:
 *
 * settings.c       the relserve.* settings (a misspelt name is an error; url, python_path and
 *                  api_key are refused with where they went)
 * log_redaction.c  relserve's own errors without PL/Python's exception prefix and traceback
 * fdw.c            relserve_fdw: LLM answers over a source query's rows as a foreign table
 * batch_calls.c    the planner hook and custom scan that batch scalar llm_* calls
 * python_calls.c   how the C parts find relserve's Python functions (through fmgr, not SQL)
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "relserve.h"

PG_MODULE_MAGIC;

#define RS_VERSION "0.4"

PG_FUNCTION_INFO_V1(relserve_library_version);

void		_PG_init(void);

void
_PG_init(void)
{
	rs_settings_init();
	rs_log_redaction_init();
	rs_batch_calls_init();
}

Datum
relserve_library_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(RS_VERSION));
}
