/*
 * pipeline.h
 *		Pipeline configuration: names, catalog access, loading and halting.
 */
#ifndef REPLICANT_PIPELINE_H
#define REPLICANT_PIPELINE_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"
#include "utils/array.h"

#include "catalog.h"
#include "change.h"
#include "destination.h"
#include "epoch.h"

typedef struct ReplicantPipeline
{
	int32 id;
	char *name;
	char *slot_name;
	Oid owner;
	List *publications;           /* of char * */
	XLogRecPtr *publication_lsns; /* per publication: delivered from here on */
	char *snapshot;
	bool enabled;
	char *halt_reason; /* NULL unless halted */
	int32 config_version;
	int snapshot_workers;
	bool messages;                    /* deliver pg_logical_emit_message() messages */
	List *message_prefixes;           /* of char *; NIL: every non-internal prefix */
	bool failover;                    /* the slot is a failover slot (17+) */
	char *resync_reason;              /* NULL unless a resync is under way (resync.h) */
	XLogRecPtr resync_lost_from;      /* its lost_from, or 0 */
	bool resync_slot_dropped;         /* the old slot is gone: a slot is the resync's */
	int32 resync_losses;              /* slot losses in a row, no batch streamed since */
	bool resync_ended;                /* this process ended a resync (slot_health.c) */
	XLogRecPtr checkpoint_commit_lsn; /* the floor's commit (checkpoint.h), or 0 */
	XLogRecPtr checkpoint_end_lsn;
	/* keys the ids of reads (change.h); random per process under 0.2.0's objects */
	uint8 event_id_key[REPLICANT_READ_ID_KEY_LEN];
	XLogRecPtr slot_created_at; /* where this process created the slot, or 0 */
	List *destinations;         /* where its changes go (of ReplicantDestination *) */

	/*
	 * What decoding goes by: the options above before each alter_pipeline
	 * call the checkpoint has not passed, oldest first, then the current
	 * ones (of ReplicantEpoch *); the halt causes resumes accepted (waiver.h).
	 */
	List *epochs;
	List *waivers;
} ReplicantPipeline;

/*
 * Pins, for the rest of a background process, the settings replicant's
 * queries and transactions depend on (search_path, the read-only default,
 * isolation, timeouts), whatever the database's or the role's settings say.
 */
extern void replicant_pin_worker_settings(void);

/*
 * Whether replicant.pipelines has this column: the library also runs under
 * the SQL objects of 0.1.0 until ALTER EXTENSION replicant UPDATE.
 */
extern bool replicant_pipeline_has_column(const char *column);

/*
 * messages => true hands over every pg_logical_emit_message() of the
 * database, which only a role that may read all of WAL (REPLICATION or
 * superuser) may receive.
 */
#define REPLICANT_MESSAGES_NEED_REPLICATION \
	"pipeline owner must have the REPLICATION attribute to receive messages"

/*
 * Raises an error unless name matches [a-z0-9_]{1,48}; what ("pipeline",
 * "destination") says what it names.
 */
extern void replicant_check_name(const char *what, const char *name);
extern void replicant_pipeline_check_name(const char *name);

/* Raises an error unless name is a plain identifier usable as a publication name. */
extern void replicant_pipeline_check_publication_name(const char *name);

/*
 * The slot name of a new pipeline of this database: "replicant<database
 * OID>_<name>", so that pipelines of one name in two databases never share
 * a slot (a name too long for that keeps its start and gets its hash), nor
 * does a pipeline created before 0.3.0, whose slot is "replicant_<name>".
 * Under the SQL objects of 0.1.0 or 0.2.0, whose rows cannot record it,
 * "replicant_<name>" as they had it; the update to 0.3.0 records that.
 */
extern char *replicant_pipeline_new_slot_name(const char *name);

/*
 * The SQL expression, over replicant.pipelines as "p", of a pipeline's slot
 * name as text.
 */
extern const char *replicant_pipeline_slot_name_sql(void);

/* A pipeline as a management function sees it. */
typedef struct ReplicantPipelineRef
{
	int32 id;
	Oid owner;
	char *name;
	char *slot_name;
	bool halted;
	bool enabled;
	ArrayType *publications; /* text[] */
} ReplicantPipelineRef;

/*
 * Looks a pipeline up by name (inside replicant_catalog_enter/leave); it
 * must exist.  With lock, the row is locked FOR UPDATE; without, as for
 * waiting on the worker, which may need to update the row (a halt) before
 * it can exit.  The result lives until replicant_catalog_leave.
 */
extern ReplicantPipelineRef replicant_pipeline_lookup(const char *name, bool lock);

/*
 * Raises an error unless userid has the privileges of the pipeline's owner
 * (is it, a member of it, or a superuser): what managing a pipeline takes.
 */
extern void replicant_pipeline_check_owner(const ReplicantPipelineRef *ref, Oid userid);

/*
 * Loads a pipeline and its checkpoint (inside replicant_catalog_begin/end,
 * as the first access of that transaction: it waits for the lock on
 * replicant.pipelines and then replaces the transaction's snapshot); the
 * result is allocated in mcxt.  Returns NULL if it no longer exists.
 */
extern ReplicantPipeline *replicant_pipeline_load(int32 id, MemoryContext mcxt);

/*
 * The pipeline's one destination: what an initial snapshot and a resync
 * send to, which only a pipeline of one destination runs
 * (docs/destinations-design.md §4 is still to come).
 */
extern ReplicantDestination *replicant_pipeline_only_destination(const ReplicantPipeline *pipeline);

/*
 * Its oldest destination, whose format every destination shares while a
 * backfill renders its rows once (add_destination and alter_destination
 * keep it so).
 */
extern ReplicantDestination *replicant_pipeline_first_destination(const ReplicantPipeline *pipeline);

/* The smallest max_retained_wal of its destinations holding the slot; 0: none has one. */
extern int64 replicant_pipeline_wal_budget(const ReplicantPipeline *pipeline);

/*
 * Records a fail-closed halt (inside replicant_catalog_begin/end): lsn, if
 * valid, is the commit decoding halted at, cause (or NULL) what resuming
 * accepts there (waiver.h).  The first halt stands, and a disabled pipeline
 * is not halted: returns false, recording nothing, when the pipeline is
 * halted or disabled already.
 */
/*
 * Locks replicant.pipelines for an update until the transaction ends, so that
 * DROP EXTENSION cannot take it away meanwhile; false when it is gone already
 * (the extension was dropped while the caller waited for the lock).
 */
extern bool replicant_pipeline_lock_for_update(void);
extern bool replicant_pipeline_record_halt(int32 id, const char *reason, XLogRecPtr lsn,
										   const char *cause);

#endif /* REPLICANT_PIPELINE_H */
