#!/usr/bin/env python3
"""bench/charts.py -- draws bench/run's results as PNG charts (gnuplot).

    charts.py RESULTS OUTDIR

RESULTS is bench/run's raw results.tsv ("key<TAB>value" lines, what lib.sh's
record() writes), or a RESULTS.md written by bench/report.py (its "Raw values"
block is read).  OUTDIR gets one PNG per chart whose scenario is in the data:

  ratios.png      replicant's rate / each anchor's, per scenario (the headline)
  throughput.png  rates of replicant beside its anchors: catch-up (1, 2, 8)
                  and ClickHouse (7)
  latency.png     commit-to-2xx p50 / p95 / p99 at steady rates beside
                  pg_recvlogical + wal2json v2, and the consumers' CPU (4)
  scaling.png     1, 2, 4, 8 pipelines: catch-up time, pgbench TPS, CPU (9)
  snapshot.png    snapshot vs COPY (3, 10)

The numbers are the ones bench/report.py puts in the tables (the same
functions): best of the repetitions for scenarios 1-3, the median of the
interleaved rounds for 4 and 7-10; whiskers are the min-max of the
repetitions' or rounds' values (of their per-round ratios on ratios.png).
The data files gnuplot reads and its script are kept in OUTDIR/data/ when
CHARTS_KEEP_DATA=1.  Needs gnuplot (Debian: gnuplot-nox) with the pngcairo
terminal.  Charts of scenarios that are not in the data are removed from
OUTDIR, so a partial run leaves no stale picture beside its fresh ones.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import R, fmt, med, ratios, zip_rounds  # noqa: E402

CHARTS = ("ratios", "throughput", "latency", "scaling", "snapshot")

REPLICANT = 0x1F5FA8  # replicant's bars
ANCHORS = (0xB0B0B0, 0xE08A2E, 0x6BAF5A, 0x8E6CB8)  # anchors, in turn
BAD = 0xC0392B

SETUP = """\
set terminal pngcairo size {w},{h} font "DejaVu Sans,10" noenhanced
set output "{png}"
set datafile separator "\\t"
set style fill solid 0.9 border -1
set grid ytics lc rgb "#dddddd"
set border 3
set tics nomirror
set key noautotitle
set label 99 "{footer}" at screen 0.01, screen 0.012 font ",8" tc rgb "#666666"
"""


def load_raw(path):
    """key -> value from a results.tsv or the Raw values block of a RESULTS.md."""
    raw = {}
    with open(path) as f:
        text = f.read()
    if path.endswith(".md"):
        m = re.search(r"<summary>results\.tsv</summary>\s*```\n(.*?)```", text, re.S)
        if not m:
            sys.exit(f"charts.py: no results.tsv block in {path}")
        text = m.group(1)
    for line in text.splitlines():
        if "\t" in line and not line.startswith("#"):
            k, v = line.split("\t", 1)
            raw[k] = v
    return raw


def span(vals):
    vals = [v for v in vals if v is not None]
    return (min(vals), max(vals)) if vals else (None, None)


def footer(r):
    g = r.get
    head = (g("meta.git_head") or "?").split(" ")[0]
    started = (g("meta.started") or "?").replace("T", " ").replace(":00Z", "Z")
    cpus = re.sub(r"\(R\)|Processor|\s+", " ", g("meta.cpus") or "?").strip()
    cpus = re.sub(r"\s+", " ", cpus)
    server = re.sub(r"^postgres \(PostgreSQL\) (\S+).*", r"PostgreSQL \1", g("meta.server") or "?")
    return (f"{(g('meta.command') or 'bench/run').strip()}, {started}, {cpus}, {server}, replicant at {head}"
            f"{', QUICK (small sizes); the tables: bench/out/RESULTS-quick.md' if g('meta.quick') == '1' else '; the tables: bench/RESULTS.md'}")


class Chart:
    """One PNG: data files plus the gnuplot text that draws them."""

    def __init__(self, name, datadir, width, height):
        self.name, self.datadir = name, datadir
        self.width, self.height = width, height
        self.gp = []
        self.n = 0

    def data(self, rows):
        """Writes rows (lists) as a tab-separated file; returns its path."""
        self.n += 1
        path = os.path.join(self.datadir, f"{self.name}-{self.n}.dat")
        with open(path, "w") as f:
            for row in rows:
                f.write("\t".join("" if c is None else (f"{c:.6g}" if isinstance(c, float) else str(c))
                                  for c in row) + "\n")
        return path

    def add(self, text):
        self.gp.append(text)


def gp_str(text):
    """A gnuplot double-quoted string; "|" in text breaks the line."""
    return '"' + text.replace("\\", "\\\\").replace('"', "'").replace("|", "\\n") + '"'


def scale_of(top):
    """(divisor, suffix) that keeps axis numbers short."""
    if top >= 2e6:
        return 1e6, "millions"
    if top >= 2e3:
        return 1e3, "thousands"
    return 1, ""


def bar_panel(c, title, ylabel, bars):
    """A panel of vertical bars: bars = [(label, value, lo, hi, colour, text)]."""
    bars = [b for b in bars if b[1] is not None]
    if not bars:
        return False
    top = max(b[3] if b[3] is not None else b[1] for b in bars)
    div, word = scale_of(top)
    rows = [[val / div, (lo if lo is not None else val) / div, (hi if hi is not None else val) / div, col, txt]
            for lab, val, lo, hi, col, txt in bars]
    f = c.data(rows)
    xt = ", ".join(f"{gp_str(b[0])} {i}" for i, b in enumerate(bars))
    c.add(f"""\
