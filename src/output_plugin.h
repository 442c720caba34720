/*
 * output_plugin.h
 *		replicant's logical decoding output plugin.  It lives in the same
 *		library as the workers and is only driven by a pipeline worker, which
 *		gives it a render target per format to fill batches of.
 */
#ifndef REPLICANT_OUTPUT_PLUGIN_H
#define REPLICANT_OUTPUT_PLUGIN_H

#include "replication/logical.h"

#include "batch.h"
#include "chunk.h"
#include "format.h"

typedef struct ReplicantDecodingState
{
	List *targets; /* of ReplicantRenderTarget *, one per format (render_target.h) */
	const char *pipeline_name;
	XLogRecPtr skip_upto;            /* commits at or below were delivered */
	char *halt_reason;               /* set once every target halted: stop */
	XLogRecPtr halt_lsn;             /* commit LSN of the change that halted, if any */
	char *halt_cause;                /* what resuming that halt accepts (waiver.h), or NULL */
	List *epochs;                    /* the pipeline's options by commit (epoch.h) */
	List *waivers;                   /* halt causes resumes accepted (waiver.h) */
	char current_table[NAMEDATALEN]; /* being encoded, for error reports */
	bool in_row_filter;              /* evaluating current_table's row filter */
	ReplicantChunk *chunk;           /* incremental backfill chunk, or NULL */

	/* pg_logical_emit_message() delivery (the epoch's messages, message_prefixes) */
	List *pending_messages; /* non-transactional, of ReplicantMessage *,
							 * each allocated as one chunk */

	/* Per transaction */
	bool txn_open;     /* header written into the targets (deferred to 1st change) */
	int64 txn_changes; /* decoded changes delivered so far */

	MemoryContext change_context; /* reset after every change */
	struct EncodedRows *rows;     /* buffers every change encodes into */

	/* The requests out (replicant_decoder_set_requests), or NULL. */
	void (*pump)(void *arg);
	void (*before_wait)(void *arg);
	void *requests_arg;
	uint32 pump_calls;
} ReplicantDecodingState;

/* Calls between a pump of the requests out and the next (a power of two). */
#define REPLICANT_PUMP_EVERY 256

/*
 * Between decoded records and changes: every REPLICANT_PUMP_EVERY calls,
 * the requests out move on and their answers are read, so that decoding a
 * large transaction does not leave an answer unread past its timeout.
 */
static inline void
replicant_decoding_pump(ReplicantDecodingState *state)
{
	if (state->pump != NULL && (++state->pump_calls & (REPLICANT_PUMP_EVERY - 1)) == 0)
		state->pump(state->requests_arg);
}

extern ReplicantDecodingState *replicant_output_state(LogicalDecodingContext *ctx);

#endif /* REPLICANT_OUTPUT_PLUGIN_H */
