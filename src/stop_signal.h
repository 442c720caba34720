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
 * does.
 */
extern void replicant_stop_signal_init(ReplicantPipelineSlot *slot, uint32 generation,
									   const char *what, int elevel);

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
 * Call first in a PG_CATCH block: if the error came from a stop replicant
 * asked for, ends the process with a line at the elevel given to init and
 * exit code 0 (no transaction, no checkpoint to commit: such a stop comes
 * from the catalog, or at a point with nothing acknowledged pending).
 */
extern void replicant_stop_signal_exit_if_asked(void);

#endif /* REPLICANT_STOP_SIGNAL_H */
