/*
 * encode_scalar.c
 *		Writing JSON text straight into the encoder's buffer.
 *
 * The server's escape_json() and jsonb_out() are what the encoder's output
 * must match byte for byte, but they cost more than the encoding around
 * them: escape_json() needs a terminated copy of every string, and
 * jsonb_out() builds its text in a buffer of its own, copies each string
 * inside the value before escaping it, and leaves the caller to measure and
 * copy the result; numeric_out() detoasts a copy of every value and returns
 * its text in a fresh allocation.  The functions here write the same bytes
 * in place.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgrprotos.h"
#include "utils/numeric.h"

#include "encode_scalar.h"

/*
 * For each byte, 0 if it stands for itself in a JSON string, else the
 * letter of its backslash escape, or 'u' for \u00XX.
 */
static const char json_escape[256] = {
	['\0'] = 'u',
	[0x01] = 'u',
	[0x02] = 'u',
	[0x03] = 'u',
	[0x04] = 'u',
	[0x05] = 'u',
	[0x06] = 'u',
	[0x07] = 'u',
	['\b'] = 'b',
	['\t'] = 't',
	['\n'] = 'n',
	[0x0b] = 'u',
	['\f'] = 'f',
	['\r'] = 'r',
	[0x0e] = 'u',
	[0x0f] = 'u',
	[0x10] = 'u',
	[0x11] = 'u',
	[0x12] = 'u',
	[0x13] = 'u',
	[0x14] = 'u',
	[0x15] = 'u',
	[0x16] = 'u',
	[0x17] = 'u',
	[0x18] = 'u',
	[0x19] = 'u',
	[0x1a] = 'u',
	[0x1b] = 'u',
	[0x1c] = 'u',
	[0x1d] = 'u',
	[0x1e] = 'u',
	[0x1f] = 'u',
	['"'] = '"',
	['\\'] = '\\',
};

/* A byte value in each byte of a word. */
#define BYTES(b) (UINT64CONST(0x0101010101010101) * (b))

/*
 * Whether any of the eight bytes in w is one json_escape[] escapes: below
 * 0x20, a quote or a backslash.  (x - BYTES(n)) & ~x & BYTES(0x80) is not
 * zero exactly when some byte of x is below n (n <= 128): a borrow only
 * starts at such a byte.
 */
static inline bool
word_needs_escape(uint64 w)
{
	uint64 quote = w ^ BYTES('"');
	uint64 backslash = w ^ BYTES('\\');

	return (((w - BYTES(0x20)) & ~w) |
			((quote - BYTES(1)) & ~quote) |
			((backslash - BYTES(1)) & ~backslash)) &
		   BYTES(0x80);
}

/*
 * Room is made for the string as it is; only an escape, which is rare,
 * asks for more, so a long string never reserves six times its length.
 * Runs without escapes are copied eight bytes at a time.
 */
