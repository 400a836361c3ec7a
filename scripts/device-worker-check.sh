#!/usr/bin/env bash
# Run every teardown mode of epdoctor's built-in workload at 2 and 4 ranks on this machine's GPU(s),
# each rank under a deadline, and write a summary table and all rank logs under $OUT.
#
#   scripts/device-worker-check.sh [LIBNCCL]
#
# LIBNCCL: a libnccl.so.2 to load (passed as --nccl-lib); default: the loader's choice.
# Environment (all optional):
#   BIN           epdoctor binary (default target/release/epdoctor)
#   OUT           result folder (default ./device-worker-out); gets summary.md, env.txt, logs.tgz
#   RANKS         rank counts (default "2 4")
#   MODES         teardown modes (default: all eight)
#   CELL_TIMEOUT  deadline of one rank in seconds (default 40; then SIGTERM, 5 s later SIGKILL)
#   BUDGET        stop starting cells after this many seconds (default 450)
#   WORKER_ARGS   extra worker flags, e.g. "--tokens 1024" (default: DeepEP's test size)
#   NCCL_DEBUG    default WARN
set -u

LIB=${1:-}
BIN=${BIN:-target/release/epdoctor}
OUT=${OUT:-$PWD/device-worker-out}
RANKS=${RANKS:-"2 4"}
MODES=${MODES:-"clean abort leak no-barrier early-exit kill-peer kill-inflight free-before-close"}
CELL_TIMEOUT=${CELL_TIMEOUT:-40}
BUDGET=${BUDGET:-450}
WORKER_ARGS=${WORKER_ARGS:-}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

mkdir -p "$OUT"
LOGS=$(mktemp -d)
START=$SECONDS
if [ -n "$LIB" ] && [ ! -f "$LIB" ]; then
    echo "device-worker-check: $LIB is not a file" >&2
    exit 2
fi

{
    echo "date_utc: $(date -u '+%Y-%m-%d %H:%M:%S')"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_mode --format=csv 2>&1
    echo "kernel: $(uname -r)"
    echo "epdoctor: $("$BIN" --version 2>&1)"
    echo "libnccl requested: ${LIB:-none, the loader decides}"
    ls -l /usr/lib/x86_64-linux-gnu/libnccl* 2>/dev/null
    ls -l /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null
    echo "NCCL_DEBUG=$NCCL_DEBUG CELL_TIMEOUT=$CELL_TIMEOUT WORKER_ARGS=$WORKER_ARGS"
} >"$OUT/env.txt" 2>&1

# Compiles every kernel (and warms the PTX cache the workers share).
"$BIN" kernels --arch sm_90 >"$LOGS/kernels.txt" 2>&1
echo "kernels: exit $?" >>"$LOGS/kernels.txt"

SUMMARY="$LOGS/summary.md"
STEP_KEYS='(ipc_barrier|ipc_close|free|nccl_finalize|nccl_destroy|nccl_abort|inflight_allreduce|read_after_free|free_exported_buffer|wait_peer_exit|check|error)'

# run_cell NAME RANKS MODE [worker flags...]
run_cell() {
    local name=$1 n=$2 mode=$3
    shift 3
    local dir="$LOGS/$name"
    mkdir -p "$dir/rdv"
    local pids=() codes=() r t0 wall extra
    # Flags given to this cell, else WORKER_ARGS.
    if [ $# -gt 0 ]; then extra=("$@"); else read -r -a extra <<<"$WORKER_ARGS"; fi
    t0=$(date +%s.%N)
    for ((r = 0; r < n; r++)); do
        # timeout puts the rank in its own process group and kills it at the deadline.
        timeout -k 5 "$CELL_TIMEOUT" "$BIN" worker --rank "$r" --world "$n" --rendezvous "$dir/rdv" \
            --teardown "$mode" ${LIB:+--nccl-lib "$LIB"} "${extra[@]}" >"$dir/rank$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p"
        codes+=($?)
    done
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    local exits warns tds steps ver
    exits=$(
        IFS=,
        echo "${codes[*]}"
    )
    # Distinct WARN messages with file:line, host/pid prefix removed, with their count.
    warns=$(cat "$dir"/rank*.log | grep "NCCL WARN" | sed -E 's/^.* \[[0-9]+\] //; s/ NCCL WARN / /' |
        sed -E 's/(Connection closed by remote peer).*/\1 <peer>/; s/(from rank|localRank) [0-9]+/\1 N/g; s/Proxy Service [0-9]+/Proxy Service N/' |
        sort | uniq -c | awk '{c=$1; $1=""; sub(/^ /,""); printf "%s%d× `%s`", (NR>1?"<br>":""), c, $0}')
    [ -z "$warns" ] && warns="none"
    tds=$(for ((r = 0; r < n; r++)); do
        v=$(grep -ho "teardown_s=[0-9.]*" "$dir/rank$r.log" | tail -1 | cut -d= -f2)
        if [ -n "$v" ]; then printf "%.2f " "$v"; else printf -- "- "; fi
    done)
    steps=$(cat "$dir"/rank*.log | grep -hoE "^\[epdoctor\] rank=[0-9]+ .*" | grep -oE "(^| )$STEP_KEYS=[^ ]+" | grep -vE "=ok$" | sed 's/^ //' | sort | uniq -c | awk '{printf "%s%d×%s", (NR>1?" ":""), $1, $2}')
    [ -z "$steps" ] && steps="all ok"
    ver=$(grep -ho "nccl_version=[^ ]*" "$dir/rank0.log" | head -1 | cut -d= -f2)
    local label=$mode
    [ $# -gt 0 ] && label="$mode ($*)"
    echo "| $n | $label | ${ver:-?} | $exits | $warns | $tds| $steps | $wall |" >>"$SUMMARY"
    echo "cell $name: exits $exits, wall ${wall}s" >&2
}

{
    echo "## epdoctor built-in workload, every teardown mode ($(date -u '+%Y-%m-%d'))"
    echo
    echo "| ranks | teardown | NCCL | exit codes (rank 0..) | NCCL WARN lines (count × text) | teardown s (per rank) | steps not ok (count × step=result) | cell wall s |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
} >"$SUMMARY"

# A small cell first: if this fails, the logs say why before the full-size cells spend time.
run_cell smoke-2-clean 2 clean --tokens 256 --hidden 1024 --iters 3

for n in $RANKS; do
    for mode in $MODES; do
        if ((SECONDS - START > BUDGET)); then
            echo "| $n | $mode | | skipped: script budget of ${BUDGET}s spent | | | | |" >>"$SUMMARY"
            continue
        fi
        run_cell "r$n-$mode" "$n" "$mode"
    done
done

{
    echo
    echo "### Per-rank results of the full-size clean cells"
    for n in $RANKS; do
        echo
        echo "ranks=$n:"
        echo '```'
        grep -hE "transport=|nccl_version=|kernels=|bw_mode=|iters=|check=|gpu=" "$LOGS/r$n-clean"/rank*.log 2>/dev/null | sed -E 's/^\[epdoctor\] //'
        echo '```'
    done
} >>"$SUMMARY"

cp "$SUMMARY" "$OUT/summary.md"
cp "$LOGS/kernels.txt" "$OUT/kernels.txt"
tar -czf "$OUT/logs.tgz" -C "$LOGS" .
cat "$OUT/env.txt" "$OUT/kernels.txt" "$OUT/summary.md"
echo "total ${SECONDS}s"
