//! Workloads: jobs that replay recorded loss curves, arriving as a Poisson process.
//!
//! As in SLAQ's evaluation, about a quarter of the jobs start at high loss (fresh, at the start
//! of their curve), a quarter at medium loss and half almost converged. A medium or almost
//! converged job arrives like one resumed from a checkpoint: it brings its loss history up to
//! its start offset, so its predictor knows its own scale from the first epoch.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use statrs::distribution::{ContinuousCDF, Exp};

use crate::trace::TraceCurve;

/// The loss group a job arrives in (the paper's Fig. 16 groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    High,
    Medium,
    Low,
}

impl Group {
    pub const ALL: [Group; 3] = [Group::High, Group::Medium, Group::Low];

    pub fn name(self) -> &'static str {
        match self {
            Group::High => "high",
            Group::Medium => "medium",
            Group::Low => "low",
        }
    }
}

/// How a workload is drawn. The defaults are the documented paper-like workload.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadConfig {
    pub num_jobs: usize,
    /// Mean time between arrivals (exponentially distributed), seconds.
    pub mean_interarrival_s: f64,
    /// Fractions of jobs arriving at high and medium loss; the rest arrive almost converged.
    pub high_fraction: f64,
    pub medium_fraction: f64,
    /// Normalised loss at arrival, drawn uniformly in these ranges.
    pub medium_norm_loss: (f64, f64),
    pub low_norm_loss: (f64, f64),
    /// Mean seconds per iteration on one worker; each job's recorded `iter_seconds` are scaled
    /// to it (times a per-job factor drawn log-uniformly in `[1/spread, spread]`). The default,
    /// 10 s, makes a job of ~100 iterations run for minutes on a few workers, as the paper's
    /// Spark MLlib jobs did.
    pub base_iter_seconds: f64,
    pub base_spread: f64,
    /// A job stops once its normalised loss is at or below this (or at the end of its curve).
    /// The default, 0, replays every curve to its end, as the recorded runs (and SLAQ's
    /// fixed-iteration jobs) did.
    pub converged_norm_loss: f64,
    pub seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            num_jobs: 160,
            mean_interarrival_s: 10.0,
            high_fraction: 0.25,
            medium_fraction: 0.25,
            medium_norm_loss: (0.2, 0.5),
            low_norm_loss: (0.02, 0.1),
            base_iter_seconds: 10.0,
            base_spread: 2.0,
            converged_norm_loss: 0.0,
            seed: 1,
        }
    }
}

/// One job of a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    pub id: String,
    pub curve_id: String,
    pub family: String,
    pub group: Group,
    pub arrival_s: f64,
    /// Iterations done before arrival; the loss history handed to the predictor is
    /// `loss[..offset]`.
    pub offset: usize,
    pub loss: Vec<f64>,
    /// Seconds of each iteration on one worker.
    pub one_worker_seconds: Vec<f64>,
    /// Normalised loss of iteration index `i`: `(loss[i] − last)/(first − last)`.
    pub loss_first: f64,
    pub loss_last: f64,
    /// The job stops once its normalised loss is at or below this.
    pub converged_norm_loss: f64,
    /// Index of the measured application whose speed-up this job has under `--speedup pollux`
    /// (see [`super::speedup`]): chosen by the job's family, the mapping drawn per seed.
    pub application: usize,
}

impl SimJob {
    /// The whole-curve normalised loss of a loss value (0 at the curve's end, 1 at its start),
    /// not clamped.
    pub fn norm_loss(&self, loss: f64) -> f64 {
        let range = self.loss_first - self.loss_last;
        if range.abs() < 1e-300 { 0.0 } else { (loss - self.loss_last) / range }
    }

