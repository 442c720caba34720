/*
 * shmem.c
 *		Shared memory for replicant: the pipeline slot array, the launcher's
 *		mailbox and the commit-time nudge.
 *
 * Each slot mirrors one pipeline row of one database (written by that
 * database's sync worker) and carries the live state of its worker (written
 * by the worker).  Everything is protected by one LWLock; the only lock-free
 * access is the commit nudge, which tolerates stale reads.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_extension_d.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "event_log.h"
#include "shmem.h"

ReplicantShmem *replicant_shmem = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static object_access_hook_type prev_object_access_hook = NULL;

/* Backend-local: does this transaction ask for a sync, did it write? */
static bool sync_pending_at_commit = false;
static bool xact_wrote = false;

/* The slot this process reports its phase in (a pipeline's worker). */
static ReplicantPipelineSlot *own_slot = NULL;

static Size
replicant_shmem_size(void)
{
	return add_size(offsetof(ReplicantShmem, slots),
					mul_size(replicant_max_pipelines,
							 sizeof(ReplicantPipelineSlot)));
}

static void
replicant_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(replicant_shmem_size());
	RequestNamedLWLockTranche("replicant", 1);
}

static void
replicant_shmem_startup(void)
{
	bool found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	replicant_shmem = ShmemInitStruct("replicant", replicant_shmem_size(), &found);
	if (!found)
	{
		int i;

		memset(replicant_shmem, 0, replicant_shmem_size());
		replicant_shmem->lock = &(GetNamedLWLockTranche("replicant"))->lock;
		replicant_shmem->rescan_all = true;
		for (i = 0; i < replicant_max_pipelines; i++)
		{
			pg_atomic_init_u32(&replicant_shmem->slots[i].nudged, 0);
			pg_atomic_init_u32(&replicant_shmem->slots[i].shard_failures, 0);
			pg_atomic_init_u32(&replicant_shmem->slots[i].snapshot_stale, 0);
			pg_atomic_init_u32(&replicant_shmem->slots[i].checkpoint_wanted, 0);
			pg_atomic_init_u32(&replicant_shmem->slots[i].retry_requests, 0);
			ConditionVariableInit(&replicant_shmem->slots[i].delivered_cv);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Wakes the workers of this database after a transaction that wrote
 * committed, so new WAL is decoded at once instead of at the next timeout.
 * The "nudged" flag coalesces wake-ups: one SetLatch per worker cycle at
 * most.  An asynchronous commit wakes no one: a worker decodes only flushed
 * WAL, so it would find nothing new, and under a stream of such commits it
 * would spin; its flush poll (worker.c) reads the WAL once flushed.
 */
static void
nudge_workers(void)
{
	bool flush_checked = false;
	int i;

	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];
		Latch *latch = slot->latch;

		/* A worker's own checkpoint commit is no news to it. */
		if (latch == NULL || latch == MyLatch || slot->dboid != MyDatabaseId ||
			pg_atomic_read_u32(&slot->nudged) != 0)
			continue;
		/* Asked only when a worker would be woken: it takes a spinlock. */
		if (!flush_checked && XactLastCommitEnd > GetFlushRecPtr(NULL))
			return;
		flush_checked = true;
		if (pg_atomic_exchange_u32(&slot->nudged, 1) == 0)
			SetLatch(latch);
	}
}

/*
 * Nudges the workers at the commit of a transaction that wrote, and
 * delivers sync requests made by the SQL API, only once committed.
 */
static void
replicant_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			xact_wrote = TransactionIdIsValid(GetTopTransactionIdIfAny());
			break;
		case XACT_EVENT_COMMIT:
			if (sync_pending_at_commit)
				replicant_shmem_request_sync(MyDatabaseId);
			sync_pending_at_commit = false;
			if (xact_wrote && replicant_shmem != NULL)
				nudge_workers();
			xact_wrote = false;
			break;
		case XACT_EVENT_ABORT:
			sync_pending_at_commit = false;
			xact_wrote = false;
			break;
		default:
			break;
	}
}

/*
 * DROP EXTENSION replicant takes the pipelines with it: have this database
 * re-read at commit, so that their workers stop and their slots are dropped
 * now rather than at the next server start.
 */
