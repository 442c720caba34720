/*
 * publication.c
 *		Which relations and actions a pipeline's publications deliver.
 *
 * The rules are PostgreSQL's own (pgoutput): a table is delivered when one
 * of the pipeline's publications is FOR ALL TABLES, lists it, lists a
 * partitioned ancestor of it, or lists its schema; its actions are the
 * union over those publications.  Everything here runs inside decoding
 * callbacks, under the historic snapshot of the change being decoded, so
 * membership is evaluated as of each change's WAL position.  Results are
 * cached per relation and dropped by catalog invalidations, which the
 * reorder buffer replays at their own positions.
 *
 * Whether a publication delivers a relation, and with which row filters
 * and column lists, is publication_rules.c's; this file keeps the answers
 * per relation for decoding.  A partition published via its root is
 * delivered as that root (partition_root.c).
 *
 * Dropped tables do not stay: an entry that keeps no state (a table not
 * published) goes once invalidated, at a later lookup; a published table's
 * entry and its saved shape when pruning.c finds the table gone, so that
 * memory does not grow with every table ever decoded and a new table that
 * gets a dropped one's OID is not held to the old one's shape.
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn).
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/syscache.h"

#include "publication.h"
#include "publication_rules.h"
#include "pubfilter.h"
#include "row_key.h"
#include "table_shape.h"
#include "waiver.h"

/* The pipeline's options for the commit being decoded (epoch.h). */
static const ReplicantEpoch *epoch = NULL;
static Oid pipeline_owner = InvalidOid;

static MemoryContext publication_context = NULL;
static MemoryContext relinfo_context = NULL;
static List *publications = NIL;      /* of Publication *, when valid */
static List *publications_from = NIL; /* of XLogRecPtr *, parallel to it */
static bool publications_valid = false;

/*
 * The epoch's publications the historic catalog does not have, each with
 * the position it counts from (0: always).  One that alter_pipeline added
 * is empty before that position (as PostgreSQL 16's pgoutput treats a
 * publication that does not exist yet); from there on it must exist, or it
 * was dropped, which halts the pipeline unless a resume accepted it: then
 * it is empty too, and only its own tables go without their changes.
 */
typedef struct MissingPublication
{
	const char *name;
	XLogRecPtr from;
} MissingPublication;

static List *publications_missing = NIL;
static Oid replicant_namespace = InvalidOid;
/* Whether a render target's format names its targets after the table alone. */
static bool names_without_schema = false;

static HTAB *relinfo_hash = NULL;
/* The entry returned last: runs of changes to one table are the rule. */
static ReplicantRelInfo *last_relinfo = NULL;
/* Relation invalidations since the last sweep of stateless entries. */
static int invalidations = 0;
/* Stateless invalid entries are swept after this many invalidations. */
#define SWEEP_AFTER 256

/*
 * Tables the owner may not read as the worker starts (no SELECT, or
 * row-level security it does not bypass).  Decoding checks privileges as of
 * each change; a halt on one of these tables is not resumed past, since
 * that would deliver rows the owner may still not read.
 */
static List *denied_now = NIL;

/*
 * Catalog changes seen (invalidation messages, decoded or received) that
 * can change what the publications publish: of publications and their
 * memberships, and of relations (a partition attached, a table moved to
 * another schema).  Flushes of every entry (hashvalue 0, relid invalid:
 * InvalidateSystemCaches, CatalogCacheFlushCatalog) are not counted, since
 * replicant itself flushes its caches before each normal catalog access; a
 * change lost in a flush of an overflowed invalidation queue is decoded
 * from WAL all the same.
 */
static uint64 publication_changes = 0;
static uint64 relation_changes = 0;

/* Whether a shape was seen that the next checkpoint must save. */
static bool shapes_unsaved = false;

/*
 * The commit being decoded, and the highest one a destination was
 * delivered: commits at or below it are decoded again only for a
 * destination behind another (fanout.c).
 */
