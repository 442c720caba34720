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
 * request, and a round (delivery_set.h) runs until each request started
 * has its answer.  A destination gets its transactions in commit order and
 * skips the commits its own checkpoint covers: after a restart decoding
 * starts at the lowest one.
 *
 * A slow sink paces the others one request at a time; a retrying one does
 * not (docs/destinations-design.md §3.3).  While another destination
 * streams, decoding goes on and the batches its cursor has not passed are
 * kept for it, up to replicant.destination_backlog.  Past that, or when
 * everything must be sent first (a message, a backfill chunk), it is left
 * behind (detached): its batches go, its checkpoint holds the slot, and
 * the request it waits to retry, copied, is retried alone as the probe of
 * its sink.  Once the sink takes it the destination is "behind", and when
 * the others have sent all they have the worker starts again (a rewind):
 * the next one decodes from the lowest checkpoint and the others skip what
 * theirs cover.
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

#include "storage/condition_variable.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backfill.h"
#include "batch.h"
#include "checkpoint.h"
#include "delivery.h"
#include "delivery_set.h"
#include "destination.h"
#include "event_log.h"
#include "fanout.h"
#include "fault.h"
#include "format.h"
#include "metrics.h"
#include "render_target.h"
#include "replicant.h"
#include "resync.h"
#include "runs.h"
#include "transport.h"

StaticAssertDecl(REPLICANT_RENDER_MAX_MARKS >= REPLICANT_MAX_DESTINATIONS,
				 "a render target can have every destination of a pipeline");

/* One destination being delivered to. */
typedef struct Outlet
{
	ReplicantDestination *destination;
	ReplicantDestinationSlot *place; /* what the slot shows of it */
	ReplicantTransport *sink;
	ReplicantRenderTarget *target;
	const ReplicantFormat *format;
	bool live;                   /* not halted */
	bool attached;               /* sent each batch as decoded: not left behind */
	bool behind;                 /* left behind, and its sink took the probe */
	ReplicantBatchCursor cursor; /* in its target's batches, while attached */
	XLogRecPtr delivered_upto;   /* commits at or below it were delivered to it */
	bool at_hole;                /* it was sent all it can have below a hole
								  * of its target, and halts there */

	/* Transactions [first, last] of batch, being sent as request part. */
	ReplicantBatch *batch;
	int first;
	int last;
	int part;
	size_t bytes;
	ReplicantRequest request;
	ReplicantDelivery delivery;
	bool sending;           /* delivery holds a request: in a round or waiting to retry */
	MemoryContext context;  /* the range's requests, from one round to the next */
	XLogRecPtr probe_lsn;   /* left behind: the last commit of the request kept */
	ReplicantMemoryBody probe_body;
} Outlet;

struct ReplicantFanout
{
	ReplicantPipelineSlot *slot;
	ReplicantPipeline *pipeline;
	ReplicantDecoder *decoder;
	XLogRecPtr start_lsn; /* confirmed as streaming began */
	const char *chunk_table;
	int noutlets;
	Outlet outlets[REPLICANT_MAX_DESTINATIONS];
};

/* Whether o streams on: not halted, nor about to halt at a hole. */
static bool
streams(const Outlet *o)
{
	return o->live && !o->at_hole;
}

static int
live_outlets(ReplicantFanout *f)
{
	int n = 0;

	for (int i = 0; i < f->noutlets; i++)
		n += streams(&f->outlets[i]);
	return n;
}

/* Whether a destination other than o streams on: else o's halt is the pipeline's. */
static bool
others_stream(ReplicantFanout *f, const Outlet *o)
{
	for (int i = 0; i < f->noutlets; i++)
		if (&f->outlets[i] != o && streams(&f->outlets[i]))
			return true;
	return false;
}

/*
 * A destination's wire id: the format's, which begins with the pipeline's
 * name, for "default"; <pipeline>.<destination> in its place for any
 * other, so that destinations never share an id ('.' is in no pipeline's
 * name).
 */
static char *
wire_id(ReplicantFanout *f, Outlet *o, const char *id)
{
	size_t plen = strlen(f->pipeline->name);

	if (strcmp(o->destination->name, REPLICANT_DEFAULT_DESTINATION) == 0)
		return (char *) id;
	Assert(strncmp(id, f->pipeline->name, plen) == 0);
	return psprintf("%s.%s%s", f->pipeline->name, o->destination->name, id + plen);
}

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
	replicant_fanout_confirm(f, f->start_lsn);
	return f;
}

