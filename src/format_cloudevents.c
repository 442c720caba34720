/*
 * format_cloudevents.c
 *		CloudEvents 1.0 in structured batch mode: every request is a JSON
 *		array (application/cloudevents-batch+json) with one event per change
 *		or message, whose data is the change as replicant's own format
 *		writes it.  README's "CloudEvents" section is the mapping.
 *
 * For NATS, which publishes each change as a message of its own, the
 * same events in structured mode (application/cloudevents+json, one event
 * per message): replicant_format_cloudevents_nats frames them as
 * replicant's format frames its changes, which the transport reads back
 * (sink_nats_batch.c), with a snapshot request's begin and end events
 * beside its "snapshot" object.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"

#include "encoder.h"
#include "format.h"

static const char *const type_names[] = {
	[REPLICANT_OP_INSERT] = "io.replicant.insert",
	[REPLICANT_OP_UPDATE] = "io.replicant.update",
	[REPLICANT_OP_DELETE] = "io.replicant.delete",
	[REPLICANT_OP_TRUNCATE] = "io.replicant.truncate",
	[REPLICANT_OP_READ] = "io.replicant.read",
};

#define SNAPSHOT_END_TYPE "io.replicant.snapshot.end"
/* How every snapshot end event starts (event_start's first bytes). */
#define SNAPSHOT_END_START "[{\"specversion\":\"1.0\",\"type\":\"" SNAPSHOT_END_TYPE "\""

/*
 * "/replicant/<system identifier>/<database oid>/": the database's OID, not
 * its name, which needs catalog access (markers are built outside a
 * transaction) and changes with ALTER DATABASE RENAME, while source and id
 * together must identify an event for good.
 */
static const char *
source_prefix(void)
{
	static char prefix[64];

	if (prefix[0] == '\0')
		snprintf(prefix, sizeof(prefix), "/replicant/" UINT64_FORMAT "/%u/",
				 GetSystemIdentifier(), MyDatabaseId);
	return prefix;
}

/*
 * {"specversion":"1.0","type":...,"source":...,"id":"<pipeline>-<id>"; the
 * pipeline's name ([a-z0-9_]) and the ids need no escaping.
 */
static void
event_start(StringInfo out, const char *type, const char *pipeline, const char *id)
{
	appendStringInfo(out, "{\"specversion\":\"1.0\",\"type\":\"%s\","
						  "\"source\":\"%s%s\",\"id\":\"%s-%s\"",
					 type, source_prefix(), pipeline, pipeline, id);
}

static void
append_subject(StringInfo out, const ReplicantRelation *relation)
{
	appendStringInfoString(out, ",\"subject\":");
	replicant_encode_string(out, psprintf("%s.%s", relation->schema, relation->table));
}

/* The commit's time and the extension attributes commitlsn and xid. */
static void
append_commit(StringInfo out, const ReplicantTxn *txn)
{
	appendStringInfoString(out, ",\"time\":");
	replicant_encode_timestamptz(out, txn->commit_time);
	appendStringInfo(out, ",\"commitlsn\":\"" UINT64_FORMAT "\",\"xid\":\"%u\"",
					 (uint64) txn->commit_lsn, txn->xid);
}

/*
 * A read has no commit: its id is the backfill's and the row's read_id,
 * which tells the row apart from every other, reveals none of its values
 * (key may be null, and rows may share all their published values) and is
 * the same whenever the row is read again.
 */
static char *
read_id(const ReplicantChange *change)
{
	if (change->read_id[0] == '\0')
		elog(ERROR, "a read event has no id");
	return psprintf("b" INT64_FORMAT "-%s", change->backfill_id, change->read_id);
}

static void
render_change(StringInfo out, const char *pipeline, const ReplicantChange *change)
{
	char *id;

	if (change->op == REPLICANT_OP_READ)
		id = read_id(change);
	else
		id = psprintf(UINT64_FORMAT "-" INT64_FORMAT,
					  (uint64) change->txn->commit_lsn, change->index);
	event_start(out, type_names[change->op], pipeline, id);
	append_subject(out, change->relation);
	if (change->txn)
		append_commit(out, change->txn);
	if (change->op == REPLICANT_OP_READ)
		appendStringInfo(out, ",\"backfillid\":\"" INT64_FORMAT "\"", change->backfill_id);
	appendStringInfoString(out, ",\"datacontenttype\":\"application/json\",\"data\":");
	replicant_format_replicant.change(out, pipeline, change);
	appendStringInfoChar(out, '}');
}