set title {gp_str(title)}
set ylabel {gp_str(ylabel + (f', {word}' if word else ''))}
set xrange [-0.6:{len(rows) - 0.4}]
set yrange [0:{top / div * 1.2:.6g}]
set format y "%g"
set xtics ({xt}) font ",9" scale 0
set boxwidth 0.7
plot "{f}" using 0:1:4 with boxes lc rgb variable, \\
     "" using 0:2:(0):($3 - $2) with vectors heads size screen 0.006,90 lc rgb "#222222" lw 1, \\
     "" using 0:3:5 with labels offset 0,0.7 font ",8"
""")
    return True


def rate_bar(label, n, times, best, colour):
    """A bar of n / time: value from `best` (or the median), whiskers from all times."""
    times = [t for t in times if t]
    if not times or not n:
        return (label, None, None, None, colour, "")
    t = min(times) if best else med(times)
    v = n / t
    return (label, v, n / max(times), n / min(times), colour, fmt(v))


# ------------------------------------------------------------------ charts --

def chart_ratios(r, c):
    """replicant's rate / the anchor's, on a log axis around 1."""
    items = []  # (label, ratio, lo, hi, target)

    def reps_ratio(label, key_anchor, key_rep, target=None, best=True):
        vals = ratios(r, key_anchor, key_rep)
        if not vals:
            return
        if best:
            val = r.best(key_anchor) / r.best(key_rep)
        else:
            val = med(vals)
        items.append((label, val, min(vals), max(vals), target))

    for sid, what in (("s1", "small txns"), ("s2", "bulk txns")):
        tgt_w1 = 1.5 if sid == "s1" else 1.2
        reps_ratio(f"{sid[1]} catch-up, {what} / wal2json v1", f"{sid}.w2j1_s", f"{sid}.replicant_s", tgt_w1)
        reps_ratio(f"{sid[1]} catch-up, {what} / wal2json v2", f"{sid}.w2j2_s", f"{sid}.replicant_s")
        reps_ratio(f"{sid[1]} catch-up, {what} / test_decoding peek", f"{sid}.decode_only_s", f"{sid}.replicant_s",
                   0.6 if sid == "s1" else None)
    reps_ratio("8 catch-up, single-row txns / pgoutput peek", "s8.pgoutput_s", "s8.replicant_s", 1.0, best=False)
    reps_ratio("8 catch-up, 10,000-row txns / pgoutput peek", "s8b.pgoutput_s", "s8b.replicant_s", best=False)
    reps_ratio("3 snapshot, 1 worker / COPY row_to_json", "s3.copy_json_s", "s3.replicant_1w_s", 0.8)
    reps_ratio("3 snapshot, 2 workers / 1 worker", "s3.replicant_1w_s", "s3.replicant_2w_s", 1.6)
    for n in [x for x in (r.get("s10.sizes") or "").split(",") if x]:
        reps_ratio(f"10 snapshot {fmt(float(n))} rows / COPY to /dev/null", f"s10.{n}.copy_s",
                   f"s10.{n}.replicant_s", 0.7, best=False)
    reps_ratio("7 ClickHouse snapshot / clickhouse-client", "s7.snap_client_s", "s7.snap_rep_s", best=False)
    reps_ratio("7 ClickHouse backlog / clickhouse-client", "s7.stream_client_s", "s7.stream_rep_s", best=False)
    slices = sorted((int(k.rsplit(".", 1)[1]), k.startswith("s6.tps_with."), float(v))
                    for k, v in r.raw.items() if re.fullmatch(r"s6\.tps_with(out)?\.\d+", k))
    w = [v for _, with_, v in slices if with_]
    wo = [v for _, with_, v in slices if not with_]
    if w and wo:
        # per ABBA pair of neighbouring slices (1-2, 3-4, ...): with / without
        pairs = [a[2] / b[2] if a[1] else b[2] / a[2]
                 for a, b in zip(slices[0::2], slices[1::2]) if a[1] != b[1]]
        items.append(("6 pgbench TPS, pipeline / none", (sum(w) / len(w)) / (sum(wo) / len(wo)),
                      min(pairs, default=None), max(pairs, default=None), 0.9))
    if not items:
        return False
    items.reverse()  # gnuplot counts rows from the bottom
    rows = []
    for i, (lab, val, lo, hi, tgt) in enumerate(items):
        col = REPLICANT if val >= 1 else BAD
        lo = val if lo is None else lo
        hi = val if hi is None else hi
        rows.append([lab, val, min(1.0, val), max(1.0, val), lo, hi, tgt if tgt else "NaN", col,
                     f"{val:.2f}×" + (f" ({lo:.2f}–{hi:.2f})" if hi - lo > 0.005 else "")
                     + (f"   target ≥ {tgt}×" if tgt else "")])
    f = c.data(rows)
    lo_all = min([x[4] for x in rows] + [t for *_, t in items if t])
    hi_all = max(x[5] for x in rows)
    c.add(f"""\
