/*
 * format_clickhouse.h
 *		What of format 'clickhouse' other modules share: how a target or a
 *		column is named in what ClickHouse parses (sink_ddl.c prints its
 *		CREATE TABLE statements with it).
 */
#ifndef REPLICANT_FORMAT_CLICKHOUSE_H
#define REPLICANT_FORMAT_CLICKHOUSE_H

#include "lib/stringinfo.h"

#include "change.h"

/*
 * Appends name as a back-quoted ClickHouse identifier: ` and \ escaped by a
 * backslash, control characters as \t, \n, \r or \xHH, so that no name
 * ends the identifier, and none holds a raw tab or newline (which separate
 * the format's stored records).
 */
extern void replicant_clickhouse_append_identifier(StringInfo out, const char *name);

/*
 * Whether a ClickHouse error code answering a CREATE TABLE is final: all
 * but a short list of codes that pass by themselves (timeouts, network,
 * memory, too many queries, a lock or coordination service to wait for).
 * The rows' list (the format's code_is_final) would retry a refused query
 * (QUERY_IS_PROHIBITED, READONLY) or a bad definition forever.
 * TABLE_ALREADY_EXISTS (57) is final too: newer versions answer it to IF
 * NOT EXISTS for as long as a detached table of the name stays detached.
 */
extern bool replicant_clickhouse_ddl_code_is_final(int code);

/*
 * Whether an update carries every column the format writes: those it left
 * unchanged (TOASTed) are in its old row, which has them under REPLICA
 * IDENTITY FULL, or when they are part of a logged old key.
 */
extern bool replicant_clickhouse_update_complete(const ReplicantChange *change);

/* The columns format 'clickhouse' adds to every target; a table's may not be named so. */
#define REPLICANT_CLICKHOUSE_VERSION_COLUMN "_version"
#define REPLICANT_CLICKHOUSE_DELETED_COLUMN "_deleted"

#endif /* REPLICANT_FORMAT_CLICKHOUSE_H */
