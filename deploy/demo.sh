#!/usr/bin/env bash
# The live demo: a private nats-server on a free loopback port, then the same 60-job workload
# (jobs replaying real loss curves, on 32 workers, over NATS) played twice by `slaq emulate`:
# once against `slaq serve --policy slaq`, once against `slaq serve --policy fair`. Time is
# accelerated 50x (100 ms epochs are 5 s of job time). It prints each live run next to the
# simulator on the same workload, a status snapshot, and the two live runs side by side.
# Needs: this repository, cargo, nats-server (apt-get install -y nats-server).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
slaq=./target/release/slaq
# shellcheck source=deploy/private-nats.sh
. deploy/private-nats.sh
url=$NATS_URL
echo "nats-server at $url"

declare -A result
http_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for policy in slaq fair; do
    echo; echo "=== slaq serve --policy $policy ==="
    RUST_LOG=slaq=warn "$slaq" serve --nats "$url" --policy "$policy" --epoch-ms 100 --refit-ms 20 --horizon-s 1.2 --prefix "demo-$policy" \
        --http-listen "127.0.0.1:$http_port" >"$work/serve-$policy.log" 2>&1 &
    serve=$!
    pids+=("$serve")
    "$slaq" emulate --nats "$url" --prefix "demo-$policy" --policy "$policy" --jobs 60 --workers 32 --speed 50 --epoch-ms 100 --json >"$work/$policy.json" &
    emulate=$!
    if [ "$policy" = slaq ]; then
        sleep 6
        echo "--- slaq status, mid-run ---"
        # `head` closes the pipe early (exit 141 under pipefail): that is fine.
        "$slaq" status --nats "$url" --prefix "demo-$policy" | head -12 || true
        echo "--- http://127.0.0.1:$http_port/metrics, mid-run (Prometheus; histogram buckets left out) ---"
        python3 - "$http_port" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith("slaq_") and "_bucket" not in line:
        print(line)
PY
    fi
    wait "$emulate"
    kill "$serve" 2>/dev/null || true
    wait "$serve" 2>/dev/null || true  # frees the HTTP port for the next run
    result[$policy]=$(python3 - "$work/$policy.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
live, sim = r["live"], r["simulated"]
print(f"{live['mean_loss_area']:10.2f} {live['mean_time_to_90_s']:10.1f} {live['mean_jct_s']:10.1f}"
      f" {sim['mean_loss_area']:14.2f} {r['loss_area_diff_pct']:+8.1f}%")
PY
)
done
echo
echo "=== the same workload live: slaq against fair (lower is better) ==="
printf '%-6s %10s %10s %10s %14s %9s\n' policy "loss area" "t90 s" "JCT s" "simulated area" "live-sim"
for policy in slaq fair; do
    printf '%-6s %s\n' "$policy" "${result[$policy]}"
done
