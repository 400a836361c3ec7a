"""NVSHMEM (the nvidia-nvshmem-cu12 wheels) and DeepEP (its git refs): their warning, error and
assertion texts, for the catalogue.

NVSHMEM: every message-like string of the .rodata of each library of the wheel (the host library,
the transports, the bootstraps); its prints carry no level of their own (`NVSHMEMI_ERROR_PRINT` puts
`file:line: ` before the text, `NVSHMEMI_WARN_PRINT` `WARN: `), so the catalogue keeps the text and
the library. DeepEP: its sources per ref: `EP_HOST_ASSERT(cond)` (thrown as `Failed: Assertion error
FILE:LINE 'cond'`), `EP_DEVICE_ASSERT(cond)` (printed as `Assertion failed: FILE:LINE, condition:
cond`), `printf`, `throw`, and the Python package's raise/assert/warn texts.
"""

import re
import struct

# A message: words and a space, and one of these words (or a printf conversion after a word).
MSG_WORD = re.compile(r"fail|error|unable|cannot|could not|couldn't|invalid|not supported|unsupported|"
                      r"timeout|timed out|abort|mismatch|exceed|insufficient|out of|warn|denied|refused|"
                      r"not found|not available|no .* found|too (?:many|large|small)|leak|destroy|finaliz",
                      re.I)


def rodata_strings(data):
    """Printable NUL-terminated strings of an ELF's .rodata (with the offset each starts at)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = raw[shstrndx][4]
    out = []
    for name, typ, flags, addr, off, size in raw:
        n = data[stroff + name:data.index(b"\0", stroff + name)]
        if n != b".rodata":
            continue
        for m in re.finditer(rb"[\t\n\x20-\x7e]{8,}(?=\0)", data[off:off + size]):
            out.append(m.group(0).decode())
    return out


def nvshmem_messages(lib_name, data):
    """(family, text) of the message-like strings of one NVSHMEM library."""
    out = set()
    for s in rodata_strings(data):
        t = s.strip()
        if " " not in t or not MSG_WORD.search(t) or len(t) > 400:
            continue
        # Symbol and path strings, option help and compiler/runtime banners are not messages.
        if re.fullmatch(r"[\w./:-]+", t) or t.startswith(("/", "GCC:", "_Z")):
            continue
        out.add((nvshmem_family(lib_name, t), s))
    return out


def nvshmem_family(lib, text):
    low = text.lower()
    if "ibgda" in lib:
        return "ibgda"
    if "bootstrap" in lib:
        return "bootstrap"
    if "transport" in lib:
        return "transport"
    if re.search(r"finaliz|destroy|teardown|cleanup|leak", low):
        return "teardown"
    if re.search(r"heap|malloc|alloc|symmetric|memory|mem_", low):
        return "memory"
    if re.search(r"bootstrap|uniqueid|pmi", low):
        return "bootstrap"
    if re.search(r"proxy", low):
        return "proxy"
    return "init"


# DeepEP source sites.
DEEPEP_EXTS = (".cu", ".cuh", ".cpp", ".hpp", ".h", ".py")
EP_CALL = re.compile(r"\b(EP_HOST_ASSERT|EP_DEVICE_ASSERT|printf|fprintf|throw\s+[A-Za-z_:]+|EP_STATIC_ASSERT)\s*\(")
PY_CALL = re.compile(r"\b(raise\s+[A-Za-z_.]+|warnings\.warn|print)\s*\(|\bassert\s+")


def deepep_sites(path, text, split_args, c_literal, py_literal):
    """(line, kind, text) of one DeepEP file."""
    out = []
    if path.endswith(".py"):
        for m in PY_CALL.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            if m.group(0).startswith("assert"):
                end = text.find("\n", m.end())
                stmt = text[m.end():end if end > 0 else len(text)]
                if "," not in stmt:
                    out.append((line, "assert", stmt.strip()))
                    continue
                args, _ = split_args(stmt + ")", 0)
                msg = py_literal(",".join(args[1:])) if args and len(args) > 1 else None
                out.append((line, "assert", msg if msg else args[0] if args else stmt.strip()))
                continue
            args, _ = split_args(text, m.end())
            msg = py_literal(args[0]) if args and args[0] else None
            if msg and len(msg.strip()) >= 6:
                kind = "raise" if m.group(1).startswith("raise") else m.group(1).split(".")[-1]
                out.append((line, kind, msg))
        return out
    for m in EP_CALL.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        # The macro's own definition (#define EP_HOST_ASSERT(cond) ...) is no site.
        ls = text.rfind("\n", 0, m.start()) + 1
        if re.match(r"\s*#\s*(?:define|ifndef|endif)", text[ls:m.start() + 1]):
            continue
        args, _ = split_args(text, m.end())
        if not args or not args[0]:
            continue
        kind = m.group(1).split()[0] if m.group(1).startswith("throw") else m.group(1)
        if kind in ("EP_HOST_ASSERT", "EP_DEVICE_ASSERT"):
            msg = re.sub(r"\s+", " ", args[0])
        elif kind == "fprintf":
            msg = c_literal(args[1]) if len(args) > 1 else None
        elif kind == "EP_STATIC_ASSERT":
            continue
        else:
            msg = c_literal(args[0]) if kind == "printf" else next(
                (c_literal(a) for a in args if c_literal(a)), None)
        if msg and len(msg.strip()) >= 4:
            out.append((line, "throw" if kind == "throw" else kind, msg))
    return out
