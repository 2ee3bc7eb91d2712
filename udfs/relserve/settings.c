/*
 * The relserve.* settings. Defining them (and reserving the prefix) makes a misspelt
 * "SET relserve.max_token" an error, and refuses the three names that are a superuser's
 * decision (url, python_path, api_key) with a message saying where they went.
 *
 * Each value also remembers which role chose it (issue 63): a caller's SET must not steer a
 * SECURITY DEFINER function's llm_* calls. PostgreSQL gives a SET and a function's own SET
 * clause the same source, so the role current when the value was set is kept with the value,
 * in the setting's "extra" (which PostgreSQL saves and restores with the value, around a
 * function's SET clauses and at transaction ends): a SET, set_config() or the login role's
 * defaults are the role that was current; a SET clause of a definer function is its owner's
 * (PostgreSQL switches to the owner before applying them); the defaults, the server's files and
 * ALTER DATABASE / ALTER ROLE ALL values are nobody's. relserve.chosen_by_others reads, for the
 * current user, the settings whose value another role chose (relserve/postgres/definer.py).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/xact.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_db_role_setting.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/rel.h"

#include "relserve.h"

/* ------------------------------------------------------------------ settings */

/*
 * The options of a call, one vocabulary for settings, *_query options and foreign table options
 * (relserve.postgres.settings.SETTING_NAMES; tests/test_postgres_unit.py checks the two agree).
 * Kept as text here: the Python side checks values with relserve's own validation.
 */
const char *const rs_setting_names[] = {
	"timeout", "on_server_error", "batch_calls", "batch_window", "order_quals", "max_tokens",
	"temperature", "top_p", "seed", "system", "on_error", "reorder_fields", "method", "examples",
	"prompt_shape", "answer_field", "cascade", "max_tokens_total", "max_seconds", "on_budget", "cache",
	"priority", "deadline_s", NULL
};
#define RS_NSETTINGS 23
static char *rs_setting_values[RS_NSETTINGS];

/* who chose a setting's value (see the top of the file); InvalidOid: no role (the configuration) */
typedef struct RsChosenBy
{
	Oid			role;
} RsChosenBy;

/* while the settings are defined: values set before the library loaded are re-applied now */
static bool rs_defining = false;
static char *rs_chosen_by_others_value;

static bool
rs_record_chooser(char **newval, void **extra, GucSource source)
{
	RsChosenBy *chosen = malloc(sizeof(RsChosenBy));	/* GUC frees it with free() */

	if (chosen == NULL)
		return false;
	if (source < PGC_S_USER)
		chosen->role = InvalidOid;	/* defaults, files, ALTER DATABASE SET, ALTER ROLE ALL SET */
	else if (rs_defining)
		chosen->role = GetSessionUserId();	/* set before the library loaded: the session's own */
	else
		chosen->role = GetUserId();
	*extra = chosen;
	return true;
}

static bool
rs_is_call_setting(const char *name)
{
	int			i;

	if (strncmp(name, "relserve.", 9) != 0)
		return false;
	for (i = 0; rs_setting_names[i]; i++)
		if (strcmp(name + 9, rs_setting_names[i]) == 0)
			return true;
	return false;
}

/* the call settings whose value a role other than the current user chose, comma-separated */
static const char *
rs_show_chosen_by_others(void)
{
	struct config_generic **vars = get_guc_variables();
	int			n = GetNumConfigOptions();
	Oid			me = GetUserId();
	StringInfoData out;
	int			i;

	initStringInfo(&out);
	for (i = 0; i < n; i++)
	{
		RsChosenBy *chosen;

		if (vars[i]->vartype != PGC_STRING || !rs_is_call_setting(vars[i]->name))
			continue;
		chosen = (RsChosenBy *) vars[i]->extra;
		if (chosen == NULL || !OidIsValid(chosen->role) || chosen->role == me)
			continue;
		appendStringInfo(&out, "%s%s", out.len ? "," : "", vars[i]->name + 9);
	}
	return out.data;
}

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

	rs_defining = true;
	for (i = 0; rs_setting_names[i]; i++)
		DefineCustomStringVariable(psprintf("relserve.%s", rs_setting_names[i]),
								   "An option of relserve's LLM calls (see docs/server-postgres-spreadsheet.md).",
								   NULL, &rs_setting_values[i], "", PGC_USERSET, 0, rs_record_chooser, NULL, NULL);
	rs_defining = false;
	DefineCustomStringVariable("relserve.chosen_by_others",
							   "Read only: the relserve.* settings whose value a role other than the current user chose.",
							   NULL, &rs_chosen_by_others_value, "", PGC_INTERNAL,
							   GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE,
							   NULL, NULL, rs_show_chosen_by_others);
	for (i = 0; rs_refused_names[i]; i++)
		DefineCustomStringVariable(psprintf("relserve.%s", rs_refused_names[i]),
								   "Not a setting any more: refused with where it went.",
								   NULL, &rs_refused_values[i], "", PGC_USERSET, GUC_NO_SHOW_ALL,
								   refuse_hooks[i], NULL, NULL);
	/* any other relserve.* name is a mistake: say so instead of ignoring it */
	MarkGUCPrefixReserved("relserve");
}

