/*
 * api_xact.c
 *		What a management function leaves to its transaction's end: the slot
 *		create_pipeline created is made permanent at commit, the workers
 *		alter_pipeline and drop_pipeline stopped may run again after an
 *		abort, and the halts resume_pipeline lifted (a pipeline's, or one
 *		destination's) are cleared in shared memory at commit.
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn: replicant_api_xact_stop_worker_and_wait).
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "api_xact.h"
#include "shmem.h"
#include "slot.h"

/* What a slot created in this transaction still needs at commit. */
static bool slot_created_in_xact = false;
static bool xact_callback_registered = false;
static bool resync_on_abort = false;
/* The pipelines drop_pipeline drops in this transaction (in TopMemoryContext). */
static List *dropping_pipelines = NIL;

static void clear_dropping(void);

/* The pipelines whose worker this transaction stopped to change them (likewise). */
static List *held_pipelines = NIL;

static void release_held(void);

/* What this transaction resumed (in TopMemoryContext). */
typedef struct Resumed
{
	int32 pipeline_id;
	int32 destination_id; /* 0: each of the pipeline's */
} Resumed;

static List *resumed_at_commit = NIL;

/*
 * A resumed pipeline's shared state still shows the halt until a new
 * worker attaches: clear it the moment the resume commits, so that no
 * reader (replicant.status, await_delivered) sees the pipeline halted
 * after resume_pipeline returned.
 */
static void
clear_resumed_halts(void)
{
	ListCell *lc;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	foreach(lc, resumed_at_commit)
	{
		Resumed *resumed = lfirst(lc);
		ReplicantPipelineSlot *slot = replicant_shmem_find(MyDatabaseId, resumed->pipeline_id);

		for (int i = 0; slot && i < replicant_shmem_ndestinations(slot); i++)
		{
			if (slot->destinations[i].state == REPLICANT_STATE_HALTED &&
				(resumed->destination_id == 0 || slot->destinations[i].id == resumed->destination_id))
			{
				slot->destinations[i].state = REPLICANT_STATE_STARTING;
				slot->destinations[i].last_error[0] = '\0';
			}
		}
	}
	LWLockRelease(replicant_shmem->lock);
}

/*
 * Makes the slot permanent just before commit, and lets go of it only once
 * the pipeline row is visible, so the sync worker never mistakes it for an
 * orphan.  On error the server releases the ephemeral slot, which drops it.
 */
static void
api_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (slot_created_in_xact)
				ReplicationSlotPersist();
			break;
		case XACT_EVENT_PRE_PREPARE:
			/* What is left to the transaction's end is this backend's, not a prepared one's. */
			if (slot_created_in_xact || dropping_pipelines != NIL || held_pipelines != NIL ||
				resumed_at_commit != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that created, changed or dropped a replicant pipeline")));
			break;
		case XACT_EVENT_COMMIT:
			if (slot_created_in_xact && MyReplicationSlot != NULL)
				ReplicationSlotRelease();
			slot_created_in_xact = false;
			resync_on_abort = false;
			list_free(dropping_pipelines);
			dropping_pipelines = NIL;
			if (held_pipelines != NIL)
				release_held();
			if (resumed_at_commit != NIL)
				clear_resumed_halts();
			list_free_deep(resumed_at_commit);
			resumed_at_commit = NIL;
			break;
		case XACT_EVENT_ABORT:
			list_free_deep(resumed_at_commit);
			resumed_at_commit = NIL;
			slot_created_in_xact = false;
			if (dropping_pipelines != NIL)
				clear_dropping();
			list_free(dropping_pipelines);
			dropping_pipelines = NIL;
			if (held_pipelines != NIL)
				release_held();
			if (resync_on_abort)
				replicant_shmem_request_sync(MyDatabaseId);
			resync_on_abort = false;
			break;
		default:
			break;
	}
}

static void
register_xact_callback(void)
{
	if (!xact_callback_registered)
		RegisterXactCallback(api_xact_callback, NULL);
	xact_callback_registered = true;
}

/* Creates the pipeline's logical slot, ephemeral until commit; returns its consistent point. */
XLogRecPtr
replicant_api_xact_create_slot(const char *slot_name, bool failover)
{
	LogicalDecodingContext *ctx;

	if (MyReplicationSlot != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("only one pipeline can be created per transaction")));
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("cannot create a pipeline in a transaction that has performed writes")));

	CheckLogicalDecodingRequirements();
	register_xact_callback();
	ctx = replicant_slot_create(slot_name, failover, false);
	slot_created_in_xact = true;
	FreeDecodingContext(ctx);
	return MyReplicationSlot->data.confirmed_flush;
}

