#!/usr/bin/env bash
# Issue 26 on one H200: a torch job under `epdoctor repro` whose rank 1 skips a collective, in one
# run of two cells: PG_TIMEOUT_S=15 (the watchdog times out before the 40 s deadline and the Flight
# Recorder dumps land in the cell) and PG_TIMEOUT_S=300 (only the stacks at the deadline). The report
# must show the hung rank's stack, the Flight Recorder culprit and the rank in `ranks`.
#
#   DIR=.issue26 OUT=... scripts/device-issue26.sh     # DIR holds epdoctor (stripped), the py-spy
#                                                     # wheel and scripts/device-hangs-torch.py
# Everything goes under $OUT: facts.txt, env.txt, the run folder as issue26-run.tgz, explain of each
# cell as JSON and Markdown, report.md (`epdoctor report --repro`).
set -u
DIR=${DIR:-.issue26}
DIR=$(cd "$DIR" && pwd)
BIN=$DIR/epdoctor
OUT=${OUT:-$PWD/device-issue26-out}
W=/tmp/issue26
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$DIR"/py_spy-*.whl
export PATH=/tmp/site/bin:$PATH
{
  echo "date_utc: $(date -u '+%Y-%m-%d %H:%M:%S')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "kernel: $(uname -r)"
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "cuda", torch.version.cuda)' 2>&1
  echo "py-spy: $(py-spy --version 2>&1)"
  echo "epdoctor: $("$BIN" --version 2>&1)"
} | tee "$OUT/facts.txt"
"$BIN" env > "$OUT/env.txt" 2>&1
export TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1
t0=$SECONDS
timeout -k 10 200 "$BIN" repro --out "$W/skip" --timeout 40 --env PG_TIMEOUT_S=15,300 \
  -- python3 "$DIR/device-hangs-torch.py" skip > "$OUT/repro.stdout" 2> "$OUT/repro.stderr"
echo "repro exit $? after $((SECONDS - t0)) s" | tee -a "$OUT/facts.txt"
for c in "$W"/skip/cells/*/; do
  n=$(basename "$c")
  "$BIN" explain "$c" -f json > "$OUT/explain-$n.json" 2>&1
  "$BIN" explain "$c" -f md > "$OUT/explain-$n.md" 2>&1
  ls -la "$c" >> "$OUT/cells-ls.txt"
done
"$BIN" report --repro "$W/skip" -o "$OUT/report.md" > /dev/null 2>&1 || echo "report failed" >> "$OUT/facts.txt"
tar -czf "$OUT/issue26-run.tgz" -C "$W" skip
left=$(grep -l -a "EPDOCTOR_CELL_DIR=$W/" /proc/[0-9]*/environ 2>/dev/null | grep -v "/proc/$$/" || true)
echo "left running: ${left:-nothing}" | tee -a "$OUT/facts.txt"