/* the role whose value a setting holds (see the top of the file): InvalidOid for nobody's */
static Oid
rs_chooser(const char *full_name)
{
	struct config_generic **vars = get_guc_variables();
	int			n = GetNumConfigOptions();
	int			i;

	for (i = 0; i < n; i++)
		if (strcmp(vars[i]->name, full_name) == 0)
			return vars[i]->extra ? ((RsChosenBy *) vars[i]->extra)->role : InvalidOid;
	return InvalidOid;
}

/*
 * A role's default for a setting (any setting: "search_path" too), as a session of it would start
 * with it in this database: ALTER ROLE ... IN DATABASE, else ALTER ROLE, else ALTER DATABASE, else
 * ALTER ROLE ALL (as relserve/postgres/definer.py reads pg_db_role_setting); NULL for none.
 */
const char *
rs_role_default(Oid role, const char *full_name)
{
	Oid			keys[4][2] = {{MyDatabaseId, role}, {InvalidOid, role},
	{MyDatabaseId, InvalidOid}, {InvalidOid, InvalidOid}};
	size_t		len = strlen(full_name);
	char	   *found = NULL;
	Relation	rel = table_open(DbRoleSettingRelationId, AccessShareLock);
	int			k;

	for (k = 0; k < 4 && found == NULL; k++)
	{
		ScanKeyData key[2];
		SysScanDesc scan;
		HeapTuple	tup;

		ScanKeyInit(&key[0], Anum_pg_db_role_setting_setdatabase, BTEqualStrategyNumber, F_OIDEQ,
					ObjectIdGetDatum(keys[k][0]));
		ScanKeyInit(&key[1], Anum_pg_db_role_setting_setrole, BTEqualStrategyNumber, F_OIDEQ,
					ObjectIdGetDatum(keys[k][1]));
		scan = systable_beginscan(rel, DbRoleSettingDatidRolidIndexId, true, NULL, 2, key);
		while (found == NULL && HeapTupleIsValid(tup = systable_getnext(scan)))
		{
			bool		isnull;
			Datum		d = heap_getattr(tup, Anum_pg_db_role_setting_setconfig, RelationGetDescr(rel), &isnull);
			Datum	   *items;
			bool	   *nulls;
			int			n,
						i;

			if (isnull)
				continue;
			deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &items, &nulls, &n);
			for (i = 0; i < n && found == NULL; i++)
			{
				char	   *item = nulls[i] ? NULL : TextDatumGetCString(items[i]);

				if (item && strncmp(item, full_name, len) == 0 && item[len] == '=')
					found = pstrdup(item + len + 1);
			}
		}
		systable_endscan(scan);
	}
	table_close(rel, AccessShareLock);
	return found;
}

/* the current user's default for a setting (rs_role_default), "" for none */
static const char *
rs_definer_default(const char *full_name)
{
	const char *found = rs_role_default(GetUserId(), full_name);

	return found ? found : "";
}

/*
 * A call setting's text ("" when unset), as the current call reads it: inside a SECURITY DEFINER
 * function (the current user is not the session's role, nor the role of its SET ROLE) a value
 * another role chose is not read, and the definer's default takes its place, as the Python side
 * does for the settings it reads (relserve/postgres/definer.py): a caller must not steer how a
 * definer's calls run (whether they are batched, their windows, the order of their quals).
 */
const char *
rs_setting(const char *name)
{
	const char *full_name = psprintf("relserve.%s", name);
	const char *v = GetConfigOption(full_name, true, false);
	Oid			outer = OidIsValid(GetCurrentRoleId()) ? GetCurrentRoleId() : GetSessionUserId();
	Oid			chooser;

	if (v == NULL)
		return "";
	if (GetUserId() == outer || !IsTransactionState())
		return v;
	chooser = rs_chooser(full_name);
	if (!OidIsValid(chooser) || chooser == GetUserId())
		return v;
	return rs_definer_default(full_name);
}

/* a boolean setting (on / off), ``dflt`` when unset; a bad value is an error naming the setting */
bool
rs_setting_bool(const char *name, bool dflt)
{
	const char *v = rs_setting(name);
	bool		on = dflt;

	if (v[0] != '\0' && !parse_bool(v, &on))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("relserve.%s must be a boolean (on or off), got \"%s\"", name, v)));
	return on;
}
