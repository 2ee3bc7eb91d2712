/*
 * What the files of the foreign data wrapper relserve_fdw share: fdw_options.c (its options and
 * their validator), fdw_deparse.c (the source query's text, with the quals pushed into it) and
 * fdw.c (planning and the scan).
 */
#ifndef RELSERVE_FDW_H
#define RELSERVE_FDW_H

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

#define RS_DEFAULT_WINDOW_ROWS 2000
#define RS_MAX_WINDOW_ROWS 10000	/* the server's default limit of rows per relQuery */

/* fdw_options.c: an option's text (NULL when not given); the column the answers go to */
extern const char *rs_option(List *options, const char *name);
extern AttrNumber rs_output_attno(Relation rel, List *options);
/* the call options of a foreign table, as a JSON object of text values */
extern char *rs_call_options_json(List *options);

/* fdw_deparse.c: a qual as SQL over the source query's columns, or false when it cannot go there */
extern bool rs_deparse_expr(Node *node, Relation rel, Index relid, AttrNumber output_attno, StringInfo buf);
/*
 * The source query with the pushed quals (RestrictInfos) and the LIMIT (-1: none): *source_sql
 * runs, each row with its JSON; *shown_sql is what EXPLAIN shows.
 */
extern void rs_deparse_source(const char *source, List *pushed, int limit, Relation rel, Index relid,
							  AttrNumber output_attno, char **source_sql, char **shown_sql);

#endif
