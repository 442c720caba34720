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
 * The columns of a change's "key" when rel's publications deliver columns
 * (NULL: every live one), on every path, so that stream, snapshot and
 * backfill key rows alike and no column outside columns is in a key: the
 * identity's columns when all of them are delivered, else none; under
 * REPLICA IDENTITY FULL without a primary key (whole_row, which encodes as
 * columns) only when every column is delivered but generated ones, which
 * the columns may leave out as the server version's pgoutput does.
 */
extern void replicant_row_key_delivered(Relation rel, const Bitmapset *columns,
										Bitmapset **key_columns, bool *whole_row);

#endif /* REPLICANT_ROW_KEY_H */
