/*
 * delivery_set.c
 *		Rounds of requests, one per destination, sent side by side.
 *
 * A round starts the request of each destination whose attempt is due on
 * its own transport, then waits on one WaitEventSet over the latch,
 * postmaster death and what every started request waits on (its
 * transport's wait sources) and polls them, until each is answered.  A
 * retried answer does not block the round: the destination's backoff is
 * state of its own (ReplicantRetryState, delivery.c), and a later round
 * starts its next attempt once it is due.  One request is in flight per
 * destination.
 *
 * Transports are polled, never waited in, so interrupts are answered here,
 * outside the libraries' frames (docs/internals.md §8).  A latch set while
 * the round waits is set again when it ends, for the caller's own wait.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "checkpoint.h"
#include "compat.h"
#include "delivery_set.h"
#include "fault.h"

void
replicant_delivery_begin(ReplicantDelivery *delivery, ReplicantPipelineSlot *slot,
						 ReplicantTransport *sink, const char *webhook_id, ReplicantBody *body)
{
	replicant_delivery_check_for_interrupts(slot);
	replicant_fault("deliver");
	replicant_checkpoint_make_durable();
	memset(delivery, 0, sizeof(*delivery));
	delivery->slot = slot;
	delivery->place = replicant_shmem_only_destination(slot);
	delivery->sink = sink;
	delivery->webhook_id = webhook_id;
	delivery->body = body;
}

void
replicant_delivery_started(ReplicantDelivery *delivery, ReplicantPipelineSlot *slot,
						   ReplicantTransport *sink, const char *webhook_id, ReplicantBody *body)
{
	memset(delivery, 0, sizeof(*delivery));
	delivery->slot = slot;
	delivery->place = replicant_shmem_only_destination(slot);
	delivery->sink = sink;
	delivery->webhook_id = webhook_id;
	delivery->body = body;
	delivery->in_flight = true;
}

/* Drops every request in flight: after an error, or before a SIGTERM ends the process. */
static void
cancel_all(ReplicantDelivery *const *set, int n)
{
	int i;

	for (i = 0; i < n; i++)
	{
		if (set[i]->in_flight)
			replicant_transport_cancel(set[i]->sink);
		set[i]->in_flight = false;
	}
}

/* Polls the request in flight; takes its answer once it came. */
static void
poll_delivery(ReplicantDelivery *delivery)
{
	if (!delivery->in_flight || !replicant_transport_poll(delivery->sink, &delivery->result))
		return;
	delivery->in_flight = false;
	delivery->answered = replicant_delivery_answered(delivery->slot, delivery->place, &delivery->retry,
													 &delivery->result);
}

/* Whether a delivery waits for its next attempt's time. */
static bool
backing_off(const ReplicantDelivery *delivery)
{
	return !delivery->answered && !delivery->in_flight && delivery->retry.next_attempt_at != 0;
}

/*
 * Waits up to timeout ms (-1: no limit) on the latch, postmaster death and
 * sources; resets the latch if it was set, and says so in *latch_was_set.
 */
static void
wait_on(const ReplicantWaitSource *sources, int nsources, long timeout, bool *latch_was_set)
{
	WaitEventSet *wes = REPLICANT_CREATE_WAIT_EVENT_SET(CurrentMemoryContext, nsources + 2);
	WaitEvent occurred[REPLICANT_MAX_WAIT_SOURCES + 2];
	int nfired = 0;
	int i;

	PG_TRY();
	{
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		for (i = 0; i < nsources; i++)
			AddWaitEventToSet(wes, sources[i].events, sources[i].fd, NULL, NULL);
		nfired = WaitEventSetWait(wes, timeout, occurred, lengthof(occurred),
								  PG_WAIT_EXTENSION);
	}
	PG_CATCH();
	{
		FreeWaitEventSet(wes);
		PG_RE_THROW();
	}
	PG_END_TRY();
	FreeWaitEventSet(wes);
	for (i = 0; i < nfired; i++)
	{
		if (occurred[i].events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			*latch_was_set = true;
		}
	}
}

