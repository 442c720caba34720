/*
 * fanout.h
 *		What decoding produced, sent to every destination of the pipeline
 *		side by side, and their acknowledgements turned into checkpoints and
 *		the slot's confirmed position (docs/internals.md §11).
 */
#ifndef REPLICANT_FANOUT_H
#define REPLICANT_FANOUT_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

#include "backfill.h"
#include "chunk.h"
#include "decoder.h"
#include "pipeline.h"
#include "shmem.h"

typedef struct ReplicantFanout ReplicantFanout;

/*
 * Opens a transport to each destination of pipeline that is not halted
 * and reads the batches of its format's render target; in
 * TopMemoryContext.  The slot shows the destinations from here on, a
 * halted one as halted.  Confirms where streaming begins.
 */
extern ReplicantFanout *replicant_fanout_create(ReplicantPipelineSlot *slot,
												ReplicantPipeline *pipeline,
												ReplicantDecoder *decoder);

/*
 * Confirms lsn to the slot (only ever after the checkpoints that cover it
 * are committed) and tells await_delivered() how far delivery has come.
 */
extern void replicant_fanout_confirm(ReplicantFanout *fanout, XLogRecPtr lsn);

/* Commits the pending checkpoints, if any, and confirms the floor. */
extern void replicant_fanout_commit_pending(ReplicantFanout *fanout);

/*
 * Sends the sealed batches to each destination, one request per
 * destination in flight at once; a destination refused halts alone while
 * others go on, the last one halts the pipeline.  One waiting to retry
 * while others stream is sent its batches later, within
 * replicant.destination_backlog, else left behind.  Every destination
 * that messages (non-NIL: they follow) or a completed chunk (non-NULL)
 * go to was sent them all on return, or left behind.  Returns whether a
 * request was sent.
 */
extern bool replicant_fanout_deliver_batches(ReplicantFanout *fanout, List *messages,
											 ReplicantChunk *chunk);

/* Non-transactional messages, each alone, to every destination. */
extern void replicant_fanout_deliver_messages(ReplicantFanout *fanout, List *messages);

/*
 * What is left of a completed backfill chunk, at its high watermark's
 * place, to every destination (none may be halted: it would miss rows no
 * WAL holds); records the backfill's progress.  A refusal halts the
 * pipeline.
 */
extern void replicant_fanout_deliver_chunk(ReplicantFanout *fanout, ReplicantChunk *chunk);

/* The table of the chunk being delivered, or NULL. */
extern const char *replicant_fanout_chunk_table(ReplicantFanout *fanout);

/*
 * Before the first chunk of backfill b opens, when b is a read of a
 * destination's resync (destination_resync.h): sends that destination
 * every batch so far, then the first marker of every read of its resync
 * that has not had one, each recorded once sent.  False when one did not
 * go (the destination halted, was left behind, or its sink failed: b's
 * retry_at says when to try again): no chunk of b may open then.
 */
extern bool replicant_fanout_send_resync_first(ReplicantFanout *fanout, ReplicantBackfill *b);

/*
 * Each destination resyncing whose reads are all done is sent the last
 * markers of its reads and its resync ends; called when the worker starts
 * streaming and after a backfill's last chunk.
 */
extern void replicant_fanout_end_resyncs(ReplicantFanout *fanout);

/*
 * Whether every destination gets each change as decoded: none is halted
 * or left behind (a backfill chunk may be read).
 */
extern bool replicant_fanout_all_attached(ReplicantFanout *fanout);

/*
 * Whether every destination got everything decoded so far: all are
 * attached and were sent every batch, so WAL read past the last delivered
 * commit may be confirmed.
 */
extern bool replicant_fanout_all_sent(ReplicantFanout *fanout);

/*
 * Whether the worker should start again to catch up a destination left
 * behind: its sink took the probe, and every other was sent all it has.
 */
extern bool replicant_fanout_rejoin_due(ReplicantFanout *fanout);

/* Counts and logs the rewind of each destination left behind. */
extern void replicant_fanout_note_rewind(ReplicantFanout *fanout);

/*
 * The worker's rest between cycles, up to timeout ms: until its latch is
 * set, or a request still in flight (a slow sink's) has news.
 */
extern void replicant_fanout_wait(ReplicantFanout *fanout, long timeout);

/*
 * The decoder's hooks (replicant_decoder_set_requests), fanout a
 * ReplicantFanout: _pump moves the requests in flight on without waiting,
 * between records and changes; _before_wait takes their answers
 * (replicant_fanout_settle) before a read waits for failover standbys.
 */
extern void replicant_fanout_pump(void *fanout);
extern void replicant_fanout_before_wait(void *fanout);

/*
 * Before the worker stops on request: each request still in flight gets
 * its answer, and a range whose last request was taken is acknowledged,
 * so that the stop leaves nothing acknowledged to re-deliver.
 */
extern void replicant_fanout_settle(ReplicantFanout *fanout);

/* How long the worker may sleep before a retry comes due; -1: none waits. */
extern long replicant_fanout_retry_wait_ms(ReplicantFanout *fanout);

#endif /* REPLICANT_FANOUT_H */
