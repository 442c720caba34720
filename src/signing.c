/*
 * signing.c
 *		Standard Webhooks signatures: "v1," + base64(HMAC-SHA256(key,
 *		"<msg_id>.<timestamp>.<body>")).
 *
 * The body may be a multi-gigabyte spill file, so it is streamed through the
 * HMAC in chunks rather than assembled in memory.
 */
#include "postgres.h"

#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/resowner.h"

#include "compat.h"
#include "signing.h"

#define SIGNING_PREFIX "whsec_"
#define SIGNING_PREFIX_LEN (sizeof(SIGNING_PREFIX) - 1)
#define SIGNING_CHUNK_SIZE 65536

static bool signing_decode_key(const char *secret, uint8 **key, int *keylen);
static bool signing_hmac_body(pg_hmac_ctx *ctx, ReplicantBody *body);

/*
 * Works out the HMAC key of a secret into a palloc'd buffer.  Returns false
 * if the part after "whsec_" is not valid base64; *keylen may then be 0.
 */
static bool
signing_decode_key(const char *secret, uint8 **key, int *keylen)
{
	size_t len = strlen(secret);

	if (strncmp(secret, SIGNING_PREFIX, SIGNING_PREFIX_LEN) == 0)
	{
		const char *b64 = secret + SIGNING_PREFIX_LEN;
		int b64len = (int) (len - SIGNING_PREFIX_LEN);
		int maxlen = pg_b64_dec_len(b64len);

		/* +1 so that an empty remainder still gets a buffer */
		*key = palloc(maxlen + 1);
		*keylen = pg_b64_decode(b64, b64len, (ReplicantB64Byte *) *key, maxlen);
		if (*keylen < 0)
		{
			*keylen = 0;
			return false;
		}
	}
	else
	{
		*key = palloc(len + 1);
		memcpy(*key, secret, len);
		*keylen = (int) len;
	}
	return true;
}

void
replicant_signing_check_secret(const char *secret)
{
	uint8 *key;
	int keylen;
	bool valid;

	if (secret == NULL || secret[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("signing secret must not be empty")));

	valid = signing_decode_key(secret, &key, &keylen);
	explicit_bzero(key, keylen);
	pfree(key);

	/* never echo the secret, not even in a detail */
	if (!valid)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("signing secret is not valid base64 after \"%s\"",
						SIGNING_PREFIX)));
	if (keylen == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("signing secret must not be empty"),
				 errdetail("The secret has no key after \"%s\".",
						   SIGNING_PREFIX)));
}

/*
 * Feeds exactly body->length bytes from the body's start into the HMAC.
 * Returns false on a failed or short read: the body is then not what its
 * length says, and signing something else than what is sent helps no one.
 */
static bool
signing_hmac_body(pg_hmac_ctx *ctx, ReplicantBody *body)
{
	char *buf = palloc(SIGNING_CHUNK_SIZE);
	size_t done = 0;
	bool ok = true;

	body->rewind(body->arg);
	while (done < body->length)
	{
		size_t want = Min(body->length - done, (size_t) SIGNING_CHUNK_SIZE);
		size_t got = body->read(body->arg, buf, want);

		if (got == (size_t) -1 || got == 0 || got > want)
		{
			ok = false;
			break;
		}
		if (pg_hmac_update(ctx, (const uint8 *) buf, got) < 0)
			elog(ERROR, "could not compute webhook signature: %s",
				 pg_hmac_error(ctx));
		done += got;

		/* a spill file can take a while: stay responsive (no libcurl here) */
		CHECK_FOR_INTERRUPTS();
	}
	pfree(buf);
	return ok;
}

char *
replicant_signing_signature(const char *secret, const char *msg_id,
							int64 timestamp, ReplicantBody *body)
{
	ResourceOwner saved_owner = CurrentResourceOwner;
	ResourceOwner volatile own_owner = NULL;
	pg_hmac_ctx *volatile ctx = NULL;
	char *volatile result = NULL;
	uint8 *key;
	int keylen;
	char middle[32];
	uint8 digest[PG_SHA256_DIGEST_LENGTH];

	if (!signing_decode_key(secret, &key, &keylen))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("signing secret is not valid base64 after \"%s\"",
						SIGNING_PREFIX)));

	/* the part between msg_id and body: ".<timestamp>." */
	snprintf(middle, sizeof(middle), "." INT64_FORMAT ".", timestamp);

	/*
	 * With OpenSSL, pg_hmac_create() registers the context with
	 * CurrentResourceOwner, which is NULL in a background worker between
	 * transactions.  Lend it a private owner then, rather than crash.
	 */
	if (CurrentResourceOwner == NULL)
	{
		own_owner = ResourceOwnerCreate(NULL, "replicant signing");
		CurrentResourceOwner = own_owner;
	}

	PG_TRY();
	{
		ctx = pg_hmac_create(PG_SHA256);
		if (pg_hmac_init(ctx, key, keylen) < 0 ||
			pg_hmac_update(ctx, (const uint8 *) msg_id, strlen(msg_id)) < 0 ||
			pg_hmac_update(ctx, (const uint8 *) middle, strlen(middle)) < 0)
			elog(ERROR, "could not compute webhook signature: %s",
				 pg_hmac_error(ctx));

		if (signing_hmac_body(ctx, body))
		{
			int enclen = pg_b64_enc_len(sizeof(digest));
			int len;
			char *sig;

			if (pg_hmac_final(ctx, digest, sizeof(digest)) < 0)
				elog(ERROR, "could not compute webhook signature: %s",
					 pg_hmac_error(ctx));

			sig = palloc(3 + enclen + 1);
			memcpy(sig, "v1,", 3);
			len = pg_b64_encode((const ReplicantB64Byte *) digest, sizeof(digest),
								sig + 3, enclen);
			if (len < 0)
				elog(ERROR, "could not encode webhook signature");
			sig[3 + len] = '\0';
			result = sig;
		}
	}
	PG_FINALLY();
	{
		/* pg_hmac_free() forgets the context in the owner it was made in */
		pg_hmac_free(ctx);
		explicit_bzero(key, keylen);
		explicit_bzero(digest, sizeof(digest));
		pfree(key);
		if (own_owner != NULL)
		{
			CurrentResourceOwner = saved_owner;
			ResourceOwnerDelete(own_owner);
		}
	}
	PG_END_TRY();

	/* NULL: the body could not be read in full */
	return result;
}

/* Random bytes in a signing secret made by replicant.generate_secret(). */
#define SIGNING_SECRET_BYTES 24

PG_FUNCTION_INFO_V1(replicant_generate_secret);

/*
 * replicant.generate_secret() RETURNS text
 *
 * "whsec_" and the base64 of 24 bytes from the server's strong random
 * source: the form Standard Webhooks libraries take.
 */
Datum
replicant_generate_secret(PG_FUNCTION_ARGS)
{
	bytea *raw = (bytea *) palloc(VARHDRSZ + SIGNING_SECRET_BYTES);
	text *encoded;

	SET_VARSIZE(raw, VARHDRSZ + SIGNING_SECRET_BYTES);
	if (!pg_strong_random(VARDATA(raw), SIGNING_SECRET_BYTES))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random bytes for a secret")));
	encoded = DatumGetTextPP(DirectFunctionCall2(binary_encode, PointerGetDatum(raw),
												 CStringGetTextDatum("base64")));
	PG_RETURN_TEXT_P(cstring_to_text(psprintf(SIGNING_PREFIX "%s", text_to_cstring(encoded))));
}
