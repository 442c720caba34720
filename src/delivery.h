/*
 * delivery.h
 *		Getting one request body to the sink: retries with backoff, and the
 *		fail-closed halt.  Shared by the pipeline worker and snapshot workers.
 */
#ifndef REPLICANT_DELIVERY_H
#define REPLICANT_DELIVERY_H

#include "compat.h"
#include "destination.h"
#include "pipeline.h"
#include "shmem.h"
#include "transport.h"

/* Opens the transport to the destination's sink. */
extern ReplicantTransport *replicant_delivery_sink(const ReplicantDestination *destination);

/*
 * One destination's retries of the request it is sending (delivery_set.c
 * runs them): how many attempts failed, since when, and when the next one
 * is due (0: none is waited for).  Zeroed, it is a request's first attempt.
 */
typedef struct ReplicantRetryState
{
	int attempt;
	TimestampTz first_failure;
	TimestampTz last_logged;
	TimestampTz next_attempt_at;
	uint32 retry_requests; /* slot's count of retry_pipeline() calls at the failure */
} ReplicantRetryState;

/*
 * Takes an attempt's answer for the destination at place of slot: true when it is
 * final (2xx, 413, 410, a rejection) for the caller to act on; false when
 * it is retried, the failure counted, shown and logged as today's retries
 * are, and the next attempt due at retry->next_attempt_at.  Exits when the
 * worker was asked to stop, or a SIGTERM cut the request short: call with
 * no other request in flight.
 */
extern bool replicant_delivery_answered(ReplicantPipelineSlot *slot,
										ReplicantDestinationSlot *place,
										ReplicantRetryState *retry,
										const ReplicantSinkResult *result);

/*
 * Whether the next attempt may start: its time came, retry_pipeline()
 * asked for it, or none is waited for.  When the worker was asked to stop
 * it exits instead (call with no request in flight).
 */
extern bool replicant_delivery_retry_due(ReplicantPipelineSlot *slot,
										 ReplicantDestinationSlot *place,
										 ReplicantRetryState *retry);

/*
 * Whether an attempt waits for its time: replicant_delivery_retry_due()
 * would say no.  Changes nothing.
 */
extern bool replicant_delivery_retry_waiting(ReplicantPipelineSlot *slot,
											 const ReplicantRetryState *retry);

/*
 * How long a wait may last before replicant_delivery_retry_due() is asked
 * again: until the attempt is due, but short enough to see a
 * retry_pipeline() of a process whose latch it cannot set.
 */
extern long replicant_delivery_retry_wait_ms(const ReplicantRetryState *retry);

/*
 * Halts the pipeline fail-closed: records the value-free reason in the
 * catalog and in slot, and exits so that nothing restarts it until
 * resume_pipeline.  Aborts any open transaction first.  A pipeline halted
 * or disabled already keeps what stopped it; the process just exits.
 */
REPLICANT_NORETURN extern void replicant_delivery_halt(ReplicantPipelineSlot *slot,
													   ReplicantPipeline *pipeline,
													   const char *reason);

/*
 * The same, for a halt met decoding the commit at lsn, whose cause (or
 * NULL) resume_pipeline then accepts for the commits up to the resume.
 */
REPLICANT_NORETURN extern void replicant_delivery_halt_at(ReplicantPipelineSlot *slot,
														  ReplicantPipeline *pipeline,
														  const char *reason, XLogRecPtr lsn,
														  const char *cause);

/*
 * Acts on a final answer that is not a 2xx: 410 Gone disables the pipeline,
 * as Standard Webhooks asks; anything else halts it.  The reason reads
 * "sink rejected <what>: HTTP <status><context>".  Does not return.
 */
extern void replicant_delivery_refused(ReplicantPipelineSlot *slot,
									   ReplicantPipeline *pipeline,
									   const ReplicantSinkResult *result,
									   const char *what,
									   const char *context);

/* The reason replicant_delivery_refused() records, value-free. */
extern char *replicant_delivery_refusal(const ReplicantSinkResult *result, const char *what,
										const char *context);

/*
 * Exits (code 0) if the slot's worker was asked to stop and the caller is
 * that worker, with the pending checkpoint committed and on disk with the
 * slot's position, so that the next worker re-delivers nothing.  Call only
 * where no request is in flight.
 */
extern void replicant_delivery_stop_if_requested(ReplicantPipelineSlot *slot);

/* Whether the slot's worker was asked to stop, and the caller is that worker. */
extern bool replicant_delivery_stop_is_requested(ReplicantPipelineSlot *slot);

/*
 * CHECK_FOR_INTERRUPTS for a worker that may hold acknowledged, uncommitted
 * progress: a SIGTERM (a shutdown, pg_terminate_backend, a stop replicant
 * asked for) still ends it, but only after the pending checkpoint is
 * committed, so that the next worker re-sends only what the sink did not
 * acknowledge; a shutdown or termination starts the count of runs without
 * progress over (runs.c).  Not for a pipeline being dropped: its
 * checkpoint row is gone.
 */
extern void replicant_delivery_check_for_interrupts(ReplicantPipelineSlot *slot);

/*
 * Whether the caller, the slot's worker, may commit its pending checkpoint
 * as it stops: not when its pipeline is being dropped or is gone.
 */
extern bool replicant_delivery_may_commit_at_stop(ReplicantPipelineSlot *slot);

/*
 * Sleeps until deadline, or less when the worker is asked to stop, answering
 * interrupts and reloads meanwhile.  Latch wake-ups (commits) do not end it,
 * and it resets the latch: a caller that waits on it next must first look
 * for what may have set it.
 */
extern void replicant_delivery_sleep_until(ReplicantPipelineSlot *slot, TimestampTz deadline);

/* Whether an error of this class may pass, so that a retry can succeed. */
extern bool replicant_delivery_error_is_transient(int sqlerrcode);

/*
 * A failure's value-free reason: the phase, the table (NULL or "" when none
 * is involved) and the error class, never the message, which could quote a
 * value.
 */
extern char *replicant_delivery_failure(ReplicantPhase phase, const char *table,
										int sqlerrcode);

/*
 * Acts on an error a pipeline's process caught and copied (edata; the error
 * state is flushed, no transaction is open): one that is transient is
 * thrown again, so that the process exits and the launcher restarts the
 * pipeline, with reason left in slot for the halt that ends
 * REPLICANT_MAX_RETRIES restarts without progress; any other halts the
 * pipeline with reason at once.  Does not return.
 */
REPLICANT_NORETURN extern void replicant_delivery_fail(ReplicantPipelineSlot *slot,
													   ReplicantPipeline *pipeline,
													   ErrorData *edata, const char *reason);

/*
 * Past the max_retained_wal of every destination holding the slot
 * (slot_health.h), gives the slot this process streams from up and halts
 * with the reason; past some destinations' own, commits what the sinks
 * acknowledged, and those still past give their hold up
 * (replicant_destination_release) before the process exits for an
 * immediate restart without them.  Neither returns (a request still in
 * flight is dropped: sent again after the restart, at least once).
 * Otherwise notes the WAL the slot retains, for the warning.
 */
extern void replicant_delivery_check_slot(ReplicantPipelineSlot *slot);

/* Handles a pending SIGHUP. */
extern void replicant_delivery_reload_config(void);

#endif /* REPLICANT_DELIVERY_H */
