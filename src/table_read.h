/*
 * table_read.h
 *		What reading a published table as the pipeline's owner depends on.
 */
#ifndef REPLICANT_TABLE_READ_H
#define REPLICANT_TABLE_READ_H

#include "utils/relcache.h"

/*
 * Why the current user may not read rel as a whole (no SELECT privilege,
 * or row-level security it does not bypass), value-free; NULL if it may.
 * The stream halts on the same conditions.
 */
extern char *replicant_table_read_denied(Relation rel);

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
