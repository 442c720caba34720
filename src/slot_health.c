/*
 * slot_health.c
 *		A pipeline slot's lifecycle: a lost slot and why (dropped, missing
 *		after a promotion, foreign, or invalidated for any cause the server
 *		reports), the WAL a streaming pipeline's slot retains, the warning
 *		before it costs too much, and the pipeline's budget
 *		(max_retained_wal), past which the slot is given up.
 *
 * A slot the server invalidates while a worker holds it makes the server
 * terminate that worker first (InvalidatePossiblyObsoleteSlot): the next
 * run finds it invalidated here and halts, or resyncs (resync.c).  replicant.status computes the
 * same warning from pg_replication_slots (replicant--0.2.0--0.3.0.sql).
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "replication/slot.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "checkpoint.h"
#include "compat.h"
#include "destination.h"
#include "slot.h"
#include "slot_health.h"

/* While the warning lasts, the log hears of it this often. */
#define WARN_LOG_INTERVAL_MS (5 * 60 * 1000)

/* The pipeline whose slot this process holds while streaming, or NULL. */
static ReplicantPipeline *watched = NULL;

/*
 * After a resync that this process ended, where the stream began: until
 * the slot confirms past it, the stream is still decoding the WAL written
 * while the resync read the tables, which is no more the sink's doing than
 * what a caught-up slot retains, so the slot is not given up (the warning
 * still runs) unless the sink fails meanwhile.  Invalid otherwise.
 */
static XLogRecPtr stream_began = InvalidXLogRecPtr;
/* While slot losses are counted: where the stream must confirm to reset them. */
static XLogRecPtr losses_reset_at = InvalidXLogRecPtr;

/* When the warning was last logged; 0 while there is none. */
static TimestampTz warned_at = 0;

/* The value-free reason for a slot invalidated for cause (its name in pg_replication_slots). */
static char *
invalidated_reason(const char *name, const char *cause)
{
	if (strcmp(cause, "wal_removed") == 0)
		return psprintf("replication slot \"%s\" was invalidated because the WAL it needed was removed", name);
	if (strcmp(cause, "rows_removed") == 0)
		return psprintf("replication slot \"%s\" was invalidated because catalog rows it needed were removed", name);
	if (strcmp(cause, "wal_level_insufficient") == 0)
		return psprintf("replication slot \"%s\" was invalidated because wal_level on the primary server is lower than logical", name);
	if (strcmp(cause, "idle_timeout") == 0)
		return psprintf("replication slot \"%s\" was invalidated because it was inactive for longer than idle_replication_slot_timeout", name);
	return psprintf("replication slot \"%s\" was invalidated (invalidation_reason %s)", name, cause);
}

char *
replicant_slot_health_acquire(const char *name)
{
	const char *cause;

	switch (replicant_slot_owner(name))
	{
		case REPLICANT_SLOT_MISSING:
			return psprintf("replication slot \"%s\" does not exist (it was dropped, or this server is a promoted standby that had no failover copy of it)" REPLICANT_SLOT_MISSING_REMEDY, name);
		case REPLICANT_SLOT_FOREIGN:
			return replicant_slot_foreign_reason(name);
		case REPLICANT_SLOT_OURS:
			break;
	}
	if (!replicant_slot_acquire_ours(name))
		return replicant_slot_foreign_reason(name);

	SpinLockAcquire(&MyReplicationSlot->mutex);
	cause = replicant_slot_invalidation(MyReplicationSlot);
	SpinLockRelease(&MyReplicationSlot->mutex);
	if (cause == NULL)
		return NULL;
	ReplicationSlotRelease();
	return invalidated_reason(name, cause);
}

int64
replicant_slot_health_parse_budget(const char *value, bool none_ok)
{
	int mb;
	const char *hint = NULL;

	if (!parse_int(value, &mb, GUC_UNIT_MB, &hint))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for max_retained_wal: \"%s\"", value),
				 hint ? errhint("%s", _(hint)) : errhint("Give a size with a unit, as for max_slot_wal_keep_size: for example '20GB'.")));
	if (none_ok && mb == -1)
		return -1;
	if (mb < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_retained_wal must be at least 1MB"),
				 none_ok ? errhint("Pass '-1' for no budget.") : errhint("Pass NULL for no budget.")));
	return (int64) mb * 1024 * 1024;
}

void
replicant_slot_health_watch(ReplicantPipeline *pipeline)
{
	watched = pipeline;
	warned_at = 0;
	stream_began = pipeline->resync_ended ? GetXLogWriteRecPtr() : InvalidXLogRecPtr;
	losses_reset_at = pipeline->resync_ended || pipeline->resync_losses > 0 ? GetXLogWriteRecPtr() :
																			  InvalidXLogRecPtr;
}

