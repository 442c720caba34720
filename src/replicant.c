/*
 * replicant.c
 *		Module entry point: settings, shared memory, the launcher, and the
 *		log filter that keeps secrets out of the server log.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "fault.h"
#include "launcher.h"
#include "redact.h"
#include "replicant.h"
#include "shmem.h"

PG_MODULE_MAGIC;

int			replicant_max_pipelines = 16;
int			replicant_batch_memory_limit_kb = 16384;
int			replicant_batch_linger_ms = 5;

void		_PG_init(void);

void
_PG_init(void)
{
	/* Backends that load the library late still get the log filter. */
	replicant_redact_init();

	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("replicant.max_pipelines",
							"Maximum number of pipelines across all databases.",
							NULL,
							&replicant_max_pipelines,
							16, 1, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("replicant.batch_memory_limit",
							"Size above which a batch body is spilled to a temporary file.",
							NULL,
							&replicant_batch_memory_limit_kb,
							16384, 64, MAX_KILOBYTES,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("replicant.batch_linger",
							"Shortest time between the starts of two batches while changes keep arriving.",
							"A commit after a quiet spell is sent at once; under load, commits arriving within this time share one request.",
							&replicant_batch_linger_ms,
							5, 0, 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	replicant_fault_init();
	MarkGUCPrefixReserved("replicant");

	replicant_shmem_init();
	replicant_launcher_register();
}
