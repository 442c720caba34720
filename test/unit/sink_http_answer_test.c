/*
 * sink_http_answer_test.c
 *		Unit tests of src/sink_http_answer.c: how an HTTP sink's answer is
 *		classified.  Built and run by `make unit`; no server needed.
 *
 * Prints one line per failed check and ends with "N checks, M failed";
 * exits non-zero on any failure.
 */
#include "postgres.h"

#include "sink_http_answer.h"
#include "unit_check.h"

/* ClickHouse-like: 60 (unknown table) and 81 (unknown database) halt */
static bool
final_code(int code)
{
	return code == 60 || code == 81;
}

static const ReplicantSinkAnswerRules plain_rules = {5000, 2000, NULL};
static const ReplicantSinkAnswerRules code_rules = {5000, 2000, final_code};

/* An answer with a status line after a completed transfer. */
static ReplicantSinkAnswer
answer_with(CURLcode code, long status)
{
	ReplicantSinkAnswer answer = {0};

	answer.code = code;
	answer.status = status;
	answer.body_start = "";
	answer.elapsed_ms = 12.5;
	return answer;
}

static ReplicantSinkResult
classify(const ReplicantSinkAnswer *answer, const ReplicantSinkAnswerRules *rules)
{
	ReplicantSinkResult result;

	/* garbage first: the classification must set every field */
	memset(&result, 0x7f, sizeof(result));
	replicant_sink_answer_classify(answer, rules, 1000000000, &result);
	return result;
}

static void
test_status_classes(void)
{
	static const struct
	{
		long status;
		ReplicantSinkOutcome outcome;
	} cases[] = {
		{100, REPLICANT_SINK_REJECTED},
		{199, REPLICANT_SINK_REJECTED},
		{200, REPLICANT_SINK_OK},
		{201, REPLICANT_SINK_OK},
		{204, REPLICANT_SINK_OK},
		{299, REPLICANT_SINK_OK},
		{300, REPLICANT_SINK_REJECTED},
		{301, REPLICANT_SINK_REJECTED},
		{304, REPLICANT_SINK_REJECTED},
		{307, REPLICANT_SINK_REJECTED},
		{400, REPLICANT_SINK_REJECTED},
		{401, REPLICANT_SINK_REJECTED},
		{403, REPLICANT_SINK_REJECTED},
		{404, REPLICANT_SINK_REJECTED},
		{408, REPLICANT_SINK_RETRY},
		{409, REPLICANT_SINK_REJECTED},
		{410, REPLICANT_SINK_GONE},
		{413, REPLICANT_SINK_TOO_LARGE},
		{422, REPLICANT_SINK_REJECTED},
		{425, REPLICANT_SINK_RETRY},
		{429, REPLICANT_SINK_RETRY},
		{499, REPLICANT_SINK_REJECTED},
		{500, REPLICANT_SINK_RETRY},
		{502, REPLICANT_SINK_RETRY},
		{503, REPLICANT_SINK_RETRY},
		{504, REPLICANT_SINK_RETRY},
		{599, REPLICANT_SINK_RETRY},
		{600, REPLICANT_SINK_REJECTED},
		{0, REPLICANT_SINK_REJECTED},
	};
	int i;

	for (i = 0; i < lengthof(cases); i++)
	{
		char what[64];

		snprintf(what, sizeof(what), "outcome of HTTP %ld", cases[i].status);
		CHECK_INT(replicant_sink_answer_outcome(cases[i].status), cases[i].outcome, what);
	}
}

