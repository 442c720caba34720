/*
 * sink_nats_batch.c
 *		A rendered batch (replicant's format, or its framing around
 *		CloudEvents: format_cloudevents.c) into NATS messages: one per
 *		change, logical message, read and marker, on its subject, with its
 *		Nats-Msg-Id, in the batch's order (sink_nats.c publishes them).
 *
 * Stream changes and messages are skipped when the stream holds them
 * already (their (commit_lsn, position) at or below the pipeline's last
 * message there) and published in the chain; reads and markers are not
 * chained, and a first marker is acknowledged before the rows, the rows
 * before the last marker.
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "sink_nats_internal.h"

#define NATS_MAX_PREFIX_TOKEN 128
#define NATS_PREFIX_TOKEN_HEAD 64

/*
 * schema and table among the members of the object the reader is at, or of
 * its "data" when it is an event (CloudEvents carry the change there); how
 * many of the two it found.
 */
static int
relation_members(NatsSink *sink, NatsBodyReader *reader, StringInfo schema, StringInfo table,
				 bool event)
{
	int found = 0;

	if (!nats_body_object_begin(reader))
		return 0;
	while (found < 2 && nats_body_next_key(reader, &sink->scratch))
	{
		if (strcmp(sink->scratch.data, "schema") == 0)
			found += nats_body_string(reader, schema);
		else if (strcmp(sink->scratch.data, "table") == 0)
			found += nats_body_string(reader, table);
		else if (event && strcmp(sink->scratch.data, "data") == 0)
			found = relation_members(sink, reader, schema, table, false);
		else
			nats_body_value(reader, NULL);
	}
	return found;
}

/* The schema and table of a rendered change, into schema and table. */
static bool
change_relation(NatsSink *sink, StringInfo schema, StringInfo table)
{
	ReplicantBody body;
	ReplicantMemoryBody memory;
	NatsBodyReader reader;
	int found;

	replicant_body_from_buffer(&body, &memory, &sink->data);
	nats_body_begin(&reader, &body, sink->inner_buf);
	found = relation_members(sink, &reader, schema, table, true);
	return found == 2 && !reader.error;
}

static void
table_subject(NatsSink *sink, StringInfo schema, StringInfo table)
{
	resetStringInfo(&sink->subject);
	appendStringInfoString(&sink->subject, sink->url.prefix);
	appendStringInfoChar(&sink->subject, '.');
	nats_subject_token(&sink->subject, schema->data, schema->len);
	appendStringInfoChar(&sink->subject, '.');
	nats_subject_token(&sink->subject, table->data, table->len);
}

/*
 * A logical message's prefix as one subject token.  Any role can emit a
 * message, with a prefix of any length, and a subject longer than the
 * server's max_control_line gets the connection closed: a prefix longer
 * than NATS_MAX_PREFIX_TOKEN bytes is written as the token of its first
 * NATS_PREFIX_TOKEN_HEAD bytes, "%H" and the SHA-256 of the whole prefix in
 * hex (an escaped token never holds "%H", so no two prefixes share one).
 */
