/*
 * format_replicant.c
 *		replicant's own wire format, the sink protocol of the README: one
 *		JSON object per request, {"pipeline":...,"kind":...,...}, with
 *		changes as {"op":...,"schema":...,"table":...,"key":...,...}.
 */
#include "postgres.h"

#include "common/base64.h"
#include "utils/builtins.h"

#include "compat.h"
#include "encoder.h"
#include "format.h"

static const char body_end[] = "]}";

/* What every change of an op starts with. */
static const char *const op_openers[] = {
	[REPLICANT_OP_INSERT] = "{\"op\":\"insert\",",
	[REPLICANT_OP_UPDATE] = "{\"op\":\"update\",",
	[REPLICANT_OP_DELETE] = "{\"op\":\"delete\",",
	[REPLICANT_OP_TRUNCATE] = "{\"op\":\"truncate\",",
	[REPLICANT_OP_READ] = "{\"op\":\"read\",",
};

/* {"pipeline":"<name>", */
static void
begin_body(StringInfo out, const char *pipeline)
{
	appendStringInfoString(out, "{\"pipeline\":");
	replicant_encode_string(out, pipeline);
}

static void
append_relation(StringInfo out, const ReplicantRelation *relation)
{
	appendStringInfoString(out, "\"schema\":");
	replicant_encode_string(out, relation->schema);
	appendStringInfoString(out, ",\"table\":");
	replicant_encode_string(out, relation->table);
}

/*
 * Appends ,"name":value; opener is the literal ,"name": (once per field of
 * every change: no format string to parse, no length to count).
 */
#define append_field(out, opener, value) \
	append_field_after(out, opener, sizeof(opener) - 1, value)

static void
append_field_after(StringInfo out, const char *opener, int opener_len, StringInfo value)
{
	appendBinaryStringInfo(out, opener, opener_len);
	if (value)
		appendBinaryStringInfo(out, value->data, value->len);
	else
		appendBinaryStringInfo(out, "null", 4);
}

/*
 * Every op but truncate has "key"; "new" when there is a new row; update
 * and delete have "old"; update has "unchanged".
 */
static void
render_change(StringInfo out, const char *pipeline, const ReplicantChange *change)
{
	ReplicantOp op = change->op;

	appendStringInfoString(out, op_openers[op]);
	append_relation(out, change->relation);
	if (op != REPLICANT_OP_TRUNCATE)
	{
		append_field(out, ",\"key\":", change->key);
		if (change->new_row)
			append_field(out, ",\"new\":", change->new_row);
		if (op == REPLICANT_OP_UPDATE || op == REPLICANT_OP_DELETE)
			append_field(out, ",\"old\":", change->old_row);
		if (op == REPLICANT_OP_UPDATE)
		{
			appendStringInfoString(out, ",\"unchanged\":[");
			if (change->unchanged)
				appendBinaryStringInfo(out, change->unchanged->data, change->unchanged->len);
			appendStringInfoChar(out, ']');
		}
	}
	appendStringInfoChar(out, '}');
}

static void
begin_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn)
{
	/* once per transaction, so once per change for small ones: no format string */
	appendStringInfoString(out, "{\"xid\":");
	enlargeStringInfo(out, MAXINT8LEN);
	out->len += pg_ultoa_n(txn->xid, out->data + out->len);
	appendStringInfoString(out, ",\"commit_lsn\":");
	enlargeStringInfo(out, MAXINT8LEN);
	out->len += pg_ulltoa_n((uint64) txn->commit_lsn, out->data + out->len);
	appendStringInfoString(out, ",\"commit_time\":");
	replicant_encode_timestamptz(out, txn->commit_time);
	appendStringInfoString(out, ",\"changes\":[");
}

/* {"prefix":...,"content":"<base64>","lsn":N}; the content is user bytes. */
static void
render_message(StringInfo out, const char *pipeline, const ReplicantMessage *message)
{
	int len = pg_b64_enc_len(message->size);
	char *b64 = palloc(len + 1);

	len = pg_b64_encode((const ReplicantB64Byte *) message->content, message->size, b64, len);
	b64[Max(len, 0)] = '\0';
	appendStringInfoString(out, "{\"prefix\":");
	replicant_encode_string(out, message->prefix);
	appendStringInfo(out, ",\"content\":\"%s\",\"lsn\":" UINT64_FORMAT "}", b64,
					 (uint64) message->lsn);
	pfree(b64);
}

static void
end_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn,
		int64 nchanges, const char *messages)
{
	appendStringInfoChar(out, ']');
	if (messages != NULL)
		appendStringInfo(out, ",\"messages\":[%s]", messages);
	appendStringInfoChar(out, '}');
}

/* One request per range, named after its last commit. */
static bool
stream_request(const char *pipeline, ReplicantBatch *batch, int first, int last,
			   int i, ReplicantRequest *request)
{
	if (i > 0)
		return false;
	request->webhook_id = psprintf("%s-" UINT64_FORMAT, pipeline,
								   (uint64) batch->txns[last].commit_lsn);
	initStringInfo(&request->buffer);
	begin_body(&request->buffer, pipeline);
	appendStringInfoString(&request->buffer, ",\"kind\":\"changes\",\"transactions\":[");
	replicant_batch_body(batch, first, last, &request->buffer, body_end, &request->body);
	return true;
}

static void
snapshot_begin(StringInfo out, const char *pipeline, const ReplicantRelation *relation,
			   int64 backfill_id, bool first, bool last)
{
	begin_body(out, pipeline);
	appendStringInfoString(out, ",\"kind\":\"snapshot\",\"snapshot\":{");
	append_relation(out, relation);
	appendStringInfo(out, ",\"backfill_id\":" INT64_FORMAT ",\"first\":%s,\"last\":%s},\"changes\":[",
					 backfill_id, first ? "true" : "false", last ? "true" : "false");
}

static void
snapshot_end(StringInfo out)
{
	appendStringInfoString(out, body_end);
}

/* Named after the message's LSN. */
static void
message_request(const char *pipeline, const ReplicantMessage *message,
				ReplicantRequest *request)
{
	request->webhook_id = psprintf("%s-m" UINT64_FORMAT, pipeline, (uint64) message->lsn);
	initStringInfo(&request->buffer);
	begin_body(&request->buffer, pipeline);
	appendStringInfoString(&request->buffer, ",\"kind\":\"message\",\"message\":");
	render_message(&request->buffer, pipeline, message);
	appendStringInfoChar(&request->buffer, '}');
	replicant_body_from_buffer(&request->body, &request->memory, &request->buffer);
}

const ReplicantFormat replicant_format_replicant = {
	.name = "replicant",
	.content_type = "application/json",
	.separator = ",",
	.change = render_change,
	.begin_txn = begin_txn,
	.message = render_message,
	.end_txn = end_txn,
	.stream_request = stream_request,
	.snapshot_begin = snapshot_begin,
	.snapshot_end = snapshot_end,
	.snapshot_end_len = sizeof(body_end) - 1,
	.message_request = message_request,
};
