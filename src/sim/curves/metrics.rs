//! The metrics of a run, defined once here (docs/design.md repeats these definitions).
//!
//! - A job's **normalised loss** at a moment is `(B − L_last)/(L_first − L_last)`, clamped to
//!   [0, 1], where `B` is its best (lowest) loss so far, history included, and `L_first`, `L_last`
//!   the first and last losses of its whole recorded curve: 1 at the curve's start, 0 at its
//!   end, so an almost converged job starts near 0. The best loss so far is what a user keeps as
//!   the checkpoint; with the raw loss a non-monotone curve (SGD, MLP) dips below its final
//!   value, and a policy could bank negative area by parking a job in the dip.
//! - **Loss area** of a job (`loss_area`): the integral over time of its normalised loss, from
//!   its arrival to its completion, in normalised-loss·seconds. **`mean_loss_area`**, the mean
//!   over all jobs (a job unfinished at the end of a run counts its area so far), is the
//!   headline: a job costs for as long as it is not done, in proportion to how far from done it
//!   is, so nothing is gained by keeping a job alive or by starving one.
//! - **Average active normalised loss** (`avg_active_norm_loss`): the time average, over the
//!   periods when at least one job is active, of the mean normalised loss of the active jobs.
//!   This is what SLAQ's plots show, and it misleads: a policy that starves an almost converged
//!   job keeps a low loss in the mean and lowers it while helping nobody. Reported, not a target.
//! - **Time to 90% (95%)**: from a job's arrival until its normalised loss first is at or below
//!   0.10 (0.05), i.e. it has made 90% (95%) of its whole-curve loss reduction; averaged over the
//!   jobs that had not made it on arrival.
//! - **Job completion time** (JCT): from arrival until the job stops (end of its curve, or its
//!   normalised loss at or below the workload's convergence threshold).
//! - **p95 JCT** (`p95_jct_s`): the 95th percentile (nearest rank) of the finished jobs' JCTs.
//! - **Restarts per job** (`restarts_per_job`): how many times, on average, a job was relaunched
//!   at a new worker count after its first start (an elastic job restarts from its checkpoint on
//!   every change; a stop to zero counts when it resumes). The curve simulator charges no time
//!   for them (teams' runs do); the count says how often a policy moves jobs.
//! - **Worst slowdown vs fair**: the largest ratio, over jobs, of a job's JCT under a policy to
//!   its JCT under fair on the same workload (1 for fair itself). **p95 slowdown vs fair**: the
//!   95th percentile of the same ratios (nearest rank: the smallest ratio that at least 95% of the
//!   jobs are at or below). Jobs unfinished in either run are left out of both.
//! - **Fair clock vs fair** (`fair_clock_vs_fair`, with the finish-time bound on): per job whose
//!   clock finished while it ran, the clock's fair finish over its real JCT under fair on the
//!   same workload; median, 90th percentile and largest (1: the clock is exact).
//! - **Cluster share by group**: the fraction of all worker-seconds, while jobs were active,
//!   given to the jobs that arrived at high, medium and low loss (SLAQ's Fig. 16).
//! - **Contended fraction**: the fraction of active time in which the active jobs could use more
//!   workers than exist (the sum of their most useful worker counts exceeds the cluster).

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
    /// ∫ normalised loss dt from arrival to completion (or to the end of the run).
    pub loss_area: f64,
    /// `None` if the run ended first.
    pub time_to_90_s: Option<f64>,
    pub time_to_95_s: Option<f64>,
    pub completion_s: Option<f64>,
    /// Times it was relaunched at a new worker count after its first start.
    pub restarts: u32,
    /// The finish-time bound's fair clock at its end: when (seconds from arrival) the clock
    /// said fair sharing finished it, if the clock had by then (`None` without the bound).
    pub fair_clock_s: Option<f64>,
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
    /// The headline: mean over jobs of the loss area.
    pub mean_loss_area: f64,
    /// SLAQ's plot metric (misleading; see the module documentation).
    pub avg_active_norm_loss: f64,
    pub mean_time_to_90_s: f64,
    pub mean_time_to_95_s: f64,
    pub median_time_to_90_s: f64,
    pub mean_jct_s: f64,
    /// The 95th percentile of the finished jobs' completion times (nearest rank).
    pub p95_jct_s: f64,
    /// The mean time to 95% (`mean_time_to_95_s`), under the name issue #41 asks for.
    pub time_to_95_s: f64,
    /// Mean over jobs of their restarts ([`JobOutcome::restarts`]).
    pub restarts_per_job: f64,
    /// Filled in by a comparison against a fair run of the same workload.
    pub worst_slowdown_vs_fair: Option<f64>,
    pub p95_slowdown_vs_fair: Option<f64>,
    /// The fair clock's error against the fair run (with the bound on): the median, 90th
    /// percentile and largest ratio of a job's clock finish to its JCT under fair, over the
    /// jobs whose clock finished, and how many those were.
    pub fair_clock_vs_fair: Option<[f64; 3]>,
    pub fair_clock_jobs: usize,
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
    fn new(
        policy: &str,
        num_workers: u32,
        avg_active_norm_loss: f64,
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
        let mean_t95 = mean(&t95);
        let areas: Vec<f64> = jobs.iter().map(|j| j.loss_area).collect();
        let summary = Summary {
            mean_loss_area: mean(&areas),
            avg_active_norm_loss,
            mean_time_to_90_s: mean(&t90),
            mean_time_to_95_s: mean_t95,
            median_time_to_90_s: median(&t90),
            mean_jct_s: mean(&jct),
            p95_jct_s: percentile(&jct, 0.95),
            time_to_95_s: mean_t95,
            restarts_per_job: mean(&jobs.iter().map(|j| f64::from(j.restarts)).collect::<Vec<_>>()),
            worst_slowdown_vs_fair: None,
            p95_slowdown_vs_fair: None,
            fair_clock_vs_fair: None,
            fair_clock_jobs: 0,
            makespan_s: end_s,
            utilisation,
            contended_fraction,
            share_by_group: Group::ALL.iter().zip(group_share).map(|(g, s)| (g.name(), s)).collect(),
            jobs_unfinished: jobs.len() - jct.len(),
        };
        RunMetrics { policy: policy.to_string(), num_workers, summary, jobs, samples }
    }

    /// Sets the worst and 95th-percentile slowdowns of this run's jobs against the same jobs
    /// under `fair`.
    pub fn compare_with_fair(&mut self, fair: &RunMetrics) {
        let ratios: Vec<f64> = self
            .jobs
            .iter()
            .zip(&fair.jobs)
            .filter_map(|(mine, theirs)| {
                debug_assert_eq!(mine.id, theirs.id);
                Some(mine.completion_s? / theirs.completion_s?.max(1e-9))
            })
            .collect();
        self.summary.worst_slowdown_vs_fair = Some(ratios.iter().copied().fold(f64::NAN, f64::max));
        self.summary.p95_slowdown_vs_fair = Some(percentile(&ratios, 0.95));
        let clock: Vec<f64> = self
            .jobs
            .iter()
            .zip(&fair.jobs)
            .filter_map(|(mine, theirs)| Some(mine.fair_clock_s? / theirs.completion_s?.max(1e-9)))
            .collect();
        self.summary.fair_clock_jobs = clock.len();
        self.summary.fair_clock_vs_fair = (!clock.is_empty()).then(|| {
            [percentile(&clock, 0.5), percentile(&clock, 0.9), clock.iter().copied().fold(f64::NAN, f64::max)]
        });
    }
}