static void
test_classify_answers(void)
{
	ReplicantSinkAnswer a;
	ReplicantSinkResult r;

	a = answer_with(CURLE_OK, 200);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_OK, "200 acknowledges");
	CHECK_INT(r.http_status, 200, "200 is kept");
	CHECK_STR(r.error, "", "no error text on 200");
	CHECK_INT(r.retry_after_ms, -1, "no Retry-After on 200");
	CHECK_INT(r.error_code, 0, "no error code on 200");
	CHECK(!r.refused, "200 is not refused");
	CHECK(r.elapsed_ms == 12.5, "elapsed time is passed on");

	a = answer_with(CURLE_OK, 503);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "503 retries");
	CHECK_STR(r.error, "HTTP 503", "503's text");

	a = answer_with(CURLE_OK, 413);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_TOO_LARGE, "413 is too large");
	CHECK_STR(r.error, "HTTP 413", "413's text");

	a = answer_with(CURLE_OK, 410);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_GONE, "410 is gone");

	a = answer_with(CURLE_OK, 400);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_REJECTED, "400 halts");
	CHECK_STR(r.error, "HTTP 400", "400's text");

	/* a status before the transfer broke counts only when it says no */
	a = answer_with(CURLE_SEND_ERROR, 413);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_TOO_LARGE, "413 before a broken upload");
	CHECK_INT(r.http_status, 413, "413 before a broken upload is kept");

	a = answer_with(CURLE_RECV_ERROR, 200);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "half-received 200 retries");
	CHECK_INT(r.http_status, 0, "half-received 200 is no HTTP answer");
	CHECK_STR(r.error, "connection to sink was reset", "half-received 200's text");

	a = answer_with(CURLE_PARTIAL_FILE, 100);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "half-received 1xx retries");

	/* a completed transfer without a status line */
	a = answer_with(CURLE_OK, 0);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "no status line retries");
	CHECK_STR(r.error, "sink sent an invalid HTTP answer", "no status line's text");

	a = answer_with(CURLE_COULDNT_CONNECT, 0);
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "refused connection retries");
	CHECK(r.refused, "refused connection is refused");
	a = answer_with(CURLE_COULDNT_RESOLVE_HOST, 0);
	r = classify(&a, &plain_rules);
	CHECK(!r.refused, "an unresolved host is not refused");

	a = answer_with(CURLE_SEND_ERROR, 0);
	a.body_failed = true;
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "unreadable body retries");
	CHECK_STR(r.error, "could not read batch body", "unreadable body's text");

	memset(&r, 0x7f, sizeof(r));
	replicant_sink_answer_signing_failed(&r);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "failed signing retries");
	CHECK_STR(r.error, "could not read batch body", "failed signing's text");
	CHECK_INT(r.retry_after_ms, -1, "failed signing has no Retry-After");
	CHECK_INT(r.http_status, 0, "failed signing has no status");
}

static void
test_retry_after(void)
{
	time_t now = curl_getdate("Sun, 06 Nov 1994 08:49:37 GMT", NULL);
	ReplicantSinkAnswer a;
	ReplicantSinkResult r;

	CHECK(now != (time_t) -1, "curl_getdate reads an HTTP date");
	CHECK_INT(replicant_sink_answer_retry_after_ms("0", now), 0, "0 s");
	CHECK_INT(replicant_sink_answer_retry_after_ms("1", now), 1000, "1 s");
	CHECK_INT(replicant_sink_answer_retry_after_ms("120", now), 120000, "120 s");
	CHECK_INT(replicant_sink_answer_retry_after_ms("600", now), 600000, "600 s, the cap");
	CHECK_INT(replicant_sink_answer_retry_after_ms("601", now),
			  REPLICANT_SINK_MAX_RETRY_AFTER_MS, "601 s is capped");
	CHECK_INT(replicant_sink_answer_retry_after_ms("99999999999999999999999999", now),
			  REPLICANT_SINK_MAX_RETRY_AFTER_MS, "a huge number is capped, no overflow");
	CHECK_INT(replicant_sink_answer_retry_after_ms("12abc", now), -1, "digits then garbage");
	CHECK_INT(replicant_sink_answer_retry_after_ms("1.5", now), -1, "a fraction");
	CHECK_INT(replicant_sink_answer_retry_after_ms("-5", now), -1, "a negative number");
	CHECK_INT(replicant_sink_answer_retry_after_ms("soon", now), -1, "garbage");
	CHECK_INT(replicant_sink_answer_retry_after_ms("", now), -1, "empty");

	CHECK_INT(replicant_sink_answer_retry_after_ms("Sun, 06 Nov 1994 08:50:37 GMT", now),
			  60000, "HTTP date a minute ahead");
	CHECK_INT(replicant_sink_answer_retry_after_ms("Sunday, 06-Nov-94 08:51:37 GMT", now),
			  120000, "RFC 850 date two minutes ahead");
	CHECK_INT(replicant_sink_answer_retry_after_ms("Sun Nov  6 08:49:47 1994", now),
			  10000, "asctime date ten seconds ahead");
	CHECK_INT(replicant_sink_answer_retry_after_ms("Sun, 06 Nov 1994 08:00:00 GMT", now),
			  0, "HTTP date in the past");
	CHECK_INT(replicant_sink_answer_retry_after_ms("Mon, 07 Nov 1994 08:49:37 GMT", now),
			  REPLICANT_SINK_MAX_RETRY_AFTER_MS, "HTTP date a day ahead is capped");

	/* through the classification, at the fixed time classify() passes */
	a = answer_with(CURLE_OK, 503);
	a.retry_after = "30";
	r = classify(&a, &plain_rules);
	CHECK_INT(r.retry_after_ms, 30000, "503 with Retry-After: 30");
	a = answer_with(CURLE_OK, 429);
	a.retry_after = "whenever";
	r = classify(&a, &plain_rules);
	CHECK_INT(r.retry_after_ms, -1, "429 with an unparsable Retry-After");
	CHECK_STR(r.error, "HTTP 429", "429's text does not quote Retry-After");
	a = answer_with(CURLE_RECV_ERROR, 0);
	a.retry_after = "30";
	r = classify(&a, &plain_rules);
	CHECK_INT(r.retry_after_ms, -1, "no answer, no Retry-After");
}

