/*
 * format_clickhouse.h
 *		What of format 'clickhouse' other modules share: how a target or a
 *		column is named in what ClickHouse parses (sink_ddl.c prints its
 *		CREATE TABLE statements with it).
 */
#ifndef REPLICANT_FORMAT_CLICKHOUSE_H
#define REPLICANT_FORMAT_CLICKHOUSE_H

#include "lib/stringinfo.h"

/*
 * Appends name as a back-quoted ClickHouse identifier: ` and \ escaped by a
 * backslash, control characters as \t, \n, \r or \xHH, so that no name
 * ends the identifier, and none holds a raw tab or newline (which separate
 * the format's stored records).
 */
extern void replicant_clickhouse_append_identifier(StringInfo out, const char *name);

#endif /* REPLICANT_FORMAT_CLICKHOUSE_H */
