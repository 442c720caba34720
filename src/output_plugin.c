/*
 * output_plugin.c
 *		replicant's logical decoding output plugin.
 *
 * The reorder buffer calls these callbacks for every committed transaction,
 * in commit order, while the pipeline worker drives decoding (decoder.c).
 * The plugin decides what the publications deliver (publication.c),
 * describes each change as a record (change.h) whose rows the encoder
 * encodes (encoder.c) once, and has each render target's format render it
 * (format.h) straight into the target's filling batch (batch.c); it knows
 * neither the wire format nor HTTP.  The transaction header is
 * deferred to the first delivered change, so transactions that touch no
 * published table (including the worker's own checkpoint writes) produce
 * nothing.
 *
 * Nothing here may raise an error for a condition that must halt the
 * pipeline: it records a value-free reason instead and delivers nothing
 * more, and the worker halts once the record has been processed.  A
 * condition of one format (whole rows, targets named without the schema)
 * halts only its target; decoding halts once every target has.
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn), §8 (errors: halt or retry).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "compat.h"
#include "encoder.h"
#include "epoch.h"
#include "fault.h"
#include "format_clickhouse.h"
#include "output_plugin.h"
#include "partition_root.h"
#include "plugin_gate.h"
#include "publication.h"
#include "pubfilter.h"
#include "render_target.h"
#include "shmem.h"
#include "waiver.h"

PGDLLEXPORT void _PG_output_plugin_init(OutputPluginCallbacks *cb);

static struct EncodedRows *create_rows(MemoryContext context);

/* A buffer grown past this for a large row or message is given back after it. */
#define ROWS_KEEP_BYTES (64 * 1024)

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

	/* only replicant's own contexts: the callbacks need what the worker sets up */
	if (!replicant_plugin_gate_pass())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the replicant output plugin can only be used by replicant pipelines"),
				 errhint("Use replicant.create_pipeline() to stream changes.")));
	options->output_type = OUTPUT_PLUGIN_TEXTUAL_OUTPUT;
	options->receive_rewrites = false;
	if (is_init)
		return;

	state = MemoryContextAllocZero(ctx->context, sizeof(ReplicantDecodingState));
	state->change_context = AllocSetContextCreate(ctx->context,
												  "replicant change",
												  ALLOCSET_DEFAULT_SIZES);
	state->rows = create_rows(ctx->context);
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
	replicant_render_begin(state->targets, txn->final_lsn);
}

/* Whether a change of txn must be looked at; opens the transaction lazily. */
static bool
wanted(ReplicantDecodingState *state, ReorderBufferTXN *txn)
{
	return state->halt_reason == NULL && txn->final_lsn > state->skip_upto;
}

static void
describe_txn(ReplicantTxn *record, ReorderBufferTXN *txn)
{
	record->xid = txn->xid;
	record->commit_lsn = txn->final_lsn;
	record->end_lsn = txn->end_lsn;
	record->commit_time = txn->xact_time.commit_time;
}

static void
open_txn(ReplicantDecodingState *state, ReorderBufferTXN *txn)
{
	ReplicantTxn record;

	if (state->txn_open)
		return;
	describe_txn(&record, txn);
	replicant_render_begin_txn(state->targets, state->pipeline_name, &record);
	state->txn_open = true;
	state->txn_changes = 0;
}

/*
 * Halts target at txn's commit for reason: it gets nothing more, and loses
 * that transaction only.  Once every target halted, decoding halts: a
 * resume then accepts cause (waiver.h) for the commits up to it, or nothing
 * when cause is NULL.
 */
