/*
 * batch.c
 *		Building change batches.
 *
 * A batch is a list of complete transactions.  Their bytes, as a format
 * rendered them, are appended to a store, separated, so that any run of
 * consecutive transactions [first, last] is one contiguous byte range: a
 * body is the format's prefix, that range, and its suffix.  That makes
 * splitting a batch after a 413 free.  The store lives in memory up to
 * replicant.batch_memory_limit and moves to a temporary file beyond it, so a
 * transaction of any size is delivered in bounded memory.  A render
 * target's batches form a queue: the one being filled and the sealed ones
 * its destinations' cursors have not passed yet.
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn), §6 (memory bounds).
 */
#include "postgres.h"

#include "pgstat.h"
#include "utils/memutils.h"

#include "batch.h"
#include "fault.h"
#include "replicant.h"

/* Once spilled, the in-memory tail is flushed in chunks of this size. */
#define SPILL_CHUNK (1024 * 1024)

ReplicantBatch *
replicant_batch_create(const char *separator)
{
	ReplicantBatch *batch = palloc0(sizeof(ReplicantBatch));

	batch->separator = pstrdup(separator);
	initStringInfo(&batch->mem);
	batch->file = -1;
	batch->maxtxns = 64;
	batch->txns = palloc(sizeof(ReplicantBatchTxn) * batch->maxtxns);
	return batch;
}

void
replicant_batch_reset(ReplicantBatch *batch)
{
	/*
	 * A batch in memory stays below the limit; a buffer grown far past it
	 * for one large row or message is given back rather than kept.
	 */
	if ((size_t) batch->mem.maxlen > 2 * Max(batch->memory_limit, SPILL_CHUNK))
	{
		MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(batch->mem.data));

		pfree(batch->mem.data);
		initStringInfo(&batch->mem);
		MemoryContextSwitchTo(old);
	}
	resetStringInfo(&batch->mem);
	if (batch->file >= 0)
		FileClose(batch->file);
	batch->file = -1;
	batch->file_length = 0;
	batch->ntxns = 0;
	batch->in_txn = false;
}

/* Gives back what batch holds: its memory, its spill file. */
static void
batch_free(ReplicantBatch *batch)
{
	if (batch->file >= 0)
		FileClose(batch->file);
	pfree(batch->mem.data);
	pfree(batch->txns);
	pfree((char *) batch->separator);
	pfree(batch);
}

ReplicantBatchQueue *
replicant_batch_queue_create(const char *separator)
{
	ReplicantBatchQueue *queue = palloc0(sizeof(ReplicantBatchQueue));

	queue->separator = pstrdup(separator);
	return queue;
}

ReplicantBatch *
replicant_batch_queue_filling(ReplicantBatchQueue *queue)
{
	if (queue->filling != NULL)
		return queue->filling;
	if (queue->spare != NULL)
	{
		queue->filling = queue->spare;
		queue->spare = NULL;
	}
	else
	{
		MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(queue));

		queue->filling = replicant_batch_create(queue->separator);
		MemoryContextSwitchTo(old);
	}
	/* Commit order holds across the queue's batches, not just within one. */
	queue->filling->last_commit_lsn = queue->last_commit_lsn;
	return queue->filling;
}

uint64
replicant_batch_queue_filling_size(ReplicantBatchQueue *queue)
{
	return queue->filling ? replicant_batch_size(queue->filling) : 0;
}

int
replicant_batch_queue_filling_txns(ReplicantBatchQueue *queue)
{
	return queue->filling ? queue->filling->ntxns : 0;
}

/* What a sealed batch takes: its buffers, its bookkeeping and its spill file. */
static uint64
batch_footprint(const ReplicantBatch *batch)
{
	return sizeof(ReplicantBatch) + sizeof(ListCell) + batch->mem.maxlen +
		   sizeof(ReplicantBatchTxn) * batch->maxtxns + batch->file_length;
}

