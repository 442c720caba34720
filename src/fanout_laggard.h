/*
 * fanout_laggard.h
 *		A destination whose sink keeps failing, kept apart and left behind
 *		(fanout_laggard.c); for fanout.c.
 */
#ifndef REPLICANT_FANOUT_LAGGARD_H
#define REPLICANT_FANOUT_LAGGARD_H

#include "fanout_outlet.h"

/*
 * Whether decoding may go on while o, attached, waits to retry: another
 * destination moves, nothing that goes to o must follow the batches
 * (replicant_outlet_must_drain), and its target keeps at most
 * replicant.destination_backlog for it.
 */
extern bool replicant_laggard_may_wait_apart(struct ReplicantFanout *f, const Outlet *o);

/*
 * Leaves behind each attached destination that waits to retry while
 * others move, when decoding may not go on with it; whether it left any.
 */
extern bool replicant_laggard_leave_behind(struct ReplicantFanout *f);

/* Acts on the sink's final answer to the probe of o, left behind. */
extern void replicant_laggard_probe_answered(struct ReplicantFanout *f, Outlet *o);

#endif /* REPLICANT_FANOUT_LAGGARD_H */