static void
replicant_object_access(ObjectAccessType access, Oid classId, Oid objectId,
						int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == ExtensionRelationId &&
		objectId == get_extension_oid("replicant", true))
		replicant_shmem_request_sync_at_commit();
}

void
replicant_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = replicant_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = replicant_shmem_startup;
	RegisterXactCallback(replicant_xact_callback, NULL);
	prev_object_access_hook = object_access_hook;
	object_access_hook = replicant_object_access;
}

bool
replicant_shmem_ready(void)
{
	return replicant_shmem != NULL;
}

void
replicant_shmem_request_sync(Oid dboid)
{
	Latch *latch;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < replicant_shmem->ndirty; i++)
		if (replicant_shmem->dirty_dbs[i] == dboid)
			break;
	if (i == replicant_shmem->ndirty)
	{
		if (replicant_shmem->ndirty < REPLICANT_MAX_DIRTY_DBS)
			replicant_shmem->dirty_dbs[replicant_shmem->ndirty++] = dboid;
		else
			replicant_shmem->rescan_all = true;
	}
	latch = replicant_shmem->launcher_latch;
	LWLockRelease(replicant_shmem->lock);

	if (latch)
		SetLatch(latch);
}

void
replicant_shmem_request_sync_at_commit(void)
{
	sync_pending_at_commit = true;
}

ReplicantPipelineSlot *
replicant_shmem_find(Oid dboid, int32 pipeline_id)
{
	int i;

	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (slot->in_use && slot->dboid == dboid &&
			slot->pipeline_id == pipeline_id)
			return slot;
	}
	return NULL;
}

void
replicant_shmem_set_state(ReplicantPipelineSlot *slot, ReplicantWorkerState state)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	replicant_shmem_set_state_locked(slot, state);
	LWLockRelease(replicant_shmem->lock);
}

void
replicant_shmem_set_state_locked(ReplicantPipelineSlot *slot, ReplicantWorkerState state)
{
	Assert(LWLockHeldByMeInMode(replicant_shmem->lock, LW_EXCLUSIVE));
	for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
		slot->destinations[i].state = state;
}

/* Worse states rank higher: the order replicant.status rolls states up in. */
static int
state_rank(ReplicantWorkerState state)
{
	switch (state)
	{
		case REPLICANT_STATE_HALTED:
			return 5;
		case REPLICANT_STATE_RETRYING:
			return 4;
		case REPLICANT_STATE_BEHIND:
			return 3;
		case REPLICANT_STATE_STARTING:
			return 2;
		case REPLICANT_STATE_SNAPSHOTTING:
			return 1;
		case REPLICANT_STATE_STREAMING:
			return 0;
	}
	return 2;
}

ReplicantWorkerState
replicant_shmem_state(const ReplicantPipelineSlot *slot, int *index)
{
	int n = replicant_shmem_ndestinations(slot);
	int worst = 0;

	/* One that gave its hold on the slot up is gone for good: the others' state is the pipeline's. */
	while (worst < n - 1 && slot->destinations[worst].slot_released)
		worst++;
	for (int i = worst + 1; i < n; i++)
		if (!slot->destinations[i].slot_released &&
			state_rank(slot->destinations[i].state) > state_rank(slot->destinations[worst].state))
			worst = i;
	if (index)
		*index = worst;
	return slot->destinations[worst].state;
}

void
replicant_shmem_reset_destination(ReplicantDestinationSlot *destination)
{
	int32 id = destination->id;
	char name[NAMEDATALEN];

	strlcpy(name, destination->name, sizeof(name));
	memset(destination, 0, sizeof(*destination));
	destination->id = id;
	strlcpy(destination->name, name, sizeof(destination->name));
	destination->state = REPLICANT_STATE_STARTING;
}

void
replicant_shmem_set_own_slot(ReplicantPipelineSlot *slot)
{
	own_slot = slot;
}

ReplicantPhase
replicant_shmem_enter_phase(ReplicantPhase phase)
{
	ReplicantPhase left;

	if (own_slot == NULL)
		return phase;
	/* One aligned word, written by this process only: no lock. */
	left = own_slot->phase;
	own_slot->phase = phase;
	return left;
}

