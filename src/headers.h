/*
 * headers.h
 *		The rules for a pipeline's configured HTTP headers, shared by the
 *		validation in create_pipeline/alter_pipeline and the request builder.
 */
#ifndef REPLICANT_HEADERS_H
#define REPLICANT_HEADERS_H

/* Whether name is an HTTP token (RFC 9110 tchar), so a line cannot be split. */
extern bool replicant_header_name_ok(const char *name);

/*
 * The reserved name (lower case) if replicant or framing owns this header,
 * else NULL.
 */
extern const char *replicant_header_reserved(const char *name);

/* Whether value has no control character (no CR or LF: no injection). */
extern bool replicant_header_value_ok(const char *value);

#endif /* REPLICANT_HEADERS_H */
