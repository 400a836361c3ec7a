#!/usr/bin/env python3
"""Generate realistic NCCL_DEBUG=INFO / PyTorch distributed logs for the explain benchmark.

Line shapes are copied from the H200 runs' INFO logs (NCCL 2.22.3 and 2.28; docs/results/) and from
NCCL's and PyTorch's message formats (the rules' cited sources); host, pid, tid, device,
ranks, pointers and timestamps vary per rank. What one rank writes:

  * init of the world communicator and of a few split communicators (NCCL_DEBUG=INFO init chatter:
    plugins, NET/IB, ring `Channel NN/MM :` lines that list every rank, Trees, P2P/NET connection lines,
    proxy UDS chatter, Init COMPLETE, timings);
  * a runtime part that fills the size budget: NCCL_DEBUG_SUBSYS=COLL lines (one per collective), the
    training loop's own prints, the odd PyTorch c10 warning, Python warning and NCCL WARN family
    (socket retries, IB async events, RMA/GDRCopy);
  * teardown: Destroy/Abort COMPLETE, the NCCL <= 2.22 proxy-service teardown pair on some ranks, the
    torch "destroy_process_group() was not called" warning, and on one rank a watchdog timeout with a
    traceback (so the verdict is `actionable` and the engine has real work to do).

Two knobs make the sets that stress what the engine does per matched line and per prefix:

  * --comm-init-every 7: one line in seven is a communicator lifecycle line carrying
    `comm 0x... rank N nRanks M` (Init START/COMPLETE, the `nRanks nNodes localRanks` line, Destroy
    COMPLETE; shapes as in the H200 runs' logs), each for a new split communicator (a job that
    creates sub-groups all the time: per-layer groups, pipeline stages, elastic restarts);
  * --info-mix: the runtime part is not COLL lines but what a large job's NCCL_DEBUG=INFO init prints
    over and over (issue 24): ring channel lines `via P2P/CUMEM/read`, NET channel lines
    `[send] via NET/IB/N/GDRDMA`, `Connected all rings`, `Trees`, `NET/IB : Using`, the
    `misc/socket.cc:826 -> 3` return trace and `comm 0x.. rank N nRanks M` lines, in equal shares,
    with one WARN line in 2,000 (a socket or proxy-accept warning);
  * --prefix ray|srun: every line carries a launcher prefix, Ray's `(RayWorkerWrapper pid=N, ip=A) `
    or `srun --label`'s task number `12: ` (padded to the width of the largest one, as srun does).

Deterministic for a given --seed. Writes one file per rank (--layout per-rank) or one file with all
ranks interleaved in blocks, as a job's combined stdout would be (--layout single).

  python3 bench/gen_logs.py --ranks 64 --total-mb 500 --layout per-rank --out bench/data/r64-500m
"""

import argparse
import os
import random
import sys

NCCL_VERSION = "2.22.3+cuda12.6"