static XLogRecPtr decoding_commit = InvalidXLogRecPtr;
static XLogRecPtr shapes_passed_upto = InvalidXLogRecPtr;

static void
invalidate_all_relinfo(void)
{
	HASH_SEQ_STATUS status;
	ReplicantRelInfo *entry;

	if (relinfo_hash == NULL)
		return;
	hash_seq_init(&status, relinfo_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
		entry->valid = false;
}

/* Partitions delivered as relid take its new name and columns too. */
static void
invalidate_delivered_as(Oid relid)
{
	HASH_SEQ_STATUS status;
	ReplicantRelInfo *entry;

	hash_seq_init(&status, relinfo_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (entry->root.relid == relid)
			entry->valid = false;
}

static void
relcache_callback(Datum arg, Oid relid)
{
	ReplicantRelInfo *entry;

	if (OidIsValid(relid))
		relation_changes++;
	if (relinfo_hash == NULL)
		return;
	invalidations++;
	if (!OidIsValid(relid))
	{
		invalidate_all_relinfo();
		return;
	}
	entry = hash_search(relinfo_hash, &relid, HASH_FIND, NULL);
	if (entry)
		entry->valid = false;
	invalidate_delivered_as(relid);
}

static void
publication_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	if (hashvalue != 0)
		publication_changes++;
	publications_valid = false;
	invalidate_all_relinfo();
}

static void
membership_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	if (hashvalue != 0)
		publication_changes++;
	invalidate_all_relinfo();
}

void
replicant_publication_init(Oid owner, bool schemaless_names, XLogRecPtr passed_upto)
{
	HASHCTL ctl;

	Assert(relinfo_hash == NULL);
	shapes_passed_upto = passed_upto;
	publication_context = AllocSetContextCreate(CacheMemoryContext,
												"replicant publications",
												ALLOCSET_SMALL_SIZES);
	/* The relation info cache lives in a context of its own. */
	relinfo_context = AllocSetContextCreate(CacheMemoryContext, "replicant relation info",
											ALLOCSET_DEFAULT_SIZES);
	pipeline_owner = owner;
	names_without_schema = schemaless_names;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(ReplicantRelInfo);
	ctl.hcxt = relinfo_context;
	relinfo_hash = hash_create("replicant relation info", 128, &ctl,
							   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(PUBLICATIONOID, publication_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(PUBLICATIONRELMAP, membership_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(PUBLICATIONNAMESPACEMAP, membership_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, membership_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, membership_callback, (Datum) 0);
	/* SELECT granted through a role goes away with the membership. */
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, membership_callback, (Datum) 0);
}

void
replicant_publication_load_denied(Oid owner)
{
	Oid argtypes[1] = {OIDOID};
	Datum args[1] = {ObjectIdGetDatum(owner)};
	MemoryContext old;
	uint64 i;

	if (SPI_execute_with_args("SELECT c.oid, pg_catalog.has_table_privilege($1, c.oid, 'SELECT')"
							  "  FROM pg_catalog.pg_class c"
							  " WHERE c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}')"
							  "   AND (c.relrowsecurity"
							  "        OR NOT pg_catalog.has_table_privilege($1, c.oid, 'SELECT'))",
							  1, argtypes, args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not check the pipeline owner's privileges");
	old = MemoryContextSwitchTo(TopMemoryContext);
	list_free(denied_now);
	denied_now = NIL;
	for (i = 0; i < SPI_processed; i++)
	{
		bool isnull;
		Oid relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
												   SPI_tuptable->tupdesc, 1, &isnull));
		bool may_select = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
													 SPI_tuptable->tupdesc, 2, &isnull));

		if (!may_select || check_enable_rls(relid, owner, true) == RLS_ENABLED)
			denied_now = lappend_oid(denied_now, relid);
	}
	MemoryContextSwitchTo(old);
}

