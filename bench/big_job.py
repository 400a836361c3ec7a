#!/usr/bin/env python3
"""The interleaved log of one big job (issue 38, point 7), the same lines as the test suite's
`common::big_job_log`: every rank's `ncclCommInitRank ... rank R nranks N ... Init START` line
(8 ranks a host), then one rank's `Cuda failure 'out of memory'`, then PEERS other ranks'
`socketProgress: Connection closed by remote peer`.

    bench/big_job.py OUT [NRANKS=1048576] [CULPRIT=1000003] [PEERS=2000]
"""
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    n, culprit, peers = [int(a) for a in sys.argv[2:5]] + [1 << 20, 1_000_003, 2_000][len(sys.argv[2:5]):]

    def host(r):
        return "gpu-%06d" % (r // 8)

    def pid(r):
        return 10_000 + r % 8

    with open(out, "w") as f:
        for r in range(n):
            f.write(f"{host(r)}:{pid(r)}:{pid(r)} [{r % 8}] NCCL INFO ncclCommInitRank comm 0x55d0c3a0 rank {r} "
                    f"nranks {n} cudaDev {r % 8} nvmlDev {r % 8} busId 18000 commId 0x5c2a1f3e - Init START\n")
        c = culprit
        f.write(f"{host(c)}:{pid(c)}:{pid(c) + 77} [{c % 8}] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n")
        for i in range(peers):
            r = (c + 1 + i * (n // max(peers, 1))) % n
            f.write(f"{host(r)}:{pid(r)}:{pid(r) + 5} [{r % 8}] misc/socket.cc:71 NCCL WARN socketProgress: "
                    f"Connection closed by remote peer {host(c)}<48122>\n")


if __name__ == "__main__":
    main()
