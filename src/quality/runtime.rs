//! Iteration-time model of a machine-blind job: seconds per iteration as a function of the
//! worker count, `t(w) = α + β/w + γ·log2(w)` (serial part, parallel part, communication), fitted
//! by exponentially decayed weighted least squares on observed `(workers, seconds)` pairs.
//!
//! This is not a second model: the fitted curve is the job model of `cluster::model`
//! ([`PerfParams`]) in its machine-blind case ([`PerfParams::machine_blind`]: one machine,
//! per-worker work `1/w`, synchronisation `γ·log2 w`), evaluated by that model's step time.
//! What this module adds is how a job that reports no machines is fitted, online and in O(1)
//! state, and the times measured per count.
//!
//! A job that has only ever run at one worker count cannot tell `α`, `β` and `γ` apart, so the
//! fit is anchored to a prior shape `s·(σ + (1−σ)/w + c·log2 w)` through a few pseudo-observations
//! whose scale `s` follows the data. With no observation at all the prior alone answers.

use super::curve::solve3;
use crate::cluster::model::PerfParams;

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

/// Worker counts whose measured iteration times a job remembers (1 to this).
pub const MEMORY: usize = 64;
const _: () = assert!(MEMORY <= 64, "the mask of measured counts is a u64");

/// The fitted job model and the times measured per worker count; cheap to copy into a bid.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "TimeCurveRepr", into = "TimeCurveRepr")]
pub struct TimeCurve {
    /// The fitted model, evaluated by [`PerfParams::machine_blind_seconds`].
    pub perf: PerfParams,
    /// Seconds per iteration measured at `w = 1..=MEMORY` workers (0: never measured).
    measured: [f32; MEMORY],
    /// Bit `w − 1` set: `measured[w − 1]` holds a time (so the nearest measured counts are
    /// found in O(1)).
    mask: u64,
}

/// How a [`TimeCurve`] is saved: the mask is derived. States saved before the curve was a
/// [`PerfParams`] hold its three coefficients instead (`alpha`, `beta`, `gamma`), read as the
/// machine-blind case.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct TimeCurveRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    perf: Option<PerfParams>,
    #[serde(default, skip_serializing)]
    alpha: f64,
    #[serde(default, skip_serializing)]
    beta: f64,
    #[serde(default, skip_serializing)]
    gamma: f64,
    #[serde(default = "no_memory", with = "memory_serde")]
    measured: [f32; MEMORY],
}

impl From<TimeCurveRepr> for TimeCurve {
    fn from(r: TimeCurveRepr) -> Self {
        let perf = r.perf.unwrap_or_else(|| PerfParams::machine_blind(r.alpha, r.beta, r.gamma));
        TimeCurve::of(perf).remembering(&r.measured)
    }
}

impl From<TimeCurve> for TimeCurveRepr {
    fn from(t: TimeCurve) -> Self {
        TimeCurveRepr { perf: Some(t.perf), alpha: 0.0, beta: 0.0, gamma: 0.0, measured: t.measured }
    }
}

fn no_memory() -> [f32; MEMORY] {
    [0.0; MEMORY]
}

/// The measured times as a sequence (serde's arrays stop at 32); a shorter one is padded.
mod memory_serde {
    use super::MEMORY;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &[f32; MEMORY], s: S) -> Result<S::Ok, S::Error> {
        let used = m.iter().rposition(|&t| t > 0.0).map_or(0, |i| i + 1);
        s.collect_seq(&m[..used])
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[f32; MEMORY], D::Error> {
        let v = Vec::<f32>::deserialize(d)?;
        let mut out = [0.0; MEMORY];
        for (o, t) in out.iter_mut().zip(v) {
            *o = if t.is_finite() && t > 0.0 { t } else { 0.0 };
        }
        Ok(out)
    }
}

impl TimeCurve {
    /// The machine-blind curve `alpha + beta/w + gamma·log2 w` alone, without measurements.
    pub fn fitted(alpha: f64, beta: f64, gamma: f64) -> Self {
        TimeCurve::of(PerfParams::machine_blind(alpha, beta, gamma))
    }

    /// A fitted model alone, without measurements.
    pub fn of(perf: PerfParams) -> Self {
        TimeCurve { perf, measured: no_memory(), mask: 0 }
    }

