/*
 * nats_tool.c
 *		The tests' own JetStream client (test/Nats.pm builds it with
 *		cc ... -lnats): creates a stream, dumps every message of one, names
 *		a stream's leader.  Each command prints one line per result and
 *		exits non-zero, with the library's error on stderr, on a failure.
 *
 *   nats_tool create <servers> <stream> <subject> <replicas> <duplicates_ms> [max_msg_size]
 *   nats_tool dump <servers> <stream>
 *       one JSON object per message: {"seq":N,"subject":"...",
 *       "headers":{"Name":"value",...},"data":"<the body as a string>"}
 *       and "time": the stream's store time, ns since the epoch; exits 3
 *       without reading while the stream has no leader or a replica is not
 *       current (test/Nats.pm retries)
 *   nats_tool leader <servers> <stream>
 *   nats_tool purge <servers> <stream>
 *   nats_tool api <servers> <subject> <json>
 *       a JetStream API request (e.g. $JS.API.STREAM.CREATE.<stream> with a
 *       configuration this library may not know); prints the answer, fails
 *       when it is an error
 *   nats_tool delete <servers> <stream>
 *   nats_tool dumpraw <servers> <stream> <file>
 *       every message as "S <subject>", "H <name>\t<value>" lines, then
 *       "D <length>" and the body (bench/nats.pl's publisher input)
 *   nats_tool publish <servers> <stream> <file> <in flight>
 *       publishes dumpraw's messages asynchronously, at most <in flight>
 *       unacknowledged, and prints "<count> <seconds>" once all are acked
 *
 * <servers> is a comma-separated list of nats://host:port URLs.  From the
 * environment: NATS_CA (a CA bundle: TLS, the servers verified against it),
 * NATS_USER and NATS_PASSWORD.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

static void
fail(const char *what, natsStatus s, jsErrCode code)
{
	fprintf(stderr, "%s: %s (%d), JetStream error %d: %s\n", what, natsStatus_GetText(s),
			(int) s, (int) code, nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "");
	exit(1);
}

static void
json_string(const char *s, int len)
{
	int i;

	putchar('"');
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static int64_t max_pending = 0;

static jsCtx *
connect_js(const char *servers, natsConnection **nc)
{
	natsOptions *opts = NULL;
	jsCtx *js = NULL;
	jsOptions jo;
	natsStatus s;
	char *copy = strdup(servers);
	const char *urls[16];
	int n = 0;
	char *tok;

	for (tok = strtok(copy, ","); tok && n < 16; tok = strtok(NULL, ","))
		urls[n++] = tok;
	s = natsOptions_Create(&opts);
	if (s == NATS_OK)
		s = natsOptions_SetServers(opts, urls, n);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(opts, 5000);
	if (s == NATS_OK && getenv("NATS_CA"))
		s = natsOptions_SetSecure(opts, true);
	if (s == NATS_OK && getenv("NATS_CA"))
		s = natsOptions_LoadCATrustedCertificates(opts, getenv("NATS_CA"));
	if (s == NATS_OK && getenv("NATS_USER"))
		s = natsOptions_SetUserInfo(opts, getenv("NATS_USER"), getenv("NATS_PASSWORD"));
	if (s == NATS_OK)
		s = natsConnection_Connect(nc, opts);
	if (s != NATS_OK)
		fail("connect", s, 0);
	jsOptions_Init(&jo);
	jo.Wait = 10000;
	if (max_pending > 0)
	{
		jo.PublishAsync.MaxPending = max_pending;
		jo.PublishAsync.StallWait = 10;
	}
	s = natsConnection_JetStream(&js, *nc, &jo);
	if (s != NATS_OK)
		fail("jetstream", s, 0);
	return js;
}

static void
create(jsCtx *js, char **argv, int argc)
{
	jsStreamConfig cfg;
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;
	const char *subjects[1] = {argv[4]};
	natsStatus s;

	jsStreamConfig_Init(&cfg);
	cfg.Name = argv[3];
	cfg.Subjects = subjects;
	cfg.SubjectsLen = 1;
	cfg.Storage = js_FileStorage;
	cfg.Replicas = atoi(argv[5]);
	cfg.Duplicates = (int64_t) atoll(argv[6]) * 1000000;
	if (argc > 7)
		cfg.MaxMsgSize = atoi(argv[7]);
	s = js_AddStream(&si, js, &cfg, NULL, &code);
	if (s != NATS_OK)
		fail("add stream", s, code);
	printf("created %s\n", si->Config->Name);
	jsStreamInfo_Destroy(si);
}

static void
print_message(natsMsg *msg, uint64_t seq)
{
	const char **keys = NULL;
	int count = 0;
	int i;

	printf("{\"seq\":%llu,\"subject\":", (unsigned long long) seq);
	json_string(natsMsg_GetSubject(msg), strlen(natsMsg_GetSubject(msg)));
	printf(",\"headers\":{");
	if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK)
	{
		for (i = 0; i < count; i++)
		{
			const char *value = NULL;

			natsMsgHeader_Get(msg, keys[i], &value);
			if (i > 0)
				putchar(',');
			json_string(keys[i], strlen(keys[i]));
			putchar(':');
			json_string(value ? value : "", value ? strlen(value) : 0);
		}
		free((void *) keys);
	}
	printf("},\"time\":%lld,\"data\":", (long long) natsMsg_GetTime(msg));
	json_string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
	printf("}\n");
}

static void
write_raw(natsMsg *msg, FILE *out)
{
	const char **keys = NULL;
	int count = 0;
	int i;

	fprintf(out, "S %s\n", natsMsg_GetSubject(msg));
	if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK)
	{
		for (i = 0; i < count; i++)
		{
			const char *value = NULL;

			natsMsgHeader_Get(msg, keys[i], &value);
			fprintf(out, "H %s\t%s\n", keys[i], value ? value : "");
		}
		free((void *) keys);
	}
	fprintf(out, "D %d\n", natsMsg_GetDataLength(msg));
	fwrite(natsMsg_GetData(msg), 1, natsMsg_GetDataLength(msg), out);
	fputc('\n', out);
}

static FILE *raw_out;

/*
 * Whether the stream has a leader and every replica is current: a node
 * restarted a moment ago answers from the state it had when it stopped
 * (nats-server 2.9), so a read before then may miss acknowledged messages.
 */
