/*
 * sync.c
 *		The per-database sync worker: mirrors a database's pipeline rows
 *		into shared memory for the launcher (launcher.c), which cannot read
 *		them, being connected to no database.
 *
 * It runs whenever the database's pipelines may have changed, records the
 * halts the launcher decided on and those of owners that cannot log in,
 * mirrors the rows, drops replicant slots no pipeline owns, and exits.  A
 * sync that fails on a transient error is retried by the launcher, at most
 * REPLICANT_MAX_RETRIES times in a row; on the last try, or on any other
 * error, it halts the database's pipelines instead.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type_d.h"
#include "commands/extension.h"
#include "storage/lmgr.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "delivery.h"
#include "event_log.h"
#include "fault.h"
#include "pipeline.h"
#include "replicant.h"
#include "shmem.h"
#include "slot.h"
#include "sync.h"

typedef struct PipelineRow
{
	int32 id;
	char name[NAMEDATALEN];
	char slot_name[NAMEDATALEN];
	Oid owner;
	bool runnable;
	int32 config_version;
	/* Its destinations, by id (none under 0.2.0's objects). */
	int ndestinations;
	int32 destination_ids[REPLICANT_MAX_DESTINATIONS];
	char destination_names[REPLICANT_MAX_DESTINATIONS][NAMEDATALEN];
} PipelineRow;

/*
 * A worker connects as the pipeline's owner, which needs LOGIN and CONNECT
 * on the database: without them every start fails before the worker can say
 * why.  Such pipelines halt here, with the reason, until resume_pipeline.
 * (A database that refuses every connection, ALLOW_CONNECTIONS false, keeps
 * this worker out too: the launcher halts those pipelines after
 * REPLICANT_MAX_RETRIES refused starts.)
 */
static void
halt_unconnectable_pipelines(void)
{
	uint64 i;

	/* search_path is pinned: the operators are pg_catalog's. */
	if (SPI_execute("UPDATE replicant.pipelines p"
					"   SET halt_reason = CASE"
					"         WHEN r.oid IS NULL"
					"         THEN 'pipeline owner (role OID ' || p.owner::text || ') no longer exists'"
					"         WHEN NOT r.rolcanlogin"
					"         THEN 'pipeline owner ' || quote_ident(r.rolname) || ' is not permitted to log in'"
					"         ELSE 'pipeline owner ' || quote_ident(r.rolname)"
					"              || ' has no CONNECT privilege on database ' || quote_ident(current_database())"
					"         END"
					"  FROM replicant.pipelines q LEFT JOIN pg_authid r ON r.oid = q.owner"
					" WHERE q.id = p.id AND p.enabled AND p.halt_reason IS NULL"
					"   AND (r.oid IS NULL OR NOT r.rolcanlogin"
					"        OR NOT has_database_privilege(r.oid, current_database(), 'CONNECT'))"
					" RETURNING p.name, p.halt_reason",
					false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not update replicant.pipelines");
	for (i = 0; i < SPI_processed; i++)
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" halted: %s",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2)),
				 errhint("Grant the role what it lacks, then call replicant.resume_pipeline('%s').",
						 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1))));
}

/* A halt the launcher asked for, as this sync recorded it. */
typedef struct HaltRequest
{
	int32 pipeline_id;
	char name[NAMEDATALEN];
	char reason[REPLICANT_ERROR_LEN];
} HaltRequest;

/*
 * Records the halts the launcher decided on for this database's pipelines
 * (a failure that kept coming back); returns them, in TopMemoryContext (the
 * caller is in SPI's), for mirror_rows to clear once done.
 */
static List *
record_halt_requests(void)
{
	List *requests = NIL;
	ListCell *lc;
	int i;
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];
		HaltRequest *request;

		if (!slot->in_use || slot->dboid != MyDatabaseId || slot->halt_request[0] == '\0')
			continue;
		request = palloc(sizeof(HaltRequest));
		request->pipeline_id = slot->pipeline_id;
		strlcpy(request->name, slot->name, sizeof(request->name));
		strlcpy(request->reason, slot->halt_request, sizeof(request->reason));
		requests = lappend(requests, request);
	}
	LWLockRelease(replicant_shmem->lock);
	MemoryContextSwitchTo(old);
	foreach(lc, requests)
	{
		HaltRequest *request = lfirst(lc);

		if (replicant_pipeline_record_halt(request->pipeline_id, request->reason, InvalidXLogRecPtr, NULL))
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" halted: %s", request->name, request->reason),
					 errhint("Fix the cause, then call replicant.resume_pipeline('%s').",
							 request->name)));
	}
	return requests;
}

