/*
 * cpu_budget.h
 *		A caught-up worker's CPU budget for its deliveries: past it, the
 *		worker rests before it reads again, so that what commits meanwhile
 *		shares the next request.
 */
#ifndef REPLICANT_CPU_BUDGET_H
#define REPLICANT_CPU_BUDGET_H

#include "datatype/timestamp.h"

typedef struct ReplicantCpuBudget
{
	int64 credit_us;       /* CPU budget left, in microseconds */
	TimestampTz credit_at; /* when credit_us was last brought up to date */
} ReplicantCpuBudget;

/* The CPU time this process has used, in microseconds. */
extern int64 replicant_cpu_time_us(void);

/*
 * Charges a delivering cycle's CPU (cycle_cpu_us) at now, to a budget that
 * starts zeroed: returns how long to rest, in microseconds (0: not at all),
 * at most linger_us.
 */
extern int64 replicant_cpu_budget_charge(ReplicantCpuBudget *budget, int64 cycle_cpu_us,
										 TimestampTz now, int64 linger_us);

#endif /* REPLICANT_CPU_BUDGET_H */