void
replicant_append_json_string(StringInfo out, const char *s, int len)
{
	static const char hexdigits[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *) s;
	const unsigned char *end = p + len;
	char *dst;

	replicant_reserve(out, len + 2);
	dst = out->data + out->len;
	*dst++ = '"';
	for (;;)
	{
		unsigned char c;
		char letter;
		uint64 word;

		while (end - p >= 8)
		{
			memcpy(&word, p, 8);
			if (word_needs_escape(word))
				break;
			memcpy(dst, p, 8);
			dst += 8;
			p += 8;
		}
		if (p == end)
			break;
		c = *p++;
		letter = json_escape[c];
		if (likely(letter == 0))
		{
			*dst++ = (char) c;
			continue;
		}

		/* an escape is at most 6 bytes; the rest and the quote follow */
		out->len = dst - out->data;
		replicant_reserve(out, 6 + (end - p) + 1);
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

/*
 * The common case of a column name, which needs no escape, is copied with
 * the comma, quotes and colon in one go, up to its terminating zero (which
 * the table escapes, so one test per byte finds both); any other goes the
 * long way.
 */
void
replicant_append_json_key(StringInfo out, const char *name, bool comma)
{
	int start = out->len;
	char *dst;
	int i;

	replicant_reserve(out, NAMEDATALEN + 4);
	dst = out->data + out->len;
	if (comma)
		*dst++ = ',';
	*dst++ = '"';
	for (i = 0; i < NAMEDATALEN && likely(json_escape[(unsigned char) name[i]] == 0); i++)
		*dst++ = name[i];
	if (likely(i < NAMEDATALEN && name[i] == '\0'))
	{
		*dst++ = '"';
		*dst++ = ':';
		out->len = dst - out->data;
		out->data[out->len] = '\0';
		return;
	}

	out->len = start + (comma ? 1 : 0);
	replicant_append_json_string(out, name, strnlen(name, NAMEDATALEN));
	appendStringInfoCharMacro(out, ':');
}

/* Appends two bytes, for the separators of jsonb's text. */
static inline void
append_two(StringInfo out, char first, char second)
{
	replicant_reserve(out, 2);
	out->data[out->len++] = first;
	out->data[out->len++] = second;
	out->data[out->len] = '\0';
}

/*
 * The on-disk numeric format, which numeric.c keeps to itself: a uint16
 * header, for the long format an int16 weight, then base-10000 digits.  It
 * is fixed by pg_upgrade's compatibility, so it is the same in every major
 * version we build against.
 */
#define NUMERIC_SIGN_MASK 0xC000
#define NUMERIC_NEG 0x4000
#define NUMERIC_SPECIAL 0xC000
#define NUMERIC_HEADER_SHORT_BIT 0x8000
#define NUMERIC_DSCALE_MASK 0x3FFF
#define NUMERIC_SHORT_SIGN_MASK 0x2000
#define NUMERIC_SHORT_DSCALE_MASK 0x1F80
#define NUMERIC_SHORT_DSCALE_SHIFT 7
#define NUMERIC_SHORT_WEIGHT_SIGN_MASK 0x0040
#define NUMERIC_SHORT_WEIGHT_MASK 0x003F
#define NUMERIC_DEC_DIGITS 4 /* decimal digits per digit */

/* The base-10000 digit d of a value, 0 past either end; may be unaligned. */
static inline int
numeric_digit(const char *digits, int ndigits, int d)
{
	int16 digit;

	if (d < 0 || d >= ndigits)
		return 0;
	memcpy(&digit, digits + d * sizeof(int16), sizeof(int16));
	return digit;
}

/*
 * Writes numeric_out()'s text for a finite value, as its get_str_from_var()
 * does: the integral digits without leading zeroes (or one "0"), then dscale
 * fractional digits, written four at a time and cut back to dscale.
 */
static void
write_numeric_digits(StringInfo out, bool negative, int weight, int dscale,
					 const char *digits, int ndigits)
{
	int intdigits = Max((weight + 1) * NUMERIC_DEC_DIGITS, 1);
	char *cp;
	char *endcp;
	int d;
	int i;

	replicant_reserve(out, intdigits + dscale + NUMERIC_DEC_DIGITS + 2);
	cp = out->data + out->len;

	if (negative)
		*cp++ = '-';
	if (weight < 0)
	{
		d = weight + 1;
		*cp++ = '0';
	}
	else
	{
		for (d = 0; d <= weight; d++)
		{
			int dig = numeric_digit(digits, ndigits, d);
			bool putit = (d > 0);
			int div;

			for (div = 1000; div > 1; div /= 10)
			{
				int d1 = dig / div;

				dig -= d1 * div;
				putit |= (d1 > 0);
				if (putit)
					*cp++ = d1 + '0';
			}
			*cp++ = dig + '0';
		}
	}

	if (dscale > 0)
	{
		*cp++ = '.';
		endcp = cp + dscale;
		for (i = 0; i < dscale; d++, i += NUMERIC_DEC_DIGITS)
		{
			int dig = numeric_digit(digits, ndigits, d);

			cp[0] = dig / 1000 + '0';
			cp[1] = (dig / 100) % 10 + '0';
			cp[2] = (dig / 10) % 10 + '0';
			cp[3] = dig % 10 + '0';
			cp += NUMERIC_DEC_DIGITS;
		}
		cp = endcp;
	}
	out->len = cp - out->data;
	out->data[out->len] = '\0';
}

/*
 * Reads the header in place, short varlena header or not, so a value
 * stored inline is not copied first.
 */
bool
replicant_append_numeric(StringInfo out, Datum value)
{
	struct varlena *num = PG_DETOAST_DATUM_PACKED(value);
	const char *data = VARDATA_ANY(num);
	const char *end = data + VARSIZE_ANY_EXHDR(num);
	uint16 header;
	bool finite;

	memcpy(&header, data, sizeof(uint16));
	finite = (header & NUMERIC_SIGN_MASK) != NUMERIC_SPECIAL;
	if (finite && (header & NUMERIC_HEADER_SHORT_BIT) != 0)
	{
		int weight = header & NUMERIC_SHORT_WEIGHT_MASK;

		if (header & NUMERIC_SHORT_WEIGHT_SIGN_MASK)
			weight |= ~NUMERIC_SHORT_WEIGHT_MASK;
		data += sizeof(uint16);
		write_numeric_digits(out, (header & NUMERIC_SHORT_SIGN_MASK) != 0,
							 weight,
							 (header & NUMERIC_SHORT_DSCALE_MASK) >>
								 NUMERIC_SHORT_DSCALE_SHIFT,
							 data, (end - data) / sizeof(int16));
	}
	else if (finite)
	{
		int16 weight;

		memcpy(&weight, data + sizeof(uint16), sizeof(int16));
		data += sizeof(uint16) + sizeof(int16);
		write_numeric_digits(out,
							 (header & NUMERIC_SIGN_MASK) == NUMERIC_NEG,
							 weight, header & NUMERIC_DSCALE_MASK,
							 data, (end - data) / sizeof(int16));
	}

	if ((Pointer) num != DatumGetPointer(value))
		pfree(num);
	return finite;
}

/*
 * Caches the opening quote, date and time of t's second as the function
 * below writes them; false when timestamp2tm() cannot convert t.
 */
static bool
second_text_utc(ReplicantSecondText *cache, TimestampTz t, fsec_t *fsec)
{
	struct pg_tm tm;
	char *cp = cache->text;

	if (timestamp2tm(t, NULL, &tm, fsec, NULL, NULL) != 0)
		return false;
	*cp++ = '"';
	cp = pg_ultostr_zeropad(cp, tm.tm_year > 0 ? tm.tm_year : -(tm.tm_year - 1), 4);
	*cp++ = '-';
	cp = pg_ultostr_zeropad(cp, tm.tm_mon, 2);
	*cp++ = '-';
	cp = pg_ultostr_zeropad(cp, tm.tm_mday, 2);
	*cp++ = 'T';
	cp = pg_ultostr_zeropad(cp, tm.tm_hour, 2);
	*cp++ = ':';
	cp = pg_ultostr_zeropad(cp, tm.tm_min, 2);
	*cp++ = ':';
	cp = pg_ultostr_zeropad(cp, tm.tm_sec, 2);
	cache->len = cp - cache->text;
	cache->bc = tm.tm_year <= 0;
	cache->second = t - *fsec;
	cache->valid = true;
	return true;
}

/*
 * JsonEncodeDateTime() for a timestamptz in UTC, which is EncodeDateTime()
 * in XSD style with a zone of +00:00: the year's absolute value in at least
 * four digits (" BC" at the end for years before 1 AD), the fraction of a
 * second without trailing zeroes and only when not zero.
 */
bool
replicant_append_timestamptz_utc(StringInfo out, TimestampTz t)
{
	static ReplicantSecondText cache; /* the second written last */
	fsec_t fsec;
	char *start;
	char *cp;

	if (TIMESTAMP_NOT_FINITE(t))
		return false;
	if (!replicant_second_text_hit(&cache, t, &fsec) &&
		!second_text_utc(&cache, t, &fsec))
		return false;

	replicant_reserve(out, MAXDATELEN + 2);
	start = cp = out->data + out->len;
	memcpy(cp, cache.text, cache.len);
	cp += cache.len;
	if (fsec != 0)
	{
		*cp++ = '.';
		cp = replicant_put_usecs(cp, fsec);
		while (cp[-1] == '0')
			cp--;
	}
	memcpy(cp, "+00:00", 6);
	cp += 6;
	if (cache.bc)
	{
		memcpy(cp, " BC", 3);
		cp += 3;
	}
	*cp++ = '"';
	out->len += cp - start;
	out->data[out->len] = '\0';
	return true;
}

/* Appends a scalar held in a jsonb as jsonb_out() writes it. */
static void
append_jsonb_scalar(StringInfo out, const JsonbValue *v)
{
	char *num;

	switch (v->type)
	{
		case jbvNull:
			replicant_append_bytes(out, "null", 4);
			break;
		case jbvString:
			replicant_append_json_string(out, v->val.string.val,
										 v->val.string.len);
			break;
		case jbvNumeric:
			if (replicant_append_numeric(out, NumericGetDatum(v->val.numeric)))
				break;
			/* jsonb holds no NaN or infinity; its output function would say */
			num = DatumGetCString(DirectFunctionCall1(numeric_out,
													  NumericGetDatum(v->val.numeric)));
			appendStringInfoString(out, num);
			pfree(num);
			break;
		case jbvBool:
			if (v->val.boolean)
				replicant_append_bytes(out, "true", 4);
			else
				replicant_append_bytes(out, "false", 5);
			break;
		default:
			elog(ERROR, "unknown jsonb scalar type");
	}
}

/*
 * Appends item index of container, whose data starts at base, offset bytes
 * in (fillJsonbValue() in jsonb_util.c reads the same layout).
 */
static void
append_jsonb_item(StringInfo out, const JsonbContainer *container, int index,
				  const char *base, uint32 offset, uint32 next_offset)
{
	JEntry entry = container->children[index];
	JsonbValue v;

	if (JBE_ISCONTAINER(entry))
	{
		replicant_append_jsonb(out, (const JsonbContainer *) (base + INTALIGN(offset)));
		return;
	}
	if (JBE_ISNULL(entry))
		v.type = jbvNull;
	else if (JBE_ISSTRING(entry))
	{
		v.type = jbvString;
		v.val.string.val = unconstify(char *, base + offset);
		v.val.string.len = next_offset - offset;
	}
	else if (JBE_ISNUMERIC(entry))
	{
		v.type = jbvNumeric;
		v.val.numeric = (Numeric) unconstify(char *, base + INTALIGN(offset));
	}
	else
	{
		v.type = jbvBool;
		v.val.boolean = JBE_ISBOOL_TRUE(entry);
	}
	append_jsonb_scalar(out, &v);
}

/*
 * JsonbToCString() without indentation: ", " between items, ": " after a
 * key, and a scalar at the root written without its one-element array.
 * The container is read in place, in the order a JsonbIterator reads it (an
 * object's keys are its first children, their values the next as many),
 * without the iterator's allocation at every level.
 */
void
replicant_append_jsonb(StringInfo out, const JsonbContainer *container)
{
	uint32 count = JsonContainerSize(container);
	bool object = JsonContainerIsObject(container);
	const char *base = (const char *) &container->children[object ? count * 2 : count];
	uint32 key_offset = 0;
	uint32 offset = object ? getJsonbOffset(container, count) : 0;
	uint32 i;

	check_stack_depth();
	if (!JsonContainerIsScalar(container))
		appendStringInfoCharMacro(out, object ? '{' : '[');
	for (i = 0; i < count; i++)
	{
		uint32 item = object ? i + count : i;
		uint32 next = offset;

		if (i > 0)
			append_two(out, ',', ' ');
		if (object)
		{
			uint32 next_key = key_offset;

			JBE_ADVANCE_OFFSET(next_key, container->children[i]);
			append_jsonb_item(out, container, i, base, key_offset, next_key);
			append_two(out, ':', ' ');
			key_offset = next_key;
		}
		JBE_ADVANCE_OFFSET(next, container->children[item]);
		append_jsonb_item(out, container, item, base, offset, next);
		offset = next;
	}
	if (!JsonContainerIsScalar(container))
		appendStringInfoCharMacro(out, object ? '}' : ']');
}
