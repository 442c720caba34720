/*
 * snapshot.c
 *		Initial snapshots: the published tables' existing rows, read under
 *		the snapshot of the slot's consistent point, before streaming starts.
 *		The pipeline worker's part: it coordinates the shard workers.
 *
 * The pipeline worker plans the snapshot (snapshot_plan.c), sends each
 * table's "first" marker, then creates the slot in a REPEATABLE READ
 * transaction and exports that transaction's snapshot, which is the slot's
 * consistent point (as CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT does for
 * a walsender).  Shard workers (snapshot_shard.c) import it and read the
 * shards while that transaction stays open.  When every shard is done the
 * exporter commits, each table gets its "last" marker, and the worker
 * streams from the consistent point: no change is missed and,
 * uninterrupted, none is delivered twice.
 *
 * After a crash the slot already exists: the remaining shards are read under
 * a fresh snapshot and the stream still starts at the slot's original
 * point, so the sink converges (duplicates possible, loss never).  A table
 * read in part whose updates can leave TOASTed columns unchanged starts
 * over (restart_partly_read_tables says why).
 *
 * Rules kept with other files: docs/internals.md §3 (the exported snapshot
 * and its shards).
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "replication/snapbuild.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "batch.h"
#include "catalog.h"
#include "compat.h"
#include "delivery_set.h"
#include "destination.h"
#include "event_log.h"
#include "fault.h"
#include "format.h"
#include "resync.h"
#include "resync_destinations.h"
#include "resync_table.h"
#include "slot.h"
#include "snapshot.h"
#include "snapshot_plan.h"
#include "snapshot_shard.h"
#include "table_read.h"
#include "transport.h"

/*
 * Markers: the snapshot batches without rows that open and close a table
 */

/* POSTs a snapshot body of relation; halts, naming it, on anything but a 2xx. */
static void
post_snapshot_body(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
				   ReplicantTransport *sink, StringInfo out, const char *webhook_id,
				   int64 nrows, const ReplicantRelation *relation)
{
	ReplicantMemoryBody state;
	ReplicantBody body;
	ReplicantSinkResult result;

	replicant_format_of(replicant_pipeline_only_destination(pipeline))->snapshot_end(out);
	replicant_body_from_buffer(&body, &state, out);
	replicant_delivery_post(slot, replicant_shmem_only_destination(slot), sink, webhook_id, &body, &result);
	replicant_snapshot_note_answer(slot, pipeline, &result, nrows, out->len, relation);
}

/*
 * Sends the "first" (or "last") marker of every initial backfill that has
 * not had it: an empty snapshot batch a sink can use to prepare (or finish)
 * the table.  "last" also marks the backfill done.
 */
