//! The metrics of a Gavel-setting run, defined once (docs/heterogeneous.md repeats them), over
//! the measured jobs (`--measure-jobs A..B`):
//!
//! - **`mean_jct_s`, `p95_jct_s`**: job completion time, arrival to last step, over the measured
//!   jobs that finished (p95 by nearest rank).
//! - **`unfinished`**: measured jobs not done when the run stopped (`cutoff_s` after the last
//!   measured arrival): a load the policy does not sustain. Their JCT is in no mean.
//! - **`makespan_s`**: from the first measured arrival to the last measured completion (to the
//!   end of the run if some are unfinished).
//! - **`mean_loss_area`**: ∫ normalised loss dt per measured job (best loss so far, normalised by
//!   its curve's first and last loss, as in `sim::curves::metrics`), in normalised-loss·hours;
//!   an unfinished job counts its area so far.
//! - **`worst_slowdown_vs_fair`, `p95_slowdown_vs_fair`**: a job's JCT over its JCT under `fair`
//!   on the same trace, over jobs finished in both.
//! - **`backlog_v100_h`**: the work left when the run stopped, over every job of the trace, in
//!   V100-GPU-hours (remaining fraction × duration on its V100s): whether a policy that leaves
//!   measured jobs unfinished did less work or other work first.
//! - **`max_jobs_per_hour`** (per trace, not per policy): the most jobs per hour the cluster
//!   could keep up with on the trace's work mix, every job at its best per-GPU throughput and
//!   nothing lost to restarts (`capacity`): at a rate above it no policy sustains the load, and
//!   unfinished jobs measure how a policy overloads, not whether.
//! - **`busy_fraction_by_type`**: worker-seconds held by jobs (restarts included) over the type's
//!   worker-seconds, over the whole run.

use std::collections::BTreeMap;
use std::path::Path;

use super::engine::{GavelPolicy, PolicyRun};
use super::table::Cluster;
use crate::sim::curves::metrics::percentile;

/// One policy's figures on one trace.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PolicySummary {
    pub mean_jct_s: Option<f64>,
    pub p95_jct_s: Option<f64>,
    pub makespan_s: f64,
    pub mean_loss_area: f64,
    pub worst_slowdown_vs_fair: Option<f64>,
    pub p95_slowdown_vs_fair: Option<f64>,
    pub busy_fraction_by_type: BTreeMap<String, f64>,
    pub unfinished: usize,
    /// Work left when the run stopped, all jobs of the trace, in V100-GPU-hours: a policy that
    /// leaves some measured jobs unfinished may still have done as much work (it chose other
    /// jobs first), or less (it wasted capacity).
    pub backlog_v100_h: f64,
    pub measured_jobs: usize,
    pub mean_restarts: f64,
}

/// One trace (rate and seed) under every policy.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Cell {
    pub jobs_per_hour: f64,
    pub seed: u64,
    /// The most jobs per hour the cluster can keep up with on this trace's work mix.
    pub max_jobs_per_hour: f64,
    pub policies: BTreeMap<String, PolicySummary>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The figures of every run of one trace; `window` is the measured jobs.
pub fn summarise(runs: &[PolicyRun], cluster: &Cluster, window: (usize, usize)) -> BTreeMap<String, PolicySummary> {
    let fair = runs.iter().find(|r| r.policy == GavelPolicy::Fair);
    runs.iter()
        .map(|run| {
            let (lo, hi) = (window.0.min(run.jobs.len()), window.1.min(run.jobs.len()));
            let measured = &run.jobs[lo..hi];
            let jcts: Vec<f64> = measured.iter().filter_map(|j| j.jct()).collect();
            let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
            let unfinished = measured.len() - jcts.len();
            let first = measured.iter().map(|j| j.arrival_s).fold(f64::INFINITY, f64::min);
            let last = if unfinished > 0 {
                run.end_s
            } else {
                measured.iter().filter_map(|j| j.finished_s).fold(first, f64::max)
            };
            let slowdowns: Vec<f64> = fair
                .map(|f| {
                    measured
                        .iter()
                        .zip(&f.jobs[lo..hi])
                        .filter_map(|(ours, theirs)| Some(ours.jct()? / theirs.jct()?.max(1e-9)))
                        .collect()
                })
                .unwrap_or_default();
            let busy = cluster
                .names
                .iter()
                .zip(&cluster.counts)
                .zip(&run.busy_s)
                .map(|((n, &c), &b)| (n.clone(), if run.end_s > 0.0 { b / (f64::from(c) * run.end_s) } else { 0.0 }))
                .collect();
            let summary = PolicySummary {
                mean_jct_s: finite(mean(&jcts)),
                p95_jct_s: finite(percentile(&jcts, 0.95)),
                makespan_s: if measured.is_empty() { 0.0 } else { last - first },
                mean_loss_area: mean(&measured.iter().map(|j| j.loss_area / 3600.0).collect::<Vec<_>>()),
                worst_slowdown_vs_fair: finite(slowdowns.iter().copied().fold(f64::NAN, f64::max)),
                p95_slowdown_vs_fair: finite(percentile(&slowdowns, 0.95)),
                busy_fraction_by_type: busy,
                unfinished,
                backlog_v100_h: run.backlog_s / 3600.0,
                measured_jobs: measured.len(),
                mean_restarts: mean(&measured.iter().map(|j| f64::from(j.restarts)).collect::<Vec<_>>()),
            };
            (run.policy.name().to_string(), summary)
        })
        .collect()
}

