/*
 * launcher.c
 *		The launcher and the per-database sync worker.
 *
 * The launcher is a static background worker connected to no database.
 * Pipelines live in each database's replicant.pipelines table, which it
 * cannot read, so it starts a short-lived sync worker in a database whenever
 * that database's pipelines may have changed (the SQL API asks for it at
 * commit; at start every database is read).  The sync worker mirrors the
 * rows into shared memory and exits; the launcher then starts, stops or
 * restarts pipeline workers to match, restarting crashed ones with
 * exponential backoff.  Pipeline workers are BGW_NEVER_RESTART so that the
 * launcher alone decides.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type_d.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "launcher.h"
#include "pipeline.h"
#include "replicant.h"
#include "shmem.h"
#include "slot.h"
#include "worker.h"

#define MAX_CONCURRENT_SYNCS 4
/* A worker that ran less than this before exiting counts as failing. */
#define HEALTHY_RUN_MS 10000
#define RESTART_MIN_MS 1000
#define RESTART_MAX_MS 60000
#define LAUNCHER_NAP_MS 10000

/* The launcher's view of each pipeline slot's worker. */
typedef struct LaunchedWorker
{
	BackgroundWorkerHandle *handle;
	uint32 generation;
	int32 config_version;
	TimestampTz started_at;
	TimestampTz next_start;
	int failures;
	bool wanted;     /* as of the last round */
	bool terminated; /* stopped by us, for a new configuration */
} LaunchedWorker;

typedef struct LaunchedSync
{
	BackgroundWorkerHandle *handle;
	Oid dboid;
} LaunchedSync;

static LaunchedWorker *launched;
static LaunchedSync syncs[MAX_CONCURRENT_SYNCS];

/*
 * Asks a worker to stop where it leaves nothing to re-deliver; a worker
 * that has not attached yet, reads an initial snapshot (whose progress is
 * durable per shard) or belongs to a pipeline that is gone is terminated.
 */
static void
stop_worker(ReplicantPipelineSlot *slot, LaunchedWorker *w)
{
	bool cooperative;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	cooperative = slot->in_use && slot->generation == w->generation &&
				  slot->pid != 0 && slot->latch != NULL &&
				  slot->state != REPLICANT_STATE_SNAPSHOTTING;
	/* Terminated or not, the stop is ours: it ends quietly (stop_signal.c). */
	if (slot->in_use && slot->generation == w->generation)
		slot->stop_requested = true;
	if (cooperative)
		SetLatch(slot->latch);
	LWLockRelease(replicant_shmem->lock);
	if (!cooperative)
		TerminateBackgroundWorker(w->handle);
	w->terminated = true;
}

void
replicant_launcher_register(void)
{
	BackgroundWorker worker = {0};

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "replicant", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "replicant_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "replicant launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "replicant launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

static void
launcher_detach(int code, Datum arg)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	replicant_shmem->launcher_pid = 0;
	replicant_shmem->launcher_latch = NULL;
	LWLockRelease(replicant_shmem->lock);
}

/* Queues every connectable, non-template database for a sync. */
static void
queue_all_databases(void)
{
	Relation rel;
	TableScanDesc scan;
	HeapTuple tuple;
	List *dbs = NIL;
	ListCell *lc;

	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);

		if (db->datallowconn && !db->datistemplate)
			dbs = lappend_oid(dbs, db->oid);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	foreach(lc, dbs)
		replicant_shmem_request_sync(lfirst_oid(lc));
}

static Oid
next_dirty_database(void)
{
	Oid dboid = InvalidOid;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < replicant_shmem->ndirty; i++)
	{
		int j;
		bool busy = false;

		for (j = 0; j < MAX_CONCURRENT_SYNCS; j++)
			busy |= (syncs[j].handle != NULL && syncs[j].dboid == replicant_shmem->dirty_dbs[i]);
		if (busy)
			continue;
		dboid = replicant_shmem->dirty_dbs[i];
		replicant_shmem->dirty_dbs[i] = replicant_shmem->dirty_dbs[--replicant_shmem->ndirty];
		break;
	}
	LWLockRelease(replicant_shmem->lock);
	return dboid;
}