/*
 * Waits once, up to what the requests in flight and the retries allow, on
 * the latch, postmaster death and every started request's wait sources;
 * then answers interrupts.  While something is in flight a SIGTERM takes
 * the answers that came with it and drops what is still in flight; with
 * nothing in flight the wait is a retry's, which also looks at the slot's
 * WAL budget.
 */
static void
wait_once(ReplicantDelivery *const *set, int n, bool *latch_was_set)
{
	ReplicantPipelineSlot *slot = set[0]->slot;
	ReplicantWaitSource *sources = palloc(sizeof(ReplicantWaitSource) * n * REPLICANT_MAX_WAIT_SOURCES);
	int nsources = 0;
	long timeout = -1;
	bool in_flight = false;
	int i;

	for (i = 0; i < n; i++)
	{
		long t = -1;

		if (set[i]->in_flight)
		{
			in_flight = true;
			nsources += replicant_transport_wait_sources(set[i]->sink, sources + nsources, &t);
		}
		else if (backing_off(set[i]))
			t = replicant_delivery_retry_wait_ms(&set[i]->retry);
		if (t >= 0 && (timeout < 0 || t < timeout))
			timeout = t;
	}

	if (timeout != 0)
		wait_on(sources, nsources, timeout, latch_was_set);
	pfree(sources);

	if (in_flight)
	{
		/*
		 * A SIGTERM: an answer that came with it is taken (the caller
		 * checkpoints it before it stops, at its next interrupt check);
		 * what is still in flight is dropped, and what was acknowledged is
		 * committed before the process ends.
		 */
		if (ProcDiePending)
		{
			bool answered = true;

			for (i = 0; i < n; i++)
			{
				poll_delivery(set[i]);
				answered = answered && !set[i]->in_flight;
			}
			if (answered)
				return;
			cancel_all(set, n);
			replicant_delivery_check_for_interrupts(slot);
		}
		CHECK_FOR_INTERRUPTS();
	}
	else
	{
		replicant_delivery_check_for_interrupts(slot);
		replicant_delivery_reload_config();
		replicant_delivery_check_slot(slot);
	}
}

/*
 * Whether a round that started nothing may end: a retry came due (a later
 * round starts it), or nothing is left to send.
 */
static bool
retry_came_due(ReplicantDelivery *const *set, int n)
{
	bool pending = false;
	int i;

	for (i = 0; i < n; i++)
	{
		if (set[i]->answered)
			continue;
		pending = true;
		if (replicant_delivery_retry_due(set[i]->slot, set[i]->place, &set[i]->retry))
			return true;
	}
	return !pending;
}

/* Whether a delivery not in flight has its next attempt due: a later round starts it. */
static bool
attempt_due(ReplicantDelivery *const *set, int n)
{
	for (int i = 0; i < n; i++)
		if (!set[i]->answered && !set[i]->in_flight &&
			replicant_delivery_retry_due(set[i]->slot, set[i]->place, &set[i]->retry))
			return true;
	return false;
}

/*
 * The round, without the cleanup after an error.  first: it ends as soon
 * as one request in flight has an answer, or an attempt is due.
 */
static void
run_round(ReplicantDelivery *const *set, int n, bool first, bool *latch_was_set)
{
	bool started = false;
	int i;

	for (i = 0; i < n; i++)
	{
		ReplicantDelivery *d = set[i];

		if (!d->answered && !d->in_flight && replicant_delivery_retry_due(d->slot, d->place, &d->retry))
		{
			replicant_transport_start(d->sink, d->webhook_id, d->body);
			d->in_flight = true;
		}
		started = started || d->in_flight;
	}
	for (;;)
	{
		bool in_flight = false;
		bool came = false;

		for (i = 0; i < n; i++)
		{
			bool was_in_flight = set[i]->in_flight;

			poll_delivery(set[i]);
			in_flight = in_flight || set[i]->in_flight;
			came = came || (was_in_flight && !set[i]->in_flight);
		}
		if (!in_flight && (started || retry_came_due(set, n)))
			break;
		if (first && (came || attempt_due(set, n)))
			break;
		wait_once(set, n, latch_was_set);
	}
}

