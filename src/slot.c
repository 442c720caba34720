/*
 * slot.c
 *		Pipelines' logical replication slots.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "replication/slot.h"

#include "compat.h"
#include "output_plugin.h"
#include "replicant.h"
#include "slot.h"

LogicalDecodingContext *
replicant_slot_create(const char *name, bool failover, bool need_full_snapshot)
{
	LogicalDecodingContext *volatile ctx = NULL;

	REPLICANT_SLOT_CREATE(name, RS_EPHEMERAL, failover);
	/* create_pipeline's backend goes on after an error: expect nothing then. */
	replicant_output_plugin_expect_worker(true);
	PG_TRY();
	{
		ctx = CreateInitDecodingContext("replicant", NIL, need_full_snapshot,
										InvalidXLogRecPtr, REPLICANT_LOCAL_WAL_ROUTINE,
										NULL, NULL, NULL);
	}
	PG_FINALLY();
	{
		replicant_output_plugin_expect_worker(false);
	}
	PG_END_TRY();
	DecodingContextFindStartpoint(ctx);
	return ctx;
}

bool
replicant_slot_exists(const char *name)
{
	bool exists;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	exists = SearchNamedReplicationSlot(name, false) != NULL;
	LWLockRelease(ReplicationSlotControlLock);
	return exists;
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

	if (!replicant_slot_exists(name))
		return psprintf("replication slot \"%s\" does not exist (a promoted standby has it only as a failover slot): recreate the pipeline with a snapshot", name);

	REPLICANT_SLOT_ACQUIRE(name, true);

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
