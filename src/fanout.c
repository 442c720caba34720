/*
 * fanout.c
 *		Sends what decoding produced to every destination of the pipeline
 *		side by side, and turns their acknowledgements into checkpoints and
 *		the slot's confirmed position.
 *
 * Each destination that is not halted is an outlet: its transport, its
 * render target (one per format, render_target.h), its cursor in that
 * target's batches and the request it has in flight or waits to retry.
 * Sending goes in steps: every outlet with something left starts its next
 * request, and a round (delivery_set.h) runs until the first answer.  A
 * destination gets its transactions in commit order (one request out at a
 * time) and skips the commits its own checkpoint covers: after a restart
 * decoding starts at the lowest one.
 *
 * Decoding goes on while a destination's request is out, one batch ahead
 * (decodes_ahead); between records it moves the request on (pump).  A slow
 * sink's request stays out while the others go on, and one that keeps
 * failing waits apart, both within replicant.destination_backlog; past it
 * a failing one is left behind and brought back by a rewind
 * (fanout_laggard.c), and the worker waits for a slow one's answer.
 *
 * A sink's refusal, or its format's halt, halts that destination alone,
 * recorded in replicant.destinations, while the others go on; it keeps
 * holding the slot at its checkpoint until resume_pipeline(pipeline,
 * destination).  The last destination to halt halts the pipeline (with one
 * destination: exactly as before there were several).
 *
 * Rules kept with other files: docs/internals.md §1 (checkpoint before
 * confirm: the slot is confirmed to the floor, checkpoint.h), §11.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "batch.h"
#include "checkpoint.h"
#include "delivery.h"
#include "delivery_set.h"
#include "destination.h"
#include "event_log.h"
#include "fanout.h"
#include "fanout_laggard.h"
#include "fanout_outlet.h"
#include "fault.h"
#include "format.h"
#include "metrics.h"
#include "render_target.h"
#include "resync.h"
#include "transport.h"

StaticAssertDecl(REPLICANT_RENDER_MAX_MARKS >= REPLICANT_MAX_DESTINATIONS,
				 "a render target can have every destination of a pipeline");

ReplicantFanout *
replicant_fanout_create(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
						ReplicantDecoder *decoder)
{
	ReplicantFanout *f = MemoryContextAllocZero(TopMemoryContext, sizeof(ReplicantFanout));
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	ListCell *lc;

	f->slot = slot;
	f->pipeline = pipeline;
	f->decoder = decoder;
	/* The worker mirrored the destinations' ids before it made their tables. */
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	foreach(lc, pipeline->destinations)
	{
		ReplicantDestination *d = lfirst(lc);
		Outlet *o;

		if (d->halt_reason != NULL)
		{
			ReplicantDestinationSlot *place = replicant_shmem_destination(slot, d->id);

			place->state = REPLICANT_STATE_HALTED;
			place->slot_released = d->slot_released;
			strlcpy(place->last_error, d->halt_reason, sizeof(place->last_error));
			continue;
		}
		o = &f->outlets[f->noutlets++];
		o->destination = d;
		o->place = replicant_shmem_destination(slot, d->id);
		o->live = true;
		o->attached = true;
		o->delivered_upto = d->checkpoint_commit_lsn;
	}
	LWLockRelease(replicant_shmem->lock);
	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		o->target = replicant_decoder_target(decoder, o->destination);
		o->format = o->target->format;
		o->sink = replicant_delivery_sink(o->destination);
		o->context = AllocSetContextCreate(TopMemoryContext, "replicant outlet",
										   ALLOCSET_DEFAULT_SIZES);
	}
	MemoryContextSwitchTo(old);
	f->start_lsn = Max(replicant_decoder_confirmed(decoder), pipeline->checkpoint_end_lsn);
	replicant_outlet_confirm(f, f->start_lsn);
	return f;
}

bool
replicant_fanout_all_attached(ReplicantFanout *f)
{
	ListCell *lc;
	int holding = 0;

	for (int i = 0; i < f->noutlets; i++)
		if (!f->outlets[i].attached)
			return false;
	/* One that gave its hold on the slot up is gone for good: nothing waits for it. */
	foreach(lc, f->pipeline->destinations)
		holding += !((ReplicantDestination *) lfirst(lc))->slot_released;
	return replicant_fanout_live_outlets(f) == holding;
}

