/*
 * output_plugin.c
 *		replicant's logical decoding output plugin.
 *
 * The reorder buffer calls these callbacks for every committed transaction,
 * in commit order, while the pipeline worker drives decoding (decoder.c).
 * The plugin decides what the publications deliver (publication.c), has
 * each change encoded (encoder.c) and appends it to the worker's batch
 * (batch.c); it knows nothing about HTTP.  The transaction header is
 * deferred to the first delivered change, so transactions that touch no
 * published table (including the worker's own checkpoint writes) produce
 * nothing.
 *
 * Nothing here may raise an error for a condition that must halt the
 * pipeline: it records a value-free reason instead and delivers nothing
 * more, and the worker halts once the record has been processed.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "common/base64.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "compat.h"
#include "encoder.h"
#include "output_plugin.h"
#include "partition_root.h"
#include "publication.h"

PGDLLEXPORT void _PG_output_plugin_init(OutputPluginCallbacks *cb);

ReplicantDecodingState *
replicant_output_state(LogicalDecodingContext *ctx)
{
	return (ReplicantDecodingState *) ctx->output_plugin_private;
}

static void
replicant_startup(LogicalDecodingContext *ctx, OutputPluginOptions *options,
				  bool is_init)
{
	ReplicantDecodingState *state;
	bool		from_worker = false;
	ListCell   *lc;

	options->output_type = OUTPUT_PLUGIN_TEXTUAL_OUTPUT;
	options->receive_rewrites = false;
	if (is_init)
		return;

	foreach(lc, ctx->output_plugin_options)
	{
		DefElem    *elem = lfirst(lc);

		if (strcmp(elem->defname, REPLICANT_PLUGIN_OPTION) == 0)
			from_worker = true;
	}
	if (!from_worker)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the replicant output plugin can only be used by replicant pipelines"),
				 errhint("Use replicant.create_pipeline() to stream changes.")));

	state = MemoryContextAllocZero(ctx->context, sizeof(ReplicantDecodingState));
	state->change_context = AllocSetContextCreate(ctx->context,
												  "replicant change",
												  ALLOCSET_DEFAULT_SIZES);
	state->txn_messages.data = NULL;
	ctx->output_plugin_private = state;
}

static void
replicant_shutdown(LogicalDecodingContext *ctx)
{
}

static void
replicant_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);

	state->txn_open = false;
	if (state->txn_messages.data)
		resetStringInfo(&state->txn_messages);
}

static void
halt(ReplicantDecodingState *state, const char *reason)
{
	if (state->halt_reason != NULL)
		return;
	state->halt_reason = MemoryContextStrdup(GetMemoryChunkContext(state), reason);
	if (state->txn_open)
		replicant_batch_discard_txn(state->batch);
	state->txn_open = false;
	list_free_deep(state->pending_messages);
	state->pending_messages = NIL;
}

/* Whether a change of txn must be looked at; opens the transaction lazily. */
static bool
wanted(ReplicantDecodingState *state, ReorderBufferTXN *txn)
{
	return state->halt_reason == NULL && txn->final_lsn > state->skip_upto;
}

static void
open_txn(ReplicantDecodingState *state, ReorderBufferTXN *txn)
{
	if (state->txn_open)
		return;
	replicant_batch_begin_txn(state->batch, txn->xid, txn->final_lsn,
							  txn->xact_time.commit_time);
	state->txn_open = true;
}

/*
 * Looks up what to deliver of rel; halts when that cannot be done right.
 * Conditions an operator can fix (a missing publication, privileges, a
 * schema change) are accepted for changes committed before the last
 * resume_pipeline: the operator saw the halt and chose to go on.
 */
static ReplicantRelInfo *
relinfo_or_halt(ReplicantDecodingState *state, ReorderBufferTXN *txn, Relation rel)
{
	ReplicantRelInfo *info = replicant_publication_relinfo(rel);
	bool		resumed = txn->final_lsn <= state->resumed_lsn;
	char	   *missing;

	if (info->own)
		return NULL;
	missing = replicant_publication_check(txn->final_lsn);
	if (missing)
	{
		/* Nothing can say what it would have published: deliver nothing. */
		if (!resumed)
		{
			state->halt_lsn = txn->final_lsn;
			halt(state, missing);
		}
		return NULL;
	}
	/* Only in publications alter_pipeline added after this commit. */
	if (info->published && txn->final_lsn < info->published_from)
		return NULL;
	if (info->halt_reason && !(info->halt_resumable && resumed))
	{
		state->halt_lsn = txn->final_lsn;
		halt(state, info->halt_reason);
		return NULL;
	}
	if (info->schema_change)
	{
		if (!resumed)
		{
			state->halt_lsn = txn->final_lsn;
			halt(state, info->schema_change);
			return NULL;
		}
		/* Resumed past this change: take the new schema. */
		pfree(info->schema_change);
		info->schema_change = NULL;
	}
	if (!info->published)
		return NULL;
	strlcpy(state->current_table, RelationGetRelationName(rel), NAMEDATALEN);
	return info;
}

