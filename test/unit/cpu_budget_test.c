/*
 * cpu_budget_test.c
 *		Unit tests of src/cpu_budget.c: when a caught-up worker rests after
 *		its deliveries, and for how long.  Built and run by `make unit`.
 *
 * Prints one line per failed check and ends with "N checks, M failed";
 * exits non-zero on any failure.
 */
#include "postgres.h"

#include "cpu_budget.h"
#include "unit_check.h"

#define LINGER_US 5000

/* A worker that uses a tenth of a core or less never rests. */
static void
test_under_budget(void)
{
	ReplicantCpuBudget b = {0};
	TimestampTz now = 1000000000;
	int i;
	int64 rests = 0;

	for (i = 0; i < 1000; i++, now += 1000)
		rests += replicant_cpu_budget_charge(&b, 100, now, LINGER_US);
	CHECK_INT(rests, 0, "100 us of CPU per ms: no rest");
}

/*
 * One that delivers on a whole core spends its burst, then rests ten times
 * what it overdrew, at most the linger.
 */
static void
test_over_budget(void)
{
	ReplicantCpuBudget b = {0};
	TimestampTz now = 1000000000;

	CHECK_INT(replicant_cpu_budget_charge(&b, 600, now, LINGER_US), 0,
			  "a first delivery within the burst: no rest");
	now += 600;
	CHECK_INT(replicant_cpu_budget_charge(&b, 600, now, LINGER_US), 1400,
			  "a second one overdraws the burst (400 + 60 left, 600 spent): rest ten times 140 us");
	CHECK_INT(b.credit_us, -140, "the overdraft");
	now += 600;
	/* -140 + 60 - 600 = -680, floored at -LINGER_US / 10 = -500 */
	CHECK_INT(replicant_cpu_budget_charge(&b, 600, now, LINGER_US), LINGER_US,
			  "an overdraft past one rest: the rest is the linger");
	CHECK_INT(b.credit_us, -LINGER_US / 10, "an overdraft past one rest is forgotten");
}

/* The rest earns back what was overdrawn; a quiet spell restores the burst. */
static void
test_earning_back(void)
{
	ReplicantCpuBudget b = {0};
	TimestampTz now = 1000000000;

	(void) replicant_cpu_budget_charge(&b, 1200, now, LINGER_US);
	CHECK_INT(b.credit_us, -200, "the burst overdrawn by 200 us");
	now += 2000;
	/* -200 + 200 - 100 = -100: rest 1 ms */
	CHECK_INT(replicant_cpu_budget_charge(&b, 100, now, LINGER_US), 1000,
			  "rest ten times the overdraft");
	now += 60000000;
	CHECK_INT(replicant_cpu_budget_charge(&b, 900, now, LINGER_US), 0,
			  "after a minute the burst is whole again");
	CHECK_INT(b.credit_us, 100, "the burst is capped, not accumulated");
}

int
main(void)
{
	test_under_budget();
	test_over_budget();
	test_earning_back();
	return unit_check_report("cpu_budget");
}