class Rank:
    """Everything that is fixed for one rank's process."""

    def __init__(self, rank, nranks, seed, host_style):
        self.rank = rank
        self.nranks = nranks
        self.rng = random.Random(seed * 1_000_003 + rank)
        self.node = rank // 8
        self.local = rank % 8
        if host_style == 0:
            self.host = "gpu-h200-%03d" % self.node
        elif host_style == 1:
            self.host = "%012x" % random.Random(seed + self.node).getrandbits(48)
        else:
            self.host = "dgx-b%02d-n%02d" % (self.node // 16, self.node % 16)
        self.pid = 1000 + self.rng.randrange(200000)
        self.tid = self.pid
        self.proxy_tid = self.pid + 6 + self.rng.randrange(8)
        self.uds_tid = self.proxy_tid + 1
        self.prog_tid = self.proxy_tid + 4
        self.p = "%s:%d:%d [%d] NCCL INFO " % (self.host, self.pid, self.tid, self.local)
        self.pp = "%s:%d:%d [%d] NCCL INFO " % (self.host, self.pid, self.proxy_tid, self.local)
        self.pu = "%s:%d:%d [%d] NCCL INFO " % (self.host, self.pid, self.uds_tid, self.local)
        self.comm = 0x55D000000000 + self.rng.getrandbits(36)
        self.ip = "10.%d.%d.%d" % (self.node // 250, self.node % 250, 10 + self.local)
        self.step = 0
        self.op = 0
        self.sec = 8 * 3600 + 12 * 60 + self.rng.random()  # seconds into 2026-11-29
        self.split = 0

    def hex(self, bits=40):
        return "0x7f%010x" % self.rng.getrandbits(bits)

    def ts_c10(self):
        s = self.sec
        return "1129 %02d:%02d:%02d.%09d" % (s // 3600, (s // 60) % 60, int(s) % 60, int((s % 1) * 1e9))

    def ts_nccl(self):
        s = int(self.sec)
        return "2026-11-29 %02d:%02d:%02d" % (s // 3600, (s // 60) % 60, s % 60)


def comm_init(r, comm, nranks, rank, world, out):
    """NCCL init chatter for one communicator of `nranks` ranks in which r is `rank`."""
    p, pp, pu, rng = r.p, r.pp, r.pu, r.rng
    nnodes = max(1, nranks // 8)
    if world:
        out += [
            p + "cudaDriverVersion 12080",
            p + "Bootstrap : Using bond0:%s<0>" % r.ip,
            p + "NCCL version " + NCCL_VERSION,
            p + "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
            p + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB [4]mlx5_6:1/IB "
            "[5]mlx5_9:1/IB [6]mlx5_10:1/IB [7]mlx5_11:1/IB [RO]; OOB bond0:%s<0>" % r.ip,
            p + "Using network IB",
        ]
    commid = rng.getrandbits(64)
    out += [
        p + "ncclCommInitRank comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %x0 commId 0x%x - Init START"
        % (comm, rank, nranks, r.local, r.local, 0x18 + r.local * 0x10, commid),
        p + "Setting affinity for GPU %d to ffffffff,ffffffff,00000000,00000000" % r.local,
        p + "NVLS multicast support is available on dev %d" % r.local,
        p + "comm 0x%x rank %d nRanks %d nNodes %d localRanks 8 localRank %d MNNVL 0"
        % (comm, rank, nranks, nnodes, r.local),
        p + "NVLS Head  0:  0  8 16 24",
    ]
    nch = 16
    # Ring lines list every rank of the communicator: several KB each at 512 ranks.
    ring = " ".join("%4d" % x for x in range(nranks))
    for c in range(nch):
        out.append(p + "Channel %02d/%02d : %s" % (c, nch, ring))
    out.append(
        p + "Trees [0] %d/-1/-1->%d->%d [1] %d/-1/-1->%d->%d"
        % ((rank + 1) % nranks, rank, (rank - 1) % nranks, (rank + 2) % nranks, rank, (rank - 2) % nranks)
    )
    out.append(p + "P2P Chunksize set to 131072")
    for c in range(nch):
        nxt = (rank + 1) % nranks
        if nxt // 8 == rank // 8:
            out.append(pu + "Channel %02d/0 : %d[%d] -> %d[%d] via P2P/CUMEM/read" % (c, rank, r.local, nxt, nxt % 8))
        else:
            out.append(
                pu + "Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/IB/%d/GDRDMA" % (c, rank, r.local, nxt, nxt % 8, c % 8)
            )
        for _ in range(2):
            op = r.hex()
            out += [
                pp + "New proxy send connection %d from local rank %d, transport 0" % (c, r.local),
                pp + "proxyProgressAsync opId=%s op.type=1 op.reqBuff=%s op.respSize=16 done" % (op, r.hex()),
                pu + "ncclPollProxyResponse Received new opId=%s" % op,
                pu + "resp.opId=%s matches expected opId=%s" % (op, op),
                pp + "Received and initiated operation=Init res=0",
                pu + "Connected to proxy localRank %d -> connection %s" % (r.local, r.hex()),
            ]
    out += [
        p + "Connected all rings",
        p + "Connected all trees",
        p + "NVLS comm 0x%x headRank 0 nHeads 4 buffSize 4194304 memSize 2097152 nvlsPerRankSize 201326592 "
        "nvlsTotalSize 805306368" % comm,
        p + "threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
        p + "24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
        p + "TUNER/Plugin: Failed to find ncclTunerPlugin_v2 symbol, using internal tuner instead",
        p + "ncclCommInitRank comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %x0 commId 0x%x - Init COMPLETE"
        % (comm, rank, nranks, r.local, r.local, 0x18 + r.local * 0x10, commid),
        p + "Init timings: rank %d nranks %d total %.2f (kernels 0.18, bootstrap 0.08, allgathers 0.00, topo 0.03, "
        "graphs 0.01, connections 0.12, rest 0.00)" % (rank, nranks, 0.3 + rng.random()),
    ]


COLLS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast")


def comm_lifecycle(r, n):
    """`n` lines of split communicators coming and going, each line carrying `comm 0x... rank N nRanks M`."""
    out = []
    for _ in range(n):
        shape = r.split % 4
        if shape == 0:
            r.split_comm = 0x55E000000000 + r.rng.getrandbits(36)
            r.split_size = (2, 4, 8, 16)[r.rng.randrange(4)]
            r.split_id = r.rng.getrandbits(64)
        c, m = r.split_comm, r.split_size
        rk, bus = r.rank % m, 0x18 + r.local * 0x10
        if shape == 0:
            out.append(r.p + "ncclCommInitRank comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %x0 commId 0x%x - "
                       "Init START" % (c, rk, m, r.local, r.local, bus, r.split_id))
        elif shape == 1:
            out.append(r.p + "comm 0x%x rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0"
                       % (c, rk, m, max(1, m // 8), min(m, 8), rk % 8))
        elif shape == 2:
            out.append(r.p + "ncclCommInitRank comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %x0 commId 0x%x - "
                       "Init COMPLETE" % (c, rk, m, r.local, r.local, bus, r.split_id))
        else:
            out.append(r.p + "comm 0x%x rank %d nranks %d cudaDev %d busId %x0 - Destroy COMPLETE" % (c, rk, m, r.local, bus))
        r.split += 1
    return out


def runtime_chunk(r, comms, out):
    """One training step: COLL lines for a few collectives, the loop's prints, the odd warning."""
    rng, p = r.rng, r.p
    r.step += 1
    r.sec += 0.35 + rng.random() * 0.1
    for _ in range(12):
        comm, n = comms[rng.randrange(len(comms))]
        r.op += 1
        out.append(
            p + "%s: opCount %x sendbuff %s recvbuff %s count %d datatype 7 op 0 root 0 comm 0x%x [nranks=%d] stream 0x%x"
            % (COLLS[r.op % 4], r.op, r.hex(), r.hex(), 1 << rng.randrange(10, 26), comm, n, comm + 0x2c40)
        )
    if r.step % 10 == 0:
        out.append(
            "[rank%d]: step %d | loss %.4f | lr 3.0e-04 | grad_norm %.3f | tokens/s %d | mem 61.2GiB"
            % (r.rank, r.step, 2.0 + rng.random(), rng.random() * 3, 90000 + rng.randrange(20000))
        )
    x = rng.random()
    if x < 0.002:
        out.append(
            "[rank%d]:[W%s ProcessGroupNCCL.cpp:4115] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS is the default now, "
            "this environment variable is thus deprecated. (function operator())" % (r.rank, r.ts_c10())
        )
    elif x < 0.004:
        out.append(
            "/usr/local/lib/python3.11/dist-packages/torch/utils/checkpoint.py:1399: FutureWarning: "
            "`torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` instead."
        )
    elif x < 0.005:
        out.append(
            p + "misc/socket.cc:564 ncclSocketPollConnect: connect to %s<%d> returned Connection refused, "
            "retrying (1/34) after sleep for 100 msec" % (r.ip, 40000 + rng.randrange(20000))
        )
    elif x < 0.0055:
        out.append("")
        out.append(
            "[%s] %s:%d:%d [%d] transport/net_ib.cc:157 NCCL WARN NET/IB : mlx5_%d:1 Got async event : port active"
            % (r.ts_nccl(), r.host, r.pid, r.prog_tid, r.local, r.local)
        )
    elif x < 0.0058:
        out.append(
            "[%s] %s:%d:%d [%d] misc/ibvwrap.cc:206 NCCL WARN ibv_reg_mr_iova2 is not supported, falling back"
            % (r.ts_nccl(), r.host, r.pid, r.prog_tid, r.local)
        )


def teardown(r, comms, failing, out):
    p, pp = r.p, r.pp
    if failing:
        out += [
            "[rank%d]:[E%s ProcessGroupNCCL.cpp:616] [Rank %d] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=%d, OpType=ALLREDUCE, NumelIn=33554432, NumelOut=33554432, Timeout(ms)=600000) ran for "
            "600087 milliseconds before timing out." % (r.rank, r.ts_c10(), r.rank, r.op, ),
            "[rank%d]:[E%s ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank %d] Exception (either an "
            "error or timeout) detected by watchdog at work: %d, last enqueued NCCL work: %d, last completed NCCL "
            "work: %d." % (r.rank, r.ts_c10(), r.rank, r.op, r.op, r.op - 1),
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 412, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 371, in main',
            "    loss = train_step(model, batch)",
            '  File "/workspace/train.py", line 228, in train_step',
            "    dist.all_reduce(grad_norm)",
            '  File "/usr/local/lib/python3.11/dist-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
            "    return func(*args, **kwargs)",
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.22.3",
        ]
        return
    for comm, n in comms:
        out.append(p + "comm 0x%x rank %d nranks %d cudaDev %d busId %x0 - Destroy COMPLETE"
                   % (comm, r.rank % n, n, r.local, 0x18 + r.local * 0x10))
    if r.rank % 4 == 1:
        s = "%s:%d:%d [%d] " % (r.host, r.pid, r.proxy_tid, r.local)
        out += [
            "",
            s + "proxy.cc:1458 NCCL WARN [Service thread] Accept failed Resource temporarily unavailable",
            s + "NCCL INFO misc/socket.cc:826 -> 3",
            "",
            s + "proxy.cc:1497 NCCL WARN [Service thread] Could not receive type from localRank %d, res=3, closed=0" % r.local,
            "",
            s + "proxy.cc:1521 NCCL WARN [Proxy Service %d] Failed to execute operation Close from rank %d, retcode 3"
            % (r.rank, r.rank),
        ]
    out.append(
        "[rank%d]:[W%s ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed before we "
        "destruct ProcessGroupNCCL. On normal program exit, the application should call destroy_process_group to "
        "ensure that any pending NCCL operations have finished in this process. In rare cases this process can exit "
        "before this point and block the progress of another member of the process group. This constraint has always "
        "been present,  but this warning has only been added since PyTorch 2.4 (function operator())"
        % (r.rank, r.ts_c10())
    )


def info_chunk(r, nranks, out, lines=64):
    """`lines` lines of the INFO mix (--info-mix): seven init shapes in turn, one WARN in 2,000."""
    for _ in range(lines):
        r.sec += r.rng.random() * 0.001
        if r.rng.randrange(2000) == 0:
            peer = r.rng.randrange(nranks)
            if r.rng.randrange(2):
                out.append("%s:%d:%d [%d] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote "
                           "peer %s<%d>" % (r.host, r.pid, r.proxy_tid, r.local, "node%03d" % (peer // 8), 40000 + peer))
            else:
                out.append("%s:%d:%d [%d] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Resource "
                           "temporarily unavailable" % (r.host, r.pid, r.uds_tid, r.local))
            continue
        nxt, dn = (r.rank + 1) % nranks, (r.rank + 8) % nranks
        ch = r.rng.randrange(32)
        kind = r.rng.randrange(7)
        if kind == 0:
            out.append(r.p + "Channel %02d/0 : %d -> %d via P2P/CUMEM/read" % (ch, r.rank, nxt))
        elif kind == 1:
            out.append(r.p + "Channel %02d/1 : %d[%d] -> %d[%d] [send] via NET/IB/%d/GDRDMA"
                       % (ch, r.rank, r.local, dn, r.local, r.local))
        elif kind == 2:
            out.append(r.p + "Connected all rings, use ring PXN 0 GDR 1")
        elif kind == 3:
            out.append(r.p + "Trees [0] %d/-1/-1->%d->%d [1] %d/-1/-1->%d->%d" % (nxt, r.rank, dn, nxt, r.rank, dn))
        elif kind == 4:
            out.append(r.p + "NET/IB : Using [0]mlx5_%d:1/IB [1]mlx5_%d:1/IB ; OOB ib0:%s<0>"
                       % (r.local, (r.local + 1) % 8, r.ip))
        elif kind == 5:
            out.append(r.p + "misc/socket.cc:826 -> 3")
        else:
            out.append(r.p + "comm 0x%x rank %d nRanks %d nNodes %d localRanks 8 localRank %d MNNVL 0"
                       % (r.comm, r.rank, nranks, max(1, nranks // 8), r.local))


def with_knobs(r, block, comm_init_every, prefix):
    """`block` with a comm lifecycle line after every `comm_init_every - 1` lines, and `prefix` on each."""
    if comm_init_every:
        mixed = []
        for i in range(0, len(block), comm_init_every - 1):
            mixed += block[i:i + comm_init_every - 1]
            mixed += comm_lifecycle(r, 1)
        block = mixed
    if prefix:
        block = [prefix + line for line in block]
    return block


def rank_lines(rank, nranks, seed, budget, host_style, comm_init_every=0, prefix=None, info_mix=False):
    """Yield blocks of lines (lists) for one rank, about `budget` bytes in all."""
    r = Rank(rank, nranks, seed, host_style)
    if prefix == "ray":
        prefix = "(RayWorkerWrapper pid=%d, ip=%s) " % (r.pid, r.ip)
    elif prefix == "srun":
        prefix = "%*d: " % (len(str(nranks - 1)), rank)
    out = [
        "[rank%d]: loading config /workspace/configs/moe-%dgpu.yaml" % (rank, nranks),
        "[rank%d]: world_size=%d local_rank=%d master=%s:29500" % (rank, nranks, r.local, "10.0.0.10"),
    ]
    comms = [(r.comm, nranks)]
    comm_init(r, r.comm, nranks, rank, True, out)
    # Split communicators: tensor-parallel (8, within the node) and expert-parallel groups.
    for size in (8, min(nranks, 64)):
        c = r.comm + 0x100000 * size
        comm_init(r, c, size, rank % size, False, out)
        comms.append((c, size))
    out.append("[rank%d]: model ready: 1.2e+11 parameters, 64 experts, ep_size=%d" % (rank, min(nranks, 64)))
    out = with_knobs(r, out, 0, prefix)
    size = sum(len(x) + 1 for x in out)
    yield out
    failing = rank == nranks // 3
    while size < budget:
        out = []
        for _ in range(16):
            if info_mix:
                info_chunk(r, nranks, out)
            else:
                runtime_chunk(r, comms, out)
        out = with_knobs(r, out, comm_init_every, prefix)
        size += sum(len(x) + 1 for x in out)
        yield out
    out = []
    teardown(r, comms, failing, out)
    yield with_knobs(r, out, 0, prefix)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--total-mb", type=float, required=True, help="total size of all files, MB (10^6 bytes)")
    ap.add_argument("--layout", choices=("per-rank", "single"), default="per-rank")
    ap.add_argument("--out", required=True, help="output folder (per-rank) or file (single)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--comm-init-every", type=int, default=0, metavar="N",
                    help="one line in N is a split communicator's lifecycle line (0: none; N >= 2)")
    ap.add_argument("--prefix", choices=("ray", "srun"), help="a launcher prefix on every line")
    ap.add_argument("--info-mix", action="store_true",
                    help="the runtime part is a large job's INFO init chatter, not COLL lines (issue 24)")
    a = ap.parse_args()
    if a.comm_init_every == 1:
        ap.error("--comm-init-every must be 0 or at least 2")
    knobs = (a.comm_init_every, a.prefix, a.info_mix)
    total = int(a.total_mb * 1e6)
    budget = total // a.ranks
    style = a.seed % 3
    if a.layout == "per-rank":
        os.makedirs(a.out, exist_ok=True)
        width = len(str(a.ranks - 1))
        for rank in range(a.ranks):
            path = os.path.join(a.out, "rank%0*d.log" % (width, rank))
            with open(path, "w", buffering=1 << 20) as f:
                for block in rank_lines(rank, a.ranks, a.seed, budget, style, *knobs):
                    f.write("\n".join(block))
                    f.write("\n")
    else:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        gens = [rank_lines(rank, a.ranks, a.seed, budget, style, *knobs) for rank in range(a.ranks)]
        with open(a.out, "w", buffering=1 << 20) as f:
            # Round-robin blocks of lines: ranks interleave as in a job's combined output.
            while gens:
                alive = []
                for g in gens:
                    block = next(g, None)
                    if block is not None:
                        f.write("\n".join(block))
                        f.write("\n")
                        alive.append(g)
                gens = alive
    return 0


if __name__ == "__main__":
    sys.exit(main())