static void
send_markers(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
			 ReplicantTransport *sink, bool last)
{
	ReplicantCatalogAccess access;
	Oid argtypes[2] = {INT4OID, INT8OID};
	Datum args[2];
	int64 *ids;
	ReplicantRelation *relations;
	List **keys;
	uint64 n;
	uint64 i;
	StringInfoData out;
	MemoryContext caller = CurrentMemoryContext; /* outlives the SPI connection */
	ReplicantResync *resync = replicant_resync_markers(pipeline, last);
	ReplicantResync *resyncs;
	char *refused = last ? replicant_resync_refusal(pipeline, resync) : NULL;
	const ReplicantFormat *format = replicant_format_of(replicant_pipeline_only_destination(pipeline));
	/* a resync's last markers, in a format that sweeps by key: the keys */
	bool sweeps = resync != NULL && last && format->sweeps_by_key;

	if (refused != NULL)
		replicant_delivery_halt(slot, pipeline, refused);

	args[0] = Int32GetDatum(pipeline->id);
	replicant_catalog_begin(&access);
	replicant_snapshot_plan_read(last ?
									 "SELECT id, relid FROM replicant.backfills"
									 " WHERE pipeline_id = $1 AND kind = 'initial' AND state NOT IN ('done', $2) ORDER BY id" :
									 "SELECT id, relid FROM replicant.backfills"
									 " WHERE pipeline_id = $1 AND kind = 'initial' AND NOT first_sent ORDER BY id",
								 pipeline->id, true);
	n = SPI_processed;
	ids = MemoryContextAlloc(caller, sizeof(int64) * (n + 1));
	relations = MemoryContextAlloc(caller, sizeof(ReplicantRelation) * (n + 1));
	keys = MemoryContextAllocZero(caller, sizeof(List *) * (n + 1));
	for (i = 0; i < n; i++)
	{
		bool isnull;
		Oid relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, 2, &isnull));

		ids[i] = replicant_snapshot_plan_int8(i, 1);
		/* A table dropped since planning has nothing left to deliver. */
		replicant_resync_delivered_names(&relations[i], sweeps ? &keys[i] : NULL, relid, pipeline->publications,
										 caller);
	}
	resyncs = MemoryContextAllocZero(caller, sizeof(ReplicantResync) * (n + 1));
	for (i = 0; i < n && resync != NULL; i++)
	{
		resyncs[i] = *resync;
		resyncs[i].sweep = relations[i].table != NULL &&
						   replicant_resync_sweeps(&relations[i], pipeline->publications, NULL);
	}
	replicant_catalog_end(&access);

	initStringInfo(&out);
	for (i = 0; i < n; i++)
	{
		char *webhook_id;

		if (relations[i].table != NULL)
		{
			if (resync != NULL)
				resyncs[i].key = keys[i];
			/* A format that sweeps by itself (by key) gets no resync to sweep. */
			replicant_snapshot_start_body(&out, pipeline, &relations[i], ids[i], !last, last,
										  resync && (resyncs[i].sweep || !format->sweeps_by_key) ?
											  &resyncs[i] :
											  NULL);
			webhook_id = psprintf("%s-b" INT64_FORMAT "-%s", pipeline->name, ids[i],
								  last ? "last" : "first");
			post_snapshot_body(slot, pipeline, sink, &out, webhook_id, 0, &relations[i]);
			/* answered (a resync's sweep done), not recorded: sent again */
			if (last)
				replicant_fault("snapshot_last_marker");
		}

		args[1] = Int64GetDatum(ids[i]);
		replicant_catalog_begin(&access);
		if (SPI_execute_with_args(last ?
									  "UPDATE replicant.backfills SET state = 'done', finished_at = now(),"
									  " started_at = coalesce(started_at, now()) WHERE id = $2" :
									  "UPDATE replicant.backfills SET first_sent = true WHERE id = $2",
								  2, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not record snapshot progress");
		replicant_catalog_end(&access);
		replicant_shmem_note_progress(slot);
	}
}

/*
 * The exported snapshot (pipeline worker)
 */

/*
 * Creates the slot and exports the snapshot of its consistent point.  The
 * REPEATABLE READ transaction this starts must stay open until every shard
 * worker has imported the snapshot; it writes nothing.
 */
static char *
create_slot_and_export(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline)
{
	LogicalDecodingContext *ctx;
	Snapshot snap;
	char *name;
	MemoryContext caller = CurrentMemoryContext;

	CheckLogicalDecodingRequirements();
	/* Waiting would not free one: say so rather than fail in a loop. */
	if (replicant_slot_free_count() == 0)
		replicant_delivery_halt(slot, pipeline,
								psprintf("cannot create replication slot \"%s\": all replication slots are in use (max_replication_slots = %d)",
										 pipeline->slot_name,
										 max_replication_slots));
	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;

	ctx = replicant_slot_create(pipeline->slot_name,
								pipeline->failover, true);

	/* SnapBuildInitialSnapshot refuses once any catalog access set our xmin. */
	InvalidateCatalogSnapshot();
	snap = SnapBuildInitialSnapshot(ctx->snapshot_builder);
	RestoreTransactionSnapshot(snap, MyProc);
	name = ExportSnapshot(GetTransactionSnapshot());

	FreeDecodingContext(ctx);
	/* Streaming checks that nothing moved the slot from here (slot_position.h). */
	pipeline->slot_created_at = MyReplicationSlot->data.confirmed_flush;
	/* From here the transaction's xmin protects the rows, the slot the WAL. */
	ReplicationSlotPersist();
	ReplicationSlotRelease();

	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" created its slot and exported snapshot \"%s\"",
					pipeline->name, name)));
	return MemoryContextStrdup(caller, name);
}