/*
 * Whether the stream caught up with the WAL there was when it began: only
 * then does a delivered batch end a run of slot losses (resync.c).  A sink
 * failure or a restart during the catch-up does not, so a budget smaller
 * than the WAL a resync's reads leave behind halts after a few losses
 * instead of resyncing for ever.
 */
bool
replicant_slot_health_caught_up(void)
{
	XLogRecPtr confirmed;

	if (XLogRecPtrIsInvalid(losses_reset_at))
		return true;
	if (MyReplicationSlot == NULL)
		return false;
	SpinLockAcquire(&MyReplicationSlot->mutex);
	confirmed = MyReplicationSlot->data.confirmed_flush;
	SpinLockRelease(&MyReplicationSlot->mutex);
	if (confirmed < losses_reset_at)
		return false;
	losses_reset_at = InvalidXLogRecPtr;
	return true;
}

ReplicantPipeline *
replicant_slot_health_watched(void)
{
	return watched;
}

/*
 * safe_wal_size as pg_replication_slots computes it (slotfuncs.c, the same
 * in 15, 17 and 18): the WAL that can still be written before the slot's
 * restart_lsn falls out of max_slot_wal_keep_size (or wal_keep_size, if
 * larger).  Only when max_slot_wal_keep_size is set.
 */
static int64
safe_wal_size(XLogRecPtr restart_lsn, XLogRecPtr current)
{
	XLogSegNo target_seg;
	XLogSegNo fail_seg;
	XLogRecPtr fail_lsn;
	uint64 slot_keep_segs = XLogMBVarToSegs(max_slot_wal_keep_size_mb, wal_segment_size);
	uint64 keep_segs = XLogMBVarToSegs(wal_keep_size_mb, wal_segment_size);

	XLByteToSeg(restart_lsn, target_seg, wal_segment_size);
	fail_seg = target_seg + Max(slot_keep_segs, keep_segs) + 1;
	XLogSegNoOffsetToRecPtr(fail_seg, 0, wal_segment_size, fail_lsn);
	return (int64) (fail_lsn - current);
}

/* The warning: logged when it starts, then every WARN_LOG_INTERVAL_MS while it lasts. */
static void
note_warning(uint64 retained, XLogRecPtr restart_lsn, XLogRecPtr current)
{
	int64 budget = replicant_pipeline_wal_budget(watched);
	bool near_budget = budget > 0 && retained * 5 > (uint64) budget * 4;
	bool near_limit = false;
	int64 safe = 0;
	TimestampTz now;

	if (max_slot_wal_keep_size_mb >= 0)
	{
		safe = safe_wal_size(restart_lsn, current);
		near_limit = safe * 5 < (int64) max_slot_wal_keep_size_mb * 1024 * 1024;
	}
	if (!near_budget && !near_limit)
	{
		if (warned_at != 0)
			ereport(LOG,
					(errmsg("replicant pipeline \"%s\" retains " UINT64_FORMAT " bytes of WAL in its replication slot: no longer near a limit",
							watched->name, retained)));
		warned_at = 0;
		return;
	}
	now = GetCurrentTimestamp();
	if (warned_at != 0 && !TimestampDifferenceExceeds(warned_at, now, WARN_LOG_INTERVAL_MS))
		return;
	warned_at = now;
	if (near_budget)
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" retains " UINT64_FORMAT " bytes of WAL in its replication slot, over 80%% of its max_retained_wal of " INT64_FORMAT,
						watched->name, retained, budget),
				 errhint("Past max_retained_wal, with its sink that far behind, a destination gives its hold on the slot up and halts; when it is the last one holding it, the slot is given up and the pipeline halts (or resyncs, with on_slot_loss => 'resync'): make its sink catch up, end long transactions, or raise the budget with replicant.alter_pipeline or replicant.alter_destination.")));
	if (near_limit)
		ereport(LOG,
				(errmsg("replicant pipeline \"%s\" retains " UINT64_FORMAT " bytes of WAL in its replication slot, " INT64_FORMAT " bytes before max_slot_wal_keep_size invalidates it",
						watched->name, retained, safe),
				 errhint("An invalidated slot halts the pipeline (or makes it resync, with on_slot_loss => 'resync'): make its sink catch up, or raise max_slot_wal_keep_size.")));
}

