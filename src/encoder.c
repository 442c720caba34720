/*
 * encoder.c
 *		The one tuple -> JSON encoder, shared by the stream and snapshot paths.
 *
 * Both paths hand over deformed tuples, and the output depends only on the
 * values, the catalog and the pinned settings, never on how the row was
 * read: that is what makes a row encode to the same bytes on both paths.
 *
 * On the stream path we run inside an output plugin callback under a
 * historic snapshot, so everything here is catalog lookups and type output
 * functions: no SPI, no casts, nothing that reads user tables or writes, and
 * no fetching of on-disk TOAST pointers (docs/internals.md, section 7).
 *
 * What we need to know about a type is cached per type OID (encode_types.c).
 * The hottest types (integers, bool, text, numeric, jsonb) are written
 * without going through fmgr.
 */
#include "postgres.h"

#include <stdlib.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/arrayaccess.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "compat.h"
#include "encode_scalar.h"
#include "encode_types.h"
#include "encoder.h"
#include "guc_pin.h"

PG_FUNCTION_INFO_V1(replicant_encode_row);

/* What every level of a nested encoding shares. */
typedef struct EncodeState
{
	StringInfo out;
	ReplicantToastPolicy policy;
	int dbencoding;
} EncodeState;

/* The column being encoded, for the error context callback. */
typedef struct EncodeErrorArg
{
	const char *colname;
	const char *typname;
} EncodeErrorArg;

/* Settings that change output functions' text; one list for both pinners. */
static const ReplicantSetting pinned_settings[] = {
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "iso_8601"},
	{"TimeZone", "UTC"},
	{"extra_float_digits", "1"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
	{"search_path", "pg_catalog, pg_temp"},
	{"quote_all_identifiers", "off"},
};

/* The zone offset (seconds west of UTC) timestamptz values are written in. */
static const int utc_offset = 0;

static void encode_error_callback(void *arg);
static void append_utf8(StringInfo out, int dbencoding, const char *s,
						int len, bool quote);
static void encode_fields(EncodeState *st, TupleDesc desc, Datum *values,
						  bool *nulls, const Bitmapset *columns,
						  bool toplevel, StringInfo unchanged);
static void encode_value(EncodeState *st, EncodeTypeEntry *entry, Datum value);
static void encode_array(EncodeState *st, Datum value);
static void encode_array_dim(EncodeState *st, EncodeTypeEntry *elem,
							 array_iter *iter, int ndim, const int *dims,
							 int dim, int *index);
static TupleDesc deform_composite(HeapTupleHeader td, Datum **values,
								  bool **nulls);
static void encode_composite(EncodeState *st, Datum value);

/*
 * Errors
 */

/* Names the column and its type, never the value. */
static void
encode_error_callback(void *arg)
{
	EncodeErrorArg *errarg = (EncodeErrorArg *) arg;

	if (errarg->colname == NULL)
		return;
	if (errarg->typname != NULL)
		errcontext("while encoding column \"%s\" of type \"%s\"",
				   errarg->colname, errarg->typname);
	else
		errcontext("while encoding column \"%s\"", errarg->colname);
}

/*
 * Strings
 */

/*
 * Appends text in the database encoding as UTF-8, either as a JSON string
 * (quote) or as it is (embedded JSON).
 */
static void
append_utf8(StringInfo out, int dbencoding, const char *s, int len,
			bool quote)
{
	char *converted = NULL;

	if (dbencoding != PG_UTF8 && len > 0)
	{
		if (dbencoding == PG_SQL_ASCII)
		{
			/*
			 * Nothing to convert from, but the sink expects UTF-8.  Check
			 * here rather than in pg_server_to_any(), whose error shows the
			 * offending bytes.
			 */
			if (!pg_verify_mbstr(PG_UTF8, s, len, true))
				ereport(ERROR,
						(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
						 errmsg("could not encode value as UTF-8"),
						 errdetail("The database encoding is SQL_ASCII and the value is not valid UTF-8.")));
		}
		else
		{
			converted = pg_server_to_any(s, len, PG_UTF8);
			if (converted == s)
				converted = NULL;
			else
			{
				s = converted;
				len = strlen(converted);
			}
		}
	}

	if (quote)
		replicant_append_json_string(out, s, len);
	else
		replicant_append_bytes(out, s, len);

	if (converted != NULL)
		pfree(converted);
}