void
replicant_batch_queue_seal(ReplicantBatchQueue *queue)
{
	MemoryContext old;

	if (queue->filling == NULL || queue->filling->ntxns == 0)
		return;
	Assert(!queue->filling->in_txn);
	old = MemoryContextSwitchTo(GetMemoryChunkContext(queue));
	queue->sealed = lappend(queue->sealed, queue->filling);
	queue->filling->footprint = batch_footprint(queue->filling);
	queue->sealed_footprint += queue->filling->footprint;
	MemoryContextSwitchTo(old);
	queue->last_commit_lsn = queue->filling->last_commit_lsn;
	queue->filling = NULL;
}

/* Whether cursor passed the sealed batch numbered number, of ntxns transactions. */
static bool
cursor_passed(const ReplicantBatchCursor *cursor, uint64 number, int ntxns)
{
	return cursor->batch > number || (cursor->batch == number && cursor->txn >= ntxns);
}

ReplicantBatch *
replicant_batch_queue_next(ReplicantBatchQueue *queue, ReplicantBatchCursor *cursor,
						   int *first, int *last)
{
	ReplicantBatch *batch;

	/* A batch is freed only once every cursor passed it. */
	Assert(cursor->batch >= queue->first_number);
	if (cursor->batch - queue->first_number >= (uint64) list_length(queue->sealed))
		return NULL;
	batch = list_nth(queue->sealed, (int) (cursor->batch - queue->first_number));
	Assert(cursor->txn < batch->ntxns);
	*first = cursor->txn;
	*last = batch->ntxns - 1;
	return batch;
}

bool
replicant_batch_queue_has_next(const ReplicantBatchQueue *queue, const ReplicantBatchCursor *cursor)
{
	return cursor->batch - queue->first_number < (uint64) list_length(queue->sealed);
}

bool
replicant_batch_queue_has_later(const ReplicantBatchQueue *queue, const ReplicantBatchCursor *cursor)
{
	return cursor->batch + 1 - queue->first_number < (uint64) list_length(queue->sealed);
}

uint64
replicant_batch_queue_footprint(const ReplicantBatchQueue *queue)
{
	return queue->sealed_footprint;
}

void
replicant_batch_queue_passed(ReplicantBatchQueue *queue, ReplicantBatchCursor *cursor, int txn)
{
	ReplicantBatch *batch = list_nth(queue->sealed, (int) (cursor->batch - queue->first_number));

	Assert(txn >= cursor->txn && txn < batch->ntxns);
	cursor->txn = txn + 1;
	if (cursor->txn == batch->ntxns)
	{
		cursor->batch++;
		cursor->txn = 0;
	}
}

void
replicant_batch_queue_release(ReplicantBatchQueue *queue, const ReplicantBatchCursor *cursors,
							  int ncursors)
{
	while (queue->sealed != NIL)
	{
		ReplicantBatch *oldest = linitial(queue->sealed);
		int i;

		for (i = 0; i < ncursors; i++)
			if (!cursor_passed(&cursors[i], queue->first_number, oldest->ntxns))
				return;
		queue->sealed = list_delete_first(queue->sealed);
		queue->sealed_footprint -= oldest->footprint;
		queue->first_number++;
		if (queue->spare == NULL)
		{
			replicant_batch_reset(oldest);
			queue->spare = oldest;
		}
		else
			batch_free(oldest);
	}
}

static uint64
store_length(ReplicantBatch *batch)
{
	return batch->file_length + batch->mem.len;
}

static void
store_flush(ReplicantBatch *batch)
{
	int written;

	if (batch->file < 0 || batch->mem.len == 0)
		return;
	written = FileWrite(batch->file, batch->mem.data, batch->mem.len,
						batch->file_length, WAIT_EVENT_BUFFILE_WRITE);
	if (written != batch->mem.len)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write batch spill file: %m")));
	batch->file_length += written;
	resetStringInfo(&batch->mem);
}

/* Once spilled, writes the in-memory tail out when it filled a chunk. */
static void
store_settle(ReplicantBatch *batch)
{
	if (batch->file >= 0 && batch->mem.len >= SPILL_CHUNK)
		store_flush(batch);
}

