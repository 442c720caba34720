/*
 * format_clickhouse.c
 *		Rows for ClickHouse's HTTP interface: each published table goes to
 *		the ClickHouse table of the same name (in the database the sink URL
 *		names with ?database=, else the server's default) as
 *		"INSERT INTO `t` FORMAT JSONEachRow" and one JSON object per row,
 *		for a ReplacingMergeTree(_version) read with FINAL and _deleted = 0.
 *
 * Every row carries _version, its transaction's commit LSN, and _deleted.
 * Two rows of one key with the same version come from one transaction,
 * in one INSERT, in the order of its changes; ClickHouse keeps the last row
 * of the most recent insert among equal versions, so the transaction's
 * last change of the key wins, and a re-sent batch changes nothing.  A
 * snapshot or backfill row's version is where its read stands in WAL
 * (change.h's read_lsn): the slot's consistent point for the initial
 * snapshot, which the stream starts at (a commit right at it has an equal
 * version and is inserted later, so it wins); a backfill chunk's low
 * watermark, since the chunk drops its rows of every key the stream
 * changes between its watermarks, and commits on either side are below or
 * above both.
 *
 * json and jsonb values are written as JSON strings holding their text:
 * 18.16 has no JSON type and reads a String column only from a string.
 *
 * A batch stores one record per change, tagged with its target so that a
 * request can read one table's rows out of the batch's single byte stream:
 *		R<target>\t<length>\n<JSON object and newline, length bytes>
 *		T<target>\t0\n				(a truncate)
 * The first request of a batch scans it once to plan its requests: for
 * each table in order of first appearance its rows up to its first
 * truncate, then the TRUNCATE TABLE, then its rows up to the next, ...;
 * tables are independent, so only a table's own order matters.  A row
 * request's body is read from the store through a filter, in bounded
 * memory whatever the batch's size.
 *
 * Rules kept with other files: docs/internals.md §2 and §4 (a row's version).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "encoder.h"
#include "format.h"
#include "format_clickhouse.h"

/* A record's header: kind, a quoted name (NAMEDATALEN, escaped) and a length. */
#define HEAD_MAX (2 + 4 * NAMEDATALEN + 24)
#define READ_CHUNK 8192

/* One request of the planned batch. */
typedef struct PlannedRequest
{
	char *target;  /* `name`, quoted for ClickHouse */
	int segment;   /* truncates of target before its rows */
	bool truncate; /* TRUNCATE TABLE, not rows */
	uint64 length; /* bytes of its rows */
} PlannedRequest;

/*
 * Reads a batch's records; passes the rows of (target, segment) on, or with
 * target NULL reads them all for the plan.  Never raises an error: it may
 * run inside libcurl callbacks.
 */
typedef struct RecordReader
{
	ReplicantBody store; /* the batch's transactions, unframed */
	ReplicantBatchBody range;
	const char *target;
	int segment;
	int seen_truncates; /* of target so far */
	char head[HEAD_MAX];
	int head_len;
	uint64 payload_left; /* bytes left of the current row */
	bool pass;           /* whether they belong to the body */
	char buf[READ_CHUNK];
	size_t buf_len;
	size_t buf_pos;
	/* the plan scan's: the header just completed */
	bool head_done;
} RecordReader;

/* A request body: its query line, then the filtered rows. */
typedef struct RowsBody
{
	StringInfoData query;
	size_t pos; /* within the query line, then past it */
	RecordReader reader;
} RowsBody;


void
replicant_clickhouse_append_identifier(StringInfo out, const char *name)
{
	const unsigned char *p;

	appendStringInfoChar(out, '`');
	for (p = (const unsigned char *) name; *p; p++)
	{
		switch (*p)
		{
			case '`':
			case '\\':
				appendStringInfoChar(out, '\\');
				appendStringInfoChar(out, *p);
				break;
			case '\t':
				appendStringInfoString(out, "\\t");
				break;
			case '\n':
				appendStringInfoString(out, "\\n");
				break;
			case '\r':
				appendStringInfoString(out, "\\r");
				break;
			default:
				if (*p < ' ')
					appendStringInfo(out, "\\x%02x", *p);
				else
					appendStringInfoChar(out, *p);
		}
	}
	appendStringInfoChar(out, '`');
}

