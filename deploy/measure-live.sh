#!/usr/bin/env bash
# Re-runs the live measurements quoted in docs/evaluation.md against a private nats-server and writes
# them, with the machine and the exact commands, to benches/runs/DATE-live.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
B=./target/release/slaq
# shellcheck source=deploy/private-nats.sh
. deploy/private-nats.sh
N=$NATS_URL
C=data/curves/curves-public.jsonl,data/curves/slaq-paper-curves.jsonl
out="benches/runs/$(date -u +%F)-live.txt"
{
    echo "# Live measurements: $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nats-server --version 2>&1 | head -1), loopback"
    echo
    echo "## Ingestion: 500,000 loss reports over 1,000 jobs, raw NATS pub->sub vs into the job actors (5 runs)"
    for _ in 1 2 3 4 5; do
        echo '$ slaq bench ingest --nats $N --reports 500000 --jobs 1000 --json'
        "$B" bench ingest --nats "$N" --reports 500000 --jobs 1000 --json
    done
    echo
    echo "## Epoch latency and memory: 4,000 jobs, 16,000 workers, 200 measured epochs (2 runs)"
    for _ in 1 2; do
        echo '$ slaq bench epoch --nats $N --jobs 4000 --workers 16000 --epochs 200 --json'
        "$B" bench epoch --nats "$N" --jobs 4000 --workers 16000 --epochs 200 --json
    done
    echo
    echo "## Live vs simulated (160 jobs, 64 workers, seed 1, 50x real time: epoch 100 ms = 5 s, refit 20 ms = 1 s)"
    for i in 1 2; do
        RUST_LOG=warn "$B" serve --nats "$N" --epoch-ms 100 --refit-ms 20 --prefix "rec$i" >/dev/null 2>&1 &
        serve=$!
        sleep 1
        echo "\$ slaq serve --nats \$N --epoch-ms 100 --refit-ms 20 --prefix rec$i &"
        echo "\$ slaq emulate --curves $C --nats \$N --prefix rec$i --speed 50 --epoch-ms 100"
        "$B" emulate --curves "$C" --nats "$N" --prefix "rec$i" --speed 50 --epoch-ms 100
        kill "$serve"
        echo
    done
} > "$out" 2>&1
echo "wrote $out"
