/*
 * sink_nats_body.h
 *		Reading a rendered request body (replicant's format) back as JSON, a
 *		piece at a time, so that the NATS transport can publish each change
 *		on its own: a bounded buffer over the body's reader, and the few
 *		JSON steps the transport needs (objects' keys, strings, numbers, a
 *		value's raw bytes).  Subject tokens from names (escaped).
 *
 * Nothing here raises an error: a body that is not what replicant renders
 * sets reader->error, and every step then fails.
 */
#ifndef REPLICANT_SINK_NATS_BODY_H
#define REPLICANT_SINK_NATS_BODY_H

#include "lib/stringinfo.h"

#include "batch.h"

#define NATS_BODY_BUFFER 65536

typedef struct NatsBodyReader
{
	ReplicantBody *body;
	char *buf; /* NATS_BODY_BUFFER bytes */
	size_t len;
	size_t pos;
	bool eof;
	bool error;
} NatsBodyReader;

/* Starts reading body from its beginning (rewinds it). */
extern void nats_body_begin(NatsBodyReader *reader, ReplicantBody *body, char *buf);

/*
 * Object iteration: nats_body_object_begin() consumes '{'; each
 * nats_body_next_key() reads the next key into key (and its ':'), or
 * returns false at '}' (consumed) or on an error.  The caller consumes
 * each key's value with one of the calls below.
 */
extern bool nats_body_object_begin(NatsBodyReader *reader);
extern bool nats_body_next_key(NatsBodyReader *reader, StringInfo key);

/* Array iteration as objects': '[' then one value per true, false at ']'. */
extern bool nats_body_array_begin(NatsBodyReader *reader);
extern bool nats_body_array_next(NatsBodyReader *reader);

/* A string value, unescaped (UTF-8), into out (reset first). */
extern bool nats_body_string(NatsBodyReader *reader, StringInfo out);

/* A non-negative integer value. */
extern bool nats_body_uint64(NatsBodyReader *reader, uint64 *value);

/* true or false. */
extern bool nats_body_bool(NatsBodyReader *reader, bool *value);

/* Any value: appended raw to out, or skipped when out is NULL. */
extern bool nats_body_value(NatsBodyReader *reader, StringInfo out);

/*
 * Appends name as one NATS subject token: bytes other than ASCII letters,
 * digits, '_' and '-' are written %XX (upper-case hex), so every name is a
 * legal, distinct token ("" is "%").
 */
extern void nats_subject_token(StringInfo out, const char *name, int len);

#endif /* REPLICANT_SINK_NATS_BODY_H */