/* Past the JSON string at p (which is at its opening quote). */
static const char *
skip_string(const char *p)
{
	for (p++; *p && *p != '"'; p++)
		if (*p == '\\' && p[1])
			p++;
	return *p ? p + 1 : p;
}

/* Past the JSON value at p. */
static const char *
skip_value(const char *p)
{
	int depth = 0;

	do
	{
		if (*p == '"')
			p = skip_string(p);
		else
		{
			if (*p == '{' || *p == '[')
				depth++;
			else if (*p == '}' || *p == ']')
				depth--;
			else if (depth == 0 && (*p == ',' || *p == '\0'))
				break;
			p++;
		}
	} while (*p && depth > 0);
	while (depth == 0 && *p && *p != ',' && *p != '}')
		p++;
	return p;
}

/* Whether the JSON string name (len bytes, quoted) is an element of list. */
static bool
in_list(const char *list, const char *name, size_t len)
{
	const char *p = list;

	while (*p == '"')
	{
		const char *end = skip_string(p);

		if ((size_t) (end - p) == len && memcmp(p, name, len) == 0)
			return true;
		p = *end == ',' ? end + 1 : end;
	}
	return false;
}

/*
 * Appends ,"col":value for each member of the old row whose column the
 * update left unchanged; returns how many.  The encoder writes objects
 * without whitespace between members.
 */
static int
append_unchanged(StringInfo out, const char *old_row, const char *unchanged)
{
	/* out NULL: counts only */
	const char *p = old_row + 1;
	int found = 0;

	while (*p == '"')
	{
		const char *name_end = skip_string(p);
		const char *value_end = skip_value(name_end + 1);

		if (in_list(unchanged, p, name_end - p))
		{
			if (out != NULL)
			{
				appendStringInfoChar(out, ',');
				appendBinaryStringInfo(out, p, value_end - p);
			}
			found++;
		}
		p = *value_end == ',' ? value_end + 1 : value_end;
	}
	return found;
}

static int
count_list(const char *list)
{
	const char *p = list;
	int n = 0;

	while (*p == '"')
	{
		p = skip_string(p);
		n++;
		if (*p == ',')
			p++;
	}
	return n;
}

bool
replicant_clickhouse_update_complete(const ReplicantChange *change)
{
	if (change->unchanged == NULL || change->unchanged->len == 0)
		return true;
	return change->old_row != NULL &&
		   append_unchanged(NULL, change->old_row->data, change->unchanged->data) ==
			   count_list(change->unchanged->data);
}

/*
 * The names of desc's json and jsonb columns (domains over them too), as
 * comma-separated JSON strings like an unchanged list; "" when none.
 */
static char *
json_columns(TupleDesc desc)
{
	StringInfoData names;
	int i;

	initStringInfo(&names);
	for (i = 0; desc && i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Oid type;

		if (att->attisdropped)
			continue;
		type = getBaseType(att->atttypid);
		if (type != JSONOID && type != JSONBOID)
			continue;
		if (names.len > 0)
			appendStringInfoChar(&names, ',');
		replicant_encode_string(&names, NameStr(att->attname));
	}
	return names.data;
}

/* Appends the UTF-8 JSON text value[0..len) as a JSON string. */
static void
append_quoted(StringInfo out, const char *value, size_t len)
{
	size_t i;

	appendStringInfoChar(out, '"');
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) value[i];

		if (c == '"' || c == '\\')
		{
			appendStringInfoChar(out, '\\');
			appendStringInfoChar(out, c);
		}
		else if (c < ' ')
			appendStringInfo(out, "\\u%04x", c);
		else
			appendStringInfoChar(out, c);
	}
	appendStringInfoChar(out, '"');
}

/*
 * The object with the values of the json columns named in names written
 * as JSON strings holding their text: ClickHouse 18.16 has no JSON type
 * and reads a String column only from a string.  A null stays null.
 */