/* The change's key object (or null), as the snapshot path keys rows too. */
static void
encode_key(StringInfo out, ReplicantRelInfo *info, TupleDesc desc,
		   Datum *values, bool *nulls)
{
	if (info->key_columns)
		replicant_encode_object(out, desc, values, nulls, info->key_columns,
								REPLICANT_TOAST_UNCHANGED, NULL);
	else if (info->key_whole_row)
		replicant_encode_object(out, desc, values, nulls, NULL,
								REPLICANT_TOAST_UNCHANGED, NULL);
	else
		appendStringInfoString(out, "null");
}

static void
append_key(StringInfo out, ReplicantRelInfo *info, TupleDesc desc,
		   Datum *values, bool *nulls)
{
	appendStringInfoString(out, ",\"key\":");
	encode_key(out, info, desc, values, nulls);
}

/*
 * "old": the whole old row under REPLICA IDENTITY FULL, else the old key
 * columns when the old tuple was logged (key changed, or a delete).
 */
static void
append_old(StringInfo out, ReplicantRelInfo *info, TupleDesc desc,
		   Datum *values, bool *nulls)
{
	appendStringInfoString(out, ",\"old\":");
	if (values == NULL)
		appendStringInfoString(out, "null");
	else if (info->identity_full || info->key_columns == NULL)
		replicant_encode_object(out, desc, values, nulls, NULL,
								REPLICANT_TOAST_UNCHANGED, NULL);
	else
		replicant_encode_object(out, desc, values, nulls, info->key_columns,
								REPLICANT_TOAST_UNCHANGED, NULL);
}

/*
 * Whether a delivered change of txn to relation collides with the backfill
 * chunk: it comes inside the chunk's window, or the chunk's snapshot did
 * not see its transaction (commit record below the low watermark, proc
 * array not updated yet when the snapshot was taken).
 */
static bool
collides(ReplicantDecodingState *state, ReorderBufferTXN *txn, Relation relation)
{
	ReplicantChunk *chunk = state->chunk;

	if (chunk == NULL || chunk->complete ||
		chunk->backfill->relid != RelationGetRelid(relation))
		return false;
	return chunk->open || !replicant_chunk_sees(chunk, txn->xid);
}

/*
 * A colliding change supersedes the chunk's rows with its old and its new
 * key: the chunk may have read either version, and the stream's is at
 * least as new.  An update that left TOASTed columns out ("unchanged")
 * keeps the row it updates: the row as read goes into the batch first, so
 * a sink that never saw the row still gets those columns.  The columns are
 * the update's too: it did not change them, and any later change to them
 * comes after it in the stream.  A table without a key has no way to tell
 * its rows apart: nothing is dropped (duplicates, never loss).
 */
static void
drop_from_chunk(ReplicantDecodingState *state, ReorderBufferTXN *txn,
				ReplicantRelInfo *info, Relation relation,
				Datum *new_values, bool *new_nulls,
				Datum *old_values, bool *old_nulls, bool unchanged_toast)
{
	ReplicantChunk *chunk = state->chunk;
	TupleDesc	desc = replicant_partition_root_desc(&info->root, relation);
	StringInfoData key;

	if (!collides(state, txn, relation))
		return;
	if (info->key_columns == NULL && !info->key_whole_row)
		return;
	initStringInfo(&key);
	if (old_values)
	{
		encode_key(&key, info, desc, old_values, old_nulls);
		replicant_chunk_drop_key(chunk, key.data, key.len,
								 unchanged_toast ? state->batch : NULL);
	}
	if (new_values)
	{
		resetStringInfo(&key);
		encode_key(&key, info, desc, new_values, new_nulls);
		replicant_chunk_drop_key(chunk, key.data, key.len,
								 (unchanged_toast && old_values == NULL) ? state->batch : NULL);
	}
}

