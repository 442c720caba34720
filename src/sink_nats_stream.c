/*
 * sink_nats_stream.c
 *		The NATS transport's stream: whether it is the pipeline's alone, and
 *		where the pipeline's last message in it is (the mark every change at
 *		or below which is skipped).  sink_nats.c describes the chain this
 *		serves.
 */
#include "postgres.h"

#include <signal.h>

#include <nats/nats.h>

#include "fault.h"
#include "sink_nats_internal.h"

/*
 * Takes the last message under the prefix as this destination's mark;
 * false when another pipeline, another destination of it, or a pipeline of
 * the same name in another database or on another server, wrote it
 * (Replicant-Source, Replicant-Pipeline, Replicant-Destination, absent for
 * "default"): its position says nothing of this destination's.
 */
static bool
learn_mark(NatsSink *sink, natsMsg *msg)
{
	const char *source = NULL;
	const char *pipeline = NULL;
	const char *destination = NULL;
	const char *id = NULL;
	size_t plen = strlen(sink->id_name);
	unsigned long long lsn,
		pos;

	if (natsMsgHeader_Get(msg, "Replicant-Source", &source) != NATS_OK || source == NULL ||
		strcmp(source, sink->source) != 0 ||
		natsMsgHeader_Get(msg, "Replicant-Pipeline", &pipeline) != NATS_OK || pipeline == NULL ||
		strcmp(pipeline, sink->pipeline) != 0)
		return false;
	if (natsMsgHeader_Get(msg, "Replicant-Destination", &destination) != NATS_OK)
		destination = NULL;
	if ((destination == NULL) != (sink->destination == NULL) ||
		(destination != NULL && strcmp(destination, sink->destination) != 0))
		return false;
	/* <pipeline>[.<destination>]:<lsn>:<position>; reads and markers have other ids */
	if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != NULL &&
		strncmp(id, sink->id_name, plen) == 0 && id[plen] == ':' &&
		sscanf(id + plen + 1, "%llu:%llu", &lsn, &pos) == 2)
	{
		sink->have_mark = true;
		sink->mark_lsn = lsn;
		sink->mark_pos = pos;
	}
	return true;
}

/*
 * Whether the subject filter takes every subject of the prefix: a publish
 * no stream takes gets "no responders", retried for ever otherwise (and
 * a cluster electing a leader answers so for a while too, so the publish's
 * answer cannot tell).  The pipeline's subjects are <prefix>.<a>.<b>.
 */
static bool
filter_takes_prefix(const char *filter, const char *prefix)
{
	const char *f = filter;
	const char *p = prefix;

	while (*p != '\0')
	{
		size_t flen = strcspn(f, ".");
		size_t plen = strcspn(p, ".");

		if (flen == 1 && f[0] == '>')
			return true;
		if (!(flen == 1 && f[0] == '*') && (flen != plen || strncmp(f, p, plen) != 0))
			return false;
		f += flen;
		p += plen;
		if (*f != '.')
			return false;
		f++;
		if (*p == '.')
			p++;
	}
	/* two more tokens, any */
	return strcmp(f, ">") == 0 || strcmp(f, "*.>") == 0 || strcmp(f, "*.*") == 0;
}

/*
 * Whether every subject the filter takes lies under the prefix: its first
 * tokens are the prefix's, literally, and more follow.
 */
static bool
filter_within_prefix(const char *filter, const char *prefix)
{
	size_t len = strlen(prefix);

	return strncmp(filter, prefix, len) == 0 && filter[len] == '.' && filter[len + 1] != '\0';
}

/*
 * Whether only the pipeline writes the stream: each of its subjects lies
 * under the prefix, and it copies no other stream.  The chain of expected
 * sequences keeps commit order only then: another writer's message moves
 * the sequence a refused change's successor expects, which is then stored
 * without it, and the retry, finding the successor, would skip it.
 */
static bool
stream_is_exclusive(jsStreamInfo *si, const char *prefix)
{
	int i;

	if (si->Config == NULL)
		return true;
	if (si->Config->Mirror != NULL || si->Config->SourcesLen > 0)
		return false;
	for (i = 0; i < si->Config->SubjectsLen; i++)
		if (!filter_within_prefix(si->Config->Subjects[i], prefix))
			return false;
	return true;
}

static bool
stream_takes_prefix(jsStreamInfo *si, const char *prefix)
{
	int i;

	if (si->Config == NULL)
		return true;
	for (i = 0; i < si->Config->SubjectsLen; i++)
		if (filter_takes_prefix(si->Config->Subjects[i], prefix))
			return true;
	return false;
}