/* Adds each pipeline's destinations, by id, to its row. */
static void
read_destination_rows(List *rows)
{
	if (SPI_execute("SELECT pipeline_id, id, name FROM replicant.destinations ORDER BY pipeline_id, id",
					false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.destinations");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple tuple = SPI_tuptable->vals[i];
		TupleDesc desc = SPI_tuptable->tupdesc;
		bool isnull;
		int32 pipeline_id = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
		ListCell *lc;

		foreach(lc, rows)
		{
			PipelineRow *row = lfirst(lc);

			/* add_destination allows no more; a row past them is not shown */
			if (row->id != pipeline_id || row->ndestinations == REPLICANT_MAX_DESTINATIONS)
				continue;
			row->destination_ids[row->ndestinations] =
				DatumGetInt32(SPI_getbinval(tuple, desc, 2, &isnull));
			strlcpy(row->destination_names[row->ndestinations],
					TextDatumGetCString(SPI_getbinval(tuple, desc, 3, &isnull)), NAMEDATALEN);
			row->ndestinations++;
		}
	}
}

/* Shows a pipeline's destinations in its slot (shmem.h). */
static void
mirror_destinations(ReplicantPipelineSlot *slot, const PipelineRow *row)
{
	if (row->ndestinations == 0)
		return; /* 0.2.0's objects: index 0 stands for the pipeline's sink */
	replicant_shmem_mirror_destinations(slot, row->ndestinations, row->destination_ids,
										row->destination_names);
}

static List *
read_pipeline_rows(List **halts)
{
	List *rows = NIL;
	MemoryContext old;
	uint64 i;
	Oid extension = get_extension_oid("replicant", true);

	if (!OidIsValid(extension))
		return NIL;
	/*
	 * DROP EXTENSION locks the extension before any of its tables; the sync
	 * does the same before it reads them, so that the two never wait for
	 * each other in a cycle (a sync holding replicant.pipelines and waiting
	 * for replicant.destinations failed a DROP EXTENSION with a deadlock).
	 * Dropped while it waited: nothing to read.
	 */
	LockDatabaseObject(ExtensionRelationId, extension, 0, AccessShareLock);
	if (!OidIsValid(get_extension_oid("replicant", true)))
		return NIL;
	replicant_catalog_check_schema();
	replicant_fault("sync");
	*halts = record_halt_requests();
	halt_unconnectable_pipelines();
	/* Not read-only: a new snapshot, which sees the halts just recorded. */
	if (SPI_execute(psprintf("SELECT id, name, owner, enabled AND halt_reason IS NULL, config_version, %s"
							 "  FROM replicant.pipelines p",
							 replicant_pipeline_slot_name_sql()),
					false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read replicant.pipelines");
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple tuple = SPI_tuptable->vals[i];
		TupleDesc desc = SPI_tuptable->tupdesc;
		PipelineRow *row = MemoryContextAllocZero(TopMemoryContext, sizeof(PipelineRow));
		bool isnull;

		row->id = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
		strlcpy(row->name, TextDatumGetCString(SPI_getbinval(tuple, desc, 2, &isnull)),
				NAMEDATALEN);
		row->owner = DatumGetObjectId(SPI_getbinval(tuple, desc, 3, &isnull));
		row->runnable = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
		row->config_version = DatumGetInt32(SPI_getbinval(tuple, desc, 5, &isnull));
		strlcpy(row->slot_name, TextDatumGetCString(SPI_getbinval(tuple, desc, 6, &isnull)),
				NAMEDATALEN);
		/* Not in SPI's context, which SPI_finish frees: the list outlives it. */
		old = MemoryContextSwitchTo(TopMemoryContext);
		rows = lappend(rows, row);
		MemoryContextSwitchTo(old);
	}
	if (replicant_destinations_exist())
		read_destination_rows(rows);
	return rows;
}

/*
 * The pipeline rows, in a transaction the caller started and commits; none
 * when DROP EXTENSION committed while they were read (the table went away
 * after the extension was seen): a deliberate drop is no error.
 */
static List *
read_rows_unless_dropped(List **halts)
{
	List *rows = NIL;

	PG_TRY();
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		rows = read_pipeline_rows(halts);
		PopActiveSnapshot();
		SPI_finish();
	}
	PG_CATCH();
	{
		ErrorData *edata;

		/* Not the transaction's context, which the abort frees. */
		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_UNDEFINED_TABLE)
			PG_RE_THROW();
		FlushErrorState();
		AbortCurrentTransaction();
		StartTransactionCommand();
		if (OidIsValid(get_extension_oid("replicant", true)))
			ReThrowError(edata);
		FreeErrorData(edata);
		rows = NIL;
		*halts = NIL;
	}
	PG_END_TRY();
	return rows;
}

