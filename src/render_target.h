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

/* Past this many holes a target halts instead (see replicant_render_hole). */
#define REPLICANT_RENDER_MAX_HOLES 8

/*
 * Rendered bytes name the pipeline, never the destination, so destinations
 * of one format share a target.
 */
typedef struct ReplicantRenderTarget
{
	const ReplicantFormat *format;
	ReplicantBatchQueue *queue; /* its batches */
	XLogRecPtr halted_at;       /* commit LSN it halted at, or invalid: it
								  * gets nothing from there on */
	char *halt_reason;          /* why, value-free; its destinations halt
								  * with it when other targets go on */
	XLogRecPtr skip_upto;       /* commits at or below it reached all its
								  * destinations */
	XLogRecPtr reach;           /* ... and at or below it, one of them */
	bool skipping;              /* it does not take the transaction decoded */
	int nholes;                 /* commits it left out, below reach */
	XLogRecPtr hole_at[REPLICANT_RENDER_MAX_HOLES];
	char *hole_reason[REPLICANT_RENDER_MAX_HOLES];
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

/*
 * Whether target takes the transaction decoded: it has not halted, and
 * some destination of it has not had the transaction.
 */
extern bool replicant_render_takes(const ReplicantRenderTarget *target);

/*
 * A condition of target's format met by the transaction committing at
 * commit_lsn, which some destination of target already has (decoding went
 * back for another): instead of halting them all, target leaves the
 * transaction out, a hole that halts (for reason) each destination of it
 * still below it, and goes on.  False when no destination has it, or past
 * REPLICANT_RENDER_MAX_HOLES: the caller halts target.
 */
extern bool replicant_render_hole(ReplicantRenderTarget *target, XLogRecPtr commit_lsn,
								  const char *reason);

/* The lowest hole of target above lsn, and its reason; invalid when none. */
extern XLogRecPtr replicant_render_hole_after(const ReplicantRenderTarget *target, XLogRecPtr lsn,
											  const char **reason);

/*
 * A transaction committing at commit_lsn begins: forgets the last one's
 * messages and notes which targets take it.
 */
extern void replicant_render_begin(List *targets, XLogRecPtr commit_lsn);

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
