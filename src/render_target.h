/*
 * render_target.h
 *		Render targets: what each format among a pipeline's destinations gets
 *		of the decoded stream (docs/destinations-design.md §2.1).  The output
 *		plugin describes a change once; these render it into the filling
 *		batch of every target that has not halted.
 */
#ifndef REPLICANT_RENDER_TARGET_H
#define REPLICANT_RENDER_TARGET_H

#include "batch.h"
#include "change.h"
#include "chunk.h"
#include "format.h"

/*
 * Rendered bytes name the pipeline, never the destination, so destinations
 * of one format share a target.
 */
typedef struct ReplicantRenderTarget
{
	const ReplicantFormat *format;
	ReplicantBatchQueue *queue;  /* its batches */
	XLogRecPtr halted_at;        /* commit LSN it halted at, or invalid: it
								  * gets nothing from there on */
	char *halt_reason;           /* why, value-free; its destinations halt
								  * with it when other targets go on */
	StringInfoData txn_messages; /* the open transaction's messages, rendered,
								  * separated */
} ReplicantRenderTarget;

/* A target for format, its batches in a queue, in the current memory context. */
extern ReplicantRenderTarget *replicant_render_target_create(const ReplicantFormat *format);

/* Whether target still gets changes: it has not halted. */
extern bool replicant_render_live(const ReplicantRenderTarget *target);

/*
 * Halts target at the commit commit_lsn for reason: it gets nothing more,
 * and loses that transaction (open: being rendered) only.  Returns whether
 * every target has halted.
 */
extern bool replicant_render_halt(List *targets, ReplicantRenderTarget *target,
								  XLogRecPtr commit_lsn, bool txn_open, const char *reason);

/* Forgets the last transaction's messages (a new one begins). */
extern void replicant_render_begin(List *targets);

/*
 * A transaction's head, change, messages and tail, rendered for pipeline
 * into every live target of targets (of ReplicantRenderTarget *).
 */
extern void replicant_render_begin_txn(List *targets, const char *pipeline,
									   const ReplicantTxn *record);
extern void replicant_render_change(List *targets, const char *pipeline,
									const ReplicantChange *record);
extern void replicant_render_message(List *targets, const char *pipeline,
									 const ReplicantMessage *record);
extern void replicant_render_end_txn(List *targets, const char *pipeline,
									 const ReplicantTxn *record, XLogRecPtr end_lsn);

/*
 * Chunk rows as read (ReplicantChunkRow *, rendered in each of the chunk's
 * formats), ahead of the change superseding them, into each live target
 * whose format takes an update without some of its columns.
 */
extern void replicant_render_kept_rows(List *targets, const ReplicantChunk *chunk, List *rows);

#endif /* REPLICANT_RENDER_TARGET_H */
