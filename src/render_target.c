/*
 * render_target.c
 *		Rendering the decoded stream into each format's batches.
 *
 * A pipeline's decoding state holds one render target per format among its
 * destinations (docs/destinations-design.md §2.1): output_plugin.c decides
 * what a transaction delivers and describes each change once, and these
 * functions have every target's format render it into the target's filling
 * batch (batch.c).  A condition of one format (whole rows, targets named
 * without the schema) halts only its target, whose open transaction is
 * discarded; decoding halts once every target has (output_plugin.c).
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn).
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "render_target.h"

/* A message buffer grown past this for a large message is given back after it. */
#define MESSAGES_KEEP_BYTES (64 * 1024)

ReplicantRenderTarget *
replicant_render_target_create(const ReplicantFormat *format)
{
	ReplicantRenderTarget *target = palloc0(sizeof(ReplicantRenderTarget));

	target->format = format;
	target->queue = replicant_batch_queue_create(format->separator);
	target->halted_at = InvalidXLogRecPtr;
	target->txn_messages.data = NULL;
	return target;
}

bool
replicant_render_live(const ReplicantRenderTarget *target)
{
	return target->halted_at == InvalidXLogRecPtr;
}

bool
replicant_render_takes(const ReplicantRenderTarget *target)
{
	return replicant_render_live(target) && !target->skipping;
}

static ReplicantBatch *
filling(ReplicantRenderTarget *target)
{
	return replicant_batch_queue_filling(target->queue);
}

bool
replicant_render_halt(List *targets, ReplicantRenderTarget *target, XLogRecPtr commit_lsn,
					  bool txn_open, const char *reason)
{
	ListCell *lc;

	if (replicant_render_live(target))
	{
		target->halted_at = commit_lsn;
		target->halt_reason = MemoryContextStrdup(GetMemoryChunkContext(target), reason);
		if (txn_open)
			replicant_batch_discard_txn(filling(target));
	}
	foreach(lc, targets)
		if (replicant_render_live(lfirst(lc)))
			return false;
	return true;
}

void
replicant_render_mark(ReplicantRenderTarget *target, int32 destination, XLogRecPtr position)
{
	ReplicantRenderMark *mark;

	if (target->nmarks == REPLICANT_RENDER_MAX_MARKS)
		elog(ERROR, "a render target has at most %d destinations", REPLICANT_RENDER_MAX_MARKS);
	mark = &target->marks[target->nmarks];
	mark->destination = destination;
	mark->position = position;
	mark->hole = InvalidXLogRecPtr;
	mark->hole_reason = NULL;
	if (target->nmarks == 0 || position < target->skip_upto)
		target->skip_upto = position;
	target->nmarks++;
}

bool
replicant_render_hole(ReplicantRenderTarget *target, XLogRecPtr commit_lsn, const char *reason)
{
	char *kept = NULL;
	bool someone_has_it = false;

	Assert(replicant_render_takes(target));
	for (int i = 0; i < target->nmarks; i++)
		someone_has_it |= target->marks[i].position >= commit_lsn;
	if (!someone_has_it)
		return false;
	replicant_batch_discard_txn(filling(target));
	target->skipping = true;
	/* Each destination keeps its first hole only: it halts there. */
	for (int i = 0; i < target->nmarks; i++)
	{
		ReplicantRenderMark *mark = &target->marks[i];

		if (mark->position >= commit_lsn || mark->hole != InvalidXLogRecPtr)
			continue;
		if (kept == NULL)
			kept = MemoryContextStrdup(GetMemoryChunkContext(target), reason);
		mark->hole = commit_lsn;
		mark->hole_reason = kept;
	}
	return true;
}

XLogRecPtr
replicant_render_hole_of(const ReplicantRenderTarget *target, int32 destination, const char **reason)
{
	for (int i = 0; i < target->nmarks; i++)
		if (target->marks[i].destination == destination)
		{
			*reason = target->marks[i].hole_reason;
			return target->marks[i].hole;
		}
	return InvalidXLogRecPtr;
}

