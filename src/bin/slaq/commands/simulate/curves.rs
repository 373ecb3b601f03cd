//! `slaq simulate` on recorded loss curves: every policy, cluster size and seed (and, with
//! several floors, the floor's frontier), run by `sim::curves::compare`.

use std::path::PathBuf;

use anyhow::Context;
use slaq::sim::curves::report::{self, FrontierPoint};
use slaq::sim::curves::{self as sim, ClusterRuns, PolicySpec, SimConfig, WorkloadConfig};

use super::args::SimulateArgs;
use crate::common::load_all;

/// A seed's results: every cluster size under every policy.
type SeedResults = (u64, Vec<ClusterRuns>);

/// The frontier: each floor's points.
type Frontier = [(f64, Vec<FrontierPoint>)];

pub(super) fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    let (workload, config, floors) = configure(args)?;
    let workers = if args.workers.is_empty() { vec![config.num_workers] } else { args.workers.clone() };
    anyhow::ensure!(workers.iter().all(|&w| w > 0), "--workers must be positive");
    let seeds = if args.seed.is_empty() { vec![workload.seed] } else { args.seed.clone() };
    let runs = Runs { curves: load_all(&args.curves)?, policies: policies(args)?, workers, seeds, workload };
    let total = runs.workload.num_jobs * runs.policies.len() * runs.workers.len() * runs.seeds.len() * floors.len();
    let bar = indicatif::ProgressBar::with_draw_target(Some(total as u64), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} jobs finished")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if floors.len() > 1 {
        let mut frontier = Vec::new();
        for &floor in &floors {
            let config = SimConfig { plan: slaq::schedule::PlanSettings { floor, ..config.plan }, ..config };
            let out = args.out.as_ref().map(|d| d.join(format!("floor-{floor}")));
            frontier.push((floor, report::frontier_points(&runs.each_seed(&config, out, &bar)?)));
        }
        bar.finish_and_clear();
        return print_frontier(args, &runs, &config, &frontier);
    }
    let per_seed = runs.each_seed(&config, args.out.clone(), &bar)?;
    bar.finish_and_clear();
    print_results(args, &runs, &config, &per_seed)
}

/// The workload and the simulator's settings: the `--config` file's, then the flags'; and the
/// floors asked for (the first is the settings').
fn configure(args: &SimulateArgs) -> anyhow::Result<(WorkloadConfig, SimConfig, Vec<f64>)> {
    let file = match &args.config {
        Some(path) => sim::SimulationFile::load(path)?,
        None => sim::SimulationFile::default(),
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
    config.plan.max_slowdown = args.max_slowdown.unwrap_or(config.plan.max_slowdown);
    config.predict_length = args.job_length == "unknown";
    config.completion_weight = args.completion_weight.unwrap_or(config.completion_weight);
    for &floor in &floors {
        SimConfig { plan: slaq::schedule::PlanSettings { floor, ..config.plan }, ..config }.validate()?;
    }
    Ok((workload, config, floors))
}

/// The policies asked for (slaq and fair by default).
fn policies(args: &SimulateArgs) -> anyhow::Result<Vec<PolicySpec>> {
    let names = if args.policy.is_empty() { vec!["slaq".to_string(), "fair".to_string()] } else { args.policy.clone() };
    names
        .iter()
        .map(|name| {
            PolicySpec::named(name)
                .with_context(|| format!("unknown policy {name:?}; known: {}", PolicySpec::NAMES.join(", ")))
        })
        .collect()
}

/// What every run shares: the curves, the policies, the cluster sizes, the seeds, the workload.
struct Runs {
    curves: Vec<slaq::trace::TraceCurve>,
    policies: Vec<PolicySpec>,
    workers: Vec<u32>,
    seeds: Vec<u64>,
    workload: WorkloadConfig,
}

impl Runs {
    /// Every seed's workload under every policy and cluster size; with `out`, the files of
    /// each seed written there.
    fn each_seed(
        &self,
        config: &SimConfig,
        out: Option<PathBuf>,
        bar: &indicatif::ProgressBar,
    ) -> anyhow::Result<Vec<SeedResults>> {
        let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut per_seed = Vec::new();
        for &seed in &self.seeds {
            let jobs = sim::workload::generate(&self.curves, &WorkloadConfig { seed, ..self.workload.clone() })?;
            let results = sim::compare(&jobs, config, &self.policies, &self.workers, parallelism, &|| bar.inc(1));
            if let Some(dir) = &out {
                let dir = if self.seeds.len() > 1 { dir.join(format!("seed-{seed}")) } else { dir.clone() };
                report::write_files(&dir, &results).with_context(|| format!("writing results to {}", dir.display()))?;
            }
            per_seed.push((seed, results));
        }
        Ok(per_seed)
    }
}

/// The floor's frontier: a table (or JSON), and with `--out` its plot.
fn print_frontier(args: &SimulateArgs, runs: &Runs, config: &SimConfig, frontier: &Frontier) -> anyhow::Result<()> {
    if let Some(dir) = &args.out {
        report::plot_frontier(dir, frontier).with_context(|| format!("writing to {}", dir.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report::frontier_json(frontier))?);
    } else {
        println!(
            "{} jobs, seeds {:?}, epoch {} s, speed-up {:?}: the floor's frontier",
            runs.workload.num_jobs, runs.seeds, config.epoch_s, config.speedup.kind
        );
        print!("{}", report::frontier_table(frontier));
    }
    Ok(())
}

/// One seed's table, or every seed's improvements summarised (or JSON).
fn print_results(args: &SimulateArgs, runs: &Runs, config: &SimConfig, per_seed: &[SeedResults]) -> anyhow::Result<()> {
    let (jobs, seeds) = (runs.workload.num_jobs, &runs.seeds);
    let settings = |seeds: String| {
        format!(
            "{jobs} jobs, {seeds}, epoch {} s, gain horizon {} s, floor {}, speed-up {:?}",
            config.epoch_s, config.gain_horizon_s, config.plan.floor, config.speedup.kind
        )
    };
    match per_seed {
        [(_, results)] if args.json => println!("{}", serde_json::to_string_pretty(&report::json(results))?),
        [(seed, results)] => {
            println!("{}", settings(format!("seed {seed}")));
            print!("{}", report::table(results));
        }
        _ if args.json => println!("{}", serde_json::to_string_pretty(&report::seeds_json(per_seed))?),
        _ => {
            println!("{}", settings(format!("seeds {seeds:?}")));
            print!("{}", report::seeds_table(per_seed));
        }
    }
    Ok(())
}
