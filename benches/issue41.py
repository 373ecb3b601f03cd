#!/usr/bin/env python3
"""Issue #41's protocol on issue #6's curve workloads: every policy and peer under the shipped
defaults (no flags), per cell (32/64/128/256 workers x near-linear/pollux speed-ups), and slaq's
frontier over the completion weight lambda at 64 workers beside every peer's point.

Runs `target/release/slaq simulate --json` and prints, per cell and policy, the means over the
seeds of: loss-area reduction against fair (%), mean JCT / fair's, worst slowdown against fair
(mean over seeds, max in brackets), p95 slowdown (mean, max), mean time to 90% and to 95% /
fair's, restarts per job, the fair clock's p90 error (its fair finish / the job's JCT under fair,
over the jobs whose clock finished; slaq only, with the bound). Metrics are defined once in src/sim/curves/metrics.rs.

  benches/issue41.py table --seeds 4,5,6            # the held-out table
  benches/issue41.py frontier --seeds 4,5,6 --svg docs/img   # lambda sweep + peers, SVG per cell
"""
import argparse
import json
import os
import statistics as st
import subprocess
from concurrent.futures import ThreadPoolExecutor

BIN = os.environ.get("SLAQ_BIN", "target/release/slaq")
WORKLOAD = ["--interarrival", "10", "--base-iter-seconds", "10", "--epoch", "5", "--jobs", "160"]
SPEEDUPS = {
    "near-linear": ["--serial-fraction", "0.02", "--comm-fraction", "0.005"],
    "pollux": ["--speedup", "pollux"],
}
POLICIES = ["slaq", "slaq-paper", "fair", "srpt-oracle", "optimus", "pollux", "tiresias", "themis", "themis-d1"]
PEERS = ["slaq-paper", "srpt-oracle", "optimus", "pollux", "tiresias", "themis", "themis-d1"]


def run(workers, seed, speedup, policies, extra=()):
    cmd = [BIN, "simulate", "--policy", ",".join(policies), "--workers", str(workers), "--seed", str(seed),
           *WORKLOAD, *SPEEDUPS[speedup], "--json", *extra]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["policies"]


def figures(p, fair):
    return {
        "area": 100.0 * (fair["mean_loss_area"] - p["mean_loss_area"]) / fair["mean_loss_area"],
        "area_abs": p["mean_loss_area"],
        "jct": p["mean_jct_s"] / fair["mean_jct_s"],
        "worst": p["worst_slowdown_vs_fair"],
        "p95": p["p95_slowdown_vs_fair"],
        "t90": p["mean_time_to_90_s"] / fair["mean_time_to_90_s"],
        "t95": p["time_to_95_s"] / fair["time_to_95_s"],
        "restarts": p["restarts_per_job"],
        # The fair clock's error (the bound's view of fair sharing), p90 of clock / fair JCT.
        "clock_p90": (p.get("fair_clock_vs_fair") or [float("nan")] * 3)[1],
    }


def cell(workers, speedup, seeds, policies, extra=()):
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda s: run(workers, s, speedup, policies, extra), seeds))
    out = {}
    for name in policies:
        fs = [figures(r[name], r["fair"]) for r in runs]
        out[name] = {k: st.mean(f[k] for f in fs) for k in fs[0]}
        out[name]["worst_max"] = max(f["worst"] for f in fs)
        out[name]["p95_max"] = max(f["p95"] for f in fs)
    return out


def table(a):
    print("speedup      W  policy        area%  JCT/fair  worst(max)    p95(max)    t90/f  t95/f  restarts  clock p90")
    for speedup in SPEEDUPS:
        for workers in (32, 64, 128, 256):
            res = cell(workers, speedup, a.seeds, POLICIES)
            for name in POLICIES:
                r = res[name]
                print(f"{speedup:11} {workers:3}  {name:12} {r['area']:+7.1f}  {r['jct']:7.3f}  "
                      f"{r['worst']:5.2f}({r['worst_max']:5.2f})  {r['p95']:5.2f}({r['p95_max']:5.2f})  "
                      f"{r['t90']:5.2f}  {r['t95']:5.2f}  {r['restarts']:6.1f}  {r['clock_p90']:9.2f}", flush=True)


