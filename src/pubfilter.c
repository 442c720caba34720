/*
 * pubfilter.c
 *		Row filters and published columns of one relation, decided as the
 *		server's own pgoutput (stream) and table synchronization (snapshot)
 *		decide them.
 *
 * Row filters: per action (insert, update, delete) the filters of the
 * publications that publish it are ORed; one such publication without a
 * filter (FOR ALL TABLES, a schema, or a FOR TABLE entry without WHERE)
 * means no filter for that action.  The expression is the catalog's
 * (pg_publication_rel.prqual), prepared with ExecPrepareExpr and evaluated
 * under whatever snapshot the caller decodes with: the historic one on the
 * stream path.  Table synchronization ORs every publication's filter,
 * whatever its actions, and so does the read side here: the snapshot
 * evaluates it on the rows it reads from the heap with the same evaluator
 * as the stream, and backfills, which read through SQL, get it deparsed.
 *
 * A filter no publication was added to publishes nothing: no row passes it
 * on either side (the stream halts), and a snapshot or backfill of a table
 * that stopped being published skips it (replicant_pubfilter_publishes).
 *
 * Columns: a column list publishes its columns, anything else every live
 * column except generated ones, which only PostgreSQL 18 publishes (stored
 * ones, with publish_generated_columns = stored, or when listed).  Every
 * publication of the table must publish the same columns: the server
 * refuses anything else (15 when the subscription syncs the table, 16 to 18
 * in pgoutput and at CREATE SUBSCRIPTION), so the pipeline halts.
 *
 * Rules kept with other files: docs/internals.md §4 (one content per
 * commit_lsn).
 */
#include "postgres.h"

#include "catalog/pg_publication_rel.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"

#include "compat.h"
#include "fault.h"
#include "pubfilter.h"

ReplicantPubFilter *
replicant_pubfilter_create(MemoryContext parent)
{
	MemoryContext context = AllocSetContextCreate(parent, "replicant row filter",
												  ALLOCSET_SMALL_SIZES);
	ReplicantPubFilter *filter = MemoryContextAllocZero(context, sizeof(ReplicantPubFilter));

	filter->context = context;
	return filter;
}

bool
replicant_pubfilter_publishes(const ReplicantPubFilter *filter)
{
	return filter->have_columns;
}

void
replicant_pubfilter_free(ReplicantPubFilter *filter)
{
	if (filter == NULL)
		return;
	if (filter->slot)
		ExecDropSingleTupleTableSlot(filter->slot);
	if (filter->estate)
		FreeExecutorState(filter->estate);
	MemoryContextDelete(filter->context);
}

/* Whether the publication publishes this column when it lists none. */
static bool
published_by_default(Form_pg_attribute att, Publication *pub)
{
	if (att->attisdropped || REPLICANT_ATT_IS_VIRTUAL(att))
		return false;
	if (att->attgenerated)
		return REPLICANT_PUB_PUBLISHES_STORED_GENERATED(pub);
	return true;
}

/*
 * The columns pub publishes (NULL: every live column, as the encoder reads
 * NULL), from its column list when list is not NULL.
 */
static Bitmapset *
publication_columns(TupleDesc desc, Publication *pub, Datum list, bool has_list)
{
	Bitmapset *columns = NULL;
	bool all = true;
	int i;

	if (replicant_mutant("ignore_column_list"))
		has_list = false;
	if (has_list)
	{
		ArrayType *arr = DatumGetArrayTypeP(list);
		int16 *attnums = (int16 *) ARR_DATA_PTR(arr);

		for (i = 0; i < ARR_DIMS(arr)[0]; i++)
			columns = bms_add_member(columns, attnums[i]);
	}
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		bool published;

		if (att->attisdropped || REPLICANT_ATT_IS_VIRTUAL(att))
			continue;
		published = has_list ? bms_is_member(att->attnum, columns) : published_by_default(att, pub);
		if (published && !has_list)
			columns = bms_add_member(columns, att->attnum);
		all &= published;
	}
	if (all)
	{
		bms_free(columns);
		return NULL;
	}
	return columns;
}

