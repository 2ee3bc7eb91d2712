/*
 * The relserve.* settings. Defining them (and reserving the prefix) makes a misspelt
 * "SET relserve.max_token" an error, and refuses the three names that are a superuser's
 * decision (url, python_path, api_key) with a message saying where they went.
 */
#include "postgres.h"

#include "utils/guc.h"

#include "relserve.h"

/* ------------------------------------------------------------------ settings */

/*
 * The options of a call, one vocabulary for settings, *_query options and foreign table options
 * (relserve.postgres.settings.SETTING_NAMES; tests/test_postgres_unit.py checks the two agree).
 * Kept as text here: the Python side checks values with relserve's own validation.
 */
const char *const rs_setting_names[] = {
	"timeout", "on_server_error", "batch_calls", "batch_window", "max_tokens", "temperature", "top_p",
	"seed", "system", "on_error", "reorder_fields", "method", "examples", "prompt_shape", "answer_field",
	"cascade", "max_tokens_total", "max_seconds", "on_budget", "cache", "priority", "deadline_s", NULL
};
#define RS_NSETTINGS 22
static char *rs_setting_values[RS_NSETTINGS];

/* names that were settings once and are a superuser's decision now */
static const char *const rs_refused_names[] = {"url", "python_path", "api_key", NULL};
static const char *const rs_refused_why[] = {
	"relserve.url is not a setting: the server address is a superuser's decision",
	"relserve.python_path is not a setting: its folder's .pth files would run as the postgres OS user",
	"relserve.api_key is not a setting: every role can read settings",
};
static const char *const rs_refused_hint[] = {
	"A superuser sets it in relserve.config: INSERT INTO relserve.config VALUES ('url', 'http://127.0.0.1:8000').",
	"A superuser sets it in relserve.config: INSERT INTO relserve.config VALUES ('python_path', '<site-packages>').",
	"A superuser stores each role's key in relserve.api_keys.",
};
static char *rs_refused_values[3];

static bool
rs_refuse_check(char **newval, void **extra, GucSource source, int which)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	GUC_check_errcode(ERRCODE_INSUFFICIENT_PRIVILEGE);
	GUC_check_errmsg("%s", rs_refused_why[which]);
	GUC_check_errhint("%s", rs_refused_hint[which]);
	return false;
}

static bool
rs_refuse_url(char **newval, void **extra, GucSource source)
{
	return rs_refuse_check(newval, extra, source, 0);
}

static bool
rs_refuse_python_path(char **newval, void **extra, GucSource source)
{
	return rs_refuse_check(newval, extra, source, 1);
}

static bool
rs_refuse_api_key(char **newval, void **extra, GucSource source)
{
	return rs_refuse_check(newval, extra, source, 2);
}

void
rs_settings_init(void)
{
	static GucStringCheckHook refuse_hooks[3] = {rs_refuse_url, rs_refuse_python_path, rs_refuse_api_key};
	int			i;

	for (i = 0; rs_setting_names[i]; i++)
		DefineCustomStringVariable(psprintf("relserve.%s", rs_setting_names[i]),
								   "An option of relserve's LLM calls (see docs/server-postgres-spreadsheet.md).",
								   NULL, &rs_setting_values[i], "", PGC_USERSET, 0, NULL, NULL, NULL);
	for (i = 0; rs_refused_names[i]; i++)
		DefineCustomStringVariable(psprintf("relserve.%s", rs_refused_names[i]),
								   "Not a setting any more: refused with where it went.",
								   NULL, &rs_refused_values[i], "", PGC_USERSET, GUC_NO_SHOW_ALL,
								   refuse_hooks[i], NULL, NULL);
	/* any other relserve.* name is a mistake: say so instead of ignoring it */
	MarkGUCPrefixReserved("relserve");
}

const char *
rs_setting(const char *name)
{
	const char *v = GetConfigOption(psprintf("relserve.%s", name), true, false);

	return v ? v : "";
}