static bool
settled(const jsStreamInfo *si)
{
	int i;

	if (si->Cluster == NULL)
		return true;
	if (si->Cluster->Leader == NULL || si->Cluster->Leader[0] == '\0')
		return false;
	for (i = 0; i < si->Cluster->ReplicasLen; i++)
	{
		const jsPeerInfo *peer = si->Cluster->Replicas[i];

		if (!peer->Current || peer->Offline || peer->Lag != 0)
			return false;
	}
	return true;
}

static void
dump(jsCtx *js, const char *stream)
{
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;
	natsStatus s;
	uint64_t seq;

	s = js_GetStreamInfo(&si, js, stream, NULL, &code);
	if (s != NATS_OK)
		fail("stream info", s, code);
	if (!settled(si))
	{
		fprintf(stderr, "dump: the stream's replicas are not all current yet\n");
		exit(3);
	}
	for (seq = si->State.FirstSeq; seq > 0 && seq <= si->State.LastSeq; seq++)
	{
		natsMsg *msg = NULL;

		s = js_GetMsg(&msg, js, stream, seq, NULL, &code);
		if (s == NATS_NOT_FOUND)
			continue;
		if (s != NATS_OK)
			fail("get message", s, code);
		if (raw_out)
			write_raw(msg, raw_out);
		else
			print_message(msg, seq);
		natsMsg_Destroy(msg);
	}
	jsStreamInfo_Destroy(si);
}

static double
now_s(void)
{
	return nats_NowInNanoSeconds() / 1e9;
}

/* A JetStream API request; the answer printed, an error answer a failure. */
static void
api(natsConnection *nc, const char *subject, const char *json)
{
	natsMsg *reply = NULL;
	natsStatus s = natsConnection_RequestString(&reply, nc, subject, json, 10000);
	const char *answer;

	if (s != NATS_OK)
		fail("request", s, 0);
	answer = natsMsg_GetData(reply) ? natsMsg_GetData(reply) : "";
	printf("%s\n", answer);
	if (strstr(answer, "\"error\"") != NULL)
	{
		fprintf(stderr, "api %s: %s\n", subject, answer);
		exit(1);
	}
	natsMsg_Destroy(reply);
}