/*
 * Values
 */

/*
 * The index of the column after column i (-1: from the start) to encode,
 * or -1 when none is left: all of desc's, or columns' attribute numbers in
 * order, without a membership test for every column of the row.
 */
static inline int
next_column(TupleDesc desc, const Bitmapset *columns, int i)
{
	if (columns == NULL)
		i++;
	else
		i = bms_next_member(columns, i + 1) - 1;
	return (i >= 0 && i < desc->natts) ? i : -1;
}

/*
 * Appends "{...}" for the live columns of desc.  Only the top level of a row
 * can hold on-disk TOAST pointers; composite values are always flattened.
 */
static void
encode_fields(EncodeState *st, TupleDesc desc, Datum *values, bool *nulls,
			  const Bitmapset *columns, bool toplevel, StringInfo unchanged)
{
	StringInfo out = st->out;
	EncodeErrorArg errarg;
	ErrorContextCallback errcb;
	bool first = true;
	int i;

	errarg.colname = NULL;
	errarg.typname = NULL;
	errcb.callback = encode_error_callback;
	errcb.arg = &errarg;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	appendStringInfoCharMacro(out, '{');
	for (i = next_column(desc, columns, -1); i >= 0; i = next_column(desc, columns, i))
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		EncodeTypeEntry *entry;

		if (att->attisdropped || REPLICANT_ATT_IS_VIRTUAL(att))
			continue;

		errarg.colname = NameStr(att->attname);
		errarg.typname = NULL;

		if (toplevel && st->policy == REPLICANT_TOAST_UNCHANGED &&
			!nulls[i] && att->attlen == -1 &&
			VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(values[i])))
		{
			if (unchanged != NULL)
			{
				if (unchanged->len > 0)
					appendStringInfoCharMacro(unchanged, ',');
				append_utf8(unchanged, st->dbencoding, NameStr(att->attname),
							strlen(NameStr(att->attname)), true);
			}
			continue;
		}

		if (st->dbencoding == PG_UTF8)
			replicant_append_json_key(out, NameStr(att->attname), !first);
		else
		{
			if (!first)
				appendStringInfoCharMacro(out, ',');
			append_utf8(out, st->dbencoding, NameStr(att->attname),
						strlen(NameStr(att->attname)), true);
			appendStringInfoCharMacro(out, ':');
		}
		first = false;

		if (nulls[i])
		{
			replicant_append_bytes(out, "null", 4);
			continue;
		}
		entry = replicant_encode_type(att->atttypid);
		errarg.typname = entry->typname;
		encode_value(st, entry, values[i]);
	}
	appendStringInfoCharMacro(out, '}');

	error_context_stack = errcb.previous;
}

/* Appends an integer in decimal, without going through fmgr. */
static void
append_int64(StringInfo out, int64 value)
{
	replicant_reserve(out, MAXINT8LEN + 1);
	out->len += pg_lltoa(value, out->data + out->len);
}

/*
 * Appends a number: numeric from its stored digits where it can, anything
 * else through its output function, which writes ASCII only, either a valid
 * JSON number or NaN/Infinity, which become strings.
 */
static void
encode_number(StringInfo out, EncodeTypeEntry *entry, Datum value)
{
	char *str;

	if (entry->category == ENCODE_NUMERIC && replicant_append_numeric(out, value))
		return;
	str = OutputFunctionCall(&entry->outfunc, value);
	if (str[0] == 'N' || str[0] == 'I' || (str[0] == '-' && str[1] == 'I'))
		replicant_append_json_string(out, str, strlen(str));
	else
		appendStringInfoString(out, str);
	pfree(str);
}