static void
replicant_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				 Relation relation, ReorderBufferChange *change)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);
	ReplicantRelInfo *info;
	TupleDesc	desc;
	HeapTuple	newtuple;
	HeapTuple	oldtuple;
	Datum	   *new_values = NULL;
	bool	   *new_nulls = NULL;
	Datum	   *old_values = NULL;
	bool	   *old_nulls = NULL;
	const char *op;
	bool		published;
	StringInfo	out = &state->change;
	MemoryContext old;

	if (!wanted(state, txn))
		return;

	old = MemoryContextSwitchTo(state->change_context);
	info = relinfo_or_halt(state, txn, relation);
	if (info == NULL)
		goto done;

	switch (change->action)
	{
		case REORDER_BUFFER_CHANGE_INSERT:
			op = "insert";
			published = info->pub_insert;
			break;
		case REORDER_BUFFER_CHANGE_UPDATE:
			op = "update";
			published = info->pub_update;
			break;
		case REORDER_BUFFER_CHANGE_DELETE:
			op = "delete";
			published = info->pub_delete;
			break;
		default:
			elog(ERROR, "unexpected reorder buffer change %d", (int) change->action);
	}
	if (!published)
		goto done;

	/* A partition published via its root: the root's columns, by name. */
	desc = replicant_partition_root_desc(&info->root, relation);
	newtuple = replicant_partition_root_tuple(&info->root, REPLICANT_CHANGE_NEWTUPLE(change));
	oldtuple = replicant_partition_root_tuple(&info->root, REPLICANT_CHANGE_OLDTUPLE(change));
	if (newtuple)
	{
		new_values = palloc(desc->natts * sizeof(Datum));
		new_nulls = palloc(desc->natts * sizeof(bool));
		heap_deform_tuple(newtuple, desc, new_values, new_nulls);
	}
	if (oldtuple)
	{
		old_values = palloc(desc->natts * sizeof(Datum));
		old_nulls = palloc(desc->natts * sizeof(bool));
		heap_deform_tuple(oldtuple, desc, old_values, old_nulls);
	}
	if (new_values == NULL && old_values == NULL)
		goto done;				/* a delete without replica identity */

	open_txn(state, txn);
	initStringInfo(out);
	appendStringInfo(out, "{\"op\":\"%s\",%s", op, info->names_json);
	if (old_values)
		append_key(out, info, desc, old_values, old_nulls);
	else
		append_key(out, info, desc, new_values, new_nulls);

	if (new_values)
	{
		initStringInfo(&state->unchanged);
		appendStringInfoString(out, ",\"new\":");
		replicant_encode_object(out, desc, new_values, new_nulls, NULL,
								REPLICANT_TOAST_UNCHANGED, &state->unchanged);
	}
	if (change->action != REORDER_BUFFER_CHANGE_INSERT)
		append_old(out, info, desc, old_values, old_nulls);
	if (change->action == REORDER_BUFFER_CHANGE_UPDATE)
		appendStringInfo(out, ",\"unchanged\":[%s]", state->unchanged.data);
	appendStringInfoChar(out, '}');

	drop_from_chunk(state, txn, info, relation, new_values, new_nulls, old_values, old_nulls,
					change->action == REORDER_BUFFER_CHANGE_UPDATE && state->unchanged.len > 0);
	replicant_batch_add_change(state->batch, out->data, out->len);

done:
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_context);
}

static void
replicant_truncate(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				   int nrelations, Relation relations[],
				   ReorderBufferChange *change)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);
	MemoryContext old;
	List	   *delivered = NIL;	/* relids whose truncate was delivered */
	List	   *as_root = NIL;	/* partitions left out (indexes), */
	List	   *roots = NIL;	/* and the roots they are delivered as */
	int			i;

	if (!wanted(state, txn))
		return;

	old = MemoryContextSwitchTo(state->change_context);
	for (i = 0; i < nrelations && state->halt_reason == NULL; i++)
	{
		ReplicantRelInfo *info = relinfo_or_halt(state, txn, relations[i]);
		StringInfoData out;

		if (info == NULL || !info->pub_truncate)
			continue;
		/* A partition delivered as its root: truncated when the root is. */
		if (replicant_partition_root_skips_truncate(&info->root, relations[i]))
		{
			as_root = lappend_int(as_root, i);
			roots = lappend_oid(roots, info->root.relid);
			continue;
		}
		open_txn(state, txn);
		initStringInfo(&out);
		appendStringInfo(&out, "{\"op\":\"truncate\",%s}", info->names_json);
		delivered = lappend_oid(delivered, RelationGetRelid(relations[i]));
		if (collides(state, txn, relations[i]))
			replicant_chunk_drop_all(state->chunk);
		replicant_batch_add_change(state->batch, out.data, out.len);
	}
	/* A chunk of such a partition read rows that its root's truncate removed. */
	for (i = 0; i < list_length(as_root) && state->halt_reason == NULL; i++)
		if (list_member_oid(delivered, list_nth_oid(roots, i)) &&
			collides(state, txn, relations[list_nth_int(as_root, i)]))
			replicant_chunk_drop_all(state->chunk);
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_context);
}

