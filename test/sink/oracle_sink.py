#!/usr/bin/env python3
"""oracle_sink.py -- the differential test's sink (test/README.md, "Differential test").

It is replicant_sink.py (same options, same SQLite store, same effect-once
apply by commit_lsn honouring "unchanged") plus the invariants checked on
every batch:

  at apply time, inside the batch's own SQLite transaction:
    * commit order: commit_lsns strictly increase within a request, and a
      transaction at or below the watermark is one the sink applied before
      (else it would be skipped silently: a loss);
    * one content per commit_lsn: a re-delivered transaction carries the
      same changes and messages as the first delivery (a digest of each);
    * every accepted request is kept with its arrival time, flagged when it
      re-delivered an applied transaction (a "raw duplicate");

  offline, over the kept requests (`check`), against the policy file the
  test writes as it changes publications and schemas:
    * no column outside the table's published columns in any object of any
      change (new, old, key, unchanged);
    * no row outside the table's row filter (insert, update, read: new;
      delete: old or key);
    * no change of a table that no publication of the pipeline delivered.

  oracle_sink.py serve ...                       as replicant_sink.py serve
  oracle_sink.py check --db DB --policy FILE [--after SEQ]
  oracle_sink.py requests --db DB [--after SEQ]   seq, kind, redelivered, arrival
  oracle_sink.py dump-all --db DB                 every stored row, "schema.table<TAB>row"
  oracle_sink.py canon-tagged < lines             "tag<TAB>json" lines canonicalized, sorted
  oracle_sink.py admin --db DB forget|rename-table|rename-column|drop-column|add-column ...

`admin` applies, to the stored rows, the schema changes an operator applies
to a sink's tables (the hands test/Oracle.pm gives the sink, as it gives the
subscriber the DDL logical replication does not carry).

The policy file (JSON) holds "entries": each {"lo", "hi", "t_lo", "t_hi",
"relations": {"schema.table": {"columns": [...], "filters": [sql|null, ...]}}},
the whole delivered set from the LSN range [lo, hi] (and wall-clock range
[t_lo, t_hi]) of the change that made it on; a stream change committed at C
is checked against the entry in force at C (both, inside a change's range).
"quiet": wall-clock times at which no backfill ran and everything was
delivered; "backfills": backfill id -> the time the test started it.  A read
is checked against every entry in force between its backfill's start (a
snapshot batch names its backfill; otherwise, and for backfills the test
did not start, the last quiet time before the read arrived) and its
arrival.  A filter is the text pg_publication_tables.rowfilter shows, of a
small grammar (columns, integers, arithmetic, comparisons, AND, OR, NOT,
IS [NOT] NULL); one that does not parse is a violation of its own, so the
generator never widens it unnoticed.
"""
import argparse
import decimal
import hashlib
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replicant_sink as rs  # noqa: E402

ORACLE_SCHEMA = """
CREATE TABLE IF NOT EXISTS oracle_txn (commit_lsn INTEGER PRIMARY KEY, digest TEXT);
CREATE TABLE IF NOT EXISTS oracle_violation (seq INTEGER PRIMARY KEY, what TEXT,
    detail TEXT, arrival REAL);
CREATE TABLE IF NOT EXISTS oracle_request (seq INTEGER PRIMARY KEY, webhook_id TEXT,
    kind TEXT, arrival REAL, redelivered INTEGER, body BLOB);
"""


_open_db = rs.open_db


def open_db(path):
    db = _open_db(path)
    db.executescript(ORACLE_SCHEMA)
    return db


def violation(db, what, detail, arrival):
    db.execute("INSERT INTO oracle_violation (what, detail, arrival) VALUES (?, ?, ?)",
               (what, json.dumps(detail, sort_keys=True), arrival))


def txn_digest(txn):
    content = rs.canon({"changes": txn.get("changes") or [],
                        "messages": txn.get("messages") or []})
    return hashlib.sha256(content.encode()).hexdigest()


