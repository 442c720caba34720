#!/usr/bin/env python3
"""bench/report.py -- turns bench/run's raw measurements into the results table.

    report.py RESULTS.tsv SETTINGS.conf OUTDIR RESULTS.md

RESULTS.tsv holds "key<TAB>value" lines written by lib.sh's record().  Keys
ending in ".N" are repetitions: for times the best (lowest) is used.  This
script prints the table and rewrites RESULTS.md; everything below the
NOTES_MARKER line of an existing RESULTS.md (hand-written analysis) is kept.
Nothing here fails on a missed target: the table says "no".
"""
import os
import re
import sys

NOTES_MARKER = "<!-- notes: everything below this line is kept when bench/run rewrites the file -->"


def load(path):
    raw = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if "\t" in line:
                k, v = line.split("\t", 1)
                raw[k] = v
    return raw


class R:
    def __init__(self, raw):
        self.raw = raw

    def get(self, key):
        return self.raw.get(key)

    def num(self, key):
        v = self.raw.get(key)
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    def reps(self, key):
        vals = []
        for k, v in self.raw.items():
            m = re.fullmatch(re.escape(key) + r"\.(\d+)", k)
            if m:
                try:
                    vals.append(float(v))
                except ValueError:
                    pass
        return vals

    def best(self, key):
        vals = self.reps(key)
        return min(vals) if vals else None


def fmt(x, unit="", digits=None):
    if x is None:
        return "–"
    if digits is None:
        digits = 0 if abs(x) >= 100 else (1 if abs(x) >= 10 else 2)
    s = f"{x:,.{digits}f}"
    return f"{s} {unit}".strip()


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def met(value, op, target):
    if value is None:
        return "n/a"
    ok = value >= target if op == ">=" else value <= target
    return "yes" if ok else "**no**"


def med(vals):
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def spread(vals, unit=""):
    """"median (min–max)" of per-round values."""
    if not vals:
        return "–"
    return f"{fmt(med(vals), unit)} ({fmt(min(vals))}–{fmt(max(vals))})"


def by_round(r, key_a, key_b):
    """{round: (a, b)} of the rounds that have both."""
    out = {}
    for k, v in r.raw.items():
        m = re.fullmatch(re.escape(key_a) + r"\.(\d+)", k)
        if m and f"{key_b}.{m.group(1)}" in r.raw:
            try:
                out[int(m.group(1))] = (float(v), float(r.raw[f"{key_b}.{m.group(1)}"]))
            except ValueError:
                pass
    return out


def zip_rounds(r, key_a, key_b):
    """(a, b) of the rounds that have both."""
    return list(by_round(r, key_a, key_b).values())


def ratios(r, key_a, key_b, invert=False):
    """Per round a / b (b / a with invert)."""
    return [(b / a if invert else a / b) for a, b in zip_rounds(r, key_a, key_b) if a and b]


def ratio_spread(r, key_a, key_b, unit="×", invert=False):
    """Per-round a / b of the same round: "median× (min–max, N rounds)"."""
    vals = ratios(r, key_a, key_b, invert)
    if not vals:
        return "–"
    return f"{fmt(med(vals), unit, 2)} ({fmt(min(vals), '', 2)}–{fmt(max(vals), '', 2)}, {len(vals)} rounds)"


