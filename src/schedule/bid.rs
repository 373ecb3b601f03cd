//! What a job bids: its gains for each worker count, from its model.
//!
//! - [`make_bid`]: a job's loss predictor → its gain curve over the planning horizon that its
//!   objective looks at (jobs that report losses).
//! - [`rates`], [`gains`]: a deep-learning job's ([`JobModel`]'s) predicted progress per second with
//!   `k` slots packed on as few machines as possible, at the best batch for `k` (Courier's rule),
//!   as a fraction of the progress it has left (SLAQ's normalised gain, with progress as the
//!   quality measure), net of the restart a change costs.
//! - [`restart_priced`]: any gain curve with a restart priced into every other count.
//! - [`concave_hull`]: gains with a dip bridged, so the greedy takes a step that pays.

use crate::cluster::model::Shape;
use crate::policy::GainFn;
use crate::quality::{GainCurve, JobPredictor, Objective};

use super::batch::batch_for;
use super::job::JobModel;

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

/// Pollux's restart penalty (Qiao et al., OSDI 2021, as its simulator applies it): a running
/// job's value on any other allocation is scaled by `(age − restarts·restart_s) / (age +
/// restart_s)`, clamped to [0, 1], so a young job, or one already moved often, stays where it
/// is; a job moved `r` times has lost about `r·restart_s` of its `age` to restarts.
pub fn restart_factor(age_s: f64, restarts: u32, restart_s: f64) -> f64 {
    if restart_s <= 0.0 {
        return 1.0;
    }
    let age = age_s.max(0.0);
    ((age - f64::from(restarts) * restart_s) / (age + restart_s)).clamp(0.0, 1.0)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::place::Layout;
    use crate::schedule::job::test_job;

    #[test]
    fn the_restart_factor_keeps_young_and_often_moved_jobs_put() {
        assert_eq!(restart_factor(0.0, 0, 30.0), 0.0, "a job that just started stays put");
        assert!((restart_factor(270.0, 0, 30.0) - 0.9).abs() < 1e-12);
        assert!((restart_factor(270.0, 3, 30.0) - 0.6).abs() < 1e-12, "three moves cost 90 s of 270");
        assert_eq!(restart_factor(100.0, 10, 30.0), 0.0, "moved more than its age pays for");
        assert_eq!(restart_factor(5.0, 2, 0.0), 1.0, "free restarts: no penalty");
    }

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