void
replicant_publication_use_epoch(const ReplicantEpoch *options)
{
	if (options == epoch)
		return;
	epoch = options;
	publication_changes++;
	publications_valid = false;
	invalidate_all_relinfo();
}

void
replicant_publication_decoding(XLogRecPtr commit_lsn)
{
	decoding_commit = commit_lsn;
}

/* The epoch's publications as the historic catalog has them; the rest are missing. */
static void
load_publications(void)
{
	MemoryContext old;
	ListCell *lc;

	Assert(epoch != NULL);
	MemoryContextReset(publication_context);
	publications = NIL;
	publications_from = NIL;
	publications_missing = NIL;

	old = MemoryContextSwitchTo(publication_context);
	replicant_namespace = get_namespace_oid("replicant", true);
	foreach(lc, epoch->publications)
	{
		char *name = lfirst(lc);
		XLogRecPtr from = epoch->publication_lsns[foreach_current_index(lc)];
		Publication *pub = GetPublicationByName(name, true);
		XLogRecPtr *from_copy;

		if (pub == NULL)
		{
			MissingPublication *missing = palloc(sizeof(MissingPublication));

			missing->name = name;
			missing->from = from;
			publications_missing = lappend(publications_missing, missing);
			continue;
		}
		from_copy = palloc(sizeof(XLogRecPtr));
		*from_copy = from;
		publications = lappend(publications, pub);
		publications_from = lappend(publications_from, from_copy);
	}
	MemoryContextSwitchTo(old);
	publications_valid = true;
}

char *
replicant_publication_missing(XLogRecPtr commit_lsn, const List *waivers, char **cause)
{
	ListCell *lc;

	if (!publications_valid)
		load_publications();
	foreach(lc, publications_missing)
	{
		MissingPublication *missing = lfirst(lc);

		/* an added publication is empty before the call that added it */
		if (commit_lsn < missing->from)
			continue;
		*cause = replicant_waiver_cause(REPLICANT_WAIVER_PUBLICATION, missing->name);
		if (replicant_waiver_covers(waivers, *cause, commit_lsn))
			continue;
		return psprintf("publication \"%s\" does not exist", missing->name);
	}
	*cause = NULL;
	return NULL;
}

static Bitmapset *
bms_copy_in(MemoryContext mcxt, const Bitmapset *set)
{
	MemoryContext old = MemoryContextSwitchTo(mcxt);
	Bitmapset *copy = bms_copy(set);

	MemoryContextSwitchTo(old);
	return copy;
}

/* Adds pub's actions to entry if pub delivers rel; may set a halt reason. */
static void
apply_publication(ReplicantRelInfo *entry, Relation rel, Publication *pub,
				  XLogRecPtr from, List *rel_pubs, List *schema_pubs, List *ancestors)
{
	if (!replicant_partition_root_publishes_parent(pub, rel) ||
		!replicant_publication_publishes(pub, rel, rel_pubs, schema_pubs, ancestors))
		return;
	replicant_partition_root_consider(&entry->root, pub, rel, ancestors);
	entry->published_from = entry->published ? Min(entry->published_from, from) : from;
	entry->published = true;
	entry->pub_insert |= pub->pubactions.pubinsert;
	entry->pub_update |= pub->pubactions.pubupdate;
	entry->pub_delete |= pub->pubactions.pubdelete;
	entry->pub_truncate |= pub->pubactions.pubtruncate;
}

uint64
replicant_publication_changes(bool relations)
{
	return publication_changes + (relations ? relation_changes : 0);
}

/* Forgets entry's pending schema change, if any. */
static void
clear_schema_change(ReplicantRelInfo *entry)
{
	if (entry->schema_change)
		pfree(entry->schema_change);
	if (entry->schema_target)
		pfree(entry->schema_target);
	entry->schema_change = NULL;
	entry->schema_target = NULL;
}

