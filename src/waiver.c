/*
 * waiver.c
 *		Resume waivers: what resume_pipeline accepts while decoding.
 *
 * A halt met while decoding a commit records its cause beside its reason
 * (replicant.pipelines.halt_cause): a publication missing at that point,
 * a table whose shape changed, a table the owner could not read.  Resuming
 * turns exactly that cause into a waiver for the commits up to the resume
 * (replicant.resume_waivers); decoding accepts that cause, and nothing else,
 * for those commits.  A shape change's cause names the shape the table
 * changed into, so a resume accepts that shape only: the table changing
 * again while the pipeline was halted halts it again.  So a resume after a sink's rejection accepts nothing,
 * a publication missing while the pipeline was halted for another reason
 * halts it again, and a column dropped from another table too.  Waivers
 * accumulate across resumes (decoding may go back over an earlier halt's
 * commits after a later one) until the checkpoint passes them.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "utils/lsyscache.h"
#include "utils/pg_lsn.h"

#include "checkpoint_floor.h"
#include "waiver.h"

typedef struct Waiver
{
	char *cause;
	XLogRecPtr up_to; /* commits at or before it */
} Waiver;

char *
replicant_waiver_cause(const char *kind, const char *object)
{
	return psprintf("%s:%s", kind, object);
}

char *
replicant_waiver_table_cause(const char *kind, Oid relid)
{
	return psprintf("%s:%u", kind, relid);
}

/*
 * A SHA-256 digest of the shape names it: value-free (shapes hold names
 * only), and no one can make a second shape of the table, say by a change
 * of its owner's, that a resume of the first would accept (a 64-bit hash
 * could be made to collide).
 */
char *
replicant_waiver_shape_cause(Oid relid, const char *shape)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint8 digest[PG_SHA256_DIGEST_LENGTH];
	char hex[2 * PG_SHA256_DIGEST_LENGTH + 1];
	int i;

	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) shape, strlen(shape)) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute the digest of a table's shape");
	pg_cryptohash_free(ctx);
	for (i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	return psprintf("%s:%u:%s", REPLICANT_WAIVER_SCHEMA, relid, hex);
}

bool
replicant_waiver_covers(const List *waivers, const char *cause, XLogRecPtr commit_lsn)
{
	ListCell *lc;

	foreach(lc, waivers)
	{
		Waiver *w = lfirst(lc);

		if (commit_lsn <= w->up_to && strcmp(w->cause, cause) == 0)
			return true;
	}
	return false;
}

/* Whether the SQL objects are 0.3.0's (ALTER EXTENSION UPDATE done). */
static bool
have_waivers(void)
{
	return OidIsValid(get_relname_relid("resume_waivers",
										get_namespace_oid("replicant", false)));
}

List *
replicant_waiver_load(int32 pipeline_id, XLogRecPtr checkpoint_commit_lsn, MemoryContext mcxt)
{
	Oid argtypes[2] = {INT4OID, PG_LSNOID};
	Datum args[2] = {Int32GetDatum(pipeline_id), LSNGetDatum(checkpoint_commit_lsn)};
	List *waivers = NIL;
	MemoryContext old;
	uint64 i;

	if (!have_waivers())
		return NIL;
	if (SPI_execute_with_args("SELECT cause, up_to FROM replicant.resume_waivers"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1"
							  "   AND up_to OPERATOR(pg_catalog.>) $2",
							  2, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the resume waivers of pipeline %d", pipeline_id);
	/* SPI left its own context current */
	old = MemoryContextSwitchTo(mcxt);
	for (i = 0; i < SPI_processed; i++)
	{
		Waiver *w = palloc(sizeof(Waiver));
		bool isnull;

		w->cause = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		w->up_to = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2,
											 &isnull));
		waivers = lappend(waivers, w);
	}
	MemoryContextSwitchTo(old);
	return waivers;
}

void
replicant_waiver_grant(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};

	if (!have_waivers())
		return;
	/* Everything inserted into WAL before the call, committed or about to be. */
	if (SPI_execute_with_args("INSERT INTO replicant.resume_waivers (pipeline_id, cause, up_to)"
							  " SELECT id, halt_cause, pg_catalog.pg_current_wal_insert_lsn()"
							  "   FROM replicant.pipelines"
							  "  WHERE id OPERATOR(pg_catalog.=) $1 AND halt_cause IS NOT NULL"
							  " ON CONFLICT (pipeline_id, cause) DO UPDATE SET up_to = excluded.up_to",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_INSERT ||
		SPI_execute_with_args(psprintf("DELETE FROM replicant.resume_waivers w"
									   " USING %s c"
									   " WHERE w.pipeline_id OPERATOR(pg_catalog.=) $1"
									   "   AND w.up_to OPERATOR(pg_catalog.<=) c.commit_lsn",
									   replicant_checkpoint_floor_sql()),
							  1, argtypes, args, NULL, false, 0) != SPI_OK_DELETE ||
		SPI_execute_with_args("UPDATE replicant.pipelines SET halt_cause = NULL"
							  " WHERE id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the resume of pipeline %d", pipeline_id);
}
