/*
 * install.c
 *		What the installation and update scripts ask of the library.
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"

#include "shmem.h"

PG_FUNCTION_INFO_V1(replicant_xid_is_current);
PG_FUNCTION_INFO_V1(replicant_request_sync);

/*
 * _xid_is_current(xid): whether the running transaction (or one of its
 * subtransactions) is xid, so a row's xmin tells whether this transaction
 * wrote it, whatever the distance to older transactions.
 */
Datum
replicant_xid_is_current(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(TransactionIdIsCurrentTransactionId(PG_GETARG_TRANSACTIONID(0)));
}

/*
 * _request_sync(): the database's sync worker mirrors its pipelines again
 * once this transaction commits (the update: their destinations' names,
 * which replicant.metrics and destination_status show, from the table it
 * made).
 */
Datum
replicant_request_sync(PG_FUNCTION_ARGS)
{
	replicant_shmem_request_sync_at_commit();
	PG_RETURN_VOID();
}
