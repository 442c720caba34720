/*
 * change.c
 *		Building change records from rows read by snapshots and backfills.
 *
 * The output plugin builds its records from decoded tuples itself; rows
 * the snapshot reads from the heap and rows backfills read through SPI
 * come here, so that every reader keys and encodes a row exactly alike.
 */
#include "postgres.h"

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