bool
replicant_fanout_all_sent(ReplicantFanout *f)
{
	if (!replicant_fanout_all_attached(f))
		return false;
	for (int i = 0; i < f->noutlets; i++)
		if (!replicant_outlet_sent_all(&f->outlets[i]))
			return false;
	return true;
}

void
replicant_fanout_confirm(ReplicantFanout *f, XLogRecPtr lsn)
{
	replicant_outlet_confirm(f, lsn);
}

void
replicant_fanout_commit_pending(ReplicantFanout *f)
{
	replicant_outlet_commit_pending(f);
}

bool
replicant_fanout_rejoin_due(ReplicantFanout *f)
{
	bool behind = false;

	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		/*
		 * One waiting to retry is sent its batches again after the
		 * restart (its checkpoint holds them): it does not keep the one
		 * behind waiting for as long as its sink fails.
		 */
		if (!o->live)
			continue;
		if (o->attached && !replicant_outlet_sent_all(o) && !replicant_outlet_waiting(f, o))
			return false;
		behind |= o->behind;
	}
	return behind;
}

long
replicant_fanout_retry_wait_ms(ReplicantFanout *f)
{
	long wait = -1;

	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];
		long t;

		if (!o->live || !o->sending || o->delivery.in_flight)
			continue;
		t = replicant_delivery_retry_wait_ms(&o->delivery.retry);
		if (wait < 0 || t < wait)
			wait = t;
	}
	return wait;
}

void
replicant_fanout_note_rewind(ReplicantFanout *f)
{
	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		if (!o->live || o->attached)
			continue;
		LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
		o->place->metrics.rewinds++;
		LWLockRelease(replicant_shmem->lock);
		replicant_log_state(f->pipeline->name, "rejoined", "destination", o->destination->name,
							"from", psprintf("%X/%X", LSN_FORMAT_ARGS(o->delivered_upto)),
							REPLICANT_LOG_END);
	}
}

/*
 * Transactions [first, last] of o's batch were taken: counts them and
 * checkpoints them if the interval is up; the slot hears only of committed
 * checkpoints.
 */
static void
acknowledged(ReplicantFanout *f, Outlet *o)
{
	ReplicantBatch *batch = o->batch;
	TimestampTz now = GetCurrentTimestamp();
	int64 changes = 0;

	replicant_fault("after_ack");
	for (int i = o->first; i <= o->last; i++)
		changes += batch->txns[i].nchanges;
	replicant_outlet_note_delivered(f, o, o->last - o->first + 1, changes, 0, o->bytes, now);
	replicant_metrics_acknowledged(o->place, batch, o->first, o->last, now);
	o->delivered_upto = batch->txns[o->last].commit_lsn;
	if (replicant_checkpoint_acknowledged(f->slot, o->destination,
										  batch->txns[o->last].commit_lsn,
										  batch->txns[o->last].end_lsn, now))
		replicant_fanout_checkpoint_committed(f);
	replicant_resync_streamed(f->pipeline);
	replicant_batch_queue_passed(o->target->queue, &o->cursor, o->last);
	o->batch = NULL;
}

/*
 * Starts o's next request, past what it has sent and what its checkpoint
 * covers; false when it has sent every sealed batch.
 */
