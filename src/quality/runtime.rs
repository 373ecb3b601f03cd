//! Iteration-time model: seconds per iteration as a function of the worker count,
//! `t(w) = α + β/w + γ·log2(w)` (serial part, parallel part, communication), fitted by
//! exponentially decayed weighted least squares on observed `(workers, seconds)` pairs.
//!
//! A job that has only ever run at one worker count cannot tell `α`, `β` and `γ` apart, so the
//! fit is anchored to a prior shape `s·(σ + (1−σ)/w + c·log2 w)` through a few pseudo-observations
//! whose scale `s` follows the data. With no observation at all the prior alone answers.

use super::curve::solve3;

/// The prior shape of the speed-up curve and how strongly it anchors the fit.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimePrior {
    /// Seconds per iteration on one worker before any observation.
    pub one_worker_seconds: f64,
    /// Serial fraction σ of the one-worker time.
    pub serial_fraction: f64,
    /// Communication cost per doubling of workers, as a fraction of the one-worker time.
    pub comm_fraction: f64,
    /// Total weight of the prior's pseudo-observations, in observations.
    pub weight: f64,
    /// Decay applied to old observations at every new one (1 keeps all).
    pub decay: f64,
}

impl Default for TimePrior {
    fn default() -> Self {
        TimePrior { one_worker_seconds: 1.0, serial_fraction: 0.1, comm_fraction: 0.01, weight: 1.0, decay: 0.98 }
    }
}

/// Worker counts where the prior's pseudo-observations sit.
const PRIOR_WORKERS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

fn basis(workers: f64) -> [f64; 3] {
    [1.0, 1.0 / workers, workers.log2()]
}

/// Fitted `t(w)` coefficients; cheap to copy into a bid.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TimeCurve {
    pub alpha: f64,
    pub beta: f64,
    pub gamma: f64,
}

impl TimeCurve {
    /// Predicted seconds per iteration with `workers ≥ 1` workers.
    pub fn seconds(&self, workers: u32) -> f64 {
        let w = f64::from(workers.max(1));
        (self.alpha + self.beta / w + self.gamma * w.log2()).max(1e-9)
    }
}

/// The incremental iteration-time model of one job: O(1) state (decayed normal equations).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IterTimeModel {
    prior: TimePrior,
    /// Decayed Σ w·φφᵀ and Σ w·φ·t over observations.
    normal: [[f64; 3]; 3],
    rhs: [f64; 3],
    /// Decayed Σ w·t/f0(w) and Σ w: the scale of the prior shape that fits the data.
    scale_num: f64,
    scale_den: f64,
    num_observations: u64,
    curve: TimeCurve,
    stale: bool,
}

impl IterTimeModel {
    pub fn new(prior: TimePrior) -> Self {
        let mut model = IterTimeModel {
            prior,
            normal: [[0.0; 3]; 3],
            rhs: [0.0; 3],
            scale_num: 0.0,
            scale_den: 0.0,
            num_observations: 0,
            curve: TimeCurve { alpha: 0.0, beta: 0.0, gamma: 0.0 },
            stale: false,
        };
        model.curve = model.prior_curve(prior.one_worker_seconds);
        model
    }

    fn prior_shape(&self, workers: f64) -> f64 {
        let p = self.prior;
        p.serial_fraction + (1.0 - p.serial_fraction) / workers + p.comm_fraction * workers.log2()
    }

    fn prior_curve(&self, scale: f64) -> TimeCurve {
        let p = self.prior;
        TimeCurve {
            alpha: scale * p.serial_fraction,
            beta: scale * (1.0 - p.serial_fraction),
            gamma: scale * p.comm_fraction,
        }
    }

