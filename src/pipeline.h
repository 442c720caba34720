/*
 * pipeline.h
 *		Pipeline configuration: names, catalog access, loading and halting.
 */
#ifndef REPLICANT_PIPELINE_H
#define REPLICANT_PIPELINE_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

typedef struct ReplicantPipeline
{
	int32		id;
	char	   *name;
	Oid			owner;
	List	   *publications;	/* of char * */
	char	   *sink_url;
	char	   *snapshot;
	bool		enabled;
	char	   *halt_reason;	/* NULL unless halted */
	int32		config_version;
	int			batch_max_bytes;
	int			batch_max_transactions;
	int			http_timeout_ms;
	int			connect_timeout_ms;
	List	   *header_names;	/* of char * */
	List	   *header_values;	/* of char * */
	char	   *secret;			/* NULL: unsigned */
	int			snapshot_workers;
	bool		messages;		/* deliver pg_logical_emit_message() messages */
	List	   *message_prefixes;	/* of char *; NIL: every non-internal prefix */
	char	   *secret_previous;	/* also signs until secret_previous_until */
	TimestampTz secret_previous_until;
	char	   *ca_file;		/* CA bundle for https sinks; NULL: system CAs */
	bool		failover;		/* the slot is a failover slot (17+) */
	XLogRecPtr	resumed_lsn;	/* halts met by changes before it were resumed past */
	XLogRecPtr	checkpoint_commit_lsn;	/* last acknowledged commit, or 0 */
	XLogRecPtr	checkpoint_end_lsn;
} ReplicantPipeline;

/*
 * Catalog access from workers: a transaction with SPI and a snapshot, as the
 * bootstrap superuser, since the extension's tables are closed to PUBLIC and
 * workers otherwise run as the pipeline's owner.  The caller's memory
 * context is current again after replicant_catalog_end.
 */
typedef struct ReplicantCatalogAccess
{
	MemoryContext saved_context;
	Oid			saved_userid;
	int			saved_sec_context;
	int			guc_level;
} ReplicantCatalogAccess;

/*
 * Pins search_path to "pg_catalog, pg_temp" until AtEOXact_GUC(true, level),
 * as a function's SET clause does: queries run with raised privileges must
 * resolve nothing of the caller's or of the owner's role settings.
 */
extern int	replicant_pin_search_path(void);

/*
 * Pins, for the rest of a background process, the settings replicant's
 * queries depend on, whatever the database's or the role's settings say.
 */
extern void replicant_pin_worker_settings(void);

extern void replicant_catalog_begin(ReplicantCatalogAccess *access);
extern void replicant_catalog_end(ReplicantCatalogAccess *access);

/*
 * messages => true hands over every pg_logical_emit_message() of the
 * database, which only a role that may read all of WAL (REPLICATION or
 * superuser) may receive.
 */
#define REPLICANT_MESSAGES_NEED_REPLICATION \
	"pipeline owner must have the REPLICATION attribute to receive messages"

/* Raises an error unless name matches [a-z0-9_]{1,48}. */
extern void replicant_pipeline_check_name(const char *name);

/* Raises an error unless name is a plain identifier usable as a publication name. */
extern void replicant_pipeline_check_publication_name(const char *name);

/* Returns "replicant_<name>". */
extern char *replicant_pipeline_slot_name(const char *name);

/*
 * Loads a pipeline and its checkpoint (inside replicant_catalog_begin/end);
 * the result is allocated in mcxt.  Returns NULL if it no longer exists.
 */
extern ReplicantPipeline *replicant_pipeline_load(int32 id, MemoryContext mcxt);

/*
 * Records a fail-closed halt (inside replicant_catalog_begin/end); lsn, if
 * valid, is where a schema change was met, which resuming accepts.
 */
extern void replicant_pipeline_record_halt(int32 id, const char *reason, XLogRecPtr lsn);

#endif							/* REPLICANT_PIPELINE_H */
