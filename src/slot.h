/*
 * slot.h
 *		Pipelines' logical replication slots: creation, lookup, acquiring,
 *		dropping, free slot count and the listing of slots that may be
 *		orphans.  Why a slot is lost, and what it retains: slot_health.h.
 */
#ifndef REPLICANT_SLOT_H
#define REPLICANT_SLOT_H

#include "access/xlogutils.h"
#include "nodes/pg_list.h"
#include "replication/logical.h"

/* WAL is read from this server's files, as pg_logical_slot_get_changes() does. */
#define REPLICANT_LOCAL_WAL_ROUTINE XL_ROUTINE(.page_read = read_local_xlog_page, \
											   .segment_open = wal_segment_open, \
											   .segment_close = wal_segment_close)

/*
 * Creates the ephemeral slot name (it becomes MyReplicationSlot) and
 * initialises it up to its consistent point, with a snapshot builder that
 * can export the snapshot of that point when need_full_snapshot.  The
 * caller persists the slot and frees the returned context.
 */
extern LogicalDecodingContext *replicant_slot_create(const char *name, bool failover,
													 bool need_full_snapshot);

/*
 * Slot names are cluster-wide: a slot of a pipeline's name may belong to
 * another database or be decoded by another plugin, and then it is not the
 * pipeline's to decode, adopt or drop.
 */
typedef enum ReplicantSlotOwner
{
	REPLICANT_SLOT_MISSING, /* no slot of that name */
	REPLICANT_SLOT_OURS,    /* logical, of this database, replicant's plugin */
	REPLICANT_SLOT_FOREIGN, /* anything else */
} ReplicantSlotOwner;

extern ReplicantSlotOwner replicant_slot_owner(const char *name);

/* The value-free halt reason for a pipeline whose slot name is foreign. */
extern char *replicant_slot_foreign_reason(const char *name);

/*
 * The slot's confirmed_flush, or InvalidXLogRecPtr when there is no such
 * slot.  Until the stream delivers, it is the slot's consistent point.
 */
extern XLogRecPtr replicant_slot_confirmed_flush(const char *name);

/*
 * Acquires the slot, which replicant_slot_owner found ours, as
 * MyReplicationSlot (an error if another process holds it or it is gone).
 * Returns false, holding nothing, if it is no longer ours.  The slot may be
 * invalidated (slot_health.c tells why).
 */
extern bool replicant_slot_acquire_ours(const char *name);

/*
 * Drops the slot if it is replicant's and of this database, waiting for a
 * process holding it to let go for a minute at most (then an error; at
 * once when nowait), and returns REPLICANT_SLOT_OURS; a slot of that name
 * that is not (REPLICANT_SLOT_FOREIGN, as it was when acquired) is left
 * alone, and REPLICANT_SLOT_MISSING means there was none.  Holds nothing
 * after an error.
 */
extern ReplicantSlotOwner replicant_slot_drop(const char *name, bool nowait);

/* Replication slots not in use, of max_replication_slots. */
extern int replicant_slot_free_count(void);

/*
 * Whether a logical slot of the database is in use that replicant's plugin
 * decodes (ours) or that another plugin does (not ours).
 */
extern bool replicant_slot_any_active(Oid dboid, bool ours);

/*
 * Names of this database's slots that replicant's plugin decodes, named
 * like a pipeline's ("replicant<database OID>_..." or "replicant_...") and
 * held by no process: those no pipeline owns are orphans.
 */
extern List *replicant_slot_list_inactive(void);

#endif /* REPLICANT_SLOT_H */
