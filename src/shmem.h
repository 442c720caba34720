/*
 * shmem.h
 *		Shared memory: one slot per pipeline known to any database, the
 *		launcher's mailbox, and the commit-time nudge that wakes workers.
 */
#ifndef REPLICANT_SHMEM_H
#define REPLICANT_SHMEM_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "replicant.h"

/* Upper bounds of the commit-to-acknowledgement histogram, then +Inf. */
#define REPLICANT_LATENCY_BUCKETS 13

/* Retries by the sink's answer: no answer (transport), then 1xx ... 5xx. */
#define REPLICANT_RETRY_CLASSES 6

/* Destinations of one pipeline at most (docs/destinations-design.md). */
#define REPLICANT_MAX_DESTINATIONS 16

/*
 * A destination's metrics, kept in its place in the pipeline's slot, under
 * the shared memory lock, like the delivered counters beside them; zeroed
 * when the slot is given to a pipeline or the place to another destination
 * (sync.c), so that only a server restart (or dropping the pipeline)
 * resets them.
 */
typedef struct ReplicantMetrics
{
	uint64 messages_delivered;
	uint64 retries[REPLICANT_RETRY_CLASSES];
	uint64 halts;
	/* Times the worker started again to catch it up after it fell behind (fanout.c). */
	uint64 rewinds;
	/* Disabled by the sink's 410 Gone, until enabled again (not kept over a restart). */
	bool disabled_by_sink;
	/* Commit time of the oldest transaction decoded and not acknowledged; 0: none. */
	TimestampTz oldest_pending_commit;
	/* Transactions by commit-to-acknowledgement time (not cumulative; last: +Inf). */
	uint64 latency_buckets[REPLICANT_LATENCY_BUCKETS + 1];
	uint64 latency_count;
	double latency_sum; /* seconds */
} ReplicantMetrics;

typedef enum ReplicantWorkerState
{
	REPLICANT_STATE_STARTING = 0,
	REPLICANT_STATE_SNAPSHOTTING,
	REPLICANT_STATE_STREAMING,
	REPLICANT_STATE_RETRYING,
	REPLICANT_STATE_HALTED,
	REPLICANT_STATE_BEHIND /* left behind, its sink answering: waits to catch up */
} ReplicantWorkerState;

/*
 * What a pipeline's processes are doing: the phase a failure's reason
 * names (replicant_phase_name()).
 */
typedef enum ReplicantPhase
{
	REPLICANT_PHASE_STARTING = 0,
	REPLICANT_PHASE_SNAPSHOT,      /* planning an initial snapshot, its markers */
	REPLICANT_PHASE_DECODE,        /* reading WAL, deciding what is delivered */
	REPLICANT_PHASE_ENCODE,        /* rendering a decoded change */
	REPLICANT_PHASE_DELIVER,       /* sending a request */
	REPLICANT_PHASE_CHECKPOINT,    /* committing the checkpoint */
	REPLICANT_PHASE_SNAPSHOT_READ, /* a shard worker reading a table */
	REPLICANT_PHASE_BACKFILL_READ, /* reading a backfill chunk */
	REPLICANT_PHASE_SYNC           /* a sync worker reading the pipelines */
} ReplicantPhase;

/*
 * A failure that may pass is retried (its worker restarted) at most this
 * many times while the pipeline makes no progress; the next one halts.
 */
#define REPLICANT_MAX_RETRIES 10

#define REPLICANT_MAX_DIRTY_DBS 32
/* Sync workers running at once. */
#define REPLICANT_MAX_SYNCS 4
/* Requests whose durations make replicant.status.sink_latency_ms. */
#define REPLICANT_LATENCY_SAMPLES 32
/* Snapshot workers of one pipeline at most (option snapshot_workers). */
#define REPLICANT_MAX_SNAPSHOT_WORKERS 16

/*
 * The rows a snapshot worker delivered (acknowledged) of the window it
 * reads, which its shard's progress records only once the window is done.
 * replicant.backfill_status adds them while the shard's recorded
 * next_block is still window_block.
 */
typedef struct ReplicantWindowProgress
{
	int64 backfill_id; /* 0: none */
	int32 shard;
	int64 window_block;
	int64 rows;
} ReplicantWindowProgress;

/*
 * What a pipeline shows per destination: its sink's answers and what they
 * did.  A pipeline has one destination at run time today, index 0, which
 * its processes write where they wrote the pipeline's slot before; id and
 * name mirror replicant.destinations (sync.c; 0 and "" under 0.2.0's
 * objects, before the update made that table).
 */
