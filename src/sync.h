/*
 * sync.h
 *		The per-database sync worker, which the launcher starts whenever a
 *		database's pipelines may have changed.
 */
#ifndef REPLICANT_SYNC_H
#define REPLICANT_SYNC_H

/* Passed to a sync worker in bgw_extra. */
typedef struct ReplicantSyncArgs
{
	Oid dboid;
	int index;   /* the launcher's place for it, in replicant_shmem->sync_done[] */
	int retries; /* failed syncs of the database in a row before this one */
} ReplicantSyncArgs;

PGDLLEXPORT void replicant_sync_main(Datum main_arg);

#endif /* REPLICANT_SYNC_H */
