//! `slaq simulate --gavel-throughputs`.

use anyhow::Context;

use super::args::SimulateArgs;
use crate::common::load_all;

/// `simulate --gavel-throughputs`: Gavel's setting (issue #31).
pub(super) fn run(args: &SimulateArgs, path: &std::path::Path) -> anyhow::Result<()> {
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
    let mut config = GavelConfig { measure, ..GavelConfig::default() };
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
            "Gavel's setting: {} ({} GPUs), {num_jobs} jobs, measured {}..{}, seeds {:?}, {}, round {} s, restart {} s, K {}",
            args.cluster,
            cluster.size(),
            measure.0,
            measure.1,
            sweep.seeds,
            if sweep.multi_gpu { "multi-GPU" } else { "single-GPU" },
            config.round_s,
            config.restart_s,
            config.max_slowdown
        );
        print!("{}", gavel::report::table(&means));
    }
    Ok(())
}
