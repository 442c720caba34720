/*
 * key_order.h
 *		A backfill's key in its index's order: the columns, and the
 *		operators of the index's operator families, as SQL text that
 *		resolves nothing through search_path.
 */
#ifndef REPLICANT_KEY_ORDER_H
#define REPLICANT_KEY_ORDER_H

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

/*
 * The key's columns as its index orders them, with the operators of the
 * index's operator families as SQL text (OPERATOR(schema.name)): a type's
 * operators found through the search_path (pinned to pg_catalog in the
 * worker) can be another type's, citext's "<" resolving to text's.
 * Values are compared as the columns' base types: a value cast to a
 * domain would run the domain's CHECK, code of its owner's.
 */
typedef struct ReplicantKeyOrder
{
	List *names;     /* column names */
	List *types;     /* their base types, qualified */
	List *order_ops; /* ORDER BY ... USING, as the index orders */
	List *after_ops; /* "comes after" in that order */
	List *eq_ops;
	List *lt_ops; /* ascending, whatever the index */
	List *ge_ops;
} ReplicantKeyOrder;

/*
 * The key of rel: its replica identity's index, else its primary key;
 * an error if it has none or it is not a btree index on columns.
 */
extern ReplicantKeyOrder *replicant_key_order(Relation rel);

/* Appends " ORDER BY a USING op, b USING op", as the key's index orders. */
extern void replicant_key_order_by(StringInfo sql, ReplicantKeyOrder *order);

/*
 * Appends "the key comes after the cursor ($1, $2, ...)" in the index's
 * order, the parameters cast to the key columns' base types.
 */
extern void replicant_key_after_cursor(StringInfo sql, ReplicantKeyOrder *order);

#endif /* REPLICANT_KEY_ORDER_H */