static bool
start_next(ReplicantFanout *f, Outlet *o)
{
	for (;;)
	{
		void *plan;
		MemoryContext old;
		bool made;
		const char *id = NULL;

		if (o->batch == NULL)
		{
			const char *reason;
			XLogRecPtr hole = replicant_render_hole_of(o->target, o->destination->id, &reason);

			MemoryContextReset(o->context);
			o->batch = replicant_batch_queue_next(o->target->queue, &o->cursor,
												  &o->first, &o->last);
			if (o->batch != NULL)
			{
				while (o->first <= o->last &&
					   o->batch->txns[o->first].commit_lsn <= o->delivered_upto)
					o->first++;
				if (o->first > o->last)
				{
					replicant_batch_queue_passed(o->target->queue, &o->cursor, o->last);
					o->batch = NULL;
					continue;
				}
			}
			/*
			 * Its format left out a commit it lacks (a hole): it gets what
			 * commits below, never what follows, and halts between rounds.
			 */
			if (hole != InvalidXLogRecPtr)
			{
				while (o->batch != NULL && o->first <= o->last &&
					   o->batch->txns[o->last].commit_lsn > hole)
					o->last--;
				if (o->batch == NULL || o->first > o->last)
				{
					o->batch = NULL;
					o->at_hole = true;
					return false;
				}
			}
			if (o->batch == NULL)
				return false;
			o->part = 0;
			o->bytes = 0;
			replicant_shmem_enter_phase(REPLICANT_PHASE_DELIVER);
			replicant_metrics_pending(o->place, o->batch, o->first);
		}
		/*
		 * A format sets only what it has: target stays NULL for most; its
		 * plan of the range stays from the range's first request on.  The
		 * request may wait for its retry over several of the worker's
		 * cycles: it lives in o's context.
		 */
		old = MemoryContextSwitchTo(o->context);
		plan = o->part > 0 ? o->request.plan : NULL;
		memset(&o->request, 0, sizeof(o->request));
		o->request.plan = plan;
		o->request.destination = replicant_destination_label(o->destination);
		made = o->format->stream_request(f->pipeline->name, o->batch, o->first, o->last, o->part,
										 &o->request);
		if (made)
			id = replicant_outlet_wire_id(f, o, o->request.webhook_id);
		MemoryContextSwitchTo(old);
		if (made)
		{
			replicant_delivery_begin(&o->delivery, f->slot, o->sink, id, &o->request.body);
			o->delivery.place = o->place;
			o->sending = true;
			return true;
		}
		/* Every request of the range was taken (or the format makes none). */
		acknowledged(f, o);
	}
}

/* Acts on the final answer to o's request of a message. */
static void
message_answered(ReplicantFanout *f, Outlet *o)
{
	if (o->delivery.result.outcome != REPLICANT_SINK_OK)
		replicant_outlet_refused(f, o, &o->delivery.result, "message batch", "");
	else
		replicant_outlet_note_delivered(f, o, 0, 0, 1, o->request.body.length, GetCurrentTimestamp());
}

/* Acts on the final answer to o's request (of a range of o->batch, or a message). */
static void
answered(ReplicantFanout *f, Outlet *o)
{
	const ReplicantSinkResult *result = &o->delivery.result;
	XLogRecPtr commit_lsn;
	const char *target = o->request.target;

	if (o->batch == NULL)
	{
		message_answered(f, o);
		return;
	}
	commit_lsn = o->batch->txns[o->last].commit_lsn;

	switch (result->outcome)
	{
		case REPLICANT_SINK_OK:
			o->bytes += o->request.body.length;
			o->part++;
			return;

		case REPLICANT_SINK_RETRY:
			pg_unreachable();

		case REPLICANT_SINK_TOO_LARGE:
			if (o->first == o->last)
			{
				replicant_outlet_commit_pending(f);
				replicant_outlet_halt(f, o,
									  psprintf("sink rejected batch: HTTP 413 for a single transaction (commit LSN %X/%X)",
											   LSN_FORMAT_ARGS(commit_lsn)),
									  InvalidXLogRecPtr);
				return;
			}
			/* The first half again, from its first request. */
			o->last = o->first + (o->last - o->first) / 2;
			o->part = 0;
			o->bytes = 0;
			return;

		case REPLICANT_SINK_GONE:
		case REPLICANT_SINK_REJECTED:
			replicant_outlet_refused(f, o, result, "batch",
									 psprintf(" (%s%s%scommit LSN %X/%X)",
											  target ? "table " : "", target ? target : "",
											  target ? ", " : "", LSN_FORMAT_ARGS(commit_lsn)));
			return;
	}
}

/*
 * Halts the destinations whose render target halted (its format cannot go
 * on), once they got what came before: the others go on.  One left behind
 * meets the halt again after the rewind.
 */
static void
halt_with_targets(ReplicantFanout *f)
{
	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		if (o->live && o->attached && replicant_outlet_sent_all(o) && !replicant_render_live(o->target))
			replicant_outlet_halt(f, o, o->target->halt_reason, o->target->halted_at);
	}
}

/*
 * Halts the destinations that got all they can below a hole of their
 * target: between rounds (another's request may be out; the last one's
 * halt, the pipeline's, drops it: sent again at least once).
 */
static void
halt_at_holes(ReplicantFanout *f)
{
	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];
		const char *reason;
		XLogRecPtr hole;

		if (!o->live || !o->at_hole)
			continue;
		hole = replicant_render_hole_of(o->target, o->destination->id, &reason);
		replicant_outlet_halt(f, o, reason, hole);
	}
}

