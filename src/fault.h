/*
 * fault.h
 *		Fault injection for tests: stop the worker at a named step.
 */
#ifndef REPLICANT_FAULT_H
#define REPLICANT_FAULT_H

extern char *replicant_fault_point;

extern void replicant_fault_init(void);

/*
 * Exits the process (code 1, so the launcher restarts it) when
 * replicant.fault_point names this point; inert otherwise.  Safe anywhere,
 * including libcurl callbacks: it never raises an error (":hold", which
 * reloads the configuration while it waits, and ":error=<SQLSTATE>", which
 * raises one, are for points outside them).
 */
extern void replicant_fault(const char *point);

/* Whether a fault point is set: a check costing more than this can wait for it. */
static inline bool
replicant_fault_armed(void)
{
	return replicant_fault_point != NULL && replicant_fault_point[0] != '\0';
}

/*
 * For a point met where the setting cannot be read (another thread): whether
 * replicant.fault_point is "<point>:hold", and the line a test waits for
 * once the point holds ("fault point "<point>" reached, <what>").
 */
extern bool replicant_fault_holds(const char *point);
extern void replicant_fault_announce(const char *point, const char *what);

/*
 * Mutants: deliberate defects that prove the differential test
 * (test/t/080_oracle.pl) catches what it is meant to.  Compiled in only with
 * -DREPLICANT_MUTANTS; then a process whose environment has
 * REPLICANT_MUTANT=<name> carries that defect:
 *   ignore_column_list  publishes every column, whatever a column list says
 *   drop_last_change    leaves out the last change of a transaction of several
 *   no_collision        skips the check that drops a backfill chunk's rows the
 *                       stream changed inside the chunk's window
 * In every other build replicant_mutant() is false at compile time.
 */
#ifdef REPLICANT_MUTANTS
extern bool replicant_mutant(const char *name);
#else
#define replicant_mutant(name) false
#endif

#endif /* REPLICANT_FAULT_H */
