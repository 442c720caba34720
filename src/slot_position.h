/*
 * slot_position.h
 *		How far replicant confirmed a pipeline's slot, so that a slot moved
 *		further by something else halts the pipeline instead of skipping
 *		changes silently.
 */
#ifndef REPLICANT_SLOT_POSITION_H
#define REPLICANT_SLOT_POSITION_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/* What a pipeline worker recorded, and may confirm to its slot. */
typedef struct ReplicantSlotPosition
{
	int32 pipeline_id;
	bool kept;              /* replicant.slot_positions exists (0.3.0's objects) */
	XLogRecPtr durable;     /* the furthest recorded position, its record flushed */
	XLogRecPtr pending;     /* a further one, its record maybe not flushed yet */
	XLogRecPtr pending_end; /* where the commit that recorded pending ends */
	XLogRecPtr recorded;    /* the furthest recorded one (durable or pending) */
	TimestampTz recorded_at;
	XLogRecPtr own_start; /* the WAL of the last record this process */
	XLogRecPtr own_end;   /* wrote (a checkpoint's, or here) */
} ReplicantSlotPosition;

/*
 * create_pipeline: records the position of the slot it just created, in
 * the caller's transaction (SPI, replicant's privileges).  Nothing under
 * the SQL objects of 0.2.0 and before.
 */
extern void replicant_slot_position_create(int32 pipeline_id, XLogRecPtr lsn);

/*
 * At the start of streaming, with the slot acquired: whether its
 * confirmed_flush is beyond every position the pipeline recorded (the
 * checkpoint's end, slot_positions), i.e. something else moved it.  Returns
 * NULL, having prepared pos, or a value-free halt reason and in *cause what
 * a resume accepts (the gap up to exactly that position; waivers as
 * replicant_waiver_load gave them).  created_at: the slot's consistent
 * point if this process created it, else invalid.  A pipeline that never
 * recorded a position (created before 0.3.0) takes the slot's as its first.
 * Call outside a transaction.
 */
extern char *replicant_slot_position_start(ReplicantSlotPosition *pos, int32 pipeline_id,
										   const char *slot_name, XLogRecPtr confirmed,
										   XLogRecPtr checkpoint_end, XLogRecPtr created_at,
										   const List *waivers, char **cause);

/*
 * The furthest position up to lsn that the slot may be confirmed to now:
 * recorded (by a committed checkpoint, or here) and that record flushed.
 * Everything before lsn must have been delivered or be unpublished; lsn is
 * recorded here, at most once a second, when the WAL up to it holds more
 * than the last record.  Call outside a transaction.
 */
extern XLogRecPtr replicant_slot_position_allow(ReplicantSlotPosition *pos, XLogRecPtr lsn);

/*
 * After confirming the slot to confirmed (what allow() gave): confirms it
 * further, to lsn, in memory only, when the WAL after the durable record
 * holds no more than the pipeline's own records (and what is not worth
 * one), so that an idle pipeline's slot reaches the end of WAL without a
 * record that would itself call for the next.  Only while this process
 * holds the slot, whose on-disk state stays at the record: the slot is
 * saved first, and taken back before it is saved again, before decoding
 * (which saves it when it finds a horizon at or below its position) and
 * before it is let go (replicant_slot_position_settle).  Never for a
 * failover slot, which standbys sync from memory.
 */
extern void replicant_slot_position_confirm_own(ReplicantSlotPosition *pos,
												XLogRecPtr confirmed, XLogRecPtr lsn);

/*
 * Takes the acquired slot back from where confirm_own() moved it to what
 * may be saved: before a save, before decoding, and when the process exits.
 */
extern void replicant_slot_position_settle(void);

#endif /* REPLICANT_SLOT_POSITION_H */
