/*
 * compat.h
 *		Every PG_VERSION_NUM difference replicant cares about, and nothing else.
 */
#ifndef REPLICANT_COMPAT_H
#define REPLICANT_COMPAT_H

#include "catalog/pg_attribute.h"
#include "replication/message.h"
#include "replication/reorderbuffer.h"
#include "replication/slot.h"

/*
 * PG18 replaced pg_attribute_noreturn() after a declaration by the
 * pg_noreturn specifier before it; GCC's attribute works in that place too.
 */
#if PG_VERSION_NUM >= 180000
#define REPLICANT_NORETURN pg_noreturn
#else
#define REPLICANT_NORETURN pg_attribute_noreturn()
#endif

/* PG17 made the tuples of a reorder buffer change plain HeapTuples. */
#if PG_VERSION_NUM >= 170000
#define REPLICANT_CHANGE_NEWTUPLE(change) ((change)->data.tp.newtuple)
#define REPLICANT_CHANGE_OLDTUPLE(change) ((change)->data.tp.oldtuple)
#else
#define REPLICANT_CHANGE_NEWTUPLE(change) \
	((change)->data.tp.newtuple ? &(change)->data.tp.newtuple->tuple : NULL)
#define REPLICANT_CHANGE_OLDTUPLE(change) \
	((change)->data.tp.oldtuple ? &(change)->data.tp.oldtuple->tuple : NULL)
#endif

/*
 * PG17 added failover slots, which sync_replication_slots copies to physical
 * standbys, and the synced flag that only the slot sync worker sets.
 */
#if PG_VERSION_NUM >= 170000
#define REPLICANT_HAVE_FAILOVER_SLOTS true
#define REPLICANT_SLOT_CREATE(name, persistency, failover) \
	ReplicationSlotCreate((name), true, (persistency), false, (failover), false)
#else
#define REPLICANT_HAVE_FAILOVER_SLOTS false
#define REPLICANT_SLOT_CREATE(name, persistency, failover) \
	(AssertMacro(!(failover)), ReplicationSlotCreate((name), true, (persistency), false))
#endif

/*
 * PG17: a failover slot must not move past what the physical standbys in
 * synchronized_standby_slots have received, or a promoted standby would lack
 * changes the sink already has.  This waits as pgoutput's walsender does; it
 * returns at once for a slot without failover or with no such standbys.
 */
static inline void
replicant_wait_for_standby_confirmation(XLogRecPtr lsn)
{
#if PG_VERSION_NUM >= 170000
	WaitForStandbyConfirmation(lsn);
#endif
}

/*
 * The same without waiting: whether those standbys have received lsn (true
 * for the acquired slot without failover, or before 17).  What a standby
 * syncs of the slot is then backed by what it has of the primary's WAL.
 */
static inline bool
replicant_standbys_have(XLogRecPtr lsn)
{
#if PG_VERSION_NUM >= 170000
	return !MyReplicationSlot->data.failover || StandbySlotsHaveCaughtup(lsn, DEBUG1);
#else
	return true;
#endif
}

/* Whether the acquired slot is a failover slot, which standbys sync from memory. */
static inline bool
replicant_slot_is_failover(void)
{
#if PG_VERSION_NUM >= 170000
	return MyReplicationSlot->data.failover;
#else
	return false;
#endif
}

/* PG18 added error_if_invalid to ReplicationSlotAcquire. */
#if PG_VERSION_NUM >= 180000
#define REPLICANT_SLOT_ACQUIRE(name, nowait) ReplicationSlotAcquire((name), (nowait), false)
#else
#define REPLICANT_SLOT_ACQUIRE(name, nowait) ReplicationSlotAcquire((name), (nowait))
#endif

/*
 * Drops the slot this process acquired.  PG17 exports
 * ReplicationSlotDropAcquired, which ReplicationSlotDrop calls once it has
 * acquired the slot by name.  PG15 keeps it static, but releasing an
 * ephemeral slot drops it with it (as after a failed slot creation), so the
 * acquired slot is made ephemeral, in memory only, and released: a crash in
 * between leaves the slot as it was on disk.
 */
