//! Offline evaluation of the predictor: replay curves point by point and measure how well the
//! loss `horizon` iterations ahead is predicted, against SLAQ's strawman (last ΔL repeated).

use std::collections::BTreeMap;

use statrs::statistics::{Data, Median};

use super::predictor::{CANDIDATES, JobPredictor, NUM_CANDIDATES, PredictorConfig};

/// Predictions start once a job has this many points (as in SLAQ).
pub const MIN_PREFIX: usize = 5;

/// Median absolute percentage errors of one group of curves.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ErrorSummary {
    pub curves: usize,
    pub points: usize,
    pub strawman_mape_pct: f64,
    pub slaq_mape_pct: f64,
    /// The same error for each single candidate model, always used (for diagnosis).
    pub candidates_mape_pct: BTreeMap<&'static str, f64>,
}

/// Errors per family and over all curves.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PredictionReport {
    pub horizon: u64,
    pub families: BTreeMap<String, ErrorSummary>,
    pub overall: ErrorSummary,
}

#[derive(Default)]
struct Errors {
    curves: usize,
    slaq: Vec<f64>,
    strawman: Vec<f64>,
    candidates: [Vec<f64>; NUM_CANDIDATES],
}

impl Errors {
    fn summary(&self) -> ErrorSummary {
        let median = |v: &[f64]| if v.is_empty() { f64::NAN } else { Data::new(v.to_vec()).median() };
        ErrorSummary {
            curves: self.curves,
            points: self.slaq.len(),
            strawman_mape_pct: median(&self.strawman),
            slaq_mape_pct: median(&self.slaq),
            candidates_mape_pct: CANDIDATES.iter().map(|c| (c.name(), median(&self.candidates[*c as usize]))).collect(),
        }
    }
}

/// Replays each `(family, losses)` curve: after every prefix of at least [`MIN_PREFIX`] points,
/// predicts the loss `horizon` iterations ahead (where the curve has it) and records the
/// absolute percentage error of the predictor and of the strawman.
pub fn evaluate<'a>(
    curves: impl IntoIterator<Item = (&'a str, &'a [f64])>,
    horizon: u64,
    config: PredictorConfig,
) -> PredictionReport {
    let mut families: BTreeMap<String, Errors> = BTreeMap::new();
    let mut overall = Errors::default();
    let ahead = horizon as usize;
    for (family, losses) in curves {
        let errors = families.entry(family.to_string()).or_default();
        errors.curves += 1;
        overall.curves += 1;
        let mut predictor = JobPredictor::new(config);
        for (i, &loss) in losses.iter().enumerate() {
            if predictor.observe(i as u64 + 1, loss).is_err() {
                continue;
            }
            predictor.refit();
            let Some(&target) = losses.get(i + ahead) else { break };
            if i + 1 < MIN_PREFIX {
                continue;
            }
            let ape =
                |p: Option<f64>| p.map_or(f64::INFINITY, |p| 100.0 * (p - target).abs() / target.abs().max(1e-12));
            let slaq = ape(predictor.predict(horizon as f64));
            let strawman = ape(predictor.predict_strawman(horizon as f64));
            for e in [&mut *errors, &mut overall] {
                e.slaq.push(slaq);
                e.strawman.push(strawman);
                for c in CANDIDATES {
                    e.candidates[c as usize].push(ape(predictor.predict_with(c, horizon as f64)));
                }
            }
        }
    }
    PredictionReport {
        horizon,
        families: families.into_iter().map(|(k, v)| (k, v.summary())).collect(),
        overall: overall.summary(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smooth_curves_are_predicted_better_than_by_the_strawman_far_ahead() {
        let a: Vec<f64> = (1..=120).map(|k| 0.3 + 2.0 * 0.95f64.powi(k)).collect();
        let b: Vec<f64> = (1..=120).map(|k| 0.1 + 1.0 / f64::from(k).sqrt()).collect();
        let report = evaluate([("exp", a.as_slice()), ("pow", b.as_slice())], 50, PredictorConfig::default());
        assert_eq!(report.overall.curves, 2);
        assert_eq!(report.overall.points, 2 * (120 - 50 - MIN_PREFIX + 1));
        for (family, summary) in &report.families {
            assert!(summary.slaq_mape_pct < summary.strawman_mape_pct, "{family}: {summary:?}");
        }
    }
}