static void
halt_at(ReplicantDecodingState *state, ReplicantRenderTarget *target,
		ReorderBufferTXN *txn, const char *reason, const char *cause)
{
	MemoryContext context = GetMemoryChunkContext(state);

	if (state->halt_reason != NULL ||
		!replicant_render_halt(state->targets, target, txn->final_lsn, state->txn_open, reason))
		return;
	state->halt_reason = MemoryContextStrdup(context, reason);
	state->halt_cause = cause ? MemoryContextStrdup(context, cause) : NULL;
	state->halt_lsn = txn->final_lsn;
	state->txn_open = false;
	list_free_deep(state->pending_messages);
	state->pending_messages = NIL;
}

/*
 * A condition of target's format at txn: a hole when some destination of
 * target already has txn (render_target.h), else target halts.
 */
static void
halt_format_at(ReplicantDecodingState *state, ReplicantRenderTarget *target,
			   ReorderBufferTXN *txn, const char *reason)
{
	if (!replicant_render_hole(target, txn->final_lsn, reason))
		halt_at(state, target, txn, reason, NULL);
}

/* Halts every target: a condition of decoding, whatever the format. */
static void
halt_all_at(ReplicantDecodingState *state, ReorderBufferTXN *txn, const char *reason,
			const char *cause)
{
	ListCell *lc;

	foreach(lc, state->targets)
		halt_at(state, lfirst(lc), txn, reason, cause);
}

/*
 * An update left TOASTed columns unchanged, and its old row does not have
 * them: a format that needs every column can neither leave them out nor
 * know their values.  Halts the targets of such formats.
 */
static void
halt_whole_row_targets(ReplicantDecodingState *state, ReorderBufferTXN *txn,
					   Relation relation)
{
	ListCell *lc;

	foreach(lc, state->targets)
	{
		ReplicantRenderTarget *target = lfirst(lc);

		if (target->format->whole_rows && replicant_render_takes(target))
			halt_format_at(state, target, txn, psprintf("update of table \"%s\" left TOASTed columns unchanged, and the table's replica identity does not log them (the clickhouse format needs ALTER TABLE ... REPLICA IDENTITY FULL)", RelationGetRelationName(relation)));
	}
}

/* Whether a resume accepted cause for txn's commit. */
static bool
waived(ReplicantDecodingState *state, ReorderBufferTXN *txn, const char *cause)
{
	return replicant_waiver_covers(state->waivers, cause, txn->final_lsn);
}

/*
 * Looks up what to deliver of rel; halts when that cannot be done right.
 * A condition an operator can fix (a missing publication, privileges, a
 * schema change) is accepted for the commits up to a resume_pipeline that
 * resumed a halt on exactly it: the operator saw it and chose to go on.
 */
