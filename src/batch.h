/*
 * batch.h
 *		Change batches: the JSON body of one POST, built transaction by
 *		transaction, held in memory up to replicant.batch_memory_limit and
 *		spilled to a temporary file beyond it.
 */
#ifndef REPLICANT_BATCH_H
#define REPLICANT_BATCH_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "storage/fd.h"

/*
 * A request body as the HTTP layer sees it: a length, and a reader that can
 * be rewound (the signature reads the body once before it is sent).  The
 * reader never raises an error, so it is safe inside libcurl callbacks; it
 * returns (size_t) -1 on an I/O failure.
 */
typedef struct ReplicantBody
{
	size_t		length;
	void		(*rewind) (void *arg);
	size_t		(*read) (void *arg, char *buf, size_t max);
	void	   *arg;
} ReplicantBody;

/* A body held in one memory buffer (snapshot batches, markers). */
typedef struct ReplicantMemoryBody
{
	StringInfo	data;
	size_t		pos;
} ReplicantMemoryBody;

extern void replicant_body_from_buffer(ReplicantBody *body, ReplicantMemoryBody *state,
									   StringInfo data);

/* One complete transaction inside a batch. */
typedef struct ReplicantBatchTxn
{
	XLogRecPtr	commit_lsn;		/* start of the commit record */
	XLogRecPtr	end_lsn;		/* end of the commit record */
	uint64		offset;			/* its JSON object within the store */
	uint64		length;
	int64		nchanges;
} ReplicantBatchTxn;

typedef struct ReplicantBatch
{
	char	   *prefix;			/* {"pipeline":...,"transactions":[ */
	size_t		memory_limit;

	/* The store: the transactions array's contents, comma-separated. */
	StringInfoData mem;			/* all of it, or once spilled the unflushed tail */
	File		file;			/* spill file, or -1 */
	uint64		file_length;

	ReplicantBatchTxn *txns;
	int			ntxns;
	int			maxtxns;

	/* The transaction being appended, if any. */
	bool		in_txn;
	uint64		txn_offset;
	int64		txn_nchanges;

	/* Body reader over transactions [body_first, body_last]. */
	int			body_first;
	int			body_last;
	uint64		body_pos;
} ReplicantBatch;

extern ReplicantBatch *replicant_batch_create(const char *pipeline_name);

/*
 * Starts a snapshot batch body in out: the envelope up to "changes":[.
 * names is "schema":...,"table":... already encoded.  The caller appends
 * comma-separated changes and "]}".
 */
extern void replicant_batch_snapshot_prefix(StringInfo out, const char *pipeline_name,
											const char *names, int64 backfill_id,
											bool first, bool last);
extern void replicant_batch_reset(ReplicantBatch *batch);

extern void replicant_batch_begin_txn(ReplicantBatch *batch, TransactionId xid,
									  XLogRecPtr commit_lsn, TimestampTz commit_time);
extern void replicant_batch_add_change(ReplicantBatch *batch, const char *json, size_t len);
/* messages: the transaction's comma-separated message objects, or NULL. */
extern void replicant_batch_end_txn(ReplicantBatch *batch, XLogRecPtr end_lsn,
									const char *messages);
extern void replicant_batch_discard_txn(ReplicantBatch *batch);

/* Bytes of transaction JSON held (not counting the envelope). */
extern uint64 replicant_batch_size(ReplicantBatch *batch);

/* Sets body up to read transactions [first, last] wrapped in the envelope. */
extern void replicant_batch_body(ReplicantBatch *batch, int first, int last,
								 ReplicantBody *body);

#endif							/* REPLICANT_BATCH_H */