/*
 * Compares the table with the version accepted last (by this process, else
 * as of the last checkpoint): a dropped or renamed column, or a replica
 * identity that changed other than by widening to FULL, is a destructive
 * change, pending until a resume accepts the shape it leads to.  A shape
 * that changes again while one is pending is compared with the same
 * baseline: the halt names what changed since, and a resume accepts the
 * newest shape only.
 */
static void
check_schema(ReplicantRelInfo *entry, Relation rel)
{
	char *now;
	const char *baseline;
	char *change = NULL;
	Bitmapset *own_key;
	bool whole_row;
	bool identity_full;

	if (!entry->published)
		return;
	/*
	 * The shape saved at create_pipeline is the relation's own identity (a
	 * partition's, not its root's), whatever the column lists deliver.
	 */
	replicant_row_key_identity(rel, &own_key, &whole_row, &identity_full);
	now = replicant_table_shape(rel, own_key);
	baseline = entry->fingerprint ? entry->fingerprint : replicant_table_shape_saved(entry->relid);
	/*
	 * A commit some destination was delivered already, decoded again for
	 * one behind it: it was checked when first decoded (a halt on it was
	 * resumed for the pipeline), and the shape saved since may be a later
	 * one.  Its shape is taken as it is.
	 */
	if (baseline != NULL && decoding_commit > shapes_passed_upto)
		change = replicant_table_shape_change(baseline, now, RelationGetRelationName(rel));
	clear_schema_change(entry);
	if (change)
	{
		entry->schema_change = MemoryContextStrdup(relinfo_context, change);
		entry->schema_target = MemoryContextStrdup(relinfo_context, now);
		return;
	}
	if (entry->fingerprint)
		pfree(entry->fingerprint);
	entry->fingerprint = MemoryContextStrdup(relinfo_context, now);
	shapes_unsaved = true;
}

void
replicant_publication_accept_shape(ReplicantRelInfo *entry)
{
	Assert(entry->schema_change != NULL);
	if (entry->fingerprint)
		pfree(entry->fingerprint);
	entry->fingerprint = entry->schema_target;
	entry->schema_target = NULL;
	pfree(entry->schema_change);
	entry->schema_change = NULL;
	shapes_unsaved = true;
}

void
replicant_publication_save_table_shape(int32 pipeline_id, Relation rel)
{
	Bitmapset *key_columns;
	bool whole_row;
	bool identity_full;

	replicant_row_key_identity(rel, &key_columns, &whole_row, &identity_full);
	replicant_table_shape_save(pipeline_id, RelationGetRelid(rel),
							   replicant_table_shape(rel, key_columns));
}

/* Whether a shape was seen that the next checkpoint must save. */
bool
replicant_publication_shapes_unsaved(void)
{
	return shapes_unsaved;
}

/*
 * Writes the shapes seen since the last call, in the caller's transaction:
 * the checkpoint's.  A shape the pipeline halts on is kept back until the
 * operator resumed past it.  Costs nothing unless a table's relcache entry
 * was rebuilt since.
 */
void
replicant_publication_save_shapes(int32 pipeline_id)
{
	HASH_SEQ_STATUS status;
	ReplicantRelInfo *entry;

	if (!shapes_unsaved || relinfo_hash == NULL)
		return;
	shapes_unsaved = false;

	hash_seq_init(&status, relinfo_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->fingerprint == NULL)
			continue;
		if (entry->schema_change != NULL)
		{
			shapes_unsaved = true;
			continue;
		}
		replicant_table_shape_save(pipeline_id, entry->relid, entry->fingerprint);
	}
}

/*
 * The names of the relation rel's changes are delivered as (an ancestor
 * when published via the partition root), and their key: rel's own
 * identity under those names, which is what rel logs and what PostgreSQL
 * checks against the column list.  "old" carries what rel logged
 * (identity_full is rel's own; else its identity's published columns).
 */