static void
mirror_rows(List *rows, List *halts)
{
	ListCell *lc;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);

	/* Halts recorded: the catalog holds them now, as the rows show. */
	foreach(lc, halts)
	{
		HaltRequest *request = lfirst(lc);
		ReplicantPipelineSlot *slot = replicant_shmem_find(MyDatabaseId, request->pipeline_id);

		if (slot && strcmp(slot->halt_request, request->reason) == 0)
			slot->halt_request[0] = '\0';
	}

	/* Pipelines of this database that are gone give their slots up. */
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];
		bool found = false;

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		foreach(lc, rows)
			found |= (((PipelineRow *) lfirst(lc))->id == slot->pipeline_id);
		if (!found)
			slot->in_use = false;
	}

	foreach(lc, rows)
	{
		PipelineRow *row = lfirst(lc);
		ReplicantPipelineSlot *slot = replicant_shmem_find(MyDatabaseId, row->id);

		if (slot == NULL)
		{
			for (i = 0; i < replicant_max_pipelines; i++)
			{
				if (!replicant_shmem->slots[i].in_use)
				{
					slot = &replicant_shmem->slots[i];
					break;
				}
			}
			if (slot == NULL)
			{
				ereport(WARNING,
						(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
						 errmsg("replicant pipeline \"%s\" cannot run: all %d pipeline slots are in use",
								row->name, replicant_max_pipelines),
						 errhint("You might need to increase \"%s\".", "replicant.max_pipelines")));
				continue;
			}
			slot->in_use = true;
			slot->generation++;
			slot->dboid = MyDatabaseId;
			slot->pipeline_id = row->id;
			slot->pid = 0;
			slot->latch = NULL;
			slot->ndestinations = 0;
			for (i = 0; i < REPLICANT_MAX_DESTINATIONS; i++)
			{
				slot->destinations[i].id = 0;
				slot->destinations[i].name[0] = '\0';
				replicant_shmem_reset_destination(&slot->destinations[i]);
			}
			slot->worker_starts = 0;
			slot->last_progress = 0;
			slot->delivered_upto = InvalidXLogRecPtr;
			slot->phase = REPLICANT_PHASE_STARTING;
			slot->failure[0] = '\0';
			slot->halt_request[0] = '\0';
			slot->dropping = slot->held = false;
		}
		/* A halt the launcher asked for and no sync recorded yet stands. */
		if (slot->halt_request[0] != '\0')
			row->runnable = false;
		/* Being dropped or changed: the row shows as it was until that commits. */
		if (slot->dropping || slot->held)
			row->runnable = false;
		if (row->runnable && !slot->runnable && slot->pid == 0)
		{
			/* Resumed or enabled: the old halt no longer describes it. */
			for (i = 0; i < replicant_shmem_ndestinations(slot); i++)
			{
				slot->destinations[i].state = REPLICANT_STATE_STARTING;
				slot->destinations[i].last_error[0] = '\0';
				slot->destinations[i].metrics.disabled_by_sink = false;
			}
		}
		mirror_destinations(slot, row);
		strlcpy(slot->name, row->name, NAMEDATALEN);
		slot->owner = row->owner;
		slot->runnable = row->runnable;
		slot->config_version = row->config_version;
	}
	LWLockRelease(replicant_shmem->lock);
}

/*
 * Drops this database's replicant slots that no pipeline owns, such as
 * those left by DROP EXTENSION.  Slots are listed before the rows are read
 * with a fresh snapshot: a slot that create_pipeline made is held by its
 * creator until its row is committed, so it is never taken for an orphan.
 */
static void
drop_orphan_slots(List *inactive_slots, List *rows)
{
	ListCell *lc;
	ListCell *lc2;

	foreach(lc, inactive_slots)
	{
		char *slot_name = lfirst(lc);
		bool owned = false;

		foreach(lc2, rows)
			owned |= (strcmp(((PipelineRow *) lfirst(lc2))->slot_name, slot_name) == 0);
		if (!owned)
		{
			MemoryContext context = CurrentMemoryContext;

			/* Taken meanwhile, say: the pipelines' sync does not fail for it. */
			PG_TRY();
			{
				if (replicant_slot_drop(slot_name, true) == REPLICANT_SLOT_OURS)
					ereport(LOG,
							(errmsg("dropped replication slot \"%s\", which no replicant pipeline owned",
									slot_name)));
			}
			PG_CATCH();
			{
				ErrorData *edata;

				MemoryContextSwitchTo(context);
				edata = CopyErrorData();
				/* drop_pipeline dropped it meanwhile: no error. */
				if (edata->sqlerrcode != ERRCODE_UNDEFINED_OBJECT ||
					replicant_slot_owner(slot_name) != REPLICANT_SLOT_MISSING)
					EmitErrorReport();
				FlushErrorState();
				AbortOutOfAnyTransaction();
			}
			PG_END_TRY();
		}
	}
}

