/*
 * delivery.h
 *		Getting one request body to the sink: retries with backoff, and the
 *		fail-closed halt.  Shared by the pipeline worker and snapshot workers.
 */
#ifndef REPLICANT_DELIVERY_H
#define REPLICANT_DELIVERY_H

#include "pipeline.h"
#include "shmem.h"
#include "sink_http.h"

/*
 * POSTs body until the sink gives an answer that is not retried (2xx, 413,
 * 410, or a rejection); retried failures show as state "retrying" with a
 * growing retry count in slot.  Answers interrupts while it waits.
 */
extern void replicant_delivery_post(ReplicantPipelineSlot *slot, ReplicantSink *sink,
									const char *webhook_id, ReplicantBody *body,
									ReplicantSinkResult *result);

/*
 * Halts the pipeline fail-closed: records the value-free reason in the
 * catalog and in slot, and exits so that nothing restarts it until
 * resume_pipeline.  Aborts any open transaction first.
 */
extern void replicant_delivery_halt(ReplicantPipelineSlot *slot,
									ReplicantPipeline *pipeline,
									const char *reason) pg_attribute_noreturn();

/* Sleeps ms milliseconds on the latch, answering interrupts and SIGHUP. */
extern void replicant_delivery_sleep(long ms);

/* Handles a pending SIGHUP. */
extern void replicant_delivery_reload_config(void);

#endif							/* REPLICANT_DELIVERY_H */
