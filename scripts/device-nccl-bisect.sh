#!/usr/bin/env bash
# Issue 25 on a GPU machine that reaches no package index: `repro --nccl` with two NCCL releases
# fetched on the dev machine (`epdoctor nccl fetch 2.22.3 2.23.4 --cuda 12`) and carried as
# xz-compressed pieces, and the bisection over {2.22.3, 2.23.4, system}.
#
#   scripts/device-nccl-bisect.sh stash      copy the pieces this call carried (.device/*) to /tmp/epdoctor-nccl
#   scripts/device-nccl-bisect.sh run        stash, join and unpack the pieces, check them, run, write $OUT
#
# .device/ (git-ignored) holds, on the dev machine: epdoctor.xz (a release build), MANIFEST (the
# sha256 of every piece and of each unpacked library) and nccl-<release>.so.xz.part-aa, -ab, ...
# Each device call can carry 64 MiB in all, so one piece travels per call; /tmp survives between
# calls while the machine stays warm (30 s), so the calls follow each other at once and the last
# one says `run`. What comes back (at most 8 files, two folders deep) is $OUT/SUMMARY.txt, one
# stdout file per run and one .tgz of every run folder (per-rank logs, cells.json, report.md).
#
# Runs (each bounded by `timeout`):
#   plain    repro --ranks 2 --teardown clean,abort                  (the loader's NCCL: the hint of point 5)
#   matrix   repro --ranks 2 --nccl <2.22.3>,<2.23.4>,system --teardown abort,clean
#   bisect   repro --ranks 2 --teardown abort --nccl <2.22.3>,<2.23.4> --bisect-nccl 2.22.3..system
#            --finding nccl-abort-pair --offline                     (candidates: the two libraries and system)
set -u
stash=/tmp/epdoctor-nccl
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$stash"

do_stash() {
  local n=0
  for f in "$here"/.device/*; do
    [ -f "$f" ] || continue
    cp "$f" "$stash/" && n=$((n + 1))
  done
  echo "stashed $n file(s) in $stash: $(cd "$stash" && ls | tr '\n' ' ')"
}

case "${1:-}" in
  stash) do_stash; exit 0 ;;
  run) do_stash ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac

out=${OUT:-$stash/out}
mkdir -p "$out"
summary=$out/SUMMARY.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

cd "$stash" || exit 2
[ -f MANIFEST ] || { say "no MANIFEST in $stash: carry .device/MANIFEST in one of the calls"; exit 2; }
# Every piece named in the MANIFEST must be here and whole.
missing=$(awk '$2 ~ /\.part-/ {print $2}' MANIFEST | while read -r p; do [ -f "$p" ] || echo "$p"; done)
if [ -n "$missing" ]; then
  say "pieces not stashed yet: $(echo $missing) (carry each in a call of its own, then run again)"
  exit 2
fi
grep -E '\.part-|epdoctor\.xz' MANIFEST | sha256sum -c --quiet - 2>&1 | tee -a "$summary" || { say "a piece is damaged"; exit 2; }

if [ ! -x bin/epdoctor ]; then
  mkdir -p bin && xz -dc epdoctor.xz > bin/epdoctor && chmod +x bin/epdoctor
fi
bin=$stash/bin/epdoctor
libs=
for rel in $(awk '$2 ~ /\.part-aa$/ {sub(/^nccl-/, "", $2); sub(/\.so\.xz\.part-aa$/, "", $2); print $2}' MANIFEST); do
  lib=$stash/nccl/$rel/libnccl.so.2
  if [ ! -f "$lib" ]; then
    mkdir -p "$(dirname "$lib")"
    cat nccl-"$rel".so.xz.part-* | xz -dc > "$lib.tmp" && mv "$lib.tmp" "$lib"
  fi
  want=$(awk -v n="lib-$rel" '$2 == n {print $1}' MANIFEST)
  got=$(sha256sum "$lib" | cut -d' ' -f1)
  [ "$want" = "$got" ] || { say "libnccl.so.2 of $rel: sha256 $got, the MANIFEST says $want"; exit 2; }
  say "NCCL $rel: $lib ($(stat -c %s "$lib") bytes, sha256 ${got:0:16}...)"
  libs=${libs:+$libs,}$lib
done
[ -n "$libs" ] || { say "no library in the MANIFEST"; exit 2; }

# NVRTC is not on the loader's default path there; NVLink multicast stays off (KINDS.md).
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset NCCL_DEBUG NCCL_DEBUG_FILE
# An empty cache of its own: nothing but the carried libraries and `system`.
export XDG_CACHE_HOME=$stash/xdg
runs=$stash/runs
rm -rf "$runs" && mkdir -p "$runs"

say "epdoctor: $("$bin" --version 2>&1)"
say "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 2 | tr '\n' ';')"
timeout 60 "$bin" env > "$out/env.txt" 2>&1; say "env: exit $?"

run() {
  local name=$1 limit=$2; shift 2
  say "== $name: epdoctor repro $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$bin" repro --out "$runs/$name" "$@" > "$out/$name.txt" 2> "$runs/$name.stderr.txt"
  local rc=$?
  say "   exit $rc after $((SECONDS - t0)) s"
  grep -E "^Answer:|no longer prints|^  probe" "$out/$name.txt" | tee -a "$summary"
}

run plain 120 --ranks 2 --teardown clean,abort --timeout 30
run matrix 200 --ranks 2 --nccl "$libs,system" --teardown abort,clean --timeout 30
run bisect 200 --ranks 2 --teardown abort --nccl "$libs" --bisect-nccl 2.22.3..system \
  --finding nccl-abort-pair --offline --timeout 30

left=$(grep -l -a "EPDOCTOR_CELL_DIR=$runs/" /proc/[0-9]*/environ 2>/dev/null | grep -v "/proc/$$/" || true)
if [ -n "$left" ]; then say "LEFT RUNNING: $left"; else say "left running: nothing"; fi
tar czf "$out/nccl-bisect-runs.tgz" -C "$stash" runs && say "raw runs: nccl-bisect-runs.tgz ($(stat -c %s "$out/nccl-bisect-runs.tgz") bytes)"
ls -la "$out" >> "$summary"
