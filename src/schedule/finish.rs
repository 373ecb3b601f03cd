//! A bid that values finishing (issue #41, pure).
//!
//! On curve workloads a job's normalised loss falls with its remaining work, so "largest
//! predicted loss drop first" is close to "longest remaining job first", the worst order for
//! mean completion time. The completion term adds to a job's quality gain `weight` times the
//! fraction of its predicted remaining work that `w` workers get done over the bid's horizon:
//! its marginal gains are the speed-up's marginal rate divided by the remaining work, so with a
//! large weight the greedy serves the jobs with least work left first while each extra worker
//! is worth less under a sublinear speed-up (heSRPT, Berg et al.; AFS in CoDDL, NSDI 2021).
//! `weight` 0 is SLAQ's objective; sweeping it traces the frontier towards a size-based one.

use std::borrow::Cow;

use crate::policy::GainFn;
use crate::quality::{GainCurve, TimeCurve};

/// The default weight λ of the completion term (`[scheduler] completion_weight`, `[sim]
/// completion_weight`), chosen with the floor and the bound on issue #6's curve workloads,
/// seeds 1–3, before any held-out run (`benches/runs/2026-11-26-issue41-default.txt`).
pub const DEFAULT_COMPLETION_WEIGHT: f64 = 0.05;

/// Iterations a job of undeclared length is predicted to have left: Optimus's steps to
/// convergence (95% of the predicted drop) on its fitted curve, never less than a
/// Tiresias-like prior of as many iterations again as it has `done`, nor `one_epoch` (an
/// epoch's iterations on one worker).
pub fn predicted_remaining(curve: Option<&GainCurve>, done: f64, one_epoch: f64) -> f64 {
    let optimus = curve.and_then(|g| Some(g.model.converged_at(1.0, g.k_now, 0.05)? - g.k_now)).unwrap_or(0.0);
    optimus.max(done).max(one_epoch).max(1e-9)
}

/// The share of `remaining` iterations that `iters` get done, at most all of it (all of it
/// when nothing remains): the completion term's measure of progress.
pub fn share_done(iters: f64, remaining: f64) -> f64 {
    if remaining <= 0.0 { 1.0 } else { (iters / remaining).min(1.0) }
}

/// What the completion term knows of a job: its predicted seconds per iteration at each count
/// and its predicted remaining iterations, over the bid's horizon.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Finish {
    pub time: TimeCurve,
    pub remaining_iters: f64,
    pub horizon_s: f64,
    pub weight: f64,
}

impl Finish {
    /// The fraction of the job's remaining work `workers` workers running `speed` times as
    /// fast get done over the horizon, at most all of it. Capped: uncapped, the share over
    /// the remaining work let the smallest job take workers worth almost nothing under a
    /// sublinear speed-up, and every cell measured worse; heSRPT's rank weights in its place
    /// traced the same frontier or a worse one (benches/runs/2026-11-26-issue41-*).
    pub fn done(&self, workers: u32, speed: f64) -> f64 {
        if workers == 0 || speed <= 0.0 {
            return 0.0;
        }
        share_done(self.horizon_s * speed / self.time.seconds(workers), self.remaining_iters)
    }

    /// The term's value: `weight` times [`Finish::done`].
    pub fn value(&self, workers: u32, speed: f64) -> f64 {
        self.weight * self.done(workers, speed)
    }

    /// Its values at 0, 1, …, `len - 1` workers at speed 1 (what [`Finishing::tabled`] reads).
    pub fn terms(&self, len: usize) -> Vec<f64> {
        (0..len).map(|w| self.value(w as u32, 1.0)).collect()
    }

    /// A gain's `table` with the term added, the term's first values taken from `terms` (the
    /// rest computed): the table [`Finishing`] reads.
    pub fn summed(&self, table: &[f64], terms: &[f64]) -> Vec<f64> {
        let value = |w: usize| terms.get(w).copied().unwrap_or_else(|| self.value(w as u32, 1.0));
        table.iter().enumerate().map(|(w, g)| g + value(w)).collect()
    }

