#!/usr/bin/env bash
# DeepEP's own intranode test under `epdoctor repro` on a GPU machine (issue 41, point 5).
#
#   scripts/device-deepep.sh --deepep DIR --out DIR [--epdoctor BIN] [--timeout S] [-- TEST FLAGS...]
#
# DIR is an unpacked DeepEP release (`git archive`, never committed here). Steps:
# 1. Builds it in place, intranode only. Two changes, both to the build, none to the test:
#    - NVSHMEM off although its wheel is installed: DeepEP's setup.py turns NVSHMEM off only when it
#      cannot import `nvidia.nvshmem`, so the build runs with that import made to fail;
#    - `-rdc=true` dropped from setup.py's nvcc flags: it asks for relocatable device code, whose
#      device-link step setup.py adds only with NVSHMEM, so without NVSHMEM the extension fails to
#      import (`undefined symbol: __cudaRegisterLinkedBinary_...`).
# 2. Runs `epdoctor repro` over scripts/deepep_intranode.py (the test's own test_loop, ranks wrapped
#    onto the GPUs there are): DESTROY_PG=1,0 (the test's final destroy_process_group, or not) x
#    NCCL: the one torch ships, the system's libnccl.
set -u
deepep= out= bin= timeout=240
here=$(cd "$(dirname "$0")/.." && pwd)
while [ $# -gt 0 ]; do
  case "$1" in
    --deepep) deepep=$2; shift ;;
    --out) out=$2; shift ;;
    --epdoctor) bin=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "device-deepep.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$deepep" ] && [ -f "$deepep/setup.py" ] || { echo "device-deepep.sh: --deepep DIR must hold DeepEP's setup.py" >&2; exit 2; }
[ -n "$out" ] || { echo "device-deepep.sh: --out DIR is required" >&2; exit 2; }
[ ! -e "$out" ] || { echo "device-deepep.sh: $out exists; give a new folder" >&2; exit 2; }
bin=${bin:-$here/target/release/epdoctor}
[ -x "$bin" ] || { echo "device-deepep.sh: no epdoctor binary at $bin; give --epdoctor BIN" >&2; exit 2; }
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--num-processes 2 --num-tokens 1024 --hidden 2048 --num-experts 64 --num-topk 4)
mkdir -p "$out" && out=$(cd "$out" && pwd) && deepep=$(cd "$deepep" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

(
  cd "$deepep" || exit 1
  sed -i "s/'-rdc=true', //" setup.py
  if grep -q rdc=true setup.py; then echo "setup.py still asks for -rdc=true: the sed no longer matches this release" >&2; exit 1; fi
  TORCH_CUDA_ARCH_LIST=9.0 python3 -c "
import runpy, sys
sys.modules['nvidia.nvshmem'] = None  # find_spec() -> None: setup.py builds without NVSHMEM
sys.argv = ['setup.py', 'build_ext', '--inplace']
runpy.run_path('setup.py', run_name='__main__')"
) > "$out/build.log" 2>&1 || { echo "device-deepep.sh: the DeepEP build failed (end of $out/build.log):" >&2; tail -20 "$out/build.log" >&2; exit 1; }
(cd "$deepep" && python3 -c "import deep_ep, deep_ep_cpp; print('deep_ep imports')") >> "$out/build.log" 2>&1 \
  || { echo "device-deepep.sh: the built extension does not import:" >&2; tail -5 "$out/build.log" >&2; exit 1; }

torch_nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))")
sys_nccl=
for c in /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib64/libnccl.so.2; do [ -f "$c" ] && { sys_nccl=$c; break; }; done
libs=(--nccl-lib "$torch_nccl")
[ -n "$sys_nccl" ] && libs+=(--nccl-lib "$sys_nccl")
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', '.'.join(map(str, torch.cuda.nccl.version())))"
  echo "torch's libnccl: $torch_nccl"; echo "system libnccl: ${sys_nccl:-none}"
  echo "test flags: ${flags[*]}"
} > "$out/machine.txt" 2>&1

DEEPEP_DIR=$deepep "$bin" repro --out "$out/run" --timeout "$timeout" --env DESTROY_PG=1,0 --env NCCL_DEBUG=WARN \
  "${libs[@]}" -- python3 "$here/scripts/deepep_intranode.py" "${flags[@]}" > "$out/repro.txt" 2>&1
echo "repro exit: $?" >> "$out/machine.txt"
