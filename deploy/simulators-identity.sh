#!/usr/bin/env bash
# Every simulator's --json for one build, to check that a change decides nothing differently:
#   deploy/simulators-identity.sh OLD_BINARY /tmp/old
#   deploy/simulators-identity.sh NEW_BINARY /tmp/new
#   for f in /tmp/old/*.json; do cmp "$f" "/tmp/new/$(basename "$f")"; done
# The 16 outputs: the curves simulator with seven policies, Gavel's throughputs at 2.0 and 0.5
# jobs an hour, Pollux's workload 1, and the six team scenarios with seeds 1 and 2. About a
# minute on 2 cores. Needs only the repository (the data is vendored in data/).
set -euo pipefail
B=$(realpath "$1")
O=$(mkdir -p "$2" && realpath "$2")
cd "$(dirname "$0")/.."
C=data/curves/curves-public.jsonl
G=data/gavel/simulation_throughputs.json
"$B" simulate --curves $C --policy slaq,fair,slaq-paper,optimus,pollux,tiresias,themis --seed 1 --json >"$O/curves.json"
"$B" simulate --curves $C --gavel-throughputs $G --jobs 120 --jobs-per-hour 2.0 --seed 0 --policy slaq,fair,gavel --json >"$O/gavel2.json"
"$B" simulate --curves $C --gavel-throughputs $G --jobs 120 --jobs-per-hour 0.5 --seed 1 --policy slaq,fair,gavel --json >"$O/gavel05.json"
"$B" simulate --pollux-workload data/pollux/workloads/workload-1.csv --json >"$O/pollux1.json"
for t in config/teams/*.toml; do
    for s in 1 2; do
        "$B" simulate --curves $C --tenants "$t" --seed $s --json >"$O/teams-$(basename "$t" .toml)-$s.json"
    done
done
