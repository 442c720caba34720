/*
 * slot_position.c
 *		How far replicant confirmed a pipeline's slot.
 *
 * A role with REPLICATION may pg_replication_slot_advance() a pipeline's
 * slot while no worker holds it (disabled, halted, restarting): fast
 * forwarding never loads the output plugin, so nothing refuses it, and a
 * worker that went on from the slot's new confirmed_flush would skip,
 * silently, every change in between.  So replicant records how far it may
 * confirm the slot before it does: a committed checkpoint records its end
 * (replicant.checkpoints), and a position up to which WAL delivered nothing
 * goes into replicant.slot_positions, as does a new slot's consistent
 * point.  The slot is confirmed only up to a record that is flushed, so
 * that not even a crash leaves the slot beyond every record.  A worker that
 * finds its slot beyond them halts with a reason that says changes may be
 * lost; resume_pipeline accepts the gap up to exactly that position.
 *
 * A record costs a transaction: WAL that delivers nothing is recorded at
 * most once a second, and only when it holds more than the pipeline's own
 * last record (and the standby snapshot or checkpoint record that follows
 * it), so an idle pipeline writes nothing.  Past its own last record, which
 * a record would only follow with another, the slot is confirmed in memory
 * alone while the worker holds it: whatever saves the slot or lets it go
 * finds it taken back to the record first, so that no restart, crash or
 * failover finds it beyond every record.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/lsyscache.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "checkpoint.h"
#include "compat.h"
#include "slot_position.h"
#include "waiver.h"

/* At most one record a second; WAL after it this small is not worth one. */
#define RECORD_INTERVAL_MS 1000
#define OWN_NOISE_BYTES 1024

/* Where settle() takes the slot back to, when confirm_own() moved it past. */
static ReplicationSlot *own_slot = NULL;
static XLogRecPtr own_settle_to = InvalidXLogRecPtr;

/* Before the slot is let go (ReplicationSlotShmemExit runs after this). */
static void
settle_at_exit_callback(int code, Datum arg)
{
	replicant_slot_position_settle();
}

/* Whether the SQL objects are 0.3.0's (ALTER EXTENSION UPDATE done). */
static bool
have_positions(void)
{
	return OidIsValid(get_relname_relid("slot_positions",
										get_namespace_oid("replicant", false)));
}

/* Upserts the pipeline's position; the caller is connected to SPI. */
static void
record(int32 pipeline_id, XLogRecPtr lsn)
{
	Oid argtypes[2] = {INT4OID, PG_LSNOID};
	Datum args[2] = {Int32GetDatum(pipeline_id), LSNGetDatum(lsn)};

