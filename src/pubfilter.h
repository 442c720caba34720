/*
 * pubfilter.h
 *		What of a published relation's rows its publications deliver: the row
 *		filters (pg_publication_rel.prqual) per action, the columns (column
 *		lists, generated columns), as PostgreSQL's pgoutput and table
 *		synchronization decide them on the server version built against.
 */
#ifndef REPLICANT_PUBFILTER_H
#define REPLICANT_PUBFILTER_H

#include "catalog/pg_publication.h"
#include "nodes/bitmapset.h"
#include "nodes/execnodes.h"
#include "replication/reorderbuffer.h"
#include "utils/relcache.h"

#define REPLICANT_PUBFILTER_ACTIONS 3 /* insert, update, delete */

typedef struct ReplicantPubFilter
{
	MemoryContext context; /* everything below lives here */

	/* Per action: the filters ORed, unless a publication has none for it. */
	List *quals[REPLICANT_PUBFILTER_ACTIONS];
	bool unfiltered[REPLICANT_PUBFILTER_ACTIONS];
	/* What table synchronization reads: every publication's filter, ORed. */
	List *read_quals;
	bool read_unfiltered;

	/*
	 * The columns delivered (attribute numbers); NULL means every live
	 * column.  Every publication must deliver the same ones.
	 */
	Bitmapset *columns;
	bool have_columns; /* a publication was added (else: publishes nothing) */
	char *conflict;    /* value-free reason the server refuses them */

	/* Built on first use: the stream side's per action, the read side's. */
	EState *estate;
	ExprState *exprstate[REPLICANT_PUBFILTER_ACTIONS];
	bool prepared;
	TupleTableSlot *slot; /* the stream side's rows, to evaluate them in */
	ExprState *read_exprstate;
} ReplicantPubFilter;

/*
 * An empty filter in a child context of parent.  Until a publication is
 * added it publishes nothing: no row passes it (an empty filter never means
 * "every row and every column").
 */
extern ReplicantPubFilter *replicant_pubfilter_create(MemoryContext parent);

/*
 * The filter as a string, equal for two filters only when they publish the
 * same rows, columns and actions (palloc'd).
 */
extern char *replicant_pubfilter_fingerprint(const ReplicantPubFilter *filter);

/* Whether a publication was added: the relation is published at all. */
extern bool replicant_pubfilter_publishes(const ReplicantPubFilter *filter);

/*
 * Adds a publication that publishes rel as published_relid (rel itself, or
 * the ancestor it is published as, whose descriptor rel then is): its
 * filter and column list are those of published_relid's FOR TABLE entry.
 * InvalidOid: the publication has the whole table (FOR ALL TABLES, or
 * TABLES IN SCHEMA of its schema, which outranks a FOR TABLE entry in the
 * same publication, as in pgoutput).
 */
extern void replicant_pubfilter_add(ReplicantPubFilter *filter, Relation rel,
									Oid published_relid, Publication *pub);

extern void replicant_pubfilter_free(ReplicantPubFilter *filter);

/*
 * Applies the row filter to a change of relation relname, its rows deformed
 * in desc (the descriptor of what it is delivered as), as pgoutput does.
 * Returns false when nothing is delivered; else *action is what to deliver
 * (an update may become an insert or a delete), and for an insert made from
 * an update the new row arrays may point to the new row completed with the
 * old row's values.  *reason is set (and false returned) when the change
 * cannot be delivered whole.
 */
extern bool replicant_pubfilter_change(ReplicantPubFilter *filter, TupleDesc desc,
									   const char *relname,
									   ReorderBufferChangeType *action,
									   Datum *old_values, bool *old_nulls,
									   Datum **new_values, bool **new_nulls,
									   char **reason);

/*
 * The read side's filter as SQL over rel's columns, for a backfill query's
 * WHERE, or NULL when every row is read ("false" when nothing publishes it).
 */
extern char *replicant_pubfilter_read_sql(ReplicantPubFilter *filter, Relation rel);

/*
 * Whether the read side reads the row in slot (in the descriptor of the
 * relation the filter was built for), as table synchronization would: the
 * snapshot's heap reads evaluate the filter as the stream does, in C.
 */
extern bool replicant_pubfilter_read_row(ReplicantPubFilter *filter, TupleTableSlot *slot);

#endif /* REPLICANT_PUBFILTER_H */
