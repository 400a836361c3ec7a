"""torch's C++ c10d messages, read from the machine code of a wheel's libtorch_cpu.so / libtorch_cuda.so.

The wheels hold no C++ source, but every message site passes its __FILE__ (a string in .rodata) and
its __LINE__ (an immediate) to the function that prints or throws it:

    LOG(SEV) << ...            c10::MessageLogger(file %rsi, line %edx, severity %ecx), then << pieces
    TORCH_WARN(...)            c10::Warning(..., SourceLocation{func, file, line} on the stack, msg)
    TORCH_CHECK(cond, ...)     c10::detail::torchCheckFail(func, file, line %edx, msg)
    C10_THROW_ERROR(E, ...)    E(SourceLocation{func, file, line}, msg)

So each load of a c10d file name is a site: the call that follows says the kind, the immediate
loaded next to the file name is the line, and the string literals loaded around it are the message's
literal pieces (joined with `{}` for what is not literal). Only the functions of namespace c10d are
disassembled (from .symtab), a few hundred KB of a library. Checked against the 2.6.0 source (see
docs/catalog.md): the line of every site found is the source line of its macro.
"""

import bisect
import mmap
import re
import struct
import subprocess

# torch 1.10 on: torch/csrc/distributed/c10d/; 1.8, 1.9: torch/lib/c10d/ (headers included as `../c10d/X.hpp`).
C10D_FILE = re.compile(rb"torch/(?:csrc/distributed|lib)/c10d/(?:\.\./c10d/)?[A-Za-z0-9_/]+\.(?:cpp|hpp|h|cu)\0")
SOURCE_PATH = re.compile(r"/?[\w./-]+\.(?:cpp|hpp|h|cu|cuh|cc)")
# An insertion into the log's stream: operator<< (mangled `ls`), __ostream_insert, _M_insert.
INSERT = re.compile(r"ls[EI]|ostream_insert|_M_insert")
# TORCH_CHECK(cond)'s own text, printed only when the call gives no message.
DEFAULT_CHECK = re.compile(r"Expected .* to be true, but got false\.  \(Could this error message be improved\?")
# libstdc++'s exception texts, inlined beside a check (`basic_string: construction from null is not valid`).
LIBSTDCXX = re.compile(r"basic_string|cannot create std::|vector::")
SEVERITY = {0: "INFO", 1: "WARNING", 2: "ERROR", 3: "FATAL"}
INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
TARGET = re.compile(r"#\s*([0-9a-f]+)")
CALLEE = re.compile(r"<([^>]+)>")
IDENT = re.compile(r"~?[A-Za-z_][A-Za-z0-9_]*(?:::[~A-Za-z_][A-Za-z0-9_]*)*$|operator.*")


def sections(data):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = {}
    raw = []
    for i in range(shnum):
        name, typ, flags, addr, off, size, link = struct.unpack_from("<IIQQQQI", data, shoff + i * shentsize)
        raw.append((name, typ, addr, off, size, link))
    stroff = raw[shstrndx][3]
    for i, (name, typ, addr, off, size, link) in enumerate(raw):
        n = data[stroff + name:data.find(b"\0", stroff + name)].decode()
        secs[n] = (addr, off, size, link, i)
    return secs, raw


def c10d_ranges(data, secs, raw):
    """Address ranges of .text that hold functions of namespace c10d (mangled `4c10d`), merged."""
    _, off, size, link, _ = secs[".symtab"]
    stroff = raw[link][3]
    funcs = []
    for p in range(off, off + size, 24):
        name, info, _, shndx, value, sz = struct.unpack_from("<IBBHQQ", data, p)
        if info & 0xF != 2 or not sz:
            continue
        end = data.find(b"\0", stroff + name)
        if b"4c10d" in data[stroff + name:end]:
            funcs.append((value, value + sz))
    funcs.sort()
    out = []
    for a, b in funcs:
        if out and a - out[-1][1] < (64 << 10):
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def rodata_string(data, secs, addr):
    a, off, size, _, _ = secs[".rodata"]
    if not a <= addr < a + size:
        return None
    p = off + addr - a
    end = data.find(b"\0", p, p + 4096)
    if end < 0:
        return None
    s = data[p:end]
    try:
        t = s.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return t if t and t.isprintable() else None


def disassemble(path, ranges):
    """The instructions of the ranges, and the indices where a function starts."""
    ins, starts = [], set()
    for a, b in ranges:
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", f"--start-address={a:#x}",
                              f"--stop-address={b:#x}", path], capture_output=True, check=True, text=True).stdout
        for row in out.splitlines():
            m = INSN.match(row)
            if m:
                ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
            elif row.endswith(">:"):
                starts.add(len(ins))
    return ins, starts


def lea_target(op, args):
    """(dest register, address) of `lea X(%rip),%reg`, else None."""
    if op != "lea" or "(%rip)" not in args:
        return None
    t = TARGET.search(args)
    dst = args.split("#")[0].strip().rsplit(",", 1)[-1].strip().lstrip("%")
    return (dst, int(t.group(1), 16)) if t else None


