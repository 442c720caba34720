/*
 * replicant.c
 *		The settings shared by every part of replicant (replicant.h).  The
 *		entry point that defines them is module.c.
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "replicant.h"

int replicant_max_pipelines = 16;
int replicant_batch_memory_limit_kb = 16384;
int replicant_destination_backlog_kb = 65536;
int replicant_batch_linger_ms = 5;
int replicant_checkpoint_interval_ms = 50;

void
replicant_define_settings(void)
{
	DefineCustomIntVariable("replicant.max_pipelines",
							"Maximum number of pipelines across all databases.",
							NULL,
							&replicant_max_pipelines,
							16, 1, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("replicant.batch_memory_limit",
							"Size above which a batch body is spilled to a temporary file.",
							NULL,
							&replicant_batch_memory_limit_kb,
							16384, 64, MAX_KILOBYTES,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("replicant.destination_backlog",
							"Most decoded batches a pipeline keeps for a destination whose sink is retrying while its others stream.",
							"Past it, that destination is left behind: the others go on, it keeps retrying one request, and once its sink takes it the worker starts again from its checkpoint to catch it up. Batches past replicant.batch_memory_limit are spilled to a temporary file.",
							&replicant_destination_backlog_kb,
							65536, 64, MAX_KILOBYTES,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("replicant.batch_linger",
							"Longest time batching delays a commit.",
							"A batch is sent as soon as decoding finds no more flushed WAL; while more keeps coming, it grows for at most this long, within the batch limits. A caught-up worker whose deliveries take more than a tenth of a core rests after a delivery until back within that budget, at most this long. 0: neither; a batch takes only the WAL flushed when its decoding began.",
							&replicant_batch_linger_ms,
							5, 0, 60000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("replicant.checkpoint_interval",
							"Longest time the checkpoint row may lag the sink's acknowledgements.",
							"After a 2xx the checkpoint is committed at once only if this long has passed since the last one; otherwise within this time. A crash re-delivers what was acknowledged since the last checkpoint. 0: after every request.",
							&replicant_checkpoint_interval_ms,
							50, 0, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
}
