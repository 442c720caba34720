/*
 * api_destination.h
 *		A pipeline's destinations as the management functions see them:
 *		add_destination, drop_destination, and the checks and statements
 *		that create_pipeline, alter_pipeline, alter_destination,
 *		resume_pipeline and await_delivered share with them.
 *
 * All but the SQL-callable functions run inside replicant_catalog_enter/
 * leave, under 0.3.0's SQL objects (replicant_destinations_exist()) unless
 * they say otherwise.
 */
#ifndef REPLICANT_API_DESTINATION_H
#define REPLICANT_API_DESTINATION_H

#include "pipeline.h"
#include "pipeline_options.h"

/*
 * A text column (a constant name) of destination "destination" of pipeline
 * id, which exists (NULL: the pipeline's only one); under the SQL objects
 * of 0.2.0 and before, of the pipeline's row, which has the sink options.
 */
extern char *replicant_api_destination_text(int32 pipeline_id, const char *destination,
											const char *column);

/*
 * The formats of destination "destination" of pipeline id (NULL: of each
 * of its destinations, distinct), as a List of char *.
 */
extern List *replicant_api_destination_formats(int32 pipeline_id, const char *destination);

/* NATS destinations take the formats of changes, not ClickHouse's inserts. */
extern void replicant_api_destination_check_format(const char *url, const char *format);

/*
 * The id of pipeline ref's destination of this name, and whether it is
 * halted (halted may be NULL); raises an error when it has none.
 */
extern int32 replicant_api_destination_lookup(const ReplicantPipelineRef *ref, const char *destination,
											  bool *halted);

/*
 * The name of the pipeline's oldest halted destination, or NULL (any
 * objects); one that gave its hold on the slot up is never resumed, and
 * counts as none.
 */
extern char *replicant_api_destination_halted(int32 pipeline_id);

/* Refuses a resume of a destination that gave its hold on the slot up. */
extern void replicant_api_destination_check_resumable(const ReplicantPipelineRef *ref, const char *destination,
													  int32 destination_id);

/*
 * The id of pipeline ref's destination of this name, which a backfill may
 * be planned for: raises an error when it has none, or when it gave its
 * hold on the slot up or is resyncing (its resync reads every table, and a
 * read planned beside it would begin it again).
 */
extern int32 replicant_api_destination_backfillable(const ReplicantPipelineRef *ref, const char *destination);

/*
 * alter_pipeline's sink options change the pipeline's only destination:
 * raises an error when o changes one and the pipeline has several.
 */
extern void replicant_api_destination_check_only(const ReplicantPipelineRef *ref,
												 const ReplicantPipelineOptions *o);

/* How many destinations the pipeline has.  Inside the caller's catalog access. */
extern int replicant_api_destination_count(int32 pipeline_id);

/*
 * The pipeline's resync with several destinations resyncs each
 * (resync_destinations.c): refused, before its slot goes, when one of
 * them could not (its owner may not read a table, a promoted standby's
 * timeline).
 */
extern void replicant_api_destination_check_resyncs(const ReplicantPipelineRef *ref);

/*
 * No two NATS destinations of a pipeline share a stream: raises an error
 * unless that holds once destination "destination" (NULL: a new one)
 * delivers to url.
 */
extern void replicant_api_destination_check_nats(const ReplicantPipelineRef *ref,
												 const char *destination, const char *url);

/*
 * Inserts a destination of the pipeline with the options of a
 * create_pipeline or add_destination call (call, nargs arguments) and
 * returns its id.
 */
extern int32 replicant_api_destination_insert(int32 pipeline_id, const ReplicantPipelineOptions *o,
											  int nargs, ReplicantOptionsCall call);

/*
 * resync_pipeline(name, destination): the destination resyncs alone
 * (destination_resync.h), its halt or release of the slot cleared; its
 * worker is stopped where it leaves nothing to re-deliver, and the next one
 * starts at commit.
 */
extern void replicant_api_destination_resync(const char *name, const char *destination);

#endif /* REPLICANT_API_DESTINATION_H */