static ReplicantRelInfo *
relinfo_or_halt(ReplicantDecodingState *state, ReorderBufferTXN *txn, Relation rel)
{
	ReplicantRelInfo *info;
	char *missing;
	char *cause;

	replicant_publication_use_epoch(replicant_epoch_at(state->epochs, txn->final_lsn));
	replicant_publication_decoding(txn->final_lsn);
	info = replicant_publication_relinfo(rel);
	if (info->own)
		return NULL;
	/* Nothing can say what it would have published: halt, or it is empty. */
	missing = replicant_publication_missing(txn->final_lsn, state->waivers, &cause);
	if (missing)
	{
		halt_all_at(state, txn, missing, cause);
		return NULL;
	}
	/* Only in publications alter_pipeline added after this commit. */
	if (info->published && txn->final_lsn < info->published_from)
		return NULL;
	/*
	 * Only a format that names its targets after the table alone halts on
	 * two tables of one name; ahead of the privileges, as the lookup is.
	 */
	if (info->name_shared_with)
	{
		ListCell *lc;

		foreach(lc, state->targets)
		{
			ReplicantRenderTarget *target = lfirst(lc);
			const char *kind = target->format->schemaless_target;

			if (kind && replicant_render_takes(target))
				halt_format_at(state, target, txn, replicant_publication_name_clash(info, kind));
		}
		if (state->halt_reason)
			return NULL;
	}
	if (info->halt_reason)
	{
		/* Privileges: a resume accepts them once the owner may read the table. */
		cause = info->halt_privilege ?
					replicant_waiver_table_cause(REPLICANT_WAIVER_PRIVILEGE, RelationGetRelid(rel)) :
					NULL;
		if (!info->halt_resumable || !waived(state, txn, cause))
		{
			halt_all_at(state, txn, info->halt_reason, cause);
			return NULL;
		}
	}
	if (info->schema_change)
	{
		cause = replicant_waiver_shape_cause(RelationGetRelid(rel), info->schema_target);
		if (!waived(state, txn, cause))
		{
			halt_all_at(state, txn, info->schema_change, cause);
			return NULL;
		}
		/* Resumed past a change into exactly this shape: take it. */
		replicant_publication_accept_shape(info);
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
		replicant_encode_object(out, desc, values, nulls, info->filter->columns,
								REPLICANT_TOAST_UNCHANGED, NULL);
	else
		appendStringInfoString(out, "null");
}

/*
 * The old row, as the relation logged it (key changed, or a delete): the
 * whole old row under REPLICA IDENTITY FULL, else its identity's columns,
 * the only ones the old tuple holds; published columns only, null when
 * none is.
 */
static void
encode_old(StringInfo out, ReplicantRelInfo *info, TupleDesc desc,
		   Datum *values, bool *nulls)
{
	if (info->identity_full)
		replicant_encode_object(out, desc, values, nulls, info->filter->columns,
								REPLICANT_TOAST_UNCHANGED, NULL);
	else if (!bms_is_empty(info->old_columns))
		replicant_encode_object(out, desc, values, nulls, info->old_columns,
								REPLICANT_TOAST_UNCHANGED, NULL);
	else
		appendStringInfoString(out, "null");
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
	TupleDesc desc = replicant_partition_root_desc(&info->root, relation);
	StringInfoData key;
	List *dropped;

	if (!replicant_chunk_collides(chunk, RelationGetRelid(relation), txn->xid))
		return;
	if (info->key_columns == NULL && !info->key_whole_row)
		return;
	initStringInfo(&key);
	if (old_values)
	{
		encode_key(&key, info, desc, old_values, old_nulls);
		dropped = replicant_chunk_drop_key(chunk, key.data, key.len);
		if (unchanged_toast)
			replicant_render_kept_rows(state->targets, chunk, dropped);
	}
	if (new_values)
	{
		resetStringInfo(&key);
		encode_key(&key, info, desc, new_values, new_nulls);
		dropped = replicant_chunk_drop_key(chunk, key.data, key.len);
		if (unchanged_toast && old_values == NULL)
			replicant_render_kept_rows(state->targets, chunk, dropped);
	}
}

/*
 * What a change's record points to.  One set per decoding state, reused by
 * every change: allocating the buffers would cost about as much as
 * encoding a small row.
 */
typedef struct EncodedRows
{
	ReplicantTxn txn;
	StringInfoData key;
	StringInfoData new_row;
	StringInfoData old_row;
	StringInfoData unchanged;
	/* the deformed new and old rows, as wide as the widest row decoded */
	Datum *values[2];
	bool *nulls[2];
	int natts_room;
} EncodedRows;

/*
 * Deforms tuple into rows' arrays for its new (which 0) or old (1) row,
 * grown to desc's width first.  Good until the next change.
 */
static void
deform_row(EncodedRows *rows, int which, HeapTuple tuple, TupleDesc desc,
		   Datum **values, bool **nulls)
{
	/* (never NULL, even for a row of no columns: NULL means no such row) */
	if (rows->values[0] == NULL || desc->natts > rows->natts_room)
	{
		MemoryContext context = GetMemoryChunkContext(rows);
		int room = Max(desc->natts, 1);
		int i;

		for (i = 0; i < 2; i++)
		{
			if (rows->values[i])
			{
				pfree(rows->values[i]);
				pfree(rows->nulls[i]);
			}
			rows->values[i] = MemoryContextAlloc(context, room * sizeof(Datum));
			rows->nulls[i] = MemoryContextAlloc(context, room * sizeof(bool));
		}
		rows->natts_room = room;
	}
	*values = rows->values[which];
	*nulls = rows->nulls[which];
	heap_deform_tuple(tuple, desc, *values, *nulls);
}

static void
trim_buffer(StringInfo buffer)
{
	if (buffer->maxlen <= ROWS_KEEP_BYTES)
		return;
	pfree(buffer->data);
	initStringInfo(buffer);
}

/* After a change: memory held between changes stays small. */
static void
trim_rows(EncodedRows *rows)
{
	MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(rows));

	trim_buffer(&rows->key);
	trim_buffer(&rows->new_row);
	trim_buffer(&rows->old_row);
	trim_buffer(&rows->unchanged);
	MemoryContextSwitchTo(old);
}

