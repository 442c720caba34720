/*
 * encode_scalar.c
 *		Writing JSON text straight into the encoder's buffer.
 *
 * The server's escape_json() and jsonb_out() are what the encoder's output
 * must match byte for byte, but they cost more than the encoding around
 * them: escape_json() needs a terminated copy of every string, and
 * jsonb_out() builds its text in a buffer of its own, copies each string
 * inside the value before escaping it, and leaves the caller to measure and
 * copy the result.  The functions here write the same bytes in place.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/fmgrprotos.h"

#include "encode_scalar.h"

/*
 * For each byte, 0 if it stands for itself in a JSON string, else the
 * letter of its backslash escape, or 'u' for \u00XX.
 */
static const char json_escape[256] = {
	['\0'] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u',
	[0x04] = 'u', [0x05] = 'u', [0x06] = 'u', [0x07] = 'u',
	['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', [0x0b] = 'u',
	['\f'] = 'f', ['\r'] = 'r', [0x0e] = 'u', [0x0f] = 'u',
	[0x10] = 'u', [0x11] = 'u', [0x12] = 'u', [0x13] = 'u',
	[0x14] = 'u', [0x15] = 'u', [0x16] = 'u', [0x17] = 'u',
	[0x18] = 'u', [0x19] = 'u', [0x1a] = 'u', [0x1b] = 'u',
	[0x1c] = 'u', [0x1d] = 'u', [0x1e] = 'u', [0x1f] = 'u',
	['"'] = '"', ['\\'] = '\\',
};

/*
 * Room is made for the string as it is; only an escape, which is rare,
 * asks for more, so a long string never reserves six times its length.
 */
void
replicant_append_json_string(StringInfo out, const char *s, int len)
{
	static const char hexdigits[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *) s;
	const unsigned char *end = p + len;
	char	   *dst;

	enlargeStringInfo(out, len + 2);
	dst = out->data + out->len;
	*dst++ = '"';
	for (; p < end; p++)
	{
		unsigned char c = *p;
		char		letter = json_escape[c];

		if (likely(letter == 0))
		{
			*dst++ = (char) c;
			continue;
		}

		/* an escape is at most 6 bytes; the rest and the quote follow */
		out->len = dst - out->data;
		enlargeStringInfo(out, 6 + (end - p - 1) + 1);
		dst = out->data + out->len;
		*dst++ = '\\';
		*dst++ = letter;
		if (letter == 'u')
		{
			*dst++ = '0';
			*dst++ = '0';
			*dst++ = hexdigits[c >> 4];
			*dst++ = hexdigits[c & 0x0f];
		}
	}
	*dst++ = '"';
	out->len = dst - out->data;
	out->data[out->len] = '\0';
}

/* Appends a scalar held in a jsonb as jsonb_out() writes it. */
static void
append_jsonb_scalar(StringInfo out, const JsonbValue *v)
{
	char	   *num;

	switch (v->type)
	{
		case jbvNull:
			appendBinaryStringInfo(out, "null", 4);
			break;
		case jbvString:
			replicant_append_json_string(out, v->val.string.val,
										 v->val.string.len);
			break;
		case jbvNumeric:
			num = DatumGetCString(DirectFunctionCall1(numeric_out,
													  NumericGetDatum(v->val.numeric)));
			appendStringInfoString(out, num);
			pfree(num);
			break;
		case jbvBool:
			if (v->val.boolean)
				appendBinaryStringInfo(out, "true", 4);
			else
				appendBinaryStringInfo(out, "false", 5);
			break;
		default:
			elog(ERROR, "unknown jsonb scalar type");
	}
}

/*
 * JsonbToCString() without indentation: ", " between items, ": " after a
 * key, and a scalar at the root written without its one-element array.
 * "first" means no separator is due before the next item, which is also
 * true right after a key.
 */
void
replicant_append_jsonb(StringInfo out, JsonbContainer *root)
{
	JsonbIterator *it = JsonbIteratorInit(root);
	JsonbValue	v;
	JsonbIteratorToken token;
	bool		first = true;
	bool		raw_scalar = false;

	while ((token = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		switch (token)
		{
			case WJB_BEGIN_ARRAY:
				if (!first)
					appendBinaryStringInfo(out, ", ", 2);
				if (v.val.array.rawScalar)
					raw_scalar = true;
				else
					appendStringInfoCharMacro(out, '[');
				first = true;
				break;
			case WJB_BEGIN_OBJECT:
				if (!first)
					appendBinaryStringInfo(out, ", ", 2);
				appendStringInfoCharMacro(out, '{');
				first = true;
				break;
			case WJB_KEY:
				if (!first)
					appendBinaryStringInfo(out, ", ", 2);
				append_jsonb_scalar(out, &v);
				appendBinaryStringInfo(out, ": ", 2);
				first = true;
				break;
			case WJB_VALUE:
				append_jsonb_scalar(out, &v);
				first = false;
				break;
			case WJB_ELEM:
				if (!first)
					appendBinaryStringInfo(out, ", ", 2);
				append_jsonb_scalar(out, &v);
				first = false;
				break;
			case WJB_END_ARRAY:
				if (!raw_scalar)
					appendStringInfoCharMacro(out, ']');
				first = false;
				break;
			case WJB_END_OBJECT:
				appendStringInfoCharMacro(out, '}');
				first = false;
				break;
			default:
				elog(ERROR, "unknown jsonb iterator token type");
		}
	}
}
