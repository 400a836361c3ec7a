#!/usr/bin/env python3
"""Regenerate the committed seed corpus (fuzz/seeds/) from real logs: the H200 runs in
shared/data/h200-logs/, examples/, and the rule fixtures (directives stripped, `#=FILE=#` turned into
the fuzz target's file separator). Each seed is at most 4 KiB; the first byte holds the options."""
import glob, gzip, hashlib, os, re, shutil, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds", "explain")
SEP = b"\n#=FILE=#\n"
LIMIT = 4096
INTERESTING = re.compile(rb"WARN|ERROR|Error|error|version|Abort|Destroy|Init (START|COMPLETE)|rank|Traceback|\[epdoctor|exit|signal|W\d{4} ")

def put(data: bytes, flags: int = 0):
    data = bytes([flags]) + data[:LIMIT]
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)

def chunk_lines(lines):
    cur = b""
    for l in lines:
        if len(cur) + len(l) > LIMIT:
            yield cur
            cur = b""
        cur += l
    if cur:
        yield cur

def main():
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    logs = sorted(glob.glob(os.path.join(ROOT, "..", "shared", "data", "h200-logs", "*")))
    logs += sorted(glob.glob(os.path.join(ROOT, "examples", "*.log")))
    for i, p in enumerate(logs):
        data = open(p, "rb").read()
        lines = data.splitlines(keepends=True)
        put(b"".join(lines)[:LIMIT], i & 0xF6)
        picked = [l[:600] for l in lines if INTERESTING.search(l)]
        for j, c in enumerate(list(chunk_lines(picked))[:3]):
            put(c, (i + j) & 0xF6)
    for i, p in enumerate(sorted(glob.glob(os.path.join(ROOT, "rules", "fixtures", "**", "*.log"), recursive=True))):
        out = []
        for l in open(p, "rb").read().splitlines(keepends=True):
            if l.startswith(b"#=MATCH=# "):
                out.append(l[len(b"#=MATCH=# "):])
            elif l.startswith(b"#=FILE=#"):
                out.append(SEP[1:])
            elif not l.startswith(b"#="):
                out.append(l)
        put(b"".join(out), (i * 3) & 0xF6)
    ex = open(os.path.join(ROOT, "examples", "deepep-intranode-teardown.log"), "rb").read()
    gz = gzip.compress(ex)
    put(gz)
    put(gz[: len(gz) // 2])
    if shutil.which("zstd"):
        z = subprocess.run(["zstd", "-q", "-c"], input=ex, capture_output=True, check=True).stdout
        put(z)
        put(z[: len(z) // 2])
    # Two ranks of the example, one with a torch rank prefix.
    put(ex + SEP + b"".join(b"[rank1]:" + l for l in ex.splitlines(keepends=True)))
    put(b"[epdoctor] rank=0 phase=teardown-start t=1764426546.5\n[epdoctor-harness] rank=1 signal=9 (SIGKILL)\n")
    print(len(os.listdir(OUT)), "seeds in", OUT)

main()
