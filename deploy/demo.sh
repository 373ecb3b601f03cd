#!/usr/bin/env bash
# The live demo: a private nats-server on a free loopback port, `slaq serve` on it (time
# accelerated 50x: 100 ms epochs are 5 s of job time), and `slaq emulate` playing 60 jobs that
# replay real loss curves on 32 workers over NATS. It prints the live run next to the simulator
# on the same workload, then what the scheduler believes, and cleans up.
# Needs: this repository, cargo, nats-server (apt-get install -y nats-server).
set -euo pipefail
cd "$(dirname "$0")/.."
curves=data/curves/curves-public.jsonl,data/curves/slaq-paper-curves.jsonl
cargo build --release --quiet
slaq=./target/release/slaq
# shellcheck source=deploy/private-nats.sh
. deploy/private-nats.sh
url=$NATS_URL
echo "nats-server at $url"

RUST_LOG=slaq=warn "$slaq" serve --nats "$url" --epoch-ms 100 --refit-ms 20 >"$work/serve.log" 2>&1 &
pids+=($!)
"$slaq" emulate --curves "$curves" --nats "$url" --jobs 60 --workers 32 --speed 50 --epoch-ms 100 &
emulate=$!
sleep 6
echo; echo "--- slaq status, mid-run ---"
# `head` closes the pipe early (exit 141 under pipefail): that is fine.
"$slaq" status --nats "$url" | head -20 || true
echo
wait "$emulate"