static void
message_token(StringInfo subject, const char *prefix, int len)
{
	ResourceOwner saved_owner = CurrentResourceOwner;
	ResourceOwner volatile own_owner = NULL;
	pg_cryptohash_ctx *volatile ctx = NULL;
	uint8 digest[PG_SHA256_DIGEST_LENGTH];
	int i;

	if (len <= NATS_MAX_PREFIX_TOKEN)
	{
		nats_subject_token(subject, prefix, len);
		return;
	}
	nats_subject_token(subject, prefix, NATS_PREFIX_TOKEN_HEAD);

	/*
	 * With OpenSSL, pg_cryptohash_create() registers the context with
	 * CurrentResourceOwner, NULL in a background worker between
	 * transactions: lend it a private owner then (as signing.c does).
	 */
	if (CurrentResourceOwner == NULL)
	{
		own_owner = ResourceOwnerCreate(NULL, "replicant NATS subject");
		CurrentResourceOwner = own_owner;
	}
	PG_TRY();
	{
		ctx = pg_cryptohash_create(PG_SHA256);
		if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
			pg_cryptohash_update(ctx, (const uint8 *) prefix, len) < 0 ||
			pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
			elog(ERROR, "could not compute the digest of a logical message's prefix");
	}
	PG_FINALLY();
	{
		pg_cryptohash_free(ctx);
		if (own_owner != NULL)
		{
			CurrentResourceOwner = saved_owner;
			ResourceOwnerDelete(own_owner);
		}
	}
	PG_END_TRY();
	appendStringInfoString(subject, "%H");
	for (i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
		appendStringInfo(subject, "%02x", digest[i]);
}

/* "prefix" and "lsn" of a rendered message, or of its event's "data". */
static void
message_members(NatsSink *sink, NatsBodyReader *reader, StringInfo prefix, bool *have_prefix,
				uint64 *lsn, bool event)
{
	if (!nats_body_object_begin(reader))
		return;
	while (nats_body_next_key(reader, &sink->scratch))
	{
		if (strcmp(sink->scratch.data, "prefix") == 0)
			*have_prefix = nats_body_string(reader, prefix);
		else if (strcmp(sink->scratch.data, "lsn") == 0)
			nats_body_uint64(reader, lsn);
		else if (event && strcmp(sink->scratch.data, "data") == 0)
			message_members(sink, reader, prefix, have_prefix, lsn, false);
		else
			nats_body_value(reader, NULL);
	}
}

/* A logical message's subject, from its rendered "prefix". */
static bool
message_subject(NatsSink *sink, uint64 *lsn)
{
	ReplicantBody body;
	ReplicantMemoryBody memory;
	NatsBodyReader reader;
	StringInfoData prefix;
	bool have_prefix = false;

	initStringInfo(&prefix);
	replicant_body_from_buffer(&body, &memory, &sink->data);
	nats_body_begin(&reader, &body, sink->inner_buf);
	message_members(sink, &reader, &prefix, &have_prefix, lsn, true);
	resetStringInfo(&sink->subject);
	appendStringInfo(&sink->subject, "%s._messages.", sink->url.prefix);
	message_token(&sink->subject, prefix.data, prefix.len);
	pfree(prefix.data);
	return have_prefix && !reader.error;
}

static bool
parse_failed(NatsBodyReader *reader, ReplicantSinkResult *result)
{
	nats_sink_fail(result, REPLICANT_SINK_REJECTED, "could not read the rendered batch");
	return false;
}

/*
 * One change or message of the stream, in sink->data: skipped when the
 * stream holds it already, else published in the chain.
 */
static bool
publish_stream_item(NatsSink *sink, NatsKind kind, uint64 lsn, uint64 xid,
					uint64 position, ReplicantSinkResult *result)
{
	StringInfoData schema,
		table;
	char *id;
	uint64 message_lsn = 0;
	bool ok;

	if (sink->have_mark &&
		(lsn < sink->mark_lsn || (lsn == sink->mark_lsn && position <= sink->mark_pos)))
		return true;
	if (kind == NATS_CHANGE)
	{
		initStringInfo(&schema);
		initStringInfo(&table);
		ok = change_relation(sink, &schema, &table);
		if (ok)
			table_subject(sink, &schema, &table);
		pfree(schema.data);
		pfree(table.data);
	}
	else
		ok = message_subject(sink, &message_lsn);
	if (!ok)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED, "could not read the rendered batch");
		return false;
	}
	id = psprintf("%s:" UINT64_FORMAT ":" UINT64_FORMAT, sink->id_name, lsn, position);
	ok = nats_sink_publish(sink, kind, id, lsn, xid, position, true, result);
	pfree(id);
	if (ok)
	{
		sink->have_mark = true;
		sink->mark_lsn = lsn;
		sink->mark_pos = position;
	}
	return ok;
}

/* {"xid":N,"commit_lsn":N,...,"changes":[...],"messages":[...]} */
static bool
publish_transaction(NatsSink *sink, NatsBodyReader *reader, ReplicantSinkResult *result)
{
	StringInfoData key;
	uint64 xid = 0;
	uint64 lsn = 0;
	uint64 position = 0;
	bool ok = nats_body_object_begin(reader);

	initStringInfo(&key);
	while (ok && nats_body_next_key(reader, &key))
	{
		bool changes = strcmp(key.data, "changes") == 0;

		if (strcmp(key.data, "xid") == 0)
			ok = nats_body_uint64(reader, &xid);
		else if (strcmp(key.data, "commit_lsn") == 0)
			ok = nats_body_uint64(reader, &lsn);
		else if (changes || strcmp(key.data, "messages") == 0)
		{
			ok = nats_body_array_begin(reader);
			while (ok && nats_body_array_next(reader))
			{
				resetStringInfo(&sink->data);
				ok = nats_body_value(reader, &sink->data);
				if (!ok)
					break;
				ok = publish_stream_item(sink, changes ? NATS_CHANGE : NATS_MESSAGE,
										 lsn, xid, ++position, result);
				if (!ok)
				{
					pfree(key.data);
					return false;
				}
			}
		}
		else
			ok = nats_body_value(reader, NULL);
	}
	pfree(key.data);
	if (!ok || reader->error)
		return parse_failed(reader, result);
	return true;
}

