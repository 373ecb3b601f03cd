//! The per-job predictor: loss history in, predicted normalised loss reduction `g(w)` out.
//!
//! Candidates: the fitted curve families of [`super::curve`], the last loss held flat, SLAQ's
//! strawman (the last ΔL repeated) and a geometric prior (the recent ΔL shrinking by a fixed
//! ratio per iteration, usable from two points on). Every refit records each candidate's
//! predictions for a few horizons ahead; when those iterations arrive the predictions are
//! scored, and a prediction `h` ahead is made by the candidate with the smallest recent error at
//! the horizon bucket nearest `h`. Before a bucket has scores, the fitted family with the best
//! weighted information criterion answers. So each job is predicted by whatever has predicted
//! *it* best, not by a family chosen for any data set.
//!
//! State is bounded: a window of recent points, a few pending predictions per horizon bucket,
//! and O(1) running values; see [`JobPredictor::state_bytes`].

use std::collections::VecDeque;

use super::curve::{self, Curve, Family, Points};
use super::runtime::{IterTimeModel, TimeCurve, TimePrior};

/// What a gain is normalised by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Reduction of the job's normalised loss `(L − L_end)/(L_first − L_end)`, with `L_end`
    /// estimated online, averaged over the horizon: the quantity the time-averaged
    /// normalised-loss metric counts.
    #[default]
    Quality,
    /// SLAQ's gain: ΔL at the end of the horizon divided by the largest single-iteration ΔL
    /// seen so far.
    DeltaLoss,
}

/// Predictor settings, shared by all jobs of a scheduler.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PredictorConfig {
    /// Most recent points kept for fitting.
    pub window: usize,
    /// Points needed before curve families are fitted (SLAQ: 5).
    pub min_points: usize,
    /// Weight decay per iteration of age in the fits (SLAQ: 0.8–0.95).
    pub decay: f64,
    /// Smoothing of the per-candidate error scores (weight of the newest error).
    pub score_rate: f64,
    /// Ratio by which the geometric prior shrinks ΔL per iteration.
    pub prior_ratio: f64,
    /// Normalisation of gains.
    pub objective: Objective,
    /// Prior of the iteration-time model.
    pub time_prior: TimePrior,
}

impl Default for PredictorConfig {
    fn default() -> Self {
        PredictorConfig {
            window: 96,
            min_points: 5,
            decay: 0.9,
            score_rate: 0.2,
            prior_ratio: 0.9,
            objective: Objective::Quality,
            time_prior: TimePrior::default(),
        }
    }
}

/// A prediction model of the loss at a future iteration.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Model {
    /// The loss stays where it is.
    Flat { loss: f64 },
    /// The loss moves on a straight line: SLAQ's strawman when `slope` is the last ΔL.
    Linear { loss: f64, slope: f64, k0: f64 },
    /// A fitted (or prior) curve.
    Curve(Curve),
}

impl Model {
    /// The predicted loss at iteration `k`.
    pub fn eval(&self, k: f64) -> f64 {
        match *self {
            Model::Flat { loss } => loss,
            Model::Linear { loss, slope, k0 } => loss + slope * (k - k0),
            Model::Curve(curve) => curve.eval(k),
        }
    }
}

impl Model {
    /// Optimus's steps to convergence (Peng et al., EuroSys 2018), on this model: the iteration
    /// at which the predicted loss has made all but `epsilon` of its whole drop from iteration
    /// `k_first` to its asymptote (the loss far ahead), searched from `k_now`. `None` when the
    /// model predicts no drop at all (flat), is the strawman's line, or does not get there
    /// within 2^40 iterations: the caller falls back on a prior.
    pub fn converged_at(&self, k_first: f64, k_now: f64, epsilon: f64) -> Option<f64> {
        let Model::Curve(curve) = self else { return None };
        let far = curve.eval(k_now.max(1.0) * 2f64.powi(40));
        let drop = curve.eval(k_first) - far;
        if !(drop.is_finite() && far.is_finite() && drop > 0.0) {
            return None;
        }
        let target = far + epsilon * drop;
        if curve.eval(k_now) <= target {
            return Some(k_now);
        }
        let (mut lo, mut hi) = (k_now, k_now.max(1.0));
        while curve.eval(hi) > target {
            lo = hi;
            hi *= 2.0;
            if hi > k_now.max(1.0) * 2f64.powi(40) {
                return None;
            }
        }
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if curve.eval(mid) > target { lo = mid } else { hi = mid }
        }
        Some(hi)
    }
}

