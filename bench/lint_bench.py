#!/usr/bin/env python3
"""Benchmark `epdoctor lint` (docs/lint.md, "Speed"): one file of N functions that each init,
work under a rank condition and destroy, called from module level (the shape of issue 27: 2,000
such functions took 24 s), the same with try/except/finally and spawn, for N = 500 .. 4000, and a
tree of many files. Prints the wall and CPU time of the best of several runs and the time per
function, which stays flat when the time is linear in the sites. The goal: a 2,000-function file
in under 2 s.

  python3 bench/lint_bench.py --bin target/release/epdoctor
  python3 bench/lint_bench.py --bin target/release/epdoctor --sizes 2000 --runs 3

Python 3.11+ standard library only; the files are generated under a temporary folder.
"""

import argparse
import os
import resource
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


def timed(cmd, runs):
    best = None
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if p.returncode not in (0, 1):
            sys.exit(f"lint_bench: {' '.join(cmd)} exited {p.returncode}: {p.stderr[:400]}")
        if best is None or wall < best[0]:
            best = (wall, cpu, p.stdout.count('"rule"'))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/epdoctor")
    ap.add_argument("--sizes", default="500,1000,2000,4000")
    ap.add_argument("--files", type=int, default=400, help="files in the tree benchmark (0: skip)")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    env_cmd = [a.bin, "lint", "--format", "json"]
    os.environ["EPDOCTOR_PYTHON"] = "none"
    with tempfile.TemporaryDirectory() as d:
        print(f"{'shape':>8} {'functions':>10} {'wall s':>8} {'cpu s':>8} {'us/function':>12} {'findings':>9}")
        for shape, make in (("plain", plain_file), ("nested", one_file)):
            for n in (int(x) for x in a.sizes.split(",")):
                path = os.path.join(d, f"{shape}{n}.py")
                with open(path, "w") as f:
                    f.write(make(n))
                wall, cpu, found = timed(env_cmd + [path], a.runs)
                print(f"{shape:>8} {n:>10} {wall:>8.3f} {cpu:>8.3f} {wall / n * 1e6:>12.1f} {found:>9}")
        if a.files:
            tree = os.path.join(d, "tree")
            for i in range(a.files):
                sub = os.path.join(tree, f"pkg{i % 20}")
                os.makedirs(sub, exist_ok=True)
                with open(os.path.join(sub, f"m{i}.py"), "w") as f:
                    f.write(one_file(10))
            wall, cpu, found = timed(env_cmd + [tree], a.runs)
            print(f"tree of {a.files} files x 10 functions: wall {wall:.3f} s, cpu {cpu:.3f} s, {found} findings")


if __name__ == "__main__":
    main()