set title "replicant's rate / the anchor's rate (log scale; > 1: replicant faster)\\nwhiskers: min–max of the per-repetition or per-round ratios (scenario 6: of its ABBA slice pairs); triangle: the target" font ",10"
set logscale x
set xrange [{min(0.25, lo_all * 0.8):.3g}:{max(8, hi_all * 3):.3g}]
set yrange [-0.7:{len(rows) - 0.3}]
set ytics font ",9" scale 0
set xtics ("0.25×" 0.25, "0.5×" 0.5, "1×" 1, "2×" 2, "4×" 4, "8×" 8)
set grid xtics noytics lc rgb "#dddddd"
set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb "#444444" lw 1.5
set lmargin 38
set bmargin 4
plot "{f}" using 2:0:3:4:($0-0.32):($0+0.32):8:ytic(1) with boxxyerror lc rgb variable, \\
     "" using 5:0:($6 - $5):(0) with vectors heads size screen 0.006,90 lc rgb "#222222", \\
     "" using 7:0 with points pt 11 ps 1.4 lc rgb "#000000", \\
     "" using (($6 > 1 ? $6 : 1) * 1.08):0:9 with labels left font ",8"
""")
    c.height = max(c.height, 90 + 34 * len(rows))
    return True


def chart_throughput(r, c):
    panels = []
    for sid, title, unit, key in (("s1", "1 catch-up, {n} single-row txns", "txn/s", "rows"),
                                  ("s2", "2 catch-up, {n} rows in 10,000-row txns", "row/s", "rows")):
        n = r.num(f"{sid}.{key}")
        if not r.reps(f"{sid}.replicant_s") or not n:
            continue
        panels.append((title.format(n=fmt(n)), unit + " (best of reps)", [
            rate_bar("replicant", n, r.reps(f"{sid}.replicant_s"), True, REPLICANT),
            rate_bar("test_decoding|peek (in server)", n, r.reps(f"{sid}.decode_only_s"), True, ANCHORS[0]),
            rate_bar("pg_recvlogical|+ wal2json v1", n, r.reps(f"{sid}.w2j1_s"), True, ANCHORS[1]),
            rate_bar("pg_recvlogical|+ wal2json v2", n, r.reps(f"{sid}.w2j2_s"), True, ANCHORS[2])]))
    for sid, kind, unit, title in (("s8", "txns", "txn/s", "8 catch-up, {n} single-row txns"),
                                   ("s8b", "rows", "row/s", "8 catch-up, {n} rows in 10,000-row txns")):
        n = r.num(f"{sid}.{kind}")
        if not r.reps(f"{sid}.replicant_s") or not n:
            continue
        panels.append((title.format(n=fmt(n)), unit + " (median of rounds)", [
            rate_bar("replicant", n, r.reps(f"{sid}.replicant_s"), False, REPLICANT),
            rate_bar("pgoutput peek|(in server)", n, r.reps(f"{sid}.pgoutput_s"), False, ANCHORS[0])]))
    for what, key, title in (("snap", "s7.rows", "7 ClickHouse: snapshot of {n} rows"),
                             ("stream", "s7.backlog_rows", "7 ClickHouse: backlog of {n} rows")):
        n = r.num(key)
        if not r.reps(f"s7.{what}_rep_s") or not n:
            continue
        panels.append((title.format(n=fmt(n)), "row/s (median of rounds)", [
            rate_bar("replicant", n, r.reps(f"s7.{what}_rep_s"), False, REPLICANT),
            rate_bar("clickhouse-client|from a file", n, r.reps(f"s7.{what}_client_s"), False, ANCHORS[1])]))
    return multiplot(c, panels, 2)


def multiplot(c, panels, per_row):
    if not panels:
        return False
    cols = min(per_row, len(panels))
    rows = (len(panels) + cols - 1) // cols
    c.width, c.height = (560 if cols == 2 else 440) * cols, 330 * rows + 20
    c.add(f"set multiplot layout {rows},{cols}\nset bmargin 5\nset lmargin 10")
    for title, ylabel, bars in panels:
        bar_panel(c, title, ylabel, bars)
    c.add("unset multiplot")
    return True


def hex_(colour):
    return "#%06x" % colour


def chart_latency(r, c):
    rates = [x for x in (r.get("s4.rates") or "").split(",") if x and r.reps(f"s4.{x}.rep_p50_ms")]
    if not rates:
        return False
    rows, ticks = [], []
    for rate in rates:
        for pk in ("p50", "p95", "p99"):
            ticks.append(f"{pk}|{fmt(float(rate))} txn/s")
            row = []
            for who in ("rep", "w2j"):
                vals = r.reps(f"s4.{rate}.{who}_{pk}_ms")
                lo, hi = span(vals)
                row += [med(vals), lo, hi, f"{med(vals):.2f}" if vals else ""]
            rows.append(row)
    f = c.data(rows)
    cpu_rows, cpu_ticks = [], []
    for rate in rates:
        k = f"s4.{rate}"
        cpu_ticks.append(f"{fmt(float(rate))} txn/s")
        row = []
        for who in ("rep", "w2j"):
            # per round, as report.py pairs them
            vals = [1000 * cpu / n for cpu, n in zip_rounds(r, f"{k}.{who}_cpu_s", f"{k}.{who}_rows") if n]
            lo, hi = span([1000 * v for v in vals])
            row += [1000 * med(vals) if vals else None, lo, hi, f"{1000 * med(vals):.0f} ms" if vals else ""]
        cpu_rows.append(row)
    f2 = c.data(cpu_rows)
    top = max(x for row in rows for x in (row[2], row[6]) if x is not None)
    xt = ", ".join(f"{gp_str(t)} {i}" for i, t in enumerate(ticks))
    xt2 = ", ".join(f"{gp_str(t)} {i}" for i, t in enumerate(cpu_ticks))
    # two bars a group, gap 1.5: a bar is 1 / 3.5 wide
    d = 0.5 / 3.5
    c.width, c.height = 1300, 470
    c.add(f"""\