/// The candidates, in a fixed order (indices into score tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Candidate {
    Exponential = 0,
    Power = 1,
    InverseQuadratic = 2,
    Geometric = 3,
    Flat = 4,
    Strawman = 5,
}

pub const NUM_CANDIDATES: usize = 6;
pub const CANDIDATES: [Candidate; NUM_CANDIDATES] = [
    Candidate::Exponential,
    Candidate::Power,
    Candidate::InverseQuadratic,
    Candidate::Geometric,
    Candidate::Flat,
    Candidate::Strawman,
];
const FAMILIES: [(Candidate, Family, usize); 3] = [
    (Candidate::Exponential, Family::Exponential, 3),
    (Candidate::Power, Family::Power, 3),
    (Candidate::InverseQuadratic, Family::InverseQuadratic, 4),
];

impl Candidate {
    pub fn name(self) -> &'static str {
        match self {
            Candidate::Exponential => "exponential",
            Candidate::Power => "power",
            Candidate::InverseQuadratic => "inverse-quadratic",
            Candidate::Geometric => "geometric",
            Candidate::Flat => "flat",
            Candidate::Strawman => "strawman",
        }
    }
}

/// Horizons (iterations ahead) at which candidates are scored.
const HORIZONS: [u64; 6] = [1, 3, 10, 20, 50, 100];
/// Scores needed in a bucket before it is trusted over the information criterion.
const MIN_SCORES: u32 = 3;

/// Why a loss point was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObserveError {
    #[error("loss is not a finite number")]
    NonFiniteLoss,
    #[error("iteration must be at least 1")]
    ZeroIteration,
    #[error("iteration is not newer than the last one seen (duplicate or out of order)")]
    NotNewer,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Pending {
    target_iter: u64,
    predictions: [f32; NUM_CANDIDATES],
}

/// One job's predictor. See the module documentation.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobPredictor {
    config: PredictorConfig,
    window: VecDeque<(u64, f64)>,
    num_points: u64,
    first_loss: f64,
    min_loss: f64,
    /// Largest per-iteration loss decrease seen (SLAQ's normaliser); 0 until one is seen.
    max_delta: f64,
    time: IterTimeModel,
    models: [Option<Model>; NUM_CANDIDATES],
    /// Weighted information criterion of each fitted family (lower is better).
    criterion: [f64; NUM_CANDIDATES],
    pending: [VecDeque<Pending>; HORIZONS.len()],
    scores: [[f32; NUM_CANDIDATES]; HORIZONS.len()],
    num_scores: [[u32; NUM_CANDIDATES]; HORIZONS.len()],
    stale: bool,
}

impl JobPredictor {
    pub fn new(config: PredictorConfig) -> Self {
        JobPredictor {
            config,
            window: VecDeque::with_capacity(config.window),
            num_points: 0,
            first_loss: f64::NAN,
            min_loss: f64::INFINITY,
            max_delta: 0.0,
            time: IterTimeModel::new(config.time_prior),
            models: [None; NUM_CANDIDATES],
            criterion: [f64::INFINITY; NUM_CANDIDATES],
            pending: Default::default(),
            scores: [[0.0; NUM_CANDIDATES]; HORIZONS.len()],
            num_scores: [[0; NUM_CANDIDATES]; HORIZONS.len()],
            stale: false,
        }
    }

    /// Adds the loss after iteration `iter` (1-based, increasing). Scores the predictions that
    /// were made for this iteration. Cheap: fitting waits for [`JobPredictor::refit`].
    pub fn observe(&mut self, iter: u64, loss: f64) -> Result<(), ObserveError> {
        if !loss.is_finite() {
            return Err(ObserveError::NonFiniteLoss);
        }
        if iter == 0 {
            return Err(ObserveError::ZeroIteration);
        }
        if let Some(&(last_iter, last_loss)) = self.window.back() {
            if iter <= last_iter {
                return Err(ObserveError::NotNewer);
            }
            let delta = (last_loss - loss) / (iter - last_iter) as f64;
            self.max_delta = self.max_delta.max(delta);
        } else {
            self.first_loss = loss;
        }
        self.score_pending(iter, loss);
        if self.window.len() == self.config.window {
            self.window.pop_front();
        }
        self.window.push_back((iter, loss));
        self.num_points += 1;
        self.min_loss = self.min_loss.min(loss);
        self.stale = true;
        Ok(())
    }

