/*
 * table_shape.h
 *		Table shapes: a published table's replica identity, key and live
 *		columns, what a destructive schema change is detected against.
 */
#ifndef REPLICANT_TABLE_SHAPE_H
#define REPLICANT_TABLE_SHAPE_H

#include "nodes/bitmapset.h"
#include "utils/relcache.h"

/*
 * rel's shape, "identity:key columns|live columns", key_columns being its
 * replica identity's (publication.h), in CurrentMemoryContext.
 */
extern char *replicant_table_shape(Relation rel, const Bitmapset *key_columns);

/*
 * A value-free reason if table relname, shaped before as baseline, changed
 * destructively into now (a column dropped or renamed, the replica
 * identity changed), which resume_pipeline accepts; else NULL, also when
 * baseline is another table's (of another row type, before the OID was
 * reused).
 */
extern char *replicant_table_shape_change(const char *baseline, const char *now,
										  const char *relname);

/*
 * The shapes saved with the pipeline's last checkpoint
 * (replicant.table_shapes): loading them (once per worker, inside an SPI
 * connection), the one of a table (NULL if none), and saving one that
 * differs from it (inside the checkpoint's SPI connection; create_pipeline
 * saves every published table's).
 */
extern void replicant_table_shape_load(int32 pipeline_id);
extern const char *replicant_table_shape_saved(Oid relid);
extern void replicant_table_shape_save(int32 pipeline_id, Oid relid, const char *shape);

/* Forgets the saved shape of a table found dropped (pruning.c), in memory. */
extern void replicant_table_shape_forget(Oid relid);

#endif /* REPLICANT_TABLE_SHAPE_H */
