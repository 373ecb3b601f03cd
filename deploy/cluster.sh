#!/usr/bin/env bash
# A replicated slaq on one machine: three nats-servers in one cluster (JetStream, state and
# lease copied three times), three `slaq serve` replicas (one per server; the one holding the
# lease schedules, the others stand by), and an emulated load (jobs replaying real loss
# curves, and their workers). It prints the status (leader, term), kills the leader halfway,
# and prints the status again once another replica has taken over.
# SHARED=1: the replicas share the jobs ([cluster] shared, 32 partitions; the servers map the
# reports to partitions): the status shows which replica holds which partitions, and the
# killed leader's partitions are taken over by the others.
# Needs: this repository, cargo, nats-server (apt-get install -y nats-server).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nats-server >/dev/null || { echo "nats-server is missing (apt-get install -y nats-server)" >&2; exit 1; }
cargo build --release --quiet
slaq=$PWD/target/release/slaq
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

routes=("$(free_port)" "$(free_port)" "$(free_port)")
urls=()
for i in 0 1 2; do
    mkdir -p "$work/n$i"
    others=()
    for j in 0 1 2; do [ "$j" = "$i" ] || others+=("\"nats-route://127.0.0.1:${routes[$j]}\""); done
    printf 'server_name: n%s\ncluster {\n  name: slaq-local\n  listen: 127.0.0.1:%s\n  routes: [%s]\n}\n' \
        "$i" "${routes[$i]}" "$(IFS=,; echo "${others[*]}")" >"$work/n$i/node.conf"
    if [ -n "${SHARED:-}" ]; then
        cat >>"$work/n$i/node.conf" <<'CONF'
mappings = {
  "slaq.v1.job.*.loss": "slaq.v1.part.{{partition(32,1)}}.job.{{wildcard(1)}}.loss"
  "slaq.v1.job.*.bye": "slaq.v1.part.{{partition(32,1)}}.job.{{wildcard(1)}}.bye"
}
CONF
    fi
    nats-server -c "$work/n$i/node.conf" -js -sd "$work/n$i/js" -a 127.0.0.1 -p -1 --ports_file_dir "$work/n$i" \
        >"$work/n$i/nats.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do ls "$work/n$i"/*.ports >/dev/null 2>&1 && break; sleep 0.05; done
    urls+=("$(grep -o 'nats://[^"]*' "$work/n$i"/*.ports | head -1)")
done
all=$(IFS=,; echo "${urls[*]}")
echo "nats cluster: $all (forming: JetStream elects its leaders)"

declare -A replica_pid
for i in 0 1 2; do
    id=replica-$i
    cat >"$work/$id.toml" <<EOF
[nats]
discover_servers = false
[scheduler]
epoch_ms = 200
refit_interval_ms = 40
[state]
mode = "jetstream"
replicas = 3
[ha]
enabled = true
lease_ms = 2000
replica_id = "$id"
EOF
    [ -z "${SHARED:-}" ] || printf '[cluster]\nshared = true\npartitions = 32\n' >>"$work/$id.toml"
    RUST_LOG=slaq=info "$slaq" serve --nats "${urls[$i]}" --config "$work/$id.toml" >"$work/$id.log" 2>&1 &
    replica_pid[$id]=$!
    pids+=($!)
done

status() { "$slaq" status --nats "$all" | sed '/^ *$/q' || true; }
for _ in $(seq 120); do status 2>/dev/null | grep -q '^leader' && break; sleep 0.5; done
echo; echo "--- status ---"; status

"$slaq" emulate --nats "$all" --jobs 30 --workers 24 --speed 25 --epoch-ms 200 --duration 300 --json >"$work/emulate.json" &
emulate=$!
pids+=($emulate)
sleep 15
echo; echo "--- status under load ---"; status
leader=$("$slaq" status --nats "$all" | sed -n 's/^leader \([^ ]*\).*/\1/p')
echo; echo "--- killing the leader, $leader (SIGKILL) ---"
kill -9 "${replica_pid[$leader]}"
killed=$(date +%s.%N)
for _ in $(seq 240); do
    now=$("$slaq" status --nats "$all" 2>/dev/null | sed -n 's/^leader \([^ ]*\).*/\1/p' || true)
    [ -n "$now" ] && [ "$now" != "$leader" ] && break
    sleep 0.25
done
echo "new leader after $(python3 -c "import time; print(round(time.time() - $killed, 1))") s:"
status
wait "$emulate" || true
echo; echo "--- the emulated run (live, through the failover) against the simulator ---"
python3 - "$work/emulate.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
live, sim = r["live"], r["simulated"]
print(f"unfinished jobs {live['jobs_unfinished']}; mean loss area live {live['mean_loss_area']:.2f}, "
      f"simulated without a failover {sim['mean_loss_area']:.2f} ({r['loss_area_diff_pct']:+.1f}%)")
PY