set multiplot layout 1,2
set bmargin 5
set style data histograms
set style histogram errorbars gap 1.5 lw 1
set boxwidth 0.9 relative
set key top left font ",9"
set title "4 commit-to-2xx latency at steady rates (median of rounds; whiskers: min–max)"
set ylabel "ms"
set yrange [0:{max(top * 1.25, 5.8):.3g}]
set xtics ({xt}) font ",9" scale 0
set arrow 1 from graph 0, first 1.5 to graph 1, first 1.5 nohead dt 2 lc rgb "#555555"
set arrow 2 from graph 0, first 5 to graph 1, first 5 nohead dt 2 lc rgb "{hex_(BAD)}"
set label 1 "target p50 ≤ 1.5 ms" at graph 0.01, first 1.5 left offset 0,0.5 font ",8"
set label 2 "target p99 ≤ 5 ms" at graph 0.01, first 5 left offset 0,0.5 font ",8"
plot "{f}" using 1:2:3 title "replicant: worker → HTTP sink" lc rgb "{hex_(REPLICANT)}", \\
     "" using 5:6:7 title "walsender → pg_recvlogical + wal2json v2 → the same sink" lc rgb "{hex_(ANCHORS[2])}", \\
     "" using ($0 - {d:.4f}):3:4 with labels offset 0,0.6 font ",7" notitle, \\
     "" using ($0 + {d:.4f}):7:8 with labels offset 0,0.6 font ",7" notitle
