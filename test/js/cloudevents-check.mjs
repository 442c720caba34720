// cloudevents-check.mjs -- parses replicant's format => 'cloudevents'
// requests with the official CloudEvents SDK, as a sink written in
// JavaScript would.
//
//   node cloudevents-check.mjs < requests
//
// stdin: JSON lines {"webhook_id", "headers", "body_base64"}, as printed by
// `replicant_sink.py bodies --raw`, or NATS messages in that shape (their
// Content-Type as "content-type").  A batch (application/cloudevents-batch+json)
// must hold an array, a structured event (application/cloudevents+json, as
// the NATS binding has it) one event.  Prints one line per event, in order:
// {"webhook_id", "event": <its attributes, data left out>} when the SDK
// parsed and validated it, or {"webhook_id", "error": <the SDK's error>}.
import { createInterface } from 'node:readline';
import { HTTP } from 'cloudevents';

for await (const line of createInterface({ input: process.stdin })) {
	if (line.trim() === '')
		continue;
	const { webhook_id, headers, body_base64 } = JSON.parse(line);
	try {
		let events = HTTP.toEvent({ headers, body: Buffer.from(body_base64, 'base64').toString('utf8') });
		const structured = /^application\/cloudevents\+json/i.test(headers['content-type'] ?? '');
		if (Array.isArray(events) === structured)
			throw new Error(structured ? 'not one event' : 'not a batch');
		if (structured)
			events = [events];
		for (const event of events) {
			event.validate();
			const { data, ...attributes } = event.toJSON();
			console.log(JSON.stringify({ webhook_id, event: attributes }));
		}
	} catch (e) {
		console.log(JSON.stringify({ webhook_id, error: String(e.message ?? e) + ' ' + JSON.stringify(e.errors ?? '') }));
	}
}
