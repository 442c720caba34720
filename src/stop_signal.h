/*
 * stop_signal.h
 *		SIGTERM in pipeline and snapshot workers: a stop that replicant asked
 *		for ends the process quietly; any other is die(), as in any backend.
 */
#ifndef REPLICANT_STOP_SIGNAL_H
#define REPLICANT_STOP_SIGNAL_H

#include "shmem.h"

/*
 * Installs the SIGTERM handler of a worker of slot's pipeline, started for
 * the slot's generation, as early as the slot is known; what names the
 * process in the quiet stop's log line (e.g. "replicant pipeline", followed
 * by the pipeline's name), logged at elevel.  A SIGTERM finding the slot
 * given up (not runnable: drop_pipeline, disable, alter; not in use: DROP
 * EXTENSION; another generation; or a stop requested) is replicant's own;
 * any other (a shutdown, pg_terminate_backend) ends the process as die()
 * does, as a query cancel (SIGINT) ends its statement; both mark the slot
 * interrupted (shard_interrupted for a snapshot worker, shard).
 */
extern void replicant_stop_signal_init(ReplicantPipelineSlot *slot, uint32 generation,
									   const char *what, int elevel, bool shard);

/* Whether replicant asked this process to stop (a SIGTERM of its own came). */
extern bool replicant_stop_signal_pending(void);

/*
 * Call right before the PG_TRY block whose PG_CATCH calls
 * replicant_stop_signal_exit_if_asked().  Ends the process quietly if
 * replicant asked it to stop since init; from here on, such a stop
 * interrupts whatever the process waits on as a query cancel would, and
 * the error that raises reaches that PG_CATCH.  (Before, it only records
 * the stop: an error there would have no PG_CATCH to end quietly in.)
 */
extern void replicant_stop_signal_arm(void);

/*
 * Call in a PG_CATCH block, before anything else that could act on the
 * error: if the error came from a stop replicant asked for, ends the
 * process with a line at the elevel given to init and exit code 0.  A
 * pipeline worker commits its pending checkpoint first (worker.c).
 */
extern void replicant_stop_signal_exit_if_asked(void);

#endif /* REPLICANT_STOP_SIGNAL_H */
