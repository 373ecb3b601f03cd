#!/usr/bin/env bash
# The live demo: a private nats-server on a free loopback port, then the same 60-job workload
# (jobs replaying real loss curves, on 32 workers, over NATS) played twice by `slaq emulate`:
# once against `slaq serve --policy slaq`, once against `slaq serve --policy fair`, each serving
# its page (http://127.0.0.1:<port>/, printed). In a terminal the two run side by side and stay
# up until Enter; without one (CI) they run one after the other and the script exits. Time is
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
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
declare -A http_port serve_pid
# Run in a terminal, both schedulers serve their page (/) from the start, the workloads run side
# by side once you press Enter, and the schedulers stay up until you press Enter again. Without
# a terminal (CI), one policy after the other, and it exits when done.
interactive=false
if [ -t 0 ] && [ -t 1 ]; then interactive=true; fi

start_serve() { # policy
    local policy=$1
    http_port[$policy]=$(free_port)
    RUST_LOG=slaq=warn "$slaq" serve --nats "$url" --policy "$policy" --epoch-ms 100 --refit-ms 20 --horizon-s 1.2 --prefix "demo-$policy" \
        --http-listen "127.0.0.1:${http_port[$policy]}" >"$work/serve-$policy.log" 2>&1 &
    serve_pid[$policy]=$!
    pids+=("${serve_pid[$policy]}")
    echo "slaq serve --policy $policy: its page is http://127.0.0.1:${http_port[$policy]}/"
}

stop_serve() { # policy
    kill "${serve_pid[$1]}" 2>/dev/null || true
    wait "${serve_pid[$1]}" 2>/dev/null || true
}

emulate() { # policy
    "$slaq" emulate --nats "$url" --prefix "demo-$1" --policy "$1" --jobs 60 --workers 32 --speed 50 --epoch-ms 100 --json >"$work/$1.json"
}

mid_run() { # what a newcomer can look at while slaq runs
    sleep 6
    echo "--- slaq status, mid-run ---"
    # `head` closes the pipe early (exit 141 under pipefail): that is fine.
    "$slaq" status --nats "$url" --prefix "demo-slaq" | head -12 || true
    echo "--- http://127.0.0.1:${http_port[slaq]}/metrics, mid-run (Prometheus; histogram buckets left out) ---"
    python3 - "${http_port[slaq]}" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith("slaq_") and "_bucket" not in line:
        print(line)
PY
}

summarise() { # policy
    result[$1]=$(python3 - "$work/$1.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
live, sim = r["live"], r["simulated"]
print(f"{live['mean_loss_area']:10.2f} {live['mean_time_to_90_s']:10.1f} {live['mean_jct_s']:10.1f}"
      f" {sim['mean_loss_area']:14.2f} {r['loss_area_diff_pct']:+8.1f}%")
PY
)
}

if $interactive; then
    echo; echo "=== slaq and fair side by side: open both pages in a browser ==="
    start_serve slaq
    start_serve fair
    read -r -p "Press Enter to start the same 60 jobs on 32 workers under each... " _
    emulate slaq & emulating_slaq=$!
    emulate fair & emulating_fair=$!
    mid_run
    wait "$emulating_slaq"; wait "$emulating_fair"
    summarise slaq; summarise fair
else
    for policy in slaq fair; do
        echo; echo "=== slaq serve --policy $policy ==="
        start_serve "$policy"
        emulate "$policy" & emulating=$!
        if [ "$policy" = slaq ]; then mid_run; fi
        wait "$emulating"
        stop_serve "$policy"  # frees its port before the next run
        summarise "$policy"
    done
fi
echo
echo "=== the same workload live: slaq against fair (lower is better) ==="
printf '%-6s %10s %10s %10s %14s %9s\n' policy "loss area" "t90 s" "JCT s" "simulated area" "live-sim"
for policy in slaq fair; do
    printf '%-6s %s\n' "$policy" "${result[$policy]}"
done
if $interactive; then
    echo
    echo "The schedulers stay up: their pages (http://127.0.0.1:${http_port[slaq]}/ and http://127.0.0.1:${http_port[fair]}/)"
    read -r -p "keep the epochs and the jobs' outcomes. Press Enter to stop them. " _
    stop_serve slaq; stop_serve fair
fi
