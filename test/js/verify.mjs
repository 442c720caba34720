// verify.mjs -- checks replicant's signatures with the official Standard
// Webhooks library, as a sink written in JavaScript would.
//
//   node verify.mjs SECRET [raw] < requests
//
// stdin: JSON lines {"webhook_id", "headers", "body_base64"}, as printed by
// `replicant_sink.py bodies --raw`.  SECRET is given as create_pipeline got
// it; "raw" hands it to the library as bytes (its format for secrets not of
// the "whsec_" form).  Prints one line per request, in order:
// "ok <webhook-id>" or "failed <webhook-id>: <the library's error>".
import { createInterface } from 'node:readline';
import { Webhook } from 'standardwebhooks';

const [secret, form] = process.argv.slice(2);
const hook = form === 'raw'
	? new Webhook(Buffer.from(secret, 'utf8'), { format: 'raw' })
	: new Webhook(secret);

for await (const line of createInterface({ input: process.stdin })) {
	if (line.trim() === '')
		continue;
	const { webhook_id: id, headers, body_base64: body } = JSON.parse(line);
	try {
		hook.verify(Buffer.from(body, 'base64'), headers);
		console.log(`ok ${id}`);
	} catch (e) {
		console.log(`failed ${id}: ${e.message}`);
	}
}