def check_order_and_content(db, batch, webhook_id, arrival):
    """The apply-time invariants of a change batch; returns whether it
    re-delivered a transaction the sink had applied."""
    found = db.execute("SELECT commit_lsn FROM watermarks WHERE pipeline=?",
                       (batch.get("pipeline"),)).fetchone()
    watermark = found[0] if found else -1
    previous = None
    redelivered = False
    for txn in batch["transactions"]:
        lsn = int(txn["commit_lsn"])
        where = {"webhook_id": webhook_id, "commit_lsn": lsn}
        if previous is not None and lsn <= previous:
            violation(db, "commit order", dict(where, previous=previous), arrival)
        previous = lsn
        digest = txn_digest(txn)
        known = db.execute("SELECT digest FROM oracle_txn WHERE commit_lsn=?",
                           (lsn,)).fetchone()
        if lsn <= watermark:
            redelivered = True
            if known is None:
                violation(db, "commit order", dict(where, watermark=watermark,
                          why="below the watermark, never delivered before"), arrival)
            elif known[0] != digest:
                violation(db, "one content per commit_lsn", where, arrival)
        elif known is None:
            db.execute("INSERT INTO oracle_txn VALUES (?, ?)", (lsn, digest))
        elif known[0] != digest:
            violation(db, "one content per commit_lsn", where, arrival)
    return redelivered


_apply_batch = rs.apply_batch


def apply_batch(db, batch, webhook_id, arrival):
    """replicant_sink.apply_batch with the apply-time invariants, in the same
    transaction; every request is kept for the offline checks."""
    redelivered = False
    if isinstance(batch, dict) and batch.get("kind") == "changes":
        redelivered = check_order_and_content(db, batch, webhook_id, arrival)
    _apply_batch(db, batch, webhook_id, arrival)
    db.execute("INSERT INTO oracle_request (webhook_id, kind, arrival, redelivered, body) "
               "VALUES (?, ?, ?, ?, ?)",
               (webhook_id, batch.get("kind"), arrival, int(redelivered),
                rs.canon(batch)))


# ---- row filters -------------------------------------------------------------
TOKEN = re.compile(r"""\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|
    (?P<qid>"(?:[^"]|"")+")|(?P<id>[A-Za-z_][A-Za-z_0-9$]*)|
    (?P<op><>|<=|>=|!=|::|[-+*/%()<>=]))""", re.X)


class FilterError(Exception):
    pass


def tokenize(text):
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise FilterError("cannot read %r" % text[pos:pos + 20])
        pos = m.end()
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "num":
            out.append(("num", decimal.Decimal(value)))
        elif kind == "str":
            out.append(("str", value[1:-1].replace("''", "'")))
        elif kind == "qid":
            out.append(("col", value[1:-1].replace('""', '"')))
        elif kind == "id":
            word = value.upper()
            out.append(("kw", word) if word in ("AND", "OR", "NOT", "IS", "NULL", "TRUE",
                                                "FALSE") else ("col", value))
        else:
            out.append(("op", value))
    return out