static EncodedRows *
create_rows(MemoryContext context)
{
	MemoryContext old = MemoryContextSwitchTo(context);
	EncodedRows *rows = palloc0(sizeof(EncodedRows));

	initStringInfo(&rows->key);
	initStringInfo(&rows->new_row);
	initStringInfo(&rows->old_row);
	initStringInfo(&rows->unchanged);
	MemoryContextSwitchTo(old);
	return rows;
}

/*
 * Describes a decoded change: "key" identifies the row as it was before
 * (the old key when the old tuple was logged), "new" leaves out unchanged
 * TOASTed columns and lists them instead.
 */
static void
describe_change(ReplicantChange *record, EncodedRows *rows, ReplicantOp op,
				ReplicantDecodingState *state, ReorderBufferTXN *txn,
				ReplicantRelInfo *info, TupleDesc desc,
				Datum *new_values, bool *new_nulls,
				Datum *old_values, bool *old_nulls)
{
	/* An error from here to the end of the change names this phase (worker.c). */
	replicant_shmem_enter_phase(REPLICANT_PHASE_ENCODE);
	replicant_fault("encode");
	memset(record, 0, sizeof(ReplicantChange));
	record->op = op;
	record->relation = &info->relation;
	record->desc = desc;
	describe_txn(&rows->txn, txn);
	record->txn = &rows->txn;
	record->index = state->txn_changes++;
	resetStringInfo(&rows->key);
	if (old_values && op != REPLICANT_OP_INSERT)
		encode_key(&rows->key, info, desc, old_values, old_nulls);
	else
		encode_key(&rows->key, info, desc, new_values, new_nulls);
	record->key = &rows->key;
	/* only an update has "unchanged": the others need no list */
	resetStringInfo(&rows->unchanged);
	if (new_values)
	{
		resetStringInfo(&rows->new_row);
		replicant_encode_object(&rows->new_row, desc, new_values, new_nulls,
								info->filter->columns, REPLICANT_TOAST_UNCHANGED,
								op == REPLICANT_OP_UPDATE ? &rows->unchanged : NULL);
		record->new_row = &rows->new_row;
	}
	if (old_values)
	{
		resetStringInfo(&rows->old_row);
		encode_old(&rows->old_row, info, desc, old_values, old_nulls);
		record->old_row = &rows->old_row;
	}
	if (op == REPLICANT_OP_UPDATE)
		record->unchanged = &rows->unchanged;
}

/*
 * The row filters' verdict on a change (pubfilter.c); halts when the change
 * cannot be delivered whole.  An error while evaluating a filter is turned
 * into a halt by the worker (in_row_filter names the cause).
 */
static bool
filter_change(ReplicantDecodingState *state, ReorderBufferTXN *txn,
			  ReplicantRelInfo *info, TupleDesc desc,
			  ReorderBufferChangeType *action,
			  Datum *old_values, bool *old_nulls,
			  Datum **new_values, bool **new_nulls)
{
	char *reason;
	bool deliver;

	state->in_row_filter = true;
	deliver = replicant_pubfilter_change(info->filter, desc, info->relation.table, action,
										 old_values, old_nulls,
										 new_values, new_nulls, &reason);
	state->in_row_filter = false;
	if (reason)
		halt_all_at(state, txn, reason, NULL);
	return deliver;
}