/*
 * The server's own to_json() encoding (XSD style, "infinity", " BC"), with
 * a timestamptz written in UTC whatever TimeZone says.  ASCII only.
 */
static void
encode_datetime(StringInfo out, EncodeTypeEntry *entry, Datum value)
{
	char datebuf[MAXDATELEN + 1];

	if (entry->basetype == TIMESTAMPTZOID &&
		replicant_append_timestamptz_utc(out, DatumGetTimestampTz(value)))
		return;
	JsonEncodeDateTime(datebuf, value, entry->basetype, &utc_offset);
	appendStringInfoCharMacro(out, '"');
	appendStringInfoString(out, datebuf);
	appendStringInfoCharMacro(out, '"');
}

/*
 * Appends a jsonb value.  One with a short header (under 127 bytes, most in
 * a row) is copied here, aligned as its container must be, rather than
 * detoasted into an allocation of its own: the per-row cost a snapshot
 * pays for every small jsonb value.
 */
static void
encode_jsonb(StringInfo out, Datum value)
{
	/* words, so that the copy is aligned */
	uint32 copy[(VARHDRSZ + VARATT_SHORT_MAX + sizeof(uint32) - 1) / sizeof(uint32)];
	Pointer stored = DatumGetPointer(value);
	Jsonb *jb;

	/* (a TOAST pointer has a 1-byte header too) */
	if (VARATT_IS_SHORT(stored) && !VARATT_IS_EXTERNAL(stored))
	{
		Size len = VARSIZE_SHORT(stored) - VARHDRSZ_SHORT;

		SET_VARSIZE(copy, len + VARHDRSZ);
		memcpy(VARDATA(copy), VARDATA_SHORT(stored), len);
		jb = (Jsonb *) copy;
	}
	else
		jb = DatumGetJsonbP(value);
	replicant_append_jsonb(out, &jb->root);
	if ((Pointer) jb != stored && (Pointer) jb != (Pointer) copy)
		pfree(jb);
}

/* Appends one non-null value of the entry's type. */
static void
encode_value(EncodeState *st, EncodeTypeEntry *entry, Datum value)
{
	StringInfo out = st->out;
	char *str;
	text *txt;

	/* not reachable: flattened composites and arrays hold no such pointer */
	if (entry->typlen == -1 && st->policy == REPLICANT_TOAST_UNCHANGED &&
		VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(value)))
		elog(ERROR, "unexpected on-disk TOAST pointer in a nested value");

	switch (entry->category)
	{
		case ENCODE_BOOL:
			if (DatumGetBool(value))
				replicant_append_bytes(out, "true", 4);
			else
				replicant_append_bytes(out, "false", 5);
			break;

		case ENCODE_INT2:
			append_int64(out, DatumGetInt16(value));
			break;

		case ENCODE_INT4:
			append_int64(out, DatumGetInt32(value));
			break;

		case ENCODE_INT8:
			append_int64(out, DatumGetInt64(value));
			break;

		case ENCODE_OID:
			append_int64(out, DatumGetObjectId(value));
			break;

		case ENCODE_NUMERIC:
		case ENCODE_NUMBER:
			encode_number(out, entry, value);
			break;

		case ENCODE_TEXT:
		case ENCODE_JSON:
			/* short-header values are read in place, without a copy */
			txt = DatumGetTextPP(value);
			append_utf8(out, st->dbencoding, VARDATA_ANY(txt),
						VARSIZE_ANY_EXHDR(txt),
						entry->category == ENCODE_TEXT);
			if ((Pointer) txt != DatumGetPointer(value))
				pfree(txt);
			break;

		case ENCODE_JSONB:
			if (st->dbencoding == PG_UTF8)
			{
				encode_jsonb(out, value);
				break;
			}
			/* FALLTHROUGH */
		case ENCODE_OTHER:
			/* jsonb's output text is JSON: embedded, not quoted */
			str = OutputFunctionCall(&entry->outfunc, value);
			append_utf8(out, st->dbencoding, str, strlen(str),
						entry->category == ENCODE_OTHER);
			pfree(str);
			break;

		case ENCODE_DATETIME:
			encode_datetime(out, entry, value);
			break;

		case ENCODE_ARRAY:
			encode_array(st, value);
			break;

		case ENCODE_COMPOSITE:
			encode_composite(st, value);
			break;
	}
}