/* Frees the batches every attached destination of each target passed. */
static void
release_batches(ReplicantFanout *f)
{
	for (int i = 0; i < f->noutlets; i++)
	{
		ReplicantRenderTarget *target = f->outlets[i].target;
		ReplicantBatchCursor cursors[REPLICANT_MAX_DESTINATIONS];
		int n = 0;
		int j;

		/* Each target once: at its first outlet. */
		for (j = 0; j < i && f->outlets[j].target != target; j++)
			;
		if (j < i)
			continue;
		for (j = i; j < f->noutlets; j++)
			if (f->outlets[j].target == target && f->outlets[j].live && f->outlets[j].attached)
				cursors[n++] = f->outlets[j].cursor;
		replicant_batch_queue_release(target->queue, cursors, n);
	}
}

/*
 * Whether attached o's request, not waiting to retry, may stay out while
 * decoding renders the batch after it: one batch ahead at most, nothing
 * that must follow what it carries (a message), and no chunk or read whose
 * requests go out, to it or to another, before the worker polls again.
 * The sink reads and answers while the worker decodes, instead of one
 * waiting for the other; the checkpoint still moves only with the answer.
 */
static bool
decodes_ahead(ReplicantFanout *f, const Outlet *o)
{
	return o->batch != NULL && !f->drain_chunk && !replicant_outlet_must_drain(f, o) &&
		   !replicant_batch_queue_has_later(o->target->queue, &o->cursor);
}

/*
 * Whether o's request, begun or in flight, may stay out while the worker
 * goes on (polled by later rounds, waited for between cycles): a probe's
 * always, an attached destination's while decoding renders its next batch,
 * or while it may wait apart (its batches within the backlog, another
 * streaming, nothing that must follow them).
 */
static bool
may_stay_out(ReplicantFanout *f, const Outlet *o)
{
	return !o->attached || decodes_ahead(f, o) || replicant_laggard_may_wait_apart(f, o);
}

/* Acts on the answers a round brought: each of those sent is answered or not yet. */
static void
take_answers(ReplicantFanout *f, Outlet **sending, int n)
{
	for (int i = 0; i < n; i++)
	{
		Outlet *o = sending[i];

		if (!o->delivery.answered)
			continue;
		o->sending = false;
		if (o->attached)
			answered(f, o);
		else
			replicant_laggard_probe_answered(f, o);
	}
}

/*
 * Sends each destination's requests in rounds: those begun (a message's),
 * and the next range of sealed batches of each attached one, until none is
 * left but retries that may wait and requests that may stay in flight
 * (see deliver_batches); with probes, the requests of destinations left
 * behind too.  A round ends at the first answer, so that a slow sink's
 * request does not hold the others'.  Whether a request was started or a
 * round ran.
 */
static bool
send_rounds(ReplicantFanout *f, bool probes)
{
	bool any = false;

	for (;;)
	{
		ReplicantDelivery *set[REPLICANT_MAX_DESTINATIONS];
		Outlet *sending[REPLICANT_MAX_DESTINATIONS];
		int n = 0;
		bool moves = false;
		bool holds = false;

		halt_at_holes(f);
		for (int i = 0; i < f->noutlets; i++)
		{
			Outlet *o = &f->outlets[i];

			if (!o->live || (!o->attached && !probes))
				continue;
			if (!o->sending)
			{
				if (!o->attached || !start_next(f, o))
					continue;
				any = true;
			}
			sending[n] = o;
			set[n++] = &o->delivery;
			if (replicant_outlet_waiting(f, o))
			{
				if (o->attached && !replicant_laggard_may_wait_apart(f, o))
					holds = true;
			}
			else if (!may_stay_out(f, o))
				moves = true;
		}
		/*
		 * Only retries none due and requests that may stay out are left:
		 * decoding goes on unless a retry holds it (then it waits for the
		 * first to come due, as with one destination), or a laggard can be
		 * left behind.  What may stay out is started or polled first,
		 * without waiting: an answer taken may free more to send.
		 */
		if (!moves)
		{
			if (holds && replicant_laggard_leave_behind(f))
				continue;
			if (!holds && replicant_delivery_set_poll(set, n))
			{
				any = true;
				take_answers(f, sending, n);
				continue;
			}
			if (!holds)
				break;
		}
		any = true;
		replicant_delivery_set_round_first(set, n);
		take_answers(f, sending, n);
	}
	return any;
}