/* What a snapshot or backfill request says of itself. */
typedef struct NatsSnapshot
{
	bool seen;
	StringInfoData raw;         /* the "snapshot" object as rendered */
	StringInfoData begin_event; /* CloudEvents: the markers' events, or len 0 */
	StringInfoData end_event;
	StringInfoData schema;
	StringInfoData table;
	bool first;
	bool last;
	bool first_sent;
	uint64 reads;
} NatsSnapshot;

static bool
read_snapshot(NatsSink *sink, NatsBodyReader *reader, NatsSnapshot *snap)
{
	ReplicantBody body;
	ReplicantMemoryBody memory;
	NatsBodyReader inner;
	char *buf;

	snap->seen = true;
	initStringInfo(&snap->raw);
	initStringInfo(&snap->schema);
	initStringInfo(&snap->table);
	if (!nats_body_value(reader, &snap->raw))
		return false;
	buf = sink->inner_buf;
	replicant_body_from_buffer(&body, &memory, &snap->raw);
	nats_body_begin(&inner, &body, buf);
	if (nats_body_object_begin(&inner))
		while (nats_body_next_key(&inner, &sink->scratch))
		{
			if (strcmp(sink->scratch.data, "schema") == 0)
				nats_body_string(&inner, &snap->schema);
			else if (strcmp(sink->scratch.data, "table") == 0)
				nats_body_string(&inner, &snap->table);
			else if (strcmp(sink->scratch.data, "first") == 0)
				nats_body_bool(&inner, &snap->first);
			else if (strcmp(sink->scratch.data, "last") == 0)
				nats_body_bool(&inner, &snap->last);
			else
				nats_body_value(&inner, NULL);
		}
	return !inner.error;
}

/*
 * A marker, acknowledged before anything is published after it: the
 * request's event for it (CloudEvents), or its "snapshot" object.
 */
static bool
publish_marker(NatsSink *sink, NatsSnapshot *snap, const char *id, const char *which,
			   ReplicantSinkResult *result)
{
	char *marker_id = psprintf("%s:%s", id, which);
	StringInfo event = strcmp(which, "first") == 0 ? &snap->begin_event : &snap->end_event;
	bool ok;

	if (!nats_sink_wait_acks(sink, 0, 0, result))
		return false;
	table_subject(sink, &snap->schema, &snap->table);
	resetStringInfo(&sink->data);
	if (event->len > 0)
		appendBinaryStringInfo(&sink->data, event->data, event->len);
	else if (sink->destination == NULL)
		appendStringInfo(&sink->data, "{\"pipeline\":\"%s\",\"kind\":\"snapshot\",\"snapshot\":%s}",
						 sink->pipeline, snap->raw.data);
	else
		appendStringInfo(&sink->data,
						 "{\"pipeline\":\"%s\",\"destination\":\"%s\",\"kind\":\"snapshot\",\"snapshot\":%s}",
						 sink->pipeline, sink->destination, snap->raw.data);
	ok = nats_sink_publish(sink, NATS_MARKER, marker_id, 0, 0, 0, false, result) &&
		 nats_sink_wait_acks(sink, 0, 0, result);
	pfree(marker_id);
	return ok;
}

/* The rows of a snapshot or backfill request: <id>:<n>, n from 1. */
static bool
publish_reads(NatsSink *sink, NatsBodyReader *reader, NatsSnapshot *snap, const char *id,
			  ReplicantSinkResult *result)
{
	if (!snap->seen)
		return parse_failed(reader, result);
	if (!nats_body_array_begin(reader))
		return parse_failed(reader, result);
	while (nats_body_array_next(reader))
	{
		char *read_id;
		bool ok;

		if (snap->first && !snap->first_sent)
		{
			if (!publish_marker(sink, snap, id, "first", result))
				return false;
			snap->first_sent = true;
		}
		resetStringInfo(&sink->data);
		if (!nats_body_value(reader, &sink->data))
			break;
		table_subject(sink, &snap->schema, &snap->table);
		read_id = psprintf("%s:" UINT64_FORMAT, id, ++snap->reads);
		ok = nats_sink_publish(sink, NATS_READ, read_id, 0, 0, snap->reads, false, result);
		pfree(read_id);
		if (!ok)
			return false;
	}
	if (reader->error)
		return parse_failed(reader, result);
	return true;
}

