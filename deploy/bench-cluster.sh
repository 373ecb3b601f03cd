#!/usr/bin/env bash
# Replicas that share the jobs (issue #19), measured on a three-node NATS cluster on this host:
# starts the cluster (JetStream, and the account mapping that puts each job's reports on its
# partition), then `slaq bench cluster` against it, which starts the replicas itself.
#
#   deploy/bench-cluster.sh                      # 3 replicas, 10,000 jobs, 40,000 workers
#   deploy/bench-cluster.sh --jobs 1000 --workers 4000 --warm-up-s 10 --measure-s 10
#
# PARTITIONS (default 32) must match the mapping; SLAQ (default target/release/slaq) is the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
PARTITIONS=${PARTITIONS:-32}
SLAQ=${SLAQ:-target/release/slaq}
[ -x "$SLAQ" ] || cargo build --release --quiet
dir=$(mktemp -d /tmp/slaq-bench-cluster.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
base=$((20000 + RANDOM % 20000))
urls=()
for i in 1 2 3; do
  routes=()
  for j in 1 2 3; do [ "$j" = "$i" ] || routes+=("\"nats-route://127.0.0.1:$((base + 100 + j))\""); done
  cat > "$dir/n$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:$((base + i))
jetstream { store_dir: "$dir/n$i" }
cluster { name: slaq-bench, listen: 127.0.0.1:$((base + 100 + i)), routes: [$(IFS=,; echo "${routes[*]}")] }
mappings = {
  "benchcluster.v1.job.*.loss": "benchcluster.v1.part.{{partition($PARTITIONS,1)}}.job.{{wildcard(1)}}.loss"
  "benchcluster.v1.job.*.bye": "benchcluster.v1.part.{{partition($PARTITIONS,1)}}.job.{{wildcard(1)}}.bye"
}
CONF
  nats-server -c "$dir/n$i.conf" >"$dir/n$i.log" 2>&1 &
  pids+=($!)
  urls+=("nats://127.0.0.1:$((base + i))")
done
# JetStream needs its meta leader before the bench creates streams.
sleep 5
"$SLAQ" bench cluster --nats "$(IFS=,; echo "${urls[*]}")" --partitions "$PARTITIONS" --state-replicas 3 "$@"