class Parser:
    """SQL expression of pg_get_expr's form -> a function(row) returning
    True, False or None (SQL's three-valued logic), and the columns it reads."""

    def __init__(self, text):
        self.toks = tokenize(text)
        self.i = 0
        self.columns = set()

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self, kind=None, value=None):
        tok = self.peek()
        if tok[0] is None or (kind and tok[0] != kind) or (value and tok[1] != value):
            raise FilterError("expected %s %s at token %d" % (kind, value, self.i))
        self.i += 1
        return tok

    def parse(self):
        f = self.disjunction()
        if self.i != len(self.toks):
            raise FilterError("trailing tokens at %d" % self.i)
        return f

    def disjunction(self):
        f = self.conjunction()
        while self.peek() == ("kw", "OR"):
            self.take()
            g, h = f, self.conjunction()
            f = (lambda g, h: lambda r: tv_or(g(r), h(r)))(g, h)
        return f

    def conjunction(self):
        f = self.negation()
        while self.peek() == ("kw", "AND"):
            self.take()
            g, h = f, self.negation()
            f = (lambda g, h: lambda r: tv_and(g(r), h(r)))(g, h)
        return f

    def negation(self):
        if self.peek() == ("kw", "NOT"):
            self.take()
            g = self.negation()
            return lambda r: None if g(r) is None else not g(r)
        return self.comparison()

    def comparison(self):
        left = self.additive()
        tok = self.peek()
        if tok == ("kw", "IS"):
            self.take()
            negate = self.peek() == ("kw", "NOT")
            if negate:
                self.take()
            self.take("kw", "NULL")
            return lambda r: (left(r) is None) != negate
        if tok[0] == "op" and tok[1] in ("=", "<>", "!=", "<", ">", "<=", ">="):
            self.take()
            right = self.additive()
            op = COMPARE[tok[1]]
            return lambda r: (None if left(r) is None or right(r) is None
                              else op(left(r), right(r)))
        return left   # a boolean column or a parenthesized condition

    def additive(self):
        f = self.multiplicative()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            g, h = f, self.multiplicative()
            f = (lambda g, h, op: lambda r: arith(op, g(r), h(r)))(g, h, op)
        return f

    def multiplicative(self):
        f = self.unary()
        while self.peek() in (("op", "*"), ("op", "/"), ("op", "%")):
            op = self.take()[1]
            g, h = f, self.unary()
            f = (lambda g, h, op: lambda r: arith(op, g(r), h(r)))(g, h, op)
        return f

    def unary(self):
        if self.peek() == ("op", "-"):
            self.take()
            g = self.unary()
            return lambda r: None if g(r) is None else -g(r)
        f = self.primary()
        while self.peek() == ("op", "::"):   # casts: the values are compared as numbers or text
            self.take()
            self.take("col")
        return f

    def primary(self):
        kind, value = self.peek()
        if (kind, value) == ("op", "("):
            self.take()
            f = self.disjunction()
            self.take("op", ")")
            return f
        self.take()
        if kind == "num" or kind == "str":
            return lambda r: value
        if (kind, value) == ("kw", "NULL"):
            return lambda r: None
        if kind == "kw" and value in ("TRUE", "FALSE"):
            return lambda r: value == "TRUE"
        if kind == "col":
            self.columns.add(value)
            return lambda r: as_value(r[value])
        raise FilterError("unexpected %s %s" % (kind, value))


def as_value(v):
    if isinstance(v, rs.Num):
        return decimal.Decimal(str(v))
    return v


def tv_and(a, b):
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def tv_or(a, b):
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def arith(op, a, b):
    if a is None or b is None:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a // b if a == a.to_integral_value() and b == b.to_integral_value() else a / b
    # SQL's % keeps the sign of the dividend, as Decimal's does
    return a % b


COMPARE = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, "!=": lambda a, b: a != b,
           "<": lambda a, b: a < b, ">": lambda a, b: a > b,
           "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}

_filters = {}


def compile_filter(text):
    if text not in _filters:
        p = Parser(text)
        _filters[text] = (p.parse(), p.columns)
    return _filters[text]


# ---- the offline checks ---------------------------------------------------------
def allowed(rel, op, change):
    """None if the change fits one relation policy, else why not."""
    columns = set(rel["columns"])
    for obj in ("new", "old", "key"):
        value = change.get(obj)
        if isinstance(value, dict):
            outside = sorted(set(value) - columns)
            if outside:
                return "column outside the published columns", {"object": obj,
                                                                 "columns": outside}
    outside = sorted(set(change.get("unchanged") or []) - columns)
    if outside:
        return "column outside the published columns", {"object": "unchanged",
                                                         "columns": outside}
    filters = rel["filters"]
    if op == "truncate" or not filters or None in filters:
        return None
    row = change.get("new") if op in ("insert", "update", "read") else (
        change.get("old") or change.get("key"))
    if not isinstance(row, dict):
        return None
    verdicts = []
    for text in filters:
        try:
            f, needs = compile_filter(text)
        except FilterError as e:
            return "row filter not understood", {"filter": text, "error": str(e)}
        if not needs <= set(row):
            return None     # a column the row does not carry: not decidable here
        verdicts.append(f(row) is True)
    if any(verdicts):
        return None
    return "row outside the row filter", {"filters": filters}


