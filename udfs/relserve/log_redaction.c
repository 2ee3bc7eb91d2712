#include "postgres.h"

#include "utils/elog.h"
#include "utils/memutils.h"

#include "relserve.h"

/*
 * Errors raised by relserve's Python arrive through PL/Python, which puts the Python exception's
 * type before the message ("plpy.Error: ...") and a traceback into the context. For the errors of
 * relserve's own functions both are noise to a SQL user: the message, SQLSTATE and hint say it all.
 */
static emit_log_hook_type prev_emit_log_hook = NULL;

static void
rs_strip_python(ErrorData *edata)
{
	static const char *const prefixes[] = {"plpy.Error: ", "spiexceptions.", NULL};
	bool		changed = true;

	if (edata->elevel < ERROR || edata->message == NULL || edata->context == NULL ||
		(strstr(edata->context, "PL/Python function \"llm_") == NULL &&
		 strstr(edata->context, "PL/Python function \"_load\"") == NULL &&
		 strstr(edata->context, "PL/Python function \"_scan_") == NULL &&
		 strstr(edata->context, "PL/Python function \"_batch_") == NULL &&
		 strstr(edata->context, "PL/Python function \"_reduce_final\"") == NULL &&
		 strstr(edata->context, "PL/Python function \"_topk_final\"") == NULL &&
		 strstr(edata->context, "PL/Python function \"label_plans\"") == NULL &&
		 strstr(edata->context, "PL/Python function \"forget_label_plans\"") == NULL &&
		 strstr(edata->context, "PL/Python function \"pin_label_plans\"") == NULL))
		return;
	while (changed)
	{
		const char *const *p;

		changed = false;
		for (p = prefixes; *p; p++)
			if (strncmp(edata->message, *p, strlen(*p)) == 0)
			{
				const char *rest = edata->message + strlen(*p);

				/* "spiexceptions.Name: message": drop up to the colon */
				if (strcmp(*p, "spiexceptions.") == 0)
				{
					const char *colon = strstr(rest, ": ");

					if (colon == NULL)
						continue;
					rest = colon + 2;
				}
				edata->message = MemoryContextStrdup(ErrorContext, rest);
				changed = true;
			}
	}
	/* the context's last line names the function; the traceback above it is Python's */
	{
		const char *last = strrchr(edata->context, '\n');

		if (strncmp(edata->context, "Traceback", 9) == 0 && last != NULL)
			edata->context = MemoryContextStrdup(ErrorContext, last + 1);
	}
}

static void
rs_emit_log_hook(ErrorData *edata)
{
	rs_strip_python(edata);
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
rs_log_redaction_init(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = rs_emit_log_hook;
}