/*
 * Appends an array as nested JSON arrays, one level per dimension; lower
 * bounds are dropped.  The element type comes from the array itself.
 */
static void
encode_array(EncodeState *st, Datum value)
{
	AnyArrayType *arr;
	int ndim;
	const int *dims;

	check_stack_depth();

	arr = DatumGetAnyArrayP(value);
	ndim = AARR_NDIM(arr);
	dims = AARR_DIMS(arr);

	if (ndim <= 0 || ArrayGetNItems(ndim, dims) == 0)
		replicant_append_bytes(st->out, "[]", 2);
	else
	{
		EncodeTypeEntry *elem = replicant_encode_type(AARR_ELEMTYPE(arr));
		array_iter iter;
		int index = 0;

		array_iter_setup(&iter, arr);
		encode_array_dim(st, elem, &iter, ndim, dims, 0, &index);
	}

	/* a detoasted copy; an expanded array belongs to its owner */
	if (!VARATT_IS_EXPANDED_HEADER(arr) &&
		(Pointer) arr != DatumGetPointer(value))
		pfree(arr);
}

static void
encode_array_dim(EncodeState *st, EncodeTypeEntry *elem, array_iter *iter,
				 int ndim, const int *dims, int dim, int *index)
{
	StringInfo out = st->out;
	int i;

	appendStringInfoCharMacro(out, '[');
	for (i = 0; i < dims[dim]; i++)
	{
		if (i > 0)
			appendStringInfoCharMacro(out, ',');

		if (dim + 1 < ndim)
			encode_array_dim(st, elem, iter, ndim, dims, dim + 1, index);
		else
		{
			Datum d;
			bool isnull;

			d = array_iter_next(iter, &isnull, (*index)++,
								elem->typlen, elem->typbyval, elem->typalign);
			if (isnull)
				replicant_append_bytes(out, "null", 4);
			else
				encode_value(st, elem, d);
		}
	}
	appendStringInfoCharMacro(out, ']');
}

/*
 * Deforms a composite (or blessed RECORD) datum.  Its own header names its
 * row type, whose descriptor is returned pinned: the caller releases it
 * with ReleaseTupleDesc.
 */
static TupleDesc
deform_composite(HeapTupleHeader td, Datum **values, bool **nulls)
{
	TupleDesc desc;
	HeapTupleData tuple;

	desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(td),
								  HeapTupleHeaderGetTypMod(td));

	tuple.t_len = HeapTupleHeaderGetDatumLength(td);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = td;

	*values = (Datum *) palloc(desc->natts * sizeof(Datum));
	*nulls = (bool *) palloc(desc->natts * sizeof(bool));
	heap_deform_tuple(&tuple, desc, *values, *nulls);
	return desc;
}

/*
 * Appends a composite (or blessed RECORD) value as a nested object.  The
 * datum's own header names its row type, which also covers domains over
 * composites.
 */
static void
encode_composite(EncodeState *st, Datum value)
{
	HeapTupleHeader td;
	TupleDesc desc;
	Datum *values;
	bool *nulls;

	check_stack_depth();

	td = DatumGetHeapTupleHeader(value);
	desc = deform_composite(td, &values, &nulls);

	encode_fields(st, desc, values, nulls, NULL, false, NULL);

	pfree(values);
	pfree(nulls);
	ReleaseTupleDesc(desc);
	if ((Pointer) td != DatumGetPointer(value))
		pfree(td);
}

/*
 * Exported
 */

void
replicant_encoder_pin_settings(void)
{
	replicant_guc_pin(pinned_settings, lengthof(pinned_settings));
}

int
replicant_encoder_pin_settings_local(void)
{
	return replicant_guc_pin_local(pinned_settings, lengthof(pinned_settings));
}

