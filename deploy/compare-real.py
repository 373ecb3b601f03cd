#!/usr/bin/env python3
"""Real PyTorch DDP jobs under slaq and under fair, live: the same submitted jobs, arriving at
the same times, on a private nats-server with two `slaq worker` agents of 2 slots each.

    cargo build --release && cargo test --test train   # the binary, and target/tmp/torch-env
    python3 deploy/compare-real.py [--out benches/runs/DATE-real-jobs.txt]

Each job is `examples/torch_ddp.py` (an MLP on scikit-learn's digits, real DDP over gloo) with
its own learning rate, width and length; `--work-s` stands in for the compute of a bigger model,
divided among the ranks as data-parallel compute is (this machine has 2 cores for 4 workers, so
the real compute of 4 ranks would not run faster than of 2). The workload below was fixed
before any run. The scheduler is not told the jobs' lengths.

Metrics (the simulator's, `src/sim/metrics.rs`, on the reported losses):
- normalised loss of a job at time t: (best loss so far - L_end) / (L_first - L_end), clamped to
  [0, 1], and 1 before its first report; L_first is its first reported loss, L_end the lowest
  final loss it reached in any of the runs (one scale for both policies);
- loss area: the integral of the normalised loss from submission to the end (normalised-loss x s);
- time to 90%: from submission until the normalised loss is at most 0.1; JCT: submission to end;
- restarts: generations after the first; restart cost: slaq's measure (new generation to the
  first new iteration it reports).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "torch_ddp.py")
# (iterations, learning rate, hidden width), one job each, submitted SPACING_S apart.
JOBS = [(400, 0.05, 256), (300, 0.2, 128), (500, 0.02, 256), (250, 0.1, 64), (400, 0.5, 128), (350, 0.05, 64)]
SPACING_S = 10.0
WORK_S = 0.3
CONFIG = """[scheduler]
policy = "{policy}"
epoch_ms = 2000
worker_timeout_ms = 6000
stall_timeout_ms = 120000
"""


def start_nats(tmp):
    proc = subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = os.path.join(tmp, f"nats-server_{proc.pid}.ports")
    for _ in range(100):
        if os.path.exists(path):
            with open(path) as f:
                return proc, json.load(f)["nats"][0]
        time.sleep(0.05)
    raise SystemExit("nats-server did not start")


def run(policy, slaq, python, out_dir):
    tmp = tempfile.mkdtemp(prefix=f"slaq-real-{policy}-", dir=out_dir)
    nats, url = start_nats(tmp)
    cfg = os.path.join(tmp, "slaq.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(policy=policy))
    log = lambda name: open(os.path.join(tmp, name), "w")
    env = dict(os.environ, RUST_LOG="slaq=info")
    serve = subprocess.Popen([slaq, "serve", "--config", cfg, "--nats", url], stderr=log("serve.log"), env=env)
    time.sleep(1.0)
    agents = [subprocess.Popen([slaq, "worker", "--id", n, "--machine", f"node-{n}", "--slots", "2",
                                "--advertise", "127.0.0.1", "--nats", url, "--stop-grace-s", "20"],
                               stderr=log(f"{n}.log"), env=env) for n in ("n1", "n2")]
    events = os.path.join(tmp, "events.jsonl")
    submits, arrivals = {}, {}
    begin = time.time()
    for i, (iters, lr, hidden) in enumerate(JOBS):
        time.sleep(max(0.0, begin + i * SPACING_S - time.time()))
        job = f"rj{i}"
        arrivals[job] = time.time()
        submits[job] = subprocess.Popen(
            [slaq, "submit", "--job", job, "--nats", url, "--max-workers", "4", "--max-restarts", "8", "--wait",
             "--checkpoint-dir", os.path.join(tmp, f"{job}.ckpt"), "--", python, EXAMPLE,
             "--iterations", str(iters), "--lr", str(lr), "--hidden", str(hidden), "--work-s", str(WORK_S),
             "--checkpoint-every-s", "15", "--log", events],
            stderr=subprocess.PIPE, text=True)
    said = {job: p.communicate()[1] for job, p in submits.items()}
    codes = {job: p.returncode for job, p in submits.items()}
    for a in agents:
        a.send_signal(signal.SIGTERM)
    for a in agents:
        a.wait(timeout=60)
    serve.send_signal(signal.SIGTERM)
    serve.wait(timeout=30)
    nats.terminate()
    nats.wait()
    with open(events) as f:
        evs = [json.loads(line) for line in f if line.strip()]
    return {"dir": tmp, "arrivals": arrivals, "said": said, "codes": codes, "events": evs}


def restart_cost(said):
    marker = "a restart cost it "
    if marker not in said:
        return None
    return float(said.split(marker, 1)[1].split(" ", 1)[0])


def metrics(runs):
    jobs = sorted(runs[next(iter(runs))]["arrivals"])
    # One scale per job for every policy: its first loss, and the lowest final loss of any run.
    first, end = {}, {}
    for job in jobs:
        firsts, finals = [], []
        for r in runs.values():
            losses = [e for e in r["events"] if e["event"] == "loss" and e["job"] == job]
            losses.sort(key=lambda e: e["t"])
            firsts.append(losses[0]["loss"])
            finals.append(losses[-1]["loss"])
        first[job], end[job] = statistics.mean(firsts), min(finals)
    out = {}
    for policy, r in runs.items():
        per_job = {}
        for job in jobs:
            arrive = r["arrivals"][job]
            losses = sorted((e for e in r["events"] if e["event"] == "loss" and e["job"] == job), key=lambda e: e["t"])
            done = max(e["t"] for e in r["events"] if e["job"] == job and e["event"] == "done")
            scale = max(first[job] - end[job], 1e-12)
            area, t_prev, norm, best, t90 = 0.0, arrive, 1.0, float("inf"), None
            for e in losses:
                area += norm * (e["t"] - t_prev)
                t_prev = e["t"]
                best = min(best, e["loss"])
                norm = min(1.0, max(0.0, (best - end[job]) / scale))
                if t90 is None and norm <= 0.1:
                    t90 = e["t"] - arrive
            area += norm * max(0.0, done - t_prev)
            starts = {e["generation"] for e in r["events"] if e["event"] == "start" and e["job"] == job}
            per_job[job] = {"loss_area": area, "time_to_90_s": t90, "jct_s": done - arrive,
                            "restarts": len(starts) - 1, "restart_cost_s": restart_cost(r["said"][job]),
                            "exit": r["codes"][job]}
        vals = lambda k: [v[k] for v in per_job.values() if v[k] is not None]
        out[policy] = {"jobs": per_job,
                       "mean_loss_area": statistics.mean(vals("loss_area")),
                       "mean_time_to_90_s": statistics.mean(vals("time_to_90_s")),
                       "mean_jct_s": statistics.mean(vals("jct_s")),
                       "mean_restarts": statistics.mean(vals("restarts")),
                       "mean_restart_cost_s": statistics.mean(vals("restart_cost_s")) if vals("restart_cost_s") else None,
                       "all_finished": all(v["exit"] == 0 for v in per_job.values())}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slaq", default=os.path.join(ROOT, "target", "release", "slaq"))
    parser.add_argument("--python", default=os.path.join(ROOT, "target", "tmp", "torch-env", "bin", "python"))
    parser.add_argument("--policies", default="slaq,fair")
    parser.add_argument("--out", default=None, help="also write the figures here")
    args = parser.parse_args()
    for path, how in ((args.slaq, "cargo build --release"), (args.python, "cargo test --test train")):
        if not os.path.exists(path):
            raise SystemExit(f"{path} is missing: run `{how}` first")
    out_dir = tempfile.mkdtemp(prefix="slaq-real-")
    runs = {p: run(p, args.slaq, args.python, out_dir) for p in args.policies.split(",")}
    m = metrics(runs)
    lines = [f"# Real DDP jobs, live: {len(JOBS)} jobs {SPACING_S:.0f} s apart, 2 agents x 2 slots, "
             f"work {WORK_S} s/iteration divided among ranks; {time.strftime('%Y-%m-%d', time.gmtime())}, "
             f"{os.cpu_count()} cores; logs in {out_dir}",
             f"{'policy':<8} {'loss area':>10} {'t90 s':>8} {'JCT s':>8} {'restarts':>9} {'restart s':>10} {'finished':>9}"]
    for policy, r in m.items():
        cost = "-" if r["mean_restart_cost_s"] is None else f"{r['mean_restart_cost_s']:.1f}"
        lines.append(f"{policy:<8} {r['mean_loss_area']:>10.1f} {r['mean_time_to_90_s']:>8.1f} {r['mean_jct_s']:>8.1f} "
                     f"{r['mean_restarts']:>9.1f} {cost:>10} {str(r['all_finished']):>9}")
    if "slaq" in m and "fair" in m:
        red = lambda k: 100.0 * (1 - m["slaq"][k] / m["fair"][k])
        lines.append(f"slaq vs fair: loss area {red('mean_loss_area'):+.1f}% lower, time to 90% "
                     f"{red('mean_time_to_90_s'):+.1f}% lower, JCT {red('mean_jct_s'):+.1f}% lower")
    text = "\n".join(lines) + "\n\n" + json.dumps(m, indent=1) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
