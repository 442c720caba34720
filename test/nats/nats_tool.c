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
 *   nats_tool leader <servers> <stream>
 *   nats_tool purge <servers> <stream>
 *
 * <servers> is a comma-separated list of nats://host:port URLs.
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
	if (s == NATS_OK)
		s = natsConnection_Connect(nc, opts);
	if (s != NATS_OK)
		fail("connect", s, 0);
	jsOptions_Init(&jo);
	jo.Wait = 10000;
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
	printf("},\"data\":");
	json_string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
	printf("}\n");
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
	for (seq = si->State.FirstSeq; seq > 0 && seq <= si->State.LastSeq; seq++)
	{
		natsMsg *msg = NULL;

		s = js_GetMsg(&msg, js, stream, seq, NULL, &code);
		if (s == NATS_NOT_FOUND)
			continue;
		if (s != NATS_OK)
			fail("get message", s, code);
		print_message(msg, seq);
		natsMsg_Destroy(msg);
	}
	jsStreamInfo_Destroy(si);
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
	js = connect_js(argv[2], &nc);
	if (strcmp(argv[1], "create") == 0 && argc >= 7)
		create(js, argv, argc);
	else if (strcmp(argv[1], "dump") == 0)
		dump(js, argv[3]);
	else if (strcmp(argv[1], "leader") == 0)
	{
		s = js_GetStreamInfo(&si, js, argv[3], NULL, &code);
		if (s != NATS_OK)
			fail("stream info", s, code);
		printf("%s\n", si->Cluster && si->Cluster->Leader ? si->Cluster->Leader : "");
		jsStreamInfo_Destroy(si);
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
