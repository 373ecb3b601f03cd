#!/usr/bin/env bash
# Re-runs every measurement quoted in docs/evaluation.md and writes them, with the machine and the exact
# commands, to benches/runs/DATE-core.txt. Needs only the repository (the curves are vendored in
# data/). The policy sweep, the floor frontier (with SVG plots under target/frontier/) and the
# prediction errors take about ten minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
B=./target/release/slaq
C=data/curves/curves-public.jsonl
W="--interarrival 10 --base-iter-seconds 10 --epoch 5 --jobs 160"
out="benches/runs/$(date -u +%F)-core.txt"
run() {
    echo
    echo "\$ slaq $*"
    "$B" "$@"
}
{
    echo "# Evaluation run: $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(rustc --version)"
    run predict --curves "$C,data/curves/slaq-paper-curves.jsonl" --horizon 10
    run predict --curves "$C,data/curves/slaq-paper-curves.jsonl" --horizon 50
    # The sweep: near-linear (SLAQ's runtime model) and measured (Pollux) speed-ups.
    # shellcheck disable=SC2086
    run simulate --curves "$C" --policy slaq,slaq-paper,fair,oracle --workers 32,64,128,256 --seed 1,2,3 $W --serial-fraction 0.02 --comm-fraction 0.005
    # shellcheck disable=SC2086
    run simulate --curves "$C" --policy slaq,slaq-paper,fair,oracle --workers 32,64,128,256 --seed 1,2,3 $W --speedup pollux
    # The frontier at 64 workers: floors 0 to 1, with the oracle beside slaq (SVG: frontier-64.svg).
    # shellcheck disable=SC2086
    run simulate --curves "$C" --policy slaq,fair,oracle --workers 64 --seed 1,2,3 $W --serial-fraction 0.02 --comm-fraction 0.005 --floor 0,0.25,0.5,0.75,1 --out target/frontier/near-linear
    # shellcheck disable=SC2086
    run simulate --curves "$C" --policy slaq,fair,oracle --workers 64 --seed 1,2,3 $W --speedup pollux --floor 0,0.25,0.5,0.75,1 --out target/frontier/pollux
    run bench alloc --curves "$C" --jobs 4000 --workers 16000 --runs 21 --json
    run bench alloc --curves "$C" --jobs 100000 --workers 1000000 --json
} > "$out" 2>&1
echo "wrote $out"
