#!/usr/bin/env python3
"""Build the message catalogue under rules/catalog/ from the libraries' own releases.

    python3 scripts/catalog/generate.py --fetch     # fill the cache (git, wheels, PyPI), then generate
    python3 scripts/catalog/generate.py             # offline: generate from the cache only

The cache (default .cache/catalog/, git-ignored) holds what was read from the network: the NCCL git
mirror (or pass --nccl-git DIR to use one you have), what was extracted from the NCCL and torch wheels
(the wheels themselves are deleted once read), and the torch wheels' METADATA. The output is
deterministic (sorted, no dates), so a rerun on the same cache gives the same files. See
docs/catalog.md for what each output file holds.
"""

import argparse
import bisect
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import urllib.request
import zipfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ep  # noqa: E402
import libs  # noqa: E402
import ofi  # noqa: E402
import torch_cpp  # noqa: E402

# What --only can name: each part is read (with --fetch) and its TSVs written; the others' committed
# TSVs are kept and read back (fingerprints.toml is always written from all of them).
PARTS = ("nccl", "torch", "nvshmem", "deepep", "libs", "ofi")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "rules", "catalog")

# NCCL: source tags read, and the releases that exist only as wheels (past the last tag).
NCCL_GIT_URL = "https://github.com/NVIDIA/nccl"
NCCL_MIN = (2, 18, 1)
NCCL_WHEEL_ONLY = ["2.31.2", "2.32.3"]
NCCL_WHEEL = "nvidia-nccl-cu13"
# Host code of NCCL: every directory but device kernels and the vendored NVTX headers.
NCCL_SKIP_DIRS = ("src/device/", "src/collectives/device/", "src/include/nvtx3/", "src/nccl_device/")
NCCL_EXTS = (".cc", ".cpp", ".h", ".hpp", ".c")
# ncclDebugLogLevel (include/nccl_common.h); 6 is the ATTN level 2.32 adds (read from its code).
NCCL_LEVELS = {1: "VERSION", 2: "WARN", 3: "INFO", 4: "ABORT", 5: "TRACE", 6: "ATTN"}

