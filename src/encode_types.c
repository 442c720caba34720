/*
 * encode_types.c
 *		The encoder's type cache: per type OID, how its values are written
 *		and what writing them needs, kept in a hash table that a TYPEOID
 *		syscache callback invalidates.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "encode_types.h"

EncodeTypeEntry *replicant_recent_types[REPLICANT_RECENT_TYPES];

static MemoryContext EncoderCacheContext = NULL;
static HTAB *EncoderTypeCache = NULL;
static bool encoder_callback_registered = false;

static void encoder_type_inval(Datum arg, int cacheid, uint32 hashvalue);
static void encoder_build_type(EncodeTypeEntry *entry);

static void
encoder_init_cache(void)
{
	HASHCTL ctl;

	if (CacheMemoryContext == NULL)
		CreateCacheMemoryContext();

	EncoderCacheContext = AllocSetContextCreate(CacheMemoryContext,
												"replicant encoder type cache",
												ALLOCSET_SMALL_SIZES);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(EncodeTypeEntry);
	ctl.hcxt = EncoderCacheContext;
	EncoderTypeCache = hash_create("replicant encoder types", 64, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	/* syscache callbacks cannot be unregistered: only ever add one */
	if (!encoder_callback_registered)
	{
		CacheRegisterSyscacheCallback(TYPEOID, encoder_type_inval, (Datum) 0);
		encoder_callback_registered = true;
	}
}

/*
 * What we cache about a type OID cannot change while the OID names the same
 * type (a domain's base type, element types and output functions are fixed
 * at creation), so only a change to the type's own pg_type row, which
 * includes dropping it and reusing its OID, or a cache reset, matters.
 */
static void
encoder_type_inval(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS status;
	EncodeTypeEntry *entry;

	if (EncoderTypeCache == NULL)
		return;

	hash_seq_init(&status, EncoderTypeCache);
	while ((entry = (EncodeTypeEntry *) hash_seq_search(&status)) != NULL)
	{
		if (hashvalue == 0 || entry->hashvalue == hashvalue)
			entry->valid = false;
	}
}

EncodeTypeEntry *
replicant_encode_type_load(Oid typid)
{
	EncodeTypeEntry *entry;
	bool found;

	if (EncoderTypeCache == NULL)
		encoder_init_cache();

	entry = (EncodeTypeEntry *) hash_search(EncoderTypeCache, &typid,
											HASH_ENTER, &found);
	if (!found)
	{
		entry->valid = false;
		entry->hashvalue = 0;
		entry->outfuncoid = InvalidOid;
		entry->typname = NULL;
	}
	if (!entry->valid)
		encoder_build_type(entry);

	replicant_recent_types[typid % REPLICANT_RECENT_TYPES] = entry;
	return entry;
}

/* How values of a base type are written, from its pg_type row. */
static EncodeCategory
encoder_category(Oid basetype, Form_pg_type typ)
{
	EncodeCategory category;

	switch (basetype)
	{
		case BOOLOID:
			category = ENCODE_BOOL;
			break;
		case INT2OID:
			category = ENCODE_INT2;
			break;
		case INT4OID:
			category = ENCODE_INT4;
			break;
		case INT8OID:
			category = ENCODE_INT8;
			break;
		case OIDOID:
			category = ENCODE_OID;
			break;
		case NUMERICOID:
			category = ENCODE_NUMERIC;
			break;
		case FLOAT4OID:
		case FLOAT8OID:
			category = ENCODE_NUMBER;
			break;
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
			/* their output functions return the stored text unchanged */
			category = ENCODE_TEXT;
			break;
		case JSONOID:
			category = ENCODE_JSON;
			break;
		case JSONBOID:
			category = ENCODE_JSONB;
			break;
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:

			/*
			 * As to_json() writes them.  It writes time and timetz as their
			 * output text, which is ISO 8601 whatever DateStyle says, so
			 * those stay ENCODE_OTHER.
			 */
			category = ENCODE_DATETIME;
			break;
		default:
			if (IsTrueArrayType(typ))
				category = ENCODE_ARRAY;
			else if (typ->typtype == TYPTYPE_COMPOSITE || basetype == RECORDOID)
				category = ENCODE_COMPOSITE;
			else
				category = ENCODE_OTHER;
			break;
	}
	return category;
}

/*
 * Fills an entry.  valid is set last, so an error leaves the entry to be
 * rebuilt on its next use rather than half built.  Everything but the
 * output function and the name is the same on every rebuild of an entry
 * whose typid names the same type.
 */
static void
encoder_build_type(EncodeTypeEntry *entry)
{
	Oid basetype;
	HeapTuple tup;
	Form_pg_type typ;
	Oid outfuncoid;
	char *typname;

	basetype = getBaseType(entry->typid);
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(basetype));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for type %u", basetype);
	typ = (Form_pg_type) GETSTRUCT(tup);
	entry->category = encoder_category(basetype, typ);
	entry->basetype = basetype;
	entry->typlen = typ->typlen;
	entry->typbyval = typ->typbyval;
	entry->typalign = typ->typalign;
	outfuncoid = typ->typoutput;
	ReleaseSysCache(tup);

	if (entry->category != ENCODE_NUMERIC &&
		entry->category != ENCODE_NUMBER && entry->category != ENCODE_JSONB &&
		entry->category != ENCODE_OTHER)
		outfuncoid = InvalidOid;

	/* output functions keep state in fn_extra: keep it across rebuilds */
	if (OidIsValid(outfuncoid) && entry->outfuncoid != outfuncoid)
	{
		entry->outfuncoid = InvalidOid;
		fmgr_info_cxt(outfuncoid, &entry->outfunc, EncoderCacheContext);
	}
	entry->outfuncoid = outfuncoid;

	/* a renamed type leaks its old name: an error context may point at it */
	typname = format_type_be(entry->typid);
	if (entry->typname == NULL || strcmp(entry->typname, typname) != 0)
		entry->typname = MemoryContextStrdup(EncoderCacheContext, typname);
	pfree(typname);

	entry->hashvalue = GetSysCacheHashValue1(TYPEOID,
											 ObjectIdGetDatum(entry->typid));
	entry->valid = true;
}