typedef struct ReplicantDestinationSlot
{
	int32 id;
	char name[NAMEDATALEN];
	ReplicantWorkerState state;
	bool slot_released; /* gave its hold on the slot up: out of the roll-up */
	uint64 transactions_delivered;
	uint64 changes_delivered;
	uint64 batches_delivered;
	uint64 bytes_delivered;
	uint64 retries;
	TimestampTz last_delivery_at;
	char last_error[REPLICANT_ERROR_LEN];
	TimestampTz next_retry_at;                    /* while a retry waits: its time; else 0 */
	int last_http_status;                         /* 0: none yet, or no HTTP answer */
	float4 latency_ms[REPLICANT_LATENCY_SAMPLES]; /* ring of request durations */
	int nlatency;                                 /* requests recorded, ever */
	ReplicantMetrics metrics;                     /* replicant.metrics (metrics.c) */
} ReplicantDestinationSlot;

typedef struct ReplicantPipelineSlot
{
	/* Catalog mirror, written by a database's sync worker. */
	bool in_use;
	Oid dboid;
	int32 pipeline_id;
	Oid owner;
	bool runnable; /* enabled and not halted */

	/*
	 * Set by whoever wants the worker gone (alter_pipeline, the launcher);
	 * the worker exits at its next point where everything the sink
	 * acknowledged is checkpointed and nothing is in flight.  Cleared when a
	 * worker attaches.
	 */
	bool stop_requested;
	/*
	 * Set by drop_pipeline before it stops the worker, until its
	 * transaction ends: the pipeline's row is being deleted, so no worker
	 * of it may start again (whatever a sync mirrors meanwhile), and the
	 * one stopping commits nothing (the row it would update waits for the
	 * drop, which waits for the worker).
	 */
	bool dropping;
	/*
	 * Set by a management call that stopped the worker to change the
	 * pipeline (add_destination, alter_pipeline, ...), until its
	 * transaction ends: no worker may start meanwhile, whatever a sync
	 * mirrors, or it would stream under the rows as they were before the
	 * change (api_xact.c).
	 */
	bool held;
	int32 config_version;
	char name[NAMEDATALEN];

	/* Bumped whenever the slot is given to another pipeline. */
	uint32 generation;

	/* Written by the pipeline's worker while it runs. */
	pid_t pid;
	Latch *latch;
	pg_atomic_uint32 nudged;         /* a commit set the latch since last reset */
	pg_atomic_uint32 shard_failures; /* snapshot workers that exited on error */
	pg_atomic_uint32 snapshot_stale; /* a table was rewritten after the snapshot */
	pg_atomic_uint32 retry_requests; /* bumped by retry_pipeline(): retry now */
	uint64 worker_starts;            /* replicant_worker_starts_total */
	/*
	 * When the streaming worker last made progress: it started streaming,
	 * the sink acknowledged a request, or decoding reached the end of WAL
	 * with nothing to send; 0: never since the slot was made.
	 */
	TimestampTz last_progress;

	/* The pipeline's destinations (mirrored: ndestinations, ids, names). */
	int ndestinations;
	ReplicantDestinationSlot destinations[REPLICANT_MAX_DESTINATIONS];

	/*
	 * Everything before delivered_upto was acknowledged by the sink or is
	 * not delivered by this pipeline; await_delivered() sleeps on the
	 * condition variable until it passes the LSN it waits for.
	 */
	XLogRecPtr delivered_upto;
	ConditionVariable delivered_cv;
	/* Set by await_delivered(): commit a pending checkpoint now. */
	pg_atomic_uint32 checkpoint_wanted;

	/*
	 * Bounded retries.  phase: what the pipeline's processes are doing
	 * (written by each for itself, read after it exited).  progress moves
	 * with every durable step (a checkpoint, a snapshot window, a backfill
	 * chunk); the launcher counts its worker's failed runs since progress
	 * last moved (launcher.c).  failure: why the last run failed, written by
	 * the process that failed, value-free.  halt_request: a halt the
	 * launcher decided on, which the database's sync worker records.
	 */
	ReplicantPhase phase;
	uint64 progress;
	char failure[REPLICANT_ERROR_LEN];
	char halt_request[REPLICANT_ERROR_LEN];

	/*
	 * How the worker's last run ended, for the launcher to tell the
	 * pipeline's failures from what others did to it (launcher.c); cleared
	 * when a worker attaches.  connected: it got as far as its database (a
	 * refused connection, a connection limit, is no failure of the
	 * pipeline's).  interrupted: another process terminated or cancelled it
	 * (a SIGTERM replicant did not send, a query cancel); shard_interrupted:
	 * one of its snapshot workers, which the worker then takes for its own.
	 * Written by signal handlers: one aligned word each, no lock.
	 * superseded: it exited at once, started for a configuration that
	 * changed before it attached (worker.c worker_attach; under the lock).
	 */
	bool connected;
	bool interrupted;
	bool shard_interrupted;
	bool superseded;

	/* Per snapshot worker (by its number), under the lock. */
	ReplicantWindowProgress window_progress[REPLICANT_MAX_SNAPSHOT_WORKERS];
} ReplicantPipelineSlot;

