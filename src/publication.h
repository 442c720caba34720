/*
 * publication.h
 *		Which relations and actions a pipeline's publications deliver, and the
 *		key columns of each, following the rules of PostgreSQL's pgoutput.
 */
#ifndef REPLICANT_PUBLICATION_H
#define REPLICANT_PUBLICATION_H

#include "access/xlogdefs.h"
#include "nodes/bitmapset.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

#include "change.h"
#include "epoch.h"
#include "partition_root.h"

typedef struct ReplicantRelInfo
{
	Oid relid; /* hash key */
	bool valid;

	bool published;            /* in any of the pipeline's publications */
	XLogRecPtr published_from; /* for commits from here on (a publication added later) */
	bool pub_insert;
	bool pub_update;
	bool pub_delete;
	bool pub_truncate;

	/*
	 * The relation the changes are delivered as (publish_via_partition_root:
	 * an ancestor); names_json and key_columns are that relation's.
	 */
	ReplicantPartitionRoot root;

	/*
	 * The change's "key" (replicant_row_key_delivered): the replica
	 * identity's columns (a partition's own, under the delivered
	 * relation's names), or under REPLICA IDENTITY FULL the primary key.
	 * key_whole_row means FULL without a primary key: the delivered columns.
	 * Neither means no key (null): the table has no identity, or its column
	 * list leaves out part of it.
	 */
	Bitmapset *key_columns;
	bool key_whole_row;
	bool identity_full;

	/*
	 * What "old" carries of an old row: under REPLICA IDENTITY FULL (of the
	 * relation itself) every published column; else the published columns
	 * of its identity, the only ones it logs (empty: none).
	 */
	Bitmapset *old_columns;

	/* How changes name the relation */
	ReplicantRelation relation;

	/* Row filters and published columns (pubfilter.h); set when published. */
	struct ReplicantPubFilter *filter;

	/*
	 * Set when delivering this relation would be wrong or is not supported:
	 * the pipeline halts with this value-free reason.
	 */
	char *halt_reason;
	bool halt_privilege; /* the reason is the owner's privileges, which the
						  * operator can fix and a resume accept */
	bool halt_resumable; /* and the owner may read the table now */
	bool own;            /* one of replicant's own tables */

	/*
	 * The schema of another delivered table of the delivered relation's
	 * name, or NULL; looked up only when a format names its targets after
	 * the table alone, where their rows would share a target: it halts.
	 */
	char *name_shared_with;

	/*
	 * Live column names and replica identity as accepted last (the
	 * baseline survives restarts in replicant.table_shapes); a later
	 * version that dropped (or renamed) a column or changed the identity
	 * sets schema_change, a destructive change the pipeline halts on, and
	 * schema_target, the shape it leads to, unless the operator resumed
	 * past exactly that shape (replicant_publication_accept_shape).
	 */
	char *fingerprint;
	char *schema_change;
	char *schema_target;
} ReplicantRelInfo;

/*
 * Prepares the cache for a pipeline whose worker acts for owner.
 * schemaless_names: a format it renders names its targets after the table
 * alone (name_shared_with is then looked up).  passed_upto: the highest
 * commit some destination of the pipeline was delivered (decoding may go
 * back below it for another).  Call once per process, before decoding
 * starts.
 */
extern void replicant_publication_init(Oid owner, bool schemaless_names, XLogRecPtr passed_upto);

/*
 * The value-free reason a format that names its targets (target_kind,
 * e.g. "ClickHouse table") after the table alone halts on info, whose
 * name_shared_with is set.
 */
extern char *replicant_publication_name_clash(const ReplicantRelInfo *info,
											  const char *target_kind);

/*
 * The options (epoch.h) the commit about to be decoded goes by: its
 * publications, each counting for commits from its publication_lsns entry
 * on (0: always).  Call before the functions below, for every commit; the
 * epoch must live as long as decoding.
 */
extern void replicant_publication_use_epoch(const ReplicantEpoch *epoch);

/* The commit about to be decoded: call before the functions below, for every commit. */
extern void replicant_publication_decoding(XLogRecPtr commit_lsn);

/*
 * Notes the tables the owner may not read now (needs SPI, outside
 * decoding): a privilege halt on one of them is never resumed past.
 */
extern void replicant_publication_load_denied(Oid owner);

/*
 * Returns what to deliver of rel under the current epoch's publications
 * (the missing ones empty); needs catalog access (runs in decoding
 * callbacks under the historic snapshot).
 */
extern ReplicantRelInfo *replicant_publication_relinfo(Relation rel);

/*
 * Takes entry's pending schema change as its shape: a resume accepted
 * exactly that shape.  The next checkpoint saves it.
 */
extern void replicant_publication_accept_shape(ReplicantRelInfo *entry);

/*
 * Table shapes (table_shape.h), inside an SPI connection: saving a table's
 * current shape (create_pipeline), and saving the ones decoding saw since
 * the last call with the next checkpoint.
 */
extern void replicant_publication_save_table_shape(int32 pipeline_id, Relation rel);
extern void replicant_publication_save_shapes(int32 pipeline_id);

/*
 * For forgetting dropped tables (pruning.c): the tables whose cache entries
 * were invalidated since they were last used; and forgetting one, its
 * entry and its saved shape, unless the entry is in use again (a new table
 * of that OID, decoded since): returns whether it was forgotten.
 */
extern List *replicant_publication_invalid_relids(void);
extern bool replicant_publication_forget(Oid relid);

/* Whether a shape was seen that the next checkpoint must save. */
extern bool replicant_publication_shapes_unsaved(void);

/*
 * How many catalog changes this process saw, decoded or committed, that can
 * change what the publications publish: of publications and their members,
 * and with relations, of any relation too.  Equal counts at two moments
 * mean no such change was seen in between (a change is seen once decoded,
 * or by the next replicant_publication_catalog_refresh).
 */
extern uint64 replicant_publication_changes(bool relations);

/*
 * A value-free reason if a publication that counts for a commit at
 * commit_lsn is missing at this point of decoding and waivers (waiver.h) do
 * not accept it, with *cause what a resume would; else NULL: the missing
 * ones are empty.
 */
extern char *replicant_publication_missing(XLogRecPtr commit_lsn, const List *waivers,
										   char **cause);

#endif /* REPLICANT_PUBLICATION_H */
