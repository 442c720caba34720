/*
 * dropdb.h
 *		DROP DATABASE takes the database's pipelines with it (dropdb.c).
 */
#ifndef REPLICANT_DROPDB_H
#define REPLICANT_DROPDB_H

/* Installs the hooks, in every backend (shared_preload_libraries). */
extern void replicant_dropdb_init(void);

#endif /* REPLICANT_DROPDB_H */