/* A round; first: until the first answer (run_round). */
static void
round_of(ReplicantDelivery *const *set, int n, bool first)
{
	bool latch_was_set = false;

	Assert(n > 0);
	/* a request a SIGTERM dropped must end the process, not be sent again */
	Assert(InterruptHoldoffCount == 0 && CritSectionCount == 0);
	PG_TRY();
	{
		run_round(set, n, first, &latch_was_set);
	}
	PG_CATCH();
	{
		cancel_all(set, n);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/* do not swallow a wakeup meant for the caller's own wait */
	if (latch_was_set)
		SetLatch(MyLatch);
}

void
replicant_delivery_set_round(ReplicantDelivery *const *set, int n)
{
	round_of(set, n, false);
}

void
replicant_delivery_set_round_first(ReplicantDelivery *const *set, int n)
{
	round_of(set, n, true);
}

bool
replicant_delivery_set_poll(ReplicantDelivery *const *set, int n)
{
	volatile bool came = false;

	Assert(InterruptHoldoffCount == 0 && CritSectionCount == 0);
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
		{
			ReplicantDelivery *d = set[i];

			if (!d->answered && !d->in_flight && replicant_delivery_retry_due(d->slot, d->place, &d->retry))
			{
				replicant_transport_start(d->sink, d->webhook_id, d->body);
				d->in_flight = true;
			}
			if (!d->in_flight)
				continue;
			poll_delivery(d);
			came = came || !d->in_flight;
		}
	}
	PG_CATCH();
	{
		cancel_all(set, n);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return came;
}

void
replicant_delivery_set_wait(ReplicantDelivery *const *set, int n, long timeout)
{
	ReplicantWaitSource *sources = palloc(sizeof(ReplicantWaitSource) * (n + 1) * REPLICANT_MAX_WAIT_SOURCES);
	int nsources = 0;
	bool latch_was_set = false;

	for (int i = 0; i < n; i++)
	{
		long t = -1;

		if (!set[i]->in_flight)
			continue;
		nsources += replicant_transport_wait_sources(set[i]->sink, sources + nsources, &t);
		if (t >= 0 && (timeout < 0 || t < timeout))
			timeout = t;
	}
	wait_on(sources, nsources, timeout, &latch_was_set);
	pfree(sources);
	/* the caller's cycle resets it, and looks at what woke it */
	if (latch_was_set)
		SetLatch(MyLatch);
}

void
replicant_delivery_set_run(ReplicantDelivery *const *set, int n)
{
	for (;;)
	{
		bool done = true;
		int i;

		for (i = 0; i < n; i++)
			done = done && set[i]->answered;
		if (done)
			return;
		replicant_delivery_set_round(set, n);
	}
}

void
replicant_delivery_post(ReplicantPipelineSlot *slot, ReplicantDestinationSlot *place,
						ReplicantTransport *sink, const char *webhook_id, ReplicantBody *body,
						ReplicantSinkResult *result)
{
	ReplicantDelivery delivery;
	ReplicantDelivery *set[1] = {&delivery};

	replicant_delivery_begin(&delivery, slot, sink, webhook_id, body);
	delivery.place = place;
	replicant_delivery_set_run(set, 1);
	*result = delivery.result;
}

void
replicant_delivery_post_start(ReplicantTransport *sink, const char *webhook_id,
							  ReplicantBody *body)
{
	replicant_checkpoint_make_durable();
	replicant_transport_start(sink, webhook_id, body);
}

void
replicant_delivery_post_finish(ReplicantPipelineSlot *slot, ReplicantTransport *sink,
							   const char *webhook_id, ReplicantBody *body,
							   ReplicantSinkResult *result)
{
	ReplicantDelivery delivery;
	ReplicantDelivery *set[1] = {&delivery};

	replicant_delivery_started(&delivery, slot, sink, webhook_id, body);
	replicant_delivery_set_run(set, 1);
	*result = delivery.result;
}