#if PG_VERSION_NUM >= 170000
#define REPLICANT_SLOT_DROP_ACQUIRED() ReplicationSlotDropAcquired()
#define REPLICANT_SLOT_SYNCED(slot) ((slot)->data.synced)
#else
#define REPLICANT_SLOT_DROP_ACQUIRED() \
	do \
	{ \
		SpinLockAcquire(&MyReplicationSlot->mutex); \
		MyReplicationSlot->data.persistency = RS_EPHEMERAL; \
		SpinLockRelease(&MyReplicationSlot->mutex); \
		ReplicationSlotRelease(); \
	} while (0)
#define REPLICANT_SLOT_SYNCED(slot) false
#endif

/*
 * PG17 tracks a WaitEventSet with a resource owner instead of allocating it
 * in a memory context.  The set made here outlives transactions (no owner
 * on PG17, the given context before); the caller frees it with
 * FreeWaitEventSet.
 */
#if PG_VERSION_NUM >= 170000
#define REPLICANT_CREATE_WAIT_EVENT_SET(context, nevents) \
	CreateWaitEventSet(NULL, (nevents))
#else
#define REPLICANT_CREATE_WAIT_EVENT_SET(context, nevents) \
	CreateWaitEventSet((context), (nevents))
#endif

/*
 * PG18 added virtual generated columns: computed when read, never stored,
 * so neither decoding nor pgoutput has a value for them.
 */
#if PG_VERSION_NUM >= 180000
#define REPLICANT_ATT_IS_VIRTUAL(att) ((att)->attgenerated == ATTRIBUTE_GENERATED_VIRTUAL)
#else
#define REPLICANT_ATT_IS_VIRTUAL(att) false
#endif

/*
 * PG18's publish_generated_columns: a publication without a column list
 * publishes stored generated columns only when it says "stored".  Earlier
 * servers never publish generated columns.
 */
#if PG_VERSION_NUM >= 180000
#define REPLICANT_PUB_PUBLISHES_STORED_GENERATED(pub) \
	((pub)->pubgencols_type == PUBLISH_GENCOLS_STORED)
#else
#define REPLICANT_PUB_PUBLISHES_STORED_GENERATED(pub) false
#endif

/* PG18 types the binary side of pg_b64_encode and pg_b64_decode as uint8. */
#if PG_VERSION_NUM >= 180000
typedef uint8 ReplicantB64Byte;
#else
typedef char ReplicantB64Byte;
#endif

/* PG17 added a flush flag; a watermark needs no flush of its own. */
#if PG_VERSION_NUM >= 170000
#define REPLICANT_LOG_LOGICAL_MESSAGE(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional), false)
#else
#define REPLICANT_LOG_LOGICAL_MESSAGE(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional))
#endif

/* PG18 asks whether a deferrable primary key will do; a key index must not be. */
#if PG_VERSION_NUM >= 180000
#define REPLICANT_PRIMARY_KEY_INDEX(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define REPLICANT_PRIMARY_KEY_INDEX(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * Why a slot was invalidated, as pg_replication_slots.invalidation_reason
 * names it ("wal_removed", ...), or NULL while it is valid.  PG15 records
 * only the LSN at which the WAL it needed went away.  Caller holds the
 * slot's mutex.
 */
static inline const char *
replicant_slot_invalidation(ReplicationSlot *slot)
{
#if PG_VERSION_NUM >= 180000
	if (slot->data.invalidated == RS_INVAL_NONE)
		return NULL;
	return GetSlotInvalidationCauseName(slot->data.invalidated);
#elif PG_VERSION_NUM >= 170000
	if (slot->data.invalidated == RS_INVAL_NONE)
		return NULL;
	return SlotInvalidationCauses[slot->data.invalidated];
#else
	if (XLogRecPtrIsInvalid(slot->data.invalidated_at) ||
		!XLogRecPtrIsInvalid(slot->data.restart_lsn))
		return NULL;
	return "wal_removed";
#endif
}

#endif /* REPLICANT_COMPAT_H */