/* Publishes dumpraw's records; "<count> <seconds>". */
static void
publish(jsCtx *js, const char *file)
{
	FILE *in = fopen(file, "r");
	char line[8192];
	char subject[8192] = "";
	char names[16][8192];
	char values[16][8192];
	int nheaders = 0;
	long count = 0;
	double start = now_s();
	natsStatus s;

	if (in == NULL)
	{
		perror(file);
		exit(1);
	}
	while (fgets(line, sizeof(line), in))
	{
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == 'S')
		{
			snprintf(subject, sizeof(subject), "%s", line + 2);
			nheaders = 0;
		}
		else if (line[0] == 'H' && nheaders < 16)
		{
			char *tab = strchr(line + 2, '\t');

			if (tab == NULL)
				continue;
			*tab = '\0';
			snprintf(names[nheaders], sizeof(names[0]), "%s", line + 2);
			snprintf(values[nheaders], sizeof(values[0]), "%s", tab + 1);
			nheaders++;
		}
		else if (line[0] == 'D')
		{
			int len = atoi(line + 2);
			char *data = malloc(len + 1);
			natsMsg *msg = NULL;
			int i;

			if (fread(data, 1, len + 1, in) != (size_t) len + 1)
				break;
			natsMsg_Create(&msg, subject, NULL, data, len);
			for (i = 0; i < nheaders; i++)
				natsMsgHeader_Set(msg, names[i], values[i]);
			do
				s = js_PublishMsgAsync(js, &msg, NULL);
			while (s == NATS_TIMEOUT);
			if (s != NATS_OK)
				fail("publish", s, 0);
			natsMsg_Destroy(msg);
			free(data);
			count++;
		}
	}
	fclose(in);
	s = js_PublishAsyncComplete(js, NULL);
	if (s != NATS_OK)
		fail("publish complete", s, 0);
	printf("%ld %.3f\n", count, now_s() - start);
}

int
main(int argc, char **argv)
{
	natsConnection *nc = NULL;
	jsCtx *js;
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;
	natsStatus s;

	if (argc < 4)
	{
		fprintf(stderr, "usage: nats_tool create|dump|leader|purge <servers> <stream> ...\n");
		return 2;
	}
	if (strcmp(argv[1], "publish") == 0 && argc >= 6)
		max_pending = atoll(argv[5]);
	js = connect_js(argv[2], &nc);
	if (strcmp(argv[1], "create") == 0 && argc >= 7)
		create(js, argv, argc);
	else if (strcmp(argv[1], "dump") == 0)
		dump(js, argv[3]);
	else if (strcmp(argv[1], "dumpraw") == 0 && argc >= 5)
	{
		raw_out = fopen(argv[4], "w");
		if (raw_out == NULL)
		{
			perror(argv[4]);
			return 1;
		}
		dump(js, argv[3]);
		fclose(raw_out);
	}
	else if (strcmp(argv[1], "publish") == 0 && argc >= 6)
		publish(js, argv[4]);
	else if (strcmp(argv[1], "api") == 0 && argc >= 5)
		api(nc, argv[3], argv[4]);
	else if (strcmp(argv[1], "leader") == 0)
	{
		s = js_GetStreamInfo(&si, js, argv[3], NULL, &code);
		if (s != NATS_OK)
			fail("stream info", s, code);
		printf("%s\n", si->Cluster && si->Cluster->Leader ? si->Cluster->Leader : "");
		jsStreamInfo_Destroy(si);
	}
	else if (strcmp(argv[1], "delete") == 0)
	{
		s = js_DeleteStream(js, argv[3], NULL, &code);
		if (s != NATS_OK)
			fail("delete", s, code);
		printf("deleted\n");
	}
	else if (strcmp(argv[1], "purge") == 0)
	{
		s = js_PurgeStream(js, argv[3], NULL, &code);
		if (s != NATS_OK)
			fail("purge", s, code);
		printf("purged\n");
	}
	else
	{
		fprintf(stderr, "unknown command or arguments\n");
		return 2;
	}
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return 0;
}
