#!/usr/bin/env python3
"""DeepEP's own intranode test (tests/test_intranode.py of a built DeepEP tree) on however many
GPUs this machine has, for `epdoctor repro -- python3 scripts/deepep_intranode.py ...`.

The test runs unchanged: this file calls its `test_loop` for every rank, as the test's own
`__main__` does (mp.spawn, the same flags). It changes only what one GPU for several ranks needs,
and says so on stdout:
- the test's `init_dist` binds rank i to `cuda:i`; here rank i gets `cuda:(i % GPUs)`, with the
  same rendezvous (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK as the test reads them);
- ranks that share a GPU get a different `NCCL_HOSTID` each (NCCL refuses two ranks of one
  communicator on one device otherwise), unless NCCL_HOSTID is set;
- MASTER_PORT, when unset, is a free port instead of the test's fixed 8361, so back-to-back cells
  do not meet a previous cell's store;
- `DESTROY_PG=0` skips the test's final `dist.destroy_process_group()` (the teardown axis).

  DEEPEP_DIR=/path/to/DeepEP python3 scripts/deepep_intranode.py --num-processes 2 --num-tokens 1024
"""
import argparse
import inspect
import os
import socket
import sys

DEEPEP = os.environ.get("DEEPEP_DIR")
if not DEEPEP or not os.path.isfile(os.path.join(DEEPEP, "tests", "test_intranode.py")):
    sys.exit(f"deepep_intranode.py: DEEPEP_DIR={DEEPEP!r} is not a DeepEP tree (no tests/test_intranode.py)")
sys.path[:0] = [DEEPEP, os.path.join(DEEPEP, "tests")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import test_intranode  # noqa: E402  (DeepEP's test, imported from DEEPEP_DIR)


def init_dist(local_rank, num_local_ranks):
    """The test's rendezvous, with rank -> GPU wrapped around the GPUs there are."""
    gpus = torch.cuda.device_count()
    device = local_rank % gpus
    if num_local_ranks > gpus and "NCCL_HOSTID" not in os.environ:
        os.environ["NCCL_HOSTID"] = f"deepep-rank{local_rank}"
    nodes, node_rank = int(os.getenv("WORLD_SIZE", 1)), int(os.getenv("RANK", 0))
    params = {
        "backend": "nccl",
        "init_method": f"tcp://{os.getenv('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}",
        "world_size": nodes * num_local_ranks,
        "rank": node_rank * num_local_ranks + local_rank,
    }
    if "device_id" in inspect.signature(dist.init_process_group).parameters:
        params["device_id"] = torch.device(f"cuda:{device}")
    dist.init_process_group(**params)
    torch.set_default_dtype(torch.bfloat16)
    torch.set_default_device("cuda")
    torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), dist.new_group(list(range(num_local_ranks * nodes)))


def loop(local_rank, num_local_ranks, args):
    test_intranode.init_dist = init_dist
    if os.environ.get("DESTROY_PG", "1") == "0":
        dist.destroy_process_group = lambda *a, **k: None
    test_intranode.test_loop(local_rank, num_local_ranks, args)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="DeepEP's tests/test_intranode.py, ranks wrapped onto the GPUs there are")
    p.add_argument("--num-processes", type=int, default=8)
    p.add_argument("--num-tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--num-topk", type=int, default=8)
    p.add_argument("--num-experts", type=int, default=256)
    args = p.parse_args()
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    gpus = torch.cuda.device_count()
    print(
        f"[deepep_intranode] {args.num_processes} ranks on {gpus} GPU(s); "
        f"DESTROY_PG={os.environ.get('DESTROY_PG', '1')}; MASTER_PORT={os.environ['MASTER_PORT']}"
        + (f"; NCCL_HOSTID per rank (shared GPUs)" if args.num_processes > gpus and "NCCL_HOSTID" not in os.environ else ""),
        flush=True,
    )
    torch.multiprocessing.spawn(loop, args=(args.num_processes, args), nprocs=args.num_processes)
