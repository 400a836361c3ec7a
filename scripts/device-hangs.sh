#!/usr/bin/env bash
# Issue 14's (and issue 12's) runs on a one-GPU machine, in steps that fit one warm device session.
#
#   scripts/device-hangs.sh torch            Flight Recorder dumps and hang stacks, torch 2.11 + its NCCL
#   scripts/device-hangs.sh piece FILE       keep one piece of the xz-compressed NCCL 2.32.3 in /tmp/n32
#   scripts/device-hangs.sh nccl232          join + unpack the pieces, then the NCCL 2.32.3 runs:
#                                            ATTN vs WARN/INFO/NCCL_DEBUG_LEVELS (issue 12), the built-in
#                                            workload's early-exit hang with the survivor's stack, and the
#                                            torch destroy hang (2.32.3 vs torch's own NCCL)
#
# Everything goes under $OUT (one .tgz per step plus a summary); epdoctor is $BIN (default
# target/release/epdoctor). Stack tools: py-spy from $WHL (a wheel; default .whl/), eu-stack from
# $WHL/deb/ (Debian's elfutils packages), else /proc.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$here/target/release/epdoctor}
OUT=${OUT:-$PWD/device-hangs-out}
WHL=${WHL:-$here/.whl}
W=/tmp/hangs-work
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

