/*
 * metrics.h
 *		Counting into a pipeline's metrics (ReplicantMetrics, in its shared
 *		memory slot), behind replicant.metrics.
 */
#ifndef REPLICANT_METRICS_H
#define REPLICANT_METRICS_H

#include "datatype/timestamp.h"

#include "batch.h"
#include "shmem.h"

/*
 * Counts a retry of the destination's sink; the caller holds the shared
 * memory lock exclusively (the update rides on the lock the destination's
 * other counters take).
 */
extern void replicant_metrics_retry(ReplicantDestinationSlot *destination, long http_status);

/*
 * These take the lock themselves.  pending: transaction first of the batch
 * (none past its end) is the oldest one not acknowledged, whose commit time
 * replicant_lag_seconds counts from.  acknowledged: the sink took
 * transactions [first, last] at now; counts their commit-to-acknowledgement
 * times, and the next one is pending.
 */
extern void replicant_metrics_pending(ReplicantDestinationSlot *destination,
									  const ReplicantBatch *batch, int first);
extern void replicant_metrics_acknowledged(ReplicantDestinationSlot *destination,
										   const ReplicantBatch *batch, int first, int last,
										   TimestampTz now);

/* The streaming worker made progress now (replicant_last_progress_timestamp_seconds). */
extern void replicant_metrics_progressed(ReplicantPipelineSlot *slot);

/* The retry class of an answer: "transport" (none), "1xx" ... "5xx". */
extern const char *replicant_metrics_status_class(long http_status);

#endif /* REPLICANT_METRICS_H */
