#!/usr/bin/env python3
"""bench/memsample.py -- peak memory of replicant's snapshot processes.

    memsample.py OUT

Until killed, every 50 ms: the peak VmRSS, RssAnon and VmHWM (kB) of every
process titled "postgres: replicant pipeline ..." or "... snapshot ...",
written to OUT as "generation rss anon hwm" after each sample.  SIGUSR1
starts a new generation with the peaks at zero, so one sampler, started
before the timed runs, serves them all: its own start (half a second of
CPU here) and a shell loop forking pgrep and awk every 50 ms (a third of a
core) both took CPU from the snapshot they measured.
"""
import os
import re
import signal
import sys
import time

TITLE = re.compile(rb"^postgres: replicant (pipeline|snapshot) ")
FIELDS = {b"VmRSS:": 0, b"RssAnon:": 1, b"VmHWM:": 2}
resets = 0


def title(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def status(pid):
    vals = [0, 0, 0]
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                i = FIELDS.get(line.split(None, 1)[0])
                if i is not None:
                    vals[i] = int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return vals


def reset(*_):
    global resets
    resets += 1


def main(out):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGUSR1, reset)
    generation = -1
    seen = {}  # pid -> (one of ours, when first seen)
    while True:
        if generation != resets:
            generation = resets
            peak = [0, 0, 0]
        now = time.monotonic()
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            ours, since = seen.get(pid, (False, now))
            # A title is set just after the fork: a new pid is looked at
            # again for a second, then never.
            if not ours and now - since < 1.0:
                ours = bool(TITLE.match(title(pid)))
                seen[pid] = (ours, since)
            if ours:
                peak = [max(a, b) for a, b in zip(peak, status(pid))]
        with open(out + ".tmp", "w") as f:
            f.write(" ".join(map(str, [generation] + peak)) + "\n")
        os.replace(out + ".tmp", out)
        time.sleep(0.05)


if __name__ == "__main__":
    main(sys.argv[1])
