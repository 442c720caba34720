#!/usr/bin/env python3
"""replicant_sink.py -- a reference HTTP sink for replicant (Python 3 stdlib only).

It shows what a correct sink does with replicant's batches (docs/sink-protocol.md;
docs/internals.md, sections 1 and 5):

  * verify the Standard Webhooks signature (when a secret is configured);
  * apply a batch and raise the pipeline's watermark in ONE local transaction,
    skipping every transaction whose commit_lsn <= the stored watermark (one
    watermark per pipeline and "destination", when a body names one);
    replicant re-delivers at most one batch after a crash, so with this rule
    each source transaction takes effect exactly once ("effect-once");
  * answer 2xx only after that transaction has committed.

The TAP tests use it too: it keeps counters and a log of applied transactions,
and it can inject faults (errors, hangs, resets, ...) at start or at runtime.

  replicant_sink.py serve --port N [--port-file F] --db PATH [--secret S]
                           [--keep-bodies] [--dedup-ids] [--tls-cert PEM --tls-key PEM]
                           [faults]
  replicant_sink.py dump --db PATH [--table schema.table [--counts]]
  replicant_sink.py canon < json-lines
  replicant_sink.py stats|txlog|messages|bodies --db PATH
  replicant_sink.py bodies --raw --db PATH

With --keep-bodies it also keeps, for every batch it answered 2xx, the raw
body and the request headers a test may check (see KEPT_HEADERS); `bodies`
prints them in arrival order, the body decoded, or with --raw its exact bytes
in base64 (what a signature covers).  A CloudEvents batch (a JSON array) is
only kept, not applied.

With --dedup-ids it answers a request whose webhook-id it applied already
204 and applies nothing (counted as duplicate_requests), as a Standard
Webhooks consumer does with a retry; without, it applies every request.

With --tls-cert and --tls-key it serves HTTPS instead of HTTP.

Each stored row counts the inserts, updates and reads applied to its key
("deliveries"); `dump --counts` prints them, so a test can tell a row that
was delivered twice.  `stats` lists every accepted request with its kind,
number of changes, the tables they touch and a snapshot batch's "snapshot"
object.
"""
import argparse
import base64
import contextlib
import hashlib
import hmac
import io
import json
import os
import random
import socket
import sqlite3
import ssl
import struct
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (schema TEXT, tbl TEXT, key_json TEXT, row_json TEXT,
    copies INTEGER NOT NULL DEFAULT 1, deliveries INTEGER NOT NULL DEFAULT 1,
    written INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (schema, tbl, key_json));
CREATE TABLE IF NOT EXISTS resync_marks (pipeline TEXT, schema TEXT, tbl TEXT,
    backfill_id INTEGER, mark INTEGER, swept INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (pipeline, schema, tbl, backfill_id));
CREATE TABLE IF NOT EXISTS watermarks (pipeline TEXT PRIMARY KEY, commit_lsn INTEGER);
CREATE TABLE IF NOT EXISTS txlog (seq INTEGER PRIMARY KEY, pipeline TEXT,
    commit_lsn INTEGER, xid INTEGER, nchanges INTEGER, commit_time TEXT, arrival REAL);
CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY, pipeline TEXT,
    transactional INTEGER, commit_lsn INTEGER, lsn INTEGER, prefix TEXT, content TEXT);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER);
CREATE TABLE IF NOT EXISTS accepted (seq INTEGER PRIMARY KEY, webhook_id TEXT,
    kind TEXT, transactions INTEGER, first_lsn INTEGER, last_lsn INTEGER,
    changes INTEGER, tables TEXT, snapshot TEXT);
CREATE TABLE IF NOT EXISTS bodies (seq INTEGER PRIMARY KEY, webhook_id TEXT,
    headers_json TEXT, body BLOB);