static StringInfo
json_as_strings(StringInfo object, const char *names)
{
	StringInfo out;
	const char *p;

	if (object == NULL || names[0] == '\0' || object->data[0] != '{')
		return object;
	out = makeStringInfo();
	appendStringInfoChar(out, '{');
	for (p = object->data + 1; *p == '"';)
	{
		const char *name_end = skip_string(p);
		const char *value = name_end + 1;
		const char *value_end = skip_value(value);

		if (out->len > 1)
			appendStringInfoChar(out, ',');
		appendBinaryStringInfo(out, p, value - p);
		if (in_list(names, p, name_end - p) && strncmp(value, "null", 4) != 0)
			append_quoted(out, value, value_end - value);
		else
			appendBinaryStringInfo(out, value, value_end - value);
		p = *value_end == ',' ? value_end + 1 : value_end;
	}
	appendStringInfoChar(out, '}');
	return out;
}

/*
 * object (without its closing brace) then the version and deleted flag.
 * A read's version is where its snapshot stands in WAL.
 */
static void
append_row(StringInfo out, const ReplicantChange *change, StringInfo object,
		   bool deleted)
{
	XLogRecPtr version = change->txn ? change->txn->commit_lsn : change->read_lsn;

	appendBinaryStringInfo(out, object->data, object->len - 1);
	if (change->op == REPLICANT_OP_UPDATE && !deleted &&
		change->unchanged && change->unchanged->len > 0)
	{
		/* the output plugin halts before an update without its old row */
		if (change->old_row == NULL ||
			append_unchanged(out, change->old_row->data, change->unchanged->data) !=
				count_list(change->unchanged->data))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("update of table \"%s\" left TOASTed columns out of its new row",
							change->relation->table)));
	}
	appendStringInfo(out, "%s\"" REPLICANT_CLICKHOUSE_VERSION_COLUMN "\":" UINT64_FORMAT ",\"" REPLICANT_CLICKHOUSE_DELETED_COLUMN "\":%d}\n",
					 object->len > 2 ? "," : "", (uint64) version, deleted ? 1 : 0);
}

/* Appends a tagged record whose payload is built by the caller at *payload. */
static void
begin_record(StringInfo out, char kind, const ReplicantChange *change, int *length_at)
{
	appendStringInfoChar(out, kind);
	replicant_clickhouse_append_identifier(out, change->relation->table);
	appendStringInfoChar(out, '\t');
	*length_at = out->len;
	/* a fixed-width length, filled in once the payload is known */
	appendStringInfoString(out, "00000000000000000000\n");
}

static void
end_record(StringInfo out, int length_at)
{
	char digits[21];
	uint64 length = out->len - (length_at + 21);

	snprintf(digits, sizeof(digits), "%020llu", (unsigned long long) length);
	memcpy(out->data + length_at, digits, 20);
}

/*
 * A read is a bare row (snapshot bodies hold one table's rows); a stream
 * change is a tagged record.  An update that moved its key, or any update
 * under REPLICA IDENTITY FULL (which logs the old row), first deletes the
 * old key, in the same transaction, so the new row wins if the key stayed.
 */
static void
render_change(StringInfo out, const char *pipeline, const ReplicantChange *original)
{
	int length_at;
	char *names = json_columns(original->desc);
	ReplicantChange converted = *original;
	const ReplicantChange *change = &converted;

	/* A key of null is no key: the change names no row (insert-only target). */
	converted.key = (original->key && strcmp(original->key->data, "null") != 0) ?
						json_as_strings(original->key, names) :
						NULL;
	converted.new_row = json_as_strings(original->new_row, names);
	converted.old_row = json_as_strings(original->old_row, names);

	if (change->op == REPLICANT_OP_READ)
	{
		append_row(out, change, change->new_row, false);
		return;
	}
	begin_record(out, change->op == REPLICANT_OP_TRUNCATE ? 'T' : 'R', change, &length_at);
	switch (change->op)
	{
		case REPLICANT_OP_INSERT:
			append_row(out, change, change->new_row, false);
			break;
		case REPLICANT_OP_UPDATE:
			if (change->old_row != NULL && change->key != NULL)
				append_row(out, change, change->key, true);
			append_row(out, change, change->new_row, false);
			break;
		case REPLICANT_OP_DELETE:
			if (change->key != NULL)
				append_row(out, change, change->key, true);
			break;
		default:
			break;
	}
	end_record(out, length_at);
}

static void
render_nothing(StringInfo out, const char *pipeline, const ReplicantTxn *txn)
{
}

static void
render_no_message(StringInfo out, const char *pipeline, const ReplicantMessage *message)
{
}