/* A message, transactional or not; its id is its LSN. */
static void
render_message(StringInfo out, const char *pipeline, const ReplicantMessage *message)
{
	event_start(out, "io.replicant.message", pipeline,
				psprintf("m" UINT64_FORMAT, (uint64) message->lsn));
	appendStringInfoString(out, ",\"subject\":");
	replicant_encode_string(out, message->prefix);
	appendStringInfoString(out, ",\"datacontenttype\":\"application/json\",\"data\":");
	replicant_format_replicant.message(out, pipeline, message);
	appendStringInfoChar(out, '}');
}

/* A transaction is its events, without framing: the array is flat. */
static void
begin_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn)
{
}

static void
end_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn,
		int64 nchanges, const char *messages)
{
	if (messages != NULL)
		appendStringInfo(out, "%s%s", nchanges > 0 ? "," : "", messages);
}

static bool
stream_request(const char *pipeline, ReplicantBatch *batch, int first, int last,
			   int i, ReplicantRequest *request)
{
	if (i > 0)
		return false;
	request->webhook_id = psprintf("%s-" UINT64_FORMAT, pipeline,
								   (uint64) batch->txns[last].commit_lsn);
	initStringInfo(&request->buffer);
	appendStringInfoChar(&request->buffer, '[');
	replicant_batch_body(batch, first, last, &request->buffer, "]", &request->range, &request->body);
	return true;
}

/*
 * A snapshot begin or end event.  A resync's carries it as its data,
 * {"resync":{"reason":...,"lost_from":...,"lost_to":...}}, under the same
 * id as any marker of its backfill: a retry repeats it.
 */
static void
snapshot_marker(StringInfo out, const char *type, const char *pipeline,
				const ReplicantRelation *relation, int64 backfill_id, const char *which,
				const ReplicantResync *resync)
{
	event_start(out, type, pipeline, psprintf("b" INT64_FORMAT "-%s", backfill_id, which));
	append_subject(out, relation);
	appendStringInfo(out, ",\"backfillid\":\"" INT64_FORMAT "\"", backfill_id);
	if (resync != NULL)
	{
		appendStringInfoString(out, ",\"datacontenttype\":\"application/json\",\"data\":{\"resync\":");
		replicant_format_append_resync(out, resync);
		appendStringInfoChar(out, '}');
	}
	appendStringInfoChar(out, '}');
}

/*
 * Each marker is an event followed by a separator.  snapshot_end cannot
 * know the flags, so the end event goes first, where snapshot_end finds
 * it and moves it behind the rows.
 */
static void
snapshot_begin(StringInfo out, const char *pipeline, const char *destination,
			   const ReplicantRelation *relation, int64 backfill_id, bool first, bool last,
			   const ReplicantResync *resync)
{
	appendStringInfoChar(out, '[');
	if (last)
	{
		snapshot_marker(out, SNAPSHOT_END_TYPE, pipeline, relation, backfill_id, "end",
						resync);
		appendStringInfoChar(out, ',');
	}
	if (first)
	{
		snapshot_marker(out, "io.replicant.snapshot.begin", pipeline, relation,
						backfill_id, "begin", resync);
		appendStringInfoChar(out, ',');
	}
}

/* The length of the JSON object at s (written by this file), braces included. */
static int
object_length(const char *s, int len)
{
	int depth = 0;
	bool in_string = false;
	int i;

	for (i = 0; i < len; i++)
	{
		if (in_string)
		{
			if (s[i] == '\\')
				i++;
			else if (s[i] == '"')
				in_string = false;
		}
		else if (s[i] == '"')
			in_string = true;
		else if (s[i] == '{')
			depth++;
		else if (s[i] == '}' && --depth == 0)
			return i + 1;
	}
	elog(ERROR, "snapshot body does not start with a whole event");
	return 0;
}

/* Closes the array: without a dangling separator, the end event last. */
static void
snapshot_end(StringInfo out)
{
	if (out->data[out->len - 1] == ',')
		out->data[--out->len] = '\0';
	if (strncmp(out->data, SNAPSHOT_END_START, strlen(SNAPSHOT_END_START)) == 0)
	{
		int end_len = object_length(out->data + 1, out->len - 1);
		int rest = out->len - 1 - end_len;
		char *end_event = pnstrdup(out->data + 1, end_len);

		if (rest > 0)
		{
			/* [END,REST -> [REST,END */
			memmove(out->data + 1, out->data + 1 + end_len + 1, rest - 1);
			out->data[rest] = ',';
			memcpy(out->data + rest + 1, end_event, end_len);
		}
		pfree(end_event);
	}
	appendStringInfoChar(out, ']');
}