"""
COUNTERS = ("requests", "batches_applied", "transactions_applied",
            "duplicate_transactions", "changes_applied", "bad_signatures",
            "faults_injected", "resyncs_swept", "rows_swept", "watermark_resets",
            "duplicate_requests")
# redirect_stdout is process-wide: one /_cli command at a time.
CLI_LOCK = threading.Lock()
SIGNATURE_TOLERANCE = 300   # seconds; Standard Webhooks' replay protection
# Request headers --keep-bodies stores, besides every "x-..." header.
KEPT_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature",
                "user-agent", "content-type")


# ---- canonical JSON --------------------------------------------------------
# Numbers keep their exact text: a numeric(40,20) column must not be rounded
# through a float before we compare it with the source.
class Num(str):
    """A JSON number, kept as the text it was written with."""


def loads(text):
    return json.loads(text, parse_float=Num, parse_int=Num)


def canon(value):
    """Like json.dumps(value, sort_keys=True, separators=(',', ':'))."""
    if isinstance(value, Num):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + canon(value[k])
                              for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canon(v) for v in value) + "]"
    return json.dumps(value)


def num(value):
    return None if value is None else int(value)


# ---- storage ---------------------------------------------------------------
def open_db(path):
    db = sqlite3.connect(path, timeout=30, isolation_level=None,
                         check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")   # a 2xx promises durability
    db.executescript(SCHEMA)
    return db


@contextmanager
def transaction(db, lock):
    """One SQLite transaction, serialized across the server's threads."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def bump(db, **deltas):
    for name, delta in deltas.items():
        db.execute("INSERT INTO counters VALUES (?, ?) ON CONFLICT (name) "
                   "DO UPDATE SET value = value + excluded.value", (name, delta))


def project(row, key):
    """The row's identity: the values of the key's columns, canonical."""
    return canon({col: row.get(col) for col in key})


def open_mark(db, where):
    """The mark of a resync of the table whose "last" has not swept yet, or 0."""
    found = db.execute("SELECT max(mark) FROM resync_marks WHERE schema=? AND tbl=? "
                       "AND swept=0", where).fetchone()
    return found[0] or 0


def apply_change(db, c, seq):
    """Applies one change; seq (the request's) marks the rows it writes."""
    op, where = c["op"], (c["schema"], c["table"])
    key = c.get("key")
    if op == "truncate":
        db.execute("DELETE FROM rows WHERE schema=? AND tbl=?", where)
        return
    old_key = canon(key) if key is not None else None
    if op == "delete":
        db.execute("DELETE FROM rows WHERE schema=? AND tbl=? AND key_json=?",
                   where + (old_key,))
        return
    if op not in ("insert", "update", "read"):
        raise ValueError("unrecognized op")
    row = c["new"]
    if key is None:
        # No replica identity: only inserts (and reads) exist, and identical
        # rows may repeat, so the table is a bag of whole rows.  During a
        # resync a row not sent since its "first" counts its copies anew.
        db.execute("INSERT INTO rows (schema, tbl, key_json, row_json, written) "
                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT (schema, tbl, key_json) DO UPDATE "
                   "SET copies = CASE WHEN written < ? THEN 1 ELSE copies + 1 END, "
                   "deliveries = deliveries + 1, written = excluded.written",
                   where + (canon(row), canon(row), seq, open_mark(db, where)))
        return
    if op == "update":
        # Columns in "unchanged" are absent from "new": keep the stored value.
        stored = db.execute("SELECT row_json FROM rows WHERE schema=? AND tbl=? "
                            "AND key_json=?", where + (old_key,)).fetchone()
        row = {**(loads(stored[0]) if stored else {}), **row}
    new_key = project(row, key)
    if new_key != old_key:   # the key changed: the old row goes away
        db.execute("DELETE FROM rows WHERE schema=? AND tbl=? AND key_json=?",
                   where + (old_key,))
    # deliveries counts every insert, update and read applied to the key.
    db.execute("INSERT INTO rows (schema, tbl, key_json, row_json, written) "
               "VALUES (?, ?, ?, ?, ?) ON CONFLICT (schema, tbl, key_json) DO UPDATE "
               "SET row_json = excluded.row_json, deliveries = deliveries + 1, "
               "written = excluded.written",
               where + (new_key, canon(row), seq))


def store_message(db, pipeline, m, transactional, commit_lsn=None):
    db.execute("INSERT INTO messages (pipeline, transactional, commit_lsn, lsn, "
               "prefix, content) VALUES (?, ?, ?, ?, ?, ?)",
               (pipeline, transactional, commit_lsn, num(m.get("lsn")),
                m.get("prefix"), m.get("content")))