static void
end_txn(StringInfo out, const char *pipeline, const ReplicantTxn *txn,
		int64 nchanges, const char *messages)
{
}

/* ---- reading records ---- */

static void
reader_start(RecordReader *r, ReplicantBatch *batch, int first, int last,
			 const char *target, int segment)
{
	static StringInfoData empty;

	if (empty.data == NULL)
		initStringInfo(&empty);
	replicant_batch_body(batch, first, last, &empty, "", &r->range, &r->store);
	r->store.rewind(r->store.arg);
	r->target = target;
	r->segment = segment;
	r->seen_truncates = 0;
	r->head_len = 0;
	r->payload_left = 0;
	r->pass = false;
	r->buf_len = r->buf_pos = 0;
	r->head_done = false;
}

/* Takes in a completed header: whether its row bytes belong to the body. */
static void
reader_header(RecordReader *r)
{
	char *tab = memchr(r->head, '\t', r->head_len);
	bool ours;

	r->head[r->head_len] = '\0';
	r->payload_left = tab ? strtou64(tab + 1, NULL, 10) : 0;
	ours = r->target && tab &&
		   (size_t) (tab - r->head - 1) == strlen(r->target) &&
		   memcmp(r->head + 1, r->target, tab - r->head - 1) == 0;
	if (ours && r->head[0] == 'T')
		r->seen_truncates++;
	r->pass = ours && r->head[0] == 'R' && r->seen_truncates == r->segment;
	r->head_len = 0;
	r->head_done = true;
}

/*
 * Copies up to max bytes of passed rows to out; stops after each header
 * when planning (target NULL).  Returns the bytes copied, 0 at the end
 * (head_done tells a header from the end), or -1 on a read failure.
 */
static ssize_t
reader_read(RecordReader *r, char *out, size_t max)
{
	size_t done = 0;

	r->head_done = false;
	while (done < max || r->target == NULL)
	{
		if (r->buf_pos == r->buf_len)
		{
			size_t got = r->store.read(r->store.arg, r->buf, READ_CHUNK);

			if (got == (size_t) -1)
				return -1;
			if (got == 0)
				break;
			r->buf_len = got;
			r->buf_pos = 0;
		}
		if (r->payload_left > 0)
		{
			size_t n = Min(r->payload_left, r->buf_len - r->buf_pos);

			if (r->pass)
			{
				n = Min(n, max - done);
				memcpy(out + done, r->buf + r->buf_pos, n);
				done += n;
			}
			r->buf_pos += n;
			r->payload_left -= n;
			continue;
		}
		if (r->head_len == HEAD_MAX - 1)
			return -1;
		if ((r->head[r->head_len++] = r->buf[r->buf_pos++]) == '\n')
		{
			reader_header(r);
			if (r->target == NULL)
				break;
		}
	}
	return done;
}

/* ---- planning and building requests ---- */

static PlannedRequest *
plan_find(List *plan, const char *target, int segment)
{
	ListCell *lc;

	foreach(lc, plan)
	{
		PlannedRequest *p = lfirst(lc);

		if (!p->truncate && p->segment == segment && strcmp(p->target, target) == 0)
			return p;
	}
	return NULL;
}

static int
plan_truncates(List *plan, const char *target)
{
	ListCell *lc;
	int n = 0;

	foreach(lc, plan)
	{
		PlannedRequest *p = lfirst(lc);

		if (p->truncate && strcmp(p->target, target) == 0)
			n++;
	}
	return n;
}

