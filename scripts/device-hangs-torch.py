#!/usr/bin/env python3
"""Two-rank torch.distributed (NCCL) jobs that hang or lose a rank on purpose, for the Flight
Recorder and hang-stack fixtures of issue 14 (run by scripts/device-hangs.sh on a GPU machine).

    python3 scripts/device-hangs-torch.py CASE        # starts rank 0 and rank 1 and waits for both

CASE:
  skip       rank 1 never joins the 4th all_reduce (it sleeps): rank 0 waits for it until the
             process group's timeout; the watchdog then writes the Flight Recorder dumps
  mismatch   at the 4th collective rank 0 all_reduces 4096 float32 and rank 1 2048 bfloat16
  kill       rank 1 is SIGKILLed while both are inside a loop of large all_reduces
  early-exit rank 1 exits (os._exit) after the work, rank 0 calls destroy_process_group()
             (a hang on NCCL >= 2.31 with two real local ranks)

The ranks are started by this script (not torchrun), each with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT in its environment, and the parent waits for both without killing
either: a survivor stays as it is until its own watchdog or epdoctor's deadline ends it.
Two ranks share one GPU: NCCL >= 2.30.3 gets NCCL_MULTI_RANK_GPU_ENABLE=1 (real local ranks),
older NCCL a per-rank NCCL_HOSTID (separate "nodes", NET/Socket). Flight Recorder settings
(TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_NCCL_DEBUG_INFO_TEMP_FILE) come
from the caller's environment. PG_TIMEOUT_S sets the process group's timeout (default 15).
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

CASES = ("skip", "mismatch", "kill", "early-exit")


def marker(rank, text):
    print(f"[epdoctor] rank={rank} {text}", flush=True)


def launch(case):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kids = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        kids.append(subprocess.Popen([sys.executable, __file__, "--rank", case], env=env))
    codes = [k.wait() for k in kids]
    print(f"device-hangs-torch.py: case={case} exit codes {codes}", flush=True)
    return 0 if all(c == 0 for c in codes) else 1


def rank_main(case):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    v = torch.cuda.nccl.version()
    ver = tuple(v) if isinstance(v, (tuple, list)) else (v // 10000, (v // 100) % 100, v % 100)
    # torch reports the NCCL it was built with; a preloaded newer one is chosen with the variable.
    if ver >= (2, 30, 3) or os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE") == "1":
        os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
    else:
        os.environ.setdefault("NCCL_HOSTID", f"epdoctor-fr-rank{rank}")
    torch.cuda.set_device(0)
    marker(rank, f"phase=init t={time.time():.6f}")
    timeout = timedelta(seconds=float(os.environ.get("PG_TIMEOUT_S", "15")))
    dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", 0))
    marker(rank, f"nccl_version={'.'.join(map(str, ver))} torch={torch.__version__} case={case}")
    marker(rank, f"phase=work t={time.time():.6f}")

    x = torch.ones(4096, device="cuda")
    for _ in range(3):
        dist.all_reduce(x)
    dist.all_gather_into_tensor(torch.empty(2 * 4096, device="cuda"), x)
    torch.cuda.synchronize()
    marker(rank, "warmup=ok")

    if case == "skip":
        if rank == 1:
            marker(rank, "skipping the 4th all_reduce")
            time.sleep(600)
        else:
            dist.all_reduce(x)
            torch.cuda.synchronize()
    elif case == "mismatch":
        if rank == 0:
            dist.all_reduce(torch.ones(4096, device="cuda"))
        else:
            dist.all_reduce(torch.ones(2048, device="cuda", dtype=torch.bfloat16))
        torch.cuda.synchronize()
        # If NCCL got through the mismatch, dump what the recorder holds, as the watchdog would have.
        path = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/nccl_trace_rank_") + str(rank)
        with open(path, "wb") as f:
            f.write(torch._C._distributed_c10d._dump_nccl_trace())
        marker(rank, f"dumped {path}")
    elif case == "kill":
        big = torch.ones(64 << 20, device="cuda")
        if rank == 1:
            threading.Timer(3.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        for i in range(100000):
            dist.all_reduce(big)
            if i % 8 == 0:
                torch.cuda.synchronize()
    elif case == "early-exit":
        if rank == 1:
            marker(rank, "exiting early, before destroy_process_group")
            os._exit(0)
        marker(rank, f"phase=teardown-start t={time.time():.6f}")
        dist.destroy_process_group()
        marker(rank, f"phase=teardown-end t={time.time():.6f}")
        return 0
    marker(rank, f"phase=teardown-start t={time.time():.6f}")
    dist.destroy_process_group()
    marker(rank, f"phase=teardown-end t={time.time():.6f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank" and sys.argv[2] in CASES:
        sys.exit(rank_main(sys.argv[2]))
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: device-hangs-torch.py {{{','.join(CASES)}}}", file=sys.stderr)
        sys.exit(2)
    sys.exit(launch(sys.argv[1]))