/*
 * Starts over the tables read in part whose updates can leave TOASTed
 * columns unchanged.  Under a fresh snapshot, a row that an update moved
 * into the part already read would be read nowhere, and the stream's update
 * would bring it without those columns.  Read whole under the fresh
 * snapshot, every row is read where it is; the stream, replayed from the
 * slot's point, brings each up to date.
 */
static void
restart_partly_read_tables(ReplicantPipeline *pipeline)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline->id)};
	Datum *restart;
	int n = 0;

	replicant_catalog_begin(&access);
	if (SPI_execute_with_args("SELECT s.backfill_id, b.relid FROM replicant.snapshot_shards s"
							  "  JOIN replicant.backfills b ON b.id OPERATOR(pg_catalog.=) s.backfill_id"
							  " WHERE b.pipeline_id OPERATOR(pg_catalog.=) $1"
							  " GROUP BY s.backfill_id, b.relid"
							  " HAVING pg_catalog.bool_or(s.done OR s.next_block OPERATOR(pg_catalog.>) s.lo_block)"
							  "    AND NOT pg_catalog.bool_and(s.done)",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the tables read in part");
	restart = palloc(Max(SPI_processed, 1) * sizeof(Datum));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool isnull;
		Oid relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, 2, &isnull));
		/* A table dropped meanwhile is left to the shard that finds it gone. */
		Relation rel = try_relation_open(relid, AccessShareLock);

		if (rel == NULL)
			continue;
		if (replicant_table_can_leave_toast_unchanged(rel))
			restart[n++] = Int64GetDatum(replicant_snapshot_plan_int8(i, 1));
		relation_close(rel, AccessShareLock);
	}
	if (n > 0)
	{
		Oid restart_types[1] = {INT8ARRAYOID};
		Datum restart_args[1] = {PointerGetDatum(construct_array(restart, n, INT8OID, sizeof(int64),
																 FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};

		if (SPI_execute_with_args("WITH b AS (UPDATE replicant.backfills SET rows_done = 0"
								  "             WHERE id OPERATOR(pg_catalog.=) ANY ($1) RETURNING id)"
								  " UPDATE replicant.snapshot_shards s SET next_block = lo_block,"
								  "        done = false, claimed = false"
								  "   FROM b WHERE s.backfill_id OPERATOR(pg_catalog.=) b.id",
								  1, restart_types, restart_args, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "could not restart the tables read in part");
	}
	replicant_catalog_end(&access);
	if (n > 0)
		ereport(LOG,
				(errmsg_plural("replicant pipeline \"%s\" reads %d table read in part again from its start",
							   "replicant pipeline \"%s\" reads %d tables read in part again from their start",
							   n, pipeline->name, n)));
}

/*
 * Exports a fresh snapshot to resume an interrupted snapshot with, after
 * starting over the tables that cannot be resumed under it.
 */
static char *
export_fresh_snapshot(ReplicantPipeline *pipeline)
{
	MemoryContext caller = CurrentMemoryContext;
	char *name;

	restart_partly_read_tables(pipeline);
	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	name = ExportSnapshot(GetTransactionSnapshot());
	return MemoryContextStrdup(caller, name);
}

static int64
count_unfinished_shards(int32 pipeline_id, bool reset_claims)
{
	ReplicantCatalogAccess access;
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	int64 n;

	replicant_catalog_begin(&access);
	if (reset_claims &&
		SPI_execute_with_args("UPDATE replicant.snapshot_shards s SET claimed = false"
							  "  FROM replicant.backfills b"
							  " WHERE b.id = s.backfill_id AND b.pipeline_id = $1 AND NOT s.done",
							  1, argtypes, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not reset snapshot shards");
	if (SPI_execute_with_args("SELECT count(*) FROM replicant.snapshot_shards s"
							  "  JOIN replicant.backfills b ON b.id = s.backfill_id"
							  " WHERE b.pipeline_id = $1 AND b.kind = 'initial' AND NOT s.done",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read snapshot shards");
	n = replicant_snapshot_plan_int8(0, 1);
	replicant_catalog_end(&access);
	return n;
}

/* Whether the pipeline still has an initial snapshot (or part of one) to take. */
static bool
snapshot_pending(ReplicantPipeline *pipeline, bool *planned)
{
	ReplicantCatalogAccess access;
	int64 total;
	int64 open;

	if (strcmp(pipeline->snapshot, "initial") != 0 && pipeline->resync_reason == NULL)
		return false;
	replicant_catalog_begin(&access);
	replicant_snapshot_plan_read("SELECT count(*), count(*) FILTER (WHERE state NOT IN ('done', $2))"
								 "  FROM replicant.backfills WHERE pipeline_id = $1 AND kind = 'initial'",
								 pipeline->id, true);
	total = replicant_snapshot_plan_int8(0, 1);
	open = replicant_snapshot_plan_int8(0, 2);
	replicant_catalog_end(&access);

	*planned = total > 0;
	return total == 0 || open > 0 || pipeline->resync_reason != NULL;
}

static BackgroundWorkerHandle *
launch_shard_worker(ReplicantPipeline *pipeline, int slot_index,
					ReplicantPipelineSlot *slot, const char *snapshot_name, int number)
{
	BackgroundWorker worker = {0};
	BackgroundWorkerHandle *handle;
	ReplicantShardArgs args = {0};

	args.dboid = MyDatabaseId;
	args.owner = pipeline->owner;
	args.pipeline_id = pipeline->id;
	args.slot_index = slot_index;
	args.generation = slot->generation;
	args.worker = number;
	strlcpy(args.snapshot_name, snapshot_name, sizeof(args.snapshot_name));

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	worker.bgw_notify_pid = MyProcPid;
	strlcpy(worker.bgw_library_name, "replicant", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "replicant_shard_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "replicant snapshot %s", pipeline->name);
	strlcpy(worker.bgw_type, "replicant snapshot", BGW_MAXLEN);
	memcpy(worker.bgw_extra, &args, sizeof(args));
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return NULL;
	return handle;
}

static BackgroundWorkerHandle **shard_handles = NULL;
static int nshard_handles = 0;

/* Shard workers must not outlive the worker that holds their snapshot. */
static void
terminate_shard_workers(int code, Datum arg)
{
	int i;

	for (i = 0; i < nshard_handles; i++)
		if (shard_handles[i] != NULL)
			TerminateBackgroundWorker(shard_handles[i]);
}

/*
 * Runs snapshot_workers shard workers until they have all exited.  Returns
 * false when one failed (its shard stays claimed until a resume).  A clean
 * exit does not prove every shard done: a worker the postmaster could not
 * start (fork failed) or that a stop ended quietly read nothing, so the
 * caller asks the catalog once the exporting transaction ended (inside it,
 * this process sees the catalog as of the old snapshot).
 */
static bool
run_shard_workers(ReplicantPipelineSlot *slot, int slot_index,
				  ReplicantPipeline *pipeline, const char *snapshot_name)
{
	int i;
	int running;

	pg_atomic_write_u32(&slot->shard_failures, 0);
	if (shard_handles == NULL)
	{
		nshard_handles = Min(pipeline->snapshot_workers, REPLICANT_MAX_SNAPSHOT_WORKERS);
		shard_handles = MemoryContextAllocZero(TopMemoryContext,
											   sizeof(BackgroundWorkerHandle *) * nshard_handles);
		before_shmem_exit(terminate_shard_workers, (Datum) 0);
	}

	for (i = 0; i < nshard_handles; i++)
		shard_handles[i] = launch_shard_worker(pipeline, slot_index, slot, snapshot_name, i);
	if (shard_handles[0] == NULL)
		replicant_delivery_halt(slot, pipeline,
								"could not start snapshot workers: out of background worker slots");

	do
	{
		bool stopped;
		pid_t pid;

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		running = 0;
		for (i = 0; i < nshard_handles; i++)
		{
			if (shard_handles[i] != NULL &&
				GetBackgroundWorkerPid(shard_handles[i], &pid) == BGWH_STOPPED)
			{
				pfree(shard_handles[i]);
				shard_handles[i] = NULL;
			}
			running += (shard_handles[i] != NULL);
		}

		/*
		 * A shard worker that halted or disabled the pipeline left its shard
		 * unread: the snapshot must not finish.  It records why in the
		 * catalog, then in shared memory, then stops; so looking after the
		 * count, a worker counted as stopped is never missed.
		 */
		LWLockAcquire(replicant_shmem->lock, LW_SHARED);
		stopped = (replicant_shmem_state(slot, NULL) == REPLICANT_STATE_HALTED || !slot->runnable);
		LWLockRelease(replicant_shmem->lock);
		if (stopped)
			proc_exit(0);
	} while (running > 0);

	return pg_atomic_read_u32(&slot->shard_failures) == 0;
}

/*
 * Sends the planned tables' "first" markers and frees every unfinished
 * shard for claiming.  Returns the planned tables.
 */
static List *
prepare_shards(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
			   ReplicantTransport *sink)
{
	send_markers(slot, pipeline, sink, false);
	(void) count_unfinished_shards(pipeline->id, true);
	return replicant_snapshot_planned_relids(pipeline);
}

/*
 * Exits for the launcher to restart the pipeline worker (with backoff, a
 * bounded number of times), which resumes the snapshot.  A shard worker
 * that failed on an error left why in the slot; one that another process
 * terminated or cancelled makes the run no failure of the pipeline's.
 */
REPLICANT_NORETURN static void
restart_snapshot(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
				 const char *why, const char *failure)
{
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" restarts its snapshot after %s",
					pipeline->name, why)));
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (slot->shard_interrupted)
		slot->interrupted = true;
	else if (slot->failure[0] == '\0')
		strlcpy(slot->failure, failure, sizeof(slot->failure));
	LWLockRelease(replicant_shmem->lock);
	proc_exit(1);
}

/*
 * Runs shard workers until every shard is read; exits for a restart when
 * one failed.  The exporting transaction is still open on return.
 */
static void
read_all_shards(ReplicantPipelineSlot *slot, int slot_index,
				ReplicantPipeline *pipeline, const char *snapshot_name)
{
	pg_atomic_write_u32(&slot->snapshot_stale, 0);
	for (;;)
	{
		if (!run_shard_workers(slot, slot_index, pipeline, snapshot_name))
			restart_snapshot(slot, pipeline, "a snapshot worker failed",
							 "a snapshot worker exited abnormally");
		if (pg_atomic_exchange_u32(&slot->snapshot_stale, 0) == 0)
			break;

		/*
		 * A table was rewritten after the snapshot: read what is left under
		 * a newer one, which sees the new heap.  The stream still starts at
		 * the slot's point, so the sink converges.
		 */
		CommitTransactionCommand();
		(void) count_unfinished_shards(pipeline->id, true);
		snapshot_name = export_fresh_snapshot(pipeline);
	}
}

void
replicant_snapshot_initial(ReplicantPipelineSlot *slot, int slot_index,
						   ReplicantPipeline *pipeline)
{
	bool planned_before;
	List *planned;
	char *snapshot_name;
	ReplicantTransport *sink;
	ReplicantSlotOwner slot_owner;

	if (!snapshot_pending(pipeline, &planned_before))
		return;
	/* Each destination reads for itself; add_destination refuses during an initial snapshot. */
	if (list_length(pipeline->destinations) > 1)
		replicant_delivery_halt(slot, pipeline,
								pipeline->resync_reason == NULL ?
									"an initial snapshot of a pipeline with several destinations is not supported" :
									replicant_resync_destinations(slot, pipeline));
	replicant_shmem_set_state(slot, REPLICANT_STATE_SNAPSHOTTING);
	replicant_log_state(pipeline->name, "snapshotting", REPLICANT_LOG_END);

	sink = replicant_delivery_sink(replicant_pipeline_only_destination(pipeline));

	slot_owner = replicant_slot_owner(pipeline->slot_name);
	if (pipeline->resync_reason != NULL && !pipeline->resync_slot_dropped)
	{
		/*
		 * A resync (resync.c): the first markers probe the sink, then what
		 * is left of the old slot goes, and the new one is made.
		 */
		char *refused;

		replicant_resync_cancel_backfills(pipeline);
		replicant_snapshot_plan(pipeline, true);
		planned = prepare_shards(slot, pipeline, sink);
		refused = replicant_resync_drop_old_slot(pipeline);
		if (refused != NULL)
			replicant_delivery_halt(slot, pipeline, refused);
		snapshot_name = create_slot_and_export(slot, pipeline);
	}
	else if (slot_owner == REPLICANT_SLOT_FOREIGN)
		replicant_delivery_halt(slot, pipeline, replicant_slot_foreign_reason(pipeline->slot_name));
	else if (slot_owner == REPLICANT_SLOT_MISSING)
	{
		/*
		 * Nothing was read under an earlier plan without the slot: the
		 * transaction that created it would have persisted it first.
		 */
		replicant_snapshot_plan(pipeline, true);
		planned = prepare_shards(slot, pipeline, sink);
		snapshot_name = create_slot_and_export(slot, pipeline);
	}
	else
	{
		planned = prepare_shards(slot, pipeline, sink);
		snapshot_name = export_fresh_snapshot(pipeline);
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" resumes its initial snapshot under a fresh snapshot",
						pipeline->name),
				 errdetail("Streaming replays changes from the slot's original consistent point.")));
	}

	/*
	 * A table published after planning (before the slot's creation, or
	 * before this resume) is planned now and read, with what is left, under
	 * a newer snapshot: the stream starts at the slot's point, so the sink
	 * converges as after an interrupted snapshot.  A resync plans every
	 * table anew then, new "first" markers before any read: a new table's
	 * "first" must not follow reads delivered under its sink name (a
	 * partition's, under its root's), or its "last" would sweep them.
	 */
	while (replicant_snapshot_unplanned_tables(pipeline, planned))
	{
		CommitTransactionCommand();
		replicant_snapshot_plan(pipeline, pipeline->resync_reason != NULL);
		planned = prepare_shards(slot, pipeline, sink);
		snapshot_name = export_fresh_snapshot(pipeline);
	}

	read_all_shards(slot, slot_index, pipeline, snapshot_name);

	/* Every shard is read: the exported snapshot is no longer needed. */
	CommitTransactionCommand();

	/*
	 * Unless a shard worker was never started (the postmaster could not
	 * fork it), or ended on a stop without a word: the catalog says.
	 */
	if (count_unfinished_shards(pipeline->id, false) > 0)
		restart_snapshot(slot, pipeline, "a snapshot worker ended with its shards unread",
						 "a snapshot worker ended with its shards unread");
	send_markers(slot, pipeline, sink, true);
	replicant_resync_finish(slot, pipeline);
	replicant_transport_close(sink);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" finished its initial snapshot", pipeline->name)));
}