    /// Records the measured duration of an iteration run on `workers` workers (the time model
    /// is solved at the next [`Self::refit`]).
    pub fn observe_time(&mut self, workers: u32, seconds: f64) {
        self.time.observe(workers, seconds);
        self.stale = true;
    }

    fn score_pending(&mut self, iter: u64, loss: f64) {
        let rate = self.config.score_rate as f32;
        let scale = loss.abs().max(1e-12);
        for (bucket, queue) in self.pending.iter_mut().enumerate() {
            while let Some(front) = queue.front() {
                if front.target_iter > iter {
                    break;
                }
                if front.target_iter == iter {
                    let scores = &mut self.scores[bucket];
                    let counts = &mut self.num_scores[bucket];
                    for ((s, n), &p) in scores.iter_mut().zip(counts.iter_mut()).zip(&front.predictions) {
                        if !p.is_finite() {
                            continue;
                        }
                        let error = ((f64::from(p) - loss).abs() / scale) as f32;
                        *s = if *n == 0 { error } else { *s + rate * (error - *s) };
                        *n = n.saturating_add(1);
                    }
                }
                queue.pop_front();
            }
        }
    }

    /// Refits the candidates to the window if points arrived since the last refit, and records
    /// their predictions for scoring.
    pub fn refit(&mut self) {
        if !self.stale {
            return;
        }
        self.stale = false;
        self.time.update();
        let Some(&(last_iter, last_loss)) = self.window.back() else { return };
        let k_now = last_iter as f64;
        self.models = [None; NUM_CANDIDATES];
        self.criterion = [f64::INFINITY; NUM_CANDIDATES];
        self.models[Candidate::Flat as usize] = Some(Model::Flat { loss: last_loss });
        if self.window.len() >= 2 {
            let (prev_iter, prev_loss) = self.window[self.window.len() - 2];
            let slope = (last_loss - prev_loss) / (last_iter - prev_iter) as f64;
            self.models[Candidate::Strawman as usize] = Some(Model::Linear { loss: last_loss, slope, k0: k_now });
            self.models[Candidate::Geometric as usize] = Some(self.geometric_prior(k_now, last_loss));
        }
        if self.window.len() >= self.config.min_points.max(3) {
            self.fit_families(k_now);
        }
        let predictions = |models: &[Option<Model>; NUM_CANDIDATES], target: u64| {
            let mut out = [f32::NAN; NUM_CANDIDATES];
            for (o, m) in out.iter_mut().zip(models) {
                if let Some(m) = m {
                    *o = m.eval(target as f64) as f32;
                }
            }
            out
        };
        for (queue, &h) in self.pending.iter_mut().zip(&HORIZONS) {
            let target_iter = last_iter + h;
            queue.push_back(Pending { target_iter, predictions: predictions(&self.models, target_iter) });
        }
    }

    /// The recent ΔL (averaged over up to three steps so one noisy step does not dominate)
    /// shrinking by `prior_ratio` each iteration.
    fn geometric_prior(&self, k_now: f64, last_loss: f64) -> Model {
        let n = self.window.len();
        let span = n.min(4) - 1;
        let (old_iter, old_loss) = self.window[n - 1 - span];
        let delta = ((old_loss - last_loss) / (k_now - old_iter as f64)).max(0.0);
        let r = self.config.prior_ratio;
        let total = delta * r / (1.0 - r);
        Model::Curve(Curve::Exponential { d: last_loss - total, a: total, lambda: -r.ln(), k0: k_now })
    }