unset arrow 1
unset arrow 2
unset label 1
unset label 2
set title "4 consumer CPU per 1,000 transactions (median of rounds)"
set ylabel "ms of CPU (user + system)"
set yrange [0:{max(x[2] for x in cpu_rows + [[0, 0, 0]] if x[2] is not None) * 1.45:.4g}]
set xtics ({xt2})
plot "{f2}" using 1:2:3 title "replicant worker" lc rgb "{hex_(REPLICANT)}", \\
     "" using 5:6:7 title "walsender + pg_recvlogical" lc rgb "{hex_(ANCHORS[2])}", \\
     "" using ($0 - {2 * d:.4f}):(0.5 * $5):({2 * d:.4f}):(0) with vectors nohead dt 2 lw 3 lc rgb "{hex_(BAD)}" \\
        title "target: the worker ≤ 0.5× the walsender path", \\
     "" using ($0 - {d:.4f}):3:4 with labels offset 0,0.6 font ",8" notitle, \\
     "" using ($0 + {d:.4f}):7:8 with labels offset 0,0.6 font ",8" notitle
unset multiplot
""")
    return True


def chart_scaling(r, c):
    counts = [x for x in (r.get("s9.counts") or "").split(",") if x]
    if not counts or not r.reps(f"s9.catchup_{counts[0]}_s"):
        return False
    cores = 2
    m = re.match(r"(\d+)", r.get("meta.cpus") or "")
    if m:
        cores = int(m.group(1))
    t1 = med(r.reps(f"s9.catchup_{counts[0]}_s"))
    rows = []
    for k in counts:
        t = r.reps(f"s9.catchup_{k}_s")
        lo, hi = span(t)
        tps = ratios(r, f"s9.tps_{k}", "s9.tps_0")
        tlo, thi = span(tps)
        cpu = [1000 * x / n for x, n in zip_rounds(r, f"s9.cpu_{k}_s", f"s9.txns_{k}") if n]
        clo, chi = span([1000 * v for v in cpu])
        rows.append([int(k), med(t), lo, hi, t1 * max(1.0, int(k) / cores), t1 * int(k),
                     med(tps), tlo, thi, 1000 * med(cpu) if cpu else None, clo, chi,
                     f"{med(t):.2f} s", f"{med(tps):.2f}×" if tps else "", f"{1000 * med(cpu):.1f}" if cpu else ""])
    f = c.data(rows)
    base = counts[0]
    # The walsender path over the same slices, where the run measured it.
    w2j_tps = ratios(r, "s9.tps_w2j", "s9.tps_0")
    w2j_cpu = [1000 * x / n for x, n in zip_rounds(r, "s9.cpu_w2j_s", "s9.txns_w2j") if n]
    tps_top = max([1.15] + [1.12 * x[8] for x in rows if x[8] is not None])
    cpu_top = 1.2 * max([x[11] for x in rows if x[11] is not None] + [1000 * med(w2j_cpu) if w2j_cpu else 0, 0.001])
    w2j_tps_gp = (f'set arrow 2 from graph 0, first {med(w2j_tps):.4g} to graph 1, first {med(w2j_tps):.4g} '
                  f'nohead dt 3 lw 2 lc rgb "{hex_(ANCHORS[2])}"\n'
                  f'set label 2 "pg_recvlogical + wal2json v2: {med(w2j_tps):.2f}×" at graph 0.99, '
                  f'first {med(w2j_tps):.4g} right offset 0,-0.8 font ",8" tc rgb "{hex_(ANCHORS[2])}"'
                  if w2j_tps else "")
    w2j_cpu_gp = (f'set arrow 2 from graph 0, first {1000 * med(w2j_cpu):.4g} to graph 1, first '
                  f'{1000 * med(w2j_cpu):.4g} nohead dt 3 lw 2 lc rgb "{hex_(ANCHORS[2])}"\n'
                  f'set label 2 "walsender + pg_recvlogical + wal2json v2: {1000 * med(w2j_cpu):.1f}" at graph 0.02, '
                  f'first {1000 * med(w2j_cpu):.4g} left offset 0,0.6 font ",8" tc rgb "{hex_(ANCHORS[2])}"'
                  if w2j_cpu else "")
    c.width, c.height = 1400, 440
    xt = ", ".join(f'"{k}" {k}' for k in counts)
    c.add(f"""\
