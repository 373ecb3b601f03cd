//! `slaq simulate --tenants`.

use anyhow::Context;

use super::args::SimulateArgs;
use crate::common::load_all;

/// `slaq simulate --tenants FILE`: every seed (in parallel), shared and alone, per tenant.
pub(super) fn run(args: &SimulateArgs, path: &std::path::Path) -> anyhow::Result<()> {
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
    print_table(&summary);
    Ok(())
}

/// The summary as a table, one line per tenant, then the figures some scenarios add.
fn print_table(summary: &slaq::sim::teams::Summary) {
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
    if let Some(idle) = summary.mean_idle_while_saving_pct {
        println!("idle while jobs wait for saves: {idle:.2}% of the cluster's worker-seconds (mean over seeds)");
    }
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
    for t in summary.tenants.iter().filter(|t| t.class_reclaims > 0 || !t.class_mean_jct_s.is_empty()) {
        let jcts: Vec<String> = t.class_mean_jct_s.iter().map(|(c, s)| format!("class {c} {s:.0} s")).collect();
        println!(
            "{}: {} class reclaims (a higher class waiting for a lower one's workers), the longest {} s (R {:.0} s); mean JCT by class: {}",
            t.name,
            t.class_reclaims,
            opt(t.max_class_reclaim_s, 1),
            t.reclaim_bound_s,
            jcts.join(", ")
        );
    }
}
