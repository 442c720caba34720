// cloudevents-check.mjs -- parses replicant's format => 'cloudevents'
// requests with the official CloudEvents SDK, as a sink written in
// JavaScript would.
//
//   node cloudevents-check.mjs < requests
//
// stdin: JSON lines {"webhook_id", "headers", "body_base64"}, as printed by
// `replicant_sink.py bodies --raw`.  Prints one line per event, in order:
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
		if (!Array.isArray(events))
			throw new Error('not a batch');
		for (const event of events) {
			event.validate();
			const { data, ...attributes } = event.toJSON();
			console.log(JSON.stringify({ webhook_id, event: attributes }));
		}
	} catch (e) {
		console.log(JSON.stringify({ webhook_id, error: String(e.message ?? e) + ' ' + JSON.stringify(e.errors ?? '') }));
	}
}
