/*
 * slot.c
 *		Pipelines' logical replication slots (their lifecycle: slot_health.c).
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm), §3 (the exported snapshot).
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "fault.h"
#include "plugin_gate.h"
#include "replicant.h"
#include "slot.h"

/* How long drop_pipeline waits for the worker it stopped to let go of the slot. */
#define SLOT_DROP_WAIT_MS 60000

/* The new slot's decoding context, through replicant's plugin gate. */
static LogicalDecodingContext *
init_decoding_context(bool need_full_snapshot)
{
	LogicalDecodingContext *volatile ctx = NULL;

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
	return ctx;
}

LogicalDecodingContext *
replicant_slot_create(const char *name, bool failover, bool need_full_snapshot)
{
	LogicalDecodingContext *ctx;

	REPLICANT_SLOT_CREATE(name, RS_EPHEMERAL, failover);
	ctx = init_decoding_context(need_full_snapshot);
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

bool
replicant_slot_acquire_ours(const char *name)
{
	REPLICANT_SLOT_ACQUIRE(name, true);
	/* Dropped and made again by someone else since the look: look again. */
	if (slot_is_ours(MyReplicationSlot))
		return true;
	ReplicationSlotRelease();
	return false;
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

/* Waits, for a minute at most (then an error), for the slot's holder to let go. */
static void
wait_for_holder(const char *name)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SLOT_DROP_WAIT_MS);
	pid_t holder;

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
}

/*
 * Acquires the slot, or returns false if it went away meanwhile: a slot the
 * worker was still creating (ephemeral) goes with the worker that exits.
 */
static bool
acquire_unless_gone(const char *name, bool nowait)
{
	MemoryContext context = CurrentMemoryContext;
	volatile bool acquired = true;

	PG_TRY();
	{
		REPLICANT_SLOT_ACQUIRE(name, nowait);
	}
	PG_CATCH();
	{
		ErrorData *edata;

		MemoryContextSwitchTo(context);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_UNDEFINED_OBJECT ||
			replicant_slot_owner(name) != REPLICANT_SLOT_MISSING)
			PG_RE_THROW();
		FlushErrorState();
		acquired = false;
	}
	PG_END_TRY();
	return acquired;
}

ReplicantSlotOwner
replicant_slot_drop(const char *name, bool nowait)
{
	ReplicantSlotOwner owner = replicant_slot_owner(name);

	if (owner != REPLICANT_SLOT_OURS)
		return owner;
	replicant_fault("slot_drop");
	if (!nowait)
		wait_for_holder(name);

	/*
	 * Looked at by name, the slot may have been dropped and made again by
	 * someone with REPLICATION since: it is looked at again once acquired,
	 * and dropped as acquired, which nobody else can drop or replace.  It
	 * is acquired without waiting: a process that took it after the wait
	 * above makes this an error, never a wait without end.
	 */
	if (!acquire_unless_gone(name, true))
		return REPLICANT_SLOT_MISSING;
	if (!slot_is_ours(MyReplicationSlot))
	{
		ReplicationSlotRelease();
		return REPLICANT_SLOT_FOREIGN;
	}
	/* ReplicationSlotDrop's rule: the slot sync worker keeps a standby's copy. */
	if (RecoveryInProgress() && REPLICANT_SLOT_SYNCED(MyReplicationSlot))
	{
		ReplicationSlotRelease();
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot drop replication slot \"%s\"", name),
				 errdetail("This replication slot is being synchronized from the primary server.")));
	}
	REPLICANT_SLOT_DROP_ACQUIRED();
	return REPLICANT_SLOT_OURS;
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

/*
 * Whether name is one replicant gives a pipeline's slot: "replicant_<name>"
 * (before 0.3.0) or "replicant<database OID>_<name>".
 */
static bool
slot_name_is_replicants(const char *name)
{
	const char *p = name + strlen(REPLICANT_SLOT_PREFIX);

	if (strncmp(name, REPLICANT_SLOT_PREFIX, strlen(REPLICANT_SLOT_PREFIX)) != 0)
		return false;
	while (*p >= '0' && *p <= '9')
		p++;
	return *p == '_';
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
			slot_name_is_replicants(NameStr(s->data.name)))
			names = lappend(names, pstrdup(NameStr(s->data.name)));
	}
	LWLockRelease(ReplicationSlotControlLock);
	return names;
}
