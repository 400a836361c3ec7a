#!/usr/bin/env python3
"""A small torch.distributed (NCCL) job that ends with or without destroy_process_group(), for
`epdoctor repro -- python3 examples/torch_teardown.py`.

Two ranks (EPDOCTOR_RANKS or --ranks) are started with torch.multiprocessing on the GPUs that exist;
with fewer GPUs than ranks, ranks share a GPU. NCCL before 2.30.3 refuses two ranks of one
communicator on one GPU ("Duplicate GPU detected"): each rank then gets its own NCCL_HOSTID, so NCCL
sees separate nodes and talks over NET/Socket (not the intranode transports). From 2.30.3,
NCCL_MULTI_RANK_GPU_ENABLE=1 keeps them real local ranks. A variable the user set is left alone.

Every rank prints epdoctor's marker lines ([epdoctor] rank=R phase=... t=...), so `repro` reports
phase times and the NCCL version each cell ran.

  --destroy / --no-destroy   call dist.destroy_process_group() at the end (env DESTROY_PG=1/0; default 1)
  --barrier / --no-barrier   dist.barrier() before the teardown (env BARRIER=1/0; default 1)

    epdoctor repro --env NCCL_DEBUG=WARN,INFO --env DESTROY_PG=0,1 -- python3 examples/torch_teardown.py
"""
import argparse
import os
import socket
import sys
import time


def marker(rank, text):
    print(f"[epdoctor] rank={rank} {text}", flush=True)


def env_flag(name, default):
    v = os.environ.get(name, "")
    if v == "":
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nccl_version_tuple(torch):
    v = torch.cuda.nccl.version()
    return tuple(v) if isinstance(v, (tuple, list)) else (v // 10000, (v // 100) % 100, v % 100)


def rank_main(rank, world, port, share_env, destroy, barrier):
    import torch
    import torch.distributed as dist

    marker(rank, f"phase=init t={time.time():.6f}")
    ngpu = torch.cuda.device_count()
    dev = rank % ngpu
    for key, value in share_env.items():
        if key not in os.environ:
            os.environ[key] = value.format(rank=rank)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", dev))
    ver = ".".join(str(x) for x in nccl_version_tuple(torch))
    marker(rank, f"nccl_version={ver} torch={torch.__version__} device={dev} ranks_per_gpu={-(-world // ngpu)}")

    marker(rank, f"phase=work t={time.time():.6f}")
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    parts = [torch.empty(4, device="cuda") for _ in range(world)]
    dist.all_gather(parts, torch.full((4,), float(rank), device="cuda"))
    torch.cuda.synchronize()
    ok = abs(x[0].item() - want) < 1e-3 and all(abs(p[0].item() - r) < 1e-6 for r, p in enumerate(parts))
    marker(rank, f"check={'ok' if ok else 'fail'}")

    marker(rank, f"phase=teardown-start t={time.time():.6f}")
    t0 = time.time()
    if barrier:
        dist.barrier()
    if destroy:
        dist.destroy_process_group()
        marker(rank, f"teardown=destroy_process_group teardown_s={time.time() - t0:.6f}")
    else:
        marker(rank, "teardown=interpreter-exit")
    marker(rank, f"phase=teardown-end t={time.time():.6f}")
    if not ok:
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=int(os.environ.get("EPDOCTOR_RANKS") or 2))
    p.add_argument("--destroy", action=argparse.BooleanOptionalAction, default=env_flag("DESTROY_PG", True))
    p.add_argument("--barrier", action=argparse.BooleanOptionalAction, default=env_flag("BARRIER", True))
    a = p.parse_args()

    import torch
    import torch.multiprocessing as mp

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("torch_teardown.py: no CUDA GPU visible to torch; this example needs NCCL on a GPU", file=sys.stderr)
        return 2
    if a.ranks < 1:
        print("torch_teardown.py: --ranks must be at least 1", file=sys.stderr)
        return 2
    ngpu = torch.cuda.device_count()
    share_env = {}
    if a.ranks > ngpu:
        ver = nccl_version_tuple(torch)
        if ver >= (2, 30, 3):
            share_env["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
        else:
            share_env["NCCL_HOSTID"] = "epdoctor-example-rank{rank}"
        shown = ", ".join(f"{k}={v}" for k, v in share_env.items() if k not in os.environ) or "(set by you)"
        print(f"torch_teardown.py: {a.ranks} ranks on {ngpu} GPU(s), NCCL {'.'.join(map(str, ver))}: {shown}", flush=True)
    print(f"torch_teardown.py: destroy_process_group={'yes' if a.destroy else 'no'} barrier={'yes' if a.barrier else 'no'}", flush=True)
    mp.spawn(rank_main, args=(a.ranks, free_port(), share_env, a.destroy, a.barrier), nprocs=a.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
