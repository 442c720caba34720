/*
 * sink_nats_acks.c
 *		The NATS transport's acknowledgements: counted by the library's
 *		thread (nats_ack_handler), waited for by the worker beside its latch.
 *
 * Only the acknowledgements of the connection the worker publishes on
 * count.  The library may still run the handler of a connection the
 * worker closed: its thread took the answer off the connection's queue
 * before the close and calls the handler after it.  Such an answer is of
 * an earlier request's message, and counted for the next request it would
 * make the worker take a message for acknowledged that was not.  So every
 * count is of acks->js, the JetStream context of the current connection,
 * set and cleared under the lock; the handler is given the context its
 * answer came on, which the library keeps allocated while the handler runs
 * (the reply subscription holds it), so no later context can have its
 * address.  For the same reason a NatsAcks is never freed: a closed
 * transport's goes to a process-wide list for the next one, and a handler
 * still to run finds it with no context, or another one.
 *
 * The handler calls nothing of the server's: it counts under a pthread
 * mutex and writes a byte to the wake pipe, under the mutex too, so that
 * it never writes to a descriptor the transport closed.
 */
#include "postgres.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#include "fault.h"
#include "sink_nats_internal.h"

/* Fault point "nats_ack:hold" (fault.c): the next handler waits. */
typedef enum NatsAckHold
{
	NATS_HOLD_NONE,
	NATS_HOLD_ARMED,
	NATS_HOLD_HELD
} NatsAckHold;

struct NatsAcks
{
	pthread_mutex_t lock;
	pthread_cond_t released; /* a held handler goes on */
	jsCtx *js;               /* whose acknowledgements count; NULL: none */
	NatsAckCounts counts;
	/* the highest change or message in the stream, by its acknowledgement */
	bool have_acked;
	uint64 acked_lsn;
	uint64 acked_pos;
	NatsAckHold hold;
	bool hold_announced;
	int wake_fd;            /* -1: the transport is closed */
	struct NatsAcks *spare; /* the worker's list of closed ones */
};

static NatsAcks *spares = NULL;