set multiplot layout 1,3
set bmargin 5
set logscale x 2
set xrange [{int(counts[0]) / 1.4:.3g}:{int(counts[-1]) * 1.4:.3g}]
set xtics ({xt})
set xlabel "pipelines on one publication"
set key top left font ",9"
set title "9 catch-up of {fmt(r.num('s9.wal_bytes') / 1e6 if r.num('s9.wal_bytes') else None, 'MB')} of WAL by N pipelines at once"
set ylabel "s (median of rounds; whiskers: min-max)"
set yrange [0:*]
plot "{f}" using 1:6 with lines dt 3 lc rgb "#999999" title "{base} pipeline's time × N", \\
     "" using 1:5 with lines dt 2 lc rgb "#555555" title "× N / {cores} cores", \\
     "" using 1:2:3:4 with yerrorlines pt 7 lc rgb "{hex_(REPLICANT)}" lw 2 title "replicant", \\
     "" using 1:2:13 with labels offset 3.2,-0.6 font ",8"
set title "9 pgbench TPS while N pipelines stream / none\\n(TPC-B-like, synchronous_commit off)"
set ylabel "ratio (median of rounds)"
set yrange [0:{tps_top:.3g}]
set arrow 1 from graph 0, first 0.97 to graph 1, first 0.97 nohead dt 2 lc rgb "{hex_(BAD)}"
set label 1 "target 0.97×" at graph 0.99, first 0.97 right offset 0,0.6 font ",8"
{w2j_tps_gp}
plot "{f}" using 1:7:8:9 with yerrorlines pt 7 lc rgb "{hex_(REPLICANT)}" lw 2 title "replicant", \\
     "" using 1:7:14 with labels offset 0,-1.0 font ",8"
