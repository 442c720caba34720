/*
 * change.h
 *		The in-memory description of what a pipeline delivers: a change, the
 *		transaction it commits with, a logical decoding message.  The output
 *		plugin, the snapshot reader and the backfill reader produce these;
 *		a format (format.h) turns them into request bodies.  Row values are
 *		already encoded, by the one encoder (encoder.c), as JSON values.
 */
#ifndef REPLICANT_CHANGE_H
#define REPLICANT_CHANGE_H

#include "access/htup.h"
#include "access/transam.h"
#include "access/tupdesc.h"
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"
#include "storage/itemptr.h"

/* A read's id: hex of 128 bits of a keyed digest. */
#define REPLICANT_READ_ID_LEN 32
/* The key of those digests, one per pipeline (replicant.pipelines.event_id_key). */
#define REPLICANT_READ_ID_KEY_LEN 32

typedef enum ReplicantOp
{
	REPLICANT_OP_INSERT,
	REPLICANT_OP_UPDATE,
	REPLICANT_OP_DELETE,
	REPLICANT_OP_TRUNCATE,
	REPLICANT_OP_READ /* a row read by a snapshot or backfill */
} ReplicantOp;

/* A relation as it is named on the wire. */
typedef struct ReplicantRelation
{
	char *schema;
	char *table;
} ReplicantRelation;

/* The committed transaction changes are delivered in. */
typedef struct ReplicantTxn
{
	TransactionId xid;
	XLogRecPtr commit_lsn; /* start of the commit record */
	XLogRecPtr end_lsn;    /* end of the commit record */
	TimestampTz commit_time;
} ReplicantTxn;

/*
 * One change.  The row fields are JSON text from the encoder, NULL where
 * the change has none (no key, no old row); which of them an op carries
 * on the wire is the format's to decide (a truncate has none).
 */
typedef struct ReplicantChange
{
	ReplicantOp op;
	const ReplicantRelation *relation;
	TupleDesc desc;          /* the row's columns (NULL for a truncate), for
								 * a format that writes by type */
	const ReplicantTxn *txn; /* its commit; NULL for a read */
	int64 index;             /* among its transaction's decoded changes,
								 * from 0; 0 for a read */
	int64 backfill_id;       /* a read: the snapshot or backfill's id */
	XLogRecPtr read_lsn;     /* a read: where in WAL its snapshot stands
								 * (the slot's consistent point, a backfill
								 * chunk's low watermark); else 0 */
	StringInfo key;          /* the replica identity's columns, an object */
	StringInfo new_row;      /* the row after the change, an object */
	StringInfo old_row;      /* the row or key before it, an object */
	StringInfo unchanged;    /* update: TOASTed columns it left out, as
								 * comma-separated JSON strings */
	/* A read, for a format that names it: replicant_change_set_read_id. */
	char read_id[REPLICANT_READ_ID_LEN + 1];
} ReplicantChange;

/* A message from pg_logical_emit_message(). */
typedef struct ReplicantMessage
{
	XLogRecPtr lsn;
	const char *prefix;
	const char *content; /* user bytes, not terminated */
	Size size;
} ReplicantMessage;

/*
 * Fills a "read" change from a row of a relation (desc) deformed into
 * values/nulls (natts long, dropped columns null), so that keys and values
 * encode exactly as the stream's do.  key and new_row receive the encoded
 * fields the change points to; the caller sets backfill_id and read_lsn.  columns are
 * the published ones (NULL: all), key_columns and whole_row the key
 * replicant_row_key_delivered() gives for them (whole_row: the
 * published columns).
 */
extern void replicant_change_from_values(ReplicantChange *change,
										 const ReplicantRelation *relation,
										 StringInfo key, StringInfo new_row,
										 TupleDesc desc, Datum *values, bool *nulls,
										 const Bitmapset *key_columns, bool whole_row,
										 const Bitmapset *columns);

/*
 * Same from one row of a SELECT * over the relation: SELECT * skips dropped
 * columns, so the row's values are lined up with the relation's attributes
 * in values/nulls (natts long) first.
 */
extern void replicant_change_from_row(ReplicantChange *change,
									  const ReplicantRelation *relation,
									  StringInfo key, StringInfo new_row,
									  TupleDesc desc, HeapTuple row, TupleDesc row_desc,
									  Datum *values, bool *nulls,
									  const Bitmapset *key_columns, bool whole_row,
									  const Bitmapset *columns);

/*
 * Sets a read's read_id, what tells its row apart from every other row of
 * its table and is the same whenever the row is read again: a digest, keyed
 * by the pipeline's secret key (REPLICANT_READ_ID_KEY_LEN bytes), of the
 * partition or table the row lies in (leaf) and its replica identity
 * (identity: columns of desc, published or not; values/nulls as for
 * replicant_change_from_values), or, for a table whose identity is no
 * column (the whole row, or none), of where the row lies: the file read
 * (relfilenode, which a rewrite such as VACUUM FULL replaces, putting other
 * rows at the positions read before) and the row's position in it (tid; the
 * same until the row is changed or moved, so the same on a retry of a read).
 * The key keeps the digest from revealing any value.  Call in a transaction.
 */
extern void replicant_change_set_read_id(ReplicantChange *change, const uint8 *key,
										 TupleDesc desc, Datum *values, bool *nulls,
										 const Bitmapset *identity, Oid leaf,
										 Oid relfilenode, ItemPointer tid);

#endif /* REPLICANT_CHANGE_H */
