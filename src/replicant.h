/*
 * replicant.h
 *		Constants and settings shared by every part of replicant.
 */
#ifndef REPLICANT_H
#define REPLICANT_H

#define REPLICANT_VERSION "0.3.0"

/*
 * Pipeline names: [a-z0-9_]{1,48}.  A pipeline's slot is
 * "replicant<database OID>_<name>" (pipeline.c), or "replicant_<name>" for
 * one created before 0.3.0: the two never meet, since a digit always
 * follows "replicant" in the first and "_" in the second.
 */
#define REPLICANT_NAME_MAXLEN 48
#define REPLICANT_SLOT_PREFIX "replicant"
#define REPLICANT_LEGACY_SLOT_PREFIX "replicant_"

/* Longest value-free error text kept for replicant.status.last_error. */
#define REPLICANT_ERROR_LEN 256

/* GUCs */
extern int replicant_max_pipelines;
extern int replicant_destination_backlog_kb;
extern int replicant_batch_memory_limit_kb;
extern int replicant_batch_linger_ms;
extern int replicant_checkpoint_interval_ms;

/* Defines the GUCs above (from _PG_init, module.c). */
extern void replicant_define_settings(void);

#endif /* REPLICANT_H */