/*
 * Asks the pipeline's worker to stop where it leaves nothing to re-deliver
 * (everything acknowledged checkpointed, nothing in flight) and waits until
 * it has exited, so that whatever commits after the caller returns is
 * handled by a worker that reads the caller's changes.  Until this
 * transaction ends the slot stays held: no worker starts, not even one a
 * sync of the rows as they were before the change made runnable (review
 * rv-dest7sql: such a worker streamed past an added destination's
 * checkpoint without it); the end releases it and a sync follows.  A worker
 * reading an initial snapshot, whose progress is durable per shard, is
 * terminated instead.
 */
void
replicant_api_xact_stop_worker_and_wait(int32 pipeline_id)
{
	MemoryContext old;

	resync_on_abort = true;
	register_xact_callback();
	old = MemoryContextSwitchTo(TopMemoryContext);
	held_pipelines = lappend_int(held_pipelines, pipeline_id);
	MemoryContextSwitchTo(old);
	for (;;)
	{
		ReplicantPipelineSlot *slot;
		pid_t pid = 0;
		bool snapshotting = false;

		LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
		slot = replicant_shmem_find(MyDatabaseId, pipeline_id);
		if (slot)
		{
			slot->runnable = false;
			slot->held = true;
			pid = slot->pid;
			if (pid != 0)
			{
				slot->stop_requested = true;
				snapshotting = (replicant_shmem_state(slot, NULL) == REPLICANT_STATE_SNAPSHOTTING);
				if (slot->latch)
					SetLatch(slot->latch);
			}
		}
		LWLockRelease(replicant_shmem->lock);
		if (pid == 0)
			break;
		if (snapshotting)
			kill(pid, SIGTERM);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Stops the pipeline's worker so its slot can be dropped.  Until this
 * transaction ends the slot stays marked dropping: a sync that read the
 * row before the delete commits cannot make it runnable again, and neither
 * the launcher nor the worker starts it.  An abort clears the mark and
 * re-syncs.
 */
void
replicant_api_xact_stop_worker_for_drop(int32 pipeline_id)
{
	ReplicantPipelineSlot *slot;
	pid_t pid = 0;
	MemoryContext old;

	register_xact_callback();
	old = MemoryContextSwitchTo(TopMemoryContext);
	dropping_pipelines = lappend_int(dropping_pipelines, pipeline_id);
	MemoryContextSwitchTo(old);
	resync_on_abort = true;
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot = replicant_shmem_find(MyDatabaseId, pipeline_id);
	if (slot)
	{
		slot->runnable = false;
		slot->dropping = true;
		pid = slot->pid;
	}
	LWLockRelease(replicant_shmem->lock);
	if (pid != 0)
		kill(pid, SIGTERM);
}

/* The transaction ended: the pipelines it held may run again, once a sync says so. */
static void
release_held(void)
{
	ListCell *lc;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	foreach(lc, held_pipelines)
	{
		ReplicantPipelineSlot *slot = replicant_shmem_find(MyDatabaseId, lfirst_int(lc));

		if (slot)
			slot->held = false;
	}
	LWLockRelease(replicant_shmem->lock);
	list_free(held_pipelines);
	held_pipelines = NIL;
	replicant_shmem_request_sync(MyDatabaseId);
}

/* drop_pipeline failed: the pipelines it was dropping may run again. */
static void
clear_dropping(void)
{
	ReplicantPipelineSlot *slot;
	ListCell *lc;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	foreach(lc, dropping_pipelines)
	{
		slot = replicant_shmem_find(MyDatabaseId, lfirst_int(lc));
		if (slot)
			slot->dropping = false;
	}
	LWLockRelease(replicant_shmem->lock);
}

void
replicant_api_xact_resume_at_commit(int32 pipeline_id, int32 destination_id)
{
	Resumed *resumed = MemoryContextAlloc(TopMemoryContext, sizeof(Resumed));
	MemoryContext old;

	register_xact_callback();
	resumed->pipeline_id = pipeline_id;
	resumed->destination_id = destination_id;
	old = MemoryContextSwitchTo(TopMemoryContext);
	resumed_at_commit = lappend(resumed_at_commit, resumed);
	MemoryContextSwitchTo(old);
}