/*
 * What JetStream acknowledged is in the stream even where the last message
 * under the prefix is older: removed since (a work queue's consumer, a
 * purge), or acknowledged as a duplicate of one written before it.  Such a
 * change is skipped too: published again, it would be a duplicate again,
 * which leaves the stream's sequence where the messages after it in the
 * chain expect it to have moved, failing them on every retry.
 */
static void
take_acked_mark(NatsSink *sink)
{
	uint64 lsn,
		pos;

	if (nats_acks_mark(sink->acks, &lsn, &pos) &&
		(!sink->have_mark || lsn > sink->mark_lsn ||
		 (lsn == sink->mark_lsn && pos > sink->mark_pos)))
	{
		sink->have_mark = true;
		sink->mark_lsn = lsn;
		sink->mark_pos = pos;
	}
}

/*
 * Reads the stream's configuration and state: false (result set) unless it
 * takes the pipeline's subjects and nothing else writes it.  Every request
 * checks it before it publishes anything: a snapshot's or backfill's too,
 * whose reads are not chained but would otherwise go into a stream others
 * write (or be retried for ever, "no responders", where no stream takes the
 * prefix).  *last_seq (if last_seq is given) gets its last sequence.
 */
bool
nats_sink_check_stream(NatsSink *sink, uint64 *last_seq, ReplicantSinkResult *result)
{
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;
	natsStatus s;
	sigset_t old;
	const char *problem = NULL;

	nats_sink_block_signals(&old);
	s = js_GetStreamInfo(&si, sink->js, sink->url.stream, NULL, &code);
	nats_sink_restore_signals(&old);
	if (s != NATS_OK)
	{
		if (s == NATS_NOT_FOUND && code == 0)
			code = JSStreamNotFoundErr;
		nats_sink_fail_status(result, "could not read the NATS stream's state", s, code);
		return false;
	}
	if (last_seq != NULL)
		*last_seq = si->State.LastSeq;
	/* what another stream of that name acknowledged says nothing of this one */
	if (si->Created != sink->stream_created)
	{
		nats_acks_forget_mark(sink->acks);
		sink->stream_created = si->Created;
	}
	if (!stream_takes_prefix(si, sink->url.prefix))
		problem = "the NATS stream does not take the pipeline's subjects (<prefix>.>)";
	else if (!stream_is_exclusive(si, sink->url.prefix))
		problem = "the NATS stream takes subjects outside the pipeline's prefix, or copies "
				  "another stream: give the pipeline a stream of its own (subjects <prefix>.>)";
#if NATS_VERSION_NUMBER >= 0x030B00
	/*
	 * nats-server 2.11 writes a marker of its own on a subject whose last
	 * message ages out (max_age, or a message TTL): another writer under
	 * the prefix.  An older libnats does not read the setting (README,
	 * "Limitations").
	 */
	else if (si->Config != NULL && si->Config->SubjectDeleteMarkerTTL > 0)
		problem = "the NATS stream writes delete markers of its own under the pipeline's "
				  "prefix (subject_delete_marker_ttl): give the pipeline a stream without them";
#endif
	jsStreamInfo_Destroy(si);
	if (problem != NULL)
	{
		nats_sink_fail(result, REPLICANT_SINK_REJECTED, problem);
		return false;
	}
	return true;
}

/*
 * The stream's last sequence and the last message of this pipeline, or
 * the last change it acknowledged when that is further.
 */
bool
nats_sink_learn_stream(NatsSink *sink, ReplicantSinkResult *result)
{
	natsMsg *msg = NULL;
	jsErrCode code = 0;
	natsStatus s;
	sigset_t old;
	char *subject = psprintf("%s.>", sink->url.prefix);

	if (!nats_sink_check_stream(sink, &sink->last_seq, result))
		return false;
	nats_sink_block_signals(&old);
	s = js_GetLastMsg(&msg, sink->js, sink->url.stream, subject, NULL, &code);
	nats_sink_restore_signals(&old);
	sink->have_mark = false;
	if (s == NATS_OK)
	{
		bool ours = learn_mark(sink, msg);

		natsMsg_Destroy(msg);
		if (!ours)
		{
			nats_sink_fail(result, REPLICANT_SINK_REJECTED,
						   "the last message under the NATS subject prefix was written by another "
						   "pipeline, destination or database: give each its own subject_prefix");
			return false;
		}
	}
	else if (s != NATS_NOT_FOUND)
	{
		nats_sink_fail_status(result, "could not read the NATS stream's last message", s, code);
		return false;
	}
	take_acked_mark(sink);
	sink->known = true;
	sink->probing = true;
	replicant_fault("nats_learnt");
	return true;
}