def resync_marker(db, pipeline, snapshot, seq, counts, marker):
    """A resync's "first" marks the table; its "last" sweeps what was not sent
    since (docs/sink-protocol.md, "Resync"), once: a "last" sent again (its
    id is fixed) finds the sweep recorded and sweeps nothing, not even rows
    sent after it."""
    where = (snapshot["schema"], snapshot["table"])
    ident = (pipeline,) + where + (int(snapshot["backfill_id"]),)
    if marker == "first":
        # A "first" sent again keeps the earlier mark: nothing but markers
        # is sent in between.
        db.execute("INSERT INTO resync_marks (pipeline, schema, tbl, backfill_id, mark) "
                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", ident + (seq,))
    else:
        found = db.execute("SELECT mark, swept FROM resync_marks WHERE pipeline=? AND "
                           "schema=? AND tbl=? AND backfill_id=?", ident).fetchone()
        if found is None or found[1]:
            return
        # "sweep": false where the publications publish no delete or truncate.
        swept = 0
        if snapshot["resync"].get("sweep", True):
            swept = db.execute("DELETE FROM rows WHERE schema=? AND tbl=? AND written < ?",
                               where + (found[0],)).rowcount
        db.execute("UPDATE resync_marks SET swept=1 WHERE pipeline=? AND schema=? "
                   "AND tbl=? AND backfill_id=?", ident)
        counts["resyncs_swept"] += 1
        counts["rows_swept"] += swept


def pg_lsn(text):
    """A pg_lsn's text ("16/B374D848") as a number, as commit_lsn comes."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def reset_watermark(db, pipeline, resync, counts):
    """A resync's "last" whose lost_to is below the watermark: the server's WAL
    went back (a promoted standby that lagged), so the LSNs above lost_to are
    the new primary's and must not be taken for re-deliveries.  The same
    lost_to on every "last" of the resync: the first one resets, the others
    (and a "last" sent again) find nothing to do."""
    lost_to = resync.get("lost_to")
    # One destination's resync keeps the slot: the WAL did not go back, and
    # the commits streamed beside its reads are above lost_to.
    if lost_to is None or resync.get("beside_stream"):
        return
    lost_to = pg_lsn(lost_to)
    found = db.execute("SELECT commit_lsn FROM watermarks WHERE pipeline=?",
                       (pipeline,)).fetchone()
    if found is not None and found[0] > lost_to:
        db.execute("UPDATE watermarks SET commit_lsn=? WHERE pipeline=?",
                   (lost_to, pipeline))
        counts["watermark_resets"] += 1


def apply_batch(db, batch, webhook_id, arrival):
    """Applies one batch; the caller wraps it in a single SQLite transaction."""
    pipeline, kind = batch.get("pipeline"), batch.get("kind")
    # A pipeline's destinations other than "default" say so: each has its
    # own watermark and resync marks (the name holds no ".").
    stream = pipeline + "." + batch["destination"] if batch.get("destination") else pipeline
    counts = dict(requests=1, batches_applied=1, transactions_applied=0,
                  duplicate_transactions=0, changes_applied=0, resyncs_swept=0,
                  rows_swept=0, watermark_resets=0)
    # This request's number (its row in "accepted"): what its changes write.
    seq = db.execute("SELECT coalesce(max(seq), 0) + 1 FROM accepted").fetchone()[0]
    lsns = []
    if kind == "changes":
        found = db.execute("SELECT commit_lsn FROM watermarks WHERE pipeline=?",
                           (stream,)).fetchone()
        watermark = found[0] if found else -1
        for txn in batch["transactions"]:
            lsn = int(txn["commit_lsn"])
            lsns.append(lsn)
            if lsn <= watermark:   # already applied: a re-delivery
                counts["duplicate_transactions"] += 1
                continue
            for change in txn["changes"]:
                apply_change(db, change, seq)
            for m in txn.get("messages") or []:
                store_message(db, pipeline, m, 1, lsn)
            db.execute("INSERT INTO txlog (pipeline, commit_lsn, xid, nchanges, "
                       "commit_time, arrival) VALUES (?, ?, ?, ?, ?, ?)",
                       (pipeline, lsn, num(txn.get("xid")), len(txn["changes"]),
                        txn.get("commit_time"), arrival))
            counts["transactions_applied"] += 1
            counts["changes_applied"] += len(txn["changes"])
            watermark = lsn
        db.execute("INSERT INTO watermarks VALUES (?, ?) ON CONFLICT (pipeline) "
                   "DO UPDATE SET commit_lsn = excluded.commit_lsn",
                   (stream, watermark))
    elif kind == "snapshot":
        # Reads carry no LSN: upserting them like inserts is idempotent.
        snapshot = batch.get("snapshot") or {}
        if snapshot.get("resync") and snapshot.get("first"):
            resync_marker(db, stream, snapshot, seq, counts, "first")
        for change in batch["changes"]:
            apply_change(db, change, seq)
        counts["changes_applied"] += len(batch["changes"])
        if snapshot.get("resync") and snapshot.get("last"):
            resync_marker(db, stream, snapshot, seq, counts, "last")
            reset_watermark(db, stream, snapshot["resync"], counts)
    elif kind == "message":   # non-transactional logical messages
        for m in batch.get("messages") or [batch["message"]]:
            store_message(db, pipeline, m, 0)
    else:
        raise ValueError("unrecognized batch kind")
    bump(db, **counts)
    # What the request carried: its changes, the tables they touch (in order
    # of first appearance) and a snapshot batch's "snapshot" object.
    changes = (batch.get("changes") or []) + [
        c for txn in batch.get("transactions") or [] for c in txn["changes"]]
    tables = list(dict.fromkeys(c["schema"] + "." + c["table"] for c in changes))
    snapshot = batch.get("snapshot")
    db.execute("INSERT INTO accepted (webhook_id, kind, transactions, first_lsn, "
               "last_lsn, changes, tables, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (webhook_id, kind, len(lsns), lsns[0] if lsns else None,
                lsns[-1] if lsns else None, len(changes), json.dumps(tables),
                canon(snapshot) if snapshot is not None else None))


def keep_body(db, headers, body):
    """Stores a batch as received: raw body and the headers that matter."""
    kept = {}
    for name, value in headers.items():
        name = name.lower()
        if name in KEPT_HEADERS or name.startswith("x-"):
            # A repeated header reads as one, comma-joined (RFC 9110 5.3).
            kept[name] = kept[name] + ", " + value if name in kept else value
    kept_json = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    db.execute("INSERT INTO bodies (webhook_id, headers_json, body) VALUES (?, ?, ?)",
               (headers.get("webhook-id"), kept_json, body))


# ---- signatures ------------------------------------------------------------
def signature_ok(secret, headers, body):
    msg_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and stamp and signatures):
        return False
    try:
        if abs(time.time() - int(stamp)) > SIGNATURE_TOLERANCE:
            return False
        key = (base64.b64decode(secret[6:]) if secret.startswith("whsec_")
               else secret.encode())
    except ValueError:
        return False
    mac = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256)
    expected = base64.b64encode(mac.digest()).decode()
    # Several space-separated "v1,<sig>" may be sent (key rotation): any will do.
    return any(version == "v1" and hmac.compare_digest(sig, expected)
               for version, _, sig in (s.partition(",") for s in signatures.split()))


# ---- faults ----------------------------------------------------------------
FAULT_DEFAULTS = dict(fail_status=None, fail_rate=1.0, fail_first=None, fail_skip=0,
                      retry_after=None, delay_ms=0, hold_answers=False, hang=False,
                      reset=False, redirect=None, max_body=None)


class Faults:
    def __init__(self, settings):
        self.lock = threading.Lock()
        self.settings = dict(FAULT_DEFAULTS)
        self.update(settings)

    def update(self, changes):
        """Sets the given faults; {"clear": true} first restores the defaults."""
        with self.lock:
            if changes.pop("clear", False):
                self.settings = dict(FAULT_DEFAULTS)
            unknown = set(changes) - set(FAULT_DEFAULTS)
            if unknown:
                raise ValueError("unrecognized fault " + ", ".join(sorted(unknown)))
            self.settings.update(changes)
            self.failed = 0   # restarts the --fail-first count
            self.passed = 0   # and the fail_skip count before it

    def show(self):
        with self.lock:
            return dict(self.settings, failed_so_far=self.failed)

    def pick(self, body_size):
        """Returns the fault for this request: None, a status, or a word."""
        with self.lock:
            f = self.settings
            if f["max_body"] is not None and body_size > f["max_body"]:
                return 413
            for word in ("reset", "hang", "redirect"):
                if f[word]:
                    return word
            status = f["fail_status"] or (503 if f["fail_first"] else None)
            if f["fail_first"] is not None:
                if self.passed < f["fail_skip"]:   # these pass first
                    self.passed += 1
                    return None
                if status and self.failed < f["fail_first"]:
                    self.failed += 1
                    return status
            elif status and random.random() < f["fail_rate"]:
                return status
            return None


# ---- HTTP ------------------------------------------------------------------
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as replicant uses it

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):   # in this thread, not accept()'s
            self.request.do_handshake()
        super().setup()

    def log_request(self, code="-", size="-"):
        pass   # we log our own line in log(), without the default noise

    def log(self, status, nbytes):
        now = time.time()
        sys.stderr.write("%s.%03d %s %s %s %d bytes webhook-id=%s\n" % (
            time.strftime("%H:%M:%S", time.localtime(now)), int(now * 1000) % 1000,
            self.command, self.path, status, nbytes, self.headers.get("webhook-id", "-")))

    def answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if status != 204:
            self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except OSError:   # the client gave up waiting (see --delay-ms)
            self.close_connection = True

    def do_GET(self):
        if self.path == "/_control":
            body = json.dumps(self.server.faults.show()).encode()
            self.answer(200, body, [("Content-Type", "application/json")])
        else:
            self.answer(404)
        self.log(200 if self.path == "/_control" else 404, 0)

    def do_POST(self):
        # replicant always sends Content-Length; read the whole body even when
        # we reject it, or the next request on this keep-alive connection breaks.
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/_cli":   # never subject to faults either
            status, out = self.server.cli(body)
            self.answer(status, out, [("Content-Type", "text/plain")])
            self.log(status, len(body))
            return
        if self.path == "/_control":   # never subject to faults
            try:
                self.server.faults.update(json.loads(body))
                status = 204
            except (ValueError, AttributeError):
                status = 400
            self.answer(status)
        else:
            status = self.ingest(body)
        self.log(status, len(body))

    def ingest(self, body):
        server, arrival = self.server, time.time()
        fault = server.faults.pick(len(body))
        if fault is not None:
            with transaction(server.db, server.lock) as db:
                bump(db, requests=1, faults_injected=1)
            return self.inject(fault)
        if server.secret and not signature_ok(server.secret, self.headers, body):
            with transaction(server.db, server.lock) as db:
                bump(db, requests=1, bad_signatures=1)
            self.answer(401)
            return 401
        status = 204
        try:
            with transaction(server.db, server.lock) as db:
                batch = loads(body)
                webhook_id = self.headers.get("webhook-id")
                if server.dedup_ids and db.execute(
                        "SELECT 1 FROM accepted WHERE webhook_id=?", (webhook_id,)).fetchone():
                    bump(db, requests=1, duplicate_requests=1)
                elif isinstance(batch, list):   # format => 'cloudevents': kept, not applied
                    bump(db, requests=1, batches_applied=1)
                else:
                    apply_batch(db, batch, webhook_id, arrival)
                if server.keep_bodies:   # in the same transaction: kept iff 2xx
                    keep_body(db, self.headers, body)
        except Exception as e:
            # A malformed batch is a bug upstream (400 halts replicant);
            # a local storage problem is worth a retry (500).
            status = 500 if isinstance(e, sqlite3.Error) else 400
            sys.stderr.write("rejected batch: %s\n" % type(e).__name__)
            with transaction(server.db, server.lock) as db:
                bump(db, requests=1)
        delay = server.faults.show()["delay_ms"]
        if delay:   # applied, but answered late: a client timeout re-sends it
            time.sleep(delay / 1000.0)
        while server.faults.show()["hold_answers"]:   # applied, answered once released
            time.sleep(0.02)
        self.answer(status)
        return status

    def inject(self, fault):
        """Answers (or doesn't) with a fault. Nothing has been applied."""
        f = self.server.faults.show()
        if fault == "reset":   # close with SO_LINGER 0: the client sees a RST
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
        elif fault == "hang":   # never answer; wait until the client gives up
            try:
                while self.connection.recv(65536):
                    pass
            except OSError:
                pass
        elif fault == "redirect":
            self.answer(302, headers=[("Location", f["redirect"])])
        else:
            retry = ([("Retry-After", str(f["retry_after"]))]
                     if f["retry_after"] is not None else [])
            self.answer(fault, headers=retry)
        self.close_connection = fault in ("reset", "hang")
        return 302 if fault == "redirect" else fault


class TLSServer(ThreadingHTTPServer):
    """HTTPS; Handler.setup() runs the handshake."""

    def get_request(self):
        sock, addr = self.socket.accept()
        return self.tls.wrap_socket(sock, server_side=True,
                                    do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        # e.g. a client that does not trust our certificate ends the handshake
        sys.stderr.write("%s connection failed: %s\n" % (
            time.strftime("%H:%M:%S"), sys.exc_info()[1]))


def serve(args):
    faults = {name: getattr(args, name) for name in FAULT_DEFAULTS}
    if bool(args.tls_cert) != bool(args.tls_key):
        sys.exit("replicant_sink: --tls-cert and --tls-key go together")
    try:
        server = (TLSServer if args.tls_cert else ThreadingHTTPServer)(
            ("127.0.0.1", args.port), Handler)
    except OSError as e:
        sys.exit("replicant_sink: cannot listen on 127.0.0.1:%d: %s" % (args.port, e))
    if args.tls_cert:
        server.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.tls.load_cert_chain(args.tls_cert, args.tls_key)
    server.daemon_threads = True
    server.db, server.lock = open_db(args.db), threading.Lock()
    server.secret, server.faults = args.secret, Faults(faults)
    server.keep_bodies, server.dedup_ids = args.keep_bodies, args.dedup_ids
    server.cli = cli_over_http
    port = server.server_address[1]
    if args.port_file:   # written atomically: a reader never sees half a number
        with open(args.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.replace(args.port_file + ".tmp", args.port_file)
    sys.stderr.write("replicant_sink listening on %s://127.0.0.1:%d\n" % (
        "https" if args.tls_cert else "http", port))
    server.serve_forever()


# ---- read-only subcommands --------------------------------------------------
def dump(args):
    db = open_db(args.db)
    if args.counts:   # "<key_json>\t<deliveries>" per stored row
        if not args.table:
            sys.exit("replicant_sink: --counts needs --table")
        schema, _, table = args.table.rpartition(".")
        rows = db.execute("SELECT key_json, deliveries FROM rows WHERE schema=? "
                          "AND tbl=?", (schema or "public", table))
        print_lines(sorted("%s\t%d" % r for r in rows))
        return
    if args.table:
        schema, _, table = args.table.rpartition(".")
        rows = db.execute("SELECT '', row_json, copies FROM rows WHERE schema=? "
                          "AND tbl=?", (schema or "public", table))
    else:
        rows = db.execute("SELECT schema || '.' || tbl || ' ', row_json, copies "
                          "FROM rows")
    lines = [prefix + row for prefix, row, copies in rows for _ in range(copies)]
    print_lines(sorted(lines))


def bodies(args):
    """The kept batches, in arrival order, as JSON lines."""
    db = open_db(args.db)
    for webhook_id, headers, body in db.execute(
            "SELECT webhook_id, headers_json, body FROM bodies ORDER BY seq"):
        if args.raw:
            sys.stdout.write('{"webhook_id":%s,"headers":%s,"body_base64":"%s"}\n' % (
                json.dumps(webhook_id), headers, base64.b64encode(body).decode()))
            continue
        # canon() keeps numbers exactly as they were sent.
        sys.stdout.write('{"webhook_id":%s,"headers":%s,"body":%s}\n' % (
            json.dumps(webhook_id), headers, canon(loads(body))))


def print_lines(lines):
    sys.stdout.write("".join(line + "\n" for line in lines))


def query_json(args, sql):
    db = open_db(args.db)
    cursor = db.execute(sql)
    names = [d[0] for d in cursor.description]
    print_lines(json.dumps(dict(zip(names, r))) for r in cursor)


SUBCOMMAND_HELP = {
    "dump": "print the stored rows as JSON lines",
    "stats": "print the counters as JSON",
    "txlog": "print the applied transactions as JSON lines",
    "messages": "print the stored messages as JSON lines",
    "bodies": "print the kept bodies (serve --keep-bodies) as JSON lines",
}


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the sink: serve --port P --db FILE")
    s.add_argument("--port", type=int, required=True, help="0: any free port")
    s.add_argument("--port-file", help="write the port here once listening")
    s.add_argument("--secret", help="verify webhook-signature with this secret")
    s.add_argument("--fail-status", type=int, help="answer this status ...")
    s.add_argument("--fail-rate", type=float, default=1.0, help="... with this probability")
    s.add_argument("--fail-first", type=int, help="... or for the first N requests")
    s.add_argument("--fail-skip", type=int, default=0,
                   help="with --fail-first: let N requests pass before those")
    s.add_argument("--retry-after", help="Retry-After on fault answers (seconds or an HTTP-date)")
    s.add_argument("--delay-ms", type=int, default=0, help="wait before answering")
    s.add_argument("--hold-answers", action="store_true",
                   help="apply, but answer only once a control request clears this")
    s.add_argument("--hang", action="store_true", help="never answer")
    s.add_argument("--reset", action="store_true", help="reset the connection")
    s.add_argument("--redirect", metavar="URL", help="answer 302 to URL")
    s.add_argument("--max-body", type=int, help="answer 413 above this size")
    s.add_argument("--dedup-ids", action="store_true",
                   help="answer a request whose webhook-id was applied 204, applying nothing")
    s.add_argument("--keep-bodies", action="store_true",
                   help="store each accepted body and its headers (see bodies)")
    s.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate ...")
    s.add_argument("--tls-key", metavar="PEM", help="... and this private key")
    for name in ("serve", "dump", "stats", "txlog", "messages", "bodies"):
        q = s if name == "serve" else sub.add_parser(name, help=SUBCOMMAND_HELP[name])
        q.add_argument("--db", required=True, help="SQLite database file")
        if name == "dump":
            q.add_argument("--table", help="schema.table (default: all tables)")
            q.add_argument("--counts", action="store_true",
                           help="print each stored key of --table and how many "
                                "inserts, updates and reads it received")
        if name == "bodies":
            q.add_argument("--raw", action="store_true",
                           help="print each body's exact bytes, base64-encoded")
    sub.add_parser("canon", help="canonicalize JSON lines from stdin, sorted")
    # What a first user needs is how to start it; serve --help has the rest.
    p.epilog = ("start a sink:  %(prog)s serve --port 8080 --db /tmp/sink.db"
                " [--secret whsec_...]\n"
                "its options (fault injection for tests too):  %(prog)s serve --help"
                % {"prog": p.prog})
    return p


def run_command(args, stdin):
    """Runs a subcommand other than serve, printing to sys.stdout."""
    if args.command == "dump":
        dump(args)
    elif args.command == "canon":
        print_lines(sorted(canon(loads(l)) for l in stdin if l.strip()))
    elif args.command == "stats":
        db = open_db(args.db)
        stats = dict.fromkeys(COUNTERS, 0)
        stats.update(db.execute("SELECT name, value FROM counters"))
        stats["watermarks"] = dict(db.execute("SELECT * FROM watermarks"))
        cursor = db.execute("SELECT webhook_id, kind, transactions, first_lsn, "
                            "last_lsn, changes, tables, snapshot FROM accepted "
                            "ORDER BY seq")
        names = [d[0] for d in cursor.description]
        stats["accepted"] = [dict(zip(names, r[:6]), tables=json.loads(r[6]),
                                  snapshot=json.loads(r[7]) if r[7] else None)
                             for r in cursor]
        print(json.dumps(stats))
    elif args.command == "txlog":
        query_json(args, "SELECT commit_lsn, xid, nchanges, commit_time, arrival, "
                         "pipeline FROM txlog ORDER BY seq")
    elif args.command == "bodies":
        bodies(args)
    elif args.command == "messages":
        query_json(args, "SELECT pipeline, transactional, commit_lsn, lsn, prefix, "
                         "content FROM messages ORDER BY seq")


def cli_over_http(body):
    """POST /_cli: {"argv": [subcommand, ...], "stdin": text} runs that
    subcommand in this process and answers its output: a test reads a sink's
    database without starting Python for each look."""
    try:
        request = json.loads(body)
        args = parser().parse_args(request["argv"])
        if args.command == "serve":
            raise ValueError("serve")
    except (ValueError, KeyError, TypeError, SystemExit):
        return 400, b""
    out = io.StringIO()
    try:
        with CLI_LOCK, contextlib.redirect_stdout(out):
            run_command(args, request.get("stdin", "").encode().splitlines(True))
    except (SystemExit, Exception) as e:   # a command's failure, as its exit status
        return 500, ("%s\n" % type(e).__name__).encode()
    return 200, out.getvalue().encode()


def main():
    args = parser().parse_args()
    if args.command == "serve":
        serve(args)
    else:
        run_command(args, sys.stdin.buffer)


if __name__ == "__main__":
    main()
