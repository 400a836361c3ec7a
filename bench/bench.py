#!/usr/bin/env python3
"""Benchmark `epdoctor explain` against ripgrep on generated NCCL/PyTorch logs (docs/performance.md).

For every data set, in one run: ripgrep's and explain's wall time, CPU time and peak RSS (from
wait4's rusage), several runs each, interleaved (rg, explain, rg, explain, ...) so that both see the
same machine load; the best run of each is compared. ripgrep searches the same files for the same
pattern set: the patterns of `epdoctor rules list --format json`, one per line (`rg -f`), named groups
made plain (rg joins the patterns into one regex, where a group name may appear once).

Then the start-up latency: explain on a 10 KB log, many times (process start included).

  bench/run.sh                 # build, generate what is missing, measure everything (about 2 GB)
  bench/run.sh --quick         # only the 100 MB sets and the 10 KB latency
  bench/run.sh --check         # also check that explain's fast path and its reference agree on them
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")

# (name, ranks, total MB, layout, generator options). `single`: all ranks interleaved in one file
# (a job's combined output); `per-rank`: one file per rank in a folder.
SETS = [
    ("single-8r-100mb", 8, 100, "single", []),
    ("per-rank-8r-100mb", 8, 100, "per-rank", []),
    ("single-64r-1gb", 64, 1000, "single", []),
    ("per-rank-64r-500mb", 64, 500, "per-rank", []),
    ("per-rank-512r-2gb", 512, 2000, "per-rank", []),
    # One line in seven a split communicator's `comm 0x... rank N nRanks M` line.
    ("comm-init-8r-100mb", 8, 100, "single", ["--comm-init-every", "7"]),
    # A launcher prefix on every line.
    ("ray-8r-100mb", 8, 100, "single", ["--prefix", "ray"]),
    ("srun-label-16r-100mb", 16, 100, "single", ["--prefix", "srun"]),
    # A 512-rank job's NCCL_DEBUG=INFO init chatter (channels, NET/IB, traces, comm lines), one file.
    ("info-512r-256mb", 512, 256, "single", ["--info-mix"]),
]
QUICK = {"single-8r-100mb", "per-rank-8r-100mb", "comm-init-8r-100mb", "ray-8r-100mb", "srun-label-16r-100mb",
         "info-512r-256mb"}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def path_of(name, layout):
    return os.path.join(DATA, name + (".log" if layout == "single" else ""))


def generate(sets, seed):
    """Generate the missing data sets, several generators at once."""
    procs = []
    for name, ranks, mb, layout, opts in sets:
        out = path_of(name, layout)
        done = out + ".done"
        if os.path.exists(done):
            continue
        print(f"generating {name} ({ranks} ranks, {mb} MB, {layout}) ...", flush=True)
        if os.path.isdir(out):
            shutil.rmtree(out)
        cmd = [sys.executable, os.path.join(HERE, "gen_logs.py"), "--ranks", str(ranks), "--total-mb", str(mb)]
        cmd += ["--layout", layout, "--out", out, "--seed", str(seed)] + opts
        procs.append((subprocess.Popen(cmd), done))
        if len(procs) >= (os.cpu_count() or 1):
            p, d = procs.pop(0)
            if p.wait() != 0:
                sys.exit("bench: the generator failed")
            open(d, "w").close()
    for p, d in procs:
        if p.wait() != 0:
            sys.exit("bench: the generator failed")
        open(d, "w").close()


def size_and_files(path):
    if os.path.isfile(path):
        return os.path.getsize(path), 1
    total, n = 0, 0
    for d, _, fs in os.walk(path):
        for f in fs:
            total += os.path.getsize(os.path.join(d, f))
            n += 1
    return total, n


def count_lines(path):
    files = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            while True:
                b = fh.read(1 << 22)
                if not b:
                    break
                n += b.count(b"\n")
    return n


def warm(path):
    """Read the files once so that every timed run finds them in the page cache."""
    files = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 22):
                pass


def measure(cmd, ok=(0,)):
    """Run cmd with stdout to /dev/null: (wall s, user+sys s, peak RSS MiB)."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        sys.exit(f"bench: {' '.join(cmd)} exited with {code}: {err[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def export_patterns(binary):
    rules = json.loads(sh([binary, "rules", "list", "--format", "json"]))
    pats = [p for r in rules for p in r["patterns"]]
    plain = [re.sub(r"\(\?P?<[A-Za-z_][A-Za-z0-9_]*>", "(?:", p) for p in pats]
    out = os.path.join(DATA, "patterns.txt")
    with open(out, "w") as f:
        f.write("".join(p + "\n" for p in plain))
    return out, len(rules), len(pats)


def machine(binary, rg):
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "memory": mem,
        "kernel": platform.release(),
        "epdoctor": sh([binary, "--version"]).strip(),
        "rg": sh([rg, "--version"]).splitlines()[0],
        "rustc": sh(["rustc", "--version"]).strip() if shutil.which("rustc") else "?",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "epdoctor"))
    ap.add_argument("--quick", action="store_true", help="only the 100 MB sets and the 10 KB latency")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each tool per set (best is kept)")
    ap.add_argument("--latency-runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--check", action="store_true", help="also run the fast-path/reference equivalence test")
    ap.add_argument("--only", help="comma-separated data set names")
    a = ap.parse_args()

    rg = shutil.which("rg")
    if not rg:
        sys.exit("bench: ripgrep (rg) is not installed; it is the reference. Install it with "
                 "`apt-get install ripgrep` or `cargo install ripgrep` and run again.")
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"bench: no epdoctor binary at {a.bin}; run `cargo build --release` (bench/run.sh does)")
    os.makedirs(DATA, exist_ok=True)
    sets = [s for s in SETS if (not a.quick or s[0] in QUICK) and (not a.only or s[0] in a.only.split(","))]
    generate(sets, a.seed)

    pats, nrules, npats = export_patterns(a.bin)
    info = machine(a.bin, rg)
    load0 = os.getloadavg()
    print(f"\nmachine: {info['cpu']}, {info['cores']} cores, {info['memory']}, Linux {info['kernel']}")
    print(f"tools:   {info['epdoctor']}; {info['rg']}; {info['rustc']}")
    print(f"pattern set: {npats} patterns of {nrules} rules ({os.path.relpath(pats, ROOT)})")
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}\n", flush=True)

    rows = []
    for name, ranks, mb, layout, _ in sets:
        path = path_of(name, layout)
        size, nfiles = size_and_files(path)
        warm(path)
        rg_cmd = [rg, "--no-ignore", "--hidden", "--no-filename", "--count", "-f", pats, path]
        ep_cmd = [a.bin, "explain", path, "--format", "json"]
        rgs, eps = [], []
        for _ in range(a.runs):
            rgs.append(measure(rg_cmd, ok=(0, 1)))
            eps.append(measure(ep_cmd, ok=(0, 1, 3)))
        rg_best = min(rgs)
        ep_best = min(eps)
        row = {
            "set": name,
            "files": nfiles,
            "ranks": ranks,
            "mb": size / 1e6,
            "rg_wall": rg_best[0],
            "rg_cpu": min(r[1] for r in rgs),
            "rg_rss": max(r[2] for r in rgs),
            "ep_wall": ep_best[0],
            "ep_cpu": min(r[1] for r in eps),
            "ep_rss": max(r[2] for r in eps),
        }
        row["lines"] = count_lines(path)
        row["ratio"] = row["ep_wall"] / row["rg_wall"]
        row["ep_cores"] = ep_best[1] / ep_best[0]
        row["rg_cores"] = rg_best[1] / rg_best[0]
        rows.append(row)
        print(
            f"{name:20} {nfiles:4} files {row['mb']:7.0f} MB  rg {row['rg_wall']:6.2f} s  "
            f"explain {row['ep_wall']:6.2f} s  ratio {row['ratio']:.2f}  "
            f"CPU rg {row['rg_cpu']:.2f} s explain {row['ep_cpu']:.2f} s ({row['ep_cpu'] / row['rg_cpu']:.2f})  "
            f"explain cores {row['ep_cores']:.2f}  RSS {row['ep_rss']:.0f} MiB",
            flush=True,
        )

    # Start-up latency: a 10 KB log (the start of the 8-rank set, cut at a line end).
    tiny = os.path.join(DATA, "tiny-10kb.log")
    src = path_of("single-8r-100mb", "single")
    if not os.path.exists(tiny):
        if not os.path.exists(src):
            generate([s for s in SETS if s[0] == "single-8r-100mb"], a.seed)
        head = open(src, "rb").read(10_000)
        open(tiny, "wb").write(head[: head.rfind(b"\n") + 1])
    lat = [measure([a.bin, "explain", tiny, "--format", "json"], ok=(0, 1, 3)) for _ in range(a.latency_runs)]
    rlat = [measure([rg, "--no-ignore", "--count", "-f", pats, tiny], ok=(0, 1)) for _ in range(10)]
    lat_ms = sorted(x[0] * 1e3 for x in lat)
    lat_row = {
        "bytes": os.path.getsize(tiny),
        "min_ms": lat_ms[0],
        "median_ms": statistics.median(lat_ms),
        "cpu_ms": min(x[1] for x in lat) * 1e3,
        "rss": max(x[2] for x in lat),
        "rg_min_ms": min(x[0] for x in rlat) * 1e3,
    }
    print(
        f"\n10 KB log ({lat_row['bytes']} bytes), {a.latency_runs} runs: explain min {lat_row['min_ms']:.1f} ms, "
        f"median {lat_row['median_ms']:.1f} ms, CPU {lat_row['cpu_ms']:.1f} ms, RSS {lat_row['rss']:.0f} MiB; "
        f"rg min {lat_row['rg_min_ms']:.1f} ms"
    )
    load1 = os.getloadavg()
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")

    if a.check:
        paths = ":".join(path_of(n, l) for n, _, _, l, _ in sets if n in QUICK)
        print(f"\nchecking explain's fast path against its reference on {paths} ...", flush=True)
        subprocess.run(
            ["cargo", "test", "--release", "--lib", "equivalence_on_given_logs", "--", "--ignored"],
            cwd=ROOT,
            env={**os.environ, "EPDOCTOR_EQUIV": paths},
            check=True,
        )

    # Markdown for docs/performance.md.
    md = [
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM, Linux {info['kernel']}; "
        f"{info['epdoctor']}, {info['rg']}, {info['rustc']}; pattern set: {npats} patterns of {nrules} rules; "
        f"best of {a.runs} runs each; load average {load0[0]:.1f} at start, {load1[0]:.1f} at end.",
        "",
        "| data set | files | MB | lines | rg s | explain s | wall ratio | rg CPU s | explain CPU s | CPU ratio | cores used | explain peak RSS MiB | rg peak RSS MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        md.append(
            f"| {r['set']} | {r['files']} | {r['mb']:.0f} | {r['lines']} | {r['rg_wall']:.2f} | {r['ep_wall']:.2f} | "
            f"{r['ratio']:.2f} | {r['rg_cpu']:.2f} | {r['ep_cpu']:.2f} | {r['ep_cpu'] / r['rg_cpu']:.2f} | "
            f"{r['ep_cores']:.2f} | {r['ep_rss']:.0f} | {r['rg_rss']:.0f} |"
        )
    md += [
        "",
        f"10 KB log: explain {lat_row['min_ms']:.1f} ms (min), {lat_row['median_ms']:.1f} ms (median of "
        f"{a.latency_runs}), process start included; rg {lat_row['rg_min_ms']:.1f} ms.",
    ]
    out = os.path.join(DATA, time.strftime("results-%Y%m%d-%H%M%S.md"))
    with open(out, "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n" + "\n".join(md))
    print(f"\n(written to {os.path.relpath(out, ROOT)})")
    with open(out.replace(".md", ".json"), "w") as f:
        json.dump({"machine": info, "rows": rows, "latency": lat_row, "load": [load0, load1]}, f, indent=1)


if __name__ == "__main__":
    main()
