/*
 * stop_signal.c
 *		SIGTERM in pipeline and snapshot workers.
 *
 * drop_pipeline, DROP EXTENSION, and disable_pipeline or alter_pipeline of
 * a worker that cannot stop where it chooses (reading an initial snapshot,
 * not attached yet) end the worker with SIGTERM.  die() would make that a
 * FATAL "terminating background worker ... due to administrator command"
 * and an exit code of 1, which the postmaster logs too: alarming lines for
 * what the operator asked for.  The requester records the stop in the
 * shared slot before it signals, so the handler can tell: replicant's own
 * stops interrupt the process as a query cancel would (a lock wait, a
 * socket, a WAL wait all end), and the error that raises reaches the
 * process's outermost PG_CATCH, which exits 0 after one line at LOG.
 *
 * A SIGTERM replicant did not ask for (a shutdown, pg_terminate_backend)
 * and a query cancel (SIGINT) are marked in the slot before they take
 * effect as in any backend: the launcher counts the run they end as no
 * failure of the pipeline's (launcher.c).
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"

#include "stop_signal.h"

static ReplicantPipelineSlot *stop_slot = NULL;
static uint32 stop_generation;
static bool *interrupted_flag = NULL;
static int stop_elevel;
static pid_t stop_parent_pid = 0;
static char stop_who[NAMEDATALEN * 2 + 64];
static volatile sig_atomic_t quiet_stop_pending = false;
static volatile sig_atomic_t armed = false;

/*
 * Whether the slot says replicant stops this process.  Read without the
 * lock, which a signal handler may not take: the requester wrote these
 * under it before signalling, and each is one aligned word.
 */
static bool
asked_by_replicant(void)
{
	ReplicantPipelineSlot *slot = stop_slot;

	return !slot->in_use || slot->generation != stop_generation ||
		   !slot->runnable || slot->stop_requested ||
		   (stop_parent_pid != 0 && slot->pid != stop_parent_pid);
}

/* Marks the run as ended by another process (see shmem.h, interrupted). */
static void
note_interrupted(void)
{
	if (stop_slot != NULL && stop_slot->generation == stop_generation)
		*(volatile bool *) interrupted_flag = true;
}

static void
handle_sigterm(SIGNAL_ARGS)
{
	int save_errno = errno;

	if (stop_slot != NULL && asked_by_replicant())
	{
		quiet_stop_pending = true;
		if (armed)
		{
			QueryCancelPending = true;
			InterruptPending = true;
		}
		SetLatch(MyLatch);
	}
	else
	{
		note_interrupted();
		die(postgres_signal_arg);
	}
	errno = save_errno;
}

static void
handle_sigint(SIGNAL_ARGS)
{
	int save_errno = errno;

	note_interrupted();
	StatementCancelHandler(postgres_signal_arg);
	errno = save_errno;
}

void
replicant_stop_signal_init(ReplicantPipelineSlot *slot, uint32 generation,
						   const char *what, int elevel, bool shard)
{
	snprintf(stop_who, sizeof(stop_who), "%s \"%s\"", what, slot->name);
	stop_elevel = elevel;
	stop_generation = generation;
	interrupted_flag = shard ? &slot->shard_interrupted : &slot->interrupted;
	/*
	 * A shard worker's SIGTERM once the pipeline worker that started it is
	 * gone is that worker's exit ending it (terminate_shard_workers), even
	 * when its successor already cleared stop_requested.
	 */
	stop_parent_pid = shard ? MyBgworkerEntry->bgw_notify_pid : 0;
	stop_slot = slot;
	pqsignal(SIGTERM, handle_sigterm);
	pqsignal(SIGINT, handle_sigint);
}

bool
replicant_stop_signal_pending(void)
{
	return quiet_stop_pending;
}

static void
exit_quietly(void)
{
	HOLD_INTERRUPTS();
	QueryCancelPending = false;
	AbortOutOfAnyTransaction();
	ereport(stop_elevel,
			(errmsg("%s stopped on request", stop_who)));
	proc_exit(0);
}

void
replicant_stop_signal_arm(void)
{
	armed = true;
	if (quiet_stop_pending)
		exit_quietly();
}

void
replicant_stop_signal_exit_if_asked(void)
{
	if (!quiet_stop_pending)
		return;
	FlushErrorState();
	exit_quietly();
}
