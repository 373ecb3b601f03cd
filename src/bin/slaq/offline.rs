//! The offline commands: `predict` and `simulate`.

use std::path::PathBuf;

use anyhow::Context;
use slaq::quality::{PredictorConfig, eval};
use slaq::sim::WorkloadConfig;

use crate::args::{PredictArgs, SimulateArgs};
use crate::load_all;

pub fn predict(args: PredictArgs) -> anyhow::Result<()> {
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

pub fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
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
