/*
 * headers.c
 *		The rules for a pipeline's configured HTTP headers.
 *
 * create_pipeline and alter_pipeline refuse a header that breaks them, with
 * a message; the request builder checks the stored headers again and skips
 * one that breaks them, so that a row edited by hand can never forge a line
 * or override a header replicant sets.  Both use these functions, so the
 * builder drops exactly what configuration refuses.
 */
#include "postgres.h"

#include "headers.h"

/* Headers replicant sets itself, or that belong to the framing. */
static const char *const reserved_headers[] = {
	"content-type",
	"content-length",
	"content-encoding",
	"transfer-encoding",
	"host",
	"connection",
	"expect",
	"user-agent",
	"keep-alive",
	"webhook-id",
	"webhook-timestamp",
	"webhook-signature",
};

bool
replicant_header_name_ok(const char *name)
{
	const char *p;

	if (name == NULL || name[0] == '\0')
		return false;
	for (p = name; *p; p++)
	{
		unsigned char c = (unsigned char) *p;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL))
			return false;
	}
	return true;
}

const char *
replicant_header_reserved(const char *name)
{
	int i;

	for (i = 0; i < lengthof(reserved_headers); i++)
	{
		if (pg_strcasecmp(name, reserved_headers[i]) == 0)
			return reserved_headers[i];
	}
	return NULL;
}

bool
replicant_header_value_ok(const char *value)
{
	const unsigned char *p;

	if (value == NULL)
		return false;
	for (p = (const unsigned char *) value; *p; p++)
	{
		if (*p < 0x20 || *p == 0x7f)
			return false;
	}
	return true;
}
