/*
 * launcher.c
 *		The launcher: starts, stops and restarts the pipeline workers.
 *
 * The launcher is a static background worker connected to no database.
 * Pipelines live in each database's replicant.pipelines table, which it
 * cannot read, so it starts a short-lived sync worker (sync.c) in a database whenever
 * that database's pipelines may have changed (the SQL API asks for it at
 * commit; at start every database is read).  The sync worker mirrors the
 * rows into shared memory and exits; the launcher then starts, stops or
 * restarts pipeline workers to match, restarting crashed ones with
 * exponential backoff.  Pipeline workers are BGW_NEVER_RESTART so that the
 * launcher alone decides.
 *
 * Nothing is restarted without bound.  A worker that exits on an error
 * (or dies) while its pipeline makes no progress (shmem.h) is restarted at
 * most REPLICANT_MAX_RETRIES times; the next failure halts the pipeline,
 * with the reason the worker left, recorded by the database's sync worker,
 * which can write the catalog.  What others do to a worker is no failure
 * of the pipeline's (run_failed): it is restarted with backoff, as often as
 * it takes.  A worker that dies by a signal takes the launcher's count with
 * it (the postmaster restarts the server): runs.c keeps one in the catalog.  A sync worker that fails is retried as
 * often; after that, or on an error that is not transient, it halts the
 * database's pipelines itself.  The pipelines of a dropped database are
 * forgotten.
 *
 * Rules kept with other files: docs/internals.md §8 (restarts), §9
 * (privileges).
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "launcher.h"
#include "replicant.h"
#include "shmem.h"
#include "sync.h"
#include "worker.h"

/* A worker that ran less than this before exiting counts as failing. */
#define HEALTHY_RUN_MS 10000
#define RESTART_MIN_MS 1000
#define LAUNCHER_NAP_MS 10000

/* replicant.max_restart_delay: the longest a failed worker waits for its restart. */
static int max_restart_delay_ms = 60000;

/* The launcher's view of each pipeline slot's worker. */
typedef struct LaunchedWorker
{
	BackgroundWorkerHandle *handle;
	uint32 generation;
	int32 config_version;
	TimestampTz started_at;
	TimestampTz next_start;
	int failures;
	bool wanted;          /* as of the last round */
	bool terminated;      /* stopped by us, for a new configuration */
	uint64 fail_progress; /* the slot's progress at the failures counted */
	int fail_count;       /* failed runs in a row at fail_progress */
	bool clean_end;       /* the last run ended with no failure of the pipeline's */
} LaunchedWorker;

typedef struct LaunchedSync
{
	BackgroundWorkerHandle *handle;
	Oid dboid;
} LaunchedSync;

/* A database whose last syncs failed. */
typedef struct FailedSync
{
	Oid dboid;
	int failures;
	TimestampTz retry_at;
} FailedSync;

