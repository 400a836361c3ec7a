#!/usr/bin/env python3
"""Real Flight Recorder dumps of a 4-rank gloo job on CPU, for the fixtures in tests/fixtures/fr/gloo-*
(issue 26). Needs torch (any build; it runs on CPU).

    python3 scripts/fr-gloo-dumps.py OUT_DIR missing     # rank 3 never calls the 6th all_reduce and
                                                        # writes no dump; ranks 0-2 wait in it and dump
    python3 scripts/fr-gloo-dumps.py OUT_DIR skip        # the same, but rank 3 dumps too

Each rank that dumps writes OUT_DIR/<host>_<rank> (the name torch gives with a host prefix) with
torch._C._distributed_c10d._dump_fr_trace() while its collective is still pending.
"""
import os
import socket
import sys
import time

import torch.multiprocessing as mp


def rank_main(rank, world, port, out, case):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="2000")
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace

    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.ones(1024)
    for _ in range(5):
        dist.all_reduce(x)
    dist.barrier()
    if rank == world - 1:
        # The odd rank out: never calls the 6th all_reduce.
        if case == "skip":
            time.sleep(2)
            open(os.path.join(out, f"{socket.gethostname()}_{rank}"), "wb").write(_dump_fr_trace())
        time.sleep(4)
        os._exit(0)
    dist.all_reduce(x, async_op=True)
    time.sleep(2)
    open(os.path.join(out, f"{socket.gethostname()}_{rank}"), "wb").write(_dump_fr_trace())
    time.sleep(3)
    os._exit(0)


if __name__ == "__main__":
    out, case = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(rank_main, args=(4, port, out, case), nprocs=4, join=True, start_method="spawn")
