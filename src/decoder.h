/*
 * decoder.h
 *		In-process logical decoding of a pipeline's slot.
 */
#ifndef REPLICANT_DECODER_H
#define REPLICANT_DECODER_H

#include "replication/logical.h"

#include "batch.h"
#include "output_plugin.h"
#include "pipeline.h"

typedef struct ReplicantDecoder
{
	LogicalDecodingContext *ctx;
	ReplicantDecodingState *state;
	MemoryContext context;		/* lives as long as the reader */
	XLogRecPtr	confirmed;		/* last position confirmed to the slot */

	/*
	 * Catalog cache entries of user tables loaded under a normal snapshot
	 * must not be used by decoding, nor historic ones by normal queries.
	 */
	bool		caches_normal;	/* normal transactions read user tables */
	bool		caches_historic;	/* decoding ran since the last reset */
	TimestampTz last_save;		/* when the slot was last written to disk */
} ReplicantDecoder;

/*
 * Initialises the slot just created (MyReplicationSlot) up to its consistent
 * point, with a snapshot builder that can export the snapshot of that point
 * when need_full_snapshot.  The caller frees the returned context.
 */
extern LogicalDecodingContext *replicant_decoder_init_slot(bool need_full_snapshot);

/* Replication slots not in use, of max_replication_slots. */
extern int	replicant_decoder_free_slots(void);

/*
 * Acquires the pipeline's slot and prepares decoding from the checkpoint
 * (or the slot's confirmed_flush, whichever is later).  Returns NULL and a
 * value-free *halt_reason when the slot cannot be used.  Call outside a
 * transaction.
 */
extern ReplicantDecoder *replicant_decoder_start(ReplicantPipeline *pipeline,
												 ReplicantBatch *batch,
												 char **halt_reason);

/*
 * Decodes flushed WAL into the batch until the end of flushed WAL, a halt,
 * or the batch holding max_txns transactions or max_bytes bytes.  Returns
 * true when it stopped at the end of flushed WAL.
 */
extern bool replicant_decoder_read(ReplicantDecoder *decoder, int max_txns,
								   uint64 max_bytes);

/*
 * Call before a transaction that reads published tables (a backfill
 * chunk): clears catalog cache entries decoding loaded under historic
 * snapshots, and makes the next decoding burst clear the normal ones.
 * Checkpoint transactions touch only replicant's own tables and need not.
 */
extern void replicant_decoder_before_normal_access(ReplicantDecoder *decoder);

/* Position up to which WAL has been read. */
extern XLogRecPtr replicant_decoder_read_upto(ReplicantDecoder *decoder);

/*
 * Tells the slot that everything before lsn is done with, so it stops
 * retaining that WAL.  Only ever called after the checkpoint is committed.
 */
extern void replicant_decoder_confirm(ReplicantDecoder *decoder, XLogRecPtr lsn);

#endif							/* REPLICANT_DECODER_H */
