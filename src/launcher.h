/*
 * launcher.h
 *		The launcher: finds pipelines in every database and keeps one worker
 *		running per runnable pipeline.
 */
#ifndef REPLICANT_LAUNCHER_H
#define REPLICANT_LAUNCHER_H

/* Registers the launcher; called from _PG_init in the postmaster. */
extern void replicant_launcher_register(void);

PGDLLEXPORT void replicant_launcher_main(Datum main_arg);

#endif /* REPLICANT_LAUNCHER_H */
