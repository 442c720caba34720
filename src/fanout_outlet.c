/*
 * fanout_outlet.c
 *		What each destination of the fan-out was delivered, and its halt:
 *		acknowledgements counted, checkpoints turned into the slot's
 *		confirmed position, refusals and halts of one destination.
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm: the slot is confirmed to the floor, checkpoint.h), §11.
 */
#include "postgres.h"

#include "storage/condition_variable.h"
#include "utils/timestamp.h"

#include "checkpoint.h"
#include "delivery.h"
#include "fanout_outlet.h"
#include "runs.h"

/* Whether o streams on: not halted, nor about to halt at a hole. */
bool
replicant_outlet_streams(const Outlet *o)
{
	return o->live && !o->at_hole;
}

int
replicant_fanout_live_outlets(struct ReplicantFanout *f)
{
	int n = 0;

	for (int i = 0; i < f->noutlets; i++)
		n += replicant_outlet_streams(&f->outlets[i]);
	return n;
}

/* Whether a destination other than o streams on: else o's halt is the pipeline's. */
bool
replicant_outlet_others_stream(struct ReplicantFanout *f, const Outlet *o)
{
	for (int i = 0; i < f->noutlets; i++)
		if (&f->outlets[i] != o && replicant_outlet_streams(&f->outlets[i]))
			return true;
	return false;
}

/*
 * A destination's wire id: the format's, which begins with the pipeline's
 * name, for "default"; <pipeline>.<destination> in its place for any
 * other, so that destinations never share an id ('.' is in no pipeline's
 * name).
 */
char *
replicant_outlet_wire_id(struct ReplicantFanout *f, Outlet *o, const char *id)
{
	size_t plen = strlen(f->pipeline->name);

	if (strcmp(o->destination->name, REPLICANT_DEFAULT_DESTINATION) == 0)
		return (char *) id;
	Assert(strncmp(id, f->pipeline->name, plen) == 0);
	return psprintf("%s.%s%s", f->pipeline->name, o->destination->name, id + plen);
}

/* Whether a destination resyncs alone: it has not been delivered what came before. */
static bool
any_resyncing(struct ReplicantFanout *f)
{
	for (int i = 0; i < f->noutlets; i++)
		if (f->outlets[i].live && f->outlets[i].destination->resync_reason != NULL)
			return true;
	return false;
}

void
replicant_outlet_confirm(struct ReplicantFanout *f, XLogRecPtr lsn)
{
	ReplicantPipelineSlot *slot = f->slot;

	replicant_decoder_confirm(f->decoder, lsn);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (lsn > slot->delivered_upto)
	{
		/* await_delivered waits for a resync's reads too. */
		if (!any_resyncing(f))
			slot->delivered_upto = lsn;
		slot->progress++;
	}
	/* Under the lock: a caller still waiting asks again (status.c). */
	pg_atomic_write_u32(&slot->checkpoint_wanted, 0);
	LWLockRelease(replicant_shmem->lock);
	ConditionVariableBroadcast(&slot->delivered_cv);
	/* Past where this run began: it is no run without progress (runs.c). */
	if (lsn > f->start_lsn)
		replicant_runs_progressed(f->pipeline->id);
}

/*
 * After a checkpoint commit: the run made durable progress (a destination's
 * checkpoint moved, whether or not the floor did: a halted destination
 * holds it), and the floor is confirmed.
 */
void
replicant_fanout_checkpoint_committed(struct ReplicantFanout *f)
{
	XLogRecPtr floor = replicant_checkpoint_floor();

	replicant_runs_progressed(f->pipeline->id);
	if (!XLogRecPtrIsInvalid(floor))
		replicant_outlet_confirm(f, floor);
}

void
replicant_outlet_commit_pending(struct ReplicantFanout *f)
{
	if (replicant_checkpoint_commit_pending())
		replicant_fanout_checkpoint_committed(f);
}

/* Whether o was sent every batch sealed so far. */
bool
replicant_outlet_sent_all(const Outlet *o)
{
	return !o->sending && !replicant_batch_queue_has_next(o->target->queue, &o->cursor);
}

/* Whether o waits for its request's next attempt to come due. */
bool
replicant_outlet_must_drain(struct ReplicantFanout *f, const Outlet *o)
{
	if (f->drain_chunk && (f->drain_chunk_only == 0 || f->drain_chunk_only == o->destination->id))
		return true;
	return o->format->message_request != NULL && f->drain_messages_upto > o->delivered_upto;
}

bool
replicant_outlet_waiting(struct ReplicantFanout *f, const Outlet *o)
{
	return o->sending && !o->delivery.in_flight &&
		   replicant_delivery_retry_waiting(f->slot, &o->delivery.retry);
}

/*
 * Halts destination o alone, for reason (value-free), at the commit lsn:
 * what the others acknowledged is committed first, and it holds the slot
 * at its checkpoint from here on.  The last one halts the pipeline.
 */
void
replicant_outlet_halt(struct ReplicantFanout *f, Outlet *o, const char *reason, XLogRecPtr lsn)
{
	replicant_outlet_commit_pending(f);
	if (!replicant_outlet_others_stream(f, o))
		replicant_delivery_halt_at(f->slot, f->pipeline, reason, lsn, NULL);
	replicant_destination_halted(f->pipeline->name, o->destination, o->place, reason, lsn);
	o->live = false;
	o->sending = false;
	o->batch = NULL;
	replicant_transport_close(o->sink);
	o->sink = NULL;
}

/*
 * A refusal: with one destination left the pipeline's (a 410 disables it),
 * else o halts alone.
 */
void
replicant_outlet_refused(struct ReplicantFanout *f, Outlet *o, const ReplicantSinkResult *result, const char *what,
						 const char *context)
{
	replicant_outlet_commit_pending(f);
	if (!replicant_outlet_others_stream(f, o))
		replicant_delivery_refused(f->slot, f->pipeline, result, what, context);
	replicant_outlet_halt(f, o, replicant_delivery_refusal(result, what, context), InvalidXLogRecPtr);
}

/* Counts an acknowledged request in replicant.status and replicant.metrics. */
void
replicant_outlet_note_delivered(struct ReplicantFanout *f, Outlet *o, int64 transactions, int64 changes, int messages,
								size_t bytes, TimestampTz now)
{
	ReplicantDestinationSlot *place = o->place;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	place->metrics.messages_delivered += messages;
	place->transactions_delivered += transactions;
	place->changes_delivered += changes;
	place->batches_delivered++;
	place->bytes_delivered += bytes;
	place->last_delivery_at = now;
	place->state = REPLICANT_STATE_STREAMING;
	place->last_error[0] = '\0';
	f->slot->last_progress = now;
	LWLockRelease(replicant_shmem->lock);
}
