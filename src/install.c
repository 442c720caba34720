/*
 * install.c
 *		What the installation and update scripts ask of the library.
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"

PG_FUNCTION_INFO_V1(replicant_xid_is_current);

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