static LaunchedWorker *launched;
static LaunchedSync syncs[REPLICANT_MAX_SYNCS];
static List *failed_syncs = NIL; /* of FailedSync *, in TopMemoryContext */

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
				  replicant_shmem_state(slot, NULL) != REPLICANT_STATE_SNAPSHOTTING;
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

	DefineCustomIntVariable("replicant.max_restart_delay",
							"Longest wait before a failed pipeline worker is started again.",
							"The wait doubles from 1s with every failed start, up to this. A failure that may pass is retried at most 10 times while the pipeline makes no progress; the next one halts it.",
							&max_restart_delay_ms,
							60000, 100, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

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

/* The databases (only the connectable, non-template ones if asked), in mcxt. */
static List *
list_databases(bool connectable_only, MemoryContext mcxt)
{
	Relation rel;
	TableScanDesc scan;
	HeapTuple tuple;
	List *dbs = NIL;

	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		MemoryContext old;

		if (connectable_only && (!db->datallowconn || db->datistemplate))
			continue;
		old = MemoryContextSwitchTo(mcxt);
		dbs = lappend_oid(dbs, db->oid);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return dbs;
}

/* Queues every connectable, non-template database for a sync. */
static void
queue_all_databases(void)
{
	List *dbs = list_databases(true, CurrentMemoryContext);
	ListCell *lc;

	foreach(lc, dbs)
		replicant_shmem_request_sync(lfirst_oid(lc));
	list_free(dbs);
}

static FailedSync *
failed_sync(Oid dboid)
{
	ListCell *lc;

	foreach(lc, failed_syncs)
		if (((FailedSync *) lfirst(lc))->dboid == dboid)
			return lfirst(lc);
	return NULL;
}

/*
 * Forgets the pipelines of databases that no longer exist (DROP DATABASE,
 * which also dropped their replication slots): their slots in shared
 * memory are free for others, and nothing tries to start them again.
 * Returns the databases that exist.
 */
static List *
forget_dropped_databases(void)
{
	List *dbs = list_databases(false, CurrentMemoryContext);
	ListCell *lc;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	replicant_shmem->databases_dropped = false;
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (!slot->in_use || list_member_oid(dbs, slot->dboid))
			continue;
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" is gone with its database (OID %u)",
						slot->name, slot->dboid)));
		slot->in_use = false;
		slot->runnable = false;
	}
	for (i = replicant_shmem->ndirty - 1; i >= 0; i--)
		if (!list_member_oid(dbs, replicant_shmem->dirty_dbs[i]))
			replicant_shmem->dirty_dbs[i] = replicant_shmem->dirty_dbs[--replicant_shmem->ndirty];
	LWLockRelease(replicant_shmem->lock);
	foreach(lc, failed_syncs)
	{
		FailedSync *failed = lfirst(lc);

		if (!list_member_oid(dbs, failed->dboid))
		{
			failed_syncs = foreach_delete_current(failed_syncs, lc);
			pfree(failed);
		}
	}
	return dbs;
}

/*
 * A database to sync next: one whose sync is not running, nor waiting to
 * be retried (*nap then says for how long at most).
 */
static Oid
next_dirty_database(TimestampTz now, long *nap)
{
	Oid dboid = InvalidOid;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < replicant_shmem->ndirty; i++)
	{
		int j;
		bool busy = false;
		FailedSync *failed = failed_sync(replicant_shmem->dirty_dbs[i]);

		for (j = 0; j < REPLICANT_MAX_SYNCS; j++)
			busy |= (syncs[j].handle != NULL && syncs[j].dboid == replicant_shmem->dirty_dbs[i]);
		if (failed && now < failed->retry_at)
		{
			*nap = Min(*nap, TimestampDifferenceMilliseconds(now, failed->retry_at) + 1);
			busy = true;
		}
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

static long
restart_delay_ms(int failures)
{
	long delay = Min(RESTART_MIN_MS, max_restart_delay_ms);

	while (failures-- > 0 && delay < max_restart_delay_ms)
		delay *= 2;
	return Min(delay, max_restart_delay_ms);
}

/*
 * A sync of dboid ended, done or not.  One that failed is tried again
 * after a backoff, at most REPLICANT_MAX_RETRIES times in a row; then the
 * sync worker has halted the database's pipelines (it is told which try is
 * the last), unless it could not even do that: then they halt in shared
 * memory only, until the database's next sync succeeds.
 */
static void
sync_ended(Oid dboid, bool done, TimestampTz now)
{
	FailedSync *failed = failed_sync(dboid);
	List *dbs = done ? NIL : list_databases(false, CurrentMemoryContext);
	bool gone = !done && !list_member_oid(dbs, dboid);
	MemoryContext old;
	int i;

	list_free(dbs);
	/* A database dropped meanwhile needs no sync. */
	if (done || gone)
	{
		if (failed)
		{
			failed_syncs = list_delete_ptr(failed_syncs, failed);
			pfree(failed);
		}
		return;
	}
	if (failed == NULL)
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		failed = palloc0(sizeof(FailedSync));
		failed->dboid = dboid;
		failed_syncs = lappend(failed_syncs, failed);
		MemoryContextSwitchTo(old);
	}
	if (++failed->failures <= REPLICANT_MAX_RETRIES)
	{
		failed->retry_at = TimestampTzPlusMilliseconds(now, restart_delay_ms(failed->failures - 1));
		replicant_shmem_request_sync(dboid);
		return;
	}
	ereport(WARNING,
			(errmsg("replicant could not read the pipelines of database %u %d times in a row: halting them",
					dboid, failed->failures)));
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < replicant_max_pipelines; i++)
		if (replicant_shmem->slots[i].in_use && replicant_shmem->slots[i].dboid == dboid)
			replicant_shmem_halt(&replicant_shmem->slots[i],
								 "phase \"sync\" failed: the sync worker exited abnormally, 11 times in a row", false);
	LWLockRelease(replicant_shmem->lock);
	failed_syncs = list_delete_ptr(failed_syncs, failed);
	pfree(failed);
}