void
replicant_render_begin(List *targets, XLogRecPtr commit_lsn)
{
	ListCell *lc;

	foreach(lc, targets)
	{
		ReplicantRenderTarget *target = lfirst(lc);

		target->skipping = commit_lsn <= target->skip_upto;

		if (target->txn_messages.data && target->txn_messages.maxlen > MESSAGES_KEEP_BYTES)
		{
			/* What one large message grew is not kept for the next transaction. */
			pfree(target->txn_messages.data);
			target->txn_messages.data = NULL;
		}
		if (target->txn_messages.data)
			resetStringInfo(&target->txn_messages);
	}
}

void
replicant_render_begin_txn(List *targets, const char *pipeline, const ReplicantTxn *record)
{
	ListCell *lc;

	foreach(lc, targets)
	{
		ReplicantRenderTarget *target = lfirst(lc);
		StringInfo head;

		if (!replicant_render_takes(target))
			continue;
		/* a header is a few numbers and names: rendered in place */
		head = replicant_batch_begin_txn(filling(target), record->commit_lsn,
										 record->commit_time, 256);
		target->format->begin_txn(head, pipeline, record);
	}
}

/*
 * About how many bytes a format renders record in: its rows and a little
 * framing (names, op, envelope).  Only the batch's decision to spill uses it.
 */
static size_t
length_hint(const ReplicantChange *record)
{
	size_t len = 256;

	if (record->key)
		len += record->key->len;
	if (record->new_row)
		len += record->new_row->len;
	if (record->old_row)
		len += record->old_row->len;
	if (record->unchanged)
		len += record->unchanged->len;
	return len;
}

void
replicant_render_change(List *targets, const char *pipeline, const ReplicantChange *record)
{
	ListCell *lc;

	foreach(lc, targets)
	{
		ReplicantRenderTarget *target = lfirst(lc);

		if (replicant_render_takes(target))
			target->format->change(replicant_batch_begin_change(filling(target),
																length_hint(record)),
								   pipeline, record);
	}
}

/*
 * The messages live as long as the target; what the format allocates
 * meanwhile goes with the caller's (per-change) context.
 */
void
replicant_render_message(List *targets, const char *pipeline, const ReplicantMessage *record)
{
	ListCell *lc;

	foreach(lc, targets)
	{
		ReplicantRenderTarget *target = lfirst(lc);

		if (!replicant_render_takes(target))
			continue;
		if (target->txn_messages.data == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(target));

			initStringInfo(&target->txn_messages);
			MemoryContextSwitchTo(old);
		}
		if (target->txn_messages.len > 0)
			appendStringInfoString(&target->txn_messages, target->format->separator);
		target->format->message(&target->txn_messages, pipeline, record);
	}
}

void
replicant_render_end_txn(List *targets, const char *pipeline, const ReplicantTxn *record,
						 XLogRecPtr end_lsn)
{
	ListCell *lc;

	foreach(lc, targets)
	{
		ReplicantRenderTarget *target = lfirst(lc);
		bool messages = target->txn_messages.data && target->txn_messages.len > 0;
		ReplicantBatch *batch;
		StringInfo tail;

		if (!replicant_render_takes(target))
			continue;
		batch = filling(target);
		tail = replicant_batch_begin_tail(batch, 64 + (messages ? target->txn_messages.len : 0));
		target->format->end_txn(tail, pipeline, record, batch->txn_nchanges,
								messages ? target->txn_messages.data : NULL);
		replicant_batch_end_txn(batch, end_lsn);
	}
}

/* Each target takes the rows in its own format (the chunk holds them in each). */
void
replicant_render_kept_rows(List *targets, const ReplicantChunk *chunk, List *rows)
{
	ListCell *lc;
	ListCell *lt;

	foreach(lt, targets)
	{
		ReplicantRenderTarget *target = lfirst(lt);

		/* a whole-row format's update carries the columns itself */
		if (!replicant_render_takes(target) || target->format->whole_rows)
			continue;
		foreach(lc, rows)
		{
			const char *change = replicant_chunk_row_change(chunk, lfirst(lc), target->format);

			replicant_batch_add_change(filling(target), change, strlen(change));
		}
	}
}