	if (SPI_execute_with_args("INSERT INTO replicant.slot_positions (pipeline_id, confirmed_lsn)"
							  " VALUES ($1, $2) ON CONFLICT (pipeline_id)"
							  " DO UPDATE SET confirmed_lsn = excluded.confirmed_lsn",
							  2, argtypes, args, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record the slot position of pipeline %d", pipeline_id);
}

/* The recorded position, or invalid; the caller is connected to SPI. */
static XLogRecPtr
read_recorded(int32 pipeline_id)
{
	Oid argtypes[1] = {INT4OID};
	Datum args[1] = {Int32GetDatum(pipeline_id)};
	bool isnull;

	if (SPI_execute_with_args("SELECT confirmed_lsn FROM replicant.slot_positions"
							  " WHERE pipeline_id OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the slot position of pipeline %d", pipeline_id);
	if (SPI_processed == 0)
		return InvalidXLogRecPtr;
	return DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

void
replicant_slot_position_create(int32 pipeline_id, XLogRecPtr lsn)
{
	if (have_positions())
		record(pipeline_id, lsn);
}

/* The value-free reason of a slot found moved from known to confirmed. */
static char *
moved_reason(const char *slot_name, XLogRecPtr known, XLogRecPtr confirmed)
{
	return psprintf("replication slot \"%s\" was moved from %X/%X to %X/%X by something other than this pipeline (such as pg_replication_slot_advance()): changes committed in between may be lost; replicant.resume_pipeline() accepts the gap",
					slot_name, LSN_FORMAT_ARGS(known), LSN_FORMAT_ARGS(confirmed));
}

char *
replicant_slot_position_start(ReplicantSlotPosition *pos, int32 pipeline_id,
							  const char *slot_name, XLogRecPtr confirmed,
							  XLogRecPtr checkpoint_end, XLogRecPtr created_at,
							  const List *waivers, char **cause)
{
	ReplicantCatalogAccess access;
	char *slot_cause = psprintf("%s:%X/%X", REPLICANT_WAIVER_SLOT, LSN_FORMAT_ARGS(confirmed));
	XLogRecPtr known;
	bool write;
	bool moved = false;

	memset(pos, 0, sizeof(ReplicantSlotPosition));
	pos->pipeline_id = pipeline_id;
	*cause = NULL;
	replicant_catalog_begin(&access);
	pos->kept = have_positions();
	if (!pos->kept)
	{
		replicant_catalog_end(&access);
		return NULL;
	}

	/*
	 * A slot this process created starts at its consistent point; one that
	 * has no record (its pipeline is older) where it is.
	 */
	known = XLogRecPtrIsInvalid(created_at) ? read_recorded(pipeline_id) : created_at;
	write = XLogRecPtrIsInvalid(known) || !XLogRecPtrIsInvalid(created_at);
	known = Max(XLogRecPtrIsInvalid(known) ? confirmed : known, checkpoint_end);
	if (confirmed > known && replicant_waiver_covers(waivers, slot_cause, InvalidXLogRecPtr))
	{
		/* The operator accepted the gap up to there. */
		known = confirmed;
		write = true;
	}
	moved = confirmed > known;
	if (write)
		record(pipeline_id, known);
	replicant_catalog_end(&access);
	if (moved)
	{
		*cause = slot_cause;
		return moved_reason(slot_name, known, confirmed);
	}
	/* What the slot may be confirmed to is on disk before it is. */
	replicant_checkpoint_make_durable();
	pos->durable = pos->recorded = known;
	pos->recorded_at = GetCurrentTimestamp();
	return NULL;
}

/*
 * Notes a position recorded by the commit this process made last, whose
 * WAL lies from own_start on.
 */
static void
note_recorded(ReplicantSlotPosition *pos, XLogRecPtr lsn, XLogRecPtr own_start)
{
	pos->recorded = lsn;
	pos->pending = lsn;
	pos->pending_end = XactLastCommitEnd;
	pos->own_start = own_start;
	pos->own_end = XactLastCommitEnd;
}

/*
 * Takes the pending record as durable once WAL is flushed past its commit
 * (and, for a failover slot, the synchronized standbys have it: a promoted
 * standby then has the record of any position it synced).
 */
static void
note_flushed(ReplicantSlotPosition *pos)
{
	if (XLogRecPtrIsInvalid(pos->pending) || GetFlushRecPtr(NULL) < pos->pending_end ||
		!replicant_standbys_have(pos->pending_end))
		return;
	pos->durable = Max(pos->durable, pos->pending);
	pos->pending = InvalidXLogRecPtr;
}

/*
 * Whether WAL up to lsn holds more than this process's own last record
 * and what is not worth one: something written between the read that
 * record covers and its write, or, after it, an important record (not
 * standby snapshots or segment switches) and more than a checkpoint's
 * few bytes.  Without that test each record would call for the next.
 */
static bool
worth_recording(ReplicantSlotPosition *pos, XLogRecPtr lsn)
{
	if (lsn <= pos->recorded)
		return false;
	if (XLogRecPtrIsInvalid(pos->own_end) || pos->own_start > pos->recorded)
		return true;
	return lsn > pos->own_end + OWN_NOISE_BYTES && GetLastImportantRecPtr() > pos->own_end;
}

XLogRecPtr
replicant_slot_position_allow(ReplicantSlotPosition *pos, XLogRecPtr lsn)
{
	XLogRecPtr checkpointed = replicant_checkpoint_floor();
	TimestampTz now;

	if (!pos->kept)
		return lsn;
	note_flushed(pos);
	/* A committed checkpoint records its end (what came between, the next record). */
	if (checkpointed > pos->recorded)
		note_recorded(pos, checkpointed, checkpointed);
	now = GetCurrentTimestamp();
	if (worth_recording(pos, lsn) &&
		TimestampDifferenceExceeds(pos->recorded_at, now, RECORD_INTERVAL_MS))
	{
		ReplicantCatalogAccess access;
		XLogRecPtr own_start = GetXLogInsertRecPtr();

		replicant_catalog_begin(&access);
		record(pos->pipeline_id, lsn);
		replicant_catalog_end(&access);
		note_flushed(pos);
		note_recorded(pos, lsn, own_start);
		pos->recorded_at = now;
	}
	note_flushed(pos);
	return Min(lsn, pos->durable);
}

void
replicant_slot_position_confirm_own(ReplicantSlotPosition *pos, XLogRecPtr confirmed,
									XLogRecPtr lsn)
{
	static bool settle_at_exit = false;

	if (!pos->kept || replicant_slot_is_failover())
		return;
	own_slot = MyReplicationSlot;
	own_settle_to = confirmed;
	/* Only once the record is flushed, and only over WAL not worth another. */
	if (lsn <= confirmed || confirmed < pos->durable || !XLogRecPtrIsInvalid(pos->pending) ||
		worth_recording(pos, lsn))
		return;
	if (!settle_at_exit)
	{
		before_shmem_exit(settle_at_exit_callback, (Datum) 0);
		settle_at_exit = true;
	}
	/*
	 * On disk it stays at the record: a checkpoint saves only a dirty slot.
	 * But one that saw it dirty before this save waits for it, then copies
	 * the slot as it is by then; CheckPointReplicationSlots holds the
	 * allocation lock shared across its loop, so holding it exclusively
	 * keeps every checkpoint out until the slot is clean and moved.
	 */
	LWLockAcquire(ReplicationSlotAllocationLock, LW_EXCLUSIVE);
	ReplicationSlotSave();
	SpinLockAcquire(&MyReplicationSlot->mutex);
	MyReplicationSlot->data.confirmed_flush = Max(MyReplicationSlot->data.confirmed_flush, lsn);
	SpinLockRelease(&MyReplicationSlot->mutex);
	LWLockRelease(ReplicationSlotAllocationLock);
}

void
replicant_slot_position_settle(void)
{
	if (own_slot == NULL || MyReplicationSlot != own_slot)
		return;
	SpinLockAcquire(&MyReplicationSlot->mutex);
	MyReplicationSlot->data.confirmed_flush =
		Min(MyReplicationSlot->data.confirmed_flush, own_settle_to);
	SpinLockRelease(&MyReplicationSlot->mutex);
	own_slot = NULL;
}