/* Reaps finished sync workers and starts new ones; returns how long the launcher may nap. */
static long
run_syncs(TimestampTz now)
{
	long nap = LAUNCHER_NAP_MS;
	int i;

	for (i = 0; i < REPLICANT_MAX_SYNCS; i++)
	{
		ReplicantSyncArgs args = {0};
		FailedSync *failed;

		if (syncs[i].handle != NULL && stopped(syncs[i].handle))
		{
			pfree(syncs[i].handle);
			syncs[i].handle = NULL;
			sync_ended(syncs[i].dboid, replicant_shmem->sync_done[i], now);
		}
		if (syncs[i].handle != NULL)
			continue;
		args.dboid = next_dirty_database(now, &nap);
		if (!OidIsValid(args.dboid))
			continue;
		args.index = i;
		failed = failed_sync(args.dboid);
		args.retries = failed ? failed->failures : 0;
		replicant_shmem->sync_done[i] = false;
		syncs[i].dboid = args.dboid;
		syncs[i].handle = start_worker("replicant_sync_main", "replicant sync",
									   "replicant sync", (Datum) 0,
									   &args, sizeof(args));
		if (syncs[i].handle == NULL)
		{
			/* Out of worker slots: try again on the next round. */
			replicant_shmem_request_sync(args.dboid);
			break;
		}
	}
	return nap;
}

/*
 * Whether a run that ended by itself is a failure of the pipeline's, which
 * counts towards a halt: an error the worker reported, an end it could not
 * report once connected (a FATAL, a fault point's exit), or a start that
 * never connected (its owner lost CONNECT or LOGIN, the database refuses
 * connections: none of them passes by itself; the sync worker, where it
 * can connect, halts with the precise reason first).  Not a run that
 * another process terminated or cancelled (a shutdown,
 * pg_terminate_backend, pg_cancel_backend, of the worker or of one of its
 * snapshot workers): that is restarted with backoff, without bound, as no
 * loop the pipeline makes.
 */
static bool
run_failed(const ReplicantPipelineSlot *copy)
{
	return !copy->interrupted;
}

/* Why a failed run ended, as far as the launcher knows (value-free). */
static const char *
run_failure(const ReplicantPipelineSlot *copy)
{
	if (copy->failure[0] != '\0')
		return copy->failure;
	if (!copy->connected)
		return "the pipeline worker could not connect to its database (the server log says why)";
	return psprintf("the pipeline worker exited abnormally in phase \"%s\"",
					replicant_phase_name(copy->phase));
}

/*
 * Counts a failed run of a slot's worker (run_failed); after
 * REPLICANT_MAX_RETRIES restarts in a row without progress, halts the
 * pipeline with the reason the worker left.
 */
static void
count_failure(ReplicantPipelineSlot *slot, LaunchedWorker *w,
			  const ReplicantPipelineSlot *copy)
{
	char *reason;

	if (copy->progress != w->fail_progress)
	{
		w->fail_progress = copy->progress;
		w->fail_count = 0;
	}
	if (++w->fail_count <= REPLICANT_MAX_RETRIES)
		return;
	/* The count starts over after a halt: never more than one past the bound. */
	Assert(w->fail_count == REPLICANT_MAX_RETRIES + 1);
	reason = psprintf("%s, %d times in a row without progress", run_failure(copy), w->fail_count);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" halts: %s", copy->name, reason)));
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (slot->generation == copy->generation)
		replicant_shmem_halt(slot, reason, true);
	LWLockRelease(replicant_shmem->lock);
	/* Its database's sync worker records the halt. */
	replicant_shmem_request_sync(copy->dboid);
	w->fail_count = 0;
}