    /// [`Finish::summed`] over `gain`'s own table, then on past it while the sum does not fall,
    /// as the allocation would read it there (`gain(w)` plus the term), up to `max_len` entries.
    /// A gain's table stops where the gain stops rising, but the term may rise further, or the
    /// sum stay level: the greedy then read it past the table from the curve every epoch, and
    /// the leftover pass, which gives a worker wherever it costs nothing, once per worker (a
    /// flattened job's table is a few entries long).
    pub fn summed_past<G: GainFn>(&self, gain: &G, max_len: usize) -> Vec<f64> {
        let goes_on = |sum: &[f64]| match sum {
            [.., before, last] => last.is_finite() && last >= before,
            [last] => last.is_finite(),
            [] => false,
        };
        let mut sum = self.summed(gain.table(), &[]);
        while sum.len() < max_len && goes_on(&sum) {
            let w = sum.len() as u32;
            sum.push(gain.gain(w) + self.value(w, 1.0));
        }
        sum
    }
}

/// A job's gain with its completion term (none: the gain alone). With the term, the inner
/// gain's table no longer answers for the sum: the sum's first values are kept
/// ([`Finishing::tabled`] computes them, [`Finishing::kept`] borrows them from a caller that
/// keeps them per bid), which allocations read in a tight loop (`policy::table`). The term and
/// the table are borrowed where the caller keeps them: an epoch of 4,000 jobs built each from
/// a copy (the term holds a job's time curve, about 330 bytes) and summed a table per job.
#[derive(Clone, Debug)]
pub struct Finishing<'t, G> {
    pub gain: G,
    pub finish: Option<&'t Finish>,
    table: Cow<'t, [f64]>,
}

impl<'t, G: GainFn> Finishing<'t, G> {
    pub fn new(gain: G, finish: Option<&'t Finish>) -> Self {
        Finishing { gain, finish, table: Cow::Borrowed(&[]) }
    }

    /// The same, with the sum's values precomputed where the inner gain keeps a table (the
    /// term costs a few operations; evaluating a curve where the inner table ends costs far
    /// more, and is left to the allocation, which may never read that far). The term's first
    /// values may be known already (`terms[w]`, as [`Finish::terms`] makes them; the rest are
    /// computed): a caller that keeps them from one epoch to the next computes a job's term
    /// once per bid, not per epoch (at 4,000 jobs, 256,000 powers).
    pub fn tabled(gain: G, finish: Option<&'t Finish>, terms: &[f64]) -> Self {
        let table = match finish {
            Some(term) => Cow::Owned(term.summed(gain.table(), terms)),
            None => Cow::Borrowed(&[][..]),
        };
        Finishing { gain, finish, table }
    }

    /// The same, with the sum's values kept by the caller (`table`, as [`Finish::summed_past`]
    /// makes them from the gain): a gain that does not change between bids is summed once per
    /// bid.
    pub fn kept(gain: G, finish: Option<&'t Finish>, table: &'t [f64]) -> Self {
        let table = if finish.is_some() { table } else { &[][..] };
        Finishing { gain, finish, table: Cow::Borrowed(table) }
    }
}

impl<G: GainFn> GainFn for Finishing<'_, G> {
    fn gain(&self, workers: u32) -> f64 {
        if let Some(&g) = self.table.get(workers as usize) {
            return g;
        }
        self.gain.gain(workers) + self.finish.map_or(0.0, |f| f.value(workers, 1.0))
    }

    fn table(&self) -> &[f64] {
        if self.finish.is_some() { &self.table } else { self.gain.table() }
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        self.gain.gain_at_speed(workers, speed) + self.finish.map_or(0.0, |f| f.value(workers, speed))
    }
}

/// heSRPT's shares of the cluster (Berg, Vesilo, Harchol-Balter, SIGMETRICS 2020): with `m`
/// jobs and speed-up `k^p`, the job with the `r`-th least remaining work (`r` = 0 the least)
/// gets `(i/m)^c − ((i−1)/m)^c` with `i = m − r` and `c = 1/(1−p)`: every job runs, the smaller
/// ones on more. Optimal for mean flow time without arrivals; `p` is clamped to [0.05, 0.95].
pub fn hesrpt_shares(m: usize, p: f64) -> Vec<f64> {
    let c = 1.0 / (1.0 - p.clamp(0.05, 0.95));
    let at = |i: usize| (i as f64 / m as f64).powf(c);
    (0..m).map(|r| at(m - r) - at(m - r - 1)).collect()
}