def fits(entries, change):
    """None if some entry lets the change through, else the first reason."""
    name = change.get("schema", "") + "." + change.get("table", "")
    reason = ("table not published", {}) if entries else ("no policy in force", {})
    for e in entries:
        rel = e["relations"].get(name)
        if rel is None:
            continue
        why = allowed(rel, change.get("op"), change)
        if why is None:
            return None
        reason = why    # the reason of the latest entry that publishes the table
    return reason


def stream_entries(entries, lsn):
    """The entries in force for a transaction committed at lsn."""
    current = [i for i, e in enumerate(entries) if e["lo"] <= lsn]
    if not current:
        return entries[:1]
    i = current[-1]
    chosen = [entries[i]]
    if lsn <= entries[i]["hi"] and i > 0:
        chosen.append(entries[i - 1])
    return chosen


def read_entries(entries, quiet, arrival, started=None):
    """The entries in force at some moment between the read's backfill's
    start (when known, else the last quiet time before it arrived) and its
    arrival."""
    since = started if started is not None else max([t for t in quiet if t <= arrival] or [0])
    out = []
    for i, e in enumerate(entries):
        until = entries[i + 1]["t_hi"] if i + 1 < len(entries) else float("inf")
        if e["t_lo"] <= arrival and until >= since:
            out.append(e)
    return out


def check(args):
    db = open_db(args.db)
    with open(args.policy) as f:
        policy = json.load(f)
    entries, quiet = policy["entries"], policy.get("quiet", [])
    backfills = policy.get("backfills", {})
    out = []
    last = args.after
    seen = {}   # (what, table, object, columns) -> count, so one defect is one line

    def report(what, detail, webhook_id, change, lsn):
        key = (what, change.get("table"), json.dumps(detail, sort_keys=True))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1:
            out.append({"what": what, "table": change.get("schema", "") + "." +
                        change.get("table", ""), "op": change.get("op"),
                        "webhook_id": webhook_id, "commit_lsn": lsn, "detail": detail})

    for seq, webhook_id, kind, arrival, body in db.execute(
            "SELECT seq, webhook_id, kind, arrival, body FROM oracle_request "
            "WHERE seq > ? ORDER BY seq", (args.after,)):
        last = seq
        batch = rs.loads(body)
        if kind == "snapshot":
            started = backfills.get(str((batch.get("snapshot") or {}).get("backfill_id")))
            for change in batch.get("changes") or []:
                why = fits(read_entries(entries, quiet, arrival, started), change)
                if why:
                    report(why[0], why[1], webhook_id, change, None)
        elif kind == "changes":
            for txn in batch["transactions"]:
                lsn = int(txn["commit_lsn"])
                for change in txn["changes"]:
                    chosen = (read_entries(entries, quiet, arrival)
                              if change.get("op") == "read" else stream_entries(entries, lsn))
                    why = fits(chosen, change)
                    if why:
                        report(why[0], why[1], webhook_id, change, lsn)
    for seq, what, detail, arrival in db.execute(
            "SELECT seq, what, detail, arrival FROM oracle_violation ORDER BY seq"):
        out.append({"what": what, "detail": json.loads(detail), "apply_time": True})
    print(json.dumps({"last": last, "violations": out}))


def dump_all(args):
    """Every stored row as "schema.table<TAB>row", sorted (a bag: a row stored
    with copies n is printed n times)."""
    db = open_db(args.db)
    lines = ["%s.%s\t%s" % (schema, tbl, row) for schema, tbl, row, copies in
             db.execute("SELECT schema, tbl, row_json, copies FROM rows") for _ in range(copies)]
    rs.print_lines(sorted(lines))


