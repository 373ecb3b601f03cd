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

use crate::policy::GainFn;
use crate::quality::TimeCurve;

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
    /// sublinear speed-up, and every cell measured worse (benches/runs/2026-11-26-issue41-*);
    /// heSRPT's optimum gives shares by rank, not by size: the next step.
    pub fn done(&self, workers: u32, speed: f64) -> f64 {
        if workers == 0 || speed <= 0.0 {
            return 0.0;
        }
        if self.remaining_iters <= 0.0 {
            return 1.0;
        }
        let iters = self.horizon_s * speed / self.time.seconds(workers);
        (iters / self.remaining_iters).min(1.0)
    }
}

/// A job's gain with its completion term (none: the gain alone).
#[derive(Clone, Debug)]
pub struct Finishing<G> {
    pub gain: G,
    pub finish: Option<Finish>,
}

impl<G: GainFn> GainFn for Finishing<G> {
    fn gain(&self, workers: u32) -> f64 {
        self.gain.gain(workers) + self.finish.map_or(0.0, |f| f.weight * f.done(workers, 1.0))
    }

    fn table(&self) -> &[f64] {
        // The inner table holds the gain alone.
        if self.finish.is_some() { &[] } else { self.gain.table() }
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        self.gain.gain_at_speed(workers, speed) + self.finish.map_or(0.0, |f| f.weight * f.done(workers, speed))
    }
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
        let g = Finishing { gain: |w: u32| 0.01 * f64::from(w), finish: Some(f) };
        assert!((g.gain(4) - (0.04 + 2.0 * 0.4)).abs() < 1e-9);
        let without = Finishing { gain: |w: u32| 0.01 * f64::from(w), finish: None };
        assert_eq!(without.gain(4), 0.04);
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
                let bids: Vec<JobBid<Finishing<Gains>>> = jobs
                    .iter()
                    .map(|&(remaining, quality)| {
                        let remaining_iters = f64::from(remaining);
                        let finish = Finish { time: linear(), remaining_iters, horizon_s: 1.0, weight: 1e6 };
                        let gain = Finishing { gain: Gains(vec![0.0, quality]), finish: Some(finish) };
                        JobBid { min_workers: 0, max_workers: 1, attained_service: 0.0, gain: Some(gain) }
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
