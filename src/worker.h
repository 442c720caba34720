/*
 * worker.h
 *		The pipeline worker: decode, build a batch, deliver, checkpoint.
 */
#ifndef REPLICANT_WORKER_H
#define REPLICANT_WORKER_H

/* Passed in bgw_extra; bgw_main_arg is the shared-memory slot index. */
typedef struct ReplicantWorkerArgs
{
	uint32 generation;
	Oid dboid;
	Oid owner;
	int32 pipeline_id;
	int32 config_version;
	bool start_over; /* the last run ended with no failure of the pipeline's (runs.c) */
} ReplicantWorkerArgs;

PGDLLEXPORT void replicant_worker_main(Datum main_arg);

#endif /* REPLICANT_WORKER_H */
