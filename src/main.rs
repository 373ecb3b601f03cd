//! The `slaq` command line: thin wrappers over the library; errors are reported with their chain.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use slaq::quality::{PredictorConfig, eval};
use slaq::sim::WorkloadConfig;
use slaq::trace;

#[derive(Parser)]
#[command(name = "slaq", version, about = "Quality-driven scheduling of iterative ML training jobs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay loss curves and report how well the loss `horizon` iterations ahead is predicted.
    Predict(PredictArgs),
    /// Simulate a workload of jobs replaying real loss curves under several policies.
    Simulate(Box<SimulateArgs>),
    /// Run the scheduler: per-job actors and the allocator over NATS.
    Serve(ServeArgs),
    /// Run a reference worker agent: hello, heartbeats, and following its assignments.
    Worker(WorkerArgs),
    /// Print what the scheduler believes: jobs, workers and message counters.
    Status(StatusArgs),
    /// Play a simulator workload over NATS against `slaq serve` and compare with `simulate`.
    Emulate(Box<EmulateArgs>),
    /// Measure the scheduler's own costs.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML settings (see config/slaq.toml); environment and flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// NATS server URL(s), comma-separated.
    #[arg(long, value_delimiter = ',')]
    nats: Vec<String>,
    /// Milliseconds between reallocations.
    #[arg(long)]
    epoch_ms: Option<u64>,
    /// Subject prefix.
    #[arg(long)]
    prefix: Option<String>,
    /// Allocation policy: slaq or fair.
    #[arg(long, value_parser = parse_policy_arg)]
    policy: Option<slaq::policy::PolicyKind>,
    /// Fairness floor f in [0, 1]: every job gets at least f times its fair share of
    /// worker-seconds over a sliding window of epochs (0: pure quality, 1: fair).
    #[arg(long)]
    floor: Option<f64>,
    /// Milliseconds between refits of a job's curves (scale it with --epoch-ms when time is
    /// accelerated, as for `slaq emulate`).
    #[arg(long)]
    refit_ms: Option<u64>,
}

fn parse_speedup(s: &str) -> Result<slaq::sim::SpeedupKind, String> {
    match s {
        "parametric" => Ok(slaq::sim::SpeedupKind::Parametric),
        "pollux" => Ok(slaq::sim::SpeedupKind::Pollux),
        _ => Err(format!("unknown speed-up {s:?}; expected parametric or pollux")),
    }
}

/// The curves the simulator, the emulator and the benchmarks replay by default (vendored).
const DEFAULT_CURVES: &str = "data/curves/curves-public.jsonl";

fn parse_policy_arg(s: &str) -> Result<slaq::policy::PolicyKind, String> {
    slaq::service::config::parse_policy(s).ok_or_else(|| format!("unknown policy {s:?}; expected slaq or fair"))
}

/// Where the scheduler is.
#[derive(clap::Args)]
struct NatsArgs {
    /// NATS server URL(s), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    nats: Vec<String>,
    /// Subject prefix.
    #[arg(long, default_value = "slaq")]
    prefix: String,
}

#[derive(clap::Args)]
struct WorkerArgs {
    /// This worker's id (1-64 characters from [A-Za-z0-9_-]).
    #[arg(long)]
    id: String,
    #[command(flatten)]
    bus: NatsArgs,
    /// Milliseconds between heartbeats.
    #[arg(long, default_value_t = 2000)]
    beat_ms: u64,
    /// The machine this worker runs on.
    #[arg(long)]
    machine: Option<String>,
    /// A command to run whenever the worker is assigned a job, with SLAQ_JOB, SLAQ_WORKER and
    /// SLAQ_EPOCH in its environment (run through `sh -c`; the previous one is killed first).
    #[arg(long)]
    exec: Option<String>,
}

