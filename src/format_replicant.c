/*
 * format_replicant.c
 *		replicant's own wire format, the sink protocol of the README: one
 *		JSON object per request, {"pipeline":...,"kind":...,...}, with
 *		changes as {"op":...,"schema":...,"table":...,"key":...,...}.
 */
#include "postgres.h"

#include "common/base64.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "compat.h"
#include "encode_scalar.h"
#include "encoder.h"
#include "format.h"

static const char body_end[] = "]}";

/* What every change of an op starts with, and its length. */
#define OPENER(op) \
	{ \
		"{\"op\":\"" op "\",", sizeof("{\"op\":\"" op "\",") - 1 \
	}
static const struct
{
	const char *text;
	int len;
} op_openers[] = {
	[REPLICANT_OP_INSERT] = OPENER("insert"),
	[REPLICANT_OP_UPDATE] = OPENER("update"),
	[REPLICANT_OP_DELETE] = OPENER("delete"),
	[REPLICANT_OP_TRUNCATE] = OPENER("truncate"),
	[REPLICANT_OP_READ] = OPENER("read"),
};

/* Appends a literal, its length known at compile time. */
#define append_literal(out, literal) \
	replicant_append_bytes(out, literal, sizeof(literal) - 1)

/*
 * {"pipeline":"<name>"[,"destination":"<name>"]: a destination other than
 * "default" says so, so that a receiver taking several keys its watermark
 * by both (docs/sink-protocol.md).
 */
static void
begin_body(StringInfo out, const char *pipeline, const char *destination)
{
	appendStringInfoString(out, "{\"pipeline\":");
	replicant_encode_string(out, pipeline);
	if (destination != NULL)
	{
		appendStringInfoString(out, ",\"destination\":");
		replicant_encode_string(out, destination);
	}
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
 * append_relation() for a change, from the text made for the relation of
 * the change before: consecutive changes are mostly of one table, whose
 * names would otherwise be measured, escaped (and in another database
 * encoding converted) every time.  Matched by name, not by address:
 * relation records are freed and their memory reused.
 */
static void
append_change_relation(StringInfo out, const ReplicantRelation *relation)
{
	static StringInfoData text;
	static char *schema = NULL; /* NULL: text holds nothing usable */
	static char *table = NULL;

	if (schema == NULL || strcmp(schema, relation->schema) != 0 ||
		strcmp(table, relation->table) != 0)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		if (text.data == NULL)
			initStringInfo(&text);
		if (schema != NULL)
		{
			pfree(schema);
			pfree(table);
			schema = NULL;
		}
		resetStringInfo(&text);
		append_relation(&text, relation);
		table = pstrdup(relation->table);
		schema = pstrdup(relation->schema);
		MemoryContextSwitchTo(old);
	}
	replicant_append_bytes(out, text.data, text.len);
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
	replicant_append_bytes(out, opener, opener_len);
	if (value)
		replicant_append_bytes(out, value->data, value->len);
	else
		replicant_append_bytes(out, "null", 4);
}

/*
 * Every op but truncate has "key"; "new" when there is a new row; update
 * and delete have "old"; update has "unchanged".
 */
static void
render_change(StringInfo out, const char *pipeline, const ReplicantChange *change)
{
	ReplicantOp op = change->op;

	replicant_append_bytes(out, op_openers[op].text, op_openers[op].len);
	append_change_relation(out, change->relation);
	if (op != REPLICANT_OP_TRUNCATE)
	{
		append_field(out, ",\"key\":", change->key);
		if (change->new_row)
			append_field(out, ",\"new\":", change->new_row);
		if (op == REPLICANT_OP_UPDATE || op == REPLICANT_OP_DELETE)
			append_field(out, ",\"old\":", change->old_row);
		if (op == REPLICANT_OP_UPDATE)
		{
			append_literal(out, ",\"unchanged\":[");
			if (change->unchanged)
				replicant_append_bytes(out, change->unchanged->data, change->unchanged->len);
			appendStringInfoChar(out, ']');
		}
	}
	appendStringInfoChar(out, '}');
}

