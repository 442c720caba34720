/*
 * change.c
 *		Building change records from rows read by snapshots and backfills.
 *
 * The output plugin builds its records from decoded tuples itself; rows
 * the snapshot reads from the heap and rows backfills read through SPI
 * come here, so that every reader keys and encodes a row exactly alike.
 */
#include "postgres.h"

#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"

#include "change.h"
#include "encoder.h"

void
replicant_change_from_values(ReplicantChange *change, const ReplicantRelation *relation,
							 StringInfo key, StringInfo new_row, TupleDesc desc,
							 Datum *values, bool *nulls,
							 const Bitmapset *key_columns, bool whole_row,
							 const Bitmapset *columns)
{
	resetStringInfo(key);
	if (key_columns || whole_row)
		replicant_encode_object(key, desc, values, nulls, whole_row ? columns : key_columns,
								REPLICANT_TOAST_DETOAST, NULL);
	else
		appendStringInfoString(key, "null");
	resetStringInfo(new_row);
	replicant_encode_object(new_row, desc, values, nulls, columns, REPLICANT_TOAST_DETOAST, NULL);

	memset(change, 0, sizeof(ReplicantChange));
	change->op = REPLICANT_OP_READ;
	change->relation = relation;
	change->desc = desc;
	change->key = key;
	change->new_row = new_row;
}

void
replicant_change_from_row(ReplicantChange *change, const ReplicantRelation *relation,
						  StringInfo key, StringInfo new_row,
						  TupleDesc desc, HeapTuple row, TupleDesc row_desc,
						  Datum *values, bool *nulls,
						  const Bitmapset *key_columns, bool whole_row,
						  const Bitmapset *columns)
{
	int attnum;
	int col = 1;

	for (attnum = 1; attnum <= desc->natts; attnum++)
	{
		if (TupleDescAttr(desc, attnum - 1)->attisdropped)
		{
			values[attnum - 1] = (Datum) 0;
			nulls[attnum - 1] = true;
			continue;
		}
		values[attnum - 1] = SPI_getbinval(row, row_desc, col++, &nulls[attnum - 1]);
	}
	replicant_change_from_values(change, relation, key, new_row, desc, values, nulls,
								 key_columns, whole_row, columns);
}

void
replicant_change_set_read_id(ReplicantChange *change, const uint8 *key, TupleDesc desc,
							 Datum *values, bool *nulls, const Bitmapset *identity, Oid leaf,
							 Oid relfilenode, ItemPointer tid)
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	uint8 digest[PG_SHA256_DIGEST_LENGTH];
	StringInfoData material;
	int i;

	initStringInfo(&material);
	appendBinaryStringInfo(&material, (const char *) &leaf, sizeof(leaf));
	if (identity != NULL)
		replicant_encode_object(&material, desc, values, nulls, identity,
								REPLICANT_TOAST_DETOAST, NULL);
	else if (tid != NULL && ItemPointerIsValid(tid))
	{
		/* A rewrite puts other rows at the same positions in a new file. */
		appendBinaryStringInfo(&material, (const char *) &relfilenode, sizeof(relfilenode));
		appendBinaryStringInfo(&material, (const char *) tid, sizeof(ItemPointerData));
	}
	else
		elog(ERROR, "a row read without identity has no position");
	if (ctx == NULL ||
		pg_hmac_init(ctx, key, REPLICANT_READ_ID_KEY_LEN) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) material.data, material.len) < 0 ||
		pg_hmac_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute the id of a read");
	pg_hmac_free(ctx);
	pfree(material.data);
	for (i = 0; i < REPLICANT_READ_ID_LEN / 2; i++)
		snprintf(change->read_id + 2 * i, 3, "%02x", digest[i]);
}
