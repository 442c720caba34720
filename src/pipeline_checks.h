/*
 * pipeline_checks.h
 *		What create_pipeline and alter_pipeline check against the catalogs
 *		(inside replicant_catalog_enter/leave where they query).
 */
#ifndef REPLICANT_PIPELINE_CHECKS_H
#define REPLICANT_PIPELINE_CHECKS_H

#include "nodes/pg_list.h"
#include "utils/array.h"

/* messages => true: the owner must be able to read all of WAL. */
extern void replicant_pipeline_checks_owner_may_receive_messages(Oid owner);

/* Pipeline workers connect as the owner, which must be able to log in. */
extern void replicant_pipeline_checks_owner_can_login(Oid owner);

/* The owner must read every published table (relids), past row-level security. */
extern void replicant_pipeline_checks_owner_reads_tables(Oid owner, List *relids);

/* Warns of tables published for updates or deletes without a replica identity. */
extern void replicant_pipeline_checks_warn_without_identity(ArrayType *pubs);

/* Warns of tables a format that needs whole rows (format.h) could halt on. */
extern void replicant_pipeline_checks_warn_toast_left_out(List *relids, const char *format);

/*
 * Format 'clickhouse': two published tables of one name, or a column named
 * as one the format adds, are refused.
 */
extern void replicant_pipeline_checks_targets_distinct(ArrayType *publications, List *relids,
													   const char *format);

/* create_tables => true needs format 'clickhouse'. */
extern void replicant_pipeline_checks_create_tables(bool create_tables, const char *format);

#endif /* REPLICANT_PIPELINE_CHECKS_H */
