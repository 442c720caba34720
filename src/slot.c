/*
 * slot.c
 *		Pipelines' logical replication slots.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "plugin_gate.h"
#include "replicant.h"
#include "slot.h"

/* How long drop_pipeline waits for the worker it stopped to let go of the slot. */
#define SLOT_DROP_WAIT_MS 60000

LogicalDecodingContext *
replicant_slot_create(const char *name, bool failover, bool need_full_snapshot)
{
	LogicalDecodingContext *volatile ctx = NULL;

	REPLICANT_SLOT_CREATE(name, RS_EPHEMERAL, failover);
	/* create_pipeline's backend goes on after an error: expect nothing then. */
	replicant_plugin_gate_open(true);
	PG_TRY();
	{
		ctx = CreateInitDecodingContext("replicant", NIL, need_full_snapshot,
										InvalidXLogRecPtr, REPLICANT_LOCAL_WAL_ROUTINE,
										NULL, NULL, NULL);
	}
	PG_FINALLY();
	{
		replicant_plugin_gate_open(false);
	}
	PG_END_TRY();
	DecodingContextFindStartpoint(ctx);
	return ctx;
}

/*
 * Whether the slot is one replicant's worker may decode: a logical slot of
 * this database whose output plugin is replicant's.
 */
static bool
slot_is_ours(ReplicationSlot *slot)
{
	bool ours;

	/* The plugin is written, under the mutex, just after the slot is made. */
	SpinLockAcquire(&slot->mutex);
	ours = SlotIsLogical(slot) && slot->data.database == MyDatabaseId &&
		   strcmp(NameStr(slot->data.plugin), "replicant") == 0;
	SpinLockRelease(&slot->mutex);
	return ours;
}

ReplicantSlotOwner
replicant_slot_owner(const char *name)
{
	ReplicationSlot *slot;
	ReplicantSlotOwner owner = REPLICANT_SLOT_MISSING;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(name, false);
	if (slot != NULL)
		owner = slot_is_ours(slot) ? REPLICANT_SLOT_OURS : REPLICANT_SLOT_FOREIGN;
	LWLockRelease(ReplicationSlotControlLock);
	return owner;
}

char *
replicant_slot_foreign_reason(const char *name)
{
	return psprintf("replication slot \"%s\" is not this pipeline's: it belongs to another database or output plugin, so replicant neither decodes nor drops it", name);
}

XLogRecPtr
replicant_slot_confirmed_flush(const char *name)
{
	ReplicationSlot *slot;
	XLogRecPtr lsn = InvalidXLogRecPtr;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(name, false);
	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		lsn = slot->data.confirmed_flush;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);
	return lsn;
}

char *
replicant_slot_acquire(const char *name)
{
	const char *invalidation;

	switch (replicant_slot_owner(name))
	{
		case REPLICANT_SLOT_MISSING:
			return psprintf("replication slot \"%s\" does not exist (a promoted standby has it only as a failover slot): recreate the pipeline with a snapshot", name);
		case REPLICANT_SLOT_FOREIGN:
			return replicant_slot_foreign_reason(name);
		case REPLICANT_SLOT_OURS:
			break;
	}

	REPLICANT_SLOT_ACQUIRE(name, true);
	/* Dropped and made again by someone else since the look: look again. */
	if (!slot_is_ours(MyReplicationSlot))
	{
		ReplicationSlotRelease();
		return replicant_slot_foreign_reason(name);
	}

	SpinLockAcquire(&MyReplicationSlot->mutex);
	invalidation = replicant_slot_invalidation(MyReplicationSlot);
	SpinLockRelease(&MyReplicationSlot->mutex);
	if (invalidation == NULL)
		return NULL;
	ReplicationSlotRelease();
	if (strcmp(invalidation, "wal_removed") == 0)
		return psprintf("replication slot \"%s\" was invalidated because the WAL it needed was removed", name);
	return psprintf("replication slot \"%s\" was invalidated (invalidation_reason %s)", name, invalidation);
}

/* The process holding the slot, or 0. */
static pid_t
slot_holder(const char *name)
{
	ReplicationSlot *slot;
	pid_t pid = 0;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(name, false);
	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		pid = slot->active_pid;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);
	return pid;
}

bool
replicant_slot_drop(const char *name)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SLOT_DROP_WAIT_MS);
	pid_t holder;

	if (replicant_slot_owner(name) != REPLICANT_SLOT_OURS)
		return false;

	/* Waits, for a while, for a worker still holding it to let go. */
	while ((holder = slot_holder(name)) != 0)
	{
		if (GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("replication slot \"%s\" is still in use by process %d", name, (int) holder),
					 errhint("Try again once that process has exited.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	/*
	 * Without waiting: a process that took it meanwhile makes this an
	 * error, never a wait without end.  Only a role that may drop any slot
	 * (REPLICATION) could replace it in between.
	 */
	ReplicationSlotDrop(name, true);
	return true;
}

int
replicant_slot_free_count(void)
{
	int free_slots = 0;
	int i;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (i = 0; i < max_replication_slots; i++)
		free_slots += ReplicationSlotCtl->replication_slots[i].in_use ? 0 : 1;
	LWLockRelease(ReplicationSlotControlLock);
	return free_slots;
}

bool
replicant_slot_any_active(Oid dboid, bool ours)
{
	bool active = false;
	int i;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (i = 0; i < max_replication_slots; i++)
	{
		ReplicationSlot *s = &ReplicationSlotCtl->replication_slots[i];

		active |= (s->in_use && s->active_pid != 0 && s->data.database == dboid &&
				   (strcmp(NameStr(s->data.plugin), "replicant") == 0) == ours);
	}
	LWLockRelease(ReplicationSlotControlLock);
	return active;
}

List *
replicant_slot_list_inactive(void)
{
	List *names = NIL;
	int i;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (i = 0; i < max_replication_slots; i++)
	{
		ReplicationSlot *s = &ReplicationSlotCtl->replication_slots[i];

		/* Only slots decoded by replicant's plugin: others are not ours. */
		if (s->in_use && s->active_pid == 0 &&
			s->data.database == MyDatabaseId &&
			strcmp(NameStr(s->data.plugin), "replicant") == 0 &&
			strncmp(NameStr(s->data.name), REPLICANT_SLOT_PREFIX,
					strlen(REPLICANT_SLOT_PREFIX)) == 0)
			names = lappend(names, pstrdup(NameStr(s->data.name)));
	}
	LWLockRelease(ReplicationSlotControlLock);
	return names;
}
