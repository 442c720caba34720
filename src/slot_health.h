/*
 * slot_health.h
 *		A pipeline slot's lifecycle: why a slot is lost, the WAL it retains,
 *		the early warning, and the pipeline's budget (max_retained_wal).
 */
#ifndef REPLICANT_SLOT_HEALTH_H
#define REPLICANT_SLOT_HEALTH_H

#include "destination.h"
#include "pipeline.h"

/* What the reason of a missing slot ends with: the remedy, without a resync. */
#define REPLICANT_SLOT_MISSING_REMEDY ": recreate the pipeline with a snapshot"

/*
 * Acquires the slot as MyReplicationSlot.  Returns NULL, or a value-free
 * reason why the slot is lost (it does not exist, is foreign, or was
 * invalidated, for any cause the server reports), holding nothing then.
 * Call inside a transaction.
 */
extern char *replicant_slot_health_acquire(const char *name);

/*
 * max_retained_wal's value in bytes, parsed as a setting in megabytes is
 * ('20GB', '512MB', '1024': megabytes); an error if it is not one, or is
 * under 1MB.  none_ok: -1 is accepted too (alter_pipeline: no budget), and
 * returned as -1.
 */
extern int64 replicant_slot_health_parse_budget(const char *value, bool none_ok);

/*
 * From now on this process holds the pipeline's slot (MyReplicationSlot)
 * while streaming: replicant_slot_health_check watches it.
 */
extern void replicant_slot_health_watch(ReplicantPipeline *pipeline);

/* The pipeline watched, or NULL. */
extern ReplicantPipeline *replicant_slot_health_watched(void);

/*
 * Looks at the WAL the watched slot retains: logs a warning (once, then
 * every few minutes while it lasts) when it passes 80 % of the budget or
 * safe_wal_size falls under 20 % of max_slot_wal_keep_size.  Returns the
 * value-free reason to give the slot up when every destination holding it
 * is past its own max_retained_wal; otherwise NULL (also when nothing is
 * watched), with release[i] set for the i-th destination of the pipeline
 * when it alone is past its budget and gives its hold up (release has
 * REPLICANT_MAX_DESTINATIONS places, each one set).  Cheap: two
 * spinlocks and a look at each destination's checkpoint.
 */
extern char *replicant_slot_health_check(bool *release);

/* Why destination gives its hold up (value-free), as the check found it. */
extern char *replicant_slot_health_release_reason(const ReplicantDestination *destination);

/*
 * The sink failed a request (retried): after a resync, the slot may be
 * given up again before the stream caught up with the WAL of its reads.
 */
extern void replicant_slot_health_sink_failed(void);
extern bool replicant_slot_health_caught_up(void);

/*
 * Drops the watched slot, which this process holds: the server frees the
 * WAL it retained at its next checkpoint.
 */
extern void replicant_slot_health_give_up(void);

#endif /* REPLICANT_SLOT_HEALTH_H */
