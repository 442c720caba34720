/*
 * encode_types.h
 *		What the encoder knows about a type, cached per type OID: how its
 *		values are written (EncodeCategory), its storage and its output
 *		function.
 */
#ifndef REPLICANT_ENCODE_TYPES_H
#define REPLICANT_ENCODE_TYPES_H

#include "fmgr.h"

/* How a value of a (base) type is written. */
typedef enum EncodeCategory
{
	ENCODE_BOOL,
	ENCODE_INT2,
	ENCODE_INT4,
	ENCODE_INT8,
	ENCODE_OID,
	ENCODE_NUMERIC,  /* numeric: written from its digits */
	ENCODE_NUMBER,   /* float4, float8: output text */
	ENCODE_TEXT,     /* text, varchar, bpchar: from the varlena */
	ENCODE_JSON,     /* embedded as stored */
	ENCODE_JSONB,    /* embedded output text */
	ENCODE_DATETIME, /* date, timestamp, timestamptz: ISO 8601 */
	ENCODE_ARRAY,
	ENCODE_COMPOSITE,
	ENCODE_OTHER /* output text as a JSON string */
} EncodeCategory;

/*
 * Cached per type OID; for a domain everything but typname describes the
 * base type.  Entries are never removed, only marked invalid, so pointers to
 * them stay usable while a value is being encoded.
 */
typedef struct EncodeTypeEntry
{
	Oid typid; /* hash key */
	bool valid;
	Oid basetype;     /* typid, or a domain's base type */
	uint32 hashvalue; /* TYPEOID syscache hash of typid */
	EncodeCategory category;
	int16 typlen;
	bool typbyval;
	char typalign;
	Oid outfuncoid;   /* InvalidOid unless category needs it */
	FmgrInfo outfunc; /* in EncoderCacheContext */
	char *typname;    /* for error context, in EncoderCacheContext */
} EncodeTypeEntry;

/*
 * The entries of recently encoded types, by OID, in front of the hash
 * table: every column of every row looks its type up.  Entries never move,
 * and one found here is used only while it is valid.
 */
#define REPLICANT_RECENT_TYPES 64
extern EncodeTypeEntry *replicant_recent_types[REPLICANT_RECENT_TYPES];

/* The entry of typid, built or rebuilt from the catalog (cache miss). */
extern EncodeTypeEntry *replicant_encode_type_load(Oid typid);

/* The entry of typid: valid until the next catalog invalidation. */
static inline EncodeTypeEntry *
replicant_encode_type(Oid typid)
{
	EncodeTypeEntry *entry = replicant_recent_types[typid % REPLICANT_RECENT_TYPES];

	if (likely(entry != NULL && entry->typid == typid && entry->valid))
		return entry;
	return replicant_encode_type_load(typid);
}

#endif /* REPLICANT_ENCODE_TYPES_H */