/*
 * The store's in-memory tail, ready for a piece of about len bytes to be
 * appended to it in place, after the decision store_append() takes: once
 * the memory would pass its limit, everything held so far moves to the
 * spill file.  The previous piece, written in place too, is flushed first
 * if it filled the spill file's chunk.
 */
static StringInfo
store_reserve(ReplicantBatch *batch, size_t len)
{
	store_settle(batch);
	if (batch->file < 0 && batch->mem.len + len > batch->memory_limit)
	{
		/* Interxact: the worker builds batches outside transactions. */
		batch->file = OpenTemporaryFile(true);
		batch->file_length = 0;
		store_flush(batch);
	}
	return &batch->mem;
}

static void
store_append(ReplicantBatch *batch, const char *data, size_t len)
{
	appendBinaryStringInfo(store_reserve(batch, len), data, len);
	store_settle(batch);
}

static void
store_truncate(ReplicantBatch *batch, uint64 length)
{
	if (length >= batch->file_length)
	{
		batch->mem.len = length - batch->file_length;
		batch->mem.data[batch->mem.len] = '\0';
		return;
	}
	resetStringInfo(&batch->mem);
	batch->file_length = length;
	if (FileTruncate(batch->file, length, WAIT_EVENT_BUFFILE_TRUNCATE) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not truncate batch spill file: %m")));
}

StringInfo
replicant_batch_begin_txn(ReplicantBatch *batch, XLogRecPtr commit_lsn, TimestampTz commit_time,
						  size_t head_len)
{
	Assert(!batch->in_txn);

	/*
	 * Transactions are stored in commit order, each once for the life of the
	 * batch's queue (the worker's): a commit_lsn is rendered once per format,
	 * so it has one content however often the request holding it is sent.
	 */
	Assert(commit_lsn > batch->last_commit_lsn);
	batch->memory_limit = (size_t) replicant_batch_memory_limit_kb * 1024;
	if (batch->ntxns > 0)
		store_append(batch, batch->separator, strlen(batch->separator));
	batch->txn_offset = store_length(batch);
	batch->txn_nchanges = 0;
	batch->in_txn = true;

	if (batch->ntxns == batch->maxtxns)
	{
		batch->maxtxns *= 2;
		batch->txns = repalloc(batch->txns, sizeof(ReplicantBatchTxn) * batch->maxtxns);
	}
	batch->txns[batch->ntxns].commit_lsn = commit_lsn;
	batch->txns[batch->ntxns].commit_time = commit_time;
	return store_reserve(batch, head_len);
}

StringInfo
replicant_batch_begin_change(ReplicantBatch *batch, size_t len)
{
	Assert(batch->in_txn);
#ifdef REPLICANT_MUTANTS
	batch->change_offset = store_length(batch);
#endif
	if (batch->txn_nchanges > 0)
		store_append(batch, batch->separator, strlen(batch->separator));
	batch->txn_nchanges++;
	return store_reserve(batch, len);
}

void
replicant_batch_add_change(ReplicantBatch *batch, const char *data, size_t len)
{
	appendBinaryStringInfo(replicant_batch_begin_change(batch, len), data, len);
}

StringInfo
replicant_batch_begin_tail(ReplicantBatch *batch, size_t len)
{
	Assert(batch->in_txn);
#ifdef REPLICANT_MUTANTS
	if (replicant_mutant("drop_last_change") && batch->txn_nchanges > 1)
	{
		store_truncate(batch, batch->change_offset);
		batch->txn_nchanges--;
	}
#endif
	return store_reserve(batch, len);
}

void
replicant_batch_end_txn(ReplicantBatch *batch, XLogRecPtr end_lsn)
{
	ReplicantBatchTxn *txn = &batch->txns[batch->ntxns];

	Assert(batch->in_txn);
	store_settle(batch);
	txn->end_lsn = end_lsn;
	txn->offset = batch->txn_offset;
	txn->length = store_length(batch) - batch->txn_offset;
	txn->nchanges = batch->txn_nchanges;
	Assert(end_lsn > txn->commit_lsn);
	batch->last_commit_lsn = txn->commit_lsn;
	batch->ntxns++;
	batch->in_txn = false;
}

/* Drops the transaction being appended, and its separator. */
void
replicant_batch_discard_txn(ReplicantBatch *batch)
{
	if (!batch->in_txn)
		return;
	store_truncate(batch, batch->ntxns > 0 ?
							  batch->txn_offset - strlen(batch->separator) :
							  0);
	batch->in_txn = false;
}

uint64
replicant_batch_size(ReplicantBatch *batch)
{
	return store_length(batch);
}

/*
 * The body reader.  It may run inside libcurl callbacks, so it must not
 * raise errors: FileRead reports failures through its return value.
 */
static uint64
body_store_start(ReplicantBatchBody *body)
{
	return body->batch->txns[body->first].offset;
}

static uint64
body_store_end(ReplicantBatchBody *body)
{
	ReplicantBatchTxn *last = &body->batch->txns[body->last];

	return last->offset + last->length;
}

static void
body_rewind(void *arg)
{
	((ReplicantBatchBody *) arg)->pos = 0;
}

static size_t
body_read(void *arg, char *buf, size_t max)
{
	ReplicantBatchBody *body = arg;
	ReplicantBatch *batch = body->batch;
	size_t prefix_len = body->prefix->len;
	size_t suffix_len = strlen(body->suffix);
	uint64 range_len = body_store_end(body) - body_store_start(body);
	size_t done = 0;

	while (done < max)
	{
		uint64 pos = body->pos;
		size_t n;

		if (pos < prefix_len)
		{
			n = Min(max - done, prefix_len - pos);
			memcpy(buf + done, body->prefix->data + pos, n);
		}
		else if (pos < prefix_len + range_len)
		{
			uint64 store_pos = body_store_start(body) + (pos - prefix_len);
			uint64 range_left = prefix_len + range_len - pos;

			n = Min(max - done, range_left);
			if (store_pos >= batch->file_length)
			{
				/* Served from memory (never spilled, or the unflushed tail). */
				memcpy(buf + done, batch->mem.data + (store_pos - batch->file_length), n);
			}
			else
			{
				int got;

				n = Min(n, batch->file_length - store_pos);
				n = Min(n, (size_t) PG_INT32_MAX);
				got = FileRead(batch->file, buf + done, (int) n, store_pos,
							   WAIT_EVENT_BUFFILE_READ);
				if (got <= 0)
					return (size_t) -1;
				n = got;
			}
		}
		else if (pos < prefix_len + range_len + suffix_len)
		{
			uint64 suffix_pos = pos - prefix_len - range_len;

			n = Min(max - done, suffix_len - suffix_pos);
			memcpy(buf + done, body->suffix + suffix_pos, n);
		}
		else
			break;
		done += n;
		body->pos += n;
	}
	return done;
}

void
replicant_batch_body(ReplicantBatch *batch, int first, int last,
					 StringInfo prefix, const char *suffix, ReplicantBatchBody *state,
					 ReplicantBody *body)
{
	Assert(first >= 0 && first <= last && last < batch->ntxns);
	state->batch = batch;
	state->first = first;
	state->last = last;
	state->pos = 0;
	state->prefix = prefix;
	state->suffix = suffix;
	body->length = prefix->len + (body_store_end(state) - body_store_start(state)) + strlen(suffix);
	body->rewind = body_rewind;
	body->read = body_read;
	body->arg = state;
}

static void
memory_body_rewind(void *arg)
{
	((ReplicantMemoryBody *) arg)->pos = 0;
}

static size_t
memory_body_read(void *arg, char *buf, size_t max)
{
	ReplicantMemoryBody *state = arg;
	size_t n = Min(max, state->data->len - state->pos);

	memcpy(buf, state->data->data + state->pos, n);
	state->pos += n;
	return n;
}

void
replicant_body_from_buffer(ReplicantBody *body, ReplicantMemoryBody *state,
						   StringInfo data)
{
	state->data = data;
	state->pos = 0;
	body->length = data->len;
	body->rewind = memory_body_rewind;
	body->read = memory_body_read;
	body->arg = state;
}