NatsAcks *
nats_acks_create(int wake_fd)
{
	NatsAcks *acks = spares;

	if (acks != NULL)
		spares = acks->spare;
	else
	{
		acks = calloc(1, sizeof(NatsAcks));
		if (acks == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
		pthread_mutex_init(&acks->lock, NULL);
		pthread_cond_init(&acks->released, NULL);
	}
	pthread_mutex_lock(&acks->lock);
	acks->js = NULL;
	memset(&acks->counts, 0, sizeof(acks->counts));
	acks->have_acked = false;
	acks->hold = NATS_HOLD_NONE;
	acks->hold_announced = false;
	acks->wake_fd = wake_fd;
	acks->spare = NULL;
	pthread_mutex_unlock(&acks->lock);
	return acks;
}

void
nats_acks_close(NatsAcks *acks)
{
	pthread_mutex_lock(&acks->lock);
	acks->js = NULL;
	acks->wake_fd = -1;
	acks->hold = NATS_HOLD_NONE;
	pthread_cond_broadcast(&acks->released);
	pthread_mutex_unlock(&acks->lock);
	acks->spare = spares;
	spares = acks;
}

void
nats_acks_count_for(NatsAcks *acks, jsCtx *js)
{
	pthread_mutex_lock(&acks->lock);
	acks->js = js;
	pthread_mutex_unlock(&acks->lock);
}

void
nats_acks_reset(NatsAcks *acks)
{
	pthread_mutex_lock(&acks->lock);
	memset(&acks->counts, 0, sizeof(acks->counts));
	pthread_mutex_unlock(&acks->lock);
}

void
nats_acks_read(NatsAcks *acks, NatsAckCounts *counts)
{
	pthread_mutex_lock(&acks->lock);
	*counts = acks->counts;
	pthread_mutex_unlock(&acks->lock);
}

bool
nats_acks_mark(NatsAcks *acks, uint64 *lsn, uint64 *pos)
{
	bool have;

	pthread_mutex_lock(&acks->lock);
	have = acks->have_acked;
	*lsn = acks->acked_lsn;
	*pos = acks->acked_pos;
	pthread_mutex_unlock(&acks->lock);
	return have;
}

void
nats_acks_forget_mark(NatsAcks *acks)
{
	pthread_mutex_lock(&acks->lock);
	acks->have_acked = false;
	pthread_mutex_unlock(&acks->lock);
}

/* ---- the library's thread: nothing of the server's ---- */

/* Under the lock. */
static void
wake(NatsAcks *acks)
{
	char byte = 1;

	if (acks->wake_fd >= 0 && write(acks->wake_fd, &byte, 1) < 0)
	{
		/* the pipe is full: the worker is woken already */
	}
}

/* A header holding an unsigned decimal number. */
static bool
header_number(natsMsg *msg, const char *name, uint64 *value)
{
	const char *text = NULL;
	char *end;

	if (natsMsgHeader_Get(msg, name, &text) != NATS_OK || text == NULL || text[0] == '\0')
		return false;
	*value = strtoull(text, &end, 10);
	return *end == '\0';
}

/* Whether msg is a change or message of the stream, and its position. */
static bool
stream_position(natsMsg *msg, uint64 *lsn, uint64 *pos)
{
	const char *kind = NULL;

	return natsMsgHeader_Get(msg, "Replicant-Kind", &kind) == NATS_OK && kind != NULL &&
		   (strcmp(kind, "change") == 0 || strcmp(kind, "message") == 0) &&
		   header_number(msg, "Replicant-Commit-Lsn", lsn) &&
		   header_number(msg, "Replicant-Position", pos);
}

static bool
position_after(uint64 lsn, uint64 pos, uint64 than_lsn, uint64 than_pos)
{
	return lsn > than_lsn || (lsn == than_lsn && pos > than_pos);
}

/* A change or message of the stream JetStream has: the mark rises to it. */
static void
note_acked(NatsAcks *acks, natsMsg *msg, bool stored)
{
	NatsAckCounts *c = &acks->counts;
	uint64 lsn,
		pos;

	if (!stream_position(msg, &lsn, &pos))
		return;
	if (!acks->have_acked || position_after(lsn, pos, acks->acked_lsn, acks->acked_pos))
	{
		acks->have_acked = true;
		acks->acked_lsn = lsn;
		acks->acked_pos = pos;
	}
	if (stored && (!c->stored || position_after(lsn, pos, c->stored_lsn, c->stored_pos)))
	{
		c->stored = true;
		c->stored_lsn = lsn;
		c->stored_pos = pos;
	}
}

/* A change or message refused for its expected sequence. */
static void
note_refused(NatsAckCounts *c, natsMsg *msg)
{
	uint64 lsn,
		pos;

	if (stream_position(msg, &lsn, &pos) &&
		(!c->refused || position_after(c->refused_lsn, c->refused_pos, lsn, pos)))
	{
		c->refused = true;
		c->refused_lsn = lsn;
		c->refused_pos = pos;
	}
}

/*
 * A duplicate is in the stream only with a sequence: a clustered
 * nats-server 2.10 records a message's id as it proposes it, answers a
 * message of that id as a duplicate of sequence 0 until it is stored, and
 * keeps the id when the message is refused (a wrong expected sequence), so
 * that such an answer can be of a message that never will be (later
 * servers answer an error instead).  It fails the request, whose retry
 * finds the message stored, or the id expired.
 */
static void
count(NatsAcks *acks, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae)
{
	NatsAckCounts *c = &acks->counts;

	c->done++;
	c->done_bytes += natsMsg_GetDataLength(msg);
	if (pa != NULL && !(pa->Duplicate && pa->Sequence == 0))
	{
		if (pa->Duplicate)
			c->duplicates++;
		note_acked(acks, msg, !pa->Duplicate);
	}
	else
	{
		if (pae != NULL && pae->ErrCode == JSStreamWrongLastSequenceErr)
			note_refused(c, msg);
		c->failed++;
		if (c->status == NATS_OK)
		{
			c->status = pae && pae->Err != NATS_OK ? pae->Err : NATS_ERR;
			c->code = pae ? pae->ErrCode : 0;
			c->unstored = pa != NULL;
		}
	}
	wake(acks);
}

void
nats_ack_handler(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	NatsAcks *acks = closure;

	pthread_mutex_lock(&acks->lock);
	if (acks->hold == NATS_HOLD_ARMED)
	{
		acks->hold = NATS_HOLD_HELD;
		wake(acks);
		while (acks->hold == NATS_HOLD_HELD)
			pthread_cond_wait(&acks->released, &acks->lock);
	}
	if (js == acks->js)
		count(acks, msg, pa, pae);
	pthread_mutex_unlock(&acks->lock);
	natsMsg_Destroy(msg);
}

/* ---- the worker ---- */

/*
 * Arms fault point "nats_ack:hold" for the next handler, or releases the
 * held one once the setting names something else; says when one is held.
 */
void
nats_acks_check_hold(NatsAcks *acks)
{
	bool wanted = replicant_fault_holds("nats_ack");
	bool announce;

	pthread_mutex_lock(&acks->lock);
	if (wanted && acks->hold == NATS_HOLD_NONE)
		acks->hold = NATS_HOLD_ARMED;
	else if (!wanted && acks->hold != NATS_HOLD_NONE)
	{
		acks->hold = NATS_HOLD_NONE;
		acks->hold_announced = false;
		pthread_cond_broadcast(&acks->released);
	}
	announce = acks->hold == NATS_HOLD_HELD && !acks->hold_announced;
	acks->hold_announced |= announce;
	pthread_mutex_unlock(&acks->lock);
	if (announce)
		replicant_fault_announce("nats_ack", "holding");
}

/*
 * Waits up to ms for the wake pipe or the latch, answering interrupts and
 * reloads; false when the process is to die (the request is abandoned, so
 * that what was acknowledged is committed first).
 */
bool
nats_sink_wait_slice(NatsSink *sink, long ms)
{
	int rc = WaitLatchOrSocket(MyLatch,
							   WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   sink->pipe_fds[0], ms, PG_WAIT_EXTENSION);

	if (rc & WL_SOCKET_READABLE)
	{
		char drain[256];

		while (read(sink->pipe_fds[0], drain, sizeof(drain)) > 0)
			;
	}
	if (rc & WL_LATCH_SET)
	{
		ResetLatch(MyLatch);
		sink->latch_was_set = true;
	}
	if (ProcDiePending)
	{
		sink->abandoned = true;
		return false;
	}
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	nats_acks_check_hold(sink->acks);
	CHECK_FOR_INTERRUPTS();
	return true;
}

/*
 * Waits until at most max_pending messages (and max_bytes) are
 * unacknowledged; false (result set) on a failure, the ack timeout or an
 * abandoned wait.
 */
bool
nats_sink_wait_acks(NatsSink *sink, int64 max_pending, int64 max_bytes, ReplicantSinkResult *result)
{
	instr_time deadline_base;
	int64 last_done = -1;
	bool told = false;

	INSTR_TIME_SET_CURRENT(deadline_base);
	for (;;)
	{
		NatsAckCounts c;
		instr_time now;

		nats_acks_read(sink->acks, &c);
		if (c.failed > 0)
		{
			if (c.unstored)
				nats_sink_fail(result, REPLICANT_SINK_RETRY,
							   "NATS answered a publish as a duplicate of a message it has not stored");
			else
				nats_sink_fail_status(result, "NATS publish failed", c.status, c.code);
			return false;
		}
		if (sink->published - c.done <= max_pending &&
			sink->published_bytes - c.done_bytes <= max_bytes)
			return true;
		/*
		 * What a test waits for before it signals a waiting worker: the
		 * request's first wait at the in-flight bound, and its last.
		 */
		if (!told && (max_pending == 0 || !sink->told_bound))
			elog(DEBUG1, "replicant pipeline \"%s\" waits for acknowledgements of " INT64_FORMAT " NATS messages",
				 sink->pipeline ? sink->pipeline : "", sink->published - c.done);
		told = true;
		sink->told_bound |= max_pending > 0;
		INSTR_TIME_SET_CURRENT(now);
		if (c.done != last_done)
		{
			last_done = c.done;
			deadline_base = now;
		}
		INSTR_TIME_SUBTRACT(now, deadline_base);
		if (INSTR_TIME_GET_MILLISEC(now) > sink->ack_timeout_ms)
		{
			nats_sink_fail(result, REPLICANT_SINK_RETRY, "timed out waiting for NATS acknowledgements");
			return false;
		}
		if (!nats_sink_wait_slice(sink, NATS_WAIT_SLICE_MS))
		{
			nats_sink_fail(result, REPLICANT_SINK_RETRY, "interrupted while waiting for NATS acknowledgements");
			return false;
		}
	}
}

bool
nats_sink_drain_acks(NatsSink *sink)
{
	instr_time deadline_base;
	int64 last_done = -1;

	INSTR_TIME_SET_CURRENT(deadline_base);
	for (;;)
	{
		NatsAckCounts c;
		instr_time now;

		nats_acks_read(sink->acks, &c);
		if (sink->published - c.done <= 0)
			return true;
		INSTR_TIME_SET_CURRENT(now);
		if (c.done != last_done)
		{
			last_done = c.done;
			deadline_base = now;
		}
		INSTR_TIME_SUBTRACT(now, deadline_base);
		if (INSTR_TIME_GET_MILLISEC(now) > sink->ack_timeout_ms ||
			!nats_sink_wait_slice(sink, NATS_WAIT_SLICE_MS))
			return false;
	}
}