/// The nearest-rank percentile `q` in (0, 1] of `values` (NaN if empty).
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `100·(1 − ours/theirs)`: how much lower ours is, in percent.
pub fn reduction_pct(ours: f64, theirs: f64) -> f64 {
    100.0 * (1.0 - ours / theirs)
}

/// What the metrics need of an active job at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActiveJob {
    pub norm_loss: f64,
    pub workers: u32,
    pub group: Group,
    /// Workers beyond which this job gains nothing (for the contended fraction).
    pub most_useful: u32,
}

/// Running sums of a run's metrics: the simulator and `slaq emulate` both feed one, so both
/// measure the same way.
#[derive(Clone, Debug)]
pub struct Tracker {
    num_workers: u32,
    loss_area: f64,
    active_time: f64,
    contended_time: f64,
    busy_worker_time: f64,
    group_worker_time: [f64; 3],
    samples: Vec<Sample>,
}

fn group_index(group: Group) -> usize {
    match group {
        Group::High => 0,
        Group::Medium => 1,
        Group::Low => 2,
    }
}

impl Tracker {
    pub fn new(num_workers: u32) -> Self {
        Tracker {
            num_workers,
            loss_area: 0.0,
            active_time: 0.0,
            contended_time: 0.0,
            busy_worker_time: 0.0,
            group_worker_time: [0.0; 3],
            samples: Vec::new(),
        }
    }

    /// The active jobs held this state for `dt` seconds.
    pub fn integrate(&mut self, active: impl Iterator<Item = ActiveJob> + Clone, dt: f64) {
        let count = active.clone().count();
        if count == 0 || dt <= 0.0 {
            return;
        }
        let mean = active.clone().map(|j| j.norm_loss).sum::<f64>() / count as f64;
        self.loss_area += mean * dt;
        self.active_time += dt;
        if active.clone().map(|j| u64::from(j.most_useful)).sum::<u64>() > u64::from(self.num_workers) {
            self.contended_time += dt;
        }
        for j in active {
            let w = f64::from(j.workers) * dt;
            self.busy_worker_time += w;
            self.group_worker_time[group_index(j.group)] += w;
        }
    }

    /// Records the cluster's state at an epoch (for the time series).
    pub fn sample(&mut self, now: f64, active: impl Iterator<Item = ActiveJob>) {
        let (mut share, mut loss_sum, mut count) = ([0.0; 3], 0.0, 0usize);
        for j in active {
            share[group_index(j.group)] += f64::from(j.workers) / f64::from(self.num_workers.max(1));
            loss_sum += j.norm_loss;
            count += 1;
        }
        self.samples.push(Sample {
            time_s: now,
            active_jobs: count,
            mean_norm_loss: if count == 0 { f64::NAN } else { loss_sum / count as f64 },
            share_high: share[0],
            share_medium: share[1],
            share_low: share[2],
        });
    }

    /// The run's metrics.
    pub fn finish(self, policy: &str, jobs: Vec<JobOutcome>, end_s: f64) -> RunMetrics {
        let capacity_time = f64::from(self.num_workers) * self.active_time;
        RunMetrics::new(
            policy,
            self.num_workers,
            self.loss_area / self.active_time.max(1e-300),
            self.contended_time / self.active_time.max(1e-300),
            self.busy_worker_time / capacity_time.max(1e-300),
            Group::ALL.map(|g| self.group_worker_time[group_index(g)] / capacity_time.max(1e-300)),
            end_s,
            jobs,
            self.samples,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn the_percentile_is_the_nearest_rank() {
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&xs, 0.95), 19.0);
        assert_eq!(percentile(&xs, 1.0), 20.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.95), 3.0);
        assert_eq!(percentile(&[5.0], 0.5), 5.0);
        assert!(percentile(&[], 0.95).is_nan());
    }
}
