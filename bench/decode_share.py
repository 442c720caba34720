#!/usr/bin/env python3
"""bench/decode_share.py -- where a pipeline worker's CPU goes, by kind.

    decode_share.py PERF_SCRIPT_OUTPUT [TOP_FILE] > share.tsv

Input: `perf script -F comm,pid,ip,sym,dso` of a recording with call graphs
(one sample: a header line, then its frames leaf first, then a blank line).
Each sample is attributed by the first frame, walking from the leaf up, that
says what the work is for:

  decode      PostgreSQL's logical decoding: WAL reading, record decoding,
              the reorder buffer, the snapshot builder, and replicant's loop
              driving them (replicant_decoder_read) -- the pass that N
              pipelines on one publication each repeat today and could share
  encode      replicant's own code (output plugin callbacks, encoder, batch),
              and what it calls (type output functions, memory); for a
              pgoutput peek (scenario 8), pgoutput's callbacks and what they
              call
  txn         replicant's own transactions: checkpoint commits and catalog
              reads (replicant_checkpoint_*, replicant_catalog_*, loading the
              pipeline's row, SPI)
  http        libcurl and the kernel's socket/TCP path
  other       anything else (waiting, scheduling, unattributed frames)

Debian's postgres binary keeps only its exported symbols: static functions
(most of the reorder buffer's replay, ReorderBufferProcessTXN and friends)
show as [unknown] and decide nothing, so their samples are decided by the
next named frame -- typically xact_decode, which replays a transaction at its
commit record.  Frames perf marks "(inlined)" are skipped the same way and
decided by the function they were inlined into.

Prints "key<TAB>value" lines: <kind>_pct, samples.  TOP_FILE, if given,
gets each kind's 12 most frequent deciding frames (what to look at).
"""
import re
import sys

DECODE = re.compile(r"^(LogicalDecodingProcessRecord|XLogReadRecord|XLogNextRecord|XLogDecodeNextRecord|"
                    r"XLogReadAhead|XLogPrefetch|WALRead|logical_read_xlog_page|read_local_xlog_page|"
                    r"ReorderBuffer|DecodeXLogRecord|heap_decode|heap2_decode|xact_decode|standby_decode|"
                    r"logicalmsg_decode|xlog_decode|Decode[A-Z]|SnapBuild|ValidXLogRecord|"
                    r"ResolveCminCmaxDuringDecoding|LogicalDecoding|pg_logical_slot)")
CHECKPOINT = re.compile(r"checkpoint|catalog|pipeline_load|spi|SPI_", re.I)
# replicant's loop that drives XLogReadRecord + LogicalDecodingProcessRecord
# is part of the decoding pass (a shared pass would run it once).
DECODE_OWN = re.compile(r"^replicant_decoder_read")
HTTP_DSO = re.compile(r"libcurl|libssl|libcrypto|libnghttp|libz\.so|libbrotli")
HTTP_KERNEL = re.compile(r"^(tcp_|__tcp|sock_|__sock|sk_|inet_|__sys_send|__sys_recv|__x64_sys_send|"
                         r"__x64_sys_recv|ip_|__ip_|skb_|__skb|loopback_|__netif|net_rx|__dev_queue|"
                         r"process_backlog|__napi)")


def classify(frames):
    for sym, dso in frames:
        base = sym.split("+", 1)[0]
        if HTTP_DSO.search(dso):
            return "http", base
        if "kernel" in dso and HTTP_KERNEL.search(base):
            return "http", base
        if dso.endswith("pgoutput.so"):
            return "encode", base
        if dso.endswith("replicant.so") or "/replicant.so" in dso:
            if DECODE_OWN.search(base):
                return "decode", base
            return ("txn" if CHECKPOINT.search(base) else "encode"), base
        if DECODE.search(base):
            return "decode", base
    return "other", frames[0][0].split("+", 1)[0] if frames else "?"


def main():
    counts = {k: 0 for k in ("decode", "encode", "txn", "http", "other")}
    tops = {k: {} for k in counts}
    frames = None
    frame_re = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")

    def flush():
        if frames is not None:
            kind, sym = classify(frames)
            counts[kind] += 1
            tops[kind][sym] = tops[kind].get(sym, 0) + 1

    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            if not line.strip():
                flush()
                frames = None
                continue
            m = frame_re.match(line)
            if m and frames is not None:
                frames.append((m.group(1), m.group(2)))
            elif not line.startswith((" ", "\t")):
                flush()
                frames = []
    flush()
    total = sum(counts.values())
    if total == 0:
        sys.exit(1)
    for k, v in counts.items():
        print(f"{k}_pct\t{100.0 * v / total:.1f}")
    print(f"samples\t{total}")
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            for kind, syms in tops.items():
                f.write(f"{kind} ({100.0 * counts[kind] / total:.1f} %), deciding frame:\n")
                for sym, n in sorted(syms.items(), key=lambda kv: -kv[1])[:12]:
                    f.write(f"  {100.0 * n / total:5.1f} %  {sym}\n")


if __name__ == "__main__":
    main()
