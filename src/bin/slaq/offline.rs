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
    if !args.pollux_workload.is_empty() {
        return pollux(&args);
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

/// The load a workload directory stands for: `workloads` is 1.0, `workloads-1.5` 1.5.
fn load_of(path: &std::path::Path) -> String {
    let dir = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
    dir.strip_prefix("workloads-").unwrap_or("1.0").to_string()
}

/// `slaq simulate --pollux-workload`: every workload under every policy (in parallel, one
/// thread per core), then the means next to the published figures.
fn pollux(args: &SimulateArgs) -> anyhow::Result<()> {
    use slaq::sim::pollux::{self, Config, Policy, Summary};
    use std::collections::BTreeMap;
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
        workloads.push((name, load_of(path), jobs));
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
    if let Some(h) = args.restart_horizon {
        anyhow::ensure!(h.is_finite() && h > 0.0, "--restart-horizon must be positive");
        config.restart_horizon_s = h;
    }
    if let Some(&floor) = args.floor.first() {
        config.plan.floor = floor;
        config.plan.validate().map_err(anyhow::Error::msg)?;
    }
    let tasks: Vec<(usize, Policy)> =
        (0..workloads.len()).flat_map(|w| policies.iter().map(move |&p| (w, p))).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(BTreeMap::new());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(tasks.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(w, policy)) = tasks.get(i) else { break };
                    let (summary, jobs) = pollux::run(&workloads[w].2, policy, &config);
                    if let Ok(mut r) = results.lock() {
                        r.insert((w, policy.name()), (summary, jobs));
                    }
                }
            });
        }
    });
    let results = results.into_inner().map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?;
    let mean = |f: &dyn Fn(&Summary) -> Option<f64>, policy: &str| -> Option<f64> {
        let v: Vec<f64> =
            (0..workloads.len()).filter_map(|w| results.get(&(w, policy)).and_then(|r| f(&r.0))).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mut per_policy = serde_json::Map::new();
    for p in &policies {
        let n = p.name();
        per_policy.insert(
            n.to_string(),
            serde_json::json!({
                "mean_jct_s": mean(&|s| Some(s.mean_jct_s), n),
                "p99_jct_s": mean(&|s| Some(s.p99_jct_s), n),
                "restarts_per_job": mean(&|s| Some(s.restarts_per_job), n),
                "slo_met_pct": mean(&|s| s.slo_met_pct, n),
                "slo_mean_miss_pct": mean(&|s| s.slo_mean_miss_pct, n),
                "busy_pct": mean(&|s| Some(s.busy_pct), n),
                "unfinished_jobs": (0..workloads.len()).filter_map(|w| results.get(&(w, n))).map(|r| r.0.jobs - r.0.finished).sum::<usize>(),
            }),
        );
    }
    // Published means over the same workloads (the files' per-workload averages).
    let mut published = serde_json::Map::new();
    for name in ["pollux", "tiresias", "optimus"] {
        let v: Vec<f64> = workloads
            .iter()
            .filter_map(|(w, load, _)| pollux::published(&args.published, name, load).and_then(|p| p.0.get(w).copied()))
            .collect();
        if v.len() == workloads.len() && !v.is_empty() {
            published.insert(name.to_string(), serde_json::json!(v.iter().sum::<f64>() / v.len() as f64));
        }
    }
    let per_workload: serde_json::Map<String, serde_json::Value> = workloads
        .iter()
        .enumerate()
        .map(|(w, (name, load, _))| {
            let pols: serde_json::Map<String, serde_json::Value> = policies
                .iter()
                .filter_map(|p| {
                    Some((p.name().to_string(), serde_json::to_value(&results.get(&(w, p.name()))?.0).ok()?))
                })
                .collect();
            let jct: serde_json::Map<String, serde_json::Value> = policies
                .iter()
                .filter_map(|p| {
                    let jobs = &results.get(&(w, p.name()))?.1;
                    let per: serde_json::Map<String, serde_json::Value> =
                        jobs.iter().map(|o| (o.name.clone(), serde_json::json!(o.jct_s))).collect();
                    Some((p.name().to_string(), serde_json::Value::Object(per)))
                })
                .collect();
            let publ: serde_json::Map<String, serde_json::Value> = ["pollux", "tiresias", "optimus"]
                .iter()
                .filter_map(|n| {
                    Some((n.to_string(), serde_json::json!(pollux::published(&args.published, n, load)?.0.get(name)?)))
                })
                .collect();
            (
                format!("{name}@{load}"),
                serde_json::json!({"policies": pols, "published_mean_jct_s": publ, "jct_s": jct}),
            )
        })
        .collect();
    let out = serde_json::json!({
        "policies": per_policy,
        "published_mean_jct_s": published,
        "workloads": per_workload,
        "cluster": {"machines": config.machines, "slots": config.slots, "epoch_s": config.epoch_s, "restart_s": config.restart_s},
        "job_length": args.job_length,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} workload(s) on {} machines x {} GPUs: mean over workloads",
        workloads.len(),
        config.machines,
        config.slots
    );
    println!(
        "{:<20} {:>12} {:>12} {:>10} {:>8} {:>10}",
        "policy", "mean JCT s", "p99 JCT s", "restarts", "busy %", "SLO met %"
    );
    for p in &policies {
        let n = p.name();
        let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
        println!(
            "{:<20} {:>12} {:>12} {:>10} {:>8} {:>10}",
            n,
            f(mean(&|s| Some(s.mean_jct_s), n)),
            f(mean(&|s| Some(s.p99_jct_s), n)),
            f(mean(&|s| Some(s.restarts_per_job), n)),
            f(mean(&|s| Some(s.busy_pct), n)),
            f(mean(&|s| s.slo_met_pct, n)),
        );
    }
    for (name, v) in &published {
        println!("{:<20} {:>12.1}   (published)", name, v.as_f64().unwrap_or(f64::NAN));
    }
    Ok(())
}
