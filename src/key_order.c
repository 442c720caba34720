/*
 * key_order.c
 *		A backfill's key in its index's order, as SQL text.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "catalog/pg_operator.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "compat.h"
#include "key_order.h"

static char *
qualified_operator(Oid opno)
{
	HeapTuple tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(opno));
	Form_pg_operator op;
	char *sql;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", opno);
	op = (Form_pg_operator) GETSTRUCT(tuple);
	sql = psprintf("OPERATOR(%s.%s)", quote_identifier(get_namespace_name(op->oprnamespace)),
				   NameStr(op->oprname));
	ReleaseSysCache(tuple);
	return sql;
}

/* The index the key comes from: the replica identity's, else the primary key. */
static Oid
key_index(Relation rel)
{
	Oid index = RelationGetReplicaIndex(rel);

	return OidIsValid(index) ? index : REPLICANT_PRIMARY_KEY_INDEX(rel);
}

ReplicantKeyOrder *
replicant_key_order(Relation rel)
{
	ReplicantKeyOrder *order = palloc0(sizeof(ReplicantKeyOrder));
	Oid indexoid = key_index(rel);
	Relation index;
	int i;

	if (!OidIsValid(indexoid))
		elog(ERROR, "table \"%s\" has no key index", RelationGetRelationName(rel));
	index = index_open(indexoid, AccessShareLock);
	for (i = 0; i < IndexRelationGetNumberOfKeyAttributes(index); i++)
	{
		AttrNumber attnum = index->rd_index->indkey.values[i];
		Oid family = index->rd_opfamily[i];
		Oid type = index->rd_opcintype[i];
		bool desc = (index->rd_indoption[i] & INDOPTION_DESC) != 0;
		Oid lt = get_opfamily_member(family, type, type, BTLessStrategyNumber);
		Oid gt = get_opfamily_member(family, type, type, BTGreaterStrategyNumber);
		Oid eq = get_opfamily_member(family, type, type, BTEqualStrategyNumber);
		Oid ge = get_opfamily_member(family, type, type, BTGreaterEqualStrategyNumber);

		if (attnum <= 0 || !OidIsValid(lt) || !OidIsValid(gt) || !OidIsValid(eq) || !OidIsValid(ge))
			elog(ERROR, "key index of table \"%s\" is not a btree index on columns",
				 RelationGetRelationName(rel));
		order->names = lappend(order->names,
							   pstrdup(NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname)));
		order->types = lappend(order->types,
							   format_type_be_qualified(getBaseType(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid)));
		order->order_ops = lappend(order->order_ops, qualified_operator(desc ? gt : lt));
		order->after_ops = lappend(order->after_ops, qualified_operator(desc ? lt : gt));
		order->eq_ops = lappend(order->eq_ops, qualified_operator(eq));
		order->lt_ops = lappend(order->lt_ops, qualified_operator(lt));
		order->ge_ops = lappend(order->ge_ops, qualified_operator(ge));
	}
	index_close(index, AccessShareLock);
	return order;
}

void
replicant_key_order_by(StringInfo sql, ReplicantKeyOrder *order)
{
	ListCell *lc;
	ListCell *lo;

	appendStringInfoString(sql, " ORDER BY ");
	forboth(lc, order->names, lo, order->order_ops)
		appendStringInfo(sql, "%s%s USING %s", foreach_current_index(lc) ? ", " : "",
						 quote_identifier(lfirst(lc)), (char *) lfirst(lo));
}

/*
 * One row comparison when every column compares with the same operator,
 * else spelled out column by column.
 */
void
replicant_key_after_cursor(StringInfo sql, ReplicantKeyOrder *order)
{
	int n = list_length(order->names);
	bool same = true;
	int i;
	int j;

	for (i = 1; i < n; i++)
		same &= strcmp(list_nth(order->after_ops, i), linitial(order->after_ops)) == 0;
	if (same)
	{
		appendStringInfoString(sql, "ROW(");
		for (i = 0; i < n; i++)
			appendStringInfo(sql, "%s%s", i ? ", " : "",
							 quote_identifier(list_nth(order->names, i)));
		appendStringInfo(sql, ") %s ROW(", (char *) linitial(order->after_ops));
		for (i = 0; i < n; i++)
			appendStringInfo(sql, "%s$%d::%s", i ? ", " : "", i + 1,
							 (char *) list_nth(order->types, i));
		appendStringInfoChar(sql, ')');
		return;
	}
	appendStringInfoChar(sql, '(');
	for (i = 0; i < n; i++)
	{
		appendStringInfo(sql, "%s(", i ? " OR " : "");
		for (j = 0; j < i; j++)
			appendStringInfo(sql, "%s %s $%d::%s AND ",
							 quote_identifier(list_nth(order->names, j)),
							 (char *) list_nth(order->eq_ops, j), j + 1,
							 (char *) list_nth(order->types, j));
		appendStringInfo(sql, "%s %s $%d::%s)",
						 quote_identifier(list_nth(order->names, i)),
						 (char *) list_nth(order->after_ops, i), i + 1,
						 (char *) list_nth(order->types, i));
	}
	appendStringInfoChar(sql, ')');
}