static void
test_transport_messages(void)
{
	static const struct
	{
		CURLcode code;
		const char *message;
	} cases[] = {
		{CURLE_COULDNT_RESOLVE_HOST, "could not resolve sink host name"},
		{CURLE_COULDNT_RESOLVE_PROXY, "could not resolve sink host name"},
		{CURLE_COULDNT_CONNECT, "could not connect to sink"},
		{CURLE_SEND_ERROR, "connection to sink was reset"},
		{CURLE_RECV_ERROR, "connection to sink was reset"},
		{CURLE_GOT_NOTHING, "sink closed the connection without answering"},
		{CURLE_PARTIAL_FILE, "sink closed the connection during its answer"},
		{CURLE_WEIRD_SERVER_REPLY, "sink sent an invalid HTTP answer"},
		{CURLE_HTTP2, "sink sent an invalid HTTP answer"},
		{CURLE_HTTP2_STREAM, "sink sent an invalid HTTP answer"},
		{CURLE_PEER_FAILED_VERIFICATION, "could not verify the sink's TLS certificate"},
		{CURLE_SSL_CACERT_BADFILE, "could not load the CA file for the sink"},
		{CURLE_SSL_CONNECT_ERROR, "could not establish a TLS connection to sink"},
		{CURLE_SSL_CERTPROBLEM, "could not establish a TLS connection to sink"},
		{CURLE_SSL_CIPHER, "could not establish a TLS connection to sink"},
		{CURLE_SSL_ENGINE_NOTFOUND, "could not establish a TLS connection to sink"},
		{CURLE_SSL_ENGINE_SETFAILED, "could not establish a TLS connection to sink"},
		{CURLE_SSL_ISSUER_ERROR, "could not establish a TLS connection to sink"},
		{CURLE_SSL_CRL_BADFILE, "could not establish a TLS connection to sink"},
		{CURLE_SEND_FAIL_REWIND, "could not rewind batch body"},
		{CURLE_READ_ERROR, "could not read batch body"},
		{CURLE_URL_MALFORMAT, "sink URL is not valid"},
		{CURLE_UNSUPPORTED_PROTOCOL, "sink URL scheme is not allowed"},
		{CURLE_OUT_OF_MEMORY, "out of memory while sending batch"},
		{CURLE_TOO_MANY_REDIRECTS, "could not send batch to sink (libcurl error 47)"},
		{CURLE_ABORTED_BY_CALLBACK, "could not send batch to sink (libcurl error 42)"},
		{CURLE_FAILED_INIT, "could not send batch to sink (libcurl error 2)"},
	};
	int i;

	for (i = 0; i < lengthof(cases); i++)
	{
		ReplicantSinkAnswer a = answer_with(cases[i].code, 0);
		ReplicantSinkResult r;

		/* what the sink sent never shows, whatever it was */
		a.body_start = "Code: 60, https://user:secret@sink/";
		a.retry_after = "secret";
		a.error_code = 60;
		r = classify(&a, &code_rules);
		CHECK_STR(r.error, cases[i].message, curl_easy_strerror(cases[i].code));
		CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "a transport error retries");
		CHECK_INT(r.http_status, 0, "a transport error has no status");
		CHECK_INT(r.error_code, 0, "a transport error has no sink code");
		CHECK(strstr(r.error, "secret") == NULL && strstr(r.error, "sink/") == NULL,
			  "a transport error quotes nothing");
	}
	CHECK(replicant_sink_answer_transport_message(CURLE_OPERATION_TIMEDOUT) == NULL,
		  "a timeout has no fixed text");
}