static BackgroundWorkerHandle *
start_worker(const char *function, const char *name, const char *type,
			 Datum main_arg, const void *extra, Size extra_len)
{
	BackgroundWorker worker = {0};
	BackgroundWorkerHandle *handle;

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	worker.bgw_notify_pid = MyProcPid;
	worker.bgw_main_arg = main_arg;
	strlcpy(worker.bgw_library_name, "replicant", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker.bgw_name, name, BGW_MAXLEN);
	strlcpy(worker.bgw_type, type, BGW_MAXLEN);
	memcpy(worker.bgw_extra, extra, extra_len);

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return NULL;
	return handle;
}

static bool
stopped(BackgroundWorkerHandle *handle)
{
	pid_t pid;

	return GetBackgroundWorkerPid(handle, &pid) == BGWH_STOPPED;
}

static void
run_syncs(void)
{
	int i;

	for (i = 0; i < MAX_CONCURRENT_SYNCS; i++)
	{
		if (syncs[i].handle != NULL && stopped(syncs[i].handle))
		{
			pfree(syncs[i].handle);
			syncs[i].handle = NULL;
		}
		if (syncs[i].handle == NULL)
		{
			Oid dboid = next_dirty_database();

			if (!OidIsValid(dboid))
				continue;
			syncs[i].dboid = dboid;
			syncs[i].handle = start_worker("replicant_sync_main", "replicant sync",
										   "replicant sync", (Datum) 0,
										   &dboid, sizeof(dboid));
			if (syncs[i].handle == NULL)
			{
				/* Out of worker slots: try again on the next round. */
				replicant_shmem_request_sync(dboid);
				break;
			}
		}
	}
}

static long
restart_delay_ms(int failures)
{
	long delay = RESTART_MIN_MS;

	while (failures-- > 0 && delay < RESTART_MAX_MS)
		delay *= 2;
	return Min(delay, RESTART_MAX_MS);
}

/*
 * Forgets a worker that exited.  Unless it was stopped on purpose, its next
 * start waits out a backoff that grows while its runs stay short.
 */
static void
reap_worker(LaunchedWorker *w, const ReplicantPipelineSlot *copy,
			TimestampTz now)
{
	pfree(w->handle);
	w->handle = NULL;
	if (w->terminated || copy->stop_requested)
	{
		/* Restarted for new settings or backfills: no failure. */
		w->next_start = 0;
		w->terminated = false;
	}
	else
	{
		if (TimestampDifferenceExceeds(w->started_at, now, HEALTHY_RUN_MS))
			w->failures = 0;
		else
			w->failures++;
		w->next_start = TimestampTzPlusMilliseconds(now, restart_delay_ms(w->failures));

		/*
		 * It may not even have connected (its owner lost LOGIN): the sync
		 * worker, which can read the catalog, finds out and halts the
		 * pipeline instead of this restarting it.
		 */
		if (copy->in_use)
			replicant_shmem_request_sync(copy->dboid);
	}

	/*
	 * A pipeline gone from the catalog (dropped with the extension) left its
	 * slot behind; it can be dropped now that it is free.
	 */
	if (!copy->in_use)
		replicant_shmem_request_sync(copy->dboid);
}

/*
 * Starts the slot's pipeline worker.  Out of background worker slots, it
 * says so in the slot and tries again after a backoff.
 */
static void
launch_worker(int slot_index, LaunchedWorker *w,
			  const ReplicantPipelineSlot *copy, TimestampTz now)
{
	ReplicantWorkerArgs args = {0};
	char name[BGW_MAXLEN];

	args.generation = copy->generation;
	args.dboid = copy->dboid;
	args.owner = copy->owner;
	args.pipeline_id = copy->pipeline_id;
	args.config_version = copy->config_version;
	snprintf(name, sizeof(name), "replicant pipeline %s", copy->name);
	w->handle = start_worker("replicant_worker_main", name, "replicant pipeline",
							 Int32GetDatum(slot_index), &args, sizeof(args));
	w->generation = copy->generation;
	w->config_version = copy->config_version;
	w->started_at = now;
	if (w->handle == NULL)
	{
		LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
		if (replicant_shmem->slots[slot_index].generation == copy->generation)
		{
			replicant_shmem->slots[slot_index].state = REPLICANT_STATE_RETRYING;
			snprintf(replicant_shmem->slots[slot_index].last_error, REPLICANT_ERROR_LEN,
					 "cannot start the pipeline worker: out of background worker slots (max_worker_processes = %d)",
					 max_worker_processes);
		}
		LWLockRelease(replicant_shmem->lock);
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("out of background worker slots for replicant pipeline \"%s\"",
						copy->name),
				 errhint("You might need to increase \"%s\".", "max_worker_processes")));
		w->failures++;
		w->next_start = TimestampTzPlusMilliseconds(now, restart_delay_ms(w->failures));
	}
}

