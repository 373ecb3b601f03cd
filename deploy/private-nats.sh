# Sourced by the deploy scripts: starts a private nats-server on a free loopback port, sets
# NATS_URL, and stops it (and anything else in `pids`) and removes its directory on exit.
command -v nats-server >/dev/null || { echo "nats-server is missing (apt-get install -y nats-server)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
nats-server -a 127.0.0.1 -p -1 --ports_file_dir "$work" >"$work/nats.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do ls "$work"/*.ports >/dev/null 2>&1 && break; sleep 0.05; done
NATS_URL=$(grep -o 'nats://[^"]*' "$work"/*.ports | head -1)
[ -n "$NATS_URL" ] || { echo "nats-server did not start (see $work/nats.log)" >&2; exit 1; }
