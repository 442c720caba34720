/*
 * cpu_budget.c
 *		A caught-up worker's CPU budget for its deliveries.
 *
 * A worker's delivering cycles may use 1/CPU_SHARE_DIVISOR of a core, with
 * bursts of CPU_BURST_US above that; past it, the worker rests before it
 * reads again, for at most replicant.batch_linger.  A request costs the
 * worker about 100 us of CPU however few transactions it carries (send,
 * libcurl, checkpoint), and a sink that answers at once is idle again
 * before the next commit: at a few thousand commits/s each request would
 * carry one or two transactions and take a quarter of a core from the
 * source.  Resting lets what commits meanwhile share the next request,
 * while a lightly loaded pipeline, under budget, never rests.  CPU time,
 * not wall time: waiting for a slow sink costs the source nothing, and what
 * commits meanwhile shares the next request anyway.
 */
#include "postgres.h"

#include <time.h>

#include "cpu_budget.h"

#define CPU_SHARE_DIVISOR 10
#define CPU_BURST_US 1000

int64
replicant_cpu_time_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64) ts.tv_sec * USECS_PER_SEC + ts.tv_nsec / 1000;
}

/*
 * The budget earns one part in CPU_SHARE_DIVISOR of the time passed since
 * it was last charged, up to CPU_BURST_US; the rest lasts as long as it
 * takes to earn back what is overdrawn.
 */
int64
replicant_cpu_budget_charge(ReplicantCpuBudget *budget, int64 cycle_cpu_us,
							TimestampTz now, int64 linger_us)
{
	budget->credit_us = Min(budget->credit_us + (now - budget->credit_at) / CPU_SHARE_DIVISOR,
							CPU_BURST_US) -
						cycle_cpu_us;
	/* An overdraft past one rest is forgotten, so a quiet spell clears it. */
	budget->credit_us = Max(budget->credit_us, -linger_us / CPU_SHARE_DIVISOR);
	budget->credit_at = now;
	return Max(Min(-budget->credit_us * CPU_SHARE_DIVISOR, linger_us), 0);
}