TORCH_VERSIONS = ["1.8.1", "1.9.1", "1.10.2", "1.11.0", "1.12.1", "1.13.1", "2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1",
                  "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
# NVSHMEM: the last release of each minor on PyPI; DeepEP: its V1 tag and the V2 / hybrid-EP branches,
# pinned to the commits read (a branch moves; a rerun must read the same code).
NVSHMEM_WHEEL = "nvidia-nvshmem-cu12"
NVSHMEM_VERSIONS = ["3.1.7", "3.2.5", "3.3.24", "3.4.5", "3.5.21", "3.6.5", "3.7.2", "3.8.0"]
DEEPEP_GIT_URL = "https://github.com/deepseek-ai/DeepEP"
DEEPEP_REFS = [("v1.2.1", "9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee"),
               ("epv2-release", "018f21ea62c6c2888d9b46806aad6d90b399b23d"),
               ("main", "dd758caf451848bd150e1046af3d0a73e5fff38d"),
               ("hybrid-ep", "94a9f8f6b146c07d97ec58f67cd6d303296d6098")]
TORCH_PY_DIRS = ("torch/distributed/", "torch/nn/parallel/")
# Every Python file of those: the process group, stores, launcher and elastic agent, and FSDP, DDP,
# DTensor, checkpointing, pipelining, RPC (their families tell them apart).
TORCH_PY_KEEP = re.compile(r"torch/(?:distributed|nn/parallel)/.*\.py$")
# The C++ c10d code lives in these libraries of the wheel (ProcessGroupNCCL in the CUDA one; the
# stores, sockets and Backend in the CPU one); its sites are read from their machine code.
# 1.13 splits the CUDA one into libtorch_cuda_cpp.so (ProcessGroupNCCL) and libtorch_cuda_cu.so (kernels);
# a wheel's libraries of these that it lacks are skipped.
TORCH_LIBS = ("torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cuda_cpp.so", "torch/lib/libtorch_cuda_cu.so",
              "torch/lib/libtorch_cpu.so")
# torch 1.8 and 1.9 built c10d (then torch/lib/c10d/) into libtorch_python.so: read there for releases before
# 1.10, keeping only torch/lib/c10d's sites (the Python bindings of torch/csrc/distributed/c10d/init.cpp
# are not read in any release).
TORCH_PYTHON_LIB = "torch/lib/libtorch_python.so"
TORCH_PYTHON_LIB_BEFORE = (1, 10)
# C++ files of c10d outside the process-group / store / socket / watchdog code (Gloo, DDP's reducer,
# symmetric memory, kernels): catalogued, counted as family `other`.
TORCH_CPP_OTHER = re.compile(r"ProcessGroupGloo|Gloo|reducer|quantization|SymmetricMemory|symm_mem|AsyncMM|"
                             r"/cuda/|comm_hook|comm\.|Functional|Ops\.cpp|intra_node|DMAConnectivity|"
                             r"ProcessGroupMPI|ProcessGroupUCC|UCC|NanCheck|nccl_all_to_all|WindowNCCL|control_")


# ---------------------------------------------------------------------------------------------
# Families: which part of the library a site belongs to (coverage is counted per family).

def nccl_family(path, fmt):
    p = path[4:] if path.startswith("src/") else path
    low = fmt.lower()
    if re.search(r"destroy|abort|finaliz|cleanup|commfree|teardown", low):
        return "teardown"
    if p.startswith("ras/"):
        return "ras"
    if p == "proxy.cc" or "proxy" in p:
        return "proxy"
    if "socket" in p or p.startswith("os/"):
        return "socket"
    if p == "bootstrap.cc":
        return "bootstrap"
    if "shm" in p:
        return "shm"
    if p.startswith(("transport/net", "plugin/net", "transport/coll_net")) or "/net_" in p or p.startswith("net"):
        return "net"
    if p.startswith(("transport/", "transport.cc", "register/", "gin/")):
        return "transport"
    if p.startswith(("init", "graph/", "misc/", "plugin/", "param", "channel", "mnnvl", "allocator",
                     "mem_manager", "dev_runtime", "debug", "include/")):
        return "init"
    return "other"


# Python families by path (before the words of the message): the parts of torch.distributed
# beyond the process group, stores and launcher.
TORCH_PY_FAMILIES = [
    (re.compile(r"torch/nn/parallel/|algorithms/ddp_comm_hooks|algorithms/join|algorithms/model_averaging"), "ddp"),
    (re.compile(r"/fsdp/|_composable/fsdp|_composable/fully_shard|_fsdp"), "fsdp"),
    (re.compile(r"/checkpoint/|_state_dict_utils"), "checkpoint"),
    (re.compile(r"/_?tensor/|/_shard/|/_sharded_tensor/|/_sharding_spec/|device_mesh|_functional_collectives|"
                r"_composable/|_spmd|/_local_tensor/"), "tensor"),
    (re.compile(r"/pipelining/|/pipeline/"), "pipelining"),
    (re.compile(r"/rpc/|/autograd/|/nn/api/remote_module|/nn/jit/|/optim/"), "rpc-optim"),
]


def torch_family(path, text):
    low = text.lower()
    if path.startswith(("torch/csrc/", "torch/lib/c10d/")):
        name = path.rsplit("/", 1)[-1]
        if re.search(r"reducer|comm_hook|default_comm_hooks|logger\.cpp", path):
            return "ddp"
        if "Gloo" in path or "gloo" in path:
            return "gloo"
        if TORCH_CPP_OTHER.search(path):
            return "other"
        if name.startswith("socket"):
            return "socket"
        if re.match(r"(?:TCPStore|Store|PrefixStore|FileStore|HashStore)", name):
            return "store"
        if re.search(r"heartbeat|watchdog|timed? ?out|desync|stuck", low):
            return "watchdog"
        if re.search(r"destroy|shutdown|abort|destruct|terminat|exit", low):
            return "teardown"
        return "c10d"
    if "elastic" in path or "/run.py" in path or "launch" in path:
        return "elastic"
    for pat, fam in TORCH_PY_FAMILIES:
        if pat.search(path):
            return fam
    if "heartbeat" in low or "watchdog" in low or "timeout" in low and "ProcessGroupNCCL" in path:
        return "watchdog"
    if "store" in low or "TCPStore" in path or "rendezvous" in path:
        return "store"
    if re.search(r"destroy|shutdown|abort|destruct|exit", low):
        return "teardown"
    return "c10d"


# ---------------------------------------------------------------------------------------------
# Classes: what a message is, from the call that prints it and its words. The engine gives a line
# of a catalogued message that no rule reads a finding of its class (docs/catalog.md).

CLASSES = ("performance-hint", "deprecation", "startup-notice", "config-notice", "teardown", "error")
# Calls whose message is an error: raised, logged at error level, thrown or checked in C++.
ERROR_KINDS = re.compile(r"raise|error|exception|critical|fatal|ERROR|FATAL|TORCH_CHECK|INTERNAL_ASSERT|THROW|"
                         r"Error$|Exception$|^EnforceNotMet|^IoException|^TimeoutException")
DEPRECATION_KINDS = ("FutureWarning", "DeprecationWarning", "PendingDeprecationWarning", "rank_zero_deprecation",
                     "LightningDeprecationWarning")
INFO_KINDS = ("info", "INFO", "rank_zero_info", "log_dist")
DEPRECATION_WORDS = re.compile(r"deprecat|will be removed|(?:is|was|has been|been) removed|no longer (?:be )?supported|"
                               r"in a future (?:release|version)|will no longer|is obsolete|legacy .*instead", re.I)
# Words of a message that reports something going wrong, whatever the level it is printed at.
FAILURE_WORDS = re.compile(r"\b(?:fail(?:ed|ure|ures|s|ing)?|errors?|exceptions?|timed out|"
                           r"crash(?:ed|es)?|refused|reset by peer|corrupt(?:ed|ion)?|deadlock(?:ed)?|killed|"
                           r"died|lost|out of memory|segfault|hung|timeout waiting|possible hang)\b", re.I)
TEARDOWN_WORDS = re.compile(r"destroy|destruct|shut(?:ting)? ?down|shutdown|teardown|tear down|finaliz|cleanup|"
                            r"clean up|abort|terminat|exiting|atexit|at exit|before (?:program )?exit|"
                            r"\bexit(?:ed|s)?\b|\bstopp(?:ed|ing)\b|\bclos(?:e|ed|ing)\b", re.I)
PERFORMANCE_WORDS = re.compile(r"performance|\bslow|bottleneck|overhead|efficien|speed ?up|faster|throughput|"
                               r"tensor cores|num_workers|extra traversal|impair|sub-?optimal|not optimal|"
                               r"expensive|memory (?:usage|footprint|consumption)|peak memory|contiguous|strides|"
                               r"bucket|bandwidth|latency|set_float32_matmul_precision|\bcontention\b", re.I)
STARTUP_WORDS = re.compile(r"initializ|\bstart(?:ing|ed)?\b|launch|world[ _]size|local_rank|global_rank|"
                           r"\bGPU available|TPU available|HPU available|using (?:backend|device|strategy)|"
                           r"rendezvous|connected|\bready\b|\bspawn|\bworkers?\b", re.I)


def site_class(kind, text):
    """The class of a message printed by a call of `kind` (the TSV's level column)."""
    if ERROR_KINDS.search(kind) and kind not in DEPRECATION_KINDS:
        return "error"
    if kind in DEPRECATION_KINDS or DEPRECATION_WORDS.search(text):
        return "deprecation"
    if FAILURE_WORDS.search(text):
        return "error"
    if TEARDOWN_WORDS.search(text):
        return "teardown"
    if PERFORMANCE_WORDS.search(text):
        return "performance-hint"
    if kind in INFO_KINDS or STARTUP_WORDS.search(text):
        return "startup-notice"
    return "config-notice"


# ---------------------------------------------------------------------------------------------
# C/C++ source scanning

CALL_RE = re.compile(r"(?<![A-Za-z0-9_])(WARN|INFO|INFO_LOC|WARN_ONCE)\s*\(")
PRI = {"PRIu64": "lu", "PRId64": "ld", "PRIx64": "lx", "PRIX64": "lX", "PRIi64": "li", "PRIu32": "u",
       "PRId32": "d", "PRIx32": "x", "PRIu16": "u", "PRIu8": "u", "PRIuPTR": "lu", "PRIxPTR": "lx",
       "PRId8": "d", "PRIi32": "i"}


def strip_comments(src):
    """Comments replaced by spaces (newlines kept, so that line numbers stay right)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                if src[j] == "\\":
                    j += 1
                if j < n and src[j] == "\n":
                    break
                j += 1
            out.append(src[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_args(src, start):
    """Arguments of the call whose '(' is at src[start-1]: (list of arg texts, end index)."""
    depth, i, n = 0, start, len(src)
    args, cur = [], []
    while i < n:
        c = src[i]
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            cur.append(src[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    return None, n


LIT_RE = re.compile(r'"((?:[^"\\\n]|\\.)*)"|([A-Za-z_][A-Za-z0-9_]*)|(\s+)|(.)', re.S)


def literal(expr):
    """The C string a format argument denotes, escapes kept as written; None if not a literal."""
    parts = []
    for m in LIT_RE.finditer(expr):
        s, ident, ws, other = m.groups()
        if s is not None:
            parts.append(s)
        elif ident is not None:
            if ident in PRI:
                parts.append(PRI[ident])
            elif ident in ("u8", "L", "u", "U") and m.end() < len(expr) and expr[m.end()] == '"':
                continue
            else:
                return None
        elif ws is not None:
            continue
        else:
            return None
    return "".join(parts) if parts else None


def c_unescape(s):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r"}.get(
        m.group(1), m.group(1)), s)


def scan_c(path, text):
    """WARN/INFO sites of one file: (line, level, subsys, fmt, in_macro)."""
    src = strip_comments(text)
    line_starts = [0]
    for m in re.finditer("\n", src):
        line_starts.append(m.end())
    sites = []
    for m in CALL_RE.finditer(src):
        line = bisect.bisect_right(line_starts, m.start())
        ls = line_starts[line - 1]
        le = src.find("\n", m.start())
        head = src[ls:m.start()]
        if re.match(r"\s*#\s*define\s+" + m.group(1) + r"\b", head + src[m.start():le]):
            continue  # the macro's own definition
        args, end = split_args(src, m.end())
        if not args:
            continue
        # NVIDIA's builds give a call that spans lines the line of its closing parenthesis (checked
        # against the immediates in the 2.30.7 wheel's code: 123 of 136 multi-line WARNs, none by the
        # first line).
        line = bisect.bisect_right(line_starts, end)
        kind = m.group(1)
        if kind in ("WARN", "WARN_ONCE"):
            level, subsys, fmt_arg = "WARN", "", args[0]
        else:
            if len(args) < 2:
                continue
            level, subsys, fmt_arg = "INFO", re.sub(r"\s+", "", args[0]), args[1]
        fmt = literal(fmt_arg)
        if fmt is None:
            continue  # a format held in a variable: nothing to match on
        # Inside a multi-line #define: __FILE__/__LINE__ are the caller's, not this site's.
        k, in_macro = line - 1, False
        while k > 0 and src[line_starts[k - 1]:line_starts[k]].rstrip("\n").endswith("\\"):
            k -= 1
            if re.match(r"\s*#\s*define", src[line_starts[k]:]):
                in_macro = True
                break
        if re.match(r"\s*#\s*define", src[ls:]):
            in_macro = True
        sites.append((line, level, subsys, fmt, in_macro))
    return sites


# ---------------------------------------------------------------------------------------------
# NCCL from git

def git(gitdir, *args, inp=None):
    return subprocess.run(["git", "--git-dir", gitdir, *args], input=inp, capture_output=True, check=True).stdout


def nccl_tags(gitdir):
    tags = []
    for t in git(gitdir, "tag").decode().split():
        m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-(\d+)", t)
        if m and tuple(map(int, m.groups()[:3])) >= NCCL_MIN:
            tags.append((tuple(map(int, m.groups())), t))
    tags.sort()
    # One tag per release: the highest -N suffix.
    best = {}
    for v, t in tags:
        best[v[:3]] = t
    return [(".".join(map(str, v)), best[v]) for v in sorted(best)]


def nccl_source_sites(gitdir, tag):
    listing = git(gitdir, "ls-tree", "-r", tag, "src").decode().splitlines()
    blobs = []
    for row in listing:
        meta, path = row.split("\t", 1)
        if path.startswith(NCCL_SKIP_DIRS) or not path.endswith(NCCL_EXTS):
            continue
        blobs.append((path, meta.split()[2]))
    out = subprocess.run(["git", "--git-dir", gitdir, "cat-file", "--batch"],
                         input="".join(b + "\n" for _, b in blobs).encode(), capture_output=True, check=True).stdout
    pos, sites = 0, []
    for path, _ in blobs:
        nl = out.index(b"\n", pos)
        size = int(out[pos:nl].split()[2])
        body = out[nl + 1:nl + 1 + size].decode("utf-8", "replace")
        pos = nl + 1 + size + 1
        rel = path[4:]  # NCCL's __FILE__ is relative to src/
        for line, level, subsys, fmt, in_macro in scan_c(path, body):
            sites.append((rel, line, level, subsys, fmt, in_macro))
    return sites


# ---------------------------------------------------------------------------------------------
# NCCL from a wheel's libnccl.so.2: the calls of ncclDebugLogInternal, with their immediates.

def elf_sections(data):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = []
    for i in range(shnum):
        name, typ, flags, addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        secs.append([name, addr, off, size])
    strtab = secs[shstrndx]
    for s in secs:
        end = data.index(b"\0", strtab[2] + s[0])
        s[0] = data[strtab[2] + s[0]:end].decode()
    return secs


def cstring_at(data, secs, addr):
    for name, a, off, size in secs:
        if name.startswith(".rodata") and a <= addr < a + size:
            p = off + (addr - a)
            return data[p:data.index(b"\0", p)].decode("utf-8", "replace")
    return None


INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
RIP_TARGET = re.compile(r"#\s*([0-9a-f]+)")


def nccl_binary_sites(so_path):
    """(file, line, level, fmt) for each call of ncclDebugLogInternal, read from the code around it.

    From each load of a format string into %r9 (its 6th argument), the path to the call is followed
    (through the unconditional jumps of tail-merged calls), with the registers loaded with
    immediates: %edi the level, %rdx __FILE__, %r8d __LINE__. A value the code computes stays unknown.
    """
    data = open(so_path, "rb").read()
    secs = elf_sections(data)
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", so_path],
                         capture_output=True, check=True, text=True).stdout.splitlines()
    ins = []
    for row in asm:
        m = INSN.match(row)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
    at = {a: i for i, (a, _, _) in enumerate(ins)}

    def effect(op, args, regs):
        """Track immediates and rip-relative addresses loaded into registers."""
        parts = args.split("#")[0].strip()
        if "," not in parts:
            return
        src, dst = parts.rsplit(",", 1)
        dst = dst.strip().lstrip("%")
        if op == "lea" and "(%rip)" in src:
            t = RIP_TARGET.search(args)
            if t:
                regs[dst] = ("addr", int(t.group(1), 16))
                return
        if op in ("mov", "movl") and src.startswith("$"):
            regs[dst] = ("imm", int(src[1:], 16))
            return
        if op == "xor" and src.strip() == "%" + dst:
            regs[dst] = ("imm", 0)
            return
        regs.pop(dst, None)

    sites = []
    for i, (a, op, args) in enumerate(ins):
        if op != "lea" or not args.rstrip().split("#")[0].strip().endswith(",%r9") or "(%rip)" not in args:
            continue
        regs = {}
        j = i - 1
        back = []
        while j >= 0 and i - j <= 30 and ins[j][1] not in ("call", "jmp", "ret") and not ins[j][1].startswith("j"):
            back.append(ins[j])
            j -= 1
        for _, bop, bargs in reversed(back):
            effect(bop, bargs, regs)
        k, steps, found = i, 0, False
        while k < len(ins) and steps < 60:
            _, kop, kargs = ins[k]
            if kop == "call":
                found = "ncclDebugLogInternal" in kargs
                break
            if kop == "ret":
                break
            if kop == "jmp":
                t = re.match(r"([0-9a-f]+)", kargs.strip())
                if not t or int(t.group(1), 16) not in at:
                    break
                k = at[int(t.group(1), 16)]
                steps += 1
                continue
            effect(kop, kargs, regs)
            k += 1
            steps += 1
        if not found:
            continue
        fmt, lvl, file, line = regs.get("r9"), regs.get("edi"), regs.get("rdx"), regs.get("r8d")
        if not fmt or fmt[0] != "addr":
            continue
        f = cstring_at(data, secs, fmt[1])
        if f is None:
            continue
        sites.append((
            cstring_at(data, secs, file[1]) if file and file[0] == "addr" else None,
            line[1] if line and line[0] == "imm" else None,
            NCCL_LEVELS.get(lvl[1], "?") if lvl and lvl[0] == "imm" else "?",
            f,
        ))
    return sorted(set(sites), key=lambda s: (s[0] or "", s[1] or 0, s[2], s[3]))


def c_escape(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r").replace('"', '\\"')


# ---------------------------------------------------------------------------------------------
# PyPI (simple JSON API; PyPI's /pypi/<name>/<ver>/json is not reachable from every network)

def simple_index(name):
    req = urllib.request.Request(f"https://pypi.org/simple/{name}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def pick_wheel(index, version, want=("manylinux", "x86_64")):
    files = [f for f in index["files"]
             if f["filename"].split("-")[1] == version and f["filename"].endswith(".whl")
             and all(w in f["filename"] for w in want) and not f.get("yanked")]
    # cp311 first (any build of the release has the same messages), else any.
    files.sort(key=lambda f: (("cp311" not in f["filename"]), f["filename"]))
    return files[0] if files else None


def http_get(url, rng=None):
    headers = {"Range": f"bytes={rng[0]}-{rng[1]}"} if rng else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=600) as r:
        return r.read()


class RemoteZip:
    """Members of a zip read over HTTP range requests: a few files of a 1 GB wheel, not the wheel."""

    def __init__(self, url, size):
        self.url, self.size = url, size
        tail = http_get(url, (max(0, size - 65536), size - 1))
        eocd = tail.rindex(b"PK\x05\x06")
        cd_size, cd_off = struct.unpack_from("<II", tail, eocd + 12)
        if cd_off == 0xFFFFFFFF:  # zip64
            loc = tail.rindex(b"PK\x06\x07")
            z64_off, = struct.unpack_from("<Q", tail, loc + 8)
            z64 = http_get(url, (z64_off, z64_off + 55))
            cd_size, cd_off = struct.unpack_from("<QQ", z64, 40)
        cd = http_get(url, (cd_off, cd_off + cd_size - 1))
        self.members = {}
        p = 0
        while p + 46 <= len(cd) and cd[p:p + 4] == b"PK\x01\x02":
            method, = struct.unpack_from("<H", cd, p + 10)
            csize, usize = struct.unpack_from("<II", cd, p + 20)
            nlen, xlen, clen = struct.unpack_from("<HHH", cd, p + 28)
            off, = struct.unpack_from("<I", cd, p + 42)
            name = cd[p + 46:p + 46 + nlen].decode()
            extra = cd[p + 46 + nlen:p + 46 + nlen + xlen]
            q = 0
            while q + 4 <= len(extra):
                hid, hlen = struct.unpack_from("<HH", extra, q)
                if hid == 1:
                    vals = list(struct.unpack_from("<%dQ" % (hlen // 8), extra, q + 4))
                    if usize == 0xFFFFFFFF:
                        usize = vals.pop(0)
                    if csize == 0xFFFFFFFF:
                        csize = vals.pop(0)
                    if off == 0xFFFFFFFF:
                        off = vals.pop(0)
                q += 4 + hlen
            self.members[name] = (method, csize, off)
            p += 46 + nlen + xlen + clen

    def read_many(self, names):
        """{name: bytes} for members that lie close together: one range request for all of them."""
        spans = sorted((self.members[n][2], n) for n in names)
        out = {}
        i = 0
        while i < len(spans):
            j, lo = i, spans[i][0]
            # A chunk of up to 64 MiB of the wheel per request.
            while j + 1 < len(spans) and spans[j + 1][0] - lo < (64 << 20):
                j += 1
            last = spans[j][1]
            hi = self.members[last][2] + self.members[last][1] + 30 + 4096
            blob = http_get(self.url, (lo, min(hi, self.size - 1)))
            for off, name in spans[i:j + 1]:
                method, csize, _ = self.members[name]
                p = off - lo
                nlen, xlen = struct.unpack_from("<HH", blob, p + 26)
                raw = blob[p + 30 + nlen + xlen:p + 30 + nlen + xlen + csize]
                out[name] = zlib.decompress(raw, -15) if method == 8 else raw
            i = j + 1
        return out


# ---------------------------------------------------------------------------------------------
# Fetch: fill the cache

def fetch(cache, gitdir, deepep_git, parts=PARTS, only_libs=None, ofi_git=None):
    os.makedirs(cache, exist_ok=True)
    if "ofi" in parts:
        ofi.fetch(ofi_git)
    if "nccl" in parts:
        fetch_nccl(cache, gitdir)
    if "deepep" in parts and not os.path.isdir(deepep_git):
        subprocess.run(["git", "clone", "--mirror", DEEPEP_GIT_URL, deepep_git], check=True)
    if "torch" in parts:
        fetch_torch_py(cache)
    if "nvshmem" in parts:
        fetch_nvshmem(cache)
    if "torch" in parts:
        fetch_torch_cpp(cache)
    if "libs" in parts:
        libs.fetch(cache, simple_index, http_get, RemoteZip, only_libs)


def fetch_nccl(cache, gitdir):
    if not os.path.isdir(gitdir):
        subprocess.run(["git", "clone", "--mirror", NCCL_GIT_URL, gitdir], check=True)
    # NCCL releases that have no tag: the wheel's library, read and deleted.
    bindir = os.path.join(cache, "nccl-bin")
    os.makedirs(bindir, exist_ok=True)
    for v in NCCL_WHEEL_ONLY:
        dest = os.path.join(bindir, v + ".json")
        if os.path.exists(dest):
            continue
        tmp = os.path.join(cache, "dl-" + v)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp,
                        f"{NCCL_WHEEL}=={v}"], check=True)
        whl = [f for f in os.listdir(tmp) if f.endswith(".whl")][0]
        with zipfile.ZipFile(os.path.join(tmp, whl)) as z:
            so = [n for n in z.namelist() if n.endswith("lib/libnccl.so.2")][0]
            z.extract(so, tmp)
        sites = nccl_binary_sites(os.path.join(tmp, so))
        with open(dest, "w") as f:
            json.dump({"wheel": whl, "sites": sorted(sites, key=lambda s: (s[0] or "", s[1] or 0, s[3]))}, f,
                      indent=0)
        shutil.rmtree(tmp)


def fetch_torch_py(cache):
    # torch: each release's METADATA (the NCCL pin), its torch/distributed Python files, and the
    # c10d strings of its C++ libraries.
    index = simple_index("torch")
    for v in TORCH_VERSIONS:
        d = os.path.join(cache, "torch", v)
        if os.path.exists(os.path.join(d, "done")):
            continue
        os.makedirs(d, exist_ok=True)
        w = pick_wheel(index, v)
        rz = RemoteZip(w["url"], w["size"])
        meta = [n for n in rz.members if re.fullmatch(r"torch-[^/]+\.dist-info/METADATA", n)]
        with open(os.path.join(d, "METADATA"), "wb") as f:
            f.write(rz.read_many(meta)[meta[0]])
        wanted = [n for n in rz.members if n.startswith(TORCH_PY_DIRS) and n.endswith(".py")]
        for name, body in sorted(rz.read_many(wanted).items()):
            p = os.path.join(d, "py", name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(body)
        with open(os.path.join(d, "wheel"), "w") as f:
            f.write(w["filename"] + "\n")
        open(os.path.join(d, "done"), "w").close()


def fetch_nvshmem(cache):
    # NVSHMEM: the message strings of each library of the wheel.
    index = simple_index(NVSHMEM_WHEEL)
    for v in NVSHMEM_VERSIONS:
        dest = os.path.join(cache, "nvshmem", v + ".json")
        if os.path.exists(dest):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        w = pick_wheel(index, v, want=("x86_64",))
        rz = RemoteZip(w["url"], w["size"])
        msgs = set()
        for name in sorted(n for n in rz.members if re.search(r"/lib/[^/]+\.so(?:\.\d+)*$", n)):
            lib = re.sub(r"\.so(?:\.\d+)*$", ".so", name.rsplit("/", 1)[-1])
            msgs |= {(lib,) + m for m in ep.nvshmem_messages(lib, rz.read_many([name])[name])}
        with open(dest, "w") as f:
            json.dump({"wheel": w["filename"], "messages": sorted(msgs)}, f, indent=0)


def fetch_torch_cpp(cache):
    index = simple_index("torch")
    # torch's C++ c10d sites: from the machine code of its libraries (about 1 GB read per release,
    # the libraries deleted once read).
    for v in TORCH_VERSIONS:
        dest = os.path.join(cache, "torch", v, "cpp.json")
        if os.path.exists(dest):
            continue
        w = pick_wheel(index, v)
        rz = RemoteZip(w["url"], w["size"])
        sites = []
        old = vkey(v) < TORCH_PYTHON_LIB_BEFORE
        for lib in TORCH_LIBS + ((TORCH_PYTHON_LIB,) if old else ()):
            if lib not in rz.members:
                continue
            tmp = os.path.join(cache, "torch", v, "lib.so")
            with open(tmp, "wb") as f:
                f.write(rz.read_many([lib])[lib])
            sites += [[lib] + list(x) for x in torch_cpp.binary_sites(tmp)
                      if lib != TORCH_PYTHON_LIB or x[0].startswith("torch/lib/c10d/")]
            os.remove(tmp)
        with open(dest, "w") as f:
            json.dump({"wheel": w["filename"], "sites": sorted(sites)}, f, indent=0)


# ---------------------------------------------------------------------------------------------
# Generate

def collapse(per_release, releases):
    """{key: set(release index)} -> [(key, first, last)] with one row per run of consecutive releases."""
    rows = []
    for key, idxs in per_release.items():
        idxs = sorted(idxs)
        start = prev = idxs[0]
        for i in idxs[1:] + [None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            rows.append((key, releases[start], releases[prev]))
            if i is not None:
                start = prev = i
    return rows


def vkey(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def tsv_field(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def tsv_unfield(s):
    return re.sub(r"\\(.)", lambda m: {"t": "\t", "n": "\n"}.get(m.group(1), m.group(1)), s)


def read_rows(name):
    """The data rows of a committed catalogue TSV (comments and header left out), fields unescaped."""
    out = []
    with open(os.path.join(OUT, name), encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if not l.startswith("#")]
    for l in lines[1:]:
        out.append([tsv_unfield(x) for x in l.split("\t")])
    return out


def derive():
    """fingerprints.toml again from the committed TSVs (no sources or wheels needed)."""
    rel = read_rows("releases.tsv")
    releases = [v for lib, v, _ in rel if lib == "nccl"]
    t_releases = [v for lib, v, _ in rel if lib == "torch"]
    nccl_rows = [((f, int(line), level, subsys, fmt, origin), first, last)
                 for f, line, level, subsys, first, last, _fam, origin, fmt in read_rows("nccl.tsv")]
    torch_rows = [((f, int(line), level, fmt, origin), first, last)
                  for f, line, level, first, last, _fam, _cls, origin, fmt in read_rows("torch.tsv")]
    pins = [tuple(r) for r in read_rows("torch-nccl.tsv")]
    write("fingerprints.toml", fingerprints_toml(releases, nccl_rows, pins, t_releases, torch_rows))


def generate_nccl(cache, gitdir):
    releases, sources = [], {}
    per = {}  # (file, line, level, subsys, fmt) -> {release idx}
    origins = {}  # same key -> {source, macro, binary}
    tags = nccl_tags(gitdir)
    for v, tag in tags:
        releases.append(v)
        sources[v] = f"git tag {tag}"
    for v in NCCL_WHEEL_ONLY:
        p = os.path.join(cache, "nccl-bin", v + ".json")
        if os.path.exists(p):
            releases.append(v)
    releases.sort(key=vkey)
    for v, tag in tags:
        i = releases.index(v)
        for rel, line, level, subsys, fmt, in_macro in nccl_source_sites(gitdir, tag):
            key = (rel, line, level, subsys, fmt)
            per.setdefault(key, set()).add(i)
            origins.setdefault(key, set()).add("macro" if in_macro else "source")
    for v in NCCL_WHEEL_ONLY:
        p = os.path.join(cache, "nccl-bin", v + ".json")
        if not os.path.exists(p):
            continue
        d = json.load(open(p))
        sources[v] = "wheel " + d["wheel"]
        i = releases.index(v)
        for file, line, level, fmt in d["sites"]:
            if level in ("TRACE", "VERSION"):
                continue
            # The binary gives the level and __FILE__/__LINE__ as compiled; `binary` says so.
            key = ((file or "?").split("/src/")[-1], line or 0, level, "", c_escape(fmt))
            per.setdefault(key, set()).add(i)
            origins.setdefault(key, set()).add("binary")
    rows = collapse(per, releases)
    rows.sort(key=lambda r: (r[0][0], r[0][1], vkey(r[1]), r[0][2], r[0][4]))
    lines = ["# NCCL message sites per release: generated by scripts/catalog/generate.py; do not edit.",
             "# first/last: the run of consecutive catalogued releases (releases.tsv) that have the site.",
             "# origin: source (WARN/INFO call read from the tag), macro (inside a #define: file:line are "
             "the caller's), binary (read from the wheel's machine code: level, file and line as compiled).",
             "file\tline\tlevel\tsubsys\tfirst\tlast\tfamily\torigin\tformat"]
    for key, first, last in rows:
        rel, line, level, subsys, fmt = key
        lines.append("\t".join([rel, str(line), level, subsys, first, last, nccl_family(rel, c_unescape(fmt)),
                                "+".join(sorted(origins[key])), tsv_field(fmt)]))
    return releases, sources, lines, [(k + ("+".join(sorted(origins[k])),), f, l) for k, f, l in rows]


def torch_pins(cache):
    rows = []
    for v in TORCH_VERSIONS:
        p = os.path.join(cache, "torch", v, "METADATA")
        if not os.path.exists(p):
            continue
        meta = open(p, encoding="utf-8").read()
        wheel = open(os.path.join(cache, "torch", v, "wheel")).read().strip()
        pin = ""
        for m in re.finditer(r"^Requires-Dist: (nvidia-nccl-cu\d+)\s*\(?==\s*([0-9.]+)", meta, re.M):
            pin = m.group(2)
            pkg = m.group(1)
        rows.append((v, pin, pkg if pin else "", wheel))
    return rows


# The calls whose first literal argument is a message: (pattern, kind, index of the message
# argument). A `kind` None is read from the match: warnings.warn's category (second argument or
# `category=`, UserWarning by default), the logger method's name.
PY_CALLS = [
    (re.compile(r"raise\s+[A-Za-z_.]+\("), "raise", 0),
    (re.compile(r"(?<![\w.])(?:logger|log|logging|_logger|LOGGER|_log|[a-z_]+_logger)\."
                r"(warning_once|warning|warn|error|info|exception|critical)\("), None, 0),
    (re.compile(r"(?<![\w.])warnings\.warn\("), "category", 0),
    # torch._logging.warning_once(logger, msg)
    (re.compile(r"(?<![\w.])warning_once\("), "warning", 1),
    # typing_extensions' @deprecated(msg, category=FutureWarning): printed when the API is called.
    (re.compile(r"(?<![\w.])deprecated\("), "deprecated", 0),
]
WARNING_CLASS = re.compile(r"(?:category\s*=\s*)?([A-Za-z_.]*Warning)$")


# A level argument (`logging.WARNING`) as the TSV names the level; DEBUG and a computed level are
# left out (None).
LOG_LEVELS = {"WARNING": "warning", "WARN": "warning", "INFO": "info", "ERROR": "error", "CRITICAL": "critical",
              "FATAL": "critical"}


def positional(args):
    """The positional arguments of a call (keyword arguments `name=...` left out)."""
    return [a for a in args if not re.match(r"[A-Za-z_]\w*\s*=(?!=)", a)]


def call_kind(kind, m, args):
    """The level of one call: raise, a warnings category, the logger method (warn = warning), or
    for kind `level` (megatron-core's log_single_rank(logger, logging.WARNING, msg), logger.log(
    logging.INFO, msg)) the positional argument before the message."""
    if kind == "level":
        lv = re.fullmatch(r"logging\.([A-Z]+)", args[0].strip()) if args else None
        return LOG_LEVELS.get(lv.group(1)) if lv else None
    if kind in ("category", "deprecated"):
        default = "UserWarning" if kind == "category" else "DeprecationWarning"
        for a in args[1:]:
            w = WARNING_CLASS.fullmatch(a.strip())
            if w:
                return w.group(1).rsplit(".", 1)[-1]
        return default
    if kind is None:
        k = m.group(1)
        return {"warn": "warning", "warning_once": "warning", "info_once": "info", "error_once": "error"}.get(k, k)
    return kind


def py_sites(path, text, calls=None):
    """Messages raised, warned or logged in a Python file: (line, kind, text with {} for each
    f-string field). `calls`: the call table (PY_CALLS, or a library's own)."""
    out = []
    for pat, kind, argi in calls or PY_CALLS:
        for m in pat.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            args, _ = split_args(text, m.end())
            at = argi
            if args and kind == "level":
                # The level and the message are positional; keyword arguments (tp_group=...) may come first.
                args, at = positional(args)[argi - 1:], 1
            if not args or len(args) <= at or not args[at]:
                continue
            level = call_kind(kind, m, args)
            if level is None:
                continue
            msg = py_literal(args[at])
            if msg is None and re.fullmatch(r"[A-Za-z_]\w*", args[at].strip()):
                msg = assigned_literal(text, m.start(), args[at].strip())
            if msg is None or len(re.sub(r"\{\}|%\w", "", msg).strip()) < 8:
                continue
            out.append((line, level, msg))
    return sorted(set(out))


def assigned_literal(text, at, name):
    """The literal a message variable was given shortly before the call at `at` (`msg = (f"..." "...")`),
    `{}` appended for what `msg += ...` adds after it; None if there is none within 40 lines."""
    head = text[:at]
    start = max(0, len(head) - 1 - sum(len(l) + 1 for l in head.split("\n")[-40:]))
    last = None
    for a in re.finditer(r"^[ \t]*" + re.escape(name) + r"[ \t]*=(?!=)", head[start:], re.M):
        last = a
    if last is None:
        return None
    args, _ = split_args(head, start + last.end())
    lit = py_literal(head[start + last.end():]) if args is None else None
    if lit is None:
        # The right-hand side up to the end of its line (or its closing parenthesis).
        rhs = head[start + last.end():].split("\n", 1)[0]
        if rhs.strip().startswith("("):
            inner, _ = split_args(head, start + last.end() + rhs.index("(") + 1)
            rhs = inner[0] if inner else rhs
        lit = py_literal(rhs)
    if lit is None:
        return None
    if re.search(r"^[ \t]*" + re.escape(name) + r"[ \t]*\+=", head[start + last.end():], re.M):
        lit += "{}"
    return lit


PY_STR = re.compile(r'''([rRfFbBuU]{0,2})("""|\'\'\'|"|')''')


def py_literal(expr):
    """Adjacent Python string literals (f-strings: each {...} becomes {}), else None."""
    parts, i, n = [], 0, len(expr)
    while i < n:
        if expr[i] in " \t\n\\()":
            i += 1
            continue
        m = PY_STR.match(expr, i)
        if not m:
            return "".join(parts) if parts else None
        prefix, q = m.groups()
        j = m.end()
        k = expr.find(q, j)
        while k > 0 and q in "\"'" and expr[k - 1] == "\\" and expr[k - 2] != "\\":
            k = expr.find(q, k + 1)
        if k < 0:
            return None
        body = expr[j:k]
        if "f" in prefix.lower():
            body = re.sub(r"\{[^{}]*\}", "{}", body)
        if "r" not in prefix.lower():
            # A backslash before the end of a line continues the string on the next: Python drops
            # both (the next line's indentation stays in the text printed).
            body = re.sub(r"(?<!\\)((?:\\\\)*)\\\n", r"\1", body)
        # A triple-quoted string prints its lines as lines.
        parts.append(body if len(q) == 3 else body.replace("\n", " "))
        i = k + len(q)
    return "".join(parts) if parts else None


def generate_torch(cache):
    releases = [v for v in TORCH_VERSIONS if os.path.exists(os.path.join(cache, "torch", v, "done"))]
    per = {}
    for i, v in enumerate(releases):
        base = os.path.join(cache, "torch", v, "py")
        for dirpath, _, files in os.walk(base):
            for fn in files:
                full = os.path.join(dirpath, fn)
                rel = os.path.relpath(full, base)
                if not TORCH_PY_KEEP.match(rel):
                    continue
                for line, kind, msg in py_sites(rel, open(full, encoding="utf-8", errors="replace").read()):
                    per.setdefault((rel, line, kind, msg, "python"), set()).add(i)
        p = os.path.join(cache, "torch", v, "cpp.json")
        if os.path.exists(p):
            for _lib, file, line, level, fmt in json.load(open(p))["sites"]:
                if fmt.strip("{} "):
                    per.setdefault((file, line, level, fmt, "binary"), set()).add(i)
    rows = collapse(per, releases)
    rows.sort(key=lambda r: (r[0][0], r[0][1], vkey(r[1]), r[0][2], r[0][3]))
    lines = ["# torch.distributed message sites per release: generated by scripts/catalog/generate.py; do not edit.",
             "# Python sites from each release wheel's torch/distributed/**.py and torch/nn/parallel/**.py: raise X(...), "
             "logger.<level>(...), warning_once(logger, ...), warnings.warn(..., Category), @deprecated(...); level: "
             "raise, the logger method or the warning's category; f-string fields are written {}.",
             "# C++ sites (origin binary) from the machine code of the wheel's libtorch_cuda.so/libtorch_cpu.so "
             "(scripts/catalog/torch_cpp.py): level INFO/WARNING/ERROR/FATAL (LOG), TORCH_WARN, TORCH_CHECK, "
             "INTERNAL_ASSERT, or the class thrown; format: the literal pieces, {} for values.",
             "# class: what the message is (docs/catalog.md), from the call and its words.",
             "file\tline\tlevel\tfirst\tlast\tfamily\tclass\torigin\tformat"]
    for (rel, line, kind, msg, origin), first, last in rows:
        lines.append("\t".join([rel, str(line), kind, first, last, torch_family(rel, msg), site_class(kind, msg), origin,
                                tsv_field(msg)]))
    return releases, lines, rows


def generate_nvshmem(cache):
    releases = [v for v in NVSHMEM_VERSIONS if os.path.exists(os.path.join(cache, "nvshmem", v + ".json"))]
    per, wheels = {}, {}
    for i, v in enumerate(releases):
        d = json.load(open(os.path.join(cache, "nvshmem", v + ".json")))
        wheels[v] = d["wheel"]
        for lib, fam, text in d["messages"]:
            per.setdefault((lib, fam, text), set()).add(i)
    rows = collapse(per, releases)
    rows.sort(key=lambda r: (r[0][0], r[0][2], vkey(r[1])))
    lines = ["# NVSHMEM message strings per release: generated by scripts/catalog/generate.py; do not edit.",
             "# From the .rodata of each library of the nvidia-nvshmem-cu12 wheel (scripts/catalog/ep.py): strings "
             "with a message word; NVSHMEM prints them after `file:line: ` (errors) or `WARN: `.",
             "library	first	last	family	format"]
    for (lib, fam, text), first, last in rows:
        lines.append("\t".join([lib, first, last, fam, tsv_field(text)]))
    return releases, wheels, lines, rows


def deepep_family(kind, text):
    low = text.lower()
    if re.search(r"timeout|timed out", low):
        return "timeout"
    if re.search(r"destroy|leak|finaliz|abort|teardown", low):
        return "teardown"
    if kind in ("EP_HOST_ASSERT", "EP_DEVICE_ASSERT", "assert"):
        return "assert"
    return "other"


def generate_deepep(deepep_git):
    per = {}
    for ref, commit in DEEPEP_REFS:
        listing = git(deepep_git, "ls-tree", "-r", "--name-only", commit).decode().splitlines()
        for path in listing:
            if not path.endswith(ep.DEEPEP_EXTS) or path.startswith(("tests/", "third-party/", "3rdparty/")):
                continue
            text = git(deepep_git, "show", f"{commit}:{path}").decode("utf-8", "replace")
            for line, kind, msg in ep.deepep_sites(path, strip_comments(text) if not path.endswith(".py") else text,
                                                   split_args, literal, py_literal):
                per.setdefault((path, line, kind, msg), []).append(ref)
    lines = ["# DeepEP message sites: generated by scripts/catalog/generate.py; do not edit.",
             "# refs: the refs read that have the site at that line (" +
             ", ".join(f"{r} = {c[:12]}" for r, c in DEEPEP_REFS) + "). EP_HOST_ASSERT is thrown as "
             "`Failed: Assertion error FILE:LINE 'cond'`, EP_DEVICE_ASSERT printed as `Assertion failed: FILE:LINE, "
             "condition: cond`; format: the condition, or the printf/throw/raise text.",
             "file	line	kind	refs	family	format"]
    for (path, line, kind, msg) in sorted(per):
        lines.append("\t".join([path, str(line), kind, ",".join(per[(path, line, kind, msg)]),
                                deepep_family(kind, msg), tsv_field(msg)]))
    return lines, len(per)


def generate_libs(cache):
    """{lib: (releases, TSV lines)} for the libraries of scripts/catalog/libs.py (accelerate, DeepSpeed,
    Lightning, torchtitan, megatron-core, NeMo)."""
    out = {}
    for lib in libs.LIBS:
        rel = libs.releases(cache, lib)
        releases = [v for v, _ in rel]
        if not releases:
            continue
        calls = libs.calls(lib, PY_CALLS)
        per = {}
        for i, v in enumerate(releases):
            base = os.path.join(cache, "libs", lib, v, "py")
            for dirpath, _, files in os.walk(base):
                for fn in files:
                    full = os.path.join(dirpath, fn)
                    path = os.path.relpath(full, base)
                    for line, kind, msg in py_sites(path, open(full, encoding="utf-8", errors="replace").read(), calls):
                        per.setdefault((path, line, kind, msg), set()).add(i)
        rows = collapse(per, releases)
        rows.sort(key=lambda r: (r[0][0], r[0][1], vkey(r[1]), r[0][2], r[0][3]))
        lines = [f"# {lib} message sites per release: generated by scripts/catalog/generate.py; do not edit.",
                 "# From each release's package on PyPI (scripts/catalog/libs.py): logger.<level>(...), "
                 "warnings.warn(..., Category) and the library's own printers; f-string fields are written {}.",
                 "# class: what the message is (docs/catalog.md), from the call and its words.",
                 "file\tline\tlevel\tfirst\tlast\tfamily\tclass\tformat"]
        for (path, line, kind, msg), first, last in rows:
            lines.append("\t".join([path, str(line), kind, first, last, libs.family(lib, path), site_class(kind, msg),
                                    tsv_field(msg)]))
        out[lib] = (rel, lines)
    return out


# A placeholder of a format: an f-string field, a str.format field, a %-conversion.
PLACEHOLDER = re.compile(r"\{[^{}]*\}|%[-#0 +]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?[sdiufrxXeEgGcp]")


def known_text(fmt):
    """A format as the engine matches it: `{}` for every placeholder, runs of them as one."""
    t = PLACEHOLDER.sub("{}", fmt)
    # A run of blanks inside a line (the indentation a continued string literal carries, a table's
    # padding) is told by the words on each side, not by its width: a paste or a console rewraps it.
    t = re.sub(r"(?<=\S)[ \t]{3,}(?=\S)", "{}", t)
    return re.sub(r"(?:\{\}\s*){2,}", "{} ", t).strip()


def literal_len(text):
    return max((len(p.strip()) for l in text.split("\n") for p in l.split("{}")), default=0)


def known_toml(lib_releases, lib_rows):
    """known.toml: every catalogued message of torch.distributed and the libraries by (library,
    class, family), with the releases and files that print it: what the engine gives a finding of
    its class when no rule reads the line. Left out: torch's C++ LOG(INFO) (traces), and messages
    without a literal piece of 12 characters (nothing to tell them by)."""
    msgs = {}
    for lib, rows in lib_rows.items():
        for file, level, first, last, fam, cls, origin, fmt in rows:
            if origin == "binary" and level == "INFO":
                continue
            # Python rows keep the literal's escapes as written (`\\n`); C++ rows hold the string itself.
            text = known_text(c_unescape(fmt) if origin == "python" else fmt)
            if literal_len(text) < 12:
                continue
            rel = lib_releases[lib]
            m = msgs.setdefault((lib, cls, fam, text), [set(), set()])
            m[0].update(range(rel.index(first), rel.index(last) + 1))
            m[1].add(file)
    out = ["# Generated by scripts/catalog/generate.py from rules/catalog/torch.tsv and the library TSVs "
           "(scripts/catalog/libs.py);",
           "# do not edit. \"LIBRARY CLASS FAMILY\" = [\"RELEASES FILES TEXT\", ...]: each catalogued message",
           "# of that class and family, the releases that print it (runs of `releases`), the files (comma-",
           "# separated), its text with {} for each value. The engine gives a line of such a message that no",
           "# rule reads a finding of its class (docs/catalog.md).",
           "",
           "[releases]"]
    out += [f"{lib} = [" + ", ".join(toml_str(v) for v in rel) + "]" for lib, rel in sorted(lib_releases.items())]
    out += ["", "[known]"]
    groups = {}
    for (lib, cls, fam, text), (idx, files) in msgs.items():
        groups.setdefault(f"{lib} {cls} {fam}", []).append(
            f"{release_runs(idx, lib_releases[lib])} {','.join(sorted(files))} {text}")
    for key in sorted(groups):
        out.append(toml_str(key) + " = [")
        out += ["  " + toml_str(t) + "," for t in sorted(groups[key], key=lambda t: t.split(" ", 2)[2])]
        out.append("]")
    return out


OFI_LIB = "aws-ofi-nccl"


def derive_known():
    """known.toml from the committed torch.tsv and library TSVs."""
    rel = read_rows("releases.tsv")
    lib_releases, lib_rows = {}, {}
    lib_releases["torch"] = [v for l, v, _ in rel if l == "torch"]
    lib_rows["torch"] = [(f, level, first, last, fam, cls, origin, fmt)
                         for f, _line, level, first, last, fam, cls, origin, fmt in read_rows("torch.tsv")]
    for lib in list(libs.LIBS) + [OFI_LIB]:
        if not os.path.exists(os.path.join(OUT, lib + ".tsv")):
            continue
        lib_releases[lib] = [v for l, v, _ in rel if l == lib]
        lib_rows[lib] = [(f, level, first, last, fam, cls, "python", fmt)
                         for f, _line, level, first, last, fam, cls, fmt in read_rows(lib + ".tsv")]
    write("known.toml", known_toml(lib_releases, lib_rows))


def write(name, lines):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def fmt_prefix(fmt):
    """The literal text a format starts with (up to its first conversion), for telling apart two
    messages printed from one file:line in different releases."""
    head = c_unescape(fmt).split("%")[0].strip()
    return head[:48]


def torch_key_text(fmt):
    """The longest literal piece of a torch C++ format (the log line must contain it): pieces may be
    in another order than printed (read from machine code), so the start is no key."""
    pieces = sorted((p.strip() for p in fmt.split("{}")), key=lambda p: (-len(p), p))
    return pieces[0][:48].strip() if pieces and pieces[0] else ""


def torch_fingerprints(releases, rows):
    """[torch] entries: each C++ site printed with a `File.cpp:LINE]` prefix (LOG, TORCH_WARN)."""
    by_site = {}
    for (rel, line, level, fmt, origin), first, last in rows:
        if origin != "binary" or level not in ("INFO", "WARNING", "ERROR", "FATAL", "TORCH_WARN"):
            continue
        text = torch_key_text(fmt)
        if len(text) < 8:
            continue
        i, j = releases.index(first), releases.index(last)
        by_site.setdefault((f"{rel.rsplit('/', 1)[-1]}:{line}", text), set()).update(range(i, j + 1))
    return by_site


def release_runs(idx, releases):
    """A set of release indexes as fingerprints.toml writes it: `a..b` runs, comma-separated."""
    return ",".join(a if a == b else f"{a}..{b}" for _, a, b in collapse({0: set(idx)}, releases))


def toml_str(t):
    """A TOML basic string (a message may hold newlines and tabs)."""
    t = t.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return '"' + re.sub(r"[\x00-\x1f\x7f]", lambda m: "\\u%04x" % ord(m.group(0)), t) + '"'


def nccl_levels_toml(releases, rows):
    """[nccl_levels]: messages NCCL prints at another level in some releases (`Accept failed`: WARN to
    2.29, INFO in 2.30-2.31, ATTN in 2.32). The level of such a line narrows the release, INFO lines
    included (they carry no file:line), and tells the user which NCCL_DEBUG shows it."""
    per = {}  # message start -> level -> release indexes
    starts = set()
    for (rel, line, level, subsys, fmt, origin), first, last in rows:
        head = c_unescape(fmt).split("%")[0].strip()  # whole, unlike fmt_prefix: it is shown to users
        starts.add(head)
        if level not in ("WARN", "INFO", "ATTN"):
            continue
        i, j = releases.index(first), releases.index(last)
        per.setdefault(head, {}).setdefault(level, set()).update(range(i, j + 1))
    out = ["", "# Message start = \"LEVEL RELEASES\" for each level NCCL prints it at, for messages whose",
           "# level differs between releases. Left out: starts shorter than 10 characters, and starts that",
           "# another message's start extends (a line could be that other message).",
           "[nccl_levels]"]

    for head in sorted(per):
        levels = per[head]
        if len(head) < 10 or len(levels) < 2 or len({frozenset(v) for v in levels.values()}) < 2:
            continue
        if any(o != head and o.startswith(head) for o in starts):
            continue
        items = []
        for level in ("WARN", "INFO", "ATTN"):
            if level in levels:
                items.append(level + " " + release_runs(levels[level], releases))
        out.append(toml_str(head) + " = [" + ", ".join(toml_str(t) for t in items) + "]")
    return out


def fingerprints_toml(releases, rows, pins, torch_releases=(), torch_rows=()):
    """WARN/ATTN sites (file:line, message start) whose release set is not every release."""
    by_site = {}
    for (rel, line, level, subsys, fmt, origin), first, last in rows:
        if level not in ("WARN", "ATTN") or "macro" in origin or rel == "?" or not line:
            continue
        i, j = releases.index(first), releases.index(last)
        by_site.setdefault((f"{rel}:{line}", fmt_prefix(fmt)), set()).update(range(i, j + 1))
    out = ["# Generated by scripts/catalog/generate.py from rules/catalog/nccl.tsv; do not edit.",
           "# Each WARN/ATTN site as NCCL prints it (file:line) = one entry per message printed there:",
           "# \"RELEASES TEXT\", RELEASES the catalogued releases that have it (runs of consecutive releases",
           "# of `releases`, `a..b` or one release, comma-separated), TEXT the start of the message (the",
           "# format's text before its first conversion). The engine intersects the release sets of the",
           "# sites a log shows. Sites whose message is in every release are left out.",
           "",
           "releases = [" + ", ".join(f'"{r}"' for r in releases) + "]",
           "torch_releases = [" + ", ".join(f'"{r}"' for r in torch_releases) + "]",
           "",
           "[nccl]"]
    grouped = {}
    for (site, prefix), idx in by_site.items():
        if len(idx) == len(releases):
            continue
        rng = release_runs(idx, releases)
        grouped.setdefault(site, []).append((idx and min(idx), f"{rng} {prefix}".strip()))

    def key(site):
        f, l = site.rsplit(":", 1)
        return (f, int(l))

    for site in sorted(grouped, key=key):
        out.append(toml_str(site) + " = [" + ", ".join(toml_str(t) for _, t in sorted(grouped[site])) + "]")
    out += nccl_levels_toml(releases, rows)
    out += ["", "# torch release = the NCCL its wheel pins (torch-nccl.tsv).", "[torch_nccl]"]
    out += [f'"{t}" = "{n}"' for t, n, _, _ in pins if n]
    # torch's C++ sites as its log prefix shows them (`[W1004 15:16:15.503072590 File.cpp:LINE]`):
    # TEXT is a literal piece the message contains (not necessarily its start).
    out += ["", "[torch]"]
    tgrouped = {}
    for (site, text), idx in torch_fingerprints(list(torch_releases), torch_rows).items():
        if len(idx) == len(torch_releases):
            continue
        rng = release_runs(idx, list(torch_releases))
        tgrouped.setdefault(site, []).append((min(idx), f"{rng} {text}"))
    for site in sorted(tgrouped, key=key):
        out.append(toml_str(site) + " = [" + ", ".join(toml_str(t) for _, t in sorted(tgrouped[site])) + "]")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fetch", action="store_true", help="fill the cache from the network first")
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache", "catalog"))
    ap.add_argument("--nccl-git", help="an NCCL git directory (bare or not); default CACHE/nccl.git")
    ap.add_argument("--deepep-git", help="a DeepEP git directory (bare or not); default CACHE/deepep.git")
    ap.add_argument("--ofi-git", help="an aws-ofi-nccl git directory (bare or not); default CACHE/aws-ofi-nccl.git")
    ap.add_argument("--only", help="comma-separated parts to read and write: " + ", ".join(PARTS) +
                    " (default all), or libraries of `libs` by name (scripts/catalog/libs.py); the others' "
                    "committed TSVs are kept and read back")
    ap.add_argument("--derive", action="store_true",
                    help="only rewrite fingerprints.toml and known.toml from the committed TSVs (offline, seconds)")
    a = ap.parse_args()
    if a.derive:
        derive()
        derive_known()
        return
    named = [p.strip() for p in a.only.split(",")] if a.only else list(PARTS)
    bad = [p for p in named if p not in PARTS and p not in libs.LIBS]
    if bad:
        sys.exit(f"--only: unknown part(s) {', '.join(bad)}; the parts are {', '.join(PARTS)}, "
                 f"and the libraries {', '.join(libs.LIBS)}")
    # A library named alone reads `libs` for it only; the other libraries' TSVs stay as committed.
    only_libs = {p for p in named if p in libs.LIBS} if "libs" not in named else None
    parts = tuple(p for p in named if p in PARTS) + (("libs",) if only_libs else ())
    gitdir = a.nccl_git or os.path.join(a.cache, "nccl.git")
    deepep_git = a.deepep_git or os.path.join(a.cache, "deepep.git")
    ofi_git = a.ofi_git or os.path.join(a.cache, "aws-ofi-nccl.git")
    if a.fetch:
        fetch(a.cache, gitdir, deepep_git, parts, only_libs, ofi_git)
    # Rows of releases.tsv kept from the committed file for the parts not read now.
    kept = {p: [r for r in read_rows("releases.tsv") if r[0] == p] for p in ("nccl", "torch", "nvshmem", "deepep")}
    kept["libs"] = [r for r in read_rows("releases.tsv") if r[0] in libs.LIBS]
    kept["ofi"] = [r for r in read_rows("releases.tsv") if r[0] == OFI_LIB]
    rel_lines = {p: ["\t".join(r) for r in rows] for p, rows in kept.items()}
    if "nccl" in parts:
        if not os.path.isdir(gitdir):
            sys.exit(f"no NCCL git directory at {gitdir}: run with --fetch, or pass --nccl-git DIR")
        releases, sources, nccl_lines, _ = generate_nccl(a.cache, gitdir)
        write("nccl.tsv", nccl_lines)
        rel_lines["nccl"] = [f"nccl\t{v}\t{sources[v]}" for v in releases]
        print(f"nccl: {len(releases)} releases, {len(nccl_lines) - 4} site rows", file=sys.stderr)
    if "torch" in parts:
        t_releases, torch_lines, torch_rows = generate_torch(a.cache)
        pins = torch_pins(a.cache)
        write("torch.tsv", torch_lines)
        write("torch-nccl.tsv", ["# The NCCL each torch release wheel pins (Requires-Dist of its METADATA): "
                                 "generated by scripts/catalog/generate.py; do not edit.",
                                 "torch\tnccl\tpackage\twheel"] + ["\t".join(p) for p in pins])
        rel_lines["torch"] = [f"torch\t{v}\twheel {w}" for v, _, _, w in pins]
        print(f"torch: {len(t_releases)} releases, {len(torch_rows)} site rows, {len(pins)} pins", file=sys.stderr)
    if "nvshmem" in parts:
        n_releases, n_wheels, n_lines, n_rows = generate_nvshmem(a.cache)
        write("nvshmem.tsv", n_lines)
        rel_lines["nvshmem"] = [f"nvshmem\t{v}\twheel {n_wheels[v]}" for v in n_releases]
        print(f"nvshmem: {len(n_releases)} releases, {len(n_rows)} message rows", file=sys.stderr)
    if "deepep" in parts:
        if os.path.isdir(deepep_git):
            d_lines, n_deepep = generate_deepep(deepep_git)
            write("deepep.tsv", d_lines)
            rel_lines["deepep"] = [f"deepep\t{r}\tgit commit {c}" for r, c in DEEPEP_REFS]
            print(f"deepep: {n_deepep} sites", file=sys.stderr)
        else:
            print(f"no DeepEP git directory at {deepep_git}: deepep.tsv left as it is", file=sys.stderr)
    if "libs" in parts:
        rel_lines["libs"] = []
        generated = generate_libs(a.cache)
        for lib in libs.LIBS:
            if lib not in generated or only_libs and lib not in only_libs:
                # Not in the cache (a cache filled before the library was added, or by hand): its
                # committed TSV and releases stay as they are.
                rel_lines["libs"] += ["\t".join(r) for r in kept["libs"] if r[0] == lib]
                print(f"{lib}: not in the cache, {lib}.tsv left as it is", file=sys.stderr)
                continue
            rel, lines = generated[lib]
            write(lib + ".tsv", lines)
            rel_lines["libs"] += [f"{lib}\t{v}\t{'wheel' if w.endswith('.whl') else 'sdist'} {w}" for v, w in rel]
            print(f"{lib}: {len(rel)} releases, {len(lines) - 4} site rows", file=sys.stderr)
    if "ofi" in parts:
        if os.path.isdir(ofi_git):
            o_releases, o_lines = ofi.generate(ofi_git, sys.modules[__name__])
            write(OFI_LIB + ".tsv", o_lines)
            rel_lines["ofi"] = [f"{OFI_LIB}\t{v}\tgit tag {t}" for v, t in o_releases]
            print(f"{OFI_LIB}: {len(o_releases)} releases, {len(o_lines) - 4} site rows", file=sys.stderr)
        else:
            print(f"no aws-ofi-nccl git directory at {ofi_git}: {OFI_LIB}.tsv left as it is", file=sys.stderr)
    write("releases.tsv", ["# Catalogued releases: generated by scripts/catalog/generate.py; do not edit.",
                           "library\tversion\tsource"] + [l for p in PARTS for l in rel_lines[p]])
    # Both tables from the TSVs as written (the same as --derive gives).
    derive()
    derive_known()


if __name__ == "__main__":
    main()