    fn remembering(mut self, memory: &[f32]) -> Self {
        self.mask = 0;
        for (i, (m, &t)) in self.measured.iter_mut().zip(memory).enumerate() {
            *m = if t.is_finite() && t > 0.0 { t } else { 0.0 };
            self.mask |= u64::from(*m > 0.0) << i;
        }
        self
    }

    /// The times measured at `w = 1..=MEMORY` workers (0: never measured).
    pub fn measured(&self) -> &[f32; MEMORY] {
        &self.measured
    }

    fn fit(&self, w: f64) -> f64 {
        self.perf.machine_blind_seconds(w)
    }

    /// Predicted seconds per iteration with `workers ≥ 1` workers: as measured at that count;
    /// elsewhere the fitted curve times the ratio measured/fitted, interpolated linearly between
    /// the nearest measured counts below and above (the nearest one's ratio beyond them). A
    /// speed-up with a cliff (one machine to two) is then predicted as it was seen, which no
    /// smooth curve can do, and where the measurements follow the curve the curve is kept.
    pub fn seconds(&self, workers: u32) -> f64 {
        let w = workers.max(1) as usize;
        let fit = self.fit(w as f64);
        if self.mask == 0 {
            return fit;
        }
        let at = |k: usize| (k, f64::from(self.measured[k - 1]));
        if w <= MEMORY && self.mask >> (w - 1) & 1 == 1 {
            return at(w).1;
        }
        // Counts below w: bits 0..w-1; above: bits w.. (none when w >= MEMORY).
        let lower = if w > MEMORY { self.mask } else { self.mask & ((1u64 << (w - 1)) - 1) };
        let upper = if w >= MEMORY { 0 } else { self.mask >> w };
        let below = (lower != 0).then(|| at(64 - lower.leading_zeros() as usize));
        let above = (upper != 0).then(|| at(w + 1 + upper.trailing_zeros() as usize));
        let ratio = |(k, t): (usize, f64)| t / self.fit(k as f64);
        match (below, above) {
            (Some(l), Some(u)) => {
                let (rl, ru) = (ratio(l), ratio(u));
                fit * (rl + (ru - rl) * (w - l.0) as f64 / (u.0 - l.0) as f64)
            }
            (Some(k), None) | (None, Some(k)) => fit * ratio(k),
            (None, None) => fit,
        }
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
    /// Seconds per iteration per worker count (`1..=MEMORY`), a moving average of the latest.
    #[serde(default)]
    memory: Vec<f32>,
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
            memory: Vec::new(),
            curve: TimeCurve::fitted(0.0, 0.0, 0.0),
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
        TimeCurve::fitted(scale * p.serial_fraction, scale * (1.0 - p.serial_fraction), scale * p.comm_fraction)
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
        if (workers as usize) <= MEMORY {
            if self.memory.len() < MEMORY {
                self.memory.resize(MEMORY, 0.0);
            }
            let m = &mut self.memory[workers as usize - 1];
            let keep = decay as f32;
            *m = if *m > 0.0 { keep * *m + (1.0 - keep) * seconds as f32 } else { seconds as f32 };
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
            let t = prior.perf.machine_blind_seconds(w);
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
                TimeCurve::fitted(alpha, beta, gamma)
            }
            _ => prior,
        }
        .remembering(&self.memory)
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
        let truth = TimeCurve::fitted(0.2, 3.0, 0.05);
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

    #[test]
    fn a_cliff_between_machines_is_predicted_as_measured() {
        // Four workers on one machine take 0.3 s, eight over two machines 0.6 s: slower with
        // more workers, which no a + b/w + g log w curve with non-negative terms can say.
        let mut model = IterTimeModel::new(TimePrior::default());
        for _ in 0..20 {
            model.observe(1, 1.0);
            model.observe(4, 0.3);
            model.observe(8, 0.6);
        }
        model.update();
        let t = model.curve();
        assert!((t.seconds(4) - 0.3).abs() < 1e-6 && (t.seconds(8) - 0.6).abs() < 1e-6);
        assert!(t.seconds(6) > t.seconds(4) && t.seconds(6) < t.seconds(8), "{} {}", t.seconds(6), t.seconds(4));
        assert!(t.seconds(16) > t.seconds(4), "beyond the last measurement, the cliff's ratio stays");
        assert!(t.seconds(2) < 1.0 && t.seconds(2) > 0.3);
    }