/* The requests of transactions [first, last] of batch: a List of PlannedRequest. */
static List *
plan_batch(ReplicantBatch *batch, int first, int last)
{
	RecordReader *r = palloc(sizeof(RecordReader));
	List *plan = NIL;

	reader_start(r, batch, first, last, NULL, 0);
	for (;;)
	{
		char *tab;
		char *target;
		int segment;
		PlannedRequest *p;

		if (reader_read(r, NULL, 0) < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read batch spill file: %m")));
		if (!r->head_done)
			break;
		tab = strchr(r->head, '\t');
		target = pnstrdup(r->head + 1, tab - r->head - 1);
		segment = plan_truncates(plan, target);
		if (r->head[0] == 'T' || (p = plan_find(plan, target, segment)) == NULL)
		{
			p = palloc0(sizeof(PlannedRequest));
			p->target = target;
			p->segment = segment;
			p->truncate = r->head[0] == 'T';
			plan = lappend(plan, p);
		}
		else
			pfree(target); /* a plan's memory is per table, not per row */
		p->length += r->payload_left;
	}
	pfree(r);
	return plan;
}

static void
rows_body_rewind(void *arg)
{
	RowsBody *body = arg;

	body->pos = 0;
	body->reader.store.rewind(body->reader.store.arg);
	body->reader.seen_truncates = 0;
	body->reader.head_len = 0;
	body->reader.payload_left = 0;
	body->reader.pass = false;
	body->reader.buf_len = body->reader.buf_pos = 0;
}

static size_t
rows_body_read(void *arg, char *buf, size_t max)
{
	RowsBody *body = arg;
	size_t done = 0;
	ssize_t got;

	if (body->pos < (size_t) body->query.len)
	{
		done = Min(max, body->query.len - body->pos);
		memcpy(buf, body->query.data + body->pos, done);
		body->pos += done;
	}
	if (done == max)
		return done;
	got = reader_read(&body->reader, buf + done, max - done);
	return got < 0 ? (size_t) -1 : done + got;
}

/*
 * The i-th planned request: a table's rows as an INSERT, or its TRUNCATE.
 * Named <pipeline>-<last commit LSN>-<i>.  The plan and the body's reader
 * are the request's own: several destinations may send the batch at once.
 */
static bool
stream_request(const char *pipeline, ReplicantBatch *batch, int first, int last,
			   int i, ReplicantRequest *request)
{
	List *plan;
	PlannedRequest *p;
	RowsBody *rows_body;

	if (i == 0)
		request->plan = plan_batch(batch, first, last);
	plan = request->plan;
	if (i >= list_length(plan))
		return false;
	p = list_nth(plan, i);
	request->webhook_id = psprintf("%s-" UINT64_FORMAT "-%d", pipeline,
								   (uint64) batch->txns[last].commit_lsn, i);
	request->target = p->target;
	initStringInfo(&request->buffer);
	if (p->truncate)
	{
		appendStringInfo(&request->buffer, "TRUNCATE TABLE %s", p->target);
		replicant_body_from_buffer(&request->body, &request->memory, &request->buffer);
		return true;
	}
	rows_body = palloc(sizeof(RowsBody));
	initStringInfo(&rows_body->query);
	appendStringInfo(&rows_body->query, "INSERT INTO %s FORMAT JSONEachRow\n", p->target);
	rows_body->pos = 0;
	reader_start(&rows_body->reader, batch, first, last, p->target, p->segment);
	request->body.length = rows_body->query.len + p->length;
	request->body.rewind = rows_body_rewind;
	request->body.read = rows_body_read;
	request->body.arg = rows_body;
	return true;
}

/*
 * A resync's sweep (docs/sink-protocol.md, "Resync"), the statement of the
 * table's "last" marker: every key whose newest row is below the new
 * slot's consistent point was not read again, so its row is gone; a
 * tombstone just below that point deletes it.  Rows the resync read carry
 * the point itself (under a fresh snapshot after a restart too, as an
 * initial snapshot's), stream changes later ones, so neither is touched,
 * and a sweep sent again finds nothing left to delete.  Synchronous: a
 * FINAL reader sees the deletes once the statement answered.
 */
static void
append_sweep(StringInfo out, const ReplicantRelation *relation, const ReplicantResync *resync)
{
	ListCell *lc;
	StringInfoData key;

	initStringInfo(&key);
	foreach(lc, resync->key)
	{
		replicant_clickhouse_append_identifier(&key, lfirst(lc));
		appendStringInfoString(&key, ", ");
	}
	appendStringInfoString(out, "INSERT INTO ");
	replicant_clickhouse_append_identifier(out, relation->table);
	appendStringInfo(out, " (%s" REPLICANT_CLICKHOUSE_VERSION_COLUMN ", " REPLICANT_CLICKHOUSE_DELETED_COLUMN ") SELECT %s"
						  "toUInt64(" UINT64_FORMAT "), toUInt8(1) FROM ",
					 key.data, key.data, (uint64) resync->lost_to - 1);
	replicant_clickhouse_append_identifier(out, relation->table);
	appendStringInfo(out, " FINAL WHERE " REPLICANT_CLICKHOUSE_DELETED_COLUMN " = 0 AND " REPLICANT_CLICKHOUSE_VERSION_COLUMN " < " UINT64_FORMAT,
					 (uint64) resync->lost_to);
	pfree(key.data);
}

/*
 * A snapshot body is an INSERT of its rows; a resync's "last" marker of a
 * table with a key is its sweep.  A key-less target is insert-only: it
 * keeps its rows, and receives the resync's copies too.
 */
static void
snapshot_begin(StringInfo out, const char *pipeline, const char *destination,
			   const ReplicantRelation *relation, int64 backfill_id, bool first, bool last,
			   const ReplicantResync *resync)
{
	if (last && resync != NULL && resync->key != NIL && !XLogRecPtrIsInvalid(resync->lost_to))
	{
		append_sweep(out, relation, resync);
		return;
	}
	appendStringInfoString(out, "INSERT INTO ");
	replicant_clickhouse_append_identifier(out, relation->table);
	appendStringInfoString(out, " FORMAT JSONEachRow\n");
}

static void
snapshot_end(StringInfo out)
{
}

/*
 * ClickHouse error codes a retry cannot fix: the data or the target is
 * wrong.  Any other code (memory, too many parts, timeouts, a replica
 * away) is retried.
 */
static bool
code_is_final(int code)
{
	static const int final_codes[] = {
		6,   /* CANNOT_PARSE_TEXT */
		16,  /* NO_SUCH_COLUMN_IN_TABLE */
		26,  /* CANNOT_PARSE_QUOTED_STRING */
		27,  /* CANNOT_PARSE_INPUT_ASSERTION_FAILED */
		38,  /* CANNOT_PARSE_DATE */
		41,  /* CANNOT_PARSE_DATETIME */
		47,  /* UNKNOWN_IDENTIFIER */
		53,  /* TYPE_MISMATCH */
		60,  /* UNKNOWN_TABLE */
		62,  /* SYNTAX_ERROR */
		69,  /* ARGUMENT_OUT_OF_BOUND */
		70,  /* CANNOT_CONVERT_TYPE */
		72,  /* CANNOT_PARSE_NUMBER */
		81,  /* UNKNOWN_DATABASE */
		117, /* INCORRECT_DATA (unknown field) */
		181, /* ILLEGAL_FINAL (a sweep's FINAL on a plain MergeTree) */
		192, /* UNKNOWN_USER */
		193, /* WRONG_PASSWORD */
		497, /* ACCESS_DENIED */
		516, /* AUTHENTICATION_FAILED */
	};
	int i;

	for (i = 0; i < lengthof(final_codes); i++)
		if (final_codes[i] == code)
			return true;
	return false;
}

bool
replicant_clickhouse_ddl_code_is_final(int code)
{
	static const int transient_codes[] = {
		159, /* TIMEOUT_EXCEEDED */
		202, /* TOO_MANY_SIMULTANEOUS_QUERIES */
		203, /* NO_FREE_CONNECTION */
		209, /* SOCKET_TIMEOUT */
		210, /* NETWORK_ERROR */
		241, /* MEMORY_LIMIT_EXCEEDED */
		243, /* NOT_ENOUGH_SPACE */
		285, /* TOO_FEW_LIVE_REPLICAS */
		473, /* DEADLOCK_AVOIDED */
		999, /* KEEPER_EXCEPTION */
	};
	int i;

	for (i = 0; i < lengthof(transient_codes); i++)
		if (transient_codes[i] == code)
			return false;
	return true;
}

const ReplicantFormat replicant_format_clickhouse = {
	.name = "clickhouse",
	.content_type = "text/plain; charset=utf-8",
	.separator = "",
	.whole_rows = true,
	.sweeps_by_key = true,
	.code_is_final = code_is_final,
	.schemaless_target = "ClickHouse table",
	.change = render_change,
	.begin_txn = render_nothing,
	.message = render_no_message,
	.end_txn = end_txn,
	.stream_request = stream_request,
	.snapshot_begin = snapshot_begin,
	.snapshot_end = snapshot_end,
	.snapshot_end_len = 0,
	.message_request = NULL,
};