def build(r):
    rows = []      # the target table
    extra = []     # informational rows
    notes = []

    def add(scn, measure, value, anchor, anchor_value, rat, target, ok):
        rows.append([scn, measure, value, anchor, anchor_value, rat, target, ok])

    def info(scn, measure, value, comment=""):
        extra.append([scn, measure, value, comment])

    # ---- sink alone
    sizes = [(256, "256 B"), (65536, "64 KiB"), (1048576, "1 MiB"), (8388608, "8 MiB")]
    if r.get("sink.req_per_s.256"):
        parts = []
        for sz, label in sizes:
            parts.append(f"{label}: {fmt(r.num(f'sink.req_per_s.{sz}'))} req/s = {fmt(r.num(f'sink.mb_per_s.{sz}'))} MB/s")
        info("sink", "limit, 1 connection, 1 request in flight", "; ".join(parts),
             "C/epoll sink + C client on the same 2 cores; every stream scenario stays far below this")

    # ---- scenarios 1 and 2
    for sid, title, unit_name, target_w2j, target_td in (
            ("s1", "1 stream, small txns", "txn", 1.5, 0.6),
            ("s2", "2 stream, bulk txns", "row", 1.2, None)):
        if r.best(f"{sid}.replicant_s") is None:
            continue
        rows_n = r.num(f"{sid}.rows")
        txns = rows_n if sid == "s1" else (rows_n / 10000 if rows_n else None)
        count = txns if unit_name == "txn" else rows_n
        rep_s = r.best(f"{sid}.replicant_s")
        td_s = r.best(f"{sid}.decode_only_s")
        w1_s = r.best(f"{sid}.w2j1_s")
        w2_s = r.best(f"{sid}.w2j2_s")
        rate = lambda s: count / s if (s and count) else None
        unit = f"{unit_name}/s"
        add(title, f"replicant catch-up rate ({fmt(count)} {unit_name}s, {fmt(rep_s, 's')})",
            fmt(rate(rep_s), unit), "pg_recvlogical + wal2json v1", fmt(rate(w1_s), unit),
            fmt(ratio(w1_s, rep_s), "×"), f"≥ {target_w2j}×", met(ratio(w1_s, rep_s), ">=", target_w2j))
        if target_td:
            add(title, "", "", "decode-only (test_decoding peek, count(*))", fmt(rate(td_s), unit),
                fmt(ratio(td_s, rep_s), "×"), f"≥ {target_td}×", met(ratio(td_s, rep_s), ">=", target_td))
        else:
            add(title, "", "", "decode-only (test_decoding peek, count(*))", fmt(rate(td_s), unit),
                fmt(ratio(td_s, rep_s), "×"), "(info)", "")
        add(title, "", "", "pg_recvlogical + wal2json v2", fmt(rate(w2_s), unit),
            fmt(ratio(w2_s, rep_s), "×"), "(info)", "")
        wal = r.num(f"{sid}.wal_bytes")
        startup = r.best(f"{sid}.replicant_start_s")
        info(title, "WAL range decoded by every consumer", fmt(wal / 1e6 if wal else None, "MB"),
             f"{fmt(r.num(f'{sid}.decode_only_rows'))} test_decoding rows")
        info(title, "times (best of reps): replicant / decode-only / w2j v1 / w2j v2",
             " / ".join(fmt(x, "s", 2) for x in (rep_s, td_s, w1_s, w2_s)),
             "all reps: replicant " + ", ".join(fmt(x, "s", 2) for x in r.reps(f"{sid}.replicant_s"))
             + "; w2j v1 " + ", ".join(fmt(x, "s", 2) for x in r.reps(f"{sid}.w2j1_s")))
        info(title, "replicant time to worker start (included above)", fmt(startup, "s", 3),
             "enable_pipeline -> worker_pid visible (launcher + bgworker start)")
        if rep_s and startup is not None and rep_s > startup:
            info(title, "replicant rate from worker start", fmt(count / (rep_s - startup), unit),
                 f"{fmt(ratio(w1_s, rep_s - startup), '×')} wal2json v1")
        req = r.num(f"{sid}.sink_requests")
        byts = r.num(f"{sid}.sink_bytes")
        if req:
            info(title, "replicant POSTs / body bytes", f"{fmt(req, digits=0)} / {fmt(byts / 1e6, 'MB')}",
                 f"{fmt(byts / req / 1e6, 'MB', 2)} per POST; {fmt(byts / rep_s / 1e6, 'MB/s')} to the sink")
        ch = r.num(f"{sid}.replicant_changes")
        if ch is not None and rows_n is not None and ch != rows_n:
            notes.append(f"{title}: replicant delivered {fmt(ch)} changes for {fmt(rows_n)} rows")
        info(title, "workload (all pipelines disabled)",
             f"{fmt(r.num(f'{sid}.workload_tps'), 'tps')} in {fmt(r.num(f'{sid}.workload_s'), 's')}",
             "pgbench, 2 clients")
        if r.num(f"{sid}.stream_workload_tps") is not None:
            wt = r.num(f"{sid}.workload_tps")
            st = r.num(f"{sid}.stream_workload_tps")
            info(title, "streaming during the workload: workload tps / drain after it",
                 f"{fmt(st, 'tps')} ({fmt(ratio(st, wt), '×')} of disabled) / {fmt(max(0.0, r.num(f'{sid}.stream_drain_s') or 0.0), 's', 2)}",
                 "same workload again with one pipeline enabled; drain = workload end -> all acknowledged")
        cpu = r.num(f"{sid}.stream_worker_cpu_s")
        if cpu is not None and r.num(f"{sid}.stream_workload_s"):
            ws = r.num(f"{sid}.stream_workload_s")
            st = r.num(f"{sid}.stream_workload_tps")
            info(title, "streaming: pipeline worker CPU during the workload",
                 f"{fmt(cpu, 's', 1)} = {fmt(100 * cpu / ws, '% of a core')}",
                 f"{fmt(1000 * cpu / (st * ws) * 1000 if st else None, 'µs', 0)} per source transaction (user + system, /proc)")
        info(title, "load average before / after", f"{r.get(f'{sid}.loadavg_before')} / {r.get(f'{sid}.loadavg_after')}", "1-minute")

    # ---- scenario 3
    if r.best("s3.copy_json_s") is not None:
        n = r.num("s3.rows")
        cj = r.best("s3.copy_json_s")
        ct = r.best("s3.copy_text_s")
        ce = r.best("s3.copy_encoder_s")
        c2 = r.best("s3.copy_json_2way_s")
        t = "3 snapshot"
        rps = lambda s: n / s if (s and n) else None
        if r.best("s3.replicant_1w_s") is not None:
            s1w = r.best("s3.replicant_1w_s")
            s2w = r.best("s3.replicant_2w_s")
            add(t, f"replicant snapshot, 1 worker ({fmt(s1w, 's', 2)})", fmt(rps(s1w), "row/s"),
                "COPY (SELECT row_to_json(t) FROM t)", fmt(rps(cj), "row/s"),
                fmt(ratio(cj, s1w), "×"), "≥ 0.8×", met(ratio(cj, s1w), ">=", 0.8))
            add(t, f"replicant snapshot, 2 workers ({fmt(s2w, 's', 2)})", fmt(rps(s2w), "row/s"),
                "replicant snapshot, 1 worker", fmt(rps(s1w), "row/s"),
                f"{fmt(ratio(s1w, s2w), '×')} (reps {spread(ratios(r, 's3.replicant_1w_s', 's3.replicant_2w_s'))})",
                "≥ 1.6×", met(ratio(s1w, s2w), ">=", 1.6))
            info(t, "replicant snapshot times, all reps: 1 worker / 2 workers",
                 ", ".join(fmt(x, "s", 2) for x in r.reps("s3.replicant_1w_s")) + " / "
                 + ", ".join(fmt(x, "s", 2) for x in r.reps("s3.replicant_2w_s")),
                 "create_pipeline call -> every backfill done and the pipeline streaming, by the server's "
                 "clock in the calling session (worker start included)")
            i1w, i2w = r.best("s3.replicant_1w_inner_s"), r.best("s3.replicant_2w_inner_s")
            info(t, "the workers' own time, 1 worker / 2 workers",
                 f"{fmt(i1w, 's', 2)} / {fmt(i2w, 's', 2)} = {fmt(ratio(i1w, i2w), '×')}",
                 "first backfill start -> last backfill done: no worker start, planning or export")
            info(t, "replicant snapshot rows / POSTs / bytes (last run)",
                 f"{fmt(r.num('s3.replicant_rows_done'))} / {fmt(r.num('s3.sink_requests'), digits=0)} / {fmt((r.num('s3.sink_bytes') or 0) / 1e6, 'MB')}",
                 "rows_done from replicant.backfill_status")
            if r.num("s3.replicant_rows_done") not in (None, n):
                notes.append(f"snapshot delivered {fmt(r.num('s3.replicant_rows_done'))} rows of {fmt(n)}")
        add(t, "", "", "COPY t TO '/dev/null' (text)", fmt(rps(ct), "row/s"), "–", "(anchor)", "")
        info(t, "table", f"{fmt(n)} rows, {fmt(r.num('s3.table_bytes') / 1e6, 'MB')}",
             "bigint key, int, text, timestamptz, numeric, jsonb; cached in shared_buffers")
        info(t, "replicant encoder in one backend: COPY (SELECT replicant._encode_row(t))",
             f"{fmt(rps(ce), 'row/s')} = {fmt(ratio(cj, ce), '×')} row_to_json",
             "proxy for a 1-worker snapshot without HTTP (same encoder as stream and snapshot)")
        info(t, "two COPY(row_to_json) at once, key halves",
             f"{fmt(rps(c2), 'row/s')} = {fmt(ratio(cj, c2), '×')} one COPY",
             "what 2 workers can get from this 2-core machine at best")

    # ---- scenario 4
    rates = [x for x in (r.get("s4.rates") or "").split(",") if x]
    for rate in rates:
        t = f"4 latency, {rate} txn/s"
        k = f"s4.{rate}"
        if not r.reps(f"{k}.rep_p50_ms"):
            continue
        for pk, target in (("p50", 1.5), ("p99", 5.0)):
            rep = med(r.reps(f"{k}.rep_{pk}_ms"))
            w2j = med(r.reps(f"{k}.w2j_{pk}_ms"))
            add(t, f"commit-to-2xx {pk}, median of rounds {spread(r.reps(f'{k}.rep_{pk}_ms'), 'ms')}",
                fmt(rep, "ms", 2), f"pg_recvlogical + wal2json v2, {pk}", fmt(w2j, "ms", 2),
                ratio_spread(r, f"{k}.rep_{pk}_ms", f"{k}.w2j_{pk}_ms"),
                f"≤ {target} ms", met(max(r.reps(f"{k}.rep_{pk}_ms")), "<=", target))
        # CPU per 1,000 transactions: the worker vs walsender + pg_recvlogical.
        per_k = lambda c: [1000 * cpu / rows for cpu, rows in
                           zip_rounds(r, f"{k}.{c}_cpu_s", f"{k}.{c}_rows") if rows]
        rep_c, w2j_c = per_k("rep"), per_k("w2j")
        if rep_c and w2j_c:
            rs = [a / b for a, b in zip(rep_c, w2j_c) if b]
            add(t, "consumer CPU per 1,000 txns (worker)", fmt(1000 * med(rep_c), "ms", 1),
                "walsender + pg_recvlogical", fmt(1000 * med(w2j_c), "ms", 1),
                f"{fmt(med(rs), '×')} ({fmt(min(rs), '', 2)}–{fmt(max(rs), '', 2)}, {len(rs)} rounds)" if rs else "–",
                "≤ 0.5×", met(max(rs) if rs else None, "<=", 0.5))
        rep_w, w2j_w = r.num(f"{k}.rep_wake.wake_sendto_us"), r.num(f"{k}.w2j_wake.wake_sendto_us")
        if rep_w is not None and w2j_w is not None:
            steps = lambda p, names: ", ".join(f"{label} {fmt(r.num(f'{k}.{p}.{n}_us'), 'µs', 0)}"
                                              for n, label in names if r.num(f"{k}.{p}.{n}_us") is not None)
            info(t, "wake-up to first byte out, median (--perf run; bench/wake_to_send.py)",
                 f"worker {fmt(rep_w, 'µs', 0)}: " + steps("rep_wake", (
                     ("wake_pread64", "to the WAL read"), ("pread64_rt_sigprocmask", "decoding the transaction"),
                     ("rt_sigprocmask_poll", "batch, request and libcurl's transfer setup"),
                     ("poll_sendto", "libcurl's request"))),
                 f"walsender {fmt(w2j_w, 'µs', 0)}: " + steps("w2j_wake", (
                     ("wake_pread64", "to the WAL read"), ("pread64_sendto", "decoding"))) +
                 "; its bytes then cross pg_recvlogical and a pipe")
        info(t, "rows / POSTs / achieved rate (replicant rounds)",
             f"{fmt(sum(r.reps(f'{k}.rep_rows')))} / {fmt(sum(r.reps(f'{k}.rep_requests')))} / "
             f"{fmt(med(r.reps(f'{k}.rep_tps')), 'tps')}",
             f"p95 {spread(r.reps(f'{k}.rep_p95_ms'), 'ms')}, max {spread(r.reps(f'{k}.rep_max_ms'), 'ms')}; "
             f"wal2json max {spread(r.reps(f'{k}.w2j_max_ms'), 'ms')}")

    # ---- scenario 5
    if r.num("s5.worker_vmhwm_kb") is not None:
        t = "5 memory"
        hwm = r.num("s5.worker_vmhwm_kb") / 1024
        body = r.num("s5.sink_bytes")
        add(t, f"worker peak RSS (VmHWM), one txn of {fmt(r.num('s5.rows'))} rows, {fmt(body / 2**30 if body else None, 'GiB', 2)} JSON",
            fmt(hwm, "MiB"), "–", "–", "–", "≤ 128 MiB", met(hwm, "<=", 128))
        info(t, "worker peak RSS sampled every 0.1 s: total / anonymous (private)",
             f"{fmt(r.num('s5.worker_peak_rss_kb') / 1024, 'MiB')} / {fmt(r.num('s5.worker_peak_anon_kb') / 1024, 'MiB')}",
             "VmHWM and VmRSS include shared memory pages the worker touched")
        s = r.num("s5.replicant_s")
        info(t, "delivery of the one transaction", f"{fmt(s, 's', 1)}, {fmt(body / s / 1e6 if body and s else None, 'MB/s')}",
             f"{fmt(r.num('s5.sink_requests'), digits=0)} POST(s); insert took {fmt(r.num('s5.insert_s'), 's', 1)}; WAL {fmt(r.num('s5.wal_bytes') / 1e9 if r.num('s5.wal_bytes') else None, 'GB', 2)}")

    snap_anon = max(r.reps("s3.peak_anon_kb_2w") + r.reps("s3.peak_anon_kb_1w"), default=None)
    if snap_anon:
        t = "5 memory"
        snap_rss = max(r.reps("s3.peak_rss_kb_2w") + r.reps("s3.peak_rss_kb_1w"))
        add(t, f"worker peak private memory (RssAnon) during the {fmt(r.num('s3.rows'))}-row snapshot, any worker",
            fmt(snap_anon / 1024, "MiB"), "–", "–", "–", "≤ 128 MiB", met(snap_anon / 1024, "<=", 128))
        info(t, "snapshot: worker peak VmRSS, sampled every 0.05 s", fmt(snap_rss / 1024, "MiB"),
             "includes the shared buffers the worker read the table through (the table is "
             f"{fmt(r.num('s3.table_bytes') / 2**20, 'MiB')}, shared_buffers 1 GB); the private part is the line above")

    # ---- scenario 6
    if r.reps("s6.tps_with"):
        t = "6 source overhead"
        mean = lambda v: sum(v) / len(v) if v else None
        w, wo = mean(r.reps("s6.tps_with")), mean(r.reps("s6.tps_without"))
        add(t, "pgbench TPC-B-like TPS with a pipeline on all pgbench tables", fmt(w, "tps"),
            "same, no pipeline", fmt(wo, "tps"), fmt(ratio(w, wo), "×", 3), "≥ 0.9×", met(ratio(w, wo), ">=", 0.9))
        info(t, "TPS per slice, in run order (without / with)",
             ", ".join(f"{'w/o' if k.startswith('s6.tps_without') else 'with'} {fmt(float(v))}"
                       for k, v in sorted(((k, v) for k, v in r.raw.items() if re.fullmatch(r"s6\.tps_with(out)?\.\d+", k)),
                                          key=lambda kv: int(kv[0].rsplit(".", 1)[1]))),
             "mean of the slices is used; ABBA order")
        drains = r.reps("s6.drain_s")
        lags = r.reps("s6.lag_bytes_at_end")
        info(t, "pipeline lag at the end of each 'with' slice / drain time",
             f"max {fmt(max(lags) / 1e6 if lags else None, 'MB', 2)} / max {fmt(max(0.0, max(drains)) if drains else None, 's', 3)}",
             f"{fmt(r.num('s6.replicant_txns'))} transactions in {fmt(r.num('s6.replicant_batches'))} POSTs "
             f"({fmt(ratio(r.num('s6.replicant_txns'), r.num('s6.replicant_batches')), '', 1)} txns per POST); "
             "drain = slice end -> last transaction acknowledged")
        cpus = r.reps("s6.worker_cpu_s")
        if cpus and w:
            n_with = len(r.reps("s6.tps_with"))
            slice_s = float(r.get("s6.slice_s") or 15)
            total = sum(cpus)
            info(t, "pipeline worker CPU during the 'with' slices",
                 f"{fmt(total, 's', 1)} = {fmt(100 * total / (n_with * slice_s), '% of a core')}",
                 f"{fmt(1e6 * total / (w * n_with * slice_s), 'µs', 0)} per source transaction (user + system, /proc)")
        info(t, "load average before / after", f"{r.get('s6.loadavg_before')} / {r.get('s6.loadavg_after')}", "1-minute")

    # ---- scenario 7
    if r.reps("s7.snap_rep_s"):
        t = "7 ClickHouse"
        n, m = r.num("s7.rows"), r.num("s7.backlog_rows")
        for what, count, label in (("snap", n, "initial snapshot, 1 worker"),
                                   ("stream", m, f"streamed backlog ({r.get('s7.backlog_txn_rows')}-row txns)")):
            rep_s, cli_s = med(r.reps(f"s7.{what}_rep_s")), med(r.reps(f"s7.{what}_client_s"))
            add(t, f"{label}, {fmt(count)} rows", fmt(count / rep_s if rep_s else None, "row/s"),
                "clickhouse-client, same rows from a JSONEachRow file",
                fmt(count / cli_s if cli_s else None, "row/s"),
                ratio_spread(r, f"s7.{what}_client_s", f"s7.{what}_rep_s"), "(report)", "")
        info(t, "server / JSONEachRow file of the snapshot",
             f"{r.get('s7.clickhouse')} / {fmt((r.num('s7.snap_json_bytes') or 0) / 1e6, 'MB')}",
             f"backlog: {fmt(r.num('s7.stream_requests'), digits=0)} requests of one pipeline")

    # ---- scenario 8
    for sid, kind, unit, label, target in (("s8", "txns", "txn", "single-row txns", 1.0),
                                           ("s8b", "rows", "row", "rows in 10,000-row txns", None)):
        if not r.reps(f"{sid}.replicant_s"):
            continue
        t = "8 catch-up vs pgoutput"
        n = r.num(f"{sid}.{kind}")
        rep_s, po_s = med(r.reps(f"{sid}.replicant_s")), med(r.reps(f"{sid}.pgoutput_s"))
        worst = min(ratios(r, f"{sid}.pgoutput_s", f"{sid}.replicant_s"), default=None)
        add(t, f"replicant catch-up, {fmt(n)} {label}", fmt(n / rep_s if rep_s else None, f"{unit}/s"),
            "pgoutput decode-only peek, count(*)", fmt(n / po_s if po_s else None, f"{unit}/s"),
            ratio_spread(r, f"{sid}.pgoutput_s", f"{sid}.replicant_s"),
            f"≥ {target}×" if target else "(info)", met(worst, ">=", target) if target else "")
        ch = r.num(f"{sid}.replicant_changes")
        if ch is not None and n is not None and ch != n:
            notes.append(f"{t}: replicant delivered {fmt(ch)} changes for {fmt(n)} {kind}")
        info(t, f"{label}: WAL / pgoutput messages / worker start (in the time)",
             f"{fmt((r.num(f'{sid}.wal_bytes') or 0) / 1e6, 'MB')} / {fmt(r.num(f'{sid}.pgoutput_messages'))} / "
             f"{spread(r.reps(f'{sid}.replicant_start_s'), 's')}", "times: replicant "
             + spread(r.reps(f"{sid}.replicant_s"), "s") + ", pgoutput " + spread(r.reps(f"{sid}.pgoutput_s"), "s"))
        if r.reps(f"{sid}.replicant_cpu_s") and r.reps(f"{sid}.pgoutput_cpu_s"):
            info(t, f"{label}: CPU of replicant's worker (its whole life) / of the peek's backend",
                 spread(r.reps(f"{sid}.replicant_cpu_s"), "s") + " / " + spread(r.reps(f"{sid}.pgoutput_cpu_s"), "s"),
                 "peek CPU / worker CPU: " + ratio_spread(r, f"{sid}.pgoutput_cpu_s", f"{sid}.replicant_cpu_s"))
        if r.reps(f"{sid}.replicant_runq_s"):
            # Per round: the worker's life in the catch-up (from its start),
            # less its CPU and its time runnable but waiting for a CPU.
            life = {k: t - s for k, (t, s) in by_round(r, f"{sid}.replicant_s", f"{sid}.replicant_start_s").items()}
            used = {k: c + q for k, (c, q) in by_round(r, f"{sid}.replicant_cpu_s", f"{sid}.replicant_runq_s").items()}
            asleep = [life[k] - used[k] for k in sorted(life) if k in used]
            info(t, f"{label}: replicant's worker waiting for a CPU / asleep (its time in the catch-up - CPU - waiting)",
                 spread(r.reps(f"{sid}.replicant_runq_s"), "s") + " / " + spread(asleep, "s"),
                 "asleep: waiting for the sink's answers and for WAL (CPU counted in 10 ms ticks)")
        if sid == "s8" and r.num("s8.share_samples") and r.num("s8.pgoutput_samples"):
            info(t, "CPU by kind (perf, cpu-clock, DWARF stacks): replicant's worker / the peek's backend",
                 " / ".join(", ".join(f"{k} {r.get(f's8.{who}_{k}_pct')} %" for k in
                                      ("decode", "encode", "txn", "http", "other"))
                            for who in ("share", "pgoutput")),
                 f"{fmt(r.num('s8.share_samples'), digits=0)} / {fmt(r.num('s8.pgoutput_samples'), digits=0)} samples; "
                 "encode = the output plugin's work (frames: bench/out/decode-{share,pgoutput}-s8-frames.txt)")

    # ---- scenario 9
    counts = [x for x in (r.get("s9.counts") or "").split(",") if x]
    if counts and r.reps(f"s9.catchup_{counts[0]}_s"):
        t = "9 N pipelines"
        base = counts[0]
        for k in counts:
            s = med(r.reps(f"s9.catchup_{k}_s"))
            add(t, f"catch-up of {k} pipeline(s), one publication", fmt(s, "s", 2),
                f"{base} pipeline", fmt(med(r.reps(f"s9.catchup_{base}_s")), "s", 2),
                ratio_spread(r, f"s9.catchup_{k}_s", f"s9.catchup_{base}_s", "time ×"),
                "(linear: N×, ÷ cores)", "")
        for k in counts:
            if not r.reps(f"s9.dest_catchup_{k}_s"):
                continue
            add(t, f"catch-up of one pipeline of {k} destination(s) (issue #34)",
                fmt(med(r.reps(f"s9.dest_catchup_{k}_s")), "s", 2),
                f"{base} destination", fmt(med(r.reps(f"s9.dest_catchup_{base}_s")), "s", 2),
                ratio_spread(r, f"s9.dest_catchup_{k}_s", f"s9.dest_catchup_{base}_s", "time ×"),
                "≤ 1.5× at 8", met(med(ratios(r, f"s9.dest_catchup_{k}_s", f"s9.dest_catchup_{base}_s")), "<=", 1.5)
                if k == "8" else "")
        for k in counts:
            w = med(r.reps(f"s9.tps_{k}"))
            cpu = [1000 * c / x for c, x in zip_rounds(r, f"s9.cpu_{k}_s", f"s9.txns_{k}") if x]
            add(t, f"pgbench TPS with {k} pipeline(s) streaming", fmt(w, "tps"), "no pipeline",
                fmt(med(r.reps("s9.tps_0")), "tps"), ratio_spread(r, f"s9.tps_{k}", "s9.tps_0", "×", invert=False),
                "≥ 0.97×", met(med(ratios(r, f"s9.tps_{k}", "s9.tps_0", invert=False)), ">=", 0.97))
            info(t, f"{k} pipeline(s): summed worker CPU per 1,000 source txns",
                 fmt(1000 * med(cpu), "ms", 1) if cpu else "–", "user + system, /proc, all workers")
        dk = f"d{counts[-1]}"
        if r.reps(f"s9.tps_{dk}"):
            add(t, f"pgbench TPS with one pipeline of {counts[-1]} destinations streaming (issue #34)",
                fmt(med(r.reps(f"s9.tps_{dk}")), "tps"), "no pipeline", fmt(med(r.reps("s9.tps_0")), "tps"),
                ratio_spread(r, f"s9.tps_{dk}", "s9.tps_0", "×", invert=False),
                "≥ 0.9×", met(med(ratios(r, f"s9.tps_{dk}", "s9.tps_0", invert=False)), ">=", 0.9))
            per_1k = lambda k: [1000 * c / x for c, x in zip_rounds(r, f"s9.cpu_{k}_s", f"s9.txns_{k}") if x]
            dc, oc = per_1k(dk), per_1k(counts[0])
            if dc and oc:
                add(t, f"worker CPU per 1,000 source txns, one pipeline of {counts[-1]} destinations (issue #34)",
                    fmt(1000 * med(dc), "ms", 1), f"{counts[0]} pipeline of 1 destination",
                    fmt(1000 * med(oc), "ms", 1), fmt(med(dc) / med(oc), "×"),
                    "≤ 2×", met(med(dc) / med(oc), "<=", 2))
        # Target 1 at pgbench's full rate: one pipeline's worker against
        # walsender + pg_recvlogical + wal2json v2, round by round.
        per_k = lambda k: {n: 1000 * c / x for n, (c, x) in
                           by_round(r, f"s9.cpu_{k}_s", f"s9.txns_{k}").items() if x}
        rep_c, w2j_c = per_k(counts[0]), per_k("w2j")
        rs = [rep_c[n] / w2j_c[n] for n in rep_c if w2j_c.get(n)]
        if rs:
            add(t, f"consumer CPU per 1,000 txns at pgbench's full rate ({counts[0]} pipeline)",
                fmt(1000 * med(rep_c.values()), "ms", 1), "walsender + pg_recvlogical + wal2json v2",
                fmt(1000 * med(w2j_c.values()), "ms", 1),
                f"{fmt(med(rs), '×')} ({fmt(min(rs), '', 2)}–{fmt(max(rs), '', 2)}, {len(rs)} rounds)",
                "≤ 0.5×", met(max(rs), "<=", 0.5))
            info(t, "pgbench TPS with pg_recvlogical + wal2json v2 streaming",
                 f"{fmt(med(r.reps('s9.tps_w2j')), 'tps')}, "
                 + ratio_spread(r, "s9.tps_w2j", "s9.tps_0", "×", invert=False) + " of no consumer",
                 "the walsender path's own cost to the source, for scale")
        if r.num("s9.share_samples"):
            info(t, "one worker's catch-up CPU by kind (perf, cpu-clock, DWARF stacks)",
                 ", ".join(f"{k} {r.get(f's9.share_{k}_pct')} %" for k in
                           ("decode", "encode", "txn", "http", "other")),
                 f"{fmt(r.num('s9.share_samples'), digits=0)} samples; decode = what N pipelines could share "
                 "(bench/decode_share.py; frames: bench/out/decode-share-s9-frames.txt)")
        if r.num("s9.dshare_samples"):
            info(t, "the catch-up CPU of one pipeline of the most destinations, by kind",
                 ", ".join(f"{k} {r.get(f's9.dshare_{k}_pct')} %" for k in
                           ("decode", "encode", "txn", "http", "other")),
                 f"{fmt(r.num('s9.dshare_samples'), digits=0)} samples (frames: "
                 "bench/out/decode-dshare-s9-frames.txt, top symbols: bench/out/decode-dshare-s9-top.txt)")

    # ---- scenario 10
    sizes = [x for x in (r.get("s10.sizes") or "").split(",") if x]
    for n in sizes:
        if not r.reps(f"s10.{n}.replicant_s"):
            continue
        t = "10 snapshot size"
        nn = float(n)
        rep_s, copy_s = med(r.reps(f"s10.{n}.replicant_s")), med(r.reps(f"s10.{n}.copy_s"))
        add(t, f"snapshot of {fmt(nn)} rows, 1 worker ({fmt(rep_s, 's', 1)})", fmt(nn / rep_s, "row/s"),
            "COPY t TO '/dev/null'", fmt(nn / copy_s if copy_s else None, "row/s"),
            ratio_spread(r, f"s10.{n}.copy_s", f"s10.{n}.replicant_s"), "≥ 0.7×",
            met(min(ratios(r, f"s10.{n}.copy_s", f"s10.{n}.replicant_s"), default=None), ">=", 0.7))
        hwm = max(r.reps(f"s10.{n}.vmhwm_kb"), default=None)
        anon = max(r.reps(f"s10.{n}.rssanon_kb"), default=None)
        add(t, f"worker peak memory, {fmt(nn)} rows: VmHWM (RssAnon {fmt(anon / 1024 if anon else None, 'MiB')})",
            fmt(hwm / 1024 if hwm else None, "MiB"), "table size",
            fmt((r.num(f"s10.{n}.table_bytes") or 0) / 2**20, "MiB"), "–", "(report)", "")
        info(t, f"{fmt(nn)} rows: snapshot times, create_pipeline -> done / first backfill start -> done",
             f"{spread(r.reps(f's10.{n}.replicant_s'), 's')} / {spread(r.reps(f's10.{n}.replicant_inner_s'), 's')}",
             "the second is the workers' own clock (no worker start)")
    if len(sizes) > 1 and all(r.reps(f"s10.{n}.replicant_s") for n in sizes):
        a, b = sizes[0], sizes[-1]
        growth = med(r.reps(f"s10.{b}.replicant_s")) / med(r.reps(f"s10.{a}.replicant_s"))
        info("10 snapshot size", f"time at {fmt(float(b))} rows / at {fmt(float(a))} rows", fmt(growth, "×"),
             f"linear would be {fmt(float(b) / float(a), '×')}")

    # ---- scenario 11
    gaps = [x for x in (r.get("s11.gaps") or "").split(",") if x]
    t = "11 resync vs catch-up"
    mb = lambda vals: [v / 1e6 for v in vals]
    for g in gaps:
        if not (r.reps(f"s11.{g}.resync_s") and r.reps(f"s11.{g}.catchup_s")):
            continue
        gap = f"gap of {fmt(float(g))} changes, {fmt(r.num('s11.rows'))} rows"
        add(t, f"{gap}: time to heal by resync", spread(r.reps(f"s11.{g}.resync_s"), "s"),
            "catch-up (the retained WAL replayed)", spread(r.reps(f"s11.{g}.catchup_s"), "s"),
            ratio_spread(r, f"s11.{g}.resync_s", f"s11.{g}.catchup_s", "time ×"), "(report)", "")
        add(t, f"{gap}: bytes the sink received, resync", spread(mb(r.reps(f"s11.{g}.r_sink_bytes")), "MB"),
            "catch-up", spread(mb(r.reps(f"s11.{g}.c_sink_bytes")), "MB"),
            ratio_spread(r, f"s11.{g}.r_sink_bytes", f"s11.{g}.c_sink_bytes", "bytes ×"), "(report)", "")
        add(t, f"{gap}: WAL retained at the gap's end, resync (slot gone)", "0 MB",
            "catch-up (its slot's retained_wal_bytes)",
            spread(mb(r.reps(f"s11.{g}.retained_wal_bytes")), "MB"), "–", "(report)", "")
        info(t, f"{gap}: WAL the gap wrote / resync's reads (first backfill start -> last done)",
             f"{spread(mb(r.reps(f's11.{g}.wal_bytes')), 'MB')} / {spread(r.reps(f's11.{g}.resync_read_s'), 's')}",
             "POSTs resync / catch-up: "
             f"{fmt(med(r.reps(f's11.{g}.r_sink_requests')), digits=0)} / "
             f"{fmt(med(r.reps(f's11.{g}.c_sink_requests')), digits=0)}; "
             f"rows read by the resync: {fmt(med(r.reps(f's11.{g}.resync_rows')), digits=0)}")
    if gaps and r.get("s11.table_bytes"):
        info(t, "table size / load average before, after",
             f"{fmt(r.num('s11.table_bytes') / 2**20, 'MiB')} / {r.get('s11.loadavg_before')}, {r.get('s11.loadavg_after')}",
             "updates of two non-key columns, 1,000-row txns, spread over the table (bench/scenarios_resync.sh)")

    return rows, extra, notes


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out)


