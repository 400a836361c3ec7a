#!/usr/bin/env python3
"""Start-up latency of one command, process start included: `latency.py N CMD...` runs CMD N
times and prints the least and median wall time, the least CPU time (user + system, from wait4)
and the largest peak RSS. Python 3 standard library only."""
import os
import statistics
import subprocess
import sys
import time


def once(cmd):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, ru = os.wait4(p.pid, 0)
    return (time.perf_counter() - t0) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3, ru.ru_maxrss / 1024


def main():
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        sys.exit("usage: latency.py N CMD [ARG...]")
    n, cmd = int(sys.argv[1]), sys.argv[2:]
    runs = [once(cmd) for _ in range(n)]
    wall = sorted(r[0] for r in runs)
    print(
        f"min {wall[0]:.1f} ms median {statistics.median(wall):.1f} ms "
        f"cpu {min(r[1] for r in runs):.1f} ms rss {max(r[2] for r in runs):.0f} MiB :: {' '.join(cmd)}"
    )


if __name__ == "__main__":
    main()