/* Writes a literal at p (room made beforehand) and moves p past it. */
#define put_literal(p, literal) \
	(memcpy(p, literal, sizeof(literal) - 1), (p) += sizeof(literal) - 1)

static void
begin_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn)
{
	char *p;

	/* once per transaction, so once per change for small ones: one enlarge */
	replicant_reserve(out, 64 + 2 * MAXINT8LEN);
	p = out->data + out->len;
	put_literal(p, "{\"xid\":");
	p += pg_ultoa_n(txn->xid, p);
	put_literal(p, ",\"commit_lsn\":");
	p += pg_ulltoa_n((uint64) txn->commit_lsn, p);
	put_literal(p, ",\"commit_time\":");
	out->len = p - out->data;
	replicant_encode_timestamptz(out, txn->commit_time);
	append_literal(out, ",\"changes\":[");
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
	appendStringInfoCharMacro(out, ']');
	if (messages != NULL)
		appendStringInfo(out, ",\"messages\":[%s]", messages);
	appendStringInfoCharMacro(out, '}');
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
	begin_body(&request->buffer, pipeline, request->destination);
	appendStringInfoString(&request->buffer, ",\"kind\":\"changes\",\"transactions\":[");
	replicant_batch_body(batch, first, last, &request->buffer, body_end, &request->range,
						 &request->body);
	return true;
}

/* An LSN as the protocol writes one ("16/B374D848"), or null. */
static void
append_lsn(StringInfo out, XLogRecPtr lsn)
{
	if (XLogRecPtrIsInvalid(lsn))
		appendStringInfoString(out, "null");
	else
		appendStringInfo(out, "\"%X/%X\"", LSN_FORMAT_ARGS(lsn));
}

void
replicant_format_append_resync(StringInfo out, const ReplicantResync *resync)
{
	appendStringInfoString(out, "{\"reason\":");
	replicant_encode_string(out, resync->reason);
	appendStringInfoString(out, ",\"lost_from\":");
	append_lsn(out, resync->lost_from);
	appendStringInfoString(out, ",\"lost_to\":");
	append_lsn(out, resync->lost_to);
	appendStringInfo(out, ",\"sweep\":%s", resync->sweep ? "true" : "false");
	/* One destination's resync: its watermark stays (docs/sink-protocol.md). */
	if (resync->beside_stream)
		appendStringInfoString(out, ",\"beside_stream\":true");
	appendStringInfoChar(out, '}');
}

void
replicant_format_append_snapshot(StringInfo out, const ReplicantRelation *relation,
								 int64 backfill_id, bool first, bool last,
								 const ReplicantResync *resync)
{
	appendStringInfoChar(out, '{');
	append_relation(out, relation);
	appendStringInfo(out, ",\"backfill_id\":" INT64_FORMAT ",\"first\":%s,\"last\":%s",
					 backfill_id, first ? "true" : "false", last ? "true" : "false");
	if (resync != NULL)
	{
		appendStringInfoString(out, ",\"resync\":");
		replicant_format_append_resync(out, resync);
	}
	appendStringInfoChar(out, '}');
}

static void
snapshot_begin(StringInfo out, const char *pipeline, const char *destination,
			   const ReplicantRelation *relation, int64 backfill_id, bool first, bool last,
			   const ReplicantResync *resync)
{
	begin_body(out, pipeline, destination);
	appendStringInfoString(out, ",\"kind\":\"snapshot\",\"snapshot\":");
	replicant_format_append_snapshot(out, relation, backfill_id, first, last, resync);
	appendStringInfoString(out, ",\"changes\":[");
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
	begin_body(&request->buffer, pipeline, request->destination);
	appendStringInfoString(&request->buffer, ",\"kind\":\"message\",\"message\":");
	render_message(&request->buffer, pipeline, message);
	appendStringInfoChar(&request->buffer, '}');
	replicant_body_from_buffer(&request->body, &request->memory, &request->buffer);
}

const ReplicantFormat replicant_format_replicant = {
	.name = "replicant",
	.content_type = "application/json",
	.resets_watermark = true,
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