/*
 * The WAL destination d's sink has not acknowledged: from its committed
 * checkpoint (or the slot's confirmed position, if further: a quiet
 * pipeline's slot is confirmed past the last commit) to current.
 */
static uint64
wal_behind(const ReplicantDestination *d, XLogRecPtr confirmed, XLogRecPtr current)
{
	XLogRecPtr from = Max(confirmed, replicant_checkpoint_committed_end(d));

	return current > from ? current - from : 0;
}

/*
 * Whether destination d, holding the slot, is past its own budget: the
 * slot retains more than its max_retained_wal, and so much is unacknowledged
 * by its sink.
 */
static bool
past_budget(const ReplicantDestination *d, uint64 retained, XLogRecPtr confirmed, XLogRecPtr current)
{
	return d->max_retained_wal > 0 && retained > (uint64) d->max_retained_wal &&
		   wal_behind(d, confirmed, current) > (uint64) d->max_retained_wal;
}

/*
 * A destination gives its hold up only when its sink is that far behind
 * too.  A caught-up slot can retain more (its restart_lsn waits for the
 * next running-transactions record, and cannot pass the oldest transaction
 * in progress, in any database, whoever runs it); that is no doing of the
 * sink's, so it only warns.  Nor is the WAL written while a resync read
 * the tables, until the stream confirmed past it (stream_began).  With
 * every destination holding the slot past its budget (one destination:
 * past it) the slot is given up; otherwise each one past its own gives its
 * hold up alone (docs/destinations-design.md §4).
 */
char *
replicant_slot_health_check(bool *release)
{
	XLogRecPtr restart_lsn;
	XLogRecPtr confirmed;
	XLogRecPtr current;
	uint64 retained;
	int holding = 0;
	int past = 0;
	int i = 0;
	ListCell *lc;

	memset(release, 0, sizeof(bool) * REPLICANT_MAX_DESTINATIONS);
	if (watched == NULL || MyReplicationSlot == NULL)
		return NULL;
	Assert(list_length(watched->destinations) <= REPLICANT_MAX_DESTINATIONS);
	SpinLockAcquire(&MyReplicationSlot->mutex);
	restart_lsn = MyReplicationSlot->data.restart_lsn;
	confirmed = MyReplicationSlot->data.confirmed_flush;
	SpinLockRelease(&MyReplicationSlot->mutex);
	if (XLogRecPtrIsInvalid(restart_lsn))
		return NULL;

	/* The position pg_replication_slots measures from, as replicant.status does. */
	current = GetXLogWriteRecPtr();
	retained = current > restart_lsn ? current - restart_lsn : 0;
	if (confirmed >= stream_began)
		stream_began = InvalidXLogRecPtr;
	foreach(lc, watched->destinations)
	{
		const ReplicantDestination *d = lfirst(lc);

		if (!d->slot_released)
		{
			holding++;
			if (XLogRecPtrIsInvalid(stream_began) && past_budget(d, retained, confirmed, current))
			{
				release[i] = true;
				past++;
			}
		}
		i++;
	}
	if (past > 0 && past == holding)
	{
		memset(release, 0, sizeof(bool) * REPLICANT_MAX_DESTINATIONS);
		return psprintf("replication slot given up: it retained " UINT64_FORMAT " bytes of WAL, past the pipeline's max_retained_wal of " INT64_FORMAT,
						retained, replicant_pipeline_wal_budget(watched));
	}
	note_warning(retained, restart_lsn, current);
	return NULL;
}

char *
replicant_slot_health_release_reason(const ReplicantDestination *destination)
{
	XLogRecPtr confirmed;

	Assert(MyReplicationSlot != NULL);
	SpinLockAcquire(&MyReplicationSlot->mutex);
	confirmed = MyReplicationSlot->data.confirmed_flush;
	SpinLockRelease(&MyReplicationSlot->mutex);
	return psprintf("replication slot given up for this destination: its sink is " UINT64_FORMAT " bytes of WAL behind, past its max_retained_wal of " INT64_FORMAT,
					wal_behind(destination, confirmed, GetXLogWriteRecPtr()), destination->max_retained_wal);
}

void
replicant_slot_health_sink_failed(void)
{
	stream_began = InvalidXLogRecPtr;
}

void
replicant_slot_health_give_up(void)
{
	Assert(watched != NULL && MyReplicationSlot != NULL);
	ereport(LOG,
			(errmsg("replicant pipeline \"%s\" drops its replication slot \"%s\": it retained more WAL than max_retained_wal",
					watched->name, NameStr(MyReplicationSlot->data.name))));
	REPLICANT_SLOT_DROP_ACQUIRED();
}
