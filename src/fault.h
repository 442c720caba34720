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

#endif /* REPLICANT_FAULT_H */
