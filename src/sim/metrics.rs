//! The metrics of a run, defined once here (the README repeats these definitions).
//!
//! - A job's **normalised loss** is `(L − L_last)/(L_first − L_last)` over its whole recorded
//!   curve, history included: 1 at the curve's first iteration, 0 at its last, so an almost
//!   converged job starts near 0. It is not clamped (a non-monotone curve can leave [0, 1]).
//! - **Average normalised loss** (`avg_norm_loss`): the time average, over the periods when at
//!   least one job is active, of the mean normalised loss of the active jobs.
//! - **Time to 90% (95%)**: from a job's arrival until its normalised loss first is at or below
//!   0.10 (0.05), i.e. it has made 90% (95%) of its whole-curve loss reduction; averaged over the
//!   jobs that had not made it on arrival.
//! - **Job completion time** (JCT): from arrival until the job stops (end of its curve, or its
//!   normalised loss at or below the workload's convergence threshold).
//! - **Worst slowdown vs fair**: the largest ratio, over jobs, of a job's JCT under a policy to
//!   its JCT under fair on the same workload (1 for fair itself).
//! - **Cluster share by group**: the fraction of all worker-seconds, while jobs were active,
//!   given to the jobs that arrived at high, medium and low loss (SLAQ's Fig. 16).
//! - **Contended fraction**: the fraction of active time in which the active jobs could use more
//!   workers than exist (their count times the most useful workers per job exceeds the cluster).

use std::collections::BTreeMap;

use super::workload::Group;

/// What happened to one job.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct JobOutcome {
    pub id: String,
    pub family: String,
    pub group: Group,
    pub arrival_s: f64,
    pub initial_norm_loss: f64,
    /// `None` if the run ended first.
    pub time_to_90_s: Option<f64>,
    pub time_to_95_s: Option<f64>,
    pub completion_s: Option<f64>,
}

/// The state of the cluster at one epoch.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Sample {
    pub time_s: f64,
    pub active_jobs: usize,
    pub mean_norm_loss: f64,
    pub share_high: f64,
    pub share_medium: f64,
    pub share_low: f64,
}

/// The summary figures of one run (JSON keys as in the `simulate --json` output).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub avg_norm_loss: f64,
    pub mean_time_to_90_s: f64,
    pub mean_time_to_95_s: f64,
    pub median_time_to_90_s: f64,
    pub mean_jct_s: f64,
    /// Filled in by a comparison against a fair run of the same workload.
    pub worst_slowdown_vs_fair: Option<f64>,
    pub makespan_s: f64,
    pub utilisation: f64,
    pub contended_fraction: f64,
    pub share_by_group: BTreeMap<&'static str, f64>,
    pub jobs_unfinished: usize,
}

/// Everything a run measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunMetrics {
    pub policy: String,
    pub num_workers: u32,
    pub summary: Summary,
    pub jobs: Vec<JobOutcome>,
    pub samples: Vec<Sample>,
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { f64::NAN } else { values.iter().sum::<f64>() / values.len() as f64 }
}

fn median(values: &[f64]) -> f64 {
    use statrs::statistics::{Data, Median};
    if values.is_empty() { f64::NAN } else { Data::new(values.to_vec()).median() }
}

impl RunMetrics {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        policy: &str,
        num_workers: u32,
        avg_norm_loss: f64,
        contended_fraction: f64,
        utilisation: f64,
        group_share: [f64; 3],
        end_s: f64,
        jobs: Vec<JobOutcome>,
        samples: Vec<Sample>,
    ) -> Self {
        let times = |threshold: f64, pick: fn(&JobOutcome) -> Option<f64>| -> Vec<f64> {
            jobs.iter().filter(|j| j.initial_norm_loss > threshold).filter_map(pick).collect()
        };
        let t90 = times(0.10, |j| j.time_to_90_s);
        let t95 = times(0.05, |j| j.time_to_95_s);
        let jct: Vec<f64> = jobs.iter().filter_map(|j| j.completion_s).collect();
        let summary = Summary {
            avg_norm_loss,
            mean_time_to_90_s: mean(&t90),
            mean_time_to_95_s: mean(&t95),
            median_time_to_90_s: median(&t90),
            mean_jct_s: mean(&jct),
            worst_slowdown_vs_fair: None,
            makespan_s: end_s,
            utilisation,
            contended_fraction,
            share_by_group: Group::ALL.iter().zip(group_share).map(|(g, s)| (g.name(), s)).collect(),
            jobs_unfinished: jobs.len() - jct.len(),
        };
        RunMetrics { policy: policy.to_string(), num_workers, summary, jobs, samples }
    }

    /// Sets the worst slowdown of this run's jobs against the same jobs under `fair`.
    pub fn compare_with_fair(&mut self, fair: &RunMetrics) {
        let worst = self
            .jobs
            .iter()
            .zip(&fair.jobs)
            .filter_map(|(mine, theirs)| {
                debug_assert_eq!(mine.id, theirs.id);
                Some(mine.completion_s? / theirs.completion_s?.max(1e-9))
            })
            .fold(f64::NAN, f64::max);
        self.summary.worst_slowdown_vs_fair = Some(worst);
    }
}

/// `100·(1 − ours/theirs)`: how much lower ours is, in percent.
pub fn reduction_pct(ours: f64, theirs: f64) -> f64 {
    100.0 * (1.0 - ours / theirs)
}
