#!/usr/bin/env bash
# The `epdoctor repro` runs of issue 5's "Done when", for one session on a GPU machine.
# Every run writes its own folder under --out; each is bounded by `timeout` (SIGTERM: epdoctor then
# stops its cell and writes a partial report), all four together by about 9 minutes; a run whose
# inputs are missing is skipped and says so. At the end, any process still alive from a cell is listed.
#
#   scripts/device-repro.sh --out DIR [--epdoctor BIN] [--nccl-2.22 LIB] [--nccl-system LIB]
#                           [--nccl-2.32 LIB] [--torch-script PY] [--python PY] [--only NAME,...]
#
# Runs (NAME: what it shows):
#   builtin   `repro --ranks 2`: every teardown mode of the built-in workload
#   versions  `--teardown clean,abort --nccl-lib <2.22.3> --nccl-lib <system>`: the abort trio only in 2.22.3 x abort
#   hang232   `--teardown clean,early-exit --env NCCL_DEBUG=WARN,INFO --nccl-lib <2.32.3>`: early exit = hang in the survivor's destroy
#   torch     `--env NCCL_DEBUG=WARN,INFO --env DESTROY_PG=0,1 -- python3 <script>`: with/without destroy_process_group
set -u

out= bin= lib222= libsys= lib232= script= py=python3 only=
here=$(cd "$(dirname "$0")/.." && pwd)
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift ;;
    --epdoctor) bin=$2; shift ;;
    --nccl-2.22) lib222=$2; shift ;;
    --nccl-system) libsys=$2; shift ;;
    --nccl-2.32) lib232=$2; shift ;;
    --torch-script) script=$2; shift ;;
    --python) py=$2; shift ;;
    --only) only=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "device-repro.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "device-repro.sh: --out DIR is required" >&2; exit 2; }
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "device-repro.sh: $out exists and is not empty; give a new folder" >&2; exit 2
fi
mkdir -p "$out" && out=$(cd "$out" && pwd)
if [ -z "$bin" ]; then
  for c in "$here/target/release/epdoctor" "$here/epdoctor" "$(command -v epdoctor 2>/dev/null)"; do
    [ -n "$c" ] && [ -x "$c" ] && { bin=$c; break; }
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "device-repro.sh: no epdoctor binary; give --epdoctor BIN" >&2; exit 2; }
[ -n "$libsys" ] || for c in /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib64/libnccl.so.2; do [ -f "$c" ] && { libsys=$c; break; }; done
[ -n "$script" ] || script=$here/examples/torch_teardown.py
# NVRTC is not on the default loader path there (h200-findings.md); the torch run gets the
# caller's own LD_LIBRARY_PATH back, so torch loads the CUDA libraries of its wheel.
orig_ldlp=${LD_LIBRARY_PATH-}
had_ldlp=${LD_LIBRARY_PATH+yes}
if [ -d /usr/local/cuda/lib64 ]; then export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
unset NCCL_DEBUG NCCL_DEBUG_FILE

summary=$out/SUMMARY.txt
echo "epdoctor: $("$bin" --version 2>&1)" > "$summary"
timeout 60 "$bin" env > "$out/env.txt" 2>&1; echo "env: exit $?" >> "$summary"

want() { [ -z "$only" ] || case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# run NAME LIMIT_S ARGS...: one repro run into $out/NAME, its stdout/stderr beside it.
run() {
  local name=$1 limit=$2; shift 2
  want "$name" || return 0
  echo "== $name: epdoctor repro $*" | tee -a "$summary"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$bin" repro --out "$out/$name" "$@" > "$out/$name.stdout" 2> "$out/$name.stderr"
  local rc=$?
  local why=
  case $rc in 124|137) why=" (the script's own time limit, ${limit} s, stopped epdoctor)" ;; esac
  echo "   exit $rc after $((SECONDS - t0)) s$why" | tee -a "$summary"
  cat "$out/$name.stdout"
}
skip() { want "$1" && echo "== $1: skipped: $2" | tee -a "$summary"; }

run builtin 150 --ranks 2 --timeout 30

if [ -f "$lib222" ] && [ -f "$libsys" ]; then
  run versions 100 --ranks 2 --teardown clean,abort --nccl-lib "$lib222" --nccl-lib "$libsys" --timeout 30
else
  skip versions "needs --nccl-2.22 LIB and --nccl-system LIB (got '${lib222}' '${libsys}')"
fi

if [ -f "$lib232" ]; then
  # INFO shows the destroy's connect retries (rule nccl-destroy-hang-peer-gone); WARN shows only the hang.
  run hang232 180 --ranks 2 --teardown clean,early-exit --env NCCL_DEBUG=WARN,INFO --nccl-lib "$lib232" --timeout 45
else
  skip hang232 "needs --nccl-2.32 LIB"
fi

if [ -f "$script" ] && "$py" -c 'import torch' 2>/dev/null; then
  (
    if [ -n "$had_ldlp" ]; then export LD_LIBRARY_PATH=$orig_ldlp; else unset LD_LIBRARY_PATH; fi
    run torch 150 --ranks 2 --env NCCL_DEBUG=WARN,INFO --env DESTROY_PG=0,1 --timeout 60 -- "$py" "$script"
  )
else
  skip torch "needs torch importable by $py and the script $script"
fi

# Nothing of any cell may still run: every cell's processes carry EPDOCTOR_CELL_DIR=<cell folder>.
left=$(grep -l -a "EPDOCTOR_CELL_DIR=$out/" /proc/[0-9]*/environ 2>/dev/null | grep -v "/proc/$$/" || true)
if [ -n "$left" ]; then
  echo "LEFT RUNNING: $left" | tee -a "$summary"
else
  echo "left running: nothing" | tee -a "$summary"
fi
echo "everything is under $out"
