/*
 * module.c
 *		The shared library's entry point: settings, shared memory, the
 *		launcher, and the log filter that keeps secrets out of the server log.
 *
 * Kept apart from replicant.c, whose settings every module reads, so that
 * the modules _PG_init starts do not depend back on it.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "dropdb.h"
#include "fault.h"
#include "launcher.h"
#include "redact.h"
#include "replicant.h"
#include "shmem.h"

PG_MODULE_MAGIC;

void _PG_init(void);

void
_PG_init(void)
{
	/* Backends that load the library late still get the log filter. */
	replicant_redact_init();

	if (!process_shared_preload_libraries_in_progress)
		return;

	/*
	 * Every module's settings are defined before the prefix is reserved:
	 * reserving it drops from postgresql.conf whatever is not defined yet.
	 */
	replicant_define_settings();
	replicant_fault_init();
	replicant_launcher_register();
	MarkGUCPrefixReserved("replicant");

	replicant_shmem_init();
	replicant_dropdb_init();
}