    #[test]
    fn measurements_on_the_curve_leave_the_curve() {
        let truth = TimeCurve::fitted(0.1, 2.0, 0.02);
        let mut model = IterTimeModel::new(TimePrior { decay: 1.0, ..TimePrior::default() });
        for w in [1, 2, 4, 8, 16] {
            for _ in 0..50 {
                model.observe(w, truth.seconds(w));
            }
        }
        model.update();
        for w in [3, 5, 12, 32, 100] {
            let (got, want) = (model.curve().seconds(w), truth.seconds(w));
            assert!((got - want).abs() / want < 0.02, "w={w}: {got} vs {want}");
        }
    }

    #[test]
    fn the_measured_times_survive_a_round_trip_and_bad_ones_are_dropped() {
        let mut model = IterTimeModel::new(TimePrior::default());
        model.observe(3, 0.5);
        model.update();
        let bytes = rmp_serde::to_vec_named(&model.curve()).unwrap();
        let back: TimeCurve = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, model.curve());
        // Saved state from elsewhere: non-finite or negative times are forgotten, not trusted.
        #[derive(serde::Serialize)]
        struct Raw {
            alpha: f64,
            beta: f64,
            gamma: f64,
            measured: Vec<f32>,
        }
        let raw = Raw { alpha: 0.0, beta: 1.0, gamma: 0.0, measured: vec![f32::NAN, -1.0, 0.5] };
        let read: TimeCurve = rmp_serde::from_slice(&rmp_serde::to_vec_named(&raw).unwrap()).unwrap();
        assert_eq!(read.measured()[..3], [0.0, 0.0, 0.5]);
        assert_eq!(read.seconds(3), 0.5);
        assert!(read.seconds(1).is_finite() && read.seconds(2).is_finite());
    }

    /// A curve saved as its three coefficients (before it was a `PerfParams`) reads as the same
    /// curve, and a saved curve reads back as itself.
    #[test]
    fn a_curve_saved_as_three_coefficients_is_the_machine_blind_model() {
        #[derive(serde::Serialize)]
        struct Old {
            alpha: f64,
            beta: f64,
            gamma: f64,
            measured: Vec<f32>,
        }
        let old = Old { alpha: 0.3, beta: 4.0, gamma: 0.05, measured: vec![] };
        let read: TimeCurve = rmp_serde::from_slice(&rmp_serde::to_vec_named(&old).unwrap()).unwrap();
        for w in [1u32, 2, 3, 8, 100, 1000] {
            let x = f64::from(w);
            let want = 0.3 + 4.0 / x + 0.05 * x.log2();
            assert!((read.seconds(w) / want - 1.0).abs() < 1e-12, "{w}: {} vs {want}", read.seconds(w));
        }
        let again: TimeCurve = rmp_serde::from_slice(&rmp_serde::to_vec_named(&read).unwrap()).unwrap();
        assert_eq!(again, read);
    }

    proptest::proptest! {
        /// The mask finds the same neighbours as a scan of the measured times would.
        #[test]
        fn the_nearest_measured_counts_are_found_as_a_scan_finds_them(
            times in proptest::collection::vec((1usize..=MEMORY, 0.01f32..10.0), 0..12),
            w in 1u32..100,
        ) {
            let mut memory = vec![0.0f32; MEMORY];
            for &(k, t) in &times {
                memory[k - 1] = t;
            }
            let t = TimeCurve::fitted(0.1, 2.0, 0.03).remembering(&memory);
            let at = |k: usize| memory.get(k - 1).copied().filter(|&x| x > 0.0).map(|x| (k, f64::from(x)));
            let w = w as usize;
            let fit = t.fit(w as f64);
            let ratio = |(k, x): (usize, f64)| x / t.fit(k as f64);
            let want = match (w <= MEMORY).then(|| at(w)).flatten() {
                Some((_, x)) => x,
                None => {
                    let below = (1..w.min(MEMORY + 1)).rev().find_map(at);
                    let above = (w + 1..=MEMORY).find_map(at);
                    match (below, above) {
                        (Some(l), Some(u)) => fit * (ratio(l) + (ratio(u) - ratio(l)) * (w - l.0) as f64 / (u.0 - l.0) as f64),
                        (Some(k), None) | (None, Some(k)) => fit * ratio(k),
                        (None, None) => fit,
                    }
                }
            };
            proptest::prop_assert!((t.seconds(w as u32) - want).abs() <= 1e-12 * want.max(1.0), "w={} {} vs {}", w, t.seconds(w as u32), want);
        }
    }
}
