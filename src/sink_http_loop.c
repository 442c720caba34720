/*
 * sink_http_loop.c
 *		Driving libcurl's multi interface from our own wait loop.
 *
 * The request is driven from a WaitEventSet over the process latch,
 * postmaster death and the sockets libcurl asks for, so that interrupts are
 * answered promptly and always outside libcurl frames.  The libcurl
 * callbacks (here and in sink_http.c) only copy data and set flags: they
 * never palloc, ereport or CHECK_FOR_INTERRUPTS, since a longjmp across
 * libcurl would leave it in an undefined state.
 *
 * Rules kept with other files: docs/internals.md §8 (errors: halt or retry).
 */
#include "postgres.h"

#include <sys/stat.h>

#include "miscadmin.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "fault.h"
#include "sink_http_loop.h"

/* Wait when libcurl watches nothing yet, e.g. while the resolver runs. */
#define SINK_IDLE_WAIT_MS 100

/* Upper bound on one wait, so the safety deadline below is checked. */
#define SINK_MAX_WAIT_MS 1000

/*
 * Beyond http_timeout_ms, libcurl's own timer should have ended the request;
 * this much later we stop waiting for it ourselves.
 */
#define SINK_DEADLINE_SLACK_MS 5000

/* ---- libcurl callbacks: no palloc, no ereport, no CHECK_FOR_INTERRUPTS ---- */

/* Records which sockets libcurl wants watched, and for what. */
int
replicant_sink_loop_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
							  void *socketp)
{
	ReplicantSinkLoop *loop = (ReplicantSinkLoop *) userp;
	int i;

	for (i = 0; i < loop->nsockets; i++)
	{
		if (loop->sockets[i].fd == fd)
			break;
	}

	if (what == CURL_POLL_REMOVE)
	{
		if (i < loop->nsockets)
			loop->sockets[i] = loop->sockets[--loop->nsockets];
		return 0;
	}

	if (i == loop->nsockets)
	{
		if (loop->nsockets == SINK_MAX_SOCKETS)
		{
			loop->socket_overflow = true;
			return -1; /* libcurl fails the transfer */
		}
		loop->sockets[i].fd = fd;
		loop->nsockets++;
	}
	loop->sockets[i].what = what;
	return 0;
}

/* Records libcurl's single, non-repeating timer; -1 disarms it. */
int
replicant_sink_loop_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	ReplicantSinkLoop *loop = (ReplicantSinkLoop *) userp;

	if (timeout_ms < 0)
		loop->timer_armed = false;
	else
	{
		loop->timer_armed = true;
		loop->timer_ms = timeout_ms;
		INSTR_TIME_SET_CURRENT(loop->timer_set_at);
	}
	return 0;
}

/* ---- the loop ---- */

/* Milliseconds until libcurl's timer fires (rounded up), or -1 if unarmed. */
static long
loop_timer_remaining(ReplicantSinkLoop *loop)
{
	instr_time now;
	int64 elapsed_us;
	int64 remaining_us;

	if (!loop->timer_armed)
		return -1;
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, loop->timer_set_at);
	elapsed_us = (int64) INSTR_TIME_GET_MICROSEC(now);
	remaining_us = (int64) loop->timer_ms * 1000 - elapsed_us;
	if (remaining_us <= 0)
		return 0;
	return (long) ((remaining_us + 999) / 1000);
}