/*
 * Makes the running workers match the slots.  Returns how long the launcher
 * may sleep before a throttled restart is due.
 */
static long
reconcile_workers(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long nap = LAUNCHER_NAP_MS;
	int i;

	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot copy;
		LaunchedWorker *w = &launched[i];
		bool running;
		bool wanted;

		LWLockAcquire(replicant_shmem->lock, LW_SHARED);
		memcpy(&copy, &replicant_shmem->slots[i], sizeof(copy));
		LWLockRelease(replicant_shmem->lock);

		if (w->handle != NULL && stopped(w->handle))
			reap_worker(w, &copy, now);
		running = (w->handle != NULL);
		wanted = copy.in_use && copy.runnable;

		/* Enabled or resumed: a deliberate start owes nothing to past failures. */
		if (wanted && !w->wanted)
		{
			w->failures = 0;
			w->next_start = 0;
		}
		w->wanted = wanted;

		if (running)
		{
			if (!wanted || copy.generation != w->generation ||
				copy.config_version != w->config_version)
				stop_worker(&replicant_shmem->slots[i], w);
			continue;
		}
		if (!wanted)
			continue;

		if (copy.generation != w->generation)
		{
			/* A pipeline new to this slot starts at once. */
			w->failures = 0;
			w->next_start = 0;
		}
		if (now < w->next_start)
		{
			nap = Min(nap, TimestampDifferenceMilliseconds(now, w->next_start) + 1);
			continue;
		}

		launch_worker(i, w, &copy, now);
	}
	return nap;
}

void
replicant_launcher_main(Datum main_arg)
{
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	/* Connected to no database: enough to read pg_database. */
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	launched = MemoryContextAllocZero(TopMemoryContext,
									  sizeof(LaunchedWorker) * replicant_max_pipelines);

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	replicant_shmem->launcher_pid = MyProcPid;
	replicant_shmem->launcher_latch = MyLatch;
	replicant_shmem->rescan_all = true;
	LWLockRelease(replicant_shmem->lock);
	before_shmem_exit(launcher_detach, (Datum) 0);

	while (!ShutdownRequestPending)
	{
		bool rescan;
		long nap;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
		rescan = replicant_shmem->rescan_all;
		replicant_shmem->rescan_all = false;
		LWLockRelease(replicant_shmem->lock);
		if (rescan)
			queue_all_databases();

		run_syncs();
		nap = reconcile_workers();

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 nap, PG_WAIT_EXTENSION);
	}
	proc_exit(0);
}

/*
 * Sync worker: mirrors this database's pipeline rows into shared memory.
 */

typedef struct PipelineRow
{
	int32 id;
	char name[NAMEDATALEN];
	Oid owner;
	bool runnable;
	int32 config_version;
} PipelineRow;

/*
 * A worker connects as the pipeline's owner, which needs LOGIN: without it
 * every start fails before the worker can say why.  Such pipelines halt
 * here, with the reason, until resume_pipeline.
 */
static void
halt_unconnectable_pipelines(void)
{
	uint64 i;

	/* search_path is pinned: the operators are pg_catalog's. */
	if (SPI_execute("UPDATE replicant.pipelines p"
					"   SET halt_reason = coalesce("
					"         (SELECT 'pipeline owner ' || quote_ident(r.rolname) || ' is not permitted to log in'"
					"            FROM pg_authid r WHERE r.oid = p.owner),"
					"         'pipeline owner (role OID ' || p.owner::text || ') no longer exists')"
					" WHERE p.enabled AND p.halt_reason IS NULL"
					"   AND NOT EXISTS (SELECT 1 FROM pg_authid r WHERE r.oid = p.owner AND r.rolcanlogin)"
					" RETURNING p.name, p.halt_reason",
					false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not update replicant.pipelines");
	for (i = 0; i < SPI_processed; i++)
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" halted: %s",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2)),
				 errhint("Grant the role LOGIN, then call replicant.resume_pipeline('%s').",
						 SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1))));
}