#[derive(clap::Args)]
struct EmulateArgs {
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    curves: Vec<PathBuf>,
    /// The policy `slaq serve` runs (slaq or fair): the simulated run beside the live one uses
    /// it too.
    #[arg(long, default_value = "slaq")]
    policy: String,
    #[arg(long, default_value_t = 160)]
    jobs: usize,
    #[arg(long, default_value_t = slaq::sim::DEFAULT_WORKERS)]
    workers: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Virtual seconds per real second.
    #[arg(long, default_value_t = 50.0)]
    speed: f64,
    /// The scheduler's epoch in milliseconds (`slaq serve --epoch-ms`): with `--speed` it gives
    /// the simulated run's epoch, so the two runs compare.
    #[arg(long, default_value_t = 100)]
    epoch_ms: u64,
    /// Give up after this many real seconds.
    #[arg(long, default_value_t = 600.0)]
    duration: f64,
    #[command(flatten)]
    bus: NatsArgs,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct StatusArgs {
    #[command(flatten)]
    bus: NatsArgs,
    /// Print the snapshot as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the scheduler's answer.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time one full allocation decision (gain curves included) for each policy.
    Alloc(BenchAllocArgs),
    /// Loss reports per second from NATS into the job actors, next to raw NATS pub/sub.
    Ingest(BenchIngestArgs),
    /// Epoch latency (bids, policy, publish) and memory with many jobs and workers.
    Epoch(BenchEpochArgs),
}

#[derive(clap::Args)]
struct BenchIngestArgs {
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    nats: Vec<String>,
    /// Loss reports to send (in each of the two runs).
    #[arg(long, default_value_t = 500_000)]
    reports: u64,
    /// Jobs the reports are spread over.
    #[arg(long, default_value_t = 1000)]
    jobs: u64,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct BenchEpochArgs {
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    nats: Vec<String>,
    #[arg(long, default_value_t = 4000)]
    jobs: usize,
    #[arg(long, default_value_t = 16000)]
    workers: usize,
    /// Epochs to measure (after a few warm-up epochs).
    #[arg(long, default_value_t = 40)]
    epochs: usize,
    #[arg(long, default_value_t = 250)]
    epoch_ms: u64,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct BenchAllocArgs {
    #[arg(long, default_value_t = 4000)]
    jobs: usize,
    #[arg(long, default_value_t = 16000)]
    workers: u32,
    /// Curves the jobs' predictors are fitted on.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    curves: Vec<PathBuf>,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 7)]
    runs: usize,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// JSON-lines curve files (repeatable or comma-separated).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    curves: Vec<PathBuf>,
    /// A TOML file with `[workload]` and `[sim]` tables (see config/simulate.toml); the flags
    /// below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Policies to compare: slaq, slaq-paper, fair, oracle.
    #[arg(long, value_delimiter = ',', default_value = "slaq,fair")]
    policy: Vec<String>,
    /// Number of jobs [default: 160].
    #[arg(long)]
    jobs: Option<usize>,
    /// Cluster sizes, comma-separated for a sweep [default: 64].
    #[arg(long, value_delimiter = ',')]
    workers: Vec<u32>,
    /// Workload seeds; with several, every seed is run and the improvements over fair are
    /// summarised (mean, min, max) per cluster size [default: 1].
    #[arg(long, value_delimiter = ',')]
    seed: Vec<u64>,
    /// Seconds of simulated time per scheduling epoch [default: 5].
    #[arg(long)]
    epoch: Option<f64>,
    /// Seconds ahead over which gains are predicted [default: 60].
    #[arg(long)]
    horizon: Option<f64>,
    /// Mean seconds between job arrivals [default: 10].
    #[arg(long)]
    interarrival: Option<f64>,
    /// Mean seconds per iteration of a job on one worker [default: 10].
    #[arg(long)]
    base_iter_seconds: Option<f64>,
    /// Speed-up curves: parametric (the model below) or pollux (measured deep-learning step
    /// times, one application per job family) [default: parametric].
    #[arg(long, value_parser = parse_speedup)]
    speedup: Option<slaq::sim::SpeedupKind>,
    /// Fairness floor f in [0, 1]: every job gets at least f times its fair share of
    /// worker-seconds over a sliding window (0: pure quality, 1: fair) [default: 0.5]. Several,
    /// comma-separated, print the frontier (loss-area reduction and worst slowdown against fair
    /// per floor) and, with --out, plot it.
    #[arg(long, value_delimiter = ',')]
    floor: Vec<f64>,
    /// Serial fraction σ in the speed-up model `t(w) = t1·(σ + (1−σ)/w + c·log2 w)` [default: 0.05].
    #[arg(long)]
    serial_fraction: Option<f64>,
    /// Communication cost c per doubling of workers, as a fraction of t1 [default: 0.02].
    #[arg(long)]
    comm_fraction: Option<f64>,
    /// Workers every job keeps while the cluster has that many for each [default: 0].
    #[arg(long)]
    min_workers: Option<u32>,
    /// A job stops once its normalised loss is at or below this; 0 replays every curve to its end [default: 0].
    #[arg(long)]
    converged: Option<f64>,
    /// Write CSV time series and SVG plots here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct PredictArgs {
    /// JSON-lines curve files (repeatable or comma-separated).
    #[arg(long, required = true, value_delimiter = ',')]
    curves: Vec<PathBuf>,
    /// Iterations ahead to predict.
    #[arg(long, default_value_t = 10)]
    horizon: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> std::process::ExitCode {
    // Like other command-line tools: a closed pipe (`slaq status | head`) ends the process
    // quietly instead of panicking in `println!`.
    #[cfg(unix)]
    // SAFETY: setting a signal disposition to its default at start-up, before any threads.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The whole chain on one line, without a backtrace: this is for people.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Cli::parse().command {
        Command::Predict(args) => predict(args),
        Command::Simulate(args) => simulate(*args),
        Command::Bench(BenchCommand::Alloc(args)) => bench_alloc(args),
        Command::Bench(BenchCommand::Ingest(args)) => live::bench_ingest(args),
        Command::Bench(BenchCommand::Epoch(args)) => live::bench_epoch(args),
        Command::Serve(args) => live::serve(args),
        Command::Worker(args) => live::worker(args),
        Command::Status(args) => live::status(args),
        Command::Emulate(args) => live::emulate(*args),
    }
}

mod live;

pub(crate) fn load_all(paths: &[PathBuf]) -> anyhow::Result<Vec<trace::TraceCurve>> {
    let mut curves = Vec::new();
    for path in paths {
        curves.extend(trace::load_curves(path).with_context(|| format!("loading curves from {}", path.display()))?);
    }
    Ok(curves)
}

fn predict(args: PredictArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let curves = load_all(&args.curves)?;
    let report = eval::evaluate(
        curves.iter().map(|c| (c.family.as_str(), c.loss.as_slice())),
        args.horizon,
        PredictorConfig::default(),
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{} iterations ahead: median absolute percentage error", report.horizon);
    println!("{:<10} {:>6} {:>7} {:>12} {:>10}", "family", "curves", "points", "strawman %", "slaq %");
    let rows = report.families.iter().map(|(k, v)| (k.as_str(), v)).chain([("overall", &report.overall)]);
    for (family, s) in rows {
        println!(
            "{:<10} {:>6} {:>7} {:>12.3} {:>10.3}",
            family, s.curves, s.points, s.strawman_mape_pct, s.slaq_mape_pct
        );
    }
    Ok(())
}

fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    use slaq::sim::{self, PolicySpec, SimConfig};
    let curves = load_all(&args.curves)?;
    let policies = args
        .policy
        .iter()
        .map(|name| {
            PolicySpec::named(name)
                .with_context(|| format!("unknown policy {name:?}; known: {}", PolicySpec::NAMES.join(", ")))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let file = match &args.config {
        Some(path) => slaq::sim::SimulationFile::load(path)?,
        None => slaq::sim::SimulationFile::default(),
    };
    let (mut workload, mut config) = (file.workload, file.sim);
    let set = |target: &mut f64, value: Option<f64>| {
        if let Some(v) = value {
            *target = v;
        }
    };
    workload.num_jobs = args.jobs.unwrap_or(workload.num_jobs);
    set(&mut workload.mean_interarrival_s, args.interarrival);
    set(&mut workload.base_iter_seconds, args.base_iter_seconds);
    set(&mut workload.converged_norm_loss, args.converged);
    set(&mut config.epoch_s, args.epoch);
    set(&mut config.gain_horizon_s, args.horizon);
    set(&mut config.speedup.serial_fraction, args.serial_fraction);
    set(&mut config.speedup.comm_fraction, args.comm_fraction);
    config.min_workers_per_job = args.min_workers.unwrap_or(config.min_workers_per_job);
    config.speedup.kind = args.speedup.unwrap_or(config.speedup.kind);
    let floors = if args.floor.is_empty() { vec![config.plan.floor] } else { args.floor.clone() };
    config.plan.floor = floors[0];
    for &floor in &floors {
        SimConfig { plan: slaq::schedule::PlanSettings { floor, ..config.plan }, ..config }.validate()?;
    }
    let workers = if args.workers.is_empty() { vec![config.num_workers] } else { args.workers.clone() };
    anyhow::ensure!(workers.iter().all(|&w| w > 0), "--workers must be positive");
    let seeds = if args.seed.is_empty() { vec![workload.seed] } else { args.seed.clone() };
    let total = (workload.num_jobs * policies.len() * workers.len() * seeds.len() * floors.len()) as u64;
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} jobs finished")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run_seeds = |config: &SimConfig, out: Option<PathBuf>| -> anyhow::Result<Vec<_>> {
        let mut per_seed = Vec::new();
        for &seed in &seeds {
            let jobs = sim::workload::generate(&curves, &WorkloadConfig { seed, ..workload.clone() })?;
            let results = sim::compare(&jobs, config, &policies, &workers, parallelism, &|| bar.inc(1));
            if let Some(dir) = &out {
                let dir = if seeds.len() > 1 { dir.join(format!("seed-{seed}")) } else { dir.clone() };
                sim::report::write_files(&dir, &results)
                    .with_context(|| format!("writing results to {}", dir.display()))?;
            }
            per_seed.push((seed, results));
        }
        Ok(per_seed)
    };
    if floors.len() > 1 {
        let mut frontier = Vec::new();
        for &floor in &floors {
            let config = SimConfig { plan: slaq::schedule::PlanSettings { floor, ..config.plan }, ..config };
            let out = args.out.as_ref().map(|d| d.join(format!("floor-{floor}")));
            frontier.push((floor, sim::report::frontier_points(&run_seeds(&config, out)?)));
        }
        bar.finish_and_clear();
        if let Some(dir) = &args.out {
            sim::report::plot_frontier(dir, &frontier).with_context(|| format!("writing to {}", dir.display()))?;
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&sim::report::frontier_json(&frontier))?);
        } else {
            println!(
                "{} jobs, seeds {seeds:?}, epoch {} s, speed-up {:?}: the floor's frontier",
                workload.num_jobs, config.epoch_s, config.speedup.kind
            );
            print!("{}", sim::report::frontier_table(&frontier));
        }
        return Ok(());
    }
    let per_seed = run_seeds(&config, args.out.clone())?;
    bar.finish_and_clear();
    if let [(seed, results)] = per_seed.as_slice() {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&sim::report::json(results))?);
        } else {
            println!(
                "{} jobs, seed {seed}, epoch {} s, gain horizon {} s, floor {}, speed-up {:?}",
                workload.num_jobs, config.epoch_s, config.gain_horizon_s, config.plan.floor, config.speedup.kind
            );
            print!("{}", sim::report::table(results));
        }
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&sim::report::seeds_json(&per_seed))?);
    } else {
        println!(
            "{} jobs, seeds {seeds:?}, epoch {} s, gain horizon {} s, floor {}, speed-up {:?}",
            workload.num_jobs, config.epoch_s, config.gain_horizon_s, config.plan.floor, config.speedup.kind
        );
        print!("{}", sim::report::seeds_table(&per_seed));
    }
    Ok(())
}