def text_table(header, rows):
    rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i])
              for i in range(len(header))]
    widths = [min(w, 60) for w in widths]
    line = lambda cells: "  ".join(c.ljust(widths[i])[:max(widths[i], len(c))] for i, c in enumerate(cells))
    out = [line(header), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return "\n".join(out)


def perf_lines(path, inclusive=False):
    """(percent, symbol) pairs of a perf report --stdio file."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if line.lstrip().startswith("#"):
                continue
            if inclusive:
                m = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+(\S.*)$", line)
                if m:
                    out.append((m.group(1), m.group(3)))
            else:
                m = re.match(r"\s*([\d.]+)%\s+(\S.*)$", line)
                if m:
                    out.append((m.group(1), m.group(2)))
    clean = []
    for pct, sym in out:
        sym = re.sub(r"\s+-\s+-\s*$", "", sym).strip()
        clean.append((pct, sym))
    return clean


# Frames that say nothing about where the time goes.
BORING = re.compile(r"0x[0-9a-f]+|^\[\.\] 0+$|__restore_rt|StartBackgroundWorker|entry_SYSCALL|do_syscall_64|__libc_start")


def perf_section(outdir):
    parts = []
    names = sorted(os.listdir(outdir)) if os.path.isdir(outdir) else []
    for name in names:
        m = re.fullmatch(r"perf-(.+)\.txt", name)
        if not m or re.search(r"-(children|comm|dso)\.txt$", name):
            continue
        tag = m.group(1)
        self_ = [(p, s) for p, s in perf_lines(os.path.join(outdir, name)) if not BORING.search(s)]
        incl = [(p, s) for p, s in perf_lines(os.path.join(outdir, f"perf-{tag}-children.txt"), True)
                if not BORING.search(s)]
        comm = perf_lines(os.path.join(outdir, f"perf-{tag}-comm.txt"))
        text = f"#### {tag}\n\n"
        if comm:
            text += "Whole machine by process name: " + ", ".join(f"{s} {p}%" for p, s in comm[:6]) + "\n\n"
        text += ("```\ninclusive (children)                              self time\n")
        for i in range(max(min(len(incl), 28), min(len(self_), 28))):
            left = f"{incl[i][0]:>6}%  {incl[i][1][:40]}" if i < len(incl) and i < 28 else ""
            right = f"{self_[i][0]:>6}%  {self_[i][1][:45]}" if i < len(self_) and i < 28 else ""
            text += f"{left:<50}{right}\n"
        text += "```\n"
        parts.append(text)
    return "\n".join(parts)


def main():
    results, settings_path, outdir, md_path = sys.argv[1:5]
    raw = load(results)
    r = R(raw)
    rows, extra, notes = build(r)
    header = ["scenario", "measure", "replicant", "anchor", "anchor value", "ratio", "target", "met"]

    print()
    print(text_table(header, rows))
    print()
    print(text_table(["scenario", "also measured", "value", "comment"], extra))
    for n in notes:
        print("NOTE:", n)

    settings = ""
    if os.path.exists(settings_path):
        settings = open(settings_path).read().strip()
    kept = ""
    if os.path.exists(md_path):
        old = open(md_path).read()
        if NOTES_MARKER in old:
            kept = old.split(NOTES_MARKER, 1)[1]

    meta = lambda k: raw.get(f"meta.{k}", "?")
    md = [
        "# replicant benchmark results",
        "",
        "Generated by `bench/run` (method: `bench/scenarios.sh`, table: `bench/report.py`).",
        "Anchors are measured in the same run, on the same machine, over the same WAL range.",
        "Charts of this run: `charts/*.png` beside this file (`bench/charts.py`, from the raw values "
        "below, kept in `charts/results.tsv`).",
        "",
        f"- command: `{meta('command').strip()}`, started {meta('started')}, took {fmt(float(meta('total_s')) / 60 if meta('total_s') != '?' else None, 'min', 1)}",
        f"- machine: {meta('cpus')}, {meta('mem_gb')} GB RAM, kernel {meta('kernel')}",
        f"- {meta('server')}; replicant {meta('replicant')} (replicant.so {meta('replicant_so')}; repository HEAD {meta('git_head')}); wal2json {meta('wal2json')}",
        f"- sizes: {meta('sizes')}; repetitions: {meta('reps')} (scenarios 1-3, best time used); "
        f"interleaved rounds: {meta('rounds')} (scenarios 4, 7-11)",
        f"- replicant pipelines: {meta('batch')} (replicant's defaults), catch-up method",
        f"- load average (1/5/15 min) at start: {meta('loadavg_start')}; at end: {meta('loadavg_end')}",
        "",
        "## Targets",
        "",
        "Ratio = replicant's rate / the anchor's rate (for scenarios 6 and 9's TPS: with / without "
        "pipelines; for scenario 4: replicant's latency or CPU / wal2json's, lower is better; for "
        "scenario 9's catch-up: time with N pipelines / with one; for scenario 11: resync / catch-up, "
        "lower favours the resync). Where rounds are interleaved "
        "(scenarios 4, 7-11) each ratio is the median of the per-round ratios, with their min–max; "
        "a latency, pgoutput or snapshot target is marked met only if every round meets it.",
        "",
        md_table(header, rows),
        "",
        "## Also measured",
        "",
        md_table(["scenario", "what", "value", "comment"], extra),
        "",
    ]
    builds = {}
    for k, v in raw.items():
        m = re.fullmatch(r"(s\d)\.replicant_so", k)
        if m:
            builds.setdefault(v, []).append(m.group(1))
    if len(builds) > 1:
        notes.append("replicant.so was reinstalled by someone else during the run; scenarios ran on: "
                     + "; ".join(f"{', '.join(v)}: {k}" for k, v in builds.items()))
    if notes:
        md += ["**Notes:** " + "; ".join(notes), ""]
    md += [
        "## Server settings",
        "",
        "Every scenario runs on a fresh `initdb` cluster (as the postgres OS user, port "
        "55461, loopback/unix socket) with:",
        "",
        "```",
        settings,
        "```",
        "",
        "fsync and synchronous_commit stay on (the disk does ~7,000 fdatasync/s), except that "
        "scenarios 7-9 write their workloads with synchronous_commit = off in the session (CPU, "
        "not fsync, is measured there); autovacuum is off so that no vacuum runs in the middle of "
        "a measurement (scenario 6 vacuums explicitly before each run).",
        "",
    ]
    ps = perf_section(outdir)
    if ps:
        md += ["## Profiles of the pipeline worker", "",
               "`bench/run --perf`: `perf record -F 1999 -g` on separate, untimed runs of the same "
               "work (scenario 5: the measured run; its target is memory), reported for the pipeline "
               "worker's pid (scenario 3: the snapshot's replicant processes). Call graphs come from "
               "frame pointers, which the Debian server build only partly keeps: inclusive percentages "
               "are indicative and can exceed 100% through recursion. Full reports: `bench/out/perf-*.txt`.",
               "", ps]
    md += ["## Raw values", "", "<details><summary>results.tsv</summary>", "", "```"]
    md += [f"{k}\t{v}" for k, v in raw.items()]
    md += ["```", "", "</details>", "", NOTES_MARKER]
    text = "\n".join(md) + (kept if kept else "\n")
    with open(md_path, "w") as f:
        f.write(text)
    print(f"\nwrote {md_path}")


if __name__ == "__main__":
    main()