static void
replicant_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				 Relation relation, ReorderBufferChange *change)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);
	ReplicantRelInfo *info;
	TupleDesc desc;
	HeapTuple newtuple;
	HeapTuple oldtuple;
	Datum *new_values = NULL;
	bool *new_nulls = NULL;
	Datum *old_values = NULL;
	bool *old_nulls = NULL;
	ReorderBufferChangeType action = change->action;
	ReplicantOp op;
	bool published;
	ReplicantChange record;
	EncodedRows *rows = state->rows;
	MemoryContext old;

	if (!wanted(state, txn))
		return;

	old = MemoryContextSwitchTo(state->change_context);
	info = relinfo_or_halt(state, txn, relation);
	if (info == NULL)
		goto done;

	switch (action)
	{
		case REORDER_BUFFER_CHANGE_INSERT:
			published = info->pub_insert;
			break;
		case REORDER_BUFFER_CHANGE_UPDATE:
			published = info->pub_update;
			break;
		case REORDER_BUFFER_CHANGE_DELETE:
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
		deform_row(rows, 0, newtuple, desc, &new_values, &new_nulls);
	if (oldtuple)
		deform_row(rows, 1, oldtuple, desc, &old_values, &old_nulls);
	if (new_values == NULL && old_values == NULL)
		goto done; /* a delete without replica identity */

	/* The row filter may drop the change or make an update an insert or delete. */
	if (!filter_change(state, txn, info, desc, &action,
					   old_values, old_nulls, &new_values, &new_nulls))
		goto done;
	op = (action == REORDER_BUFFER_CHANGE_INSERT) ? REPLICANT_OP_INSERT :
		 (action == REORDER_BUFFER_CHANGE_UPDATE) ? REPLICANT_OP_UPDATE :
													REPLICANT_OP_DELETE;
	if (action == REORDER_BUFFER_CHANGE_DELETE)
		new_values = NULL;

	open_txn(state, txn);
	describe_change(&record, rows, op, state, txn, info, desc,
					new_values, new_nulls, old_values, old_nulls);
	/*
	 * A whole-row format takes the unchanged columns from the old row (under
	 * REPLICA IDENTITY FULL, or those of a logged old key; an update that
	 * moved the key logs the key alone): without them its target halts, the
	 * others go on.
	 */
	if (op == REPLICANT_OP_UPDATE && !replicant_clickhouse_update_complete(&record))
	{
		halt_whole_row_targets(state, txn, relation);
		if (state->halt_reason)
			goto done;
	}
	/* before the change: rows it keeps go into the batches ahead of it */
	drop_from_chunk(state, txn, info, relation, new_values, new_nulls, old_values, old_nulls,
					op == REPLICANT_OP_UPDATE && rows->unchanged.len > 0);
	replicant_render_change(state->targets, state->pipeline_name, &record);

done:
	replicant_shmem_enter_phase(REPLICANT_PHASE_DECODE);
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_context);
	trim_rows(rows);
	replicant_decoding_pump(state);
}

