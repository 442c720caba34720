/*
 * batch.h
 *		Change batches: the stored bytes of complete transactions, rendered
 *		by a format (format.h), held in memory up to
 *		replicant.batch_memory_limit and spilled to a temporary file beyond it;
 *		a render target's queue of them.
 */
#ifndef REPLICANT_BATCH_H
#define REPLICANT_BATCH_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "storage/fd.h"

/*
 * A request body as the HTTP layer sees it: a length, and a reader that can
 * be rewound (the signature reads the body once before it is sent).  The
 * reader never raises an error, so it is safe inside libcurl callbacks; it
 * returns (size_t) -1 on an I/O failure.
 */
typedef struct ReplicantBody
{
	size_t length;
	void (*rewind)(void *arg);
	size_t (*read)(void *arg, char *buf, size_t max);
	void *arg;
} ReplicantBody;

/* A body held in one memory buffer (snapshot batches, markers). */
typedef struct ReplicantMemoryBody
{
	StringInfo data;
	size_t pos;
} ReplicantMemoryBody;

extern void replicant_body_from_buffer(ReplicantBody *body, ReplicantMemoryBody *state,
									   StringInfo data);

/* One complete transaction inside a batch. */
typedef struct ReplicantBatchTxn
{
	XLogRecPtr commit_lsn; /* start of the commit record */
	XLogRecPtr end_lsn;    /* end of the commit record */
	uint64 offset;         /* its bytes within the store */
	uint64 length;
	int64 nchanges;
	TimestampTz commit_time; /* for replicant.metrics */
} ReplicantBatchTxn;

typedef struct ReplicantBatch
{
	const char *separator; /* between two transactions, two changes */
	size_t memory_limit;

	/* The store: the transactions, separated. */
	StringInfoData mem; /* all of it, or once spilled the unflushed tail */
	File file;          /* spill file, or -1 */
	uint64 file_length;

	ReplicantBatchTxn *txns;
	int ntxns;
	int maxtxns;

	uint64 footprint; /* once sealed, what it takes (batch.c) */

	/* The last transaction stored in it or its queue's earlier batches. */
	XLogRecPtr last_commit_lsn;

	/* The transaction being appended, if any. */
	bool in_txn;
	uint64 txn_offset;
	int64 txn_nchanges;
#ifdef REPLICANT_MUTANTS
	uint64 change_offset; /* where its last change starts (fault.h) */
#endif
} ReplicantBatch;

/*
 * A body over transactions [first, last] of a batch, framed by prefix and
 * suffix, read at its own position: the destinations of one format send
 * the same batch at once, each request reading its own range.
 */
typedef struct ReplicantBatchBody
{
	ReplicantBatch *batch;
	int first;
	int last;
	uint64 pos;
	StringInfo prefix;
	const char *suffix;
} ReplicantBatchBody;

/* separator: what the format writes between two transactions or changes. */
extern ReplicantBatch *replicant_batch_create(const char *separator);
extern void replicant_batch_reset(ReplicantBatch *batch);

/*
 * A render target's batches (docs/destinations-design.md §3.3): the one
 * decoding fills, and the sealed ones, oldest first, that a destination
 * still has to pass.  Batches are numbered in the order they were sealed;
 * a destination's cursor is (batch, transaction), and a batch is freed once
 * every cursor passed it.  A freed batch is kept, reset, for the next one
 * to fill, so a destination that sends each batch before decoding goes on
 * holds one batch, as the worker always did.
 */
typedef struct ReplicantBatchQueue
{
	const char *separator;
	ReplicantBatch *filling;    /* or NULL: none begun since the last seal */
	List *sealed;               /* of ReplicantBatch *, oldest first */
	uint64 first_number;        /* the number of sealed's oldest */
	uint64 sealed_footprint;    /* what sealed takes, replicant_batch_queue_footprint() */
	ReplicantBatch *spare;      /* freed, reset, or NULL */
	XLogRecPtr last_commit_lsn; /* the last transaction any of them stored */
} ReplicantBatchQueue;