unset arrow 1
unset label 1
unset arrow 2
unset label 2
set title "9 summed worker CPU per 1,000 source txns"
set ylabel "ms of CPU (median of rounds)"
set yrange [0:{cpu_top:.4g}]
{w2j_cpu_gp}
plot "{f}" using 1:10:11:12 with yerrorlines pt 7 lc rgb "{hex_(REPLICANT)}" lw 2 title "replicant, all workers", \\
     "" using 1:10:15 with labels offset 0,1.0 font ",8"
unset multiplot
""")
    return True


def chart_snapshot(r, c):
    panels = []
    n = r.num("s3.rows")
    if n and r.reps("s3.copy_json_s"):
        panels.append((f"3 initial snapshot, {fmt(n)} rows", "row/s (best of reps)", [
            rate_bar("replicant|1 worker", n, r.reps("s3.replicant_1w_s"), True, REPLICANT),
            rate_bar("replicant|2 workers", n, r.reps("s3.replicant_2w_s"), True, REPLICANT),
            rate_bar("COPY|(row_to_json)", n, r.reps("s3.copy_json_s"), True, ANCHORS[1]),
            rate_bar("2 x COPY|(row_to_json)|at once", n, r.reps("s3.copy_json_2way_s"), True, ANCHORS[1]),
            rate_bar("COPY t TO|/dev/null (text)", n, r.reps("s3.copy_text_s"), True, ANCHORS[0])]))
    for size in [x for x in (r.get("s10.sizes") or "").split(",") if x]:
        if not r.reps(f"s10.{size}.replicant_s"):
            continue
        nn = float(size)
        panels.append((f"10 snapshot of {fmt(nn)} rows, 1 worker", "row/s (median of rounds)", [
            rate_bar("replicant|1 worker", nn, r.reps(f"s10.{size}.replicant_s"), False, REPLICANT),
            rate_bar("COPY t TO|/dev/null", nn, r.reps(f"s10.{size}.copy_s"), False, ANCHORS[0])]))
    return multiplot(c, panels, 3)


DRAW = {"ratios": (chart_ratios, 1100, 300), "throughput": (chart_throughput, 1300, 720),
        "latency": (chart_latency, 1300, 470), "scaling": (chart_scaling, 1400, 440),
        "snapshot": (chart_snapshot, 900, 370)}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    src, outdir = sys.argv[1:3]
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        sys.exit("charts.py: gnuplot is missing (Debian: apt-get install gnuplot-nox)")
    r = R(load_raw(src))
    os.makedirs(outdir, exist_ok=True)
    keep = os.environ.get("CHARTS_KEEP_DATA") == "1"
    datadir = os.path.join(outdir, "data") if keep else tempfile.mkdtemp(prefix="replicant-charts.")
    os.makedirs(datadir, exist_ok=True)
    drawn = []
    try:
        for name in CHARTS:
            fn, w, h = DRAW[name]
            c = Chart(name, datadir, w, h)
            png = os.path.join(outdir, f"{name}.png")
            if not fn(r, c):
                if os.path.exists(png):
                    os.remove(png)
                continue
            script = SETUP.format(w=c.width, h=c.height, png=png, footer=footer(r).replace('"', "'")) \
                + "\n".join(c.gp)
            gp = os.path.join(datadir, f"{name}.gp")
            with open(gp, "w") as f:
                f.write(script)
            res = subprocess.run([gnuplot, gp], capture_output=True, text=True)
            if res.returncode != 0 or not os.path.exists(png):
                sys.exit(f"charts.py: gnuplot failed on {gp}:\n{res.stderr}")
            if res.stderr.strip():
                print(f"charts.py: gnuplot on {name}: {res.stderr.strip()}", file=sys.stderr)
            drawn.append(png)
    finally:
        if not keep:
            shutil.rmtree(datadir, ignore_errors=True)
    for png in drawn:
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