def imm_move(op, args):
    """(dest, value) of `mov $imm,dest` (or `xor %r,%r`: 0)."""
    a = args.split("#")[0].strip()
    if op == "xor" and re.fullmatch(r"%(\w+),%\1", a):
        return a.split(",")[1].lstrip("%"), 0
    if op not in ("mov", "movl"):
        return None
    if not a.startswith("$") or "," not in a:
        return None
    v, dst = a.split(",", 1)
    try:
        return dst.strip().lstrip("%"), int(v[1:], 16)
    except ValueError:
        return None


def ends_site(args):
    """A call that ends a message site: printing, warning or throwing."""
    c = (CALLEE.search(args) or re.match("", "")).group(0)
    return bool(kind_of(c)) or any(k in c for k in ("MessageLoggerD", "c104warn", "__cxa_throw"))


def kind_of(callee):
    if "MessageLoggerC" in callee:
        return "LOG"
    if "WarningC" in callee and "c10" in callee:
        return "TORCH_WARN"
    # torch 1.x: TORCH_WARN calls the static c10::Warning::warn(SourceLocation, msg, verbatim).
    if "3c107Warning4warnE" in callee:
        return "TORCH_WARN"
    if "torchCheckFail" in callee:
        return "TORCH_CHECK"
    if "torchInternalAssertFail" in callee:
        return "INTERNAL_ASSERT"
    if re.search(r"(?:Error|Exception)C[12]E.*SourceLocation", callee):
        return "THROW"
    return None