fn bench_alloc(args: BenchAllocArgs) -> anyhow::Result<()> {
    use slaq::policy::{JobBid, PolicyKind, Problem, check_contract};
    use std::time::Instant;
    anyhow::ensure!(args.jobs > 0 && args.runs > 0, "--jobs and --runs must be positive");
    let curves = load_all(&args.curves)?;
    let templates = slaq::sim::fixtures::predictor_templates(&curves, PredictorConfig::default());
    let predictors = slaq::sim::fixtures::predictors(&templates, args.jobs);
    let bytes_per_job = predictors.iter().map(|p| p.state_bytes()).sum::<usize>() / predictors.len();
    let epoch_s = 60.0;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mut slaq_ms, mut gains_ms, mut fair_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut total_assigned = 0;
    for run in 0..args.runs {
        // Jobs keep their workers across decisions, as in the live allocator.
        let current = |j: usize| ((j + run) % 8) as u32;
        let start = Instant::now();
        let bids: Vec<_> = predictors
            .iter()
            .enumerate()
            .map(|(j, p)| JobBid { current_workers: current(j), ..JobBid::new(p.gain_curve(epoch_s, current(j))) })
            .collect();
        let gains_done = Instant::now();
        let problem = Problem { num_workers: args.workers, jobs: &bids };
        let allocation = PolicyKind::Slaq.allocate(&problem);
        let slaq_done = Instant::now();
        check_contract(&problem, &allocation)?;
        total_assigned = allocation.total();
        let fair_bids: Vec<JobBid<slaq::quality::GainCurve>> =
            (0..args.jobs).map(|j| JobBid { current_workers: current(j), ..JobBid::new(None) }).collect();
        let fair_start = Instant::now();
        let fair = PolicyKind::Fair.allocate(&Problem { num_workers: args.workers, jobs: &fair_bids });
        fair_ms.push(fair_start.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(fair);
        slaq_ms.push((slaq_done - start).as_secs_f64() * 1e3);
        gains_ms.push((gains_done - start).as_secs_f64() * 1e3);
    }
    let report = serde_json::json!({
        "jobs": args.jobs,
        "workers": args.workers,
        "slaq_ms": median(slaq_ms),
        "slaq_gain_curves_ms": median(gains_ms),
        "fair_ms": median(fair_ms),
        "slaq_workers_assigned": total_assigned,
        "predictor_bytes_per_job": bytes_per_job,
        "runs": args.runs,
    });
    if args.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulate_defaults_are_the_library_defaults() {
        let cli = Cli::parse_from(["slaq", "simulate", "--curves", "x.jsonl"]);
        let Command::Simulate(args) = cli.command else { panic!("simulate expected") };
        assert!(args.workers.is_empty() && args.jobs.is_none(), "unset flags must leave the config's values");
    }
}
