//! The `slaq` command line: thin wrappers over the library; errors are reported with their chain.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use slaq::quality::{PredictorConfig, eval};
use slaq::sim::{SimConfig, SpeedupModel, WorkloadConfig};
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
    Simulate(SimulateArgs),
    /// Measure the scheduler's own costs.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time one full allocation decision (gain curves included) for each policy.
    Alloc(BenchAllocArgs),
}

#[derive(clap::Args)]
struct BenchAllocArgs {
    #[arg(long, default_value_t = 4000)]
    jobs: usize,
    #[arg(long, default_value_t = 16000)]
    workers: u32,
    /// Curves the jobs' predictors are fitted on.
    #[arg(long, value_delimiter = ',', default_value = "../shared/data/curves-public.jsonl")]
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
    #[arg(long, required = true, value_delimiter = ',')]
    curves: Vec<PathBuf>,
    /// Policies to compare: slaq, slaq-paper, fair.
    #[arg(long, value_delimiter = ',', default_value = "slaq,fair")]
    policy: Vec<String>,
    /// Number of jobs.
    #[arg(long, default_value_t = 160)]
    jobs: usize,
    /// Cluster sizes (comma-separated for a sweep); the default is `sim::DEFAULT_WORKERS`.
    #[arg(long, value_delimiter = ',', default_value = "64")]
    workers: Vec<u32>,
    /// Workload seeds; with several, every seed is run and the improvements over fair are
    /// summarised (mean, min, max) per cluster size.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    seed: Vec<u64>,
    /// Seconds of simulated time per scheduling epoch.
    #[arg(long, default_value_t = SimConfig::default().epoch_s)]
    epoch: f64,
    /// Seconds ahead over which gains are predicted.
    #[arg(long, default_value_t = SimConfig::default().gain_horizon_s)]
    horizon: f64,
    /// Mean seconds between job arrivals.
    #[arg(long, default_value_t = WorkloadConfig::default().mean_interarrival_s)]
    interarrival: f64,
    /// Mean seconds per iteration of a job on one worker.
    #[arg(long, default_value_t = WorkloadConfig::default().base_iter_seconds)]
    base_iter_seconds: f64,
    /// Serial fraction of an iteration in the speed-up model `t(w) = t1·(σ + (1−σ)/w + c·log2 w)`.
    #[arg(long, default_value_t = SpeedupModel::default().serial_fraction)]
    serial_fraction: f64,
    /// Communication cost per doubling of workers, as a fraction of the one-worker time.
    #[arg(long, default_value_t = SpeedupModel::default().comm_fraction)]
    comm_fraction: f64,
    /// Workers every job keeps while the cluster has that many for each.
    #[arg(long, default_value_t = SimConfig::default().min_workers_per_job)]
    min_workers: u32,
    /// A job stops once its normalised loss is at or below this; 0 replays every curve to its end.
    #[arg(long, default_value_t = WorkloadConfig::default().converged_norm_loss)]
    converged: f64,
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

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Predict(args) => predict(args),
        Command::Simulate(args) => simulate(args),
        Command::Bench(BenchCommand::Alloc(args)) => bench_alloc(args),
    }
}

fn load_all(paths: &[PathBuf]) -> anyhow::Result<Vec<trace::TraceCurve>> {
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
    use slaq::sim::{self, PolicySpec};
    let curves = load_all(&args.curves)?;
    let policies = args
        .policy
        .iter()
        .map(|name| {
            PolicySpec::named(name)
                .with_context(|| format!("unknown policy {name:?}; known: {}", PolicySpec::NAMES.join(", ")))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(args.workers.iter().all(|&w| w > 0), "--workers must be positive");
    anyhow::ensure!(args.epoch > 0.0, "--epoch must be positive");
    anyhow::ensure!(!args.seed.is_empty(), "--seed needs at least one value");
    let speedup = SpeedupModel { serial_fraction: args.serial_fraction, comm_fraction: args.comm_fraction };
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.serial_fraction) && args.comm_fraction >= 0.0,
        "--serial-fraction must be in [0, 1] and --comm-fraction non-negative"
    );
    let config = SimConfig {
        epoch_s: args.epoch,
        gain_horizon_s: args.horizon,
        speedup,
        min_workers_per_job: args.min_workers,
        ..SimConfig::default()
    };
    let total = (args.jobs * policies.len() * args.workers.len() * args.seed.len()) as u64;
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} jobs finished")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut per_seed = Vec::new();
    for &seed in &args.seed {
        let workload = WorkloadConfig {
            num_jobs: args.jobs,
            seed,
            mean_interarrival_s: args.interarrival,
            base_iter_seconds: args.base_iter_seconds,
            converged_norm_loss: args.converged,
            ..WorkloadConfig::default()
        };
        let jobs = sim::workload::generate(&curves, &workload)?;
        let results = sim::compare(&jobs, &config, &policies, &args.workers, parallelism, &|| bar.inc(1));
        if let Some(dir) = &args.out {
            let dir = if args.seed.len() > 1 { dir.join(format!("seed-{seed}")) } else { dir.clone() };
            sim::report::write_files(&dir, &results)
                .with_context(|| format!("writing results to {}", dir.display()))?;
        }
        per_seed.push((seed, results));
    }
    bar.finish_and_clear();
    if let [(seed, results)] = per_seed.as_slice() {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&sim::report::json(results))?);
        } else {
            println!("{} jobs, seed {seed}, epoch {} s, gain horizon {} s", args.jobs, args.epoch, args.horizon);
            print!("{}", sim::report::table(results));
        }
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&sim::report::seeds_json(&per_seed))?);
    } else {
        println!("{} jobs, seeds {:?}, epoch {} s, gain horizon {} s", args.jobs, args.seed, args.epoch, args.horizon);
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
        assert_eq!(args.workers, vec![slaq::sim::DEFAULT_WORKERS]);
    }
}
