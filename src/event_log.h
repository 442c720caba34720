/*
 * event_log.h
 *		A pipeline's state changes as log lines a machine can read.
 */
#ifndef REPLICANT_EVENT_LOG_H
#define REPLICANT_EVENT_LOG_H

/*
 * Logs one state change of a pipeline as one line a machine can parse:
 *   replicant: event=<event> pipeline=<name> [key=value ...]
 * after the event and the pipeline, the pairs of key and value given,
 * ended by REPLICANT_LOG_END.  A value of letters, digits and _ . : / -
 * stays bare; any other is double-quoted, with " and \ escaped by a
 * backslash.  Values must be value-free (names, classes, numbers, a halt's
 * reason).
 */
#define REPLICANT_LOG_END ((const char *) NULL)

extern void replicant_log_state(const char *pipeline, const char *event, ...);

#endif /* REPLICANT_EVENT_LOG_H */
