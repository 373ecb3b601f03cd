//! Gavel's workload generator, re-implemented from the paper's method (see `data/README.md`):
//! job type uniform over the table's types; duration on one V100 `60·10^U(1.5, 3)` s with
//! probability 0.8, else `60·10^U(3, 4)` s; steps = duration × the V100 throughput at the job's
//! scale factor; Poisson arrivals. With `multi_gpu`, scale factors 1/2/4/8 with probabilities
//! 0.7/0.1/0.15/0.05 for the job types the table measures at more than one GPU. Each job also
//! carries a real loss curve, drawn with the same seed and stretched over its steps.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::table::{Cluster, GavelError, Throughputs};
use crate::trace::TraceCurve;

/// The worker type durations are measured on.
pub const REFERENCE: &str = "v100";

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct GavelJob {
    pub arrival_s: f64,
    /// Index into [`Throughputs::job_types`].
    pub job_type: usize,
    /// The GPUs it asks for (Gavel's scale factor).
    pub scale_factor: u32,
    /// Training steps to run.
    pub steps: f64,
    /// Its duration alone on `scale_factor` V100s.
    pub duration_s: f64,
    /// Its loss per report: the loss curve stretched over its reports, one report per
    /// [`REPORT_S`] of its V100 time; the last value is its loss at its last step.
    pub loss: Vec<f64>,
}

/// A job reports its loss once per this many seconds of its running time on V100s (so a
/// report's meaning does not depend on the job's length).
pub const REPORT_S: f64 = 60.0;

impl GavelJob {
    /// Steps per report.
    pub fn steps_per_report(&self) -> f64 {
        self.steps / (self.loss.len() as f64 - 1.0).max(1.0)
    }
}

/// What a trace is drawn from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceConfig {
    pub num_jobs: usize,
    pub jobs_per_hour: f64,
    pub seed: u64,
    pub multi_gpu: bool,
}

/// Draws a trace, deterministic for `config.seed`. Scale factors above 1 are drawn only where
/// some worker type of the cluster runs the job type on that many GPUs.
pub fn generate(
    table: &Throughputs,
    cluster: &Cluster,
    curves: &[TraceCurve],
    config: &TraceConfig,
) -> Result<Vec<GavelJob>, GavelError> {
    cluster.check_usable(table)?;
    let reference = table
        .worker_types
        .iter()
        .position(|w| w == REFERENCE)
        .ok_or_else(|| GavelError::NoReference { path: "throughputs".into(), reference: REFERENCE.into() })?;
    let usable: Vec<&TraceCurve> =
        curves.iter().filter(|c| c.loss.len() >= 3 && c.loss[0] - c.loss[c.loss.len() - 1] > 0.0).collect();
    if usable.is_empty() {
        return Err(GavelError::Unusable { job: "(no loss curve with 3 points and a drop)".into() });
    }
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut clock = 0.0;
    let mut jobs = Vec::with_capacity(config.num_jobs);
    for i in 0..config.num_jobs {
        if i > 0 {
            // Exponential inter-arrival times of mean 3600 / rate.
            let u: f64 = rng.random();
            clock += -(1.0 - u).ln() * 3600.0 / config.jobs_per_hour.max(1e-9);
        }
        let job_type = rng.random_range(0..table.job_types.len());
        let draw: f64 = rng.random();
        let mut scale_factor = if !config.multi_gpu || draw < 0.7 {
            1
        } else if draw < 0.8 {
            2
        } else if draw < 0.95 {
            4
        } else {
            8
        };
        let runs = |sf| {
            table.rate(reference, job_type, sf) > 0.0
                && (0..cluster.types.len()).any(|t| cluster.rate(table, t, job_type, sf) > 0.0)
        };
        while scale_factor > 1 && !runs(scale_factor) {
            scale_factor /= 2;
        }
        let long = rng.random::<f64>() >= 0.8;
        let (lo, hi) = if long { (3.0, 4.0) } else { (1.5, 3.0) };
        let exponent = lo + (hi - lo) * rng.random::<f64>();
        let duration_s = 60.0 * 10f64.powf(exponent);
        // The V100 rate where the table has one; otherwise (a job type with no V100 entry) the
        // fastest type of the cluster stands in.
        let v100 = table.rate(reference, job_type, scale_factor);
        let rate = if v100 > 0.0 {
            v100
        } else {
            (0..cluster.types.len()).map(|t| cluster.rate(table, t, job_type, scale_factor)).fold(0.0, f64::max)
        };
        let curve = usable[rng.random_range(0..usable.len())];
        let reports = (duration_s / REPORT_S).ceil().max(2.0) as usize;
        jobs.push(GavelJob {
            arrival_s: clock,
            job_type,
            scale_factor,
            steps: duration_s * rate,
            duration_s,
            loss: stretch(&curve.loss, reports + 1),
        });
    }
    Ok(jobs)
}