const char *
replicant_phase_name(ReplicantPhase phase)
{
	switch (phase)
	{
		case REPLICANT_PHASE_STARTING:
			return "start";
		case REPLICANT_PHASE_SNAPSHOT:
			return "snapshot";
		case REPLICANT_PHASE_DECODE:
			return "decode";
		case REPLICANT_PHASE_ENCODE:
			return "encode";
		case REPLICANT_PHASE_DELIVER:
			return "deliver";
		case REPLICANT_PHASE_CHECKPOINT:
			return "checkpoint";
		case REPLICANT_PHASE_SNAPSHOT_READ:
			return "snapshot read";
		case REPLICANT_PHASE_BACKFILL_READ:
			return "backfill read";
		case REPLICANT_PHASE_SYNC:
			return "sync";
	}
	return "start";
}

void
replicant_shmem_halt(ReplicantPipelineSlot *slot, const char *reason, bool record)
{
	Assert(LWLockHeldByMeInMode(replicant_shmem->lock, LW_EXCLUSIVE));
	Assert(reason != NULL && reason[0] != '\0');
	slot->runnable = false;
	if (replicant_shmem_state(slot, NULL) != REPLICANT_STATE_HALTED)
		replicant_log_state(slot->name, "halted", "reason", reason, REPLICANT_LOG_END);
	replicant_shmem_halt_destinations(slot, reason);
	if (record)
		strlcpy(slot->halt_request, reason, sizeof(slot->halt_request));
}

void
replicant_shmem_halt_destinations(ReplicantPipelineSlot *slot, const char *reason)
{
	Assert(LWLockHeldByMeInMode(replicant_shmem->lock, LW_EXCLUSIVE));
	for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
	{
		ReplicantDestinationSlot *destination = &slot->destinations[i];

		if (destination->state != REPLICANT_STATE_HALTED)
			destination->metrics.halts++;
		destination->state = REPLICANT_STATE_HALTED;
		strlcpy(destination->last_error, reason, sizeof(destination->last_error));
	}
}

void
replicant_shmem_mirror_destinations(ReplicantPipelineSlot *slot, int n, const int32 *ids,
									const char (*names)[NAMEDATALEN])
{
	int shown = replicant_shmem_ndestinations(slot);
	int i;

	Assert(LWLockHeldByMeInMode(replicant_shmem->lock, LW_EXCLUSIVE));
	Assert(n > 0 && n <= REPLICANT_MAX_DESTINATIONS);
	for (i = 0; i < n; i++)
	{
		ReplicantDestinationSlot *destination = &slot->destinations[i];

		if (destination->id != 0 && destination->id != ids[i])
			replicant_shmem_reset_destination(destination);
		destination->id = ids[i];
		strlcpy(destination->name, names[i], NAMEDATALEN);
	}
	for (; i < shown; i++)
	{
		slot->destinations[i].id = 0;
		slot->destinations[i].name[0] = '\0';
		replicant_shmem_reset_destination(&slot->destinations[i]);
	}
	slot->ndestinations = n;
}

ReplicantDestinationSlot *
replicant_shmem_destination(ReplicantPipelineSlot *slot, int32 id)
{
	for (int i = 0; i < slot->ndestinations; i++)
		if (slot->destinations[i].id == id)
			return &slot->destinations[i];
	/* 0.2.0's objects (id 0): index 0 stands for the pipeline's sink */
	return &slot->destinations[0];
}

void
replicant_shmem_note_progress(ReplicantPipelineSlot *slot)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->progress++;
	LWLockRelease(replicant_shmem->lock);
}

const char *
replicant_state_name(ReplicantWorkerState state)
{
	switch (state)
	{
		case REPLICANT_STATE_STARTING:
			return "starting";
		case REPLICANT_STATE_SNAPSHOTTING:
			return "snapshotting";
		case REPLICANT_STATE_STREAMING:
			return "streaming";
		case REPLICANT_STATE_RETRYING:
			return "retrying";
		case REPLICANT_STATE_HALTED:
			return "halted";
		case REPLICANT_STATE_BEHIND:
			return "behind";
	}
	return "starting";
}