static bool
ensure_known(NatsSink *sink, ReplicantSinkResult *result)
{
	return sink->known || nats_sink_learn_stream(sink, result);
}

static void
set_pipeline(NatsSink *sink, const char *name)
{
	MemoryContext old;

	if (sink->pipeline != NULL)
		return;
	old = MemoryContextSwitchTo(sink->context);
	sink->pipeline = pstrdup(name);
	/*
	 * Another destination of the pipeline than "default" writes ids and a
	 * default prefix of its own ('.' and '-' are in no pipeline name), so
	 * that destinations never take each other's messages for their mark.
	 */
	if (sink->destination == NULL)
		sink->id_name = sink->pipeline;
	else
		sink->id_name = psprintf("%s.%s", name, sink->destination);
	if (sink->url.prefix[0] == '\0' && sink->destination == NULL)
		snprintf(sink->url.prefix, sizeof(sink->url.prefix), "replicant.%s", name);
	else if (sink->url.prefix[0] == '\0')
		snprintf(sink->url.prefix, sizeof(sink->url.prefix), "replicant.%s-%s", name, sink->destination);
	MemoryContextSwitchTo(old);
}

/* Publishes every change, message, read and marker of body. */
void
nats_sink_publish_body(NatsSink *sink, const char *id, ReplicantBody *body, ReplicantSinkResult *result)
{
	NatsBodyReader reader;
	NatsSnapshot snap = {0};
	StringInfoData key;
	bool ok;

	initStringInfo(&key);
	nats_body_begin(&reader, body, sink->buf);
	ok = nats_body_object_begin(&reader);
	while (ok && nats_body_next_key(&reader, &key))
	{
		if (strcmp(key.data, "pipeline") == 0)
		{
			ok = nats_body_string(&reader, &sink->scratch);
			if (ok)
				set_pipeline(sink, sink->scratch.data);
		}
		else if (sink->pipeline == NULL)
			ok = parse_failed(&reader, result);
		else if (strcmp(key.data, "transactions") == 0)
		{
			ok = ensure_known(sink, result) && nats_body_array_begin(&reader);
			while (ok && nats_body_array_next(&reader))
				ok = publish_transaction(sink, &reader, result);
		}
		else if (strcmp(key.data, "message") == 0)
		{
			resetStringInfo(&sink->data);
			ok = ensure_known(sink, result) && nats_body_value(&reader, &sink->data);
			if (ok)
			{
				uint64 lsn = 0;

				ok = message_subject(sink, &lsn) || parse_failed(&reader, result);
				ok = ok && publish_stream_item(sink, NATS_MESSAGE, lsn, 0, 0, result);
			}
		}
		else if (strcmp(key.data, "snapshot") == 0)
		{
			/* before the request's first read or marker: it comes before them */
			ok = read_snapshot(sink, &reader, &snap) || parse_failed(&reader, result);
			ok = ok && nats_sink_check_stream(sink, NULL, result);
		}
		else if (strcmp(key.data, "begin") == 0 || strcmp(key.data, "end") == 0)
		{
			StringInfo event = key.data[0] == 'b' ? &snap.begin_event : &snap.end_event;

			initStringInfo(event);
			ok = nats_body_value(&reader, event) || parse_failed(&reader, result);
		}
		else if (strcmp(key.data, "changes") == 0)
			ok = publish_reads(sink, &reader, &snap, id, result);
		else
			ok = nats_body_value(&reader, NULL);
	}
	pfree(key.data);
	if (reader.error)
		(void) parse_failed(&reader, result);
	if (result->outcome != REPLICANT_SINK_OK || !snap.seen)
		return;
	/* reads moved the stream's sequence outside the chain */
	sink->known = false;
	if (snap.first && !snap.first_sent &&
		!publish_marker(sink, &snap, id, "first", result))
		return;
	if (snap.last)
		(void) publish_marker(sink, &snap, id, "last", result);
}
