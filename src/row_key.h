/*
 * row_key.h
 *		What identifies a row: the replica identity, and the change's "key".
 */
#ifndef REPLICANT_ROW_KEY_H
#define REPLICANT_ROW_KEY_H

#include "nodes/bitmapset.h"
#include "utils/relcache.h"

/*
 * rel's replica identity: its columns (the primary key under REPLICA
 * IDENTITY FULL), or whole_row for FULL without a primary key.  What
 * identifies a row inside replicant (backfill cursors, table shapes); what
 * leaves the server is the next function's.
 */
extern void replicant_row_key_identity(Relation rel, Bitmapset **key_columns, bool *whole_row,
									   bool *identity_full);

/*
 * rel's replica identity in the attribute numbers of target, the relation
 * its rows are delivered as (rel itself, or the partition root it is
 * published through): its columns by name, published or not, or NULL and
 * whole_row for FULL without a primary key.  Only ever digested or used to
 * pick columns, never delivered as such.
 */
extern Bitmapset *replicant_row_key_identity_as(Relation rel, Relation target, bool *whole_row);

/*
 * The columns of the "key" of rel's changes, delivered as target with its
 * columns (target's attribute numbers; NULL: every live one), on every
 * path, so that stream, snapshot and backfill key rows alike and no column
 * outside columns is in a key: rel's identity's columns (under target's
 * names) when all of them are delivered, else none; under REPLICA IDENTITY
 * FULL without a primary key (whole_row, which encodes as columns) only
 * when every column is delivered but generated ones, which the columns may
 * leave out as the server version's pgoutput does.
 */
extern void replicant_row_key_delivered(Relation rel, Relation target, const Bitmapset *columns,
										Bitmapset **key_columns, bool *whole_row);

/*
 * Of an old row of rel that does not log whole rows (not REPLICA IDENTITY
 * FULL), what is logged and published: its identity's columns in columns
 * (target's attribute numbers as above; empty: none).  NULL under FULL.
 */
extern Bitmapset *replicant_row_key_logged(Relation rel, Relation target,
										   const Bitmapset *columns);

/*
 * The key that identifies every row delivered as target (a ClickHouse
 * target's order): a table's own; for a partition root, the key its leaf
 * partitions all deliver, or none when they differ.
 */
extern void replicant_row_key_of_target(Relation target, const Bitmapset *columns,
										Bitmapset **key_columns, bool *whole_row);

#endif /* REPLICANT_ROW_KEY_H */
