#!/usr/bin/env python3
"""Real successful two-rank torch.distributed (NCCL) runs for issue 22's point 6: INFO lines and
retries on a run that worked must come out `benign` or `clean`, never `actionable`.

    python3 scripts/device-success-runs.py OUT [EPDOCTOR]

Each variant starts rank 0 and rank 1 itself (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in
their environment), both on the one GPU of the machine (NCCL >= 2.30.3: NCCL_MULTI_RANK_GPU_ENABLE=1;
older: a per-rank NCCL_HOSTID), and writes OUT/<variant>.log (both ranks' stdout and stderr, in
the order written, with each rank's exit code at the end) and, when EPDOCTOR is given,
OUT/<variant>.explain.json and .txt. Every rank does 20 all_reduces, checks the sum, prints its
result, and (unless the variant says otherwise) calls barrier() and destroy_process_group().

Variants:
  info            NCCL_DEBUG=INFO
  warn-detail     NCCL_DEBUG=WARN TORCH_CPP_LOG_LEVEL=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL
  store-retry     NCCL_DEBUG=INFO TORCH_CPP_LOG_LEVEL=INFO, rank 1 started 3 s before rank 0, so its
                  store client retries until rank 0's server listens
  info-all-nodestroy  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL, no destroy_process_group (torch warns)
"""
import json
import os
import socket
import subprocess
import sys
import time

VARIANTS = {
    "info": {"NCCL_DEBUG": "INFO"},
    "warn-detail": {"NCCL_DEBUG": "WARN", "TORCH_CPP_LOG_LEVEL": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
    "store-retry": {"NCCL_DEBUG": "INFO", "TORCH_CPP_LOG_LEVEL": "INFO"},
    "info-all-nodestroy": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ALL", "NO_DESTROY": "1"},
}


def rank_main():
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    x = torch.ones(1 << 20, device="cuda")
    for _ in range(20):
        dist.all_reduce(x)
        x.div_(dist.get_world_size())
    torch.cuda.synchronize()
    ok = bool(torch.allclose(x, torch.ones_like(x)))
    print(f"rank {rank}: 20 all_reduces, result {'ok' if ok else 'WRONG'}", flush=True)
    if os.environ.get("NO_DESTROY") != "1":
        dist.barrier()
        dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)
    return 0 if ok else 1


def nccl_multi_rank_gpu():
    import torch

    v = torch.cuda.nccl.version()
    return tuple(v) >= (2, 30, 3)


def run(name, extra, out):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(out, f"{name}.log"), "wb")
    multi = nccl_multi_rank_gpu()
    kids = []
    order = [1, 0] if name == "store-retry" else [0, 1]
    for r in order:
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONUNBUFFERED="1", **extra)
        if multi:
            env["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
        else:
            env["NCCL_HOSTID"] = f"epdoctor-rank{r}"
        kids.append((r, subprocess.Popen([sys.executable, __file__, "--rank"], env=env, stdout=log, stderr=log)))
        if name == "store-retry" and r == 1:
            time.sleep(3)
    codes = {}
    for r, k in kids:
        try:
            codes[r] = k.wait(timeout=180)
        except subprocess.TimeoutExpired:
            k.kill()
            codes[r] = "timeout"
    log.flush()
    for r in sorted(codes):
        log.write(f"rank {r} exited with code {codes[r]}\n".encode())
    log.close()
    return codes


def main():
    if sys.argv[1:] == ["--rank"]:
        sys.exit(rank_main())
    out = sys.argv[1]
    bin_ = sys.argv[2] if len(sys.argv) > 2 else None
    os.makedirs(out, exist_ok=True)
    summary = {}
    for name, extra in VARIANTS.items():
        t0 = time.time()
        codes = run(name, extra, out)
        entry = {"exit_codes": codes, "wall_s": round(time.time() - t0, 1)}
        if bin_:
            logp = os.path.join(out, f"{name}.log")
            for fmt, ext in (("json", "explain.json"), ("text", "explain.txt")):
                p = subprocess.run([bin_, "explain", "--color", "never", "--format", fmt, logp],
                                   capture_output=True, text=True)
                with open(os.path.join(out, f"{name}.{ext}"), "w") as f:
                    f.write(p.stdout + p.stderr)
                if fmt == "json":
                    try:
                        a = json.loads(p.stdout)
                        entry["verdict"] = a["verdict"]
                        entry["outcome"] = a["outcome"]["status"]
                        entry["primary"] = (a.get("primary") or {}).get("rule")
                    except (ValueError, KeyError) as e:
                        entry["explain_error"] = str(e)
        summary[name] = entry
        print(name, json.dumps(entry), flush=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
