/*
 * decoder.h
 *		In-process logical decoding of a pipeline's slot.
 */
#ifndef REPLICANT_DECODER_H
#define REPLICANT_DECODER_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

#include "batch.h"
#include "chunk.h"
#include "pipeline.h"

typedef struct ReplicantDecoder ReplicantDecoder;

/*
 * Acquires the pipeline's slot and prepares decoding from the checkpoint
 * (or the slot's confirmed_flush, whichever is later).  Returns NULL and a
 * value-free *halt_reason when the slot cannot be used, or was moved
 * further than the pipeline confirmed it (slot_position.h), and then in
 * *halt_cause what a resume accepts, if anything; *slot_lost says the
 * slot is lost (slot_health.h: a resync can heal that).  Call outside a
 * transaction.
 */
extern ReplicantDecoder *replicant_decoder_start(ReplicantPipeline *pipeline,
												 char **halt_reason,
												 char **halt_cause,
												 bool *slot_lost);

/*
 * Decodes flushed WAL into each render target's filling batch until the
 * end of flushed WAL, a halt, or a filling batch holding max_txns
 * transactions or max_bytes bytes.  WAL
 * flushed while it reads is read too, for linger_ms at most (0: only what
 * was flushed when it began).  Returns true when it stopped at the end of
 * flushed WAL.
 */
extern bool replicant_decoder_read(ReplicantDecoder *decoder, int max_txns,
								   uint64 max_bytes, int linger_ms);

/*
 * The requests out while decoding goes on (fanout.c): reads call pump(arg)
 * every few hundred records and changes, between them, to move them on
 * without waiting, and before_wait(arg) before a read waits for failover
 * standbys, to take their answers.
 */
extern void replicant_decoder_set_requests(ReplicantDecoder *decoder, void (*pump)(void *arg),
										   void (*before_wait)(void *arg), void *arg);

/*
 * Call before a transaction that reads published tables (a backfill
 * chunk): clears catalog cache entries decoding loaded under historic
 * snapshots, and makes the next decoding burst clear the normal ones.
 * Checkpoint transactions touch only replicant's own tables and need not.
 */
extern void replicant_decoder_before_normal_access(ReplicantDecoder *decoder);

/* Ends each target's filling batch: what decoding rendered is sent from here on. */
extern void replicant_decoder_seal(ReplicantDecoder *decoder);

/* The render target of destination's format: its batches, and whether it halted. */
extern struct ReplicantRenderTarget *replicant_decoder_target(ReplicantDecoder *decoder,
															  const ReplicantDestination *destination);

/* Position up to which WAL has been read. */
extern XLogRecPtr replicant_decoder_read_upto(ReplicantDecoder *decoder);

/* Position last confirmed to the slot. */
extern XLogRecPtr replicant_decoder_confirmed(ReplicantDecoder *decoder);

/*
 * Tells the slot that everything before lsn is done with, so it stops
 * retaining that WAL.  Only ever called after the checkpoint is committed;
 * the slot moves only as far as a flushed record says it may
 * (slot_position.h), which may be less until a later call.
 */
extern void replicant_decoder_confirm(ReplicantDecoder *decoder, XLogRecPtr lsn);

/*
 * Why decoding must stop and deliver nothing more (value-free), or NULL;
 * the commit LSN of the change that halted it, if any; and what resuming
 * accepts there (waiver.h), or NULL.
 */
extern const char *replicant_decoder_halt_reason(ReplicantDecoder *decoder);
extern XLogRecPtr replicant_decoder_halt_lsn(ReplicantDecoder *decoder);
extern const char *replicant_decoder_halt_cause(ReplicantDecoder *decoder);

/* The table whose change is being encoded, for error reports. */
extern const char *replicant_decoder_current_table(ReplicantDecoder *decoder);

/* Whether that change's error came from evaluating a row filter. */
extern bool replicant_decoder_in_row_filter(ReplicantDecoder *decoder);

/*
 * The incremental backfill chunk the stream's changes are matched against,
 * or NULL.  Reading stops when it completes (its high watermark).
 */
extern ReplicantChunk *replicant_decoder_chunk(ReplicantDecoder *decoder);
extern void replicant_decoder_set_chunk(ReplicantDecoder *decoder, ReplicantChunk *chunk);

/*
 * Takes the non-transactional messages decoded since the last call (each a
 * batch body's "message" JSON); reading stops when there are any.  The
 * caller frees them with list_free_deep.
 */
extern List *replicant_decoder_take_messages(ReplicantDecoder *decoder);

#endif /* REPLICANT_DECODER_H */