typedef struct ReplicantShmem
{
	LWLock *lock;
	pid_t launcher_pid;
	Latch *launcher_latch;

	/* Databases whose pipelines the launcher must re-read. */
	bool rescan_all;
	int ndirty;
	Oid dirty_dbs[REPLICANT_MAX_DIRTY_DBS];

	/* A database was dropped: the launcher frees its pipelines' slots. */
	bool databases_dropped;

	/* Set by the sync worker started in each of the launcher's places once it is done. */
	bool sync_done[REPLICANT_MAX_SYNCS];

	ReplicantPipelineSlot slots[FLEXIBLE_ARRAY_MEMBER];
} ReplicantShmem;

extern ReplicantShmem *replicant_shmem;

extern void replicant_shmem_init(void);
extern bool replicant_shmem_ready(void);

/* Marks a database's pipelines for re-reading and wakes the launcher. */
extern void replicant_shmem_request_sync(Oid dboid);

/* As above, but only once the current transaction commits. */
extern void replicant_shmem_request_sync_at_commit(void);

/* Returns the slot of a pipeline, or NULL; the caller holds the lock. */
extern ReplicantPipelineSlot *replicant_shmem_find(Oid dboid, int32 pipeline_id);

/*
 * Sets the state of each of the pipeline's destinations: one of the
 * pipeline's own (starting, snapshotting, streaming); _locked: the caller
 * holds the lock exclusively.
 */
extern void replicant_shmem_set_state(ReplicantPipelineSlot *slot, ReplicantWorkerState state);
extern void replicant_shmem_set_state_locked(ReplicantPipelineSlot *slot, ReplicantWorkerState state);

/* The destinations the slot shows: those mirrored, at least index 0. */
static inline int
replicant_shmem_ndestinations(const ReplicantPipelineSlot *slot)
{
	return Max(1, slot->ndestinations);
}

/*
 * The destination a pipeline's processes write: its only one at run time
 * (index 0) until a worker delivers to several.
 */
static inline ReplicantDestinationSlot *
replicant_shmem_only_destination(ReplicantPipelineSlot *slot)
{
	return &slot->destinations[0];
}

/*
 * The worst state of the pipeline's destinations (halted, retrying,
 * starting, snapshotting, streaming), and the index of the first in it:
 * what replicant.status shows for the pipeline.  The caller holds the lock.
 */
extern ReplicantWorkerState replicant_shmem_state(const ReplicantPipelineSlot *slot, int *index);

/*
 * Shows a pipeline's n destinations, by id and name, oldest first: a place
 * another destination takes starts from zero; the one place shown before
 * the update made replicant.destinations keeps its counters when it learns
 * its id.  The caller holds the lock exclusively.
 */
extern void replicant_shmem_mirror_destinations(ReplicantPipelineSlot *slot, int n,
												const int32 *ids,
												const char (*names)[NAMEDATALEN]);

/*
 * The place of the destination of id among the slot's, which its worker
 * mirrored as it started; index 0 under 0.2.0's objects (id 0).  The
 * caller holds the lock.
 */
extern ReplicantDestinationSlot *replicant_shmem_destination(ReplicantPipelineSlot *slot, int32 id);

/* Zeroes a destination's shown state and counters (a new pipeline, a new destination). */
extern void replicant_shmem_reset_destination(ReplicantDestinationSlot *destination);

extern const char *replicant_state_name(ReplicantWorkerState state);

/*
 * The slot whose phase this process keeps up to date (a pipeline or shard
 * worker's), and the phase it enters; returns the phase it left.  Inert in
 * other processes.
 */
extern void replicant_shmem_set_own_slot(ReplicantPipelineSlot *slot);
extern ReplicantPhase replicant_shmem_enter_phase(ReplicantPhase phase);

/* The phase's name, as a halt's reason gives it. */
extern const char *replicant_phase_name(ReplicantPhase phase);

/*
 * Shows a halt the launcher decided on in the slot (replicant.status reads
 * it) and keeps its worker from being started; with record, asks the
 * database's sync worker to record it in the catalog, where it outlives a
 * restart.  The caller holds the lock.
 */
extern void replicant_shmem_halt(ReplicantPipelineSlot *slot, const char *reason, bool record);

/*
 * Shows a halt of the pipeline's on each of its destinations (counted in
 * their halts); the caller holds the lock exclusively.
 */
extern void replicant_shmem_halt_destinations(ReplicantPipelineSlot *slot, const char *reason);

/* Counts a durable step of the slot's pipeline (see progress). */
extern void replicant_shmem_note_progress(ReplicantPipelineSlot *slot);

#endif /* REPLICANT_SHMEM_H */