    fn fit_families(&mut self, k_now: f64) {
        let n = self.window.len();
        let mut iters = Vec::with_capacity(n);
        let mut losses = Vec::with_capacity(n);
        let mut weights = Vec::with_capacity(n);
        for &(k, loss) in &self.window {
            let w = self.config.decay.powf(k_now - k as f64);
            if w < 1e-4 {
                continue;
            }
            iters.push(k as f64);
            losses.push(loss);
            weights.push(w);
        }
        // Effective number of points of the weighted fit, for the information criterion.
        let (sw, sw2) = weights.iter().fold((0.0, 0.0), |(a, b), &w| (a + w, b + w * w));
        let n_eff = sw * sw / sw2;
        let points = Points { iters: &iters, losses: &losses, weights: &weights };
        let scale = self.first_loss.abs().max(self.min_loss.abs()).max(1e-12);
        for (candidate, family, num_params) in FAMILIES {
            if let Some(fit) = curve::fit(family, points) {
                let mse = (fit.weighted_sse / sw).max(1e-24 * scale * scale);
                self.models[candidate as usize] = Some(Model::Curve(fit.curve));
                self.criterion[candidate as usize] = n_eff * mse.ln() + 2.0 * num_params as f64;
            }
        }
    }

    /// The candidate that predicts `ahead` iterations ahead, see the module documentation.
    pub fn choose(&self, ahead: f64) -> Option<(Candidate, Model)> {
        let bucket = nearest_bucket(ahead);
        let (scores, counts) = (&self.scores[bucket], &self.num_scores[bucket]);
        let scored = |c: Candidate| self.models[c as usize].is_some() && counts[c as usize] >= MIN_SCORES;
        // The flat and strawman candidates are scored from the second point on, the families
        // only once fitted: a bucket is trusted once some family has scores there, so the
        // simple candidates do not win merely by having been scored first.
        if FAMILIES.iter().any(|f| scored(f.0)) {
            let best = CANDIDATES
                .into_iter()
                .filter(|&c| scored(c))
                .min_by(|&a, &b| scores[a as usize].total_cmp(&scores[b as usize]));
            if let Some(c) = best {
                return self.models[c as usize].map(|m| (c, m));
            }
        }
        let fitted = FAMILIES
            .iter()
            .map(|f| f.0)
            .filter(|c| self.models[*c as usize].is_some())
            .min_by(|a, b| self.criterion[*a as usize].total_cmp(&self.criterion[*b as usize]));
        [fitted, Some(Candidate::Geometric), Some(Candidate::Flat)]
            .into_iter()
            .flatten()
            .find_map(|c| self.models[c as usize].map(|m| (c, m)))
    }

    /// The predicted loss `ahead` iterations after the newest point (refit first).
    pub fn predict(&self, ahead: f64) -> Option<f64> {
        let &(last_iter, _) = self.window.back()?;
        self.choose(ahead).map(|(_, m)| m.eval(last_iter as f64 + ahead))
    }

    /// What `candidate` predicts `ahead` iterations ahead, if it has a model now.
    pub fn predict_with(&self, candidate: Candidate, ahead: f64) -> Option<f64> {
        let &(last_iter, _) = self.window.back()?;
        self.models[candidate as usize].map(|m| m.eval(last_iter as f64 + ahead))
    }

    /// SLAQ's strawman prediction: the last ΔL repeated `ahead` times.
    pub fn predict_strawman(&self, ahead: f64) -> Option<f64> {
        let &(last_iter, _) = self.window.back()?;
        self.models[Candidate::Strawman as usize].map(|m| m.eval(last_iter as f64 + ahead))
    }