static List *
read_pipeline_rows(void)
{
	List *rows = NIL;
	uint64 i;

	if (!OidIsValid(get_extension_oid("replicant", true)))
		return NIL;
	halt_unconnectable_pipelines();
	/* Not read-only: a new snapshot, which sees the halts just recorded. */
	if (SPI_execute("SELECT id, name, owner, enabled AND halt_reason IS NULL, config_version"
					"  FROM replicant.pipelines",
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
		rows = lappend(rows, row);
	}
	return rows;
}

/*
 * The pipeline rows, in a transaction the caller started and commits; none
 * when DROP EXTENSION committed while they were read (the table went away
 * after the extension was seen): a deliberate drop is no error.
 */
static List *
read_rows_unless_dropped(void)
{
	MemoryContext context = CurrentMemoryContext;
	List *rows = NIL;

	PG_TRY();
	{
		SPI_connect();
		PushActiveSnapshot(GetTransactionSnapshot());
		rows = read_pipeline_rows();
		PopActiveSnapshot();
		SPI_finish();
	}
	PG_CATCH();
	{
		ErrorData *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_UNDEFINED_TABLE)
			PG_RE_THROW();
		FlushErrorState();
		AbortCurrentTransaction();
		StartTransactionCommand();
		if (OidIsValid(get_extension_oid("replicant", true)))
			ReThrowError(edata);
		rows = NIL;
	}
	PG_END_TRY();
	return rows;
}

static void
mirror_rows(List *rows)
{
	ListCell *lc;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);

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
			slot->state = REPLICANT_STATE_STARTING;
			slot->transactions_delivered = 0;
			slot->changes_delivered = 0;
			slot->batches_delivered = 0;
			slot->bytes_delivered = 0;
			slot->retries = 0;
			slot->last_delivery_at = 0;
			slot->last_error[0] = '\0';
			slot->last_http_status = 0;
			slot->next_retry_at = 0;
			slot->nlatency = 0;
			slot->delivered_upto = InvalidXLogRecPtr;
		}
		if (row->runnable && !slot->runnable && slot->pid == 0)
		{
			/* Resumed or enabled: the old halt no longer describes it. */
			slot->state = REPLICANT_STATE_STARTING;
			slot->last_error[0] = '\0';
		}
		strlcpy(slot->name, row->name, NAMEDATALEN);
		slot->owner = row->owner;
		slot->runnable = row->runnable;
		slot->config_version = row->config_version;
	}
	LWLockRelease(replicant_shmem->lock);
}

/*
 * Drops an orphan slot.  drop_pipeline drops its slot itself, and may do so
 * between the listing and here: a slot already gone is no error.
 */
static void
drop_slot_unless_gone(const char *slot_name)
{
	MemoryContext context = CurrentMemoryContext;

	PG_TRY();
	{
		ReplicationSlotDrop(slot_name, true);
	}
	PG_CATCH();
	{
		ErrorData *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_UNDEFINED_OBJECT || replicant_slot_exists(slot_name))
			PG_RE_THROW();
		FlushErrorState();
	}
	PG_END_TRY();
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
		{
			char *owner_slot = replicant_pipeline_slot_name(((PipelineRow *) lfirst(lc2))->name);

			owned |= (strcmp(owner_slot, slot_name) == 0);
		}
		if (!owned && replicant_slot_exists(slot_name))
		{
			ereport(LOG,
					(errmsg("dropping replication slot \"%s\", which no replicant pipeline owns",
							slot_name)));
			drop_slot_unless_gone(slot_name);
		}
	}
}

void
replicant_sync_main(Datum main_arg)
{
	Oid dboid;
	List *inactive;
	List *rows;
	MemoryContext old;

	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(dboid));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	replicant_pin_worker_settings();
	pgstat_report_appname("replicant sync");

	StartTransactionCommand();
	old = MemoryContextSwitchTo(TopMemoryContext);
	inactive = replicant_slot_list_inactive();
	MemoryContextSwitchTo(old);
	rows = read_rows_unless_dropped();
	CommitTransactionCommand();

	mirror_rows(rows);
	drop_orphan_slots(inactive, rows);

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	if (replicant_shmem->launcher_latch)
		SetLatch(replicant_shmem->launcher_latch);
	LWLockRelease(replicant_shmem->lock);
	proc_exit(0);
}