void
replicant_encode_object(StringInfo out, TupleDesc desc,
						Datum *values, bool *nulls,
						const Bitmapset *columns,
						ReplicantToastPolicy policy,
						StringInfo unchanged)
{
	EncodeState st;

	st.out = out;
	st.policy = policy;
	st.dbencoding = GetDatabaseEncoding();

	encode_fields(&st, desc, values, nulls, columns, true, unchanged);
}

void
replicant_encode_string(StringInfo out, const char *s)
{
	append_utf8(out, GetDatabaseEncoding(), s, strlen(s), true);
}

/*
 * Caches the opening quote, date and time of t's second as the function
 * below writes them.  Years before 1 AD use ISO 8601's astronomical
 * numbering (0000 is 1 BC).
 */
static void
second_text_iso(ReplicantSecondText *cache, TimestampTz t, fsec_t *fsec)
{
	struct pg_tm tm;
	char *p = cache->text;

	/* no tzp: the broken-down time stays in UTC */
	if (timestamp2tm(t, NULL, &tm, fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));

	*p++ = '"';
	if (tm.tm_year < 0)
		*p++ = '-';
	p = pg_ultostr_zeropad(p, abs(tm.tm_year), 4);
	*p++ = '-';
	p = pg_ultostr_zeropad(p, tm.tm_mon, 2);
	*p++ = '-';
	p = pg_ultostr_zeropad(p, tm.tm_mday, 2);
	*p++ = 'T';
	p = pg_ultostr_zeropad(p, tm.tm_hour, 2);
	*p++ = ':';
	p = pg_ultostr_zeropad(p, tm.tm_min, 2);
	*p++ = ':';
	p = pg_ultostr_zeropad(p, tm.tm_sec, 2);
	cache->len = p - cache->text;
	cache->second = t - *fsec;
	cache->valid = true;
}

/*
 * Computed from the value in UTC, not by timestamptz_out, so that neither
 * TimeZone nor DateStyle can change it.  Every transaction header has one,
 * and consecutive commits mostly share their second: the date and time are
 * written once per second, the microseconds every time.
 */
void
replicant_encode_timestamptz(StringInfo out, TimestampTz t)
{
	static ReplicantSecondText cache; /* the second written last */
	fsec_t fsec;
	char *p;

	if (TIMESTAMP_IS_NOBEGIN(t))
	{
		appendStringInfoString(out, "\"-infinity\"");
		return;
	}
	if (TIMESTAMP_IS_NOEND(t))
	{
		appendStringInfoString(out, "\"infinity\"");
		return;
	}
	if (!replicant_second_text_hit(&cache, t, &fsec))
		second_text_iso(&cache, t, &fsec);

	replicant_reserve(out, cache.len + 10);
	p = out->data + out->len;
	memcpy(p, cache.text, cache.len);
	p += cache.len;
	*p++ = '.';
	p = replicant_put_usecs(p, fsec);
	*p++ = 'Z';
	*p++ = '"';
	out->len = p - out->data;
	out->data[out->len] = '\0';
}

/*
 * replicant._encode_row(record) RETURNS text
 *
 * Encodes a row exactly as the snapshot path does, under the pinned
 * settings, which are restored before returning.  For tests; the result is
 * UTF-8 whatever the database encoding.
 */
Datum
replicant_encode_row(PG_FUNCTION_ARGS)
{
	HeapTupleHeader td = PG_GETARG_HEAPTUPLEHEADER(0);
	TupleDesc desc;
	Datum *values;
	bool *nulls;
	StringInfoData buf;
	int level;

	desc = deform_composite(td, &values, &nulls);

	initStringInfo(&buf);
	level = replicant_encoder_pin_settings_local();
	replicant_encode_object(&buf, desc, values, nulls, NULL,
							REPLICANT_TOAST_DETOAST, NULL);
	AtEOXact_GUC(false, level);

	ReleaseTupleDesc(desc);
	pfree(values);
	pfree(nulls);

	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}
