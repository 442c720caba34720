/*
 * dropdb.c
 *		DROP DATABASE takes the database's pipelines with it.
 *
 * PostgreSQL drops a database's replication slots with it, but refuses
 * while one is active, which a streaming pipeline's is.  So the pipelines'
 * workers are stopped in the drop's object access hook, which runs once
 * the drop has passed its ownership check and holds the database's lock
 * (no session can connect, no slot become active), and the launcher does
 * not start them again: at commit it frees their places in shared memory,
 * while an abort has the database read again, which starts them anew.
 *
 * The hook runs before the drop's other checks, and stopping another
 * role's processes is a right of its own.  So the workers are stopped only
 * when the drop will not be refused for a reason known here (the caller's
 * own database, a template, a subscription, an active slot of another
 * plugin, a session connected to it without FORCE), and when the caller
 * could terminate every one of them itself, as DROP DATABASE ... WITH
 * (FORCE) terminates sessions: a superuser; else, for a worker whose owner
 * is not a superuser, a role with the owner's privileges or a member of
 * pg_signal_backend.  Otherwise nothing is stopped, and PostgreSQL refuses
 * the drop for the active slot.  A drop that fails after the stop (a
 * prepared transaction in the database, a background worker that does not
 * leave) starts the workers again; they committed what the sink had
 * acknowledged before they stopped.
 */
#include "postgres.h"

#include <signal.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_authid_d.h"
#include "catalog/pg_database.h"
#include "catalog/pg_subscription.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/latch.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "dropdb.h"
#include "shmem.h"
#include "slot.h"

/* How long DROP DATABASE waits for the database's workers to let go. */
#define DROP_DATABASE_WAIT_MS 30000

static object_access_hook_type prev_object_access_hook = NULL;
static ProcessUtility_hook_type prev_utility_hook = NULL;

/* The DROP DATABASE being run says WITH (FORCE). */
static bool drop_force = false;
/* The database this transaction drops, whose pipelines it stopped. */
static Oid dropping_database = InvalidOid;

/* Has the launcher free the places of the pipelines of a dropped database. */
static void
database_dropped(void)
{
	Latch *latch;

	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	replicant_shmem->databases_dropped = true;
	latch = replicant_shmem->launcher_latch;
	LWLockRelease(replicant_shmem->lock);
	if (latch)
		SetLatch(latch);
}

/* Whether a worker of the database's pipelines runs, or holds its slot still. */
static bool
database_busy(Oid dboid)
{
	bool busy = false;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
		busy |= (replicant_shmem->slots[i].in_use &&
				 replicant_shmem->slots[i].dboid == dboid &&
				 replicant_shmem->slots[i].pid != 0);
	LWLockRelease(replicant_shmem->lock);
	return busy || replicant_slot_any_active(dboid, true);
}

/*
 * Whether the drop will be refused for a reason PostgreSQL checks after
 * this hook (dropdb()): then nothing is stopped.
 */
static bool
drop_will_fail(Oid dboid)
{
	HeapTuple tuple;
	bool template;

	if (dboid == MyDatabaseId)
		return true;
	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(dboid));
	if (!HeapTupleIsValid(tuple))
		return true;
	template = ((Form_pg_database) GETSTRUCT(tuple))->datistemplate;
	ReleaseSysCache(tuple);
	return template || CountDBSubscriptions(dboid) > 0 ||
		   replicant_slot_any_active(dboid, false) ||
		   (!drop_force && CountDBConnections(dboid) > 0);
}

/*
 * Whether the caller may terminate a process of role, as DROP DATABASE
 * ... WITH (FORCE) and pg_terminate_backend() allow.
 */
static bool
may_terminate(Oid role)
{
	if (superuser_arg(role) && !superuser())
		return false;
	return has_privs_of_role(GetUserId(), role) ||
		   has_privs_of_role(GetUserId(), ROLE_PG_SIGNAL_BACKEND);
}

/*
 * Whether the caller may stop the workers of the database's pipelines:
 * every owner's process is one it could terminate.  The owners are read
 * first, the roles looked up without the lock.
 */
static bool
may_stop_workers(Oid dboid)
{
	Oid *owners = palloc(sizeof(Oid) * replicant_max_pipelines);
	bool may = true;
	int n = 0;
	int i;

	LWLockAcquire(replicant_shmem->lock, LW_SHARED);
	for (i = 0; i < replicant_max_pipelines; i++)
		if (replicant_shmem->slots[i].in_use && replicant_shmem->slots[i].dboid == dboid)
			owners[n++] = replicant_shmem->slots[i].owner;
	LWLockRelease(replicant_shmem->lock);
	for (i = 0; i < n && may; i++)
		may = may_terminate(owners[i]);
	pfree(owners);
	return may;
}

/*
 * Stops the workers of the database's pipelines, where the drop will go on
 * and the caller may terminate them all, and waits, for a while, until they
 * let go of their slots.
 */
static void
stop_database_pipelines(Oid dboid)
{
	TimestampTz deadline;
	int i;

	dropping_database = dboid;
	if (drop_will_fail(dboid) || !may_stop_workers(dboid))
		return;
	LWLockAcquire(replicant_shmem->lock, LW_EXCLUSIVE);
	for (i = 0; i < replicant_max_pipelines; i++)
	{
		ReplicantPipelineSlot *slot = &replicant_shmem->slots[i];

		if (!slot->in_use || slot->dboid != dboid)
			continue;
		slot->runnable = false;
		if (slot->pid != 0)
			(void) kill(slot->pid, SIGTERM);
	}
	LWLockRelease(replicant_shmem->lock);

	/* A worker may be in a request: give it the time a request may take. */
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), DROP_DATABASE_WAIT_MS);
	while (database_busy(dboid) && GetCurrentTimestamp() < deadline)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* At commit the dropped database's pipelines are forgotten; at abort, read again. */
static void
dropdb_xact_callback(XactEvent event, void *arg)
{
	if (!OidIsValid(dropping_database))
		return;
	if (event == XACT_EVENT_COMMIT)
		database_dropped();
	else if (event == XACT_EVENT_ABORT)
		replicant_shmem_request_sync(dropping_database);
	else
		return;
	dropping_database = InvalidOid;
}

static void
dropdb_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					 int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == DatabaseRelationId && replicant_shmem_ready())
		stop_database_pipelines(objectId);
}

/* Notes whether a DROP DATABASE says WITH (FORCE), which its hook cannot see. */
static void
dropdb_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			   ProcessUtilityContext context, ParamListInfo params,
			   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	/* volatile: gcc 14 takes it for clobbered by PG_TRY's longjmp */
	volatile ProcessUtility_hook_type next = prev_utility_hook ? prev_utility_hook : standard_ProcessUtility;
	ListCell *lc;

	if (!IsA(pstmt->utilityStmt, DropdbStmt))
	{
		next(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		return;
	}
	foreach(lc, ((DropdbStmt *) pstmt->utilityStmt)->options)
		drop_force |= (strcmp(((DefElem *) lfirst(lc))->defname, "force") == 0);
	PG_TRY();
	{
		next(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		drop_force = false;
	}
	PG_END_TRY();
}

void
replicant_dropdb_init(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = dropdb_object_access;
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = dropdb_utility;
	RegisterXactCallback(dropdb_xact_callback, NULL);
}
