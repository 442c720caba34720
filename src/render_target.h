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

/* A target's destinations: at most a pipeline's (REPLICANT_MAX_DESTINATIONS). */
#define REPLICANT_RENDER_MAX_MARKS 16

/*
 * A destination of a target: what it had when decoding started, and the
 * first commit above that the target left out (a hole), which it lacks.
 */
typedef struct ReplicantRenderMark
{
	int32 destination;   /* its id */
	XLogRecPtr position; /* its checkpoint's commit_lsn */
	XLogRecPtr hole;     /* invalid while none */
	char *hole_reason;   /* why, value-free */
} ReplicantRenderMark;

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
								  * destinations: the lowest position */
	bool skipping;              /* it does not take the transaction decoded */
	int nmarks;
	ReplicantRenderMark marks[REPLICANT_RENDER_MAX_MARKS];
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
 * Adds a destination (id) to target, which had the commits at or below
 * position (its checkpoint) when decoding started.
 */
extern void replicant_render_mark(ReplicantRenderTarget *target, int32 destination,
								  XLogRecPtr position);

/*
 * A condition of target's format met by the transaction committing at
 * commit_lsn, which target takes: when some destination of target already
 * has it (decoding went back for another), target leaves the transaction
 * out instead of halting, a hole for each destination below it, and goes
 * on.  False when none has it: the caller halts target.
 */
extern bool replicant_render_hole(ReplicantRenderTarget *target, XLogRecPtr commit_lsn,
								  const char *reason);

/*
 * The hole destination lacks (the first above its position), and its
 * reason; invalid when none.  It may be sent only what commits below it.
 */
extern XLogRecPtr replicant_render_hole_of(const ReplicantRenderTarget *target, int32 destination,
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