static void
describe_as_delivered(ReplicantRelInfo *entry, Relation rel, List *rel_pubs,
					  List *schema_pubs, List *ancestors)
{
	Relation target = replicant_partition_root_open(&entry->root, rel, relinfo_context);

	entry->relation.schema = MemoryContextStrdup(relinfo_context,
												 get_namespace_name(RelationGetNamespace(target)));
	entry->relation.table = MemoryContextStrdup(relinfo_context,
												RelationGetRelationName(target));
	replicant_publication_add_filters(entry->filter, rel, target, publications, rel_pubs,
									  schema_pubs, ancestors);
	/* A published table has a filter: a publication's at least. */
	Assert(entry->filter->have_columns);
	replicant_row_key_delivered(rel, target, entry->filter->columns, &entry->key_columns,
								&entry->key_whole_row);
	entry->key_columns = bms_copy_in(relinfo_context, entry->key_columns);
	entry->identity_full = (rel->rd_rel->relreplident == REPLICA_IDENTITY_FULL);
	entry->old_columns = bms_copy_in(relinfo_context,
									 replicant_row_key_logged(rel, target, entry->filter->columns));
	if (entry->filter->conflict && entry->halt_reason == NULL)
		entry->halt_reason = pstrdup(entry->filter->conflict);
	if (names_without_schema && entry->halt_reason == NULL)
		entry->name_shared_with = replicant_publication_target_taken(rel, target, publications,
																	 replicant_namespace,
																	 relinfo_context);
	replicant_partition_root_close(target, rel);
}

/* Frees what entry holds but its shape (fingerprint, schema_change, schema_target). */
static void
release_relinfo(ReplicantRelInfo *entry)
{
	bms_free(entry->key_columns);
	bms_free(entry->old_columns);
	replicant_pubfilter_free(entry->filter);
	replicant_partition_root_reset(&entry->root);
	if (entry->relation.schema)
		pfree(entry->relation.schema);
	if (entry->relation.table)
		pfree(entry->relation.table);
	if (entry->halt_reason)
		pfree(entry->halt_reason);
	if (entry->name_shared_with)
		pfree(entry->name_shared_with);
}

char *
replicant_publication_name_clash(const ReplicantRelInfo *info, const char *target_kind)
{
	return psprintf("tables \"%s.%s\" and \"%s.%s\" both go to %s `%s` (targets are named without the schema): publish only one of them",
					info->relation.schema, info->relation.table,
					info->name_shared_with, info->relation.table,
					target_kind, info->relation.table);
}

/* Removes relid's entry from the cache, shape and all. */
static void
remove_relinfo(Oid relid)
{
	ReplicantRelInfo *entry = hash_search(relinfo_hash, &relid, HASH_FIND, NULL);

	if (entry == NULL)
		return;
	release_relinfo(entry);
	if (entry->fingerprint)
		pfree(entry->fingerprint);
	clear_schema_change(entry);
	if (last_relinfo == entry)
		last_relinfo = NULL;
	(void) hash_search(relinfo_hash, &relid, HASH_REMOVE, NULL);
}

/*
 * Removes the invalidated entries that keep no state (no shape: the table
 * was not published when last seen), which a lookup would compute anew
 * anyway; those of dropped tables would otherwise stay for good.  Only
 * between changes, when no entry is in use.
 */