/// The means over seeds, per rate and policy: (rate, policy, summary fields averaged).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RateMeans {
    pub jobs_per_hour: f64,
    pub policy: String,
    pub seeds: usize,
    /// Mean over the seeds where every measured job finished (`None`: none such).
    pub mean_jct_s: Option<f64>,
    pub mean_loss_area: f64,
    pub worst_slowdown_vs_fair: Option<f64>,
    pub p95_slowdown_vs_fair: Option<f64>,
    pub unfinished: usize,
    /// Mean over the seeds.
    pub backlog_v100_h: f64,
    /// The traces' capacity bound, mean over the seeds.
    pub max_jobs_per_hour: f64,
}

/// Averages `cells` over seeds, per rate and policy.
pub fn means(cells: &[Cell]) -> Vec<RateMeans> {
    let mut keys: Vec<(f64, String)> =
        cells.iter().flat_map(|c| c.policies.keys().map(move |p| (c.jobs_per_hour, p.clone()))).collect();
    keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    keys.dedup();
    keys.into_iter()
        .map(|(rate, policy)| {
            let of: Vec<&PolicySummary> =
                cells.iter().filter(|c| c.jobs_per_hour == rate).filter_map(|c| c.policies.get(&policy)).collect();
            let bounds: Vec<f64> =
                cells.iter().filter(|c| c.jobs_per_hour == rate).map(|c| c.max_jobs_per_hour).collect();
            let n = of.len() as f64;
            let sustained: Vec<f64> = of.iter().filter(|s| s.unfinished == 0).filter_map(|s| s.mean_jct_s).collect();
            let avg = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            RateMeans {
                jobs_per_hour: rate,
                seeds: of.len(),
                mean_jct_s: if sustained.len() == of.len() { avg(sustained) } else { None },
                mean_loss_area: of.iter().map(|s| s.mean_loss_area).sum::<f64>() / n,
                worst_slowdown_vs_fair: of.iter().filter_map(|s| s.worst_slowdown_vs_fair).reduce(f64::max),
                p95_slowdown_vs_fair: avg(of.iter().filter_map(|s| s.p95_slowdown_vs_fair).collect()),
                unfinished: of.iter().map(|s| s.unfinished).sum(),
                backlog_v100_h: of.iter().map(|s| s.backlog_v100_h).sum::<f64>() / n,
                max_jobs_per_hour: bounds.iter().sum::<f64>() / bounds.len().max(1) as f64,
                policy,
            }
        })
        .collect()
}

fn hours(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{:.1}", s / 3600.0))
}

/// The means as a table: one row per rate and policy.
pub fn table(means: &[RateMeans]) -> String {
    let mut out = String::from(
        "jobs/h  (max)  policy       seeds  mean JCT (h)  loss area (h)  worst slowdown  p95 slowdown  unfinished  backlog (V100-h)\n",
    );
    for m in means {
        let x = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}x"));
        out.push_str(&format!(
            "{:<7} {:>5.2}  {:<12} {:>5}  {:>12}  {:>13.2}  {:>14}  {:>12}  {:>10}  {:>16.0}\n",
            m.jobs_per_hour,
            m.max_jobs_per_hour,
            m.policy,
            m.seeds,
            hours(m.mean_jct_s),
            m.mean_loss_area,
            x(m.worst_slowdown_vs_fair),
            x(m.p95_slowdown_vs_fair),
            m.unfinished,
            m.backlog_v100_h
        ));
    }
    out
}

/// `jct-vs-rate.svg` (mean JCT in hours against jobs per hour, a line per policy; a rate a
/// policy does not sustain on every seed is left out of its line, as in Gavel's Figure 8),
/// `means.json` and `means.txt` (the table) in `dir`.
pub fn write_files(dir: &Path, means: &[RateMeans]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    std::fs::create_dir_all(dir)?;
    let mut policies: Vec<&str> = means.iter().map(|m| m.policy.as_str()).collect();
    policies.sort_unstable();
    policies.dedup();
    let lines: Vec<(String, Vec<(f64, f64)>)> = policies
        .iter()
        .map(|p| {
            let points = means
                .iter()
                .filter(|m| m.policy == *p)
                .filter_map(|m| Some((m.jobs_per_hour, m.mean_jct_s? / 3600.0)))
                .collect();
            (p.to_string(), points)
        })
        .collect();
    crate::sim::curves::report::plot_lines(
        &dir.join("jct-vs-rate.svg"),
        "Mean JCT against input rate",
        "input job rate (jobs/hour)",
        "mean JCT (hours)",
        &lines,
    )?;
    std::fs::write(dir.join("means.json"), serde_json::to_string_pretty(means)?)?;
    std::fs::write(dir.join("means.txt"), table(means))?;
    Ok(())
}