static void
message_request(const char *pipeline, const ReplicantMessage *message,
				ReplicantRequest *request)
{
	request->webhook_id = psprintf("%s-m" UINT64_FORMAT, pipeline, (uint64) message->lsn);
	initStringInfo(&request->buffer);
	appendStringInfoChar(&request->buffer, '[');
	render_message(&request->buffer, pipeline, message);
	appendStringInfoChar(&request->buffer, ']');
	replicant_body_from_buffer(&request->body, &request->memory, &request->buffer);
}

const ReplicantFormat replicant_format_cloudevents = {
	.name = "cloudevents",
	.content_type = "application/cloudevents-batch+json",
	.read_ids = true,
	.separator = ",",
	.change = render_change,
	.begin_txn = begin_txn,
	.message = render_message,
	.end_txn = end_txn,
	.stream_request = stream_request,
	.snapshot_begin = snapshot_begin,
	.snapshot_end = snapshot_end,
	.snapshot_end_len = 1,
	.message_request = message_request,
};

/* ---- NATS: replicant's framing around each event ---- */

static void
nats_begin_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn)
{
	replicant_format_replicant.begin_txn(out, pipeline, txn);
}

static void
nats_end_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn,
			 int64 nchanges, const char *messages)
{
	replicant_format_replicant.end_txn(out, pipeline, txn, nchanges, messages);
}

static bool
nats_stream_request(const char *pipeline, ReplicantBatch *batch, int first, int last,
					int i, ReplicantRequest *request)
{
	return replicant_format_replicant.stream_request(pipeline, batch, first, last, i, request);
}

static void
nats_begin_body(StringInfo out, const char *pipeline, const char *kind)
{
	appendStringInfoString(out, "{\"pipeline\":");
	replicant_encode_string(out, pipeline);
	appendStringInfo(out, ",\"kind\":\"%s\"", kind);
}

/* "begin" and "end": the events the transport publishes as the markers. */
static void
nats_snapshot_begin(StringInfo out, const char *pipeline, const char *destination,
					const ReplicantRelation *relation, int64 backfill_id, bool first, bool last,
					const ReplicantResync *resync)
{
	nats_begin_body(out, pipeline, "snapshot");
	appendStringInfoString(out, ",\"snapshot\":");
	replicant_format_append_snapshot(out, relation, backfill_id, first, last, resync);
	if (first)
	{
		appendStringInfoString(out, ",\"begin\":");
		snapshot_marker(out, "io.replicant.snapshot.begin", pipeline, relation, backfill_id,
						"begin", resync);
	}
	if (last)
	{
		appendStringInfoString(out, ",\"end\":");
		snapshot_marker(out, SNAPSHOT_END_TYPE, pipeline, relation, backfill_id, "end", resync);
	}
	appendStringInfoString(out, ",\"changes\":[");
}

static void
nats_snapshot_end(StringInfo out)
{
	replicant_format_replicant.snapshot_end(out);
}

static void
nats_message_request(const char *pipeline, const ReplicantMessage *message,
					 ReplicantRequest *request)
{
	request->webhook_id = psprintf("%s-m" UINT64_FORMAT, pipeline, (uint64) message->lsn);
	initStringInfo(&request->buffer);
	nats_begin_body(&request->buffer, pipeline, "message");
	appendStringInfoString(&request->buffer, ",\"message\":");
	render_message(&request->buffer, pipeline, message);
	appendStringInfoChar(&request->buffer, '}');
	replicant_body_from_buffer(&request->body, &request->memory, &request->buffer);
}

const ReplicantFormat replicant_format_cloudevents_nats = {
	.name = "cloudevents",
	.content_type = "application/cloudevents+json",
	.read_ids = true,
	.separator = ",",
	.change = render_change,
	.begin_txn = nats_begin_txn,
	.message = render_message,
	.end_txn = nats_end_txn,
	.stream_request = nats_stream_request,
	.snapshot_begin = nats_snapshot_begin,
	.snapshot_end = nats_snapshot_end,
	.snapshot_end_len = sizeof("]}") - 1,
	.message_request = nats_message_request,
};
