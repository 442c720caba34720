/*
 * sink_nats_body.c
 *		A rendered body read back as JSON, in bounded pieces, for the NATS
 *		transport (sink_nats.c), which publishes each change on its own.
 *
 * The bodies are replicant's own (format_replicant.c, and its framing of
 * CloudEvents in format_cloudevents.c), so only what they write is
 * understood: no whitespace inside values but what strings
 * hold, numbers as integers.  Nothing raises an error: reader->error.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"

#include "sink_nats_body.h"

void
nats_body_begin(NatsBodyReader *reader, ReplicantBody *body, char *buf)
{
	reader->body = body;
	reader->buf = buf;
	reader->len = reader->pos = 0;
	reader->eof = false;
	reader->error = false;
	body->rewind(body->arg);
}

/* The next byte, without consuming it; -1 at the end or on an error. */
static int
peek(NatsBodyReader *reader)
{
	if (reader->error)
		return -1;
	if (reader->pos == reader->len)
	{
		size_t n;

		if (reader->eof)
			return -1;
		n = reader->body->read(reader->body->arg, reader->buf, NATS_BODY_BUFFER);
		if (n == (size_t) -1)
		{
			reader->error = true;
			return -1;
		}
		if (n == 0)
		{
			reader->eof = true;
			return -1;
		}
		reader->len = n;
		reader->pos = 0;
	}
	return (unsigned char) reader->buf[reader->pos];
}

static int
next(NatsBodyReader *reader)
{
	int c = peek(reader);

	if (c >= 0)
		reader->pos++;
	return c;
}

static void
skip_space(NatsBodyReader *reader)
{
	int c;

	while ((c = peek(reader)) == ' ' || c == '\n' || c == '\t' || c == '\r')
		reader->pos++;
}

static bool
expect(NatsBodyReader *reader, char want)
{
	skip_space(reader);
	if (next(reader) != want)
		reader->error = true;
	return !reader->error;
}