/// `loss` resampled to `n ≥ 2` points, linearly between its own.
pub fn stretch(loss: &[f64], n: usize) -> Vec<f64> {
    let last = (loss.len() - 1) as f64;
    (0..n)
        .map(|i| {
            let x = i as f64 * last / (n - 1).max(1) as f64;
            let k = (x.floor() as usize).min(loss.len() - 2);
            let f = x - k as f64;
            loss[k] + (loss[k + 1] - loss[k]) * f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Throughputs {
        Throughputs::parse(
            r#"{"v100": {"('A', 1)": {"null": 2.0}, "('A', 2)": {"null": 3.5}, "('B', 1)": {"null": 1.0}},
                "k80": {"('A', 1)": {"null": 0.5}, "('B', 1)": {"null": 0.25}}}"#,
            "t",
        )
        .unwrap()
    }

    fn curve() -> TraceCurve {
        TraceCurve {
            id: "c".into(),
            family: "f".into(),
            dataset: String::new(),
            loss: vec![3.0, 2.0, 1.5, 1.25],
            iter_seconds: None,
        }
    }

    #[test]
    fn traces_follow_gavel_s_distributions_and_are_reproducible() {
        let t = table();
        let c = Cluster::parse("v100=4,k80=4", &t, "t").unwrap();
        let config = TraceConfig { num_jobs: 4000, jobs_per_hour: 2.0, seed: 7, multi_gpu: false };
        let jobs = generate(&t, &c, &[curve()], &config).unwrap();
        assert_eq!(jobs, generate(&t, &c, &[curve()], &config).unwrap());
        let long = jobs.iter().filter(|j| j.duration_s >= 60.0 * 1000.0).count() as f64 / 4000.0;
        assert!((long - 0.2).abs() < 0.03, "{long}");
        assert!(jobs.iter().all(|j| j.duration_s >= 60.0 * 10f64.powf(1.5) && j.duration_s <= 60.0 * 1e4));
        let hours = jobs.last().unwrap().arrival_s / 3600.0;
        assert!((hours - 2000.0).abs() < 150.0, "4000 jobs at 2 an hour: {hours} h");
        assert!(jobs.iter().all(|j| j.scale_factor == 1));
        for j in &jobs {
            let v100 = if j.job_type == 0 { 2.0 } else { 1.0 };
            assert!((j.steps - j.duration_s * v100).abs() < 1e-6);
            assert_eq!(j.loss.len(), (j.duration_s / REPORT_S).ceil() as usize + 1);
            assert_eq!((j.loss[0], *j.loss.last().unwrap()), (3.0, 1.25));
        }
        // Multi-GPU: only A runs on two, and no job asks for 4 or 8 (the table has neither).
        let multi = generate(&t, &c, &[curve()], &TraceConfig { multi_gpu: true, ..config }).unwrap();
        assert!(multi.iter().all(|j| j.scale_factor == 1 || (j.scale_factor == 2 && j.job_type == 0)));
        assert!(multi.iter().any(|j| j.scale_factor == 2));
    }

    #[test]
    fn a_curve_stretches_linearly() {
        assert_eq!(stretch(&[4.0, 2.0, 1.0], 5), vec![4.0, 3.0, 2.0, 1.5, 1.0]);
        assert_eq!(stretch(&[4.0, 2.0], 2), vec![4.0, 2.0]);
    }
}