/*
 * Forgets a worker that exited.  Unless it was stopped on purpose, its next
 * start waits out a backoff that grows while its runs stay short, and the
 * failure counts towards a halt.
 */
static void
reap_worker(ReplicantPipelineSlot *slot, LaunchedWorker *w,
			ReplicantPipelineSlot *copy, TimestampTz now)
{
	/* It may have failed for want of its database, dropped meanwhile. */
	List *dbs = forget_dropped_databases();
	bool database_exists = list_member_oid(dbs, copy->dboid);

	list_free(dbs);
	pfree(w->handle);
	w->handle = NULL;
	/*
	 * How the run ended, for this reap only: a worker the postmaster could
	 * not start leaves no word of its own.
	 */
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->failure[0] = '\0';
	slot->connected = false;
	slot->interrupted = false;
	slot->shard_interrupted = false;
	slot->superseded = false;
	LWLockRelease(replicant_shmem->lock);
	w->clean_end = true;
	if (w->terminated || copy->stop_requested || copy->superseded)
	{
		/*
		 * Restarted for new settings or backfills: no failure; nor when it
		 * exited before it ran, its configuration changed since its start
		 * (superseded), which this launcher may not have seen yet.
		 */
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
		if (copy->in_use && copy->runnable && copy->generation == w->generation &&
			database_exists && run_failed(copy))
		{
			w->clean_end = false;
			count_failure(slot, w, copy);
		}

		/*
		 * It may not even have connected (its owner lost LOGIN or CONNECT):
		 * the sync worker, which can read the catalog, finds out and halts
		 * the pipeline with the reason.  (Not when it was stopped: its
		 * database may be going, DROP DATABASE.)
		 */
		if (copy->in_use && copy->runnable && database_exists)
			replicant_shmem_request_sync(copy->dboid);
	}

	/*
	 * A pipeline gone from the catalog (dropped with the extension) left its
	 * slot behind; it can be dropped now that it is free.
	 */
	if (!copy->in_use && database_exists)
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
	args.start_over = w->clean_end && copy->generation == w->generation;
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
			ReplicantPipelineSlot *slot = &replicant_shmem->slots[slot_index];

			for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
			{
				slot->destinations[i].state = REPLICANT_STATE_RETRYING;
				snprintf(slot->destinations[i].last_error, REPLICANT_ERROR_LEN,
						 "cannot start the pipeline worker: out of background worker slots (max_worker_processes = %d)",
						 max_worker_processes);
			}
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
		bool exited = (w->handle != NULL && stopped(w->handle));
		bool running;
		bool wanted;

		/* Read after the exit: with what the worker wrote last. */
		LWLockAcquire(replicant_shmem->lock, LW_SHARED);
		memcpy(&copy, &replicant_shmem->slots[i], sizeof(copy));
		LWLockRelease(replicant_shmem->lock);
		if (exited)
		{
			reap_worker(&replicant_shmem->slots[i], w, &copy, now);
			LWLockAcquire(replicant_shmem->lock, LW_SHARED);
			memcpy(&copy, &replicant_shmem->slots[i], sizeof(copy));
			LWLockRelease(replicant_shmem->lock);
		}
		running = (w->handle != NULL);
		wanted = copy.in_use && copy.runnable && !copy.dropping && !copy.held;

		/* Enabled or resumed: a deliberate start owes nothing to past failures. */
		if (wanted && !w->wanted)
		{
			w->failures = 0;
			w->next_start = 0;
			w->fail_count = 0;
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
			w->fail_count = 0;
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
		bool dropped;
		long nap;
		TimestampTz now;

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
		dropped = replicant_shmem->databases_dropped;
		LWLockRelease(replicant_shmem->lock);
		if (dropped)
			list_free(forget_dropped_databases());
		if (rescan)
			queue_all_databases();

		now = GetCurrentTimestamp();
		nap = Min(run_syncs(now), reconcile_workers());

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 nap, PG_WAIT_EXTENSION);
	}
	proc_exit(0);
}
