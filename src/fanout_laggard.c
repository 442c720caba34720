/*
 * fanout_laggard.c
 *		A destination whose sink keeps failing, kept apart from the others
 *		and, past replicant.destination_backlog, left behind; brought back
 *		by a rewind (docs/destinations-design.md §3.3, docs/internals.md
 *		§11).
 *
 * While another destination streams, one waiting to retry does not hold
 * the worker: decoding goes on and its target keeps the batches its
 * cursor has not passed.  Past the backlog, or when everything must be
 * sent first (a message, a backfill chunk), it is detached: its batches
 * go, its checkpoint holds the slot, and the request it waits to retry,
 * copied, is retried alone as the probe of its sink.  Once the sink takes
 * it the destination is "behind"; when the others were sent all they have
 * the worker starts again (worker.c), decoding from the lowest checkpoint
 * while the others skip what theirs cover.
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "checkpoint.h"
#include "delivery.h"
#include "event_log.h"
#include "fanout_laggard.h"
#include "replicant.h"

/*
 * Acts on the sink's final answer to the probe of o, left behind: a
 * refusal is one (it would come again after the rewind); anything else
 * says the sink answers, and o waits to be caught up.
 */
void
replicant_laggard_probe_answered(struct ReplicantFanout *f, Outlet *o)
{
	const ReplicantSinkResult *result = &o->delivery.result;

	if (result->outcome == REPLICANT_SINK_GONE || result->outcome == REPLICANT_SINK_REJECTED)
	{
		if (XLogRecPtrIsInvalid(o->probe_txn.commit_lsn))
			replicant_outlet_refused(f, o, result, "message batch", "");
		else
			replicant_outlet_refused(f, o, result, "batch",
									 psprintf(" (commit LSN %X/%X)", LSN_FORMAT_ARGS(o->probe_txn.commit_lsn)));
		return;
	}
	/* The range's last request taken: so was the range, and the rewind starts past it. */
	if (result->outcome == REPLICANT_SINK_OK && o->probe_ends_range)
	{
		TimestampTz now = GetCurrentTimestamp();

		replicant_outlet_note_delivered(f, o, o->probe_txns, o->probe_changes, 0,
										o->bytes + o->request.body.length, now);
		o->delivered_upto = o->probe_txn.commit_lsn;
		if (replicant_checkpoint_acknowledged(f->slot, o->destination, o->probe_txn.commit_lsn,
											  o->probe_txn.end_lsn, now))
			replicant_fanout_checkpoint_committed(f);
	}
	o->behind = true;
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	o->place->state = REPLICANT_STATE_BEHIND;
	o->place->last_error[0] = '\0';
	LWLockRelease(replicant_shmem->lock);
	replicant_log_state(f->pipeline->name, "behind", "destination", o->destination->name,
						REPLICANT_LOG_END);
}

/* Whether a destination other than o gets batches and is not waiting to retry. */
static bool
others_move(struct ReplicantFanout *f, const Outlet *o)
{
	for (int i = 0; i < f->noutlets; i++)
	{
		const Outlet *p = &f->outlets[i];

		if (p != o && replicant_outlet_streams(p) && p->attached && !replicant_outlet_waiting(f, p))
			return true;
	}
	return false;
}

bool
replicant_laggard_may_wait_apart(struct ReplicantFanout *f, const Outlet *o)
{
	return !replicant_outlet_must_drain(f, o) && others_move(f, o) &&
		   replicant_batch_queue_footprint(o->target->queue) <=
			   (uint64) replicant_destination_backlog_kb * 1024;
}

/*
 * Leaves o behind: the batches it has not passed are no longer kept for
 * it, and the request it waits to retry is copied to be retried alone as
 * the probe of its sink.  False when that request is too large to copy (a
 * transaction past twice its batch_max_bytes): o stays, and holds the
 * others as before.
 */
static bool
leave_behind(struct ReplicantFanout *f, Outlet *o)
{
	ReplicantBody *body = &o->request.body;
	ReplicantRequest next;
	StringInfo copy;
	MemoryContext old;

	if (body->length > 2 * (size_t) o->destination->batch_max_bytes ||
		body->length >= MaxAllocSize / 2)
		return false;
	old = MemoryContextSwitchTo(o->context);
	copy = makeStringInfo();
	enlargeStringInfo(copy, (int) body->length);
	body->rewind(body->arg);
	while (copy->len < (int) body->length)
	{
		size_t n = body->read(body->arg, copy->data + copy->len, body->length - copy->len);

		if (n == (size_t) -1 || n == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not read a batch of pipeline \"%s\"", f->pipeline->name)));
		copy->len += (int) n;
	}
	copy->data[copy->len] = '\0';
	replicant_body_from_buffer(body, &o->probe_body, copy);
	/* A message's request (no batch) moves no checkpoint: it ends no range. */
	memset(&o->probe_txn, 0, sizeof(o->probe_txn));
	o->probe_ends_range = false;
	if (o->batch != NULL)
	{
		memset(&next, 0, sizeof(next));
		next.plan = o->request.plan;
		next.destination = o->request.destination;
		o->probe_ends_range = !o->format->stream_request(f->pipeline->name, o->batch, o->first,
														 o->last, o->part + 1, &next);
		o->probe_txn = o->batch->txns[o->last];
		o->probe_txns = o->last - o->first + 1;
		o->probe_changes = 0;
		for (int i = o->first; i <= o->last; i++)
			o->probe_changes += o->batch->txns[i].nchanges;
	}
	MemoryContextSwitchTo(old);
	o->batch = NULL;
	o->attached = false;
	replicant_log_state(f->pipeline->name, "detached", "destination", o->destination->name,
						"checkpoint", psprintf("%X/%X", LSN_FORMAT_ARGS(o->delivered_upto)),
						REPLICANT_LOG_END);
	return true;
}

bool
replicant_laggard_leave_behind(struct ReplicantFanout *f)
{
	bool left = false;

	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		if (o->live && o->attached && replicant_outlet_waiting(f, o) && others_move(f, o) &&
			!replicant_laggard_may_wait_apart(f, o))
			left |= leave_behind(f, o);
	}
	return left;
}