void
replicant_pubfilter_add(ReplicantPubFilter *filter, Relation rel,
						Oid published_relid, Publication *pub)
{
	MemoryContext old = MemoryContextSwitchTo(filter->context);
	HeapTuple tuple = NULL;
	Node *qual = NULL;
	Datum list = (Datum) 0;
	bool has_list = false;
	Bitmapset *columns;
	bool actions[REPLICANT_PUBFILTER_ACTIONS];
	int a;

	if (OidIsValid(published_relid))
		tuple = SearchSysCache2(PUBLICATIONRELMAP, ObjectIdGetDatum(published_relid),
								ObjectIdGetDatum(pub->oid));
	if (HeapTupleIsValid(tuple))
	{
		bool isnull;
		Datum d = SysCacheGetAttr(PUBLICATIONRELMAP, tuple,
								  Anum_pg_publication_rel_prqual, &isnull);

		if (!isnull)
			qual = stringToNode(TextDatumGetCString(d));
		list = SysCacheGetAttr(PUBLICATIONRELMAP, tuple,
							   Anum_pg_publication_rel_prattrs, &isnull);
		has_list = !isnull;
	}

	actions[0] = pub->pubactions.pubinsert;
	actions[1] = pub->pubactions.pubupdate;
	actions[2] = pub->pubactions.pubdelete;
	for (a = 0; a < REPLICANT_PUBFILTER_ACTIONS; a++)
	{
		if (!actions[a])
			continue;
		if (qual == NULL)
			filter->unfiltered[a] = true;
		else
			filter->quals[a] = lappend(filter->quals[a], copyObject(qual));
	}
	if (qual == NULL)
		filter->read_unfiltered = true;
	else
		filter->read_quals = lappend(filter->read_quals, qual);

	columns = publication_columns(RelationGetDescr(rel), pub, list, has_list);
	if (HeapTupleIsValid(tuple))
		ReleaseSysCache(tuple);
	if (!filter->have_columns)
		filter->columns = columns;
	else if (!bms_equal(filter->columns, columns) && filter->conflict == NULL)
		filter->conflict = psprintf("publications publish different columns of table \"%s.%s\" (column lists or publish_generated_columns differ), which PostgreSQL refuses too",
									get_namespace_name(RelationGetNamespace(rel)),
									RelationGetRelationName(rel));
	filter->have_columns = true;
	MemoryContextSwitchTo(old);
}

char *
replicant_pubfilter_fingerprint(const ReplicantPubFilter *filter)
{
	StringInfoData out;
	int attnum = -1;
	int a;

	initStringInfo(&out);
	appendStringInfo(&out, "%d %d %d|", filter->have_columns, filter->conflict != NULL,
					 filter->read_unfiltered);
	for (a = 0; a < REPLICANT_PUBFILTER_ACTIONS; a++)
		appendStringInfo(&out, "%d %s|", filter->unfiltered[a], nodeToString(filter->quals[a]));
	appendStringInfo(&out, "%s|", nodeToString(filter->read_quals));
	while ((attnum = bms_next_member(filter->columns, attnum)) >= 0)
		appendStringInfo(&out, "%d ", attnum);
	return out.data;
}

/* One expression for a list of ORed filters. */
static Expr *
ored(List *quals)
{
	return list_length(quals) == 1 ? linitial(quals) : make_orclause(quals);
}

/* The executor state the expressions run in, made on first use. */
static EState *
filter_estate(ReplicantPubFilter *filter)
{
	if (filter->estate == NULL)
		filter->estate = CreateExecutorState();
	return filter->estate;
}

/* Prepares the stream side's expressions on first use. */
static void
prepare(ReplicantPubFilter *filter, TupleDesc desc)
{
	MemoryContext old;
	int a;

	if (filter->prepared)
		return;
	old = MemoryContextSwitchTo(filter->context);
	for (a = 0; a < REPLICANT_PUBFILTER_ACTIONS; a++)
	{
		if (filter->unfiltered[a] || filter->quals[a] == NIL)
			continue;
		if (filter->slot == NULL)
			filter->slot = MakeSingleTupleTableSlot(CreateTupleDescCopy(desc),
													&TTSOpsVirtual);
		filter->exprstate[a] = ExecPrepareExpr(ored(filter->quals[a]),
											   filter_estate(filter));
	}
	filter->prepared = true;
	MemoryContextSwitchTo(old);
}

/* Whether the row in slot matches; a NULL result does not. */
static bool
slot_matches(ReplicantPubFilter *filter, ExprState *state, TupleTableSlot *slot)
{
	ExprContext *econtext;
	Datum result;
	bool isnull;

	ResetPerTupleExprContext(filter->estate);
	econtext = GetPerTupleExprContext(filter->estate);
	econtext->ecxt_scantuple = slot;
	result = ExecEvalExprSwitchContext(state, econtext, &isnull);
	return !isnull && DatumGetBool(result);
}

/* Same for a deformed row. */
static bool
matches(ReplicantPubFilter *filter, ExprState *state, Datum *values, bool *nulls)
{
	TupleTableSlot *slot = filter->slot;

	ExecClearTuple(slot);
	memcpy(slot->tts_values, values, sizeof(Datum) * slot->tts_tupleDescriptor->natts);
	memcpy(slot->tts_isnull, nulls, sizeof(bool) * slot->tts_tupleDescriptor->natts);
	ExecStoreVirtualTuple(slot);
	return slot_matches(filter, state, slot);
}

