/*
 * unit_check.h
 *		The checks of the unit tests under test/unit: each counts, and a
 *		failed one prints its line.  A test's main prints
 *		"<name>: N checks, M failed" (unit_check_report) and exits non-zero
 *		on any failure.
 */
#ifndef REPLICANT_UNIT_CHECK_H
#define REPLICANT_UNIT_CHECK_H

static int unit_nchecks = 0;
static int unit_nfailed = 0;

#define CHECK(cond, what) unit_check((cond), (what), __LINE__)
#define CHECK_INT(got, want, what) unit_check_int((long) (got), (long) (want), (what), __LINE__)
#define CHECK_STR(got, want, what) unit_check_str((got), (want), (what), __LINE__)

static inline void
unit_check(bool ok, const char *what, int line)
{
	unit_nchecks++;
	if (!ok)
	{
		unit_nfailed++;
		printf("FAILED line %d: %s\n", line, what);
	}
}

static inline void
unit_check_int(long got, long want, const char *what, int line)
{
	unit_nchecks++;
	if (got != want)
	{
		unit_nfailed++;
		printf("FAILED line %d: %s: got %ld, want %ld\n", line, what, got, want);
	}
}

static inline void
unit_check_str(const char *got, const char *want, const char *what, int line)
{
	unit_nchecks++;
	if (got == NULL ? want != NULL : want == NULL || strcmp(got, want) != 0)
	{
		unit_nfailed++;
		printf("FAILED line %d: %s: got \"%s\", want \"%s\"\n", line, what,
			   got ? got : "(null)", want ? want : "(null)");
	}
}

/* Prints the summary line; the exit status for main. */
static inline int
unit_check_report(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, unit_nchecks, unit_nfailed);
	return unit_nfailed == 0 ? 0 : 1;
}

#endif /* REPLICANT_UNIT_CHECK_H */