    /// The gain curve this job bids over the next `epoch_seconds` (the planning horizon). With
    /// fewer than two points it is the prior of [`Self::prior_gain_curve`], or `None` under
    /// SLAQ's objective (the policy then gives the job a fair share). Call [`Self::refit`] first.
    /// `current_workers` picks the horizon used to choose the model.
    pub fn gain_curve(&self, epoch_seconds: f64, current_workers: u32) -> Option<GainCurve> {
        let time = self.time.curve();
        if self.window.len() < 2 {
            return self.prior_gain_curve(epoch_seconds);
        }
        let &(last_iter, last_loss) = self.window.back()?;
        let ahead = epoch_seconds / time.seconds(current_workers.max(1));
        let (_, model) = self.choose(ahead)?;
        let k_now = last_iter as f64;
        let scale = match self.config.objective {
            Objective::DeltaLoss => self.max_delta,
            Objective::Quality => {
                // Reduction made so far plus the reduction predicted over as many iterations as
                // the job has run (at least 20): an online estimate of L_first − L_end.
                let far = (k_now - self.window[0].0 as f64).max(20.0);
                let remaining = (model.eval(k_now) - model.eval(k_now + far)).max(0.0);
                (self.first_loss - self.min_loss).max(0.0) + remaining
            }
        };
        let floor = self.first_loss.abs().max(last_loss.abs()).max(1e-12) * 1e-9;
        let model_now = model.eval(k_now);
        let averaged = self.config.objective == Objective::Quality;
        Some(GainCurve { model, k_now, model_now, time, epoch_seconds, scale: scale.max(floor), averaged })
    }

    /// Before a job has shown any progress, the quality objective assumes the typical
    /// convergence: normalised loss 1 now, shrinking by `prior_ratio` per iteration. A fresh job
    /// is at its worst loss, so it should compete from its first epoch. SLAQ's objective has no
    /// such prior: the policy gives such jobs a fair share (`None`).
    fn prior_gain_curve(&self, epoch_seconds: f64) -> Option<GainCurve> {
        if self.config.objective != Objective::Quality {
            return None;
        }
        let k_now = self.window.back().map_or(0.0, |p| p.0 as f64);
        let lambda = -self.config.prior_ratio.ln();
        let model = Model::Curve(Curve::Exponential { d: 0.0, a: 1.0, lambda, k0: k_now });
        Some(GainCurve {
            model,
            k_now,
            model_now: 1.0,
            time: self.time.curve(),
            epoch_seconds,
            scale: 1.0,
            averaged: true,
        })
    }

    /// The objective its gains are normalised for.
    pub fn objective(&self) -> Objective {
        self.config.objective
    }

    pub fn num_points(&self) -> u64 {
        self.num_points
    }

    pub fn last_loss(&self) -> Option<f64> {
        self.window.back().map(|p| p.1)
    }

    pub fn last_iter(&self) -> Option<u64> {
        self.window.back().map(|p| p.0)
    }

    /// The points its fit sees (its window), oldest first.
    pub fn window(&self) -> impl ExactSizeIterator<Item = (u64, f64)> + '_ {
        self.window.iter().copied()
    }

    pub fn time_curve(&self) -> TimeCurve {
        self.time.curve()
    }

    /// Bytes of state this predictor holds (inline and on the heap).
    pub fn state_bytes(&self) -> usize {
        let pending: usize = self.pending.iter().map(|q| q.capacity() * size_of::<Pending>()).sum();
        size_of::<Self>() + self.window.capacity() * size_of::<(u64, f64)>() + pending
    }
}

fn nearest_bucket(ahead: f64) -> usize {
    let target = ahead.max(1.0).ln();
    (0..HORIZONS.len())
        .min_by(|&a, &b| {
            let da = ((HORIZONS[a] as f64).ln() - target).abs();
            let db = ((HORIZONS[b] as f64).ln() - target).abs();
            da.total_cmp(&db)
        })
        .unwrap_or(0)
}

/// A job's bid: its predicted normalised loss reduction over the next epoch for any worker
/// count. Small and `Copy`, so it can be sent between threads, actors and replicas.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GainCurve {
    pub model: Model,
    pub k_now: f64,
    /// The model's value at `k_now` (gains are the model's own predicted drop from here).
    pub model_now: f64,
    pub time: TimeCurve,
    pub epoch_seconds: f64,
    /// What the loss reduction is divided by (see [`Objective`]).
    pub scale: f64,
    /// Whether the gain is the reduction averaged over the horizon (the area between the loss
    /// now and its trajectory, what a time-averaged metric counts) or at its end (SLAQ's).
    pub averaged: bool,
}

/// 2-point Gauss–Legendre nodes on [0, 1] (equal weights): exact for cubics, plenty for a
/// smooth decay over one horizon, at two model evaluations per gain (this runs once per worker
/// handed out; see `slaq bench alloc`).
const GAUSS_NODES: [f64; 2] = [0.211_324_865_405_187_1, 0.788_675_134_594_812_9];