static void
replicant_truncate(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				   int nrelations, Relation relations[],
				   ReorderBufferChange *change)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);
	MemoryContext old;
	List *delivered = NIL; /* relids whose truncate was delivered */
	List *as_root = NIL;   /* partitions left out (indexes), */
	List *roots = NIL;     /* and the roots they are delivered as */
	int i;

	if (!wanted(state, txn))
		return;

	old = MemoryContextSwitchTo(state->change_context);
	for (i = 0; i < nrelations && state->halt_reason == NULL; i++)
	{
		ReplicantRelInfo *info = relinfo_or_halt(state, txn, relations[i]);
		ReplicantChange record = {.op = REPLICANT_OP_TRUNCATE};
		ReplicantTxn txn_record;

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
		describe_txn(&txn_record, txn);
		record.relation = &info->relation;
		record.txn = &txn_record;
		record.index = state->txn_changes++;
		replicant_render_change(state->targets, state->pipeline_name, &record);
		delivered = lappend_oid(delivered, RelationGetRelid(relations[i]));
		if (replicant_chunk_collides(state->chunk, RelationGetRelid(relations[i]), txn->xid))
			replicant_chunk_drop_all(state->chunk);
	}
	/* A chunk of such a partition read rows that its root's truncate removed. */
	for (i = 0; i < list_length(as_root) && state->halt_reason == NULL; i++)
		if (list_member_oid(delivered, list_nth_oid(roots, i)) &&
			replicant_chunk_collides(state->chunk,
									 RelationGetRelid(relations[list_nth_int(as_root, i)]),
									 txn->xid))
			replicant_chunk_drop_all(state->chunk);
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_context);
}

static void
replicant_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn,
				 XLogRecPtr commit_lsn)
{
	ReplicantDecodingState *state = replicant_output_state(ctx);
	ReplicantTxn record;

	if (!state->txn_open)
		return;
	describe_txn(&record, txn);
	replicant_render_end_txn(state->targets, state->pipeline_name, &record, txn->end_lsn);
	state->txn_open = false;
}

/*
 * Whether the pipeline delivers messages with this prefix, committed (or,
 * non-transactional, written) at lsn: the options of its epoch decide.
 */
static bool
message_wanted(ReplicantDecodingState *state, const char *prefix, XLogRecPtr lsn)
{
	const ReplicantEpoch *epoch = replicant_epoch_at(state->epochs, lsn);
	ListCell *lc;

	if (!epoch->messages || strncmp(prefix, "replicant.", 10) == 0)
		return false;
	if (epoch->message_prefixes == NIL)
		return true;
	foreach(lc, epoch->message_prefixes)
		if (strcmp(lfirst(lc), prefix) == 0)
			return true;
	return false;
}

/* A copy of a non-transactional message in one chunk, to keep till delivery. */
static ReplicantMessage *
copy_message(XLogRecPtr lsn, const char *prefix, Size size, const char *content)
{
	size_t prefix_len = strlen(prefix);
	ReplicantMessage *copy = palloc(sizeof(ReplicantMessage) + prefix_len + 1 + size);
	char *data = (char *) copy + sizeof(ReplicantMessage);

	memcpy(data, prefix, prefix_len + 1);
	memcpy(data + prefix_len + 1, content, size);
	copy->lsn = lsn;
	copy->prefix = data;
	copy->content = data + prefix_len + 1;
	copy->size = size;
	return copy;
}

/*
 * Renders a transactional message into each target's messages of its
 * transaction; what the format allocates meanwhile goes with the
 * per-change context.
 */
static void
add_txn_message(ReplicantDecodingState *state, ReorderBufferTXN *txn,
				const ReplicantMessage *record)
{
	MemoryContext old;

	old = MemoryContextSwitchTo(state->change_context);
	open_txn(state, txn);
	replicant_render_message(state->targets, state->pipeline_name, record);
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_context);
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

	if (state->halt_reason != NULL)
		return;
	if (message_wanted(state, prefix, transactional ? txn->final_lsn : message_lsn))
	{
		if (!transactional)
		{
			MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(state));

			state->pending_messages =
				lappend(state->pending_messages,
						copy_message(message_lsn, prefix, message_size, message));
			MemoryContextSwitchTo(old);
		}
		else if (wanted(state, txn))
		{
			ReplicantMessage record = {message_lsn, prefix, message, message_size};

			add_txn_message(state, txn, &record);
		}
		return;
	}
	replicant_chunk_note_message(state->chunk, prefix, message, message_size);
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