static void
test_timeouts(void)
{
	ReplicantSinkAnswer a = answer_with(CURLE_OPERATION_TIMEDOUT, 0);
	ReplicantSinkAnswerRules rules = plain_rules;
	ReplicantSinkResult r;

	a.connected = true;
	r = classify(&a, &rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "a timeout retries");
	CHECK_STR(r.error, "sink did not answer within 5000 ms", "answer timed out");

	a.connected = false;
	a.hard_timeout = true;
	r = classify(&a, &rules);
	CHECK_STR(r.error, "sink did not answer within 5000 ms", "our own deadline");

	a.hard_timeout = false;
	r = classify(&a, &rules);
#if LIBCURL_VERSION_NUM >= 0x075000
	CHECK_STR(r.error, "could not connect to sink within 2000 ms", "connect timed out");
	rules.http_timeout_ms = 1000;
	r = classify(&a, &rules);
	CHECK_STR(r.error, "could not connect to sink within 1000 ms",
			  "connect ended by the shorter request timeout");
	rules.http_timeout_ms = 0;
	r = classify(&a, &rules);
	CHECK_STR(r.error, "could not connect to sink within 2000 ms",
			  "connect timeout without a request timeout");
	rules.connect_timeout_ms = 0;
	rules.http_timeout_ms = 3000;
	r = classify(&a, &rules);
	CHECK_STR(r.error, "could not connect to sink within 3000 ms",
			  "libcurl's connect timeout within the request timeout");
	rules.http_timeout_ms = 0;
	r = classify(&a, &rules);
	CHECK_STR(r.error, "sink did not answer within 0 ms", "no limits configured");
#else
	CHECK_STR(r.error, "sink did not answer within 5000 ms", "connect not known");
#endif
}

static void
test_codes(void)
{
	ReplicantSinkAnswer a;
	ReplicantSinkResult r;

	a = answer_with(CURLE_OK, 404);
	a.error_code = 60;
	r = classify(&a, &code_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_REJECTED, "a final code halts");
	CHECK_INT(r.error_code, 60, "the final code is kept");
	CHECK_STR(r.error, "HTTP 404, error code 60", "a final code's text");

	a = answer_with(CURLE_OK, 404);
	a.error_code = 241;
	r = classify(&a, &code_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "another code retries, whatever the status");
	CHECK_STR(r.error, "HTTP 404, error code 241", "another code's text");

	a = answer_with(CURLE_OK, 500);
	a.body_start = "Code: 81, e.displayText()";
	r = classify(&a, &code_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_REJECTED, "a final code from the body halts");
	CHECK_INT(r.error_code, 81, "the body's code is kept");
	CHECK_STR(r.error, "HTTP 500, error code 81", "the body is not quoted");

	a = answer_with(CURLE_OK, 500);
	a.error_code = 241;
	a.body_start = "Code: 60, e.displayText()";
	r = classify(&a, &code_rules);
	CHECK_INT(r.error_code, 241, "the header's code wins over the body's");
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "the header's code decides");

	a = answer_with(CURLE_OK, 413);
	a.error_code = 241;
	r = classify(&a, &code_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_TOO_LARGE, "413 with another code stays too large");
	a.error_code = 60;
	r = classify(&a, &code_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_REJECTED, "413 with a final code halts");

	a = answer_with(CURLE_OK, 500);
	a.body_start = "Code: -3, nonsense";
	r = classify(&a, &code_rules);
	CHECK_INT(r.error_code, 0, "a code below 1 is ignored");
	CHECK_STR(r.error, "HTTP 500", "a code below 1 leaves the status text");

	a = answer_with(CURLE_OK, 404);
	a.error_code = 60;
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_REJECTED, "without the hook the status decides");
	CHECK_INT(r.error_code, 0, "without the hook no code is kept");
	CHECK_STR(r.error, "HTTP 404", "without the hook the status text");
	a = answer_with(CURLE_OK, 503);
	a.error_code = 60;
	r = classify(&a, &plain_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_RETRY, "without the hook 503 retries");

	a = answer_with(CURLE_OK, 200);
	a.error_code = 60;
	r = classify(&a, &code_rules);
	CHECK_INT(r.outcome, REPLICANT_SINK_OK, "a code on a 2xx is ignored");
	CHECK_INT(r.error_code, 0, "a code on a 2xx is not kept");
}

int
main(void)
{
	test_status_classes();
	test_classify_answers();
	test_retry_after();
	test_transport_messages();
	test_timeouts();
	test_codes();
	return unit_check_report("sink_http_answer");
}
