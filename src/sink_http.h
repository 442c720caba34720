/*
 * sink_http.h
 *		POSTing batches to an HTTP sink with libcurl, and classifying the answer.
 */
#ifndef REPLICANT_SINK_HTTP_H
#define REPLICANT_SINK_HTTP_H

#include "batch.h"
#include "transport.h"

typedef struct ReplicantSink ReplicantSink;

/*
 * Creates the sink (one easy handle, kept alive between requests) in
 * CurrentMemoryContext.  Initializes libcurl on the first call in a process;
 * never call it in the postmaster.
 */
extern ReplicantSink *replicant_sink_create(const ReplicantSinkConfig *config);
extern void replicant_sink_destroy(ReplicantSink *sink);

/*
 * Classifies the sink's error codes with code_is_final from now on, instead
 * of the config's: a request of another kind may need other rules.
 */
extern void replicant_sink_classify_codes(ReplicantSink *sink, bool (*code_is_final)(int code));

/*
 * POSTs one body with the contract's headers (webhook-id, webhook-timestamp,
 * webhook-signature when a secret is set, the configured headers,
 * User-Agent).  Waits on the process latch and the socket, answering
 * interrupts (CHECK_FOR_INTERRUPTS outside libcurl frames), so SIGTERM stops
 * it promptly.  Never raises an error for what the sink or the network did:
 * that is reported in *result.  Answers with a status line but a broken
 * transfer count as an answer only when the status is not 1xx or 2xx: a
 * half-received 2xx is retried, never taken as an acknowledgement.
 *
 * Interrupts: CHECK_FOR_INTERRUPTS may throw (ERROR in a backend, FATAL
 * after SIGTERM); the sink stays usable after an ERROR.  A latch set while
 * the request was waiting is set again before returning, so the caller's
 * own wait does not miss it.
 */
extern void replicant_sink_post(ReplicantSink *sink, const char *webhook_id,
								ReplicantBody *body, ReplicantSinkResult *result);

/*
 * The same request overlapped with the caller's work, one at a time per
 * sink: replicant_sink_start() sends what the connection takes without
 * waiting, replicant_sink_pump() (called between the caller's own steps)
 * moves it on without waiting, and replicant_sink_finish() waits for the
 * answer and classifies it as replicant_sink_post() does.  The body must
 * stay unchanged until then.  Nothing of it answers interrupts but
 * replicant_sink_finish(), which may throw as replicant_sink_post() may;
 * the caller answers them between pumps, outside libcurl.  A caller that
 * leaves by an error between start and finish calls replicant_sink_cancel()
 * (a no-op when nothing is started), which drops the request and its
 * connection.
 */
extern void replicant_sink_start(ReplicantSink *sink, const char *webhook_id,
								 ReplicantBody *body);
extern void replicant_sink_pump(ReplicantSink *sink);
extern void replicant_sink_finish(ReplicantSink *sink, ReplicantSinkResult *result);
extern void replicant_sink_cancel(ReplicantSink *sink);

#endif /* REPLICANT_SINK_HTTP_H */