tools() {
  if [ ! -x /tmp/site/bin/py-spy ] && ls "$WHL"/py_spy-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHL"/py_spy-*.whl
  fi
  if [ ! -x /tmp/eubin/eu-stack ] && ls "$WHL"/deb/*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/eu /tmp/eubin
    for f in "$WHL"/deb/*.deb; do dpkg -x "$f" /tmp/eu; done
    printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/eu/usr/lib/x86_64-linux-gnu exec /tmp/eu/usr/bin/eu-stack "$@"\n' > /tmp/eubin/eu-stack
    chmod +x /tmp/eubin/eu-stack
  fi
  export PATH=/tmp/site/bin:/tmp/eubin:$PATH
  echo "stack tools: py-spy=$(command -v py-spy || echo none) $(py-spy --version 2>&1) eu-stack=$(command -v eu-stack || echo none) gdb=$(command -v gdb || echo none)"
}

facts() {
  echo "date_utc: $(date -u '+%Y-%m-%d %H:%M:%S')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "kernel: $(uname -r)"
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "cuda", torch.version.cuda)' 2>&1
  echo "epdoctor: $("$BIN" --version 2>&1)"
}

# repro NAME LIMIT ARGS...: one `epdoctor repro` into $W/NAME, with its stdout.
repro() {
  local name=$1 limit=$2; shift 2
  echo "== $name: epdoctor repro $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$BIN" repro -q --out "$W/$name" "$@" > "$W/$name.stdout" 2> "$W/$name.stderr"
  echo "   exit $? after $((SECONDS - t0)) s"
  grep -E "hang:|waiting in|^\| *[0-9]" "$W/$name/report.md" 2>/dev/null | head -20
}

# count DIR: NCCL ATTN and WARN lines per cell (rank logs and NCCL_DEBUG_FILE files).
count() {
  for c in "$1"/cells/*/; do
    local a w
    a=$(cat "$c"/*.log 2>/dev/null | grep -c ' NCCL ATTN ')
    w=$(cat "$c"/*.log 2>/dev/null | grep -c ' NCCL WARN ')
    echo "$(basename "$c") ATTN=$a WARN=$w"
  done
}

case "${1:-}" in
torch)
  facts | tee "$W/facts-torch.txt"
  tools > "$W/tools.txt"; cat "$W/tools.txt" | tee -a "$W/facts-torch.txt"
  "$BIN" env > "$W/env.txt" 2>&1
  S=$here/scripts/device-hangs-torch.py
  export TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1
  for case in skip mismatch kill; do
    mkdir -p "$W/fr-$case-dumps"
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$W/fr-$case-dumps/nccl_trace_rank_ PG_TIMEOUT_S=15 \
      repro "fr-$case" 150 --timeout 100 -- python3 "$S" "$case"
    ls -la "$W/fr-$case-dumps"
  done
  # The same skip, stopped by epdoctor's deadline before the process group's timeout: the stacks.
  mkdir -p "$W/stack-skip-dumps"
  TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$W/stack-skip-dumps/nccl_trace_rank_ PG_TIMEOUT_S=300 \
    repro stack-skip 90 --timeout 15 -- python3 "$S" skip
  tar -czf "$OUT/torch.tgz" -C "$W" .
  ;;
stacks)
  # The skip case again, stopped before the group's timeout, with py-spy and eu-stack on PATH.
  tools
  mkdir -p "$W/stack-skip2-dumps"
  TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$W/stack-skip2-dumps/nccl_trace_rank_ PG_TIMEOUT_S=300 \
    repro stack-skip2 90 --timeout 15 -- python3 "$here/scripts/device-hangs-torch.py" skip
  tar -czf "$OUT/stacks.tgz" -C "$W" stack-skip2 stack-skip2.stdout
  ;;
destroy232)
  # torch's early exit on NCCL 2.32.3 with two real local ranks (NCCL_MULTI_RANK_GPU_ENABLE=1).
  tools
  mkdir -p "$W/torch-destroy232-dumps"
  TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$W/torch-destroy232-dumps/nccl_trace_rank_ \
    repro torch-destroy232 120 --timeout 30 --nccl-lib /tmp/n32/libnccl.so.2 --env NCCL_MULTI_RANK_GPU_ENABLE=1 --env NCCL_DEBUG=WARN,INFO \
    -- python3 "$here/scripts/device-hangs-torch.py" early-exit
  tar -czf "$OUT/destroy232.tgz" -C "$W" torch-destroy232 torch-destroy232.stdout torch-destroy232-dumps
  ;;
piece)
  mkdir -p /tmp/n32 && cp "$2" /tmp/n32/ && ls -la /tmp/n32
  ;;
nccl232)
  tools
  if [ ! -f /tmp/n32/libnccl.so.2 ]; then
    cat /tmp/n32/libnccl.so.2.xz.* | xz -d -T0 > /tmp/n32/libnccl.so.2 || { echo "unpack failed"; exit 1; }
  fi
  sha256sum /tmp/n32/libnccl.so.2
  facts | tee "$W/facts-232.txt"
  L=/tmp/n32/libnccl.so.2
  # Issue 12: which NCCL_DEBUG settings show 2.32.3's ATTN lines; issue 14 point 4: the survivor's stack.
  repro attn 300 --ranks 2 --teardown abort,early-exit,kill-inflight --env NCCL_DEBUG=WARN,ATTN,INFO --nccl-lib "$L" --timeout 20
  count "$W/attn" | tee "$W/attn-counts.txt"
  NCCL_DEBUG=WARN repro attn-levels 120 --ranks 2 --teardown abort,early-exit --env NCCL_DEBUG_LEVELS=,ATTN --nccl-lib "$L" --timeout 20
  count "$W/attn-levels" | tee "$W/attn-levels-counts.txt"
  TL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  mkdir -p "$W/torch-destroy-dumps"
  TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$W/torch-destroy-dumps/nccl_trace_rank_ \
    repro torch-destroy 120 --timeout 30 --nccl-lib "$L" ${TL:+--nccl-lib "$TL"} -- python3 "$here/scripts/device-hangs-torch.py" early-exit
  tar -czf "$OUT/nccl232.tgz" -C "$W" attn attn-levels torch-destroy torch-destroy-dumps attn.stdout attn-levels.stdout torch-destroy.stdout attn-counts.txt attn-levels-counts.txt facts-232.txt
  ;;
*)
  sed -n '2,12p' "$0"; exit 2 ;;
esac
left=$(grep -l -a "EPDOCTOR_CELL_DIR=$W/" /proc/[0-9]*/environ 2>/dev/null | grep -v "/proc/$$/" || true)
echo "left running: ${left:-nothing}"
