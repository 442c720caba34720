/*
 * table_read.h
 *		What reading a published table as the pipeline's owner depends on.
 */
#ifndef REPLICANT_TABLE_READ_H
#define REPLICANT_TABLE_READ_H

#include "utils/relcache.h"

/*
 * Why the pipeline's owner (role) may not read rel as a whole (no SELECT
 * privilege, or row-level security it does not bypass), value-free; NULL if
 * it may.  The stream halts on the same conditions.  This is the gate: it
 * comes before anything reads rel, whoever reads it then.
 */
extern char *replicant_table_read_denied(Relation rel, Oid role);

/*
 * Running a table owner's code.  Reading a table runs code of its owner's:
 * the planner folds the IMMUTABLE functions of a partial index's predicate,
 * a policy's functions run, so do a virtual generated column's.  Such code
 * runs only as that owner and as a security-restricted operation, as
 * CREATE INDEX, VACUUM and ANALYZE run it: never with the rights of the
 * pipeline's owner (which could, say, GRANT its tables away), and unable to
 * leave anything behind in the session (temporary objects; settings, which
 * leaving undoes; search_path is pinned meanwhile).  The owner may read its
 * table anyway, so this reads nothing the owner could not; row-level
 * security forced on the owner does not apply (as when foreign-key checks
 * read a table as its owner): callers read only what the pipeline's owner
 * may read whole, checked with replicant_table_read_denied before.
 */
typedef struct ReplicantTableOwnerScope
{
	Oid saved_userid;
	int saved_sec_context;
	int guc_level;
} ReplicantTableOwnerScope;

/* Becomes the owner of rel, restricted, until the matching leave. */
extern void replicant_table_owner_enter(Relation rel, ReplicantTableOwnerScope *scope);
extern void replicant_table_owner_leave(ReplicantTableOwnerScope *scope);

/*
 * Rows of rel as the planner estimates them: reltuples, or for a table
 * never vacuumed or analysed, its size over the estimated row width.
 */
extern int64 replicant_table_estimate_rows(Relation rel);

/*
 * Whether an update of rel can leave a column out as unchanged TOAST: some
 * column's values can be stored out of line.  A row such an update moves
 * into a part of the table already read would reach the sink without them.
 */
extern bool replicant_table_can_leave_toast_unchanged(Relation rel);

#endif /* REPLICANT_TABLE_READ_H */
