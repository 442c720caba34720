/*
 * delivery_set.h
 *		A round of requests, one per destination, sent side by side: each
 *		starts on its own transport and one wait serves them all until each
 *		is answered.
 */
#ifndef REPLICANT_DELIVERY_SET_H
#define REPLICANT_DELIVERY_SET_H

#include "delivery.h"

/* One destination's request in rounds: one in flight per destination. */
typedef struct ReplicantDelivery
{
	ReplicantPipelineSlot *slot;
	ReplicantDestinationSlot *place; /* what its answers show on */
	ReplicantTransport *sink;
	const char *webhook_id; /* these two stay unchanged until answered */
	ReplicantBody *body;
	bool in_flight;             /* started on sink, not answered yet */
	bool answered;              /* result holds a final answer to act on */
	ReplicantSinkResult result; /* the last attempt's answer */
	ReplicantRetryState retry;
} ReplicantDelivery;

/*
 * Readies delivery for its first attempt at body, after the checks every
 * request passes before it leaves: interrupts, the "deliver" fault point,
 * the committed checkpoint on disk (replicant_checkpoint_make_durable).
 * Its answers show on the slot's first destination unless the caller sets
 * delivery->place.
 */
extern void replicant_delivery_begin(ReplicantDelivery *delivery, ReplicantPipelineSlot *slot,
									 ReplicantTransport *sink, const char *webhook_id,
									 ReplicantBody *body);

/* The same for a first attempt the caller started already (replicant_delivery_post_start). */
extern void replicant_delivery_started(ReplicantDelivery *delivery, ReplicantPipelineSlot *slot,
									   ReplicantTransport *sink, const char *webhook_id,
									   ReplicantBody *body);

/*
 * One round: starts the attempt of every delivery not answered whose
 * attempt is due, then waits on the latch, postmaster death and every
 * started request's wait sources until each started one is answered; a
 * retried answer schedules its next attempt (a later round's).  A round
 * that starts nothing waits until the first attempt is due.  Interrupts are
 * answered between polls, outside the transports' libraries; a SIGTERM
 * drops what is in flight and commits what was acknowledged before the
 * process ends.  A latch set meanwhile is set again on return.
 */
extern void replicant_delivery_set_round(ReplicantDelivery *const *set, int n);

/*
 * The same round, but it ends as soon as one request in flight has an
 * answer (its own final answer, or a retried one) or a delivery's next
 * attempt is due: the others stay in flight, for a later round to poll.
 */
extern void replicant_delivery_set_round_first(ReplicantDelivery *const *set, int n);

/*
 * Starts every attempt of the set that is due and polls the requests in
 * flight once, without waiting; whether one had an answer (final, or
 * retried).
 */
extern bool replicant_delivery_set_poll(ReplicantDelivery *const *set, int n);

/*
 * Waits up to timeout ms (-1: no limit) on the latch, postmaster death and
 * the wait sources of the set's requests in flight (n may be 0), without
 * polling them:
 * the worker's rest between cycles while a slow sink's request is out.  A
 * latch set meanwhile stays set.
 */
extern void replicant_delivery_set_wait(ReplicantDelivery *const *set, int n, long timeout);

/* Rounds until every delivery of the set has its final answer. */
extern void replicant_delivery_set_run(ReplicantDelivery *const *set, int n);

/*
 * POSTs body until the sink gives an answer that is not retried (2xx, 413,
 * 410, or a rejection), in a round of its own (delivery_set.h); retried
 * failures show as state "retrying" with a growing retry count at place,
 * a destination of slot.
 * Answers interrupts while it waits.
 */
extern void replicant_delivery_post(ReplicantPipelineSlot *slot, ReplicantDestinationSlot *place,
									ReplicantTransport *sink, const char *webhook_id,
									ReplicantBody *body, ReplicantSinkResult *result);

/*
 * replicant_delivery_post() in two steps, the first attempt overlapped with
 * the caller's work (see replicant_transport_start()): _start() sends, and
 * _finish() waits for its answer and retries as replicant_delivery_post()
 * does.  webhook_id and body must stay unchanged in between.
 */
extern void replicant_delivery_post_start(ReplicantTransport *sink, const char *webhook_id,
										  ReplicantBody *body);
extern void replicant_delivery_post_finish(ReplicantPipelineSlot *slot, ReplicantTransport *sink,
										   const char *webhook_id, ReplicantBody *body,
										   ReplicantSinkResult *result);

#endif /* REPLICANT_DELIVERY_SET_H */