def svg(path, title, frontier, peers):
    """The (mean loss area, mean JCT) plane: slaq's frontier over lambda as a line, peers as dots."""
    pts = [(f["area_abs"], f["jct"]) for _, f in frontier] + [(p["area_abs"], p["jct"]) for p in peers.values()]
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    w, h, m = 640, 440, 60
    sx = lambda x: m + (x - x0) / max(x1 - x0, 1e-9) * (w - 2 * m)
    sy = lambda y: h - m - (y - y0) / max(y1 - y0, 1e-9) * (h - 2 * m)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="black"/>',
           f'<text x="{w/2}" y="{h-20}" text-anchor="middle">mean loss area (normalised loss x s; lower is better)</text>',
           f'<text x="15" y="{h/2}" transform="rotate(-90 15 {h/2})" text-anchor="middle">mean JCT / fair (lower is better)</text>']
    for i in range(5):
        x, y = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{sx(x)}" y="{h-m+15}" text-anchor="middle">{x:.1f}</text>')
        out.append(f'<text x="{m-5}" y="{sy(y)+4}" text-anchor="end">{y:.2f}</text>')
    line = " ".join(f"{sx(f['area_abs']):.1f},{sy(f['jct']):.1f}" for _, f in frontier)
    out.append(f'<polyline points="{line}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for lam, f in frontier:
        out.append(f'<circle cx="{sx(f["area_abs"]):.1f}" cy="{sy(f["jct"]):.1f}" r="3" fill="#1f77b4"/>')
        out.append(f'<text x="{sx(f["area_abs"])+5:.1f}" y="{sy(f["jct"])-5:.1f}" fill="#1f77b4">slaq l={lam:g}</text>')
    for name, p in peers.items():
        out.append(f'<circle cx="{sx(p["area_abs"]):.1f}" cy="{sy(p["jct"]):.1f}" r="4" fill="#d62728"/>')
        out.append(f'<text x="{sx(p["area_abs"])+6:.1f}" y="{sy(p["jct"])+12:.1f}" fill="#d62728">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def frontier(a):
    lambdas = [float(x) for x in a.lambdas.split(",")]
    for speedup in SPEEDUPS:
        for workers in [int(w) for w in a.workers.split(",")]:
            peers = cell(workers, speedup, a.seeds, ["fair"] + PEERS)
            peers.pop("fair")
            line = []
            for lam in lambdas:
                r = cell(workers, speedup, a.seeds, ["slaq", "fair"], ["--completion-weight", str(lam)])["slaq"]
                line.append((lam, r))
                print(f"{speedup:11} {workers:3}  slaq l={lam:<6g} area {r['area_abs']:6.2f} ({r['area']:+6.1f}%) "
                      f"JCT/fair {r['jct']:.3f} worst {r['worst']:.2f}({r['worst_max']:.2f}) p95 {r['p95']:.2f}", flush=True)
            for name, r in peers.items():
                dominated = [lam for lam, f in line if f["area_abs"] <= r["area_abs"] and f["jct"] <= r["jct"]
                             and f["worst"] <= 3.0]
                print(f"{speedup:11} {workers:3}  {name:12} area {r['area_abs']:6.2f} ({r['area']:+6.1f}%) "
                      f"JCT/fair {r['jct']:.3f} worst {r['worst']:.2f}  slaq no worse on both at l in {dominated}",
                      flush=True)
            if a.svg:
                svg(os.path.join(a.svg, f"frontier-{speedup}-{workers}.svg"),
                    f"{workers} workers, {speedup} (seeds {','.join(map(str, a.seeds))})", line, peers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["table", "frontier"])
    ap.add_argument("--seeds", default="4,5,6")
    ap.add_argument("--workers", default="64")
    ap.add_argument("--lambdas", default="0,0.01,0.02,0.05,0.1,0.25,1")
    ap.add_argument("--svg", default="")
    a = ap.parse_args()
    a.seeds = [int(s) for s in a.seeds.split(",")]
    table(a) if a.what == "table" else frontier(a)


if __name__ == "__main__":
    main()
