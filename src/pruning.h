/*
 * pruning.h
 *		Forgetting dropped tables: relation cache entries and saved shapes.
 */
#ifndef REPLICANT_PRUNING_H
#define REPLICANT_PRUNING_H

#include "access/xlogdefs.h"

/*
 * At a checkpoint, in its transaction and SPI connection: looks for tables
 * dropped since (at most every few seconds), and forgets those found at an
 * earlier checkpoint once decoding has passed their drop (decoded_upto, the
 * checkpoint's end).
 */
extern void replicant_pruning_checkpoint(int32 pipeline_id, XLogRecPtr decoded_upto);

#endif /* REPLICANT_PRUNING_H */
