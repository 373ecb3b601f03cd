#!/usr/bin/env python3
"""Issue #41: slaq's completion weight (lambda) swept on issue #6's curve workloads.

Runs `slaq simulate --json` (release build) per cluster size, speed-up, seed and lambda, with
fair and srpt-oracle beside, and prints per cell the means over the seeds (max for slowdowns):
loss-area reduction against fair (%), mean JCT against fair (ratio), worst and p95 slowdown
against fair. Usage: benches/completion_sweep.py [--seeds 1,2,3] [--workers 64] [--lambdas ...]
"""
import argparse
import json
import subprocess
import sys

BIN = "target/release/slaq"
WORKLOAD = ["--interarrival", "10", "--base-iter-seconds", "10", "--epoch", "5", "--jobs", "160"]
SPEEDUPS = {
    "near-linear": ["--serial-fraction", "0.02", "--comm-fraction", "0.005"],
    "pollux": ["--speedup", "pollux"],
}


def run(workers, seed, speedup, extra):
    cmd = [BIN, "simulate", "--policy", "slaq,fair,srpt-oracle", "--workers", str(workers), "--seed", str(seed),
           *WORKLOAD, *SPEEDUPS[speedup], "--json", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["policies"]


def figures(p, fair):
    return {
        "area": 100.0 * (fair["mean_loss_area"] - p["mean_loss_area"]) / fair["mean_loss_area"],
        "jct": p["mean_jct_s"] / fair["mean_jct_s"],
        "worst": p.get("worst_slowdown_vs_fair") or float("nan"),
        "p95": p.get("p95_slowdown_vs_fair") or float("nan"),
        "t95": p["mean_time_to_95_s"] / fair["mean_time_to_95_s"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--workers", default="32,64,128,256")
    ap.add_argument("--speedups", default="near-linear,pollux")
    ap.add_argument("--lambdas", default="0,0.25,0.5,1,2,4,8,16")
    ap.add_argument("--extra", default="", help="more simulate flags, space-separated")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    lambdas = [float(x) for x in a.lambdas.split(",")]
    extra = a.extra.split()
    print("speedup      W  policy            area%   JCT/fair  worst(max)  p95(max)  t95/fair")
    for speedup in a.speedups.split(","):
        for workers in [int(w) for w in a.workers.split(",")]:
            rows = {}
            for lam in lambdas:
                for seed in seeds:
                    pol = run(workers, seed, speedup, extra + ["--completion-weight", str(lam)])
                    rows.setdefault(f"slaq l={lam:g}", []).append(figures(pol["slaq"], pol["fair"]))
                    if lam == lambdas[0]:
                        rows.setdefault("srpt-oracle", []).append(figures(pol["srpt-oracle"], pol["fair"]))
            for name, fs in rows.items():
                mean = {k: sum(f[k] for f in fs) / len(fs) for k in fs[0]}
                worst = max(f["worst"] for f in fs)
                p95 = max(f["p95"] for f in fs)
                print(f"{speedup:11s} {workers:3d}  {name:15s} {mean['area']:+7.1f}  {mean['jct']:8.3f}  "
                      f"{mean['worst']:5.2f}({worst:5.2f})  {mean['p95']:4.2f}({p95:4.2f})  {mean['t95']:7.3f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
