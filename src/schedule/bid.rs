//! What a job bids: its gains for each worker count, from its model.
//!
//! - [`make_bid`]: a job's loss predictor → its gain curve over the planning horizon that its
//!   objective looks at (jobs that report losses).
//! - [`JobModel`], [`rates`], [`gains`]: a deep-learning job's predicted progress per second with
//!   `k` slots packed on as few machines as possible, at the best batch for `k` (Courier's rule),
//!   as a fraction of the progress it has left (SLAQ's normalised gain, with progress as the
//!   quality measure), net of the restart a change costs.
//! - [`restart_priced`]: any gain curve with a restart priced into every other count.
//! - [`concave_hull`]: gains with a dip bridged, so the greedy takes a step that pays.

use crate::cluster::model::{BatchConfig, BatchLimits, PerfParams, Shape};
use crate::cluster::place::Layout;
use crate::policy::GainFn;
use crate::quality::{GainCurve, JobPredictor, Objective};

use super::batch::batch_for;

/// What the planner knows about one job.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobModel {
    pub perf: PerfParams,
    pub limits: BatchLimits,
    /// Allowed total batches (declared, or a grid between the limits).
    pub batches: Vec<u32>,
    /// Latest gradient statistics `(grad_sqr, grad_var)`, if the job reports them.
    pub grads: Option<(f64, f64)>,
    pub slo_iter_s: Option<f64>,
    /// A parameter-server job (else all-reduce).
    pub ps: bool,
    /// Its current layout (slots per machine).
    pub current: Layout,
    /// The per-GPU batch its compute was seen at, while it was seen at only one.
    pub seen_local: Option<u32>,
    /// Before it has run: the batch its user chose, which it starts at.
    pub start_batch: Option<u32>,
    /// The per-GPU batches its model is trusted at: half the smallest to twice the largest it
    /// ran at (`None`: any). Like the GPUs a job is trusted with, the range grows as it runs.
    pub local_range: Option<(u32, u32)>,
}

impl JobModel {
    /// A job that declares no batch sizes, serves no parameters and has not run anywhere: the
    /// prior time model.
    pub fn unknown() -> Self {
        JobModel {
            perf: PerfParams::PRIOR,
            limits: BatchLimits { init_batch: 1, max_batch: u32::MAX, min_local: 1, max_local: u32::MAX },
            batches: Vec::new(),
            grads: None,
            slo_iter_s: None,
            ps: false,
            current: Layout::new(),
            seen_local: None,
            start_batch: None,
            local_range: None,
        }
    }
}

/// What the shapes a job ran in say about the per-GPU batches its model knows: the one batch it
/// was seen at while there is only one (`JobModel::seen_local`), and the range it is trusted at
/// (`JobModel::local_range`).
pub fn seen_batches(shapes: &[crate::cluster::model::Observation]) -> (Option<u32>, Option<(u32, u32)>) {
    let seen = shapes.iter().map(|o| o.local_bsz as u32);
    let only = match shapes.first() {
        Some(o) if shapes.iter().all(|p| p.local_bsz == o.local_bsz) => Some(o.local_bsz as u32),
        _ => None,
    };
    (only, seen.clone().min().zip(seen.max()).map(|(lo, hi)| (lo / 2, hi.saturating_mul(2))))
}

/// One iteration of `job` with `config` on `counts` slots per machine.
pub fn iter_time(job: &JobModel, counts: &[u32], config: &BatchConfig) -> f64 {
    let shape = Shape::of(counts);
    if job.ps {
        let (workers, servers) = ps_split(job, shape.replicas, f64::from(config.local_bsz));
        let cross = if shape.machines <= 1 { 0.0 } else { 1.0 - 1.0 / f64::from(shape.machines) };
        job.perf.ps_iter_time(workers, servers, cross, f64::from(config.local_bsz), config.accum)
    } else {
        job.perf.iter_time(shape, f64::from(config.local_bsz), config.accum)
    }
}

/// Workers and parameter servers out of `slots` (at least one of each when `slots ≥ 2`): the
/// split with the shortest predicted synchronisation at per-GPU batch `local_bsz`.
pub fn ps_split(job: &JobModel, slots: u32, local_bsz: f64) -> (u32, u32) {
    if slots < 2 {
        return (slots, 0);
    }
    let compute = job.perf.compute(local_bsz);
    (1..slots)
        .map(|ps| (slots - ps, ps))
        .min_by(|a, b| {
            // Per worker: compute shared over fewer workers costs more than a faster sync saves.
            let t = |&(w, p): &(u32, u32)| (job.perf.ps_network(w, p, 0.5) + compute) / f64::from(w);
            t(a).total_cmp(&t(b))
        })
        .unwrap_or((slots - 1, 1))
}

