/*
 * redact.h
 *		Keeping secrets out of the server log and out of what views show.
 */
#ifndef REPLICANT_REDACT_H
#define REPLICANT_REDACT_H

/* Installs the log filter; called from _PG_init. */
extern void replicant_redact_init(void);

/*
 * Hides the statement text from every message of the current transaction
 * (create_pipeline and alter_pipeline call it: their arguments hold secrets
 * however the call was spelled: through search_path, EXECUTE, a function).
 */
extern void replicant_redact_statements(void);

/* Returns url with any user information ("user:pass@") replaced by "***@". */
extern char *replicant_redacted_url(const char *url);

#endif /* REPLICANT_REDACT_H */
