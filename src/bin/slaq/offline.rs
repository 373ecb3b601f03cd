//! The offline commands: `predict` and `simulate`.

use std::path::PathBuf;

use anyhow::Context;
use slaq::quality::{PredictorConfig, eval};
use slaq::sim::curves::WorkloadConfig;

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
    use slaq::sim::curves::{self as sim, PolicySpec, SimConfig};
    if !args.pollux_workload.is_empty() {
        return pollux(&args);
    }
    if let Some(path) = &args.gavel_throughputs {
        return gavel(&args, path);
    }
    if let Some(path) = &args.tenants {
        return teams(&args, path);
    }
    let curves = load_all(&args.curves)?;
    let names = if args.policy.is_empty() { vec!["slaq".to_string(), "fair".to_string()] } else { args.policy.clone() };
    let policies = names
        .iter()
        .map(|name| {
            PolicySpec::named(name)
                .with_context(|| format!("unknown policy {name:?}; known: {}", PolicySpec::NAMES.join(", ")))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let file = match &args.config {
        Some(path) => slaq::sim::curves::SimulationFile::load(path)?,
        None => slaq::sim::curves::SimulationFile::default(),
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

/// The load a workload directory stands for: `workloads` is 1.0, `workloads-1.5` 1.5.
fn load_of(path: &std::path::Path) -> String {
    let dir = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
    dir.strip_prefix("workloads-").unwrap_or("1.0").to_string()
}

/// `slaq simulate --pollux-workload`: every workload under every policy (in parallel, one
/// thread per core), then the means next to the published figures.
fn pollux(args: &SimulateArgs) -> anyhow::Result<()> {
    use slaq::sim::pollux::report::{Results, Workload, report};
    use slaq::sim::pollux::{self, Config, Policy};
    let policies: Vec<Policy> = if args.policy.is_empty() {
        Policy::ALL.to_vec()
    } else {
        args.policy
            .iter()
            .map(|n| {
                Policy::ALL.into_iter().find(|p| p.name() == n).with_context(|| {
                    format!("unknown policy {n:?}; known: fair, slaq, slaq-no-placement, slaq-no-batch")
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let mut workloads = Vec::new();
    for path in &args.pollux_workload {
        let jobs = pollux::load_workload(path).map_err(anyhow::Error::msg)?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("workload").to_string();
        workloads.push(Workload { name, load: load_of(path), jobs });
    }
    if let Some(f) = args.slo_factor {
        anyhow::ensure!(f.is_finite() && f > 0.0, "--slo-factor must be positive");
    }
    let mut config =
        Config { slo_factor: args.slo_factor, seed: args.seed.first().copied().unwrap_or(1), ..Config::default() };
    if args.job_length == "unknown" {
        let factor = args.unknown_length_factor;
        anyhow::ensure!(factor.is_finite() && factor > 0.0, "--unknown-length-factor must be positive");
        config.job_length = pollux::JobLength::Unknown { factor };
    }
    if let Some(p) = args.restart_penalty {
        config.restart_penalty = p;
    }
    if let Some(h) = args.restart_horizon {
        anyhow::ensure!(h.is_finite() && h > 0.0, "--restart-horizon must be positive");
        config.restart_horizon_s = h;
    }
    if let Some(&floor) = args.floor.first() {
        config.plan.floor = floor;
    }
    config.plan.max_slowdown = args.max_slowdown.unwrap_or(config.plan.max_slowdown);
    config.plan.validate().map_err(anyhow::Error::msg)?;
    let tasks: Vec<(usize, Policy)> =
        (0..workloads.len()).flat_map(|w| policies.iter().map(move |&p| (w, p))).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs =
        slaq::sim::parallel::map(&tasks, threads, |&(w, policy)| pollux::run(&workloads[w].jobs, policy, &config));
    let results: Results = tasks.iter().zip(runs).map(|(&(w, policy), run)| ((w, policy.name()), run)).collect();
    let (json, table) = report(&workloads, &policies, &results, &args.published, &config, &args.job_length);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{table}");
    }
    Ok(())
}

/// `simulate --gavel-throughputs`: Gavel's setting (issue #31).
fn gavel(args: &SimulateArgs, path: &std::path::Path) -> anyhow::Result<()> {
    use slaq::sim::gavel::{self, Cluster, GavelConfig, GavelPolicy, Sweep, Throughputs};
    let table = Throughputs::load(path)?;
    let cluster = Cluster::parse(&args.cluster, &table, &path.display().to_string())?;
    let names: Vec<String> = if args.policy.is_empty() {
        GavelPolicy::NAMES.iter().map(|s| s.to_string()).collect()
    } else {
        args.policy.clone()
    };
    let policies = names
        .iter()
        .map(|n| {
            GavelPolicy::named(n)
                .with_context(|| format!("unknown policy {n:?}; known: {}", GavelPolicy::NAMES.join(", ")))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let curves = load_all(&args.curves)?;
    let num_jobs = args.jobs.unwrap_or(300);
    anyhow::ensure!(num_jobs > 0, "--jobs must be positive");
    let measure = args.measure_jobs.unwrap_or((0, num_jobs));
    anyhow::ensure!(
        measure.1 <= num_jobs,
        "--measure-jobs {}..{} is past the trace's {num_jobs} jobs",
        measure.0,
        measure.1
    );
    let rates = if args.jobs_per_hour.is_empty() { vec![2.0] } else { args.jobs_per_hour.clone() };
    anyhow::ensure!(rates.iter().all(|r| r.is_finite() && *r > 0.0), "--jobs-per-hour must be positive");
    let scale_up = if args.scale_up == "spare" { gavel::ScaleUp::Spare } else { gavel::ScaleUp::Always };
    let mut config = GavelConfig { measure, scale_up, ..GavelConfig::default() };
    if let Some(k) = args.max_slowdown {
        anyhow::ensure!(k == 0.0 || k >= 1.0, "--max-slowdown must be 0 (off) or at least 1");
        config.max_slowdown = k;
    }
    let seeds = if args.seed.is_empty() { vec![0] } else { args.seed.clone() };
    let sweep = Sweep { rates, seeds, policies, num_jobs, multi_gpu: args.multi_gpu, config };
    let total = (sweep.rates.len() * sweep.seeds.len() * sweep.policies.len()) as u64;
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cells = gavel::sweep(&table, &cluster, &curves, &sweep, threads, &|| bar.inc(1))?;
    bar.finish_and_clear();
    let means = gavel::means(&cells);
    if let Some(dir) = &args.out {
        gavel::report::write_files(dir, &means).map_err(|e| anyhow::anyhow!("writing to {}: {e}", dir.display()))?;
    }
    if args.json {
        let value = match cells.as_slice() {
            [one] => serde_json::json!({ "policies": one.policies, "max_jobs_per_hour": one.max_jobs_per_hour }),
            _ => serde_json::json!({ "runs": cells, "means": means }),
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!(
            "Gavel's setting: {} ({} GPUs), {num_jobs} jobs, measured {}..{}, seeds {:?}, {}, round {} s, restart {} s, K {}, scale-up {}",
            args.cluster,
            cluster.size(),
            measure.0,
            measure.1,
            sweep.seeds,
            if sweep.multi_gpu { "multi-GPU" } else { "single-GPU" },
            config.round_s,
            config.restart_s,
            config.max_slowdown,
            args.scale_up
        );
        print!("{}", gavel::report::table(&means));
    }
    Ok(())
}

/// `slaq simulate --tenants FILE`: every seed (in parallel), shared and alone, per tenant.
fn teams(args: &SimulateArgs, path: &std::path::Path) -> anyhow::Result<()> {
    use slaq::sim::teams::{self, Scenario};
    let mut scenario = Scenario::load(path).with_context(|| format!("reading {}", path.display()))?;
    if let Some(name) = args.policy.first() {
        anyhow::ensure!(args.policy.len() == 1, "--tenants runs one policy at a time");
        scenario = Scenario::new(teams::TeamsFile { policy: name.clone(), ..scenario.file })?;
    }
    for warning in &scenario.resolved.warnings {
        eprintln!("warning: {warning}");
    }
    let curves = load_all(&args.curves)?;
    let seeds = if args.seed.is_empty() { vec![1] } else { args.seed.clone() };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs = slaq::sim::parallel::map(&seeds, threads, |&seed| teams::run_seed(&scenario, &curves, seed))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let summary = teams::summarise(&scenario, runs);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    println!(
        "{} on {} workers, epoch {} s, restart {} s, hold {} s, seeds {:?}; cap violations {}, busy while waiting >= {}",
        summary.policy,
        summary.workers,
        summary.epoch_s,
        summary.restart_s,
        summary.hold_s,
        summary.seeds,
        summary.cap_violations,
        summary.min_busy_fraction_while_waiting.map_or("-".to_string(), |b| format!("{:.3}", b)),
    );
    println!(
        "{:<8} {:>5} {:>5} {:>7} {:>7} {:>9} {:>8} {:>7} {:>7} {:>6} {:>6} {:>6} {:>8} {:>11} {:>11}",
        "tenant",
        "guar",
        "max",
        "share%",
        "R s",
        "reclaim",
        "below s",
        "win",
        "dev pt",
        "restr%",
        "lost%",
        "unfin",
        "JCT s",
        "JCT xalone",
        "area xalone"
    );
    let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    let ratio = |mean: Option<f64>, max: Option<f64>| match (mean, max) {
        (Some(mean), Some(max)) => format!("{mean:.2}/{max:.2}"),
        _ => "-".to_string(),
    };
    for t in &summary.tenants {
        println!(
            "{:<8} {:>5} {:>5} {:>7.1} {:>7.0} {:>9.1} {:>8.1} {:>7} {:>7.1} {:>6.1} {:>6.2} {:>6} {:>8} {:>11} {:>11}",
            t.name,
            t.guaranteed,
            t.max_held,
            t.mean_share_pct,
            t.reclaim_bound_s,
            t.max_reclaim_s,
            t.mean_share_seconds_below_guarantee,
            opt(t.min_window_ratio, 3),
            t.max_share_deviation_pts,
            t.restart_pct,
            t.lost_pct,
            t.unfinished,
            opt(t.mean_jct_s, 0),
            ratio(t.jct_ratio_mean, t.jct_ratio_max),
            ratio(t.loss_area_ratio_mean, t.loss_area_ratio_max),
        );
    }
    Ok(())
}