/// Predicted progress per second with `k` slots packed on machines of `slots` each, at the best
/// batch, for `k = 0..=max`.
pub fn rates(job: &JobModel, max: u32, slots: u32) -> Vec<f64> {
    (0..=max)
        .map(|k| {
            if k == 0 || (job.ps && k < 2) {
                return 0.0;
            }
            batch_for(job, &Shape::packed_counts(k, slots)).map_or(0.0, |c| c.rate)
        })
        .collect()
}

/// SLAQ's normalised gain of `k` slots: the fraction of the progress left (`remaining`) that the
/// next `horizon_s` seconds make, from [`rates`], net of a restart: any count other than the
/// `current` one first loses `restart_s` (so a change is bid only where it pays for itself).
pub fn gains(rates: &[f64], remaining: f64, horizon_s: f64, current: u32, restart_s: f64) -> Vec<f64> {
    rates
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let run = if k as u32 == current { horizon_s } else { (horizon_s - restart_s).max(0.0) };
            (r * run / remaining.max(1e-9)).min(1.0)
        })
        .collect()
}

/// The least concave majorant of `g(0..n)` (its upper concave hull, linear between vertices).
/// Gains with a dip (the locality cliff from four GPUs on one machine to five on two; the restart
/// that a change costs) stop a greedy that hands out one slot at a time at the dip even where a
/// larger step pays; on the hull it takes the step. The greedy on the hull is optimal for the
/// hull (a concave problem), and all jobs but the one at the threshold end on a vertex, where
/// the hull is the gain itself.
pub fn concave_hull(g: &[f64]) -> Vec<f64> {
    let mut hull: Vec<usize> = Vec::with_capacity(g.len());
    for k in 0..g.len() {
        if !g[k].is_finite() {
            break;
        }
        while hull.len() >= 2 {
            let (a, b) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            // b is under the chord from a to k: drop it.
            if (g[b] - g[a]) * (k - a) as f64 <= (g[k] - g[a]) * (b - a) as f64 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(k);
    }
    let mut out = g.to_vec();
    for w in hull.windows(2) {
        let (a, b) = (w[0], w[1]);
        for (k, v) in out.iter_mut().enumerate().take(b).skip(a + 1) {
            *v = g[a] + (g[b] - g[a]) * (k - a) as f64 / (b - a) as f64;
        }
    }
    out
}

/// A gain table `g(0..n)`, constant past its end.
#[derive(Clone, Debug, PartialEq)]
pub struct GainTable(pub Vec<f64>);

impl GainFn for GainTable {
    fn gain(&self, workers: u32) -> f64 {
        self.0.get(workers as usize).or(self.0.last()).copied().unwrap_or(0.0)
    }

    fn table(&self) -> &[f64] {
        &self.0
    }
}

/// The gains of a job that every change of its workers restarts (a submitted job's processes):
/// any count but its `current` one first loses `restart_s` of the `horizon_s` the gains are
/// predicted over, so `g(k)` for `k ≠ current` is scaled by `(horizon − restart) / horizon`. The
/// result is bridged by its concave hull ([`concave_hull`]), so that the greedy,
/// which hands out one worker at a time, still takes a larger step that pays for its restart.
/// Tabulated for `0..=max_workers`, at most `max_len` entries.
pub fn restart_priced(
    gain: &impl GainFn,
    current: u32,
    restart_s: f64,
    horizon_s: f64,
    max_workers: u32,
    max_len: usize,
) -> GainTable {
    let keep = if horizon_s > 0.0 { ((horizon_s - restart_s) / horizon_s).clamp(0.0, 1.0) } else { 0.0 };
    let len = (max_workers as usize + 1).min(max_len).max(1);
    let g: Vec<f64> = (0..len as u32)
        .map(|k| {
            let g = gain.gain(k);
            let g = if g.is_finite() { g } else { 0.0 };
            if k == current || k == 0 { g } else { g * keep }
        })
        .collect();
    GainTable(concave_hull(&g))
}

/// The planning horizon a bid looks over: SLAQ's objective looks one epoch ahead, the quality
/// objective over `horizon_s` (at least one epoch).
pub fn bid_horizon(objective: Objective, horizon_s: f64, epoch_s: f64) -> f64 {
    match objective {
        Objective::DeltaLoss => epoch_s,
        Objective::Quality => horizon_s.max(epoch_s),
    }
}

/// A job's bid from its predictor: refit if new points arrived, then the gain curve over the
/// horizon of its objective ([`bid_horizon`]) with its current workers choosing the model.
pub fn make_bid(predictor: &mut JobPredictor, horizon_s: f64, epoch_s: f64, workers: u32) -> Option<GainCurve> {
    predictor.refit();
    predictor.gain_curve(bid_horizon(predictor.objective(), horizon_s, epoch_s), workers)
}

/// A deep-learning job for the tests of `schedule`: a prior-like model with a network cost that
/// makes two machines much slower than one.
#[cfg(test)]
pub(crate) fn test_job(current: Layout) -> JobModel {
    JobModel {
        perf: PerfParams {
            alpha_c: 0.02,
            beta_c: 0.005,
            alpha_l: 0.02,
            beta_l: 0.0,
            alpha_n: 0.3,
            beta_n: 0.01,
            gamma: 1.0,
            log_k: 0.0,
        },
        limits: BatchLimits { init_batch: 32, max_batch: 512, min_local: 8, max_local: 64 },
        batches: vec![32, 64, 128, 256, 512],
        grads: None,
        slo_iter_s: None,
        ps: false,
        current,
        seen_local: None,
        start_batch: None,
        local_range: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_is_priced_into_every_other_count_and_the_dip_is_bridged() {
        // Gains over a 60 s horizon: 0, 0.3, 0.5, 0.6, 0.65. A restart costs 15 s: a quarter.
        let g = |w: u32| [0.0, 0.3, 0.5, 0.6, 0.65][w.min(4) as usize];
        let t = restart_priced(&g, 2, 15.0, 60.0, 4, 64);
        assert_eq!(t.0.len(), 5);
        assert!((t.gain(2) - 0.5).abs() < 1e-12, "the current count is not charged");
        assert!((t.gain(4) - 0.65 * 0.75).abs() < 1e-12);
        // 3 would be worth 0.45 < 0.5 and 1 0.225: the hull takes the job to 2 and no further,
        // so the greedy neither grows nor shrinks it for less than its restart costs.
        assert!(t.gain(3) <= t.gain(2) && t.gain(4) <= t.gain(2), "{:?}", t.0);
        let marginals: Vec<f64> = t.0.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(marginals.windows(2).all(|m| m[1] <= m[0] + 1e-12), "concave: {marginals:?}");
        // Without a restart cost the gains are the job's own.
        assert_eq!(restart_priced(&g, 2, 0.0, 60.0, 4, 64).0, vec![0.0, 0.3, 0.5, 0.6, 0.65]);
        // A restart as long as the horizon: nothing but the current count is worth anything.
        let all = restart_priced(&g, 2, 60.0, 60.0, 4, 64);
        assert!(all.gain(4) < all.gain(2) && all.gain(1) < all.gain(2), "{:?}", all.0);
    }

    #[test]
    fn the_horizon_is_one_epoch_for_slaq_s_objective_and_at_least_one_for_quality() {
        assert_eq!(bid_horizon(Objective::DeltaLoss, 60.0, 5.0), 5.0);
        assert_eq!(bid_horizon(Objective::Quality, 60.0, 5.0), 60.0);
        assert_eq!(bid_horizon(Objective::Quality, 2.0, 5.0), 5.0);
    }

    #[test]
    fn a_predictor_with_points_bids_a_rising_gain() {
        let mut p = JobPredictor::new(crate::quality::PredictorConfig::default());
        for k in 1..=20u64 {
            p.observe(k, 1.0 / k as f64).unwrap();
            p.observe_time(1, 0.5);
        }
        let g = make_bid(&mut p, 60.0, 5.0, 1).expect("a bid from 20 points");
        assert!(g.gain(2) > g.gain(1) && g.gain(1) > 0.0, "{} {}", g.gain(1), g.gain(2));
    }

    #[test]
    fn the_hull_bridges_dips_and_keeps_concave_gains() {
        let h = concave_hull(&[0.0, 1.0, 1.5, 1.2, 3.0, 3.1]);
        assert_eq!(h[0], 0.0);
        assert_eq!(h[4], 3.0);
        // Vertices at 0, 1, 4, 5: 2 and 3 lie on the chord from (1, 1) to (4, 3).
        assert_eq!(h[1], 1.0);
        assert!((h[2] - 5.0 / 3.0).abs() < 1e-12 && (h[3] - 7.0 / 3.0).abs() < 1e-12, "{h:?}");
        let concave = [0.0, 1.0, 1.8, 2.4, 2.8];
        assert_eq!(concave_hull(&concave), concave.to_vec());
    }

    #[test]
    fn locality_shows_in_the_rates() {
        let r = rates(&test_job(Layout::new()), 8, 4);
        assert_eq!(r[0], 0.0);
        // 4 GPUs on one machine beat 5 across two: the cliff the placement must avoid.
        assert!(r[4] > r[5], "{r:?}");
        assert!(r[2] > r[1]);
    }
}
