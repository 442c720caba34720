/*
 * compat.h
 *		Every PG_VERSION_NUM difference replicant cares about, and nothing else.
 */
#ifndef REPLICANT_COMPAT_H
#define REPLICANT_COMPAT_H

#include "replication/reorderbuffer.h"

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

/* PG17 added failover and synced flags to ReplicationSlotCreate. */
#if PG_VERSION_NUM >= 170000
#define REPLICANT_SLOT_CREATE(name, persistency) \
	ReplicationSlotCreate((name), true, (persistency), false, false, false)
#else
#define REPLICANT_SLOT_CREATE(name, persistency) \
	ReplicationSlotCreate((name), true, (persistency), false)
#endif

/* PG18 added error_if_invalid to ReplicationSlotAcquire. */
#if PG_VERSION_NUM >= 180000
#define REPLICANT_SLOT_ACQUIRE(name, nowait) ReplicationSlotAcquire((name), (nowait), false)
#else
#define REPLICANT_SLOT_ACQUIRE(name, nowait) ReplicationSlotAcquire((name), (nowait))
#endif

/*
 * PG17 tracks a WaitEventSet with a resource owner instead of allocating it
 * in a memory context.  Either way the caller frees it with FreeWaitEventSet.
 */
#if PG_VERSION_NUM >= 170000
#define REPLICANT_CREATE_WAIT_EVENT_SET(nevents) \
	CreateWaitEventSet(CurrentResourceOwner, (nevents))
#else
#define REPLICANT_CREATE_WAIT_EVENT_SET(nevents) \
	CreateWaitEventSet(CurrentMemoryContext, (nevents))
#endif

#endif							/* REPLICANT_COMPAT_H */
