#!/usr/bin/env bash
# Re-runs every measurement quoted in README.md and writes them, with the machine and the exact
# commands, to benches/runs/DATE-core.txt. Needs only the repository (the curves are vendored in data/).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
B=./target/release/slaq
C=data/curves/curves-public.jsonl,data/curves/slaq-paper-curves.jsonl
out="benches/runs/$(date -u +%F)-core.txt"
run() {
    echo
    echo "\$ slaq $*"
    "$B" "$@"
}
{
    echo "# Evaluation run: $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(rustc --version)"
    run predict --curves "$C" --horizon 10
    run predict --curves "$C" --horizon 50
    run simulate --curves "$C" --policy slaq,slaq-paper,fair --workers 32,64,128
    run simulate --curves "$C" --policy slaq,slaq-paper,fair --workers 32,64,128,256 --seed 1,2,3,4,5
    run simulate --curves "$C" --policy slaq,slaq-paper,fair --workers 32,64,128,256 --seed 1,2,3,4,5 --min-workers 0
    run simulate --curves "$C" --policy slaq,slaq-paper,fair --workers 32,64,128,256 --seed 1,2,3,4,5 --serial-fraction 0.02 --comm-fraction 0.005
    run simulate --curves "$C" --policy slaq,slaq-paper,fair --workers 32,64,128,256 --seed 1,2,3,4,5 --converged 0.01
    run simulate --curves "$C" --policy slaq,slaq-oracle,fair --workers 32,64,128,256 --seed 1,2,3,4,5
    run bench alloc --curves data/curves/curves-public.jsonl --jobs 4000 --workers 16000 --runs 21 --json
    run bench alloc --curves data/curves/curves-public.jsonl --jobs 100000 --workers 1000000 --json
} > "$out" 2>&1
echo "wrote $out"
