#!/usr/bin/env bash
# The explain benchmark in one command (docs/performance.md): build the release binary, generate the
# logs under bench/data/ (once; about 3.7 GB), and time explain against ripgrep on them.
#   bench/run.sh            all sets (100 MB to 2 GB, 8 to 512 ranks) and the 10 KB latency
#   bench/run.sh --quick    only the 100 MB sets and the latency
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v rg >/dev/null 2>&1; then
    echo "bench: ripgrep (rg) is not installed; it is the reference." >&2
    echo "       Install it with 'apt-get install ripgrep' or 'cargo install ripgrep' and run again." >&2
    exit 2
fi
cargo build --release --quiet
exec python3 bench/bench.py --bin target/release/epdoctor "$@"
