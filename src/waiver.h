/*
 * waiver.h
 *		What resume_pipeline accepts: exactly the cause of the halt it
 *		resumes, for the commits up to the resume, and nothing else.
 */
#ifndef REPLICANT_WAIVER_H
#define REPLICANT_WAIVER_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"
#include "utils/palloc.h"

/*
 * The causes a halt met while decoding records, which a resume accepts
 * (value-free: a publication's name, a table's OID).  Every other halt
 * records none, and resuming it accepts nothing while decoding.
 */
#define REPLICANT_WAIVER_PUBLICATION "publication" /* missing; its name */
#define REPLICANT_WAIVER_SCHEMA "schema"           /* a table's shape changed; its OID and new shape */
#define REPLICANT_WAIVER_PRIVILEGE "privilege"     /* no SELECT, or RLS; the table's OID */
#define REPLICANT_WAIVER_SLOT "slot"               /* the slot was moved; to where */

/* "<kind>:<object>", in CurrentMemoryContext. */
extern char *replicant_waiver_cause(const char *kind, const char *object);
extern char *replicant_waiver_table_cause(const char *kind, Oid relid);

/*
 * "schema:<relid>:<SHA-256 of shape, hex>": a table changed into exactly this
 * shape (table_shape.h); a resume of it accepts no other.
 */
extern char *replicant_waiver_shape_cause(Oid relid, const char *shape);

/* Whether waivers (from replicant_waiver_load) accept cause for a commit at commit_lsn. */
extern bool replicant_waiver_covers(const List *waivers, const char *cause,
									XLogRecPtr commit_lsn);

/*
 * The pipeline's waivers the checkpoint has not passed, in mcxt; NIL under
 * the SQL objects of 0.2.0 and before.  Needs an SPI connection.
 */
extern List *replicant_waiver_load(int32 pipeline_id, XLogRecPtr checkpoint_commit_lsn,
								   MemoryContext mcxt);

/*
 * resume_pipeline: turns the halt's recorded cause, if any, into a waiver
 * for the commits up to now, and drops the waivers the checkpoint passed.
 * Needs an SPI connection with replicant's privileges.
 */
extern void replicant_waiver_grant(int32 pipeline_id);

#endif /* REPLICANT_WAIVER_H */