    /// Records that one iteration took `seconds` with `workers` workers. Ignores nonsense
    /// (zero workers, non-finite or non-positive times): the caller validates and counts those.
    pub fn observe(&mut self, workers: u32, seconds: f64) {
        if workers == 0 || !(seconds.is_finite() && seconds > 0.0) {
            return;
        }
        let decay = self.prior.decay;
        for row in &mut self.normal {
            for v in row.iter_mut() {
                *v *= decay;
            }
        }
        for v in &mut self.rhs {
            *v *= decay;
        }
        let w = f64::from(workers);
        let phi = basis(w);
        for i in 0..3 {
            for j in 0..3 {
                self.normal[i][j] += phi[i] * phi[j];
            }
            self.rhs[i] += phi[i] * seconds;
        }
        self.scale_num = self.scale_num * decay + seconds / self.prior_shape(w);
        self.scale_den = self.scale_den * decay + 1.0;
        self.num_observations += 1;
        self.stale = true;
    }

    /// Solves the fit if observations arrived since the last solve (an observation only
    /// updates sums: it runs once per loss report, the solve once per refit).
    pub fn update(&mut self) {
        if self.stale {
            self.curve = self.solve();
            self.stale = false;
        }
    }

    fn solve(&self) -> TimeCurve {
        let scale = self.scale_num / self.scale_den;
        let prior = self.prior_curve(scale);
        let mut normal = self.normal;
        let mut rhs = self.rhs;
        let pseudo_weight = self.prior.weight / PRIOR_WORKERS.len() as f64;
        for &w in &PRIOR_WORKERS {
            let phi = basis(w);
            let t = prior.alpha + prior.beta / w + prior.gamma * w.log2();
            for i in 0..3 {
                for j in 0..3 {
                    normal[i][j] += pseudo_weight * phi[i] * phi[j];
                }
                rhs[i] += pseudo_weight * phi[i] * t;
            }
        }
        match solve3(normal, rhs) {
            // A negative coefficient would make t(w) fall below zero or rise for no reason
            // outside the observed range: keep the scaled prior then.
            Some([alpha, beta, gamma]) if alpha >= 0.0 && beta >= 0.0 && gamma >= 0.0 => {
                TimeCurve { alpha, beta, gamma }
            }
            _ => prior,
        }
    }

    /// The fit as of the last [`Self::update`].
    pub fn curve(&self) -> TimeCurve {
        self.curve
    }

    pub fn num_observations(&self) -> u64 {
        self.num_observations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prior_answers_before_any_observation() {
        let model = IterTimeModel::new(TimePrior::default());
        assert!((model.curve().seconds(1) - 1.0).abs() < 1e-12);
        assert!(model.curve().seconds(8) < model.curve().seconds(1));
    }

    #[test]
    fn learns_a_speed_up_curve_from_varied_worker_counts() {
        let truth = TimeCurve { alpha: 0.2, beta: 3.0, gamma: 0.05 };
        let mut model = IterTimeModel::new(TimePrior::default());
        for i in 0..200u32 {
            let w = 1 << (i % 6);
            model.observe(w, truth.seconds(w));
        }
        model.update();
        for w in [1, 3, 16, 40] {
            let (got, want) = (model.curve().seconds(w), truth.seconds(w));
            assert!((got - want).abs() / want < 0.05, "w={w}: {got} vs {want}");
        }
    }

    #[test]
    fn one_worker_count_scales_the_prior() {
        let mut model = IterTimeModel::new(TimePrior::default());
        for _ in 0..20 {
            model.observe(4, 2.0);
        }
        model.update();
        let t4 = model.curve().seconds(4);
        assert!((t4 - 2.0).abs() / 2.0 < 0.05, "{t4}");
        assert!(model.curve().seconds(1) > t4, "fewer workers must be slower");
    }

    #[test]
    fn nonsense_is_ignored() {
        let mut model = IterTimeModel::new(TimePrior::default());
        model.observe(0, 1.0);
        model.observe(2, f64::NAN);
        model.observe(2, -1.0);
        assert_eq!(model.num_observations(), 0);
    }
}