static bool
is_unchanged_toast(Form_pg_attribute att, Datum value, bool isnull)
{
	return !isnull && att->attlen == -1 &&
		   VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(value));
}

/*
 * The new row of an update, with the columns the WAL left out (unchanged
 * TOAST) taken from the old row where it has them, as pgoutput does.  The
 * arrays are replaced only when something was taken.
 */
static void
complete_new_row(TupleDesc desc, Datum *old_values, const bool *old_nulls,
				 Datum **new_values, bool **new_nulls)
{
	Datum *values = NULL;
	bool *nulls = NULL;
	int i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if ((*new_nulls)[i] || old_nulls[i] ||
			!is_unchanged_toast(att, (*new_values)[i], false) ||
			is_unchanged_toast(att, old_values[i], false))
			continue;
		if (values == NULL)
		{
			values = palloc(sizeof(Datum) * desc->natts);
			nulls = palloc(sizeof(bool) * desc->natts);
			memcpy(values, *new_values, sizeof(Datum) * desc->natts);
			memcpy(nulls, *new_nulls, sizeof(bool) * desc->natts);
		}
		values[i] = old_values[i];
	}
	if (values)
	{
		*new_values = values;
		*new_nulls = nulls;
	}
}

/* A value-free reason if an insert of this row would lack a column. */
static char *
missing_column(ReplicantPubFilter *filter, TupleDesc desc, const char *relname,
			   Datum *values, bool *nulls)
{
	int i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped ||
			(filter->columns && !bms_is_member(att->attnum, filter->columns)))
			continue;
		if (is_unchanged_toast(att, values[i], nulls[i]))
			return psprintf("an update moved a row of table \"%s\" into a row filter, and the WAL lacks the value of its unchanged TOAST column \"%s\"",
							relname, NameStr(att->attname));
	}
	return NULL;
}

bool
replicant_pubfilter_change(ReplicantPubFilter *filter, TupleDesc desc,
						   const char *relname, ReorderBufferChangeType *action,
						   Datum *old_values, bool *old_nulls,
						   Datum **new_values, bool **new_nulls,
						   char **reason)
{
	ExprState *state;
	Datum *values = *new_values;
	bool *nulls = *new_nulls;
	bool old_match;
	bool new_match;

	*reason = NULL;
	if (!replicant_pubfilter_publishes(filter))
	{
		/* Never "every row": halt rather than guess. */
		*reason = psprintf("no publication of table \"%s\" gives its row filter and columns",
						   relname);
		return false;
	}
	prepare(filter, desc);
	switch (*action)
	{
		case REORDER_BUFFER_CHANGE_INSERT:
			state = filter->exprstate[0];
			break;
		case REORDER_BUFFER_CHANGE_UPDATE:
			state = filter->exprstate[1];
			break;
		default:
			state = filter->exprstate[2];
			break;
	}
	if (state == NULL)
		return true;

	/* An insert, a delete, or an update that did not log the old row. */
	if (values == NULL || old_values == NULL)
		return values ? matches(filter, state, values, nulls) : matches(filter, state, old_values, old_nulls);

	complete_new_row(desc, old_values, old_nulls, &values, &nulls);
	old_match = matches(filter, state, old_values, old_nulls);
	new_match = matches(filter, state, values, nulls);
	if (!old_match && !new_match)
		return false;
	if (old_match && !new_match)
		*action = REORDER_BUFFER_CHANGE_DELETE;
	else if (!old_match)
	{
		*action = REORDER_BUFFER_CHANGE_INSERT;
		*new_values = values;
		*new_nulls = nulls;
		*reason = missing_column(filter, desc, relname, values, nulls);
		return *reason == NULL;
	}
	return true;
}

char *
replicant_pubfilter_read_sql(ReplicantPubFilter *filter, Relation rel)
{
	if (!replicant_pubfilter_publishes(filter))
		return "false";
	if (filter->read_unfiltered || filter->read_quals == NIL)
		return NULL;
	return deparse_expression((Node *) ored(filter->read_quals),
							  deparse_context_for(RelationGetRelationName(rel),
												  RelationGetRelid(rel)),
							  false, false);
}

bool
replicant_pubfilter_read_row(ReplicantPubFilter *filter, TupleTableSlot *slot)
{
	if (!replicant_pubfilter_publishes(filter))
		return false;
	if (filter->read_unfiltered || filter->read_quals == NIL)
		return true;
	if (filter->read_exprstate == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(filter->context);

		filter->read_exprstate = ExecPrepareExpr(ored(filter->read_quals),
												 filter_estate(filter));
		MemoryContextSwitchTo(old);
	}
	return slot_matches(filter, filter->read_exprstate, slot);
}