void
replicant_fanout_confirm(ReplicantFanout *f, XLogRecPtr lsn)
{
	ReplicantPipelineSlot *slot = f->slot;

	replicant_decoder_confirm(f->decoder, lsn);
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	if (lsn > slot->delivered_upto)
	{
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
static void
checkpoint_committed(ReplicantFanout *f)
{
	XLogRecPtr floor = replicant_checkpoint_floor();

	replicant_runs_progressed(f->pipeline->id);
	if (!XLogRecPtrIsInvalid(floor))
		replicant_fanout_confirm(f, floor);
}

void
replicant_fanout_commit_pending(ReplicantFanout *f)
{
	if (replicant_checkpoint_commit_pending())
		checkpoint_committed(f);
}

bool
replicant_fanout_all_attached(ReplicantFanout *f)
{
	for (int i = 0; i < f->noutlets; i++)
		if (!f->outlets[i].attached)
			return false;
	return live_outlets(f) == list_length(f->pipeline->destinations);
}

/* Whether o was sent every batch sealed so far. */
static bool
sent_all(const Outlet *o)
{
	return !o->sending && !replicant_batch_queue_has_next(o->target->queue, &o->cursor);
}

bool
replicant_fanout_all_sent(ReplicantFanout *f)
{
	if (!replicant_fanout_all_attached(f))
		return false;
	for (int i = 0; i < f->noutlets; i++)
		if (!sent_all(&f->outlets[i]))
			return false;
	return true;
}

bool
replicant_fanout_rejoin_due(ReplicantFanout *f)
{
	bool behind = false;

	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		if (!o->live)
			continue;
		if (o->attached && !sent_all(o))
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

		if (!o->live || !o->sending)
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
 * Halts destination o alone, for reason (value-free), at the commit lsn:
 * what the others acknowledged is committed first, and it holds the slot
 * at its checkpoint from here on.  The last one halts the pipeline.
 */
static void
halt_outlet(ReplicantFanout *f, Outlet *o, const char *reason, XLogRecPtr lsn)
{
	replicant_fanout_commit_pending(f);
	if (!others_stream(f, o))
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
static void
refused(ReplicantFanout *f, Outlet *o, const ReplicantSinkResult *result, const char *what,
		const char *context)
{
	replicant_fanout_commit_pending(f);
	if (!others_stream(f, o))
		replicant_delivery_refused(f->slot, f->pipeline, result, what, context);
	halt_outlet(f, o, replicant_delivery_refusal(result, what, context), InvalidXLogRecPtr);
}

/* Counts an acknowledged request in replicant.status and replicant.metrics. */
static void
note_delivered(ReplicantFanout *f, Outlet *o, int64 transactions, int64 changes, int messages,
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
	note_delivered(f, o, o->last - o->first + 1, changes, 0, o->bytes, now);
	replicant_metrics_acknowledged(o->place, batch, o->first, o->last, now);
	o->delivered_upto = batch->txns[o->last].commit_lsn;
	if (replicant_checkpoint_acknowledged(f->slot, o->destination,
										  batch->txns[o->last].commit_lsn,
										  batch->txns[o->last].end_lsn, now))
		checkpoint_committed(f);
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
		made = o->format->stream_request(f->pipeline->name, o->batch, o->first, o->last, o->part,
										 &o->request);
		if (made)
			id = wire_id(f, o, o->request.webhook_id);
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

/* Acts on the final answer to o's request. */
static void
answered(ReplicantFanout *f, Outlet *o)
{
	const ReplicantSinkResult *result = &o->delivery.result;
	XLogRecPtr commit_lsn = o->batch->txns[o->last].commit_lsn;
	const char *target = o->request.target;

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
				replicant_fanout_commit_pending(f);
				halt_outlet(f, o,
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
			refused(f, o, result, "batch",
					psprintf(" (%s%s%scommit LSN %X/%X)",
							 target ? "table " : "", target ? target : "",
							 target ? ", " : "", LSN_FORMAT_ARGS(commit_lsn)));
			return;
	}
}

/*
 * Acts on the sink's final answer to the probe of o, left behind: a
 * refusal is one (it would come again after the rewind); anything else
 * says the sink answers, and o waits to be caught up.
 */
static void
probe_answered(ReplicantFanout *f, Outlet *o)
{
	const ReplicantSinkResult *result = &o->delivery.result;

	if (result->outcome == REPLICANT_SINK_GONE || result->outcome == REPLICANT_SINK_REJECTED)
	{
		refused(f, o, result, "batch", psprintf(" (commit LSN %X/%X)", LSN_FORMAT_ARGS(o->probe_lsn)));
		return;
	}
	o->behind = true;
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	o->place->state = REPLICANT_STATE_BEHIND;
	o->place->last_error[0] = '\0';
	LWLockRelease(replicant_shmem->lock);
	replicant_log_state(f->pipeline->name, "behind", "destination", o->destination->name,
						REPLICANT_LOG_END);
}

/* Whether o waits for its request's next attempt to come due. */
static bool
waiting(ReplicantFanout *f, const Outlet *o)
{
	return o->sending && !o->delivery.in_flight &&
		   replicant_delivery_retry_waiting(f->slot, &o->delivery.retry);
}

/* Whether a destination other than o gets batches and is not waiting to retry. */
static bool
others_move(ReplicantFanout *f, const Outlet *o)
{
	for (int i = 0; i < f->noutlets; i++)
	{
		const Outlet *p = &f->outlets[i];

		if (p != o && streams(p) && p->attached && !waiting(f, p))
			return true;
	}
	return false;
}

/*
 * Whether decoding may go on while o, attached, waits to retry: another
 * destination moves, nothing must be sent to all first (drain), and its
 * target keeps at most replicant.destination_backlog for it.
 */
static bool
may_wait_apart(ReplicantFanout *f, const Outlet *o, bool drain)
{
	return !drain && others_move(f, o) &&
		   replicant_batch_queue_sealed_size(o->target->queue) <=
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
leave_behind(ReplicantFanout *f, Outlet *o)
{
	ReplicantBody *body = &o->request.body;
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
	MemoryContextSwitchTo(old);

	o->probe_lsn = o->batch->txns[o->last].commit_lsn;
	o->batch = NULL;
	o->attached = false;
	replicant_log_state(f->pipeline->name, "detached", "destination", o->destination->name,
						"checkpoint", psprintf("%X/%X", LSN_FORMAT_ARGS(o->delivered_upto)),
						REPLICANT_LOG_END);
	return true;
}

/*
 * Leaves behind each attached destination that waits to retry while
 * others move, when decoding may not go on with it; whether it left any.
 */
static bool
leave_laggards_behind(ReplicantFanout *f, bool drain)
{
	bool left = false;

	for (int i = 0; i < f->noutlets; i++)
	{
		Outlet *o = &f->outlets[i];

		if (o->live && o->attached && waiting(f, o) && others_move(f, o) &&
			!may_wait_apart(f, o, drain))
			left |= leave_behind(f, o);
	}
	return left;
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

		if (o->live && o->attached && sent_all(o) && !replicant_render_live(o->target))
			halt_outlet(f, o, o->target->halt_reason, o->target->halted_at);
	}
}

/*
 * Halts the destinations that got all they can below a hole of their
 * target: between rounds, with no request of another in flight.
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
		halt_outlet(f, o, reason, hole);
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

bool
replicant_fanout_deliver_batches(ReplicantFanout *f, bool drain)
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

			if (!o->live || !(o->sending || (o->attached && start_next(f, o))))
				continue;
			sending[n] = o;
			set[n++] = &o->delivery;
			if (!waiting(f, o))
				moves = true;
			else if (o->attached && !may_wait_apart(f, o, drain))
				holds = true;
		}
		/*
		 * Only retries are left, none due: decoding goes on unless one
		 * holds it (then it waits for the first to come due, as with one
		 * destination), or a laggard can be left behind.
		 */
		if (!moves)
		{
			if (holds && leave_laggards_behind(f, drain))
				continue;
			if (!holds)
				break;
		}
		any = true;
		replicant_delivery_set_round(set, n);
		for (int i = 0; i < n; i++)
		{
			Outlet *o = sending[i];

			if (!o->delivery.answered)
				continue;
			o->sending = false;
			if (o->attached)
				answered(f, o);
			else
				probe_answered(f, o);
		}
	}
	halt_at_holes(f);
	halt_with_targets(f);
	release_batches(f);
	return any;
}

void
replicant_fanout_deliver_messages(ReplicantFanout *f, List *messages)
{
	ListCell *lc;

	replicant_shmem_enter_phase(REPLICANT_PHASE_DELIVER);
	foreach(lc, messages)
	{
		for (int i = 0; i < f->noutlets; i++)
		{
			Outlet *o = &f->outlets[i];
			ReplicantRequest request;
			ReplicantSinkResult result;

			/* Sent before: decoding went back for a destination behind this one. */
			if (!o->live || !o->attached || o->format->message_request == NULL ||
				((ReplicantMessage *) lfirst(lc))->lsn <= o->delivered_upto)
				continue;
			o->format->message_request(f->pipeline->name, lfirst(lc), &request);
			replicant_delivery_post(f->slot, o->place, o->sink,
									wire_id(f, o, request.webhook_id), &request.body, &result);
			if (result.outcome != REPLICANT_SINK_OK)
			{
				refused(f, o, &result, "message batch", "");
				continue;
			}
			note_delivered(f, o, 0, 0, 1, request.body.length, GetCurrentTimestamp());
		}
	}
}

/*
 * Delivers what is left of a completed chunk to o, in requests of at most
 * its batch_max_bytes (a single larger row goes alone).  Each request's
 * id is <pipeline>-b<backfill>-<position>-<low watermark>-<part>
 * (replicant_format_read_webhook_id): a chunk read again after a restart,
 * its parts cut elsewhere, reuses none of them.  Sets *rows to the rows
 * sent; false when o refused them and halted alone.
 */
static bool
deliver_chunk_to(ReplicantFanout *f, Outlet *o, ReplicantChunk *chunk, bool first_sent,
				 int *rows)
{
	int next = 0;
	int part = 0;
	bool more = chunk->last || replicant_chunk_has_rows(chunk);
	StringInfoData changes;
	StringInfoData out;

	initStringInfo(&changes);
	initStringInfo(&out);
	while (more)
	{
		ReplicantMemoryBody state;
		ReplicantBody body;
		ReplicantSinkResult result;
		int n;

		/* The prefix's length, so that the whole body stays within bounds. */
		resetStringInfo(&out);
		o->format->snapshot_begin(&out, f->pipeline->name, chunk->relation,
								  chunk->backfill->id, false, false, NULL);
		resetStringInfo(&changes);
		n = replicant_chunk_rows(chunk, o->format, &next, &changes,
								 o->destination->batch_max_bytes - out.len - o->format->snapshot_end_len);
		more = next < chunk->nrows;
		resetStringInfo(&out);
		o->format->snapshot_begin(&out, f->pipeline->name, chunk->relation,
								  chunk->backfill->id, !first_sent && part == 0,
								  chunk->last && !more, NULL);
		appendBinaryStringInfo(&out, changes.data, changes.len);
		o->format->snapshot_end(&out);
		replicant_body_from_buffer(&body, &state, &out);
		replicant_delivery_post(f->slot, o->place, o->sink,
								wire_id(f, o,
										replicant_format_read_webhook_id(f->pipeline->name,
																		 chunk->backfill->id,
																		 chunk->relfilenode,
																		 chunk->position,
																		 chunk->low_watermark,
																		 part++)),
								&body, &result);
		/*
		 * Rows read are in no WAL a destination could catch up from later:
		 * the chunk is read again after the resume.  A refusal of a
		 * backfill for every destination halts the pipeline; of one for o
		 * alone (added with a snapshot), o alone, and the backfill's
		 * progress does not move.
		 */
		if (result.outcome != REPLICANT_SINK_OK)
		{
			char *context = psprintf(" (table \"%s\")", chunk->relation->table);

			if (chunk->backfill->destination_id != 0)
			{
				refused(f, o, &result, "backfill batch", context);
				return false;
			}
			replicant_fanout_commit_pending(f);
			replicant_delivery_refused(f->slot, f->pipeline, &result, "backfill batch", context);
		}
		note_delivered(f, o, 0, n, 0, out.len, GetCurrentTimestamp());
		*rows += n;
	}
	return true;
}

void
replicant_fanout_deliver_chunk(ReplicantFanout *f, ReplicantChunk *chunk)
{
	bool first_sent = chunk->backfill->first_sent;
	bool reached = true;
	int rows = 0;

	replicant_shmem_enter_phase(REPLICANT_PHASE_DELIVER);
	if (chunk->relation != NULL)
	{
		int32 only = chunk->backfill->destination_id;

		f->chunk_table = chunk->relation->table;
		/* A backfill for one destination (added with a snapshot) goes to it alone. */
		for (int i = 0; i < f->noutlets; i++)
			if (f->outlets[i].live && f->outlets[i].attached &&
				(only == 0 || f->outlets[i].destination->id == only))
			{
				rows = 0;
				reached &= deliver_chunk_to(f, &f->outlets[i], chunk, first_sent, &rows);
			}
	}
	if (reached)
		replicant_backfill_record_chunk(chunk, rows);
	replicant_shmem_note_progress(f->slot);
	replicant_runs_progressed(f->pipeline->id);
	f->chunk_table = NULL;
}

const char *
replicant_fanout_chunk_table(ReplicantFanout *f)
{
	return f ? f->chunk_table : NULL;
}
