//! `slaq simulate --pollux-workload`.

use anyhow::Context;

use super::args::SimulateArgs;

/// The load a workload directory stands for: `workloads` is 1.0, `workloads-1.5` 1.5.
fn load_of(path: &std::path::Path) -> String {
    let dir = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
    dir.strip_prefix("workloads-").unwrap_or("1.0").to_string()
}

/// `slaq simulate --pollux-workload`: every workload under every policy (in parallel, one
/// thread per core), then the means next to the published figures.
pub(super) fn run(args: &SimulateArgs) -> anyhow::Result<()> {
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