/// The weights that make a greedy on `weight · speed(w)` give heSRPT's shares: at the optimum
/// every job's marginal speed times its weight is equal, so with `speed = k^p` the weight is
/// `share^(1−p)`. Indexed as `remaining` (work left per job); the largest weight is 1.
pub fn hesrpt_weights(remaining: &[f64], p: f64) -> Vec<f64> {
    let m = remaining.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| remaining[a].total_cmp(&remaining[b]).then(a.cmp(&b)));
    let shares = hesrpt_shares(m, p);
    let q = 1.0 - p.clamp(0.05, 0.95);
    let mut weights = vec![0.0; m];
    for (rank, &j) in order.iter().enumerate() {
        weights[j] = shares[rank].powf(q);
    }
    let top = weights.iter().copied().fold(0.0, f64::max);
    if top > 0.0 {
        weights.iter_mut().for_each(|w| *w /= top);
    }
    weights
}

/// The speed-up exponent `p` of `speed(k) ≈ k^p`, fitted by least squares on log-log over
/// `k = 1..=up_to` (through the origin: `speed(1) = 1`).
pub fn speedup_exponent(speed: impl Fn(u32) -> f64, up_to: u32) -> f64 {
    let (mut xy, mut xx) = (0.0, 0.0);
    for k in 2..=up_to.max(2) {
        let (x, y) = (f64::from(k).ln(), speed(k).max(1e-9).ln());
        xy += x * y;
        xx += x * x;
    }
    (xy / xx).clamp(0.05, 0.95)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Gains, JobBid, Problem, slaq};

    fn linear() -> TimeCurve {
        // One second per iteration on one worker, the work split evenly.
        TimeCurve::fitted(0.0, 1.0, 0.0)
    }

    #[test]
    fn the_term_is_the_share_of_the_remaining_work_done_and_saturates() {
        let f = Finish { time: linear(), remaining_iters: 100.0, horizon_s: 10.0, weight: 2.0 };
        assert!((f.done(1, 1.0) - 0.1).abs() < 1e-9);
        assert!((f.done(4, 1.0) - 0.4).abs() < 1e-9);
        assert_eq!(f.done(20, 1.0), 1.0, "done within the horizon: no more is worth anything");
        assert!((f.done(1, 2.0) - 0.2).abs() < 1e-9, "twice as fast workers");
        let g = Finishing::new(|w: u32| 0.01 * f64::from(w), Some(&f));
        assert!((g.gain(4) - (0.04 + 2.0 * 0.4)).abs() < 1e-9);
        let without = Finishing::new(|w: u32| 0.01 * f64::from(w), None);
        assert_eq!(without.gain(4), 0.04);
        // The table holds the sum where the inner gain keeps one, equal to it wherever both
        // answer; past it the sum answers.
        let inner = crate::policy::table::Tabled::new(|w: u32| 0.01 * f64::from(w), 2, 64);
        let tabled = Finishing::tabled(inner.clone(), Some(&f), &[]);
        assert_eq!(tabled.table().len(), 3);
        for w in 0..30 {
            assert!((tabled.gain(w) - g.gain(w)).abs() < 1e-12, "w = {w}");
        }
        assert_eq!(Finishing::tabled(inner.clone(), None, &[]).table().len(), 3, "no term: the inner table");
        // Terms kept from an earlier call give the same table to the bit, whether they cover
        // it, fall short of it, or run past it.
        for len in [0, 2, 3, 10] {
            let kept = Finishing::tabled(inner.clone(), Some(&f), &f.terms(len));
            let bits = |t: &[f64]| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(kept.table()), bits(tabled.table()), "{len} terms kept");
            // A table summed once and kept answers as the one summed each time.
            let summed = f.summed(inner.table(), &f.terms(len));
            let borrowed = Finishing::kept(inner.clone(), Some(&f), &summed);
            assert_eq!(bits(borrowed.table()), bits(tabled.table()), "{len} terms, summed once");
            for w in 0..30 {
                assert_eq!(borrowed.gain(w).to_bits(), tabled.gain(w).to_bits(), "w = {w}");
            }
        }
        assert_eq!(Finishing::kept(inner.clone(), None, &[1.0]).table().len(), 3, "no term: the inner table");
        // A gain that stops rising at 2 workers, its table ending there, and a term that rises
        // on to 10, then stays: the sum is kept past the gain's table while it does not fall,
        // each value as the allocation reads it.
        let flat = crate::policy::table::Tabled::new(|w: u32| 0.01 * f64::from(w.min(2)), 100, 64);
        assert_eq!(flat.table().len(), 4);
        let past = f.summed_past(&flat, 64);
        assert_eq!(past.len(), 64, "level from 10 workers on: {past:?}");
        let reads = Finishing::new(flat.clone(), Some(&f));
        for (w, v) in past.iter().enumerate() {
            assert_eq!(v.to_bits(), reads.gain(w as u32).to_bits(), "w = {w}");
        }
        assert!(past[..11].windows(2).all(|p| p[1] > p[0]) && past[10..].windows(2).all(|p| p[1] == p[0]));
        let falling = crate::policy::table::Tabled::new(|w: u32| -0.5 * f64::from(w.saturating_sub(3)), 100, 64);
        let stops = f.summed_past(&falling, 64);
        assert!(
            stops.len() < 64 && stops[stops.len() - 1] < stops[stops.len() - 2],
            "ends at its first fall: {stops:?}"
        );
        assert_eq!(f.summed_past(&flat, 6).len(), 6, "at most max_len");
    }

    #[test]
    fn hesrpt_gives_every_job_a_share_and_the_smaller_ones_more() {
        let shares = hesrpt_shares(4, 0.5);
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(shares.windows(2).all(|w| w[0] > w[1] && w[1] > 0.0), "{shares:?}");
        // c = 2: the least remaining gets 1 − (3/4)² of the cluster.
        assert!((shares[0] - 0.4375).abs() < 1e-12);
        // Near p = 0 (no speed-up from more workers) the shares are near equal.
        let flat = hesrpt_shares(4, 0.0);
        assert!(flat.iter().all(|&s| (s - 0.25).abs() < 0.05), "{flat:?}");
        // Weights follow the work left, whatever the jobs' order.
        let w = hesrpt_weights(&[30.0, 10.0, 20.0], 0.5);
        assert!(w[1] == 1.0 && w[1] > w[2] && w[2] > w[0], "{w:?}");
        // A greedy on weight · k^p gives heSRPT's shares (here 16 workers, p = 0.5).
        type Gain = Box<dyn Fn(u32) -> f64>;
        let gains: Vec<JobBid<Gain>> =
            w.iter().map(|&wt| JobBid::new(Some(Box::new(move |k: u32| wt * f64::from(k).sqrt()) as Gain))).collect();
        let got = slaq::allocate(&Problem { num_workers: 16, jobs: &gains }).workers;
        let want = hesrpt_shares(3, 0.5);
        for (j, rank) in [(1, 0), (2, 1), (0, 2)] {
            assert!((f64::from(got[j]) - 16.0 * want[rank]).abs() <= 1.0, "{got:?} against {want:?}");
        }
    }

    #[test]
    fn the_exponent_of_a_power_law_is_found() {
        assert!((speedup_exponent(|k| f64::from(k).powf(0.7), 32) - 0.7).abs() < 1e-9);
        assert_eq!(speedup_exponent(f64::from, 32), 0.95, "clamped below linear");
    }

    /// With a large weight and one worker per job, the greedy serves shortest-remaining-first.
    #[test]
    fn with_a_large_weight_and_one_worker_each_the_shortest_remaining_go_first() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        // Remaining work in whole iterations; quality gains far below what the weight makes of
        // one iteration's difference (the property is the limit of a large weight).
        let case = (proptest::collection::vec((1u32..10_000, 0.0f64..1e-9), 2..20), 1u32..10);
        TestRunner::new(Config { cases: 500, ..Config::default() })
            .run(&case, |(jobs, capacity)| {
                let finishes: Vec<Finish> = jobs
                    .iter()
                    .map(|&(remaining, _)| {
                        let remaining_iters = f64::from(remaining);
                        Finish { time: linear(), remaining_iters, horizon_s: 1.0, weight: 1e6 }
                    })
                    .collect();
                let bids: Vec<JobBid<Finishing<Gains>>> = jobs
                    .iter()
                    .zip(&finishes)
                    .map(|(&(_, quality), finish)| {
                        let gain = Finishing::new(Gains(vec![0.0, quality]), Some(finish));
                        JobBid { min_workers: 0, max_workers: 1, attained_service: 0.0, gain: Some(gain), weight: 1.0 }
                    })
                    .collect();
                let allocation = slaq::allocate(&Problem { num_workers: capacity, jobs: &bids });
                // The sizes served are the smallest ones (equal sizes may go either way).
                let mut served: Vec<u32> =
                    (0..jobs.len()).filter(|&j| allocation.workers[j] == 1).map(|j| jobs[j].0).collect();
                let mut sizes: Vec<u32> = jobs.iter().map(|j| j.0).collect();
                sizes.sort_unstable();
                served.sort_unstable();
                prop_assert_eq!(served, sizes[..(capacity as usize).min(jobs.len())].to_vec());
                Ok(())
            })
            .unwrap();
    }
}