static void
replicant_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				 XLogRecPtr commit_lsn)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);

	if (state->txn_open)
		replicant_batch_end_txn(state->batch, txn->end_lsn,
								(state->txn_messages.data && state->txn_messages.len > 0) ?
								state->txn_messages.data : NULL);
	state->txn_open = false;
}

/* Whether the pipeline delivers messages with this prefix. */
static bool
message_wanted(ReplicantDecodingState *state, const char *prefix)
{
	ListCell   *lc;

	if (!state->messages || strncmp(prefix, "replicant.", 10) == 0)
		return false;
	if (state->message_prefixes == NIL)
		return true;
	foreach(lc, state->message_prefixes)
		if (strcmp(lfirst(lc), prefix) == 0)
			return true;
	return false;
}

/* {"prefix":...,"content":"<base64>","lsn":N}; the content is user bytes. */
static void
encode_message(StringInfo out, XLogRecPtr lsn, const char *prefix,
			   Size size, const char *message)
{
	int			len = pg_b64_enc_len(size);
	char	   *b64 = palloc(len + 1);

	len = pg_b64_encode((const ReplicantB64Byte *) message, size, b64, len);
	b64[Max(len, 0)] = '\0';
	appendStringInfoString(out, "{\"prefix\":");
	replicant_encode_string(out, prefix);
	appendStringInfo(out, ",\"content\":\"%s\",\"lsn\":" UINT64_FORMAT "}", b64, (uint64) lsn);
	pfree(b64);
}

/*
 * Messages from pg_logical_emit_message(): a transactional one rides its
 * transaction's "messages" array; a non-transactional one is delivered on
 * its own, at its place in the stream.  Watermarks of incremental backfills
 * open and complete their chunk.
 */
static void
replicant_message(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				  XLogRecPtr message_lsn, bool transactional, const char *prefix,
				  Size message_size, const char *message)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);
	ReplicantChunk *chunk = state->chunk;
	size_t		token_len;

	if (state->halt_reason != NULL)
		return;
	if (message_wanted(state, prefix))
	{
		MemoryContext old;

		if (transactional)
		{
			if (!wanted(state, txn))
				return;
			open_txn(state, txn);
			old = MemoryContextSwitchTo(GetMemoryChunkContext(state));
			if (state->txn_messages.data == NULL)
				initStringInfo(&state->txn_messages);
			MemoryContextSwitchTo(old);
			if (state->txn_messages.len > 0)
				appendStringInfoChar(&state->txn_messages, ',');
			encode_message(&state->txn_messages, message_lsn, prefix, message_size, message);
		}
		else
		{
			StringInfoData out;

			old = MemoryContextSwitchTo(GetMemoryChunkContext(state));
			initStringInfo(&out);
			encode_message(&out, message_lsn, prefix, message_size, message);
			state->pending_messages = lappend(state->pending_messages, out.data);
			MemoryContextSwitchTo(old);
		}
		return;
	}
	if (strcmp(prefix, REPLICANT_WATERMARK_PREFIX) != 0 || chunk == NULL)
		return;
	token_len = strlen(chunk->token);
	if (message_size == 4 + token_len && memcmp(message, "low:", 4) == 0 &&
		memcmp(message + 4, chunk->token, token_len) == 0)
		chunk->open = true;
	else if (message_size == 5 + token_len && memcmp(message, "high:", 5) == 0 &&
			 memcmp(message + 5, chunk->token, token_len) == 0)
		chunk->complete = true;
}

void
_PG_output_plugin_init(OutputPluginCallbacks *cb)
{
	cb->startup_cb = replicant_startup;
	cb->begin_cb = replicant_begin;
	cb->change_cb = replicant_change;
	cb->truncate_cb = replicant_truncate;
	cb->commit_cb = replicant_commit;
	cb->message_cb = replicant_message;
	cb->shutdown_cb = replicant_shutdown;
}
