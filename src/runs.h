/*
 * runs.h
 *		A pipeline worker's runs without progress, counted in the catalog so
 *		that a crash restart does not forget them (runs.c).
 */
#ifndef REPLICANT_RUNS_H
#define REPLICANT_RUNS_H

/*
 * Counts the run that begins, in a transaction of its own, committed and
 * flushed; start_over when the launcher saw the previous run end with no
 * failure of the pipeline's.  Returns NULL, or the value-free reason to
 * halt when the REPLICANT_MAX_RETRIES + 1 runs before this one made no
 * progress (nothing is counted under the SQL objects before 0.3.0).
 */
extern char *replicant_runs_begin(int32 pipeline_id, bool start_over);

/*
 * The run made durable progress: the count starts over from it, 1.  A
 * transaction of its own, committed and flushed; once per process.
 */
extern void replicant_runs_progressed(int32 pipeline_id);

/* The run ends on a shutdown or termination it answers: no failure, 0. */
extern void replicant_runs_ended(int32 pipeline_id);

/*
 * Starts the count over (or begins it, for a new pipeline) in the caller's
 * transaction and SPI connection: create, enable and resume.
 */
extern void replicant_runs_start_over(int32 pipeline_id);

#endif /* REPLICANT_RUNS_H */
