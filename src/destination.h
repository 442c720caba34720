/*
 * destination.h
 *		A pipeline's destinations: where its changes go and how (the sink's
 *		URL, format, credentials, limits), apart from what it decodes.
 *
 * Every reader of a sink option reads it from a ReplicantDestination, so
 * that a pipeline can get several destinations (docs/destinations-design.md)
 * without its readers changing again.  Today a pipeline has exactly one,
 * named "default", made from its own row in replicant.pipelines.
 */
#ifndef REPLICANT_DESTINATION_H
#define REPLICANT_DESTINATION_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/* The name of a pipeline's first destination: its wire ids stay the pipeline's. */
#define REPLICANT_DEFAULT_DESTINATION "default"

typedef struct ReplicantDestination
{
	int32 id; /* its row's; 0 under 0.2.0's objects (no replicant.destinations) */
	char *name;
	char *pipeline_name; /* for messages */
	char *sink_url;
	char *format;          /* its wire format's name (format.h) */
	List *header_names;    /* of char * */
	List *header_values;   /* of char * */
	char *secret;          /* NULL: unsigned */
	char *secret_previous; /* also signs until secret_previous_until */
	TimestampTz secret_previous_until;
	char *ca_file; /* CA bundle for https sinks; NULL: system CAs */
	int batch_max_bytes;
	int batch_max_transactions;
	int http_timeout_ms;
	int connect_timeout_ms;
	bool create_tables;               /* create missing ClickHouse targets at start */
	int64 max_retained_wal;           /* bytes the slot may retain for it; 0: no budget */
	bool on_slot_loss_resync;         /* on_slot_loss => 'resync' */
	char *halt_reason;                /* halted alone: why; NULL: it is delivered to */
	bool slot_released;               /* gave its hold on the slot up: halted for good */
	XLogRecPtr checkpoint_commit_lsn; /* its committed checkpoint as loaded, or 0 */
	XLogRecPtr checkpoint_end_lsn;
	/* a resync of this destination alone under way (destination_resync.h) */
	char *resync_reason;         /* why (value-free); NULL: none */
	XLogRecPtr resync_lost_from; /* its checkpoint's commit before it, or 0 */
	XLogRecPtr resync_lost_to;   /* commits after it are streamed, not read */
	int resync_losses;           /* resyncs in a row on_slot_loss started */
	int64 resync_backfill_from;  /* its reads are its backfills from this id on */
} ReplicantDestination;

/*
 * The destinations of pipeline pipeline_id, called pipeline_name (of
 * ReplicantDestination *, never empty), allocated in mcxt.  Inside
 * replicant_catalog_begin/end, under the snapshot the pipeline's row was
 * read with.
 */
extern List *replicant_destination_load(int32 pipeline_id, const char *pipeline_name,
										MemoryContext mcxt);

/*
 * Records that destination halted alone, for reason (value-free), at the
 * commit lsn (or invalid); false when it was halted already.  In its own
 * transaction: the caller is outside one.
 */
extern bool replicant_destination_record_halt(const ReplicantDestination *destination,
											  const char *reason, XLogRecPtr lsn);

struct ReplicantDestinationSlot;
struct ReplicantPipelineSlot;

/*
 * A destination halted alone, for reason (value-free), at the commit lsn
 * (or invalid): recorded (above), logged with the hint to resume it, one
 * event line, and shown on its place in shared memory.  The caller stops
 * delivering to it.
 */
extern void replicant_destination_halted(const char *pipeline_name,
										 const ReplicantDestination *destination,
										 struct ReplicantDestinationSlot *place,
										 const char *reason, XLogRecPtr lsn);

/*
 * A destination past its own max_retained_wal gives its hold on the slot
 * up, for reason (value-free): recorded as halted for good (a halt it had
 * keeps its reason) with its checkpoint out of the floor, logged, one
 * event line, and shown on its place.  The caller restarts without it.
 */
extern void replicant_destination_release(const char *pipeline_name,
										  const ReplicantDestination *destination,
										  struct ReplicantDestinationSlot *place,
										  const char *reason);

/*
 * Whether destination resyncs after a loss of the slot: it chose to
 * (on_slot_loss => 'resync') and is delivered to (neither halted nor
 * released).
 */
extern bool replicant_destination_resyncs_on_loss(const ReplicantDestination *destination);

/*
 * The two halves of a release for a caller that records it with more, in
 * its own transaction (SPI, replicant's privileges), and then logs it.
 */
extern void replicant_destination_record_release(int32 destination_id, const char *reason);
extern void replicant_destination_log_release(const char *pipeline_name,
											  const ReplicantDestination *destination,
											  const char *reason);

/*
 * What the wire names the destination by (bodies, NATS ids and headers):
 * its name, or NULL for "default", whose wire is the pipeline's alone.
 */
extern const char *replicant_destination_label(const ReplicantDestination *destination);

/*
 * Shows destinations (the pipeline's, in order) on the worker's slot in
 * shared memory, before anything is counted or halted on their places.
 */
extern void replicant_destination_mirror(struct ReplicantPipelineSlot *slot, List *destinations);

#endif /* REPLICANT_DESTINATION_H */
