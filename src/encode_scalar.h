/*
 * encode_scalar.h
 *		Writing JSON text straight into the encoder's buffer: JSON strings,
 *		numerics, timestamps and jsonb values, byte for byte as the server's own
 *		functions write them, without their intermediate copies.
 */
#ifndef REPLICANT_ENCODE_SCALAR_H
#define REPLICANT_ENCODE_SCALAR_H

#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "utils/datetime.h"
#include "utils/jsonb.h"

/*
 * enlargeStringInfo() and appendBinaryStringInfo() for the encoder's many
 * small appends: the common case, where the room is there, without a
 * call into the server.
 */
static inline void
replicant_reserve(StringInfo out, int needed)
{
	if (unlikely((Size) needed + out->len >= (Size) out->maxlen))
		enlargeStringInfo(out, needed);
}

static inline void
replicant_append_bytes(StringInfo out, const char *data, int len)
{
	replicant_reserve(out, len);
	memcpy(out->data + out->len, data, len);
	out->len += len;
	out->data[out->len] = '\0';
}

/*
 * Appends s[0..len) as a JSON string literal: what PG15's escape_json()
 * writes for the same bytes, taking a length instead of a terminator.
 */
extern void replicant_append_json_string(StringInfo out, const char *s,
										 int len);

/*
 * Appends "name": (after a comma when comma is true), the name escaped as
 * by replicant_append_json_string().  For a column's name (a NameData, at
 * most NAMEDATALEN bytes with its terminating zero) in UTF-8 only.
 */
extern void replicant_append_json_key(StringInfo out, const char *name, bool comma);

/*
 * Appends numeric_out()'s text for a finite numeric and returns true; for
 * NaN and the infinities returns false and appends nothing.
 */
extern bool replicant_append_numeric(StringInfo out, Datum value);

/*
 * Appends a finite timestamptz as to_json() writes it with TimeZone UTC,
 * quoted, and returns true; returns false and appends nothing for the
 * infinities and values timestamp2tm() cannot convert.
 */
extern bool replicant_append_timestamptz_utc(StringInfo out, TimestampTz t);

/*
 * The text a timestamp writer made of one second's date and time, kept for
 * the next values of the same second: a stream's commit times and default
 * now() columns mostly share one.  second is the second's first
 * microsecond; valid is false until the first value.
 */
typedef struct ReplicantSecondText
{
	bool valid;
	bool bc; /* before 1 AD */
	TimestampTz second;
	int len;
	char text[MAXDATELEN + 1];
} ReplicantSecondText;

/*
 * Whether t falls in the cached second; if so *fsec is its microseconds
 * within it.  (No overflow: a cached second is one timestamp2tm() took.)
 */
static inline bool
replicant_second_text_hit(const ReplicantSecondText *cache, TimestampTz t, fsec_t *fsec)
{
	if (!cache->valid || t < cache->second || t >= cache->second + USECS_PER_SEC)
		return false;
	*fsec = (fsec_t) (t - cache->second);
	return true;
}

/*
 * Writes a second's six-digit, zero-padded microseconds at p and returns
 * the end (pg_ultostr_zeropad() for the one width every timestamp needs).
 */
static inline char *
replicant_put_usecs(char *p, fsec_t fsec)
{
	int i;

	for (i = 5; i >= 0; i--)
	{
		p[i] = '0' + fsec % 10;
		fsec /= 10;
	}
	return p + 6;
}

/*
 * Appends a jsonb value as jsonb_out() writes it.  Strings are written as
 * stored, so the caller must only use this when the database encoding is
 * UTF-8.
 */
extern void replicant_append_jsonb(StringInfo out, const JsonbContainer *container);

#endif /* REPLICANT_ENCODE_SCALAR_H */
