/*
 * catalog.h
 *		Running queries on replicant's own tables with replicant's privileges.
 */
#ifndef REPLICANT_CATALOG_H
#define REPLICANT_CATALOG_H

/*
 * The extension's tables are closed to PUBLIC: management functions may
 * have been granted to roles that cannot read the secrets, and workers run
 * as the pipeline's owner.  Catalog access therefore runs as the bootstrap
 * superuser, inside SPI, with search_path pinned, so that nothing of the
 * caller's resolves in the queries; reading a user table switches to the
 * table's owner instead, restricted, once the pipeline's owner was found to
 * read it whole (table_read.h).  The caller's memory context is current
 * again after the matching end or leave.
 */
typedef struct ReplicantCatalogAccess
{
	MemoryContext saved_context;
	Oid saved_userid; /* the caller, e.g. for privilege checks */
	int saved_sec_context;
	int guc_level;
} ReplicantCatalogAccess;

/*
 * Pins search_path to "pg_catalog, pg_temp" until AtEOXact_GUC(..., level),
 * as a function's SET clause does: queries run with raised privileges must
 * resolve nothing of the caller's or of the owner's role settings.
 */
extern int replicant_pin_search_path(void);

/*
 * Raises an error unless the schema named "replicant" is the extension's
 * and a superuser owns it (nothing to check while the extension is not
 * installed: queries on its tables then fail by themselves).  The owner of
 * a schema may rename it, or drop the tables in it and make its own, and
 * queries run with raised privileges name replicant's tables by name.
 * Both enter and begin check it; so must any other query on replicant's
 * tables as a superuser.  Inside a transaction.
 */
extern void replicant_catalog_check_schema(void);

/* Inside the caller's transaction (SQL-callable functions). */
extern void replicant_catalog_enter(ReplicantCatalogAccess *access);
extern void replicant_catalog_leave(ReplicantCatalogAccess *access);

/* In a transaction of their own, with a snapshot (background workers). */
extern void replicant_catalog_begin(ReplicantCatalogAccess *access);
extern void replicant_catalog_end(ReplicantCatalogAccess *access);

/*
 * The state of a backfill (or a table of an initial snapshot) whose table
 * stopped being published: "skipped", or "cancelled" under the SQL objects
 * of 0.1.0 and 0.2.0, whose check on replicant.backfills.state knows no
 * "skipped" (until ALTER EXTENSION replicant UPDATE).  Needs SPI.
 */
extern const char *replicant_catalog_skipped_state(void);

/*
 * Whether replicant.destinations exists: until ALTER EXTENSION replicant
 * UPDATE brings 0.3.0's objects, replicant.pipelines holds the sink options.
 */
extern bool replicant_destinations_exist(void);

/* Runs an UPDATE of replicant.pipelines (inside enter/leave); sql's parameters as SPI's. */
extern void replicant_catalog_update_pipelines(const char *sql, int nargs, Oid *argtypes,
											   Datum *args, const char *nulls);

/*
 * Makes the pipeline's worker restart once the caller commits, with what the
 * caller changed (its config_version moves on; inside enter/leave).
 */
extern void replicant_catalog_bump_config(int32 pipeline_id);

#endif /* REPLICANT_CATALOG_H */