def canon_tagged(args):
    """Lines "tag<TAB>json" from stdin, the JSON canonicalized, sorted."""
    out = []
    for line in sys.stdin.buffer:
        line = line.decode().rstrip("\n")
        if not line.strip():
            continue
        tag, _, text = line.partition("\t")
        out.append(tag + "\t" + rs.canon(rs.loads(text)))
    rs.print_lines(sorted(out))


def requests(args):
    db = open_db(args.db)
    for row in db.execute("SELECT seq, kind, redelivered, arrival, webhook_id FROM "
                          "oracle_request WHERE seq > ? ORDER BY seq", (args.after,)):
        print("\t".join(str(v) for v in row))


# ---- the operator's hands on the store ---------------------------------------------
def transform_rows(db, table, fn):
    """Rewrites every stored row of schema.table with fn(row, key) -> (row, key)."""
    schema, _, tbl = table.rpartition(".")
    rows = db.execute("SELECT key_json, row_json, copies FROM rows WHERE schema=? AND tbl=?",
                      (schema, tbl)).fetchall()
    for key_json, row_json, copies in rows:
        row = rs.loads(row_json)
        key = rs.loads(key_json)
        new_row, new_key = fn(row, key)
        db.execute("DELETE FROM rows WHERE schema=? AND tbl=? AND key_json=?",
                   (schema, tbl, key_json))
        db.execute("INSERT INTO rows (schema, tbl, key_json, row_json, copies, deliveries) "
                   "SELECT ?, ?, ?, ?, ?, 1 WHERE true ON CONFLICT (schema, tbl, key_json) "
                   "DO UPDATE SET copies = copies + excluded.copies",
                   (schema, tbl, rs.canon(new_key), rs.canon(new_row), copies))
    return len(rows)


def admin(args):
    db = open_db(args.db)
    op, table = args.op, args.table
    schema, _, tbl = table.rpartition(".")
    with rs.transaction(db, _NoLock()):
        if op == "forget":   # the table and any more named after it
            for name in [table] + args.args:
                schema, _, tbl = name.rpartition(".")
                db.execute("DELETE FROM rows WHERE schema=? AND tbl=?", (schema, tbl))
        elif op == "rename-table":
            nschema, _, ntbl = args.args[0].rpartition(".")
            db.execute("UPDATE rows SET schema=?, tbl=? WHERE schema=? AND tbl=?",
                       (nschema, ntbl, schema, tbl))
        elif op == "rename-column":
            old, new = args.args

            def rename(row, key):
                def ren(d):
                    return {(new if k == old else k): v for k, v in d.items()}
                return ren(row), (ren(key) if isinstance(key, dict) else key)
            transform_rows(db, table, rename)
        elif op == "drop-column":
            col = args.args[0]

            def drop(row, key):
                whole = isinstance(key, dict) and set(key) == set(row)
                row = {k: v for k, v in row.items() if k != col}
                return row, (row if whole else key)
            transform_rows(db, table, drop)
        elif op == "add-column":
            col, default = args.args[0], rs.loads(args.args[1])

            def add(row, key):
                whole = isinstance(key, dict) and set(key) == set(row)
                if col not in row:
                    row = dict(row, **{col: default})
                return row, (row if whole else key)
            transform_rows(db, table, add)
        else:
            sys.exit("oracle_sink: unrecognized admin operation " + op)


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        rs.apply_batch = apply_batch
        rs.open_db = open_db
        rs.main()
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("--db", required=True)
    c.add_argument("--policy", required=True)
    c.add_argument("--after", type=int, default=0)
    r = sub.add_parser("requests")
    r.add_argument("--db", required=True)
    r.add_argument("--after", type=int, default=0)
    d = sub.add_parser("dump-all")
    d.add_argument("--db", required=True)
    sub.add_parser("canon-tagged")
    a = sub.add_parser("admin")
    a.add_argument("--db", required=True)
    a.add_argument("op")
    a.add_argument("table")
    a.add_argument("args", nargs="*")
    args = p.parse_args()
    {"check": check, "requests": requests, "admin": admin, "dump-all": dump_all,
     "canon-tagged": canon_tagged}[args.command](args)


if __name__ == "__main__":
    main()
