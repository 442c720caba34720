/*
 * fault.c
 *		Fault injection for the crash tests.
 *
 * replicant.fault_point (superuser only, empty by default) names a step of
 * the delivery cycle; a worker reaching that step exits at once, as a crash
 * there would.  Points: "decode" (a batch is half built), "after_send" (the
 * request is sent, no answer read), "after_ack" (2xx received, checkpoint
 * not committed), "after_checkpoint" (checkpoint committed, slot not
 * confirmed), "snapshot_window" (a snapshot window is delivered, its
 * progress not recorded), "snapshot_progress" (its progress is recorded,
 * the next window not read), "backfill_chunk" (a backfill chunk holds its
 * table's lock, its low watermark not written), "backfill_window"
 * (its low watermark and snapshot taken, its filter and rows not read:
 * ":pause" widens the chunk's window for concurrent writes).  A value "<point>:abort" aborts instead, which
 * makes the postmaster restart the whole server, "<point>:pause" waits
 * two seconds there, to widen a race ("halt": between a halt's records in
 * the catalog and in shared memory), and "<point>:hold" waits there until
 * the setting names something else, so a test can look at the worker
 * stopped at that step for as long as it needs ("slot_drop": a slot that
 * drop_pipeline or the sync of orphan slots found replicant's by name,
 * not acquired yet).  "<point>:error=<SQLSTATE>"
 * raises an ERROR of that class there instead, for the points where a
 * worker meets errors of its own: "decode", "encode", "deliver",
 * "checkpoint", "snapshot_read", "backfill_read", "sync" (the phases a halt
 * names), and "snapshot_import" (a shard worker importing the exported
 * snapshot).  "drop_pipeline" is met by the backend that runs
 * drop_pipeline(), between stopping the worker and dropping its slot.
 * "nats_ack" is met in libnats's thread, by the NATS transport's
 * acknowledgement handler, which must not read settings: the worker arms
 * it (replicant_fault_holds) and only ":hold" is known there, holding the
 * next handler as a thread descheduled inside it would be held.
 * "nats_learnt": the NATS transport has read the stream's last sequence
 * and last message and published nothing since.
 *
 * Builds with -DREPLICANT_MUTANTS also have the mutants of fault.h.
 */
#include "postgres.h"

#include <stdlib.h>

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#include "fault.h"

char *replicant_fault_point = NULL;

void
replicant_fault_init(void)
{
	DefineCustomStringVariable("replicant.fault_point",
							   "Stops pipeline workers at a step of the delivery cycle (tests only).",
							   NULL,
							   &replicant_fault_point,
							   "",
							   PGC_SUSET, GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
}

/* Waits until a reload makes replicant.fault_point stop naming point:hold. */
static void
hold(const char *point)
{
	size_t len = strlen(point);

	write_stderr("replicant: fault point \"%s\" reached, holding\n", point);
	while (strncmp(replicant_fault_point, point, len) == 0 &&
		   strcmp(replicant_fault_point + len, ":hold") == 0)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (ProcDiePending)
			proc_exit(1);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
	write_stderr("replicant: fault point \"%s\" released\n", point);
}

/* Raises an ERROR of class sqlstate (five characters of [0-9A-Z]). */
static void
raise_error(const char *point, const char *sqlstate)
{
	int i;

	for (i = 0; i < 5; i++)
		if (!((sqlstate[i] >= '0' && sqlstate[i] <= '9') ||
			  (sqlstate[i] >= 'A' && sqlstate[i] <= 'Z')))
			return;
	if (sqlstate[5] != '\0')
		return;
	ereport(ERROR,
			(errcode(MAKE_SQLSTATE(sqlstate[0], sqlstate[1], sqlstate[2],
								   sqlstate[3], sqlstate[4])),
			 errmsg("fault point \"%s\" raised an error of class %s", point, sqlstate)));
}

#ifdef REPLICANT_MUTANTS
bool
replicant_mutant(const char *name)
{
	static const char *active = NULL;
	static bool looked = false;

	if (!looked)
	{
		active = getenv("REPLICANT_MUTANT");
		looked = true;
		if (active && active[0] != '\0')
			write_stderr("replicant: mutant \"%s\" active\n", active);
	}
	return active != NULL && strcmp(active, name) == 0;
}
#endif

bool
replicant_fault_holds(const char *point)
{
	size_t len = strlen(point);

	return replicant_fault_point != NULL &&
		   strncmp(replicant_fault_point, point, len) == 0 &&
		   strcmp(replicant_fault_point + len, ":hold") == 0;
}

void
replicant_fault_announce(const char *point, const char *what)
{
	write_stderr("replicant: fault point \"%s\" reached, %s\n", point, what);
}

void
replicant_fault(const char *point)
{
	size_t len;

	if (replicant_fault_point == NULL || replicant_fault_point[0] == '\0')
		return;
	len = strlen(point);
	if (strncmp(replicant_fault_point, point, len) != 0)
		return;
	if (replicant_fault_point[len] == '\0')
	{
		write_stderr("replicant: fault point \"%s\" reached, exiting\n", point);
		proc_exit(1);
	}
	if (strcmp(replicant_fault_point + len, ":abort") == 0)
	{
		write_stderr("replicant: fault point \"%s\" reached, aborting\n", point);
		abort();
	}
	if (strcmp(replicant_fault_point + len, ":pause") == 0)
	{
		write_stderr("replicant: fault point \"%s\" reached, pausing\n", point);
		pg_usleep(2000000L);
	}
	if (strcmp(replicant_fault_point + len, ":hold") == 0)
		hold(point);
	if (strncmp(replicant_fault_point + len, ":error=", 7) == 0)
		raise_error(point, replicant_fault_point + len + 7);
}