/* Where a destination is in a queue: its next transaction to send. */
typedef struct ReplicantBatchCursor
{
	uint64 batch; /* the batch's number */
	int txn;      /* within it */
} ReplicantBatchCursor;

extern ReplicantBatchQueue *replicant_batch_queue_create(const char *separator);

/* The batch decoding appends to (a new one after a seal). */
extern ReplicantBatch *replicant_batch_queue_filling(ReplicantBatchQueue *queue);

/* Bytes and transactions of the batch being filled (0 when none). */
extern uint64 replicant_batch_queue_filling_size(ReplicantBatchQueue *queue);
extern int replicant_batch_queue_filling_txns(ReplicantBatchQueue *queue);

/* Ends the filling batch, if it holds a transaction: from now on it is sent. */
extern void replicant_batch_queue_seal(ReplicantBatchQueue *queue);

/*
 * The sealed batch holding cursor's next transaction, with *first that
 * transaction and *last the batch's last; NULL when the cursor passed every
 * sealed batch.
 */
extern ReplicantBatch *replicant_batch_queue_next(ReplicantBatchQueue *queue,
												  ReplicantBatchCursor *cursor,
												  int *first, int *last);

/* Moves cursor past transaction txn of the batch next() returned. */
extern void replicant_batch_queue_passed(ReplicantBatchQueue *queue,
										 ReplicantBatchCursor *cursor, int txn);

/* Whether cursor has a sealed batch's transaction left to send. */
extern bool replicant_batch_queue_has_next(const ReplicantBatchQueue *queue,
										   const ReplicantBatchCursor *cursor);

/* Whether a sealed batch follows the one holding cursor's next transaction. */
extern bool replicant_batch_queue_has_later(const ReplicantBatchQueue *queue,
											const ReplicantBatchCursor *cursor);

/*
 * What the sealed batches take, in memory (their buffers and bookkeeping)
 * and spilled: the bound replicant.destination_backlog applies to.
 */
extern uint64 replicant_batch_queue_footprint(const ReplicantBatchQueue *queue);

/* Frees the sealed batches that all ncursors cursors passed. */
extern void replicant_batch_queue_release(ReplicantBatchQueue *queue,
										  const ReplicantBatchCursor *cursors, int ncursors);

/*
 * A transaction is its head (the format's begin_txn), its changes (each a
 * format's change) and its tail (end_txn).  Each is appended by the format
 * straight into the store these return, which holds the bytes before it:
 * a format appends only.  len (head_len) is about how many bytes the piece
 * will take, for the decision to spill; the next call settles the piece.
 * replicant_batch_add_change() stores a change rendered elsewhere.
 */
extern StringInfo replicant_batch_begin_txn(ReplicantBatch *batch, XLogRecPtr commit_lsn,
											TimestampTz commit_time, size_t head_len);
extern StringInfo replicant_batch_begin_change(ReplicantBatch *batch, size_t len);
extern void replicant_batch_add_change(ReplicantBatch *batch, const char *data, size_t len);
extern StringInfo replicant_batch_begin_tail(ReplicantBatch *batch, size_t len);
extern void replicant_batch_end_txn(ReplicantBatch *batch, XLogRecPtr end_lsn);
extern void replicant_batch_discard_txn(ReplicantBatch *batch);

/* Bytes of transactions held (not counting a body's framing). */
extern uint64 replicant_batch_size(ReplicantBatch *batch);

/*
 * Sets body up to read prefix, transactions [first, last] and suffix,
 * through state; prefix, suffix and state must live as long as the body
 * is read.
 */
extern void replicant_batch_body(ReplicantBatch *batch, int first, int last,
								 StringInfo prefix, const char *suffix,
								 ReplicantBatchBody *state, ReplicantBody *body);

#endif /* REPLICANT_BATCH_H */