/* The requests in flight: their deliveries in set, their outlets in sending; how many. */
static int
in_flight(ReplicantFanout *f, ReplicantDelivery **set, Outlet **sending)
{
	int n = 0;

	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		if (o->live && o->sending && o->delivery.in_flight)
		{
			sending[n] = o;
			set[n++] = &o->delivery;
		}
	}
	return n;
}

void
replicant_fanout_wait(ReplicantFanout *f, long timeout)
{
	ReplicantDelivery *set[REPLICANT_MAX_DESTINATIONS];
	Outlet *sending[REPLICANT_MAX_DESTINATIONS];

	int n = in_flight(f, set, sending);

	if (n > 0)
		replicant_delivery_set_wait(set, n, timeout);
	else
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout,
						 PG_WAIT_EXTENSION);
}

void
replicant_fanout_pump(void *fanout)
{
	ReplicantFanout *f = fanout;

	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		if (o->live && o->sending && o->delivery.in_flight)
			replicant_transport_pump(o->sink);
	}
}

void
replicant_fanout_before_wait(void *fanout)
{
	replicant_fanout_settle(fanout);
}

void
replicant_fanout_settle(ReplicantFanout *f)
{
	ReplicantDelivery *set[REPLICANT_MAX_DESTINATIONS];
	Outlet *sending[REPLICANT_MAX_DESTINATIONS];
	int n;

	while ((n = in_flight(f, set, sending)) > 0)
	{
		replicant_delivery_set_round(set, n);
		take_answers(f, sending, n);
		/* A range whose last request was taken is acknowledged; the next request is not sent. */
		for (int i = 0; i < n; i++)
			if (sending[i]->attached && sending[i]->live && !sending[i]->sending && sending[i]->batch != NULL)
				(void) start_next(f, sending[i]);
	}
}

/*
 * Sends the batches; those destinations the drain_ fields name are sent
 * all of them (or halt, or are left behind) before it returns.
 */
static bool
send_batches(ReplicantFanout *f)
{
	bool any = send_rounds(f, true);

	f->drain_messages_upto = InvalidXLogRecPtr;
	f->drain_chunk = false;
	halt_at_holes(f);
	halt_with_targets(f);
	release_batches(f);
	return any;
}

bool
replicant_fanout_deliver_batches(ReplicantFanout *f, List *messages, ReplicantChunk *chunk)
{
	f->drain_messages_upto = messages != NIL ? ((ReplicantMessage *) llast(messages))->lsn : InvalidXLogRecPtr;
	f->drain_chunk = chunk != NULL;
	f->drain_chunk_only = chunk != NULL ? chunk->backfill->destination_id : 0;
	return send_batches(f);
}

void
replicant_fanout_drain_for_read(ReplicantFanout *f, int32 destination_id)
{
	f->drain_chunk = true;
	f->drain_chunk_only = destination_id;
	(void) send_batches(f);
}

void
replicant_fanout_deliver_messages(ReplicantFanout *f, List *messages)
{
	ListCell *lc;

	replicant_shmem_enter_phase(REPLICANT_PHASE_DELIVER);
	foreach(lc, messages)
	{
		ReplicantMessage *message = lfirst(lc);

		for (int i = 0; i < f->noutlets; i++)
		{
			Outlet *o = &f->outlets[i];
			MemoryContext old;
			const char *id;

			/* Sent before: decoding went back for a destination behind this one. */
			if (!o->live || !o->attached || o->format->message_request == NULL ||
				message->lsn <= o->delivered_upto)
				continue;
			/* Every batch before it was sent (the worker drained). */
			Assert(!o->sending && o->batch == NULL);
			MemoryContextReset(o->context);
			old = MemoryContextSwitchTo(o->context);
			memset(&o->request, 0, sizeof(o->request));
			o->request.destination = replicant_destination_label(o->destination);
			o->format->message_request(f->pipeline->name, message, &o->request);
			id = replicant_outlet_wire_id(f, o, o->request.webhook_id);
			MemoryContextSwitchTo(old);
			o->bytes = 0;
			replicant_delivery_begin(&o->delivery, f->slot, o->sink, id, &o->request.body);
			o->delivery.place = o->place;
			o->sending = true;
		}
		/*
		 * Each destination takes it, refuses it or is left behind before
		 * the next; a probe waits for the next batches' rounds.
		 */
		f->drain_messages_upto = message->lsn;
		(void) send_rounds(f, false);
		f->drain_messages_upto = InvalidXLogRecPtr;
	}
}