/*
 * Logs the halted event of each pipeline the catalog update halted, but
 * those whose slots logged it already (logged, by name).
 */
static void
log_halted(List *logged, const char *reason)
{
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		char *name = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, 1);
		bool seen = false;
		ListCell *lc;

		foreach(lc, logged)
			seen |= (strcmp(lfirst(lc), name) == 0);
		if (!seen)
			replicant_log_state(name, "halted", "reason", reason, REPLICANT_LOG_END);
	}
}

/*
 * Halts every enabled pipeline of this database (the sync failed), in the
 * catalog if that still can be done, and in shared memory anyway, so that
 * the launcher starts none of them until the database syncs again.  A
 * pipeline the sync never mirrored has no slot: its halted event comes
 * from the catalog's update.
 */
static void
halt_database_pipelines(const char *reason)
{
	Oid argtypes[1] = {TEXTOID};
	Datum args[1] = {CStringGetTextDatum(reason)};
	MemoryContext context = CurrentMemoryContext;
	List *logged = NIL;
	int i;

	ereport(LOG,
			(errmsg("replicant halts the pipelines of database %u: %s", MyDatabaseId, reason),
			 errhint("Fix the cause, then call replicant.resume_pipeline() for each.")));
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		/*
		 * replicant_shmem_halt logs the event of one not halted yet; one
		 * halted already logged its event when it halted (in shared memory
		 * only, say, by the launcher): the catalog's update logs neither.
		 */
		logged = lappend(logged, pstrdup(slot->name));
		replicant_shmem_halt(slot, reason, false);
	}
	LWLockRelease(replicant_shmem->lock);
	PG_TRY();
	{
		StartTransactionCommand();
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		replicant_catalog_check_schema();
		if (OidIsValid(get_extension_oid("replicant", true)))
		{
			if (SPI_execute_with_args("UPDATE replicant.pipelines SET halt_reason = $1"
									  " WHERE enabled AND halt_reason IS NULL RETURNING name",
									  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
				elog(ERROR, "could not update replicant.pipelines");
			log_halted(logged, reason);
		}
		PopActiveSnapshot();
		SPI_finish();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(context);
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
	}
	PG_END_TRY();
}

/*
 * Acts on the error that ended a sync: one that may pass is thrown again,
 * and the launcher tries again, unless this was the last try; any other
 * halts the database's pipelines, with a value-free reason.
 */
REPLICANT_NORETURN static void
sync_failed(ReplicantSyncArgs *args)
{
	ErrorData *edata = CopyErrorData();
	char *reason = replicant_delivery_failure(REPLICANT_PHASE_SYNC, NULL, edata->sqlerrcode);

	FlushErrorState();
	AbortOutOfAnyTransaction();
	if (replicant_delivery_error_is_transient(edata->sqlerrcode) &&
		args->retries < REPLICANT_MAX_RETRIES)
		ReThrowError(edata);
	if (replicant_delivery_error_is_transient(edata->sqlerrcode))
		reason = psprintf("%s, %d times in a row", reason, args->retries + 1);
	halt_database_pipelines(reason);
	replicant_shmem->sync_done[args->index] = true;
	proc_exit(0);
}

/* Mirrors the pipeline rows into shared memory and drops orphaned slots. */
static void
sync_database(void)
{
	List *inactive;
	List *rows;
	List *halts = NIL;
	MemoryContext old;

	StartTransactionCommand();
	old = MemoryContextSwitchTo(TopMemoryContext);
	inactive = replicant_slot_list_inactive();
	MemoryContextSwitchTo(old);
	rows = read_rows_unless_dropped(&halts);
	CommitTransactionCommand();
	/* Both lists outlive the contexts the commit and SPI_finish() freed. */
	Assert(rows == NIL || GetMemoryChunkContext(rows) == TopMemoryContext);
	Assert(inactive == NIL || GetMemoryChunkContext(inactive) == TopMemoryContext);

	mirror_rows(rows, halts);
	drop_orphan_slots(inactive, rows);
}

void
replicant_sync_main(Datum main_arg)
{
	ReplicantSyncArgs args;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(args.dboid, InvalidOid, 0);
	replicant_pin_worker_settings();
	pgstat_report_appname("replicant sync");

	PG_TRY();
	{
		sync_database();
	}
	PG_CATCH();
	{
		/* Not a context the abort frees: the error is copied there. */
		MemoryContextSwitchTo(TopMemoryContext);
		sync_failed(&args);
	}
	PG_END_TRY();

	/* No lock: only this worker writes its place until it exits. */
	replicant_shmem->sync_done[args.index] = true;
	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	if (replicant_shmem->launcher_latch)
		SetLatch(replicant_shmem->launcher_latch);
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}
