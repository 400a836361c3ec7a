#!/usr/bin/env python3
"""Benchmark `epdoctor lint` (docs/lint.md, "Speed"): one file of N functions that each init,
work under a rank condition and destroy, called from module level (the shape of issue 27: 2,000
such functions took 24 s), the same with try/except/finally and spawn, for N = 500 .. 4000, and a
tree of many files. Prints the wall and CPU time of the best of several runs and the time per
function, which stays flat when the time is linear in the sites. The goal: a 2,000-function file
in under 2 s.

  python3 bench/lint_bench.py --bin target/release/epdoctor
  python3 bench/lint_bench.py --bin target/release/epdoctor --sizes 2000 --runs 3
  python3 bench/lint_bench.py --bin target/release/epdoctor --sizes '' --files 1336 --runs 1
  python3 bench/lint_bench.py --sizes 1000,2000 --files 413 --keep /tmp/lint-trees   # keep the inputs

Peak RSS is wait4's ru_maxrss of the lint process (the largest of the runs).

Python 3.11+ standard library only; the files are generated under a temporary folder.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

FUNC = '''
def job_{i}(rank, world_size, items):
    os.environ["MASTER_PORT"] = str(29500 + {i})
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    total = torch.zeros(1, device="cuda")
    for x in items:
        total += x
        if rank == 0 and x < 0:
            print("negative", x)
    try:
        dist.all_reduce(total)
        if rank == 0:
            save_{i}(total)
        dist.barrier()
    except RuntimeError as e:
        print(e)
        raise
    finally:
        dist.destroy_process_group()
    return total


def save_{i}(t):
    with open("out_{i}.txt", "w") as f:
        f.write(str(t.item()))
'''

PLAIN = """
def f{i}(rank, t):
    dist.init_process_group("nccl")
    if rank == 0:
        print("x")
    dist.all_reduce(t)
    dist.destroy_process_group()
"""

HEAD = "import os\nimport torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\n"


def plain_file(n):
    body = [HEAD] + [PLAIN.format(i=i) for i in range(n)]
    body.append('\nif __name__ == "__main__":\n')
    body += [f"    f{i}(0, None)\n" for i in range(n)]
    return "".join(body)


def one_file(n):
    body = [HEAD] + [FUNC.format(i=i) for i in range(n)]
    body.append('\nif __name__ == "__main__":\n')
    body += [f"    mp.spawn(job_{i}, args=(2, [1.0]), nprocs=2)\n" for i in range(n)]
    return "".join(body)


def run_once(cmd):
    """(wall s, CPU s, peak RSS MiB, stdout) of one run, from wait4 on the child."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode not in (0, 1):
            sys.exit(f"lint_bench: {' '.join(cmd)} exited {p.returncode}: {err.read()[:400]!r}")
        return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, out.read().decode()


def timed(cmd, runs):
    best = None
    peak = 0.0
    for _ in range(runs):
        wall, cpu, rss, stdout = run_once(cmd)
        peak = max(peak, rss)
        if best is None or wall < best[0]:
            best = (wall, cpu, stdout.count('"rule"'))
    return best + (peak,)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/epdoctor")
    ap.add_argument("--sizes", default="500,1000,2000,4000")
    ap.add_argument("--files", type=int, default=400, help="files in the tree benchmark (0: skip)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", help="write the inputs into this folder and keep them")
    a = ap.parse_args()
    env_cmd = [a.bin, "lint", "--format", "json"]
    os.environ["EPDOCTOR_PYTHON"] = "none"
    with tempfile.TemporaryDirectory() as tmp:
        d = a.keep or tmp
        os.makedirs(d, exist_ok=True)
        print(f"{'shape':>8} {'functions':>10} {'wall s':>8} {'cpu s':>8} {'us/function':>12} {'findings':>9} {'peak MiB':>9}")
        for shape, make in (("plain", plain_file), ("nested", one_file)):
            for n in (int(x) for x in a.sizes.split(",") if x):
                path = os.path.join(d, f"{shape}{n}.py")
                with open(path, "w") as f:
                    f.write(make(n))
                wall, cpu, found, rss = timed(env_cmd + [path], a.runs)
                print(f"{shape:>8} {n:>10} {wall:>8.3f} {cpu:>8.3f} {wall / n * 1e6:>12.1f} {found:>9} {rss:>9.1f}")
        if a.files:
            tree = os.path.join(d, f"tree{a.files}")
            for i in range(a.files):
                sub = os.path.join(tree, f"pkg{i % 20}")
                os.makedirs(sub, exist_ok=True)
                with open(os.path.join(sub, f"m{i}.py"), "w") as f:
                    f.write(one_file(10))
            wall, cpu, found, rss = timed(env_cmd + [tree], a.runs)
            print(
                f"tree of {a.files} files x 10 functions: wall {wall:.3f} s, cpu {cpu:.3f} s, {found} findings, "
                f"peak RSS {rss:.1f} MiB"
            )


if __name__ == "__main__":
    main()
