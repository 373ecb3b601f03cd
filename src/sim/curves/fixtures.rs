//! Jobs with fitted predictors for benchmarks and scale tests: each recorded curve is replayed
//! up to a few different points, and those predictors are cloned to as many jobs as asked for.

use crate::quality::{JobPredictor, PredictorConfig};
use crate::trace::TraceCurve;

/// Predictors at several stages of every curve (a quarter, half and three quarters through),
/// as templates. Each has refitted at every point, like a live job.
pub fn predictor_templates(curves: &[TraceCurve], config: PredictorConfig) -> Vec<JobPredictor> {
    let mut templates = Vec::new();
    for curve in curves {
        let n = curve.loss.len();
        for stage in [n / 4, n / 2, 3 * n / 4] {
            let mut p = JobPredictor::new(config);
            for (i, &loss) in curve.loss[..stage.max(2)].iter().enumerate() {
                if p.observe(i as u64 + 1, loss).is_ok() {
                    p.refit();
                }
                if let Some(secs) = &curve.iter_seconds {
                    // Vary the worker count so the time model has something to fit.
                    let workers = 1 + (i % 8) as u32;
                    p.observe_time(workers, secs[i] * 1000.0 * (0.1 + 0.9 / f64::from(workers)));
                }
            }
            templates.push(p);
        }
    }
    templates
}

/// `num_jobs` predictors, cycling through the templates.
pub fn predictors(templates: &[JobPredictor], num_jobs: usize) -> Vec<JobPredictor> {
    (0..num_jobs).filter_map(|i| templates.get(i % templates.len().max(1)).cloned()).collect()
}
