/*
 * resync.h
 *		The non-destructive resync after a slot loss (on_slot_loss =>
 *		'resync') or on request (resync_pipeline): a new slot, every
 *		published table read again under its exported snapshot, the sink
 *		told which rows to sweep (docs/sink-protocol.md).
 */
#ifndef REPLICANT_RESYNC_H
#define REPLICANT_RESYNC_H

#include "format.h"
#include "pipeline.h"
#include "shmem.h"

/*
 * The pipeline lost its slot for reason (value-free): with on_slot_loss =>
 * 'resync', records the resync in the catalog (the first reason stands),
 * shows it in slot and exits for the launcher to start the worker again at
 * once, which then resyncs.  Returns the reason to halt with (recording
 * nothing): reason itself with 'halt', or, after REPLICANT_RESYNC_MAX_LOSSES
 * losses in a row with no stream batch delivered in between, a reason that
 * says so (a resync would loop).  Call outside a transaction, holding no
 * slot.
 */
#define REPLICANT_RESYNC_MAX_LOSSES 3
extern char *replicant_resync_on_loss(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline,
									  const char *reason);

/* The stream delivered a batch: the losses in a row (resync_on_loss) are reset. */
extern void replicant_resync_streamed(ReplicantPipeline *pipeline);

/*
 * Before the resync's first markers: backfills under way are cancelled
 * (the resync reads every table whole).
 */
extern void replicant_resync_cancel_backfills(ReplicantPipeline *pipeline);

/*
 * Once the sink acknowledged the first markers: drops what is left of the
 * old slot and records that it is gone, so that a slot found from then on
 * is the resync's.  Returns NULL, or the value-free reason to halt (a slot
 * of that name that is not this pipeline's).
 */
extern char *replicant_resync_drop_old_slot(ReplicantPipeline *pipeline);

/*
 * What the first (lost_to unknown yet) or last markers of the resync under
 * way tell the sink, or NULL when none is.
 */
extern ReplicantResync *replicant_resync_markers(ReplicantPipeline *pipeline, bool last);

/*
 * NULL, or the value-free reason to halt rather than send the last markers
 * of resync: the new slot starts below what the sink acknowledged
 * (lost_to < lost_from) and the pipeline's format cannot reset its sink's
 * watermark (format.h, resets_watermark).
 */
extern char *replicant_resync_refusal(ReplicantPipeline *pipeline, const ReplicantResync *resync);

/*
 * Every table was read and its last marker acknowledged: the resync is
 * over; the stream goes on from the new slot's consistent point, recorded
 * as the slot's position (slot_position.h).
 */
extern void replicant_resync_finish(ReplicantPipelineSlot *slot, ReplicantPipeline *pipeline);

#endif /* REPLICANT_RESYNC_H */