/* Crash tests stop here: the whole request is out, no answer has come. */
static void
fault_after_send(ReplicantSinkLoop *loop, size_t body_length)
{
	curl_off_t uploaded = 0;
	long status = 0;

	if (!replicant_fault_armed())
		return;
	curl_easy_getinfo(loop->easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(loop->easy, CURLINFO_SIZE_UPLOAD_T, &uploaded);
	if (status == 0 && uploaded >= (curl_off_t) body_length)
		replicant_fault("after_send");
}

/* How long one round may wait: until libcurl's timer, within bounds. */
static long
loop_wait_ms(ReplicantSinkLoop *loop)
{
	long timer = loop_timer_remaining(loop);

	if (timer >= 0)
		return Min(timer, SINK_MAX_WAIT_MS);
	if (loop->nsockets == 0)
		return SINK_IDLE_WAIT_MS;
	return SINK_MAX_WAIT_MS;
}

static uint32
loop_socket_events(int what)
{
	uint32 events = 0;

	if (what & CURL_POLL_IN)
		events |= WL_SOCKET_READABLE;
	if (what & CURL_POLL_OUT)
		events |= WL_SOCKET_WRITEABLE;
	return events;
}

static SinkWatched *
loop_watched(ReplicantSinkLoop *loop, curl_socket_t fd)
{
	int i;

	for (i = 0; i < loop->nwatched; i++)
	{
		if (loop->watched[i].fd == fd)
			return &loop->watched[i];
	}
	return NULL;
}

/*
 * Whether the kept set watches exactly the sockets libcurl waits for, each
 * still the file it was: between our waits libcurl closes and opens sockets
 * (a new connection, the resolver's pipe), a new one can get an old number,
 * and epoll forgets a closed file.
 */
static bool
loop_wait_set_current(ReplicantSinkLoop *loop)
{
	int nwanted = 0;
	int i;

	if (loop->wes == NULL)
		return false;
	for (i = 0; i < loop->nsockets; i++)
	{
		SinkWatched *w;
		struct stat st;

		if (loop_socket_events(loop->sockets[i].what) == 0)
			continue;
		nwanted++;
		w = loop_watched(loop, loop->sockets[i].fd);
		if (w == NULL || fstat(w->fd, &st) != 0 ||
			st.st_dev != w->dev || st.st_ino != w->ino)
			return false;
	}
	return nwanted == loop->nwatched;
}

void
replicant_sink_loop_free_wait_set(ReplicantSinkLoop *loop)
{
	if (loop->wes != NULL)
		FreeWaitEventSet(loop->wes);
	loop->wes = NULL;
	loop->nwatched = 0;
}

/* A new set over the latch, postmaster death and libcurl's sockets. */
static void
loop_build_wait_set(ReplicantSinkLoop *loop)
{
	int i;

	replicant_sink_loop_free_wait_set(loop);
	loop->wes = REPLICANT_CREATE_WAIT_EVENT_SET(loop->context, loop->nsockets + 2);
	AddWaitEventToSet(loop->wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(loop->wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
					  NULL, NULL);
	for (i = 0; i < loop->nsockets; i++)
	{
		uint32 events = loop_socket_events(loop->sockets[i].what);
		SinkWatched *w;
		struct stat st;

		if (events == 0)
			continue;
		/* a descriptor fstat cannot see fails in AddWaitEventToSet */
		if (fstat(loop->sockets[i].fd, &st) != 0)
			memset(&st, 0, sizeof(st));
		w = &loop->watched[loop->nwatched++];
		w->fd = loop->sockets[i].fd;
		w->dev = st.st_dev;
		w->ino = st.st_ino;
		w->events = events;
		w->pos = AddWaitEventToSet(loop->wes, events, w->fd, NULL, NULL);
	}
}

/* Points the kept set's sockets at what libcurl waits for now. */
static void
loop_update_wait_set(ReplicantSinkLoop *loop)
{
	int i;

	for (i = 0; i < loop->nsockets; i++)
	{
		uint32 events = loop_socket_events(loop->sockets[i].what);
		SinkWatched *w = loop_watched(loop, loop->sockets[i].fd);

		if (events != 0 && w->events != events)
		{
			ModifyWaitEvent(loop->wes, w->pos, events, NULL);
			w->events = events;
		}
	}
}

/*
 * Waits on the latch, postmaster death and the sockets libcurl watches, for
 * at most wait_ms.  Returns how many events fired into occurred.
 */
static int
loop_wait(ReplicantSinkLoop *loop, long wait_ms, WaitEvent *occurred,
		  int noccurred)
{
	if (loop_wait_set_current(loop))
		loop_update_wait_set(loop);
	else
		loop_build_wait_set(loop);
	return WaitEventSetWait(loop->wes, wait_ms, occurred, noccurred,
							PG_WAIT_EXTENSION);
}

/*
 * Hands the sockets that fired to libcurl, and says whether the latch did.
 * Returns libcurl's verdict, stopping at the first failure.
 */
static CURLMcode
loop_dispatch(ReplicantSinkLoop *loop, WaitEvent *occurred, int nfired,
			  int *running, bool *latch_fired)
{
	CURLMcode mc = CURLM_OK;
	int i;

	for (i = 0; i < nfired && mc == CURLM_OK; i++)
	{
		int mask = 0;

		if (occurred[i].events & WL_LATCH_SET)
		{
			*latch_fired = true;
			continue;
		}
		if (occurred[i].events & WL_SOCKET_READABLE)
			mask |= CURL_CSELECT_IN;
		if (occurred[i].events & WL_SOCKET_WRITEABLE)
			mask |= CURL_CSELECT_OUT;
		if (mask != 0)
			mc = curl_multi_socket_action(loop->multi, occurred[i].fd,
										  mask, running);
	}
	return mc;
}

/* What the transfer came to, once the wait loop is over. */
CURLcode
replicant_sink_loop_result_code(ReplicantSinkLoop *loop, CURLMcode mc, bool hard_timeout)
{
	CURLcode code;
	CURLMsg *msg;
	int pending;

	if (hard_timeout)
		return CURLE_OPERATION_TIMEDOUT;
	if (mc == CURLM_OUT_OF_MEMORY)
		return CURLE_OUT_OF_MEMORY;
	if (mc != CURLM_OK || loop->socket_overflow)
		return CURLE_FAILED_INIT;

	code = CURLE_FAILED_INIT; /* if libcurl reports no result */
	while ((msg = curl_multi_info_read(loop->multi, &pending)) != NULL)
	{
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == loop->easy)
			code = msg->data.result;
	}
	return code;
}

CURLMcode
replicant_sink_loop_pump(ReplicantSinkLoop *loop, SinkAttempt *attempt, int *running)
{
	WaitEvent occurred[SINK_MAX_SOCKETS + 2];
	int nfired;
	bool latch_fired = false;
	CURLMcode mc;

	nfired = loop_wait(loop, 0, occurred, lengthof(occurred));
	mc = loop_dispatch(loop, occurred, nfired, running, &latch_fired);
	if (mc == CURLM_OK && loop_timer_remaining(loop) == 0)
	{
		/* non-repeating: forget it before telling libcurl, which re-arms it */
		loop->timer_armed = false;
		mc = curl_multi_socket_action(loop->multi, CURL_SOCKET_TIMEOUT, 0, running);
	}
	if (latch_fired)
	{
		ResetLatch(MyLatch);
		attempt->latch_was_set = true;
	}
	return mc;
}

int
replicant_sink_loop_wait_sources(ReplicantSinkLoop *loop, ReplicantWaitSource *sources,
								 long *timeout_ms)
{
	int n = 0;
	int i;

	for (i = 0; i < loop->nsockets && n < REPLICANT_MAX_WAIT_SOURCES; i++)
	{
		uint32 events = loop_socket_events(loop->sockets[i].what);

		if (events == 0)
			continue;
		sources[n].fd = loop->sockets[i].fd;
		sources[n].events = events;
		n++;
	}
	*timeout_ms = loop_wait_ms(loop);
	return n;
}

bool
replicant_sink_loop_poll(ReplicantSinkLoop *loop, int http_timeout_ms, size_t body_length,
						 instr_time started_at, SinkAttempt *attempt)
{
	int running = 1;
	instr_time now;
	CURLMcode mc;

	mc = replicant_sink_loop_pump(loop, attempt, &running);

	/* libcurl watches nothing and set no timer: ask it what it waits for */
	if (mc == CURLM_OK && running > 0 && !loop->timer_armed && loop->nsockets == 0)
		mc = curl_multi_socket_action(loop->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	fault_after_send(loop, body_length);
	if (mc == CURLM_OK && running > 0 && !loop->socket_overflow)
	{
		/* libcurl's timer ends the request; this only guards against a bug */
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, started_at);
		if (http_timeout_ms <= 0 ||
			INSTR_TIME_GET_MILLISEC(now) <= (double) http_timeout_ms + SINK_DEADLINE_SLACK_MS)
			return false;
		attempt->hard_timeout = true;
	}
	attempt->code = replicant_sink_loop_result_code(loop, mc, attempt->hard_timeout);
	curl_easy_getinfo(loop->easy, CURLINFO_RESPONSE_CODE, &attempt->status);
	return true;
}