static int
hex_value(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int
read_hex4(NatsBodyReader *reader)
{
	int v = 0;
	int i;

	for (i = 0; i < 4; i++)
	{
		int h = hex_value(next(reader));

		if (h < 0)
		{
			reader->error = true;
			return -1;
		}
		v = v * 16 + h;
	}
	return v;
}

/* After "\u": the code point, a surrogate pair joined, as UTF-8. */
static void
unescape_unicode(NatsBodyReader *reader, StringInfo out)
{
	unsigned char utf8[8];
	pg_wchar cp = read_hex4(reader);

	if (cp >= 0xD800 && cp <= 0xDBFF)
	{
		int low;

		if (next(reader) != '\\' || next(reader) != 'u')
		{
			reader->error = true;
			return;
		}
		low = read_hex4(reader);
		if (low < 0xDC00 || low > 0xDFFF)
		{
			reader->error = true;
			return;
		}
		cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
	}
	if (reader->error)
		return;
	unicode_to_utf8(cp, utf8);
	appendBinaryStringInfo(out, (char *) utf8, pg_utf_mblen(utf8));
}

/* After the opening quote: raw (escapes kept) or unescaped into out. */
static bool
string_body(NatsBodyReader *reader, StringInfo out, bool raw)
{
	for (;;)
	{
		int c = next(reader);

		if (c < 0)
			break;
		if (c == '"')
		{
			if (raw)
				appendStringInfoChar(out, '"');
			return true;
		}
		if (c != '\\')
		{
			appendStringInfoChar(out, (char) c);
			continue;
		}
		c = next(reader);
		if (raw)
		{
			appendStringInfoChar(out, '\\');
			appendStringInfoChar(out, (char) c);
			continue;
		}
		switch (c)
		{
			case 'b':
				appendStringInfoChar(out, '\b');
				break;
			case 'f':
				appendStringInfoChar(out, '\f');
				break;
			case 'n':
				appendStringInfoChar(out, '\n');
				break;
			case 'r':
				appendStringInfoChar(out, '\r');
				break;
			case 't':
				appendStringInfoChar(out, '\t');
				break;
			case 'u':
				unescape_unicode(reader, out);
				break;
			case '"':
			case '\\':
			case '/':
				appendStringInfoChar(out, (char) c);
				break;
			default:
				reader->error = true;
		}
		if (reader->error)
			break;
	}
	reader->error = true;
	return false;
}

bool
nats_body_string(NatsBodyReader *reader, StringInfo out)
{
	resetStringInfo(out);
	return expect(reader, '"') && string_body(reader, out, false);
}

bool
nats_body_uint64(NatsBodyReader *reader, uint64 *value)
{
	int c;
	int digits = 0;

	*value = 0;
	skip_space(reader);
	while ((c = peek(reader)) >= '0' && c <= '9')
	{
		if (*value > (PG_UINT64_MAX - 9) / 10)
			reader->error = true;
		*value = *value * 10 + (c - '0');
		reader->pos++;
		digits++;
	}
	if (digits == 0)
		reader->error = true;
	return !reader->error;
}

bool
nats_body_bool(NatsBodyReader *reader, bool *value)
{
	StringInfoData word;
	bool ok;

	initStringInfo(&word);
	ok = nats_body_value(reader, &word);
	*value = ok && strcmp(word.data, "true") == 0;
	if (ok && !*value && strcmp(word.data, "false") != 0)
		reader->error = true;
	pfree(word.data);
	return !reader->error;
}

/* A scalar that is not a string: up to the next delimiter. */
static bool
scalar(NatsBodyReader *reader, StringInfo out)
{
	int c;
	int n = 0;

	while ((c = peek(reader)) >= 0 && c != ',' && c != '}' && c != ']' &&
		   c != ' ' && c != '\n' && c != '\t' && c != '\r')
	{
		if (out)
			appendStringInfoChar(out, (char) c);
		reader->pos++;
		n++;
	}
	if (n == 0)
		reader->error = true;
	return !reader->error;
}

bool
nats_body_value(NatsBodyReader *reader, StringInfo out)
{
	StringInfoData scratch;
	int depth = 0;

	skip_space(reader);
	if (peek(reader) != '{' && peek(reader) != '[' && peek(reader) != '"')
		return scalar(reader, out);
	initStringInfo(&scratch);
	do
	{
		int c = next(reader);

		if (c < 0)
		{
			reader->error = true;
			break;
		}
		if (c == '"')
		{
			StringInfo into = out ? out : &scratch;

			appendStringInfoChar(into, '"');
			if (!string_body(reader, into, true))
				break;
			resetStringInfo(&scratch);
			continue;
		}
		if (out)
			appendStringInfoChar(out, (char) c);
		if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
	} while (depth > 0);
	pfree(scratch.data);
	return !reader->error;
}

bool
nats_body_object_begin(NatsBodyReader *reader)
{
	return expect(reader, '{');
}

/*
 * Before a member or the close: false at the close (consumed).  A comma
 * before a member is skipped (the bodies are replicant's own, well formed).
 */
static bool
next_member(NatsBodyReader *reader, char close)
{
	int c;

	skip_space(reader);
	c = peek(reader);
	if (c == ',')
	{
		reader->pos++;
		skip_space(reader);
		c = peek(reader);
	}
	if (c == close)
	{
		reader->pos++;
		return false;
	}
	if (c < 0)
		reader->error = true;
	return !reader->error;
}

bool
nats_body_next_key(NatsBodyReader *reader, StringInfo key)
{
	if (!next_member(reader, '}'))
		return false;
	return nats_body_string(reader, key) && expect(reader, ':');
}

bool
nats_body_array_begin(NatsBodyReader *reader)
{
	return expect(reader, '[');
}

bool
nats_body_array_next(NatsBodyReader *reader)
{
	return next_member(reader, ']');
}

void
nats_subject_token(StringInfo out, const char *name, int len)
{
	static const char hex[] = "0123456789ABCDEF";
	int i;

	if (len == 0)
		appendStringInfoChar(out, '%');
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) name[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			(c >= '0' && c <= '9') || c == '_' || c == '-')
			appendStringInfoChar(out, (char) c);
		else
		{
			appendStringInfoChar(out, '%');
			appendStringInfoChar(out, hex[c >> 4]);
			appendStringInfoChar(out, hex[c & 15]);
		}
	}
}
