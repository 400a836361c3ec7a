#!/usr/bin/env python3
"""Peak RSS of `epdoctor repro` against the size of a cell's log (issue 26, point 8; docs/performance.md).

One failing cell per size: the command prints SIZE MB of 100-byte lines, then `Traceback: boom`, and
exits 3, so repro reads the log's tail for the report's "last line" note as well as running explain on
it. The printer is `head | tr | fold`, a few MB of RSS, so the peak that wait4 reports for epdoctor's
process tree is epdoctor's own. The reference is the smallest size in the same run: the ratio says how
much of the peak grows with the log.

  bench/repro_mem.py [--bin target/release/epdoctor] [--sizes 4,100,400] [--runs 2]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def one(binary, mb, work, one_line):
    out = os.path.join(work, f"run-{mb}mb-{time.monotonic_ns()}")
    # --one-line: no newline until the end (a progress bar redrawn with \r, as tqdm does).
    fold = "fold -w 99 | tr '\\n' '\\r'" if one_line else "fold -w 99"
    printer = (
        f"head -c {mb * 1_000_000} /dev/zero | tr '\\0' x | {fold}; "
        "echo; echo 'Traceback: boom'; exit 3"
    )
    argv = [binary, "repro", "--quiet", "--timeout", "600", "--out", out, "--", "sh", "-c", printer]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    report = open(os.path.join(out, "report.md"), errors="replace").read() if os.path.exists(out) else ""
    if "Traceback: boom" not in report:
        sys.exit(f"repro_mem: the report of the {mb} MB run lacks the log's last line; stderr:\n{err[-2000:]}")
    log = os.path.join(out, "cells")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(log) for f in fs)
    shutil.rmtree(out)
    return ru.ru_maxrss / 1024, wall, size / 1e6, os.waitstatus_to_exitcode(status)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/epdoctor"))
    ap.add_argument("--sizes", default="4,100,400", help="log sizes in MB, the first is the reference")
    ap.add_argument("--runs", type=int, default=2, help="runs per size, interleaved; the lowest peak is kept")
    ap.add_argument("--one-line", action="store_true", help="the job prints no newline (a \\r progress bar)")
    ap.add_argument("--work", default=None, help="folder for the run folders (default: a temporary one)")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    work = a.work or tempfile.mkdtemp(prefix="epdoctor-repro-mem-")
    best = {}
    for _ in range(a.runs):
        for mb in sizes:
            rss, wall, logmb, rc = one(a.bin, mb, work, a.one_line)
            print(f"  {mb:>5} MB job: peak RSS {rss:7.1f} MiB, {wall:6.1f} s, cell logs {logmb:7.1f} MB, exit {rc}", file=sys.stderr)
            if mb not in best or rss < best[mb][0]:
                best[mb] = (rss, wall, logmb)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    ref = best[sizes[0]][0]
    shape = " (no newline: 100-byte parts separated by CR)" if a.one_line else " (100-byte lines)"
    print(f"binary: {a.bin}{shape}")
    print("| job prints | cell logs | peak RSS | ratio to the reference | wall |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for mb in sizes:
        rss, wall, logmb = best[mb]
        print(f"| {mb} MB | {logmb:.0f} MB | {rss:.1f} MiB | {rss / ref:.2f} | {wall:.1f} s |")


if __name__ == "__main__":
    main()
