/*
 * metrics.c
 *		A pipeline's and its destinations' counters and gauges in shared
 *		memory, and
 *		replicant._metrics(), the live half of replicant.metrics (the view
 *		adds what the catalog and pg_replication_slots know: lag in bytes,
 *		retained WAL, backfill progress, the state of a stopped pipeline).
 *
 * Every counter is updated where the slot's delivered counters already
 * are, under the same lock: reading them takes the lock shared once and
 * scans no table.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "metrics.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(replicant_metrics);

/* The histogram's upper bounds, in seconds, as le labels print them. */
static const double latency_bounds[REPLICANT_LATENCY_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const char *const latency_labels[REPLICANT_LATENCY_BUCKETS + 1] = {
	"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
	"1", "2.5", "5", "10", "+Inf"};

static const char *const retry_classes[REPLICANT_RETRY_CLASSES] = {
	"transport", "1xx", "2xx", "3xx", "4xx", "5xx"};

const char *
replicant_metrics_status_class(long http_status)
{
	if (http_status < 100 || http_status > 599)
		return retry_classes[0];
	return retry_classes[http_status / 100];
}

void
replicant_metrics_retry(ReplicantDestinationSlot *destination, long http_status)
{
	int index = (http_status < 100 || http_status > 599) ? 0 : (int) (http_status / 100);

	destination->metrics.retries[index]++;
}

void
replicant_metrics_pending(ReplicantDestinationSlot *destination, const ReplicantBatch *batch,
						  int first)
{
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	destination->metrics.oldest_pending_commit = first < batch->ntxns ? batch->txns[first].commit_time : 0;
	LWLockRelease(replicant_shmem->lock);
}

void
replicant_metrics_acknowledged(ReplicantDestinationSlot *destination, const ReplicantBatch *batch,
							   int first, int last, TimestampTz now)
{
	ReplicantMetrics *m = &destination->metrics;
	uint64 counts[REPLICANT_LATENCY_BUCKETS + 1] = {0};
	uint64 count = 0;
	double sum = 0;

	/* Bucketed first: the shared lock is held for the sums only, whatever the batch's size. */
	for (int t = first; t <= last; t++)
	{
		double seconds = Max(0, now - batch->txns[t].commit_time) / 1000000.0;
		int i;

		for (i = 0; i < REPLICANT_LATENCY_BUCKETS; i++)
			if (seconds <= latency_bounds[i])
				break;
		counts[i]++;
		count++;
		sum += seconds;
	}
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	for (int i = 0; i <= REPLICANT_LATENCY_BUCKETS; i++)
		m->latency_buckets[i] += counts[i];
	m->latency_count += count;
	m->latency_sum += sum;
	m->oldest_pending_commit = last + 1 < batch->ntxns ? batch->txns[last + 1].commit_time : 0;
	LWLockRelease(replicant_shmem->lock);
}

void
replicant_metrics_progressed(ReplicantPipelineSlot *slot)
{
	TimestampTz at = GetCurrentTimestamp();

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	slot->last_progress = at;
	LWLockRelease(replicant_shmem->lock);
}

/*
 * The number replicant_state shows (README, "Monitoring"): 0 starting,
 * 1 snapshotting, 2 streaming, 3 retrying, 4 halted, 9 behind; the view
 * adds 5 disabled and 7 standby; 6 is resync_pending's, 8 resyncing's.
 */
static int
state_number(ReplicantWorkerState state)
{
	switch (state)
	{
		case REPLICANT_STATE_STARTING:
			return 0;
		case REPLICANT_STATE_SNAPSHOTTING:
			return 1;
		case REPLICANT_STATE_STREAMING:
			return 2;
		case REPLICANT_STATE_RETRYING:
			return 3;
		case REPLICANT_STATE_HALTED:
			return 4;
		case REPLICANT_STATE_BEHIND:
			return 9;
	}
	return 0;
}

typedef struct MetricsOut
{
	ReturnSetInfo *rsinfo;
	const char *pipeline;
	const char *destination; /* NULL: a metric of the pipeline's */
} MetricsOut;

/* One row: pipeline, metric, status_class, le, value, destination. */
static void
put(MetricsOut *out, const char *metric, const char *status_class, const char *le, double value)
{
	Datum values[6];
	bool nulls[6] = {0};

	values[0] = CStringGetTextDatum(out->pipeline);
	values[1] = CStringGetTextDatum(metric);
	values[2] = status_class ? CStringGetTextDatum(status_class) : (Datum) 0;
	nulls[2] = (status_class == NULL);
	values[3] = le ? CStringGetTextDatum(le) : (Datum) 0;
	nulls[3] = (le == NULL);
	values[4] = Float8GetDatum(value);
	values[5] = out->destination ? CStringGetTextDatum(out->destination) : (Datum) 0;
	nulls[5] = (out->destination == NULL);
	tuplestore_putvalues(out->rsinfo->setResult, out->rsinfo->setDesc, values, nulls);
}

static double
epoch_seconds(TimestampTz t)
{
	return (t - SetEpochTimestamp()) / 1000000.0;
}

/*
 * One destination's rows, read under the lock; at: the time lag_seconds
 * counts to.  A destination not mirrored yet (0.2.0's objects, until a
 * sync after the update) shows none.
 */
static void
put_destination(MetricsOut *out, const ReplicantDestinationSlot *destination, TimestampTz at)
{
	const ReplicantMetrics *m = &destination->metrics;
	uint64 cumulative = 0;
	int i;

	if (destination->name[0] == '\0')
		return;
	out->destination = destination->name;
	put(out, "replicant_transactions_delivered_total", NULL, NULL, destination->transactions_delivered);
	put(out, "replicant_changes_delivered_total", NULL, NULL, destination->changes_delivered);
	put(out, "replicant_batches_delivered_total", NULL, NULL, destination->batches_delivered);
	put(out, "replicant_bytes_delivered_total", NULL, NULL, destination->bytes_delivered);
	put(out, "replicant_messages_delivered_total", NULL, NULL, m->messages_delivered);
	for (i = 0; i < REPLICANT_RETRY_CLASSES; i++)
		put(out, "replicant_retries_total", retry_classes[i], NULL, m->retries[i]);
	put(out, "replicant_halts_total", NULL, NULL, m->halts);
	put(out, "replicant_rewinds_total", NULL, NULL, m->rewinds);
	put(out, "replicant_disabled_by_sink", NULL, NULL, m->disabled_by_sink ? 1 : 0);
	put(out, "replicant_state", NULL, NULL, state_number(destination->state));
	put(out, "replicant_lag_seconds", NULL, NULL,
		m->oldest_pending_commit == 0 ? 0 : Max(0, at - m->oldest_pending_commit) / 1000000.0);
	if (destination->last_delivery_at != 0)
		put(out, "replicant_last_delivery_timestamp_seconds", NULL, NULL,
			epoch_seconds(destination->last_delivery_at));
	for (i = 0; i <= REPLICANT_LATENCY_BUCKETS; i++)
	{
		cumulative += m->latency_buckets[i];
		put(out, "replicant_delivery_latency_seconds_bucket", NULL, latency_labels[i], cumulative);
	}
	put(out, "replicant_delivery_latency_seconds_sum", NULL, NULL, m->latency_sum);
	put(out, "replicant_delivery_latency_seconds_count", NULL, NULL, m->latency_count);
}

/* The pipeline's own rows (destination NULL), then each destination's. */
static void
put_slot(MetricsOut *out, const ReplicantPipelineSlot *slot, TimestampTz at)
{
	out->destination = NULL;
	put(out, "replicant_worker_starts_total", NULL, NULL, slot->worker_starts);
	if (slot->last_progress != 0)
		put(out, "replicant_last_progress_timestamp_seconds", NULL, NULL,
			epoch_seconds(slot->last_progress));
	for (int i = 0; i < replicant_shmem_ndestinations(slot); i++)
		put_destination(out, &slot->destinations[i], at);
}

/*
 * replicant._metrics(): the live metrics of this database's pipelines, one
 * row per pipeline, metric, label set and destination.  Executable by PUBLIC, since the
 * view runs it with the privileges of whoever reads it: the view's own
 * privilege (pg_monitor, replicant_admin) is the gate.
 */
Datum
replicant_metrics(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid nspid = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid viewid = get_relname_relid("metrics", nspid);
	TimestampTz at = GetCurrentTimestamp();
	MetricsOut out = {rsinfo, NULL, NULL};

	if (!OidIsValid(viewid) || pg_class_aclcheck(viewid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for view metrics"),
				 errhint("Members of pg_monitor and replicant_admin may read it.")));
	InitMaterializedSRF(fcinfo, 0);
	if (!replicant_shmem_ready())
		PG_RETURN_VOID();

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (int i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		out.pipeline = slot->name;
		put_slot(&out, slot, at);
	}
	LWLockRelease(replicant_shmem->lock);
	PG_RETURN_VOID();
}