    /// The metrics' normalised loss of a job whose best loss so far is `best`: clamped to
    /// [0, 1] (see [`super::metrics`]).
    pub fn quality(&self, best: f64) -> f64 {
        self.norm_loss(best).clamp(0.0, 1.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("no usable curves (a curve needs at least 3 losses and some loss reduction)")]
    NoCurves,
    #[error("invalid workload: {0}")]
    Invalid(&'static str),
}

impl WorkloadConfig {
    fn validate(&self) -> Result<(), WorkloadError> {
        let in_unit = |(a, b): (f64, f64)| (0.0..=1.0).contains(&a) && (0.0..=1.0).contains(&b) && a <= b;
        if self.num_jobs == 0 {
            return Err(WorkloadError::Invalid("num_jobs must be positive"));
        }
        if !(self.mean_interarrival_s >= 0.0 && self.base_iter_seconds > 0.0 && self.base_spread >= 1.0) {
            return Err(WorkloadError::Invalid("times must be positive and base_spread at least 1"));
        }
        if !(self.high_fraction >= 0.0
            && self.medium_fraction >= 0.0
            && self.high_fraction + self.medium_fraction <= 1.0)
        {
            return Err(WorkloadError::Invalid("group fractions must be in [0, 1] and sum to at most 1"));
        }
        if !(in_unit(self.medium_norm_loss) && in_unit(self.low_norm_loss)) {
            return Err(WorkloadError::Invalid("normalised loss ranges must lie in [0, 1]"));
        }
        Ok(())
    }
}

/// Draws a workload from `curves`, deterministic for `config.seed`. Jobs cycle through the
/// families in a shuffled order (so families mix evenly), each taking a random curve of its
/// family.
pub fn generate(curves: &[TraceCurve], config: &WorkloadConfig) -> Result<Vec<SimJob>, WorkloadError> {
    config.validate()?;
    let usable: Vec<&TraceCurve> =
        curves.iter().filter(|c| c.loss.len() >= 3 && c.loss[0] - c.loss[c.loss.len() - 1] > 0.0).collect();
    let mut families: Vec<&str> = usable.iter().map(|c| c.family.as_str()).collect();
    families.sort_unstable();
    families.dedup();
    if families.is_empty() {
        return Err(WorkloadError::NoCurves);
    }
    let mut rng = StdRng::seed_from_u64(config.seed);
    shuffle(&mut families, &mut rng);

    let n = config.num_jobs;
    let num_high = (n as f64 * config.high_fraction).round() as usize;
    let num_medium = ((n as f64 * config.medium_fraction).round() as usize).min(n - num_high);
    let mut groups: Vec<Group> = (0..n)
        .map(|i| {
            if i < num_high {
                Group::High
            } else if i < num_high + num_medium {
                Group::Medium
            } else {
                Group::Low
            }
        })
        .collect();
    shuffle(&mut groups, &mut rng);

    let interarrival = Exp::new(1.0 / config.mean_interarrival_s.max(1e-12)).map_err(|_| WorkloadError::NoCurves)?;
    let mut clock = 0.0;
    let mut jobs = Vec::with_capacity(n);
    for (i, group) in groups.into_iter().enumerate() {
        if i > 0 && config.mean_interarrival_s > 0.0 {
            clock += interarrival.inverse_cdf(rng.random::<f64>());
        }
        let family = families[i % families.len()];
        let of_family: Vec<&&TraceCurve> = usable.iter().filter(|c| c.family == family).collect();
        let curve = of_family[rng.random_range(0..of_family.len())];
        let loss = curve.loss.clone();
        let (first, last) = (loss[0], loss[loss.len() - 1]);
        let mut job = SimJob {
            id: format!("job-{i:04}"),
            curve_id: curve.id.clone(),
            family: curve.family.clone(),
            group,
            arrival_s: clock,
            offset: 0,
            loss,
            one_worker_seconds: Vec::new(),
            loss_first: first,
            loss_last: last,
            converged_norm_loss: config.converged_norm_loss,
            application: i % families.len(),
        };
        job.offset = match group {
            Group::High => 0,
            Group::Medium => start_offset(&job, uniform(&mut rng, config.medium_norm_loss), config),
            Group::Low => start_offset(&job, uniform(&mut rng, config.low_norm_loss), config),
        };
        let factor = config.base_spread.powf(2.0 * rng.random::<f64>() - 1.0);
        let base = config.base_iter_seconds * factor;
        job.one_worker_seconds = match &curve.iter_seconds {
            Some(secs) => {
                let mean = secs.iter().sum::<f64>() / secs.len() as f64;
                secs.iter().map(|s| base * s / mean).collect()
            }
            None => vec![base; job.loss.len()],
        };
        jobs.push(job);
    }
    Ok(jobs)
}

fn uniform(rng: &mut StdRng, (lo, hi): (f64, f64)) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

fn shuffle<T>(items: &mut [T], rng: &mut StdRng) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.random_range(0..=i));
    }
}

/// Iterations done at arrival so that the job's normalised loss has just fallen to `target`,
/// never so far that it has already converged, and leaving at least one iteration to run.
fn start_offset(job: &SimJob, target: f64, config: &WorkloadConfig) -> usize {
    let n = job.loss.len();
    let first_at_or_below = (0..n).find(|&i| job.norm_loss(job.loss[i]) <= target).unwrap_or(n - 1);
    let mut offset = first_at_or_below + 1;
    while offset > 1 && job.norm_loss(job.loss[offset - 1]) <= config.converged_norm_loss {
        offset -= 1;
    }
    offset.min(n - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curves() -> Vec<TraceCurve> {
        ["a", "b", "c"]
            .iter()
            .map(|f| TraceCurve {
                id: format!("{f}-1"),
                family: f.to_string(),
                dataset: String::new(),
                loss: (1..=100).map(|k| 1.0 / f64::from(k)).collect(),
                iter_seconds: Some(vec![0.002; 100]),
            })
            .collect()
    }

    #[test]
    fn same_seed_same_workload_and_groups_as_configured() {
        let config = WorkloadConfig { num_jobs: 40, ..WorkloadConfig::default() };
        let a = generate(&curves(), &config).unwrap();
        assert_eq!(a, generate(&curves(), &config).unwrap());
        let count = |g| a.iter().filter(|j| j.group == g).count();
        assert_eq!((count(Group::High), count(Group::Medium), count(Group::Low)), (10, 10, 20));
        for job in &a {
            let norm = if job.offset == 0 { 1.0 } else { job.norm_loss(job.loss[job.offset - 1]) };
            match job.group {
                Group::High => assert_eq!(job.offset, 0),
                Group::Medium => assert!((0.1..=0.5).contains(&norm), "{norm}"),
                Group::Low => assert!(norm > config.converged_norm_loss && norm <= 0.1, "{norm}"),
            }
            let mean = job.one_worker_seconds.iter().sum::<f64>() / job.one_worker_seconds.len() as f64;
            let base = config.base_iter_seconds;
            assert!((base / 2.0..=base * 2.0).contains(&mean), "{mean}");
        }
        assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        let other = generate(&curves(), &WorkloadConfig { seed: 2, ..config }).unwrap();
        assert_ne!(a, other);
    }
}