static void
sweep_stateless(void)
{
	HASH_SEQ_STATUS status;
	ReplicantRelInfo *entry;
	List *stale = NIL;
	ListCell *lc;

	invalidations = 0;
	hash_seq_init(&status, relinfo_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (!entry->valid && entry->fingerprint == NULL && entry->schema_change == NULL)
			stale = lappend_oid(stale, entry->relid);
	foreach(lc, stale)
		remove_relinfo(lfirst_oid(lc));
	list_free(stale);
}

/*
 * Fills entry for rel.  Works in the caller's (per-change) memory context and
 * copies only what the entry keeps into the cache's context.
 */
static void
compute_relinfo(ReplicantRelInfo *entry, Relation rel)
{
	Oid relid = RelationGetRelid(rel);
	List *rel_pubs;
	List *schema_pubs;
	List *ancestors = NIL;
	ListCell *lc;
	ListCell *lc2;
	char *old_fingerprint = entry->fingerprint;
	char *schema_change = entry->schema_change;
	char *schema_target = entry->schema_target;

	release_relinfo(entry);
	memset(entry, 0, sizeof(ReplicantRelInfo));
	entry->relid = relid;
	entry->valid = true;
	entry->fingerprint = old_fingerprint;
	entry->schema_change = schema_change;
	entry->schema_target = schema_target;

	/* The extension's own tables never loop back to the sink. */
	entry->own = (RelationGetNamespace(rel) == replicant_namespace);
	if (entry->own || !is_publishable_relation(rel))
		return;

	rel_pubs = GetRelationPublications(relid);
	schema_pubs = GetSchemaPublications(RelationGetNamespace(rel));
	if (rel->rd_rel->relispartition)
		ancestors = get_partition_ancestors(relid);
	entry->filter = replicant_pubfilter_create(relinfo_context);
	forboth(lc, publications, lc2, publications_from)
		apply_publication(entry, rel, lfirst(lc), *(XLogRecPtr *) lfirst(lc2),
						  rel_pubs, schema_pubs, ancestors);
	if (!entry->published)
		return;

	describe_as_delivered(entry, rel, rel_pubs, schema_pubs, ancestors);

	if (entry->halt_reason == NULL &&
		pg_class_aclcheck(relid, pipeline_owner, ACL_SELECT) != ACLCHECK_OK)
	{
		entry->halt_reason = psprintf("pipeline owner has no SELECT privilege on table \"%s\"",
									  RelationGetRelationName(rel));
		entry->halt_privilege = true;
		entry->halt_resumable = !list_member_oid(denied_now, relid);
	}
	if (entry->halt_reason == NULL &&
		check_enable_rls(relid, pipeline_owner, true) == RLS_ENABLED)
	{
		entry->halt_reason = psprintf("table \"%s\" has row-level security that the pipeline owner does not bypass",
									  RelationGetRelationName(rel));
		entry->halt_privilege = true;
		entry->halt_resumable = !list_member_oid(denied_now, relid);
	}
	if (entry->halt_reason)
		entry->halt_reason = MemoryContextStrdup(relinfo_context, entry->halt_reason);
	check_schema(entry, rel);
}

ReplicantRelInfo *
replicant_publication_relinfo(Relation rel)
{
	Oid relid = RelationGetRelid(rel);
	ReplicantRelInfo *entry;
	bool found;

	if (!publications_valid)
		load_publications();
	/* entries never move; one removed is no longer last_relinfo */
	if (last_relinfo != NULL && last_relinfo->relid == relid && last_relinfo->valid)
		return last_relinfo;
	if (invalidations >= SWEEP_AFTER)
		sweep_stateless();

	entry = hash_search(relinfo_hash, &relid, HASH_ENTER, &found);
	if (!found)
		memset(entry, 0, sizeof(ReplicantRelInfo));
	if (!entry->valid)
		compute_relinfo(entry, rel);
	last_relinfo = entry;
	return entry;
}

List *
replicant_publication_invalid_relids(void)
{
	HASH_SEQ_STATUS status;
	ReplicantRelInfo *entry;
	List *relids = NIL;

	if (relinfo_hash == NULL)
		return NIL;
	hash_seq_init(&status, relinfo_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (!entry->valid)
			relids = lappend_oid(relids, entry->relid);
	return relids;
}

bool
replicant_publication_forget(Oid relid)
{
	ReplicantRelInfo *entry;

	entry = relinfo_hash ? hash_search(relinfo_hash, &relid, HASH_FIND, NULL) : NULL;
	/* Valid again: a new table of that OID, decoded since; its shape is its own. */
	if (entry && entry->valid)
		return false;
	if (entry)
		remove_relinfo(relid);
	replicant_table_shape_forget(relid);
	return true;
}
