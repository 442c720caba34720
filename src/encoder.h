/*
 * encoder.h
 *		The one tuple -> JSON encoder, shared by the stream and snapshot paths.
 */
#ifndef REPLICANT_ENCODER_H
#define REPLICANT_ENCODER_H

#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"

/* What the encoder may do with a TOASTed value. */
typedef enum ReplicantToastPolicy
{
	/* snapshot path: values may be fetched from the TOAST table */
	REPLICANT_TOAST_DETOAST,
	/* stream path: an on-disk pointer is an unchanged column, never read */
	REPLICANT_TOAST_UNCHANGED
} ReplicantToastPolicy;

/*
 * Pins the settings that change output functions' text (DateStyle, TimeZone,
 * ...) for the rest of the process.  Workers call it once after connecting.
 * This outranks ALTER DATABASE/ROLE SET and the configuration file, but not a
 * session-level SET, so the worker must never run SET for these.
 */
extern void replicant_encoder_pin_settings(void);

/*
 * Same, but only until AtEOXact_GUC(false, level) with the returned nest
 * level; for SQL-callable functions running in ordinary backends.
 */
extern int replicant_encoder_pin_settings_local(void);

/*
 * Appends a JSON object {"column": value, ...} for the columns of a
 * deformed tuple.  columns holds the attribute numbers to encode (NULL means
 * every live column); dropped columns are always skipped.  Under
 * REPLICANT_TOAST_UNCHANGED an on-disk TOAST pointer is left out of the
 * object and its column name is appended to *unchanged as a JSON string
 * (comma-separated, no brackets) when unchanged is not NULL.
 *
 * Errors raised here carry the column and type name in their context (the
 * caller adds the table); the encoder itself never puts a value in a message.
 */
extern void replicant_encode_object(StringInfo out, TupleDesc desc,
									Datum *values, bool *nulls,
									const Bitmapset *columns,
									ReplicantToastPolicy policy,
									StringInfo unchanged);

/* Appends s as a JSON string literal (UTF-8, escaped). */
extern void replicant_encode_string(StringInfo out, const char *s);

/* Appends a timestamptz as a JSON string "YYYY-MM-DDTHH:MI:SS.ffffffZ". */
extern void replicant_encode_timestamptz(StringInfo out, TimestampTz t);

#endif /* REPLICANT_ENCODER_H */