impl GainCurve {
    /// Iterations the job is predicted to run in one epoch with `workers` workers.
    pub fn iterations(&self, workers: u32) -> f64 {
        if workers == 0 { 0.0 } else { self.epoch_seconds / self.time.seconds(workers) }
    }

    /// The predicted drop of the loss over the next `seconds` with `workers` workers, divided by
    /// the bid's normaliser (`scale`): what the job's reports should show if the prediction is
    /// right. Not averaged over the time, unlike [`Self::gain`] under the quality objective.
    pub fn predicted_drop(&self, workers: u32, seconds: f64) -> f64 {
        if workers == 0 || seconds <= 0.0 {
            return 0.0;
        }
        let n = seconds / self.time.seconds(workers);
        ((self.model_now - self.model.eval(self.k_now + n)) / self.scale).max(0.0)
    }

    /// Predicted normalised loss reduction over the next epoch with `workers` workers, ≥ 0.
    pub fn gain(&self, workers: u32) -> f64 {
        if workers == 0 {
            return 0.0;
        }
        self.gain_of(self.iterations(workers))
    }

    /// The gain of running `n` more iterations over the horizon (however fast): what
    /// [`Self::gain`] computes once its time model has turned workers into iterations. Used
    /// where the iterations come from elsewhere (a worker type's measured throughput).
    pub fn gain_of(&self, n: f64) -> f64 {
        if n <= 0.0 {
            return 0.0;
        }
        // The model's own predicted drop, not observed minus predicted: an offset between a
        // fit and the newest (noisy) point must not read as a gain or as a loss.
        let reduction = if self.averaged {
            GAUSS_NODES.iter().map(|&x| self.model_now - self.model.eval(self.k_now + x * n)).sum::<f64>() / 2.0
        } else {
            self.model_now - self.model.eval(self.k_now + n)
        };
        (reduction / self.scale).max(0.0)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn steps_to_convergence_are_where_the_curve_has_made_its_drop() {
        use crate::quality::curve::Curve;
        // 1 + 4·e^{-0.1 (k − 1)}: 95% of the drop from k = 1 is made where e^{-0.1 (k−1)} = 0.05.
        let m = Model::Curve(Curve::Exponential { d: 1.0, a: 4.0, lambda: 0.1, k0: 1.0 });
        let want = 1.0 + 20f64.ln() / 0.1;
        let got = m.converged_at(1.0, 10.0, 0.05).unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        // Already there: now.
        assert_eq!(m.converged_at(1.0, 100.0, 0.05), Some(100.0));
        // 1 + 9/k: 95% of the drop from k = 1 (9) leaves 0.45 = 9/k, k = 20.
        let p = Model::Curve(Curve::Power { d: 1.0, a: 9.0, p: 1.0 });
        assert!((p.converged_at(1.0, 2.0, 0.05).unwrap() - 20.0).abs() < 1e-6);
        // Nothing to predict from a flat or a straight line.
        assert_eq!(Model::Flat { loss: 1.0 }.converged_at(1.0, 5.0, 0.05), None);
        assert_eq!(Model::Linear { loss: 1.0, slope: -0.1, k0: 5.0 }.converged_at(1.0, 5.0, 0.05), None);
    }

    use super::*;

    fn fed(curve: impl Fn(f64) -> f64, points: u64) -> JobPredictor {
        let mut p = JobPredictor::new(PredictorConfig::default());
        for k in 1..=points {
            p.observe(k, curve(k as f64)).unwrap();
            p.refit();
        }
        p
    }

    #[test]
    fn predicts_a_clean_exponential_curve_far_ahead() {
        let truth = |k: f64| 0.2 + 1.5 * 0.93f64.powf(k);
        let p = fed(truth, 60);
        let got = p.predict(50.0).unwrap();
        assert!((got - truth(110.0)).abs() / truth(110.0) < 0.01, "{got} vs {}", truth(110.0));
        let strawman = p.predict_strawman(50.0).unwrap();
        assert!((got - truth(110.0)).abs() < (strawman - truth(110.0)).abs());
    }

    #[test]
    fn noisy_curve_is_not_extrapolated_wildly() {
        // Deterministic zig-zag noise on a sublinear curve, like SGD.
        let truth = |k: f64| 0.5 + 1.0 / k.sqrt() + if (k as u64).is_multiple_of(2) { 0.05 } else { -0.05 };
        let p = fed(truth, 80);
        let got = p.predict(10.0).unwrap();
        let want = truth(90.0);
        assert!((got - want).abs() / want < 0.15, "{got} vs {want}");
        assert!((p.predict_strawman(10.0).unwrap() - want).abs() > (got - want).abs());
    }

    #[test]
    fn refuses_bad_points_and_keeps_state() {
        let mut p = fed(|k| 1.0 / k, 10);
        let before = p.clone();
        assert_eq!(p.observe(11, f64::NAN), Err(ObserveError::NonFiniteLoss));
        assert_eq!(p.observe(10, 0.05), Err(ObserveError::NotNewer));
        assert_eq!(p.observe(0, 0.05), Err(ObserveError::ZeroIteration));
        // Debug output, because pending predictions hold NaN (no model yet) and NaN != NaN.
        assert_eq!(format!("{p:?}"), format!("{before:?}"));
    }

    #[test]
    fn short_histories_fall_back() {
        let paper = PredictorConfig { objective: Objective::DeltaLoss, ..PredictorConfig::default() };
        let mut q = JobPredictor::new(paper);
        q.observe(1, 2.0).unwrap();
        assert!(q.gain_curve(5.0, 1).is_none(), "SLAQ: one point says nothing about progress");
        let mut p = JobPredictor::new(PredictorConfig::default());
        let prior = p.gain_curve(5.0, 1).expect("a fresh job bids the prior");
        assert!(prior.gain(4) > prior.gain(1) && prior.gain(1) > 0.0);
        p.observe(1, 2.0).unwrap();
        p.refit();
        assert!(p.gain_curve(5.0, 1).is_some());
        assert_eq!(p.predict(10.0), Some(2.0));
        p.observe(2, 1.5).unwrap();
        p.refit();
        let g = p.gain_curve(5.0, 1).unwrap();
        assert!(g.gain(4) > g.gain(1) && g.gain(1) > 0.0);
    }

    #[test]
    fn gains_are_normalised_across_loss_scales() {
        let small = fed(|k| 0.1 + 0.5 * 0.9f64.powf(k), 20);
        let large = fed(|k| 1e5 + 5e5 * 0.9f64.powf(k), 20);
        for objective in [Objective::Quality, Objective::DeltaLoss] {
            let mut a = small.clone();
            let mut b = large.clone();
            a.config.objective = objective;
            b.config.objective = objective;
            let (ga, gb) = (a.gain_curve(5.0, 1).unwrap().gain(4), b.gain_curve(5.0, 1).unwrap().gain(4));
            assert!((ga - gb).abs() / ga < 1e-3, "{objective:?}: {ga} vs {gb}");
        }
    }

    #[test]
    fn state_is_bounded() {
        let p = fed(|k| 1.0 / k, 2000);
        let q = fed(|k| 1.0 / k, 200);
        assert_eq!(p.state_bytes(), q.state_bytes());
        assert!(p.state_bytes() < 16 * 1024, "{}", p.state_bytes());
    }

    #[test]
    fn a_predictor_survives_a_round_trip_through_msgpack() {
        let mut p = fed(|k| 2.0 + 10.0 * (-0.05 * k).exp(), 60);
        p.observe_time(2, 0.7);
        p.observe_time(4, 0.4);
        p.refit();
        let bytes = rmp_serde::to_vec_named(&p).unwrap();
        let mut back: JobPredictor = rmp_serde::from_slice(&bytes).unwrap();
        // Debug, not ==: unfitted candidates hold NaN, which is never equal to itself.
        assert_eq!(format!("{back:?}"), format!("{p:?}"));
        assert!(bytes.len() < 16 * 1024, "{} bytes", bytes.len());
        for q in [&mut p, &mut back] {
            q.observe(61, 2.0 + 10.0 * (-0.05f64 * 61.0).exp()).unwrap();
            q.refit();
        }
        assert_eq!(back.gain_curve(60.0, 2), p.gain_curve(60.0, 2));
    }
}
