/*
 * sink_nats_connect.c
 *		Connecting to NATS without going deaf: natsConnection_Connect tries
 *		every server of the URL in turn (2 s each), so it runs in a thread of
 *		its own, started with every signal blocked (as are the library's
 *		threads it starts), and the worker waits for it in slices on its
 *		latch, answering interrupts; an interrupted worker leaves the
 *		connection to the thread, which frees it.
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <nats/nats.h>

#include "sink_nats_internal.h"

void
nats_sink_connecting_free(NatsConnecting *c)
{
	if (c->conn)
		natsConnection_Destroy(c->conn);
	natsOptions_Destroy(c->opts);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* The connecting thread: every signal blocked, nothing of the server's. */
static void *
connect_thread(void *arg)
{
	NatsConnecting *c = arg;
	natsConnection *conn = NULL;
	natsStatus s = natsConnection_Connect(&conn, c->opts);
	bool abandoned;
	char byte = 1;

	pthread_mutex_lock(&c->lock);
	c->conn = conn;
	c->status = s;
	c->done = true;
	abandoned = c->abandoned;
	if (!abandoned && write(c->wake_fd, &byte, 1) < 0)
	{
		/* the pipe is full: the worker is woken already */
	}
	pthread_mutex_unlock(&c->lock);
	if (abandoned)
		nats_sink_connecting_free(c);
	nats_ReleaseThreadMemory();
	return NULL;
}

/*
 * Connects in a thread started with every signal blocked (so are the
 * library's threads it starts) and waits for it in slices; an interrupt
 * abandons the connection to the thread.
 */
natsStatus
nats_sink_connect(NatsSink *sink, NatsConnecting *c)
{
	pthread_t thread;
	sigset_t old;
	natsStatus s;
	bool done = false;

	nats_sink_block_signals(&old);
	if (pthread_create(&thread, NULL, connect_thread, c) != 0)
	{
		nats_sink_restore_signals(&old);
		nats_sink_connecting_free(c);
		return NATS_NO_MEMORY;
	}
	nats_sink_restore_signals(&old);
	while (!done)
	{
		bool interrupted = !nats_sink_wait_slice(sink, NATS_WAIT_SLICE_MS);

		pthread_mutex_lock(&c->lock);
		done = c->done;
		c->abandoned = interrupted && !done;
		pthread_mutex_unlock(&c->lock);
		if (c->abandoned)
		{
			/* the thread frees c when it returns */
			pthread_detach(thread);
			return NATS_ERR;
		}
		if (interrupted)
			break;
	}
	pthread_join(thread, NULL);
	s = sink->abandoned ? NATS_ERR : c->status;
	sink->conn = c->conn;
	c->conn = NULL;
	nats_sink_connecting_free(c);
	return s;
}
