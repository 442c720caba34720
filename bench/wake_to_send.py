#!/usr/bin/env python3
"""Where a consumer's time goes between its wake-up and its first send.

Reads `perf script -F time,event` of syscall tracepoints recorded on one
process (bench/lib.sh wake_trace_start) and prints "name value" lines, the
median of each step in microseconds over the wake-ups that sent something.

A wake-up is the return of epoll_wait; its steps end at the first of each
of these syscalls, in this order, when the process makes them:
  pread64       reading WAL (both consumers)
  rt_sigprocmask the end of a transaction's replay (PostgreSQL's abort of
                the subtransaction it replays in; replicant's worker only)
  poll          libcurl's check of the kept-alive connection, the start of
                its transfer (replicant's worker only)
  sendto        the first byte out: to the sink (replicant), to
                pg_recvlogical (walsender)
Tracepoints cost about as much as the syscalls they mark, not more: the
figures are a little above an untraced run's.
"""
import sys

STEPS = ["wake", "pread64", "rt_sigprocmask", "poll", "sendto"]


def wakeups(lines):
    current = None
    for line in lines:
        parts = line.split()
        if len(parts) < 2:
            continue
        t = float(parts[0].rstrip(":"))
        event = parts[1].rstrip(":").rsplit(":", 1)[-1]
        name = event.removeprefix("sys_enter_").removeprefix("sys_exit_")
        if name == "epoll_wait" and event.startswith("sys_exit_"):
            if current and "sendto" in current:
                yield current
            current = {"wake": t}
        elif current is not None and "sendto" not in current and name in STEPS:
            # each step counts once, after the one before it
            before = STEPS[STEPS.index(name) - 1]
            if name not in current and (before in current or name == "sendto"):
                current[name] = t


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None


def main():
    sent = list(wakeups(sys.stdin))
    print("wakeups_sent", len(sent))
    steps = [s for s in STEPS if any(s in w for w in sent) or s == "wake"]
    whole = [w for w in sent if all(s in w for s in steps)]
    for a, b in zip(steps, steps[1:]):
        m = median((w[b] - w[a]) * 1e6 for w in whole)
        print(f"{a}_{b}_us", f"{m:.1f}" if m is not None else "")
    m = median((w["sendto"] - w["wake"]) * 1e6 for w in sent)
    print("wake_sendto_us", f"{m:.1f}" if m is not None else "")


if __name__ == "__main__":
    main()