def binary_sites(path):
    """[(file, line, level, format)] of one library: file relative to torch/csrc/distributed/c10d's
    parent (`torch/csrc/distributed/c10d/X.cpp`), level LOG's severity or the macro's kind."""
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    secs, raw = sections(data)
    ra, roff, rsize, _, _ = secs[".rodata"]
    files = {}
    for m in C10D_FILE.finditer(data, roff, roff + rsize):
        name = m.group(0)[:-1].decode().replace("/../c10d/", "/")
        start = data.rfind(b"\0", roff, m.start()) + 1
        # The string's start, and each '/' of the build directory before it (a string may be the
        # tail of a longer one).
        for p in [start] + [start + i for i, c in enumerate(data[start:m.start()]) if c == 0x2F]:
            files[ra + p - roff] = name

    # Newer releases keep {__func__, __FILE__} of a SourceLocation as a constant in .data.rel.ro:
    # a slot the dynamic linker fills with the file name's address (a RELATIVE relocation).
    slots = {}
    _, off, size, _, _ = secs[".rela.dyn"]
    for p in range(off, off + size, 24):
        where, info, addend = struct.unpack_from("<QQq", data, p)
        if info & 0xFFFFFFFF == 8 and addend in files:
            slots[where] = files[addend]
    ins, starts = disassemble(path, c10d_ranges(data, secs, raw))
    sites = set()

    def file_at(j):
        """The c10d file name instruction j loads (its address, or a SourceLocation slot)."""
        op, args = ins[j][1], ins[j][2]
        if "(%rip)" not in args:
            return None
        t = lea_target(op, args)
        m = TARGET.search(args)
        addr = m and int(m.group(1), 16)
        return files.get(t[1]) if t else slots.get(addr) or slots.get(addr + 8) if addr else None

    def next_call(i):
        k = i + 1
        while k < len(ins) and k - i < 40 and ins[k][1] != "call" and ins[k][1] not in ("ret", "jmp"):
            k += 1
        return k if k < len(ins) and ins[k][1] == "call" else None

    def site(i, k, file):
        """The site of the call at k whose file name instruction i loads."""
        callee = (CALLEE.search(ins[k][2]) or re.match("", "")).group(0)
        kind = kind_of(callee)
        if kind is None:
            return
        # Back to the previous site (or a jump): the message's pieces are loaded before the file name
        # (c10::str, std::string's constructor); calls that build them do not end the walk.
        lo = i
        while lo > 0 and i - lo < 80 and ins[lo - 1][1] not in ("ret", "jmp") and not (
                ins[lo - 1][1] == "call" and ends_site(ins[lo - 1][2])):
            lo -= 1
        # The line: the immediate moved next to the file name (%edx for a call, else a stack slot).
        regs, line, sev = {}, None, None
        for j in range(lo, k):
            mv = imm_move(ins[j][1], ins[j][2])
            if mv:
                regs[mv[0]] = (mv[1], abs(j - i))
        # c10::MessageLogger(file, line, severity) up to 2.14, (SourceLocation, severity, bool) after.
        by_loc = "SourceLocation" in callee
        # Line 10 and above: smaller immediates next to a site are flags and severities.
        cands = [(d, v) for dst, (v, d) in regs.items()
                 if 10 <= v < 100000 and ("(%rsp)" in dst or "(%rbp)" in dst or dst == "edx" and not by_loc)]
        if "edx" in regs and kind in ("LOG", "TORCH_CHECK", "INTERNAL_ASSERT") and not by_loc:
            line = regs["edx"][0]
        elif cands:
            line = min(cands)[1]
        if not line:
            return
        if kind == "LOG":
            sev = regs.get("esi" if by_loc else "ecx", (None,))[0]
            if sev not in SEVERITY:
                return
        pieces = []
        if kind == "LOG":
            # The pieces streamed into the logger, up to its destructor.
            rsi, n = None, k + 1
            while n < len(ins) and n - k < 400:
                nop, nargs = ins[n][1], ins[n][2]
                lt = lea_target(nop, nargs)
                if lt and lt[0] == "rsi":
                    rsi = lt[1]
                if nop == "call":
                    c = (CALLEE.search(nargs) or re.match("", "")).group(0)
                    if "MessageLoggerD" in c:
                        break
                    if INSERT.search(c):
                        s = rodata_string(data, secs, rsi) if rsi is not None else None
                        pieces.append(s if s is not None else None)
                    rsi = None
                elif nop in ("ret", "jmp"):
                    break
                n += 1
        else:
            for j in range(lo, k):
                lt = lea_target(ins[j][1], ins[j][2])
                if lt and lt[1] not in files:
                    s = rodata_string(data, secs, lt[1])
                    if s and not IDENT.fullmatch(s) and not SOURCE_PATH.fullmatch(s):
                        pieces.append(s)
        if kind == "TORCH_CHECK" and len(pieces) > 1:
            # torch 1.x loads TORCH_CHECK(cond, msg...)'s default text beside the user's message even
            # where it prints only the message (torchCheckMsgImpl picks it): the default is no piece of it.
            # (Not when what is left is only libstdc++'s own throw texts that the window caught.)
            kept = [p for p in pieces if not (p and DEFAULT_CHECK.match(p))]
            pieces = kept if any(p is not None and not LIBSTDCXX.match(p) for p in kept) else pieces
        fmt = join(pieces)
        if kind == "THROW":
            # The exception's class: its vtable, stored into the object after the constructor.
            for n in range(k + 1, min(k + 12, len(ins))):
                m = re.search(r"<_ZTVN3c10(\d+)(\w+)", ins[n][2])
                if m:
                    kind = m.group(2)[:int(m.group(1))]
                    break
        if kind == "THROW" and " INTERNAL ASSERT FAILED at " in fmt:
            # torch 1.8: TORCH_INTERNAL_ASSERT throws c10::Error with the text built in place.
            kind = "INTERNAL_ASSERT"
        if kind == "INTERNAL_ASSERT":
            fmt = re.sub(r' INTERNAL ASSERT FAILED at ".*', "", fmt)
        level = SEVERITY[sev] if kind == "LOG" else kind
        sites.add((file, line, level, fmt))

    claimed = set()
    for i in range(len(ins)):
        file = file_at(i)
        k = file and next_call(i)
        if k:
            claimed.add(k)
            site(i, k, file)
    # A function that prints several messages may keep the file name in a callee-saved register,
    # loaded once: a site call whose window names no file, but copies such a register, gets the
    # file from the register's last load before it.
    held = re.compile(r"%(rbx|rbp|r1[2-5]),")
    for k, (a, op, args) in enumerate(ins):
        if op != "call" or k in claimed or not kind_of((CALLEE.search(args) or re.match("", "")).group(0)):
            continue
        window = range(k - 1, max(k - 30, 0), -1)
        # A site of another file (an inlined header's check names its own file): not ours.
        if any((lt := lea_target(ins[i][1], ins[i][2])) and SOURCE_PATH.fullmatch(rodata_string(data, secs, lt[1]) or "")
               for i in window):
            continue
        for i in window:
            if ins[i][1] in ("call", "ret", "jmp") or i in starts:
                break
            m = held.match(ins[i][2].split("#")[0].strip()) if ins[i][1] in ("mov", "movq") else None
            if not m:
                continue
            # The register's load with a file name earlier in the same function.
            reg, file, j = m.group(1), None, i - 1
            while j >= 0 and i - j < 5000:
                lt = lea_target(ins[j][1], ins[j][2])
                if lt and lt[0] == reg:
                    file = files.get(lt[1])
                    break
                if j in starts:
                    break
                j -= 1
            if file:
                site(i, k, file)
                break
    data.close()
    return sorted(sites)


def join(pieces):
    """Literal pieces, `{}` for each value between them (runs of values count once)."""
    out = []
    for p in pieces:
        if p is None:
            if not out or out[-1] != "{}":
                out.append("{}")
        else:
            out.append(p)
    return "".join(out)


SRC_CALL = re.compile(r"\b(TORCH_WARN(?:_ONCE)?|LOG\((?:INFO|WARNING|ERROR|FATAL)\)|TORCH_CHECK(?:_WITH)?|"
                      r"C10_THROW_ERROR|TORCH_INTERNAL_ASSERT|TORCH_CHECK_MSG)\b")


def source_sites(text):
    """(line, macro) of each message macro of a C++ source file, for checking binary_sites against a
    source tree: the line binary_sites reads is the line of the macro's name."""
    out = []
    for m in SRC_CALL.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out
