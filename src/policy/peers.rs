//! The peers' policies (issue #41), each as gain tables for the one greedy
//! ([`super::slaq::allocate`]): a table per job per epoch, built from what the peer reads of the
//! job (its predicted seconds per iteration at each count, its remaining work, its age, its
//! attained service). The greedy then hands workers out one at a time to the largest marginal
//! value, which is each peer's rule (or, for the strict orders, its order).
//!
//! - `optimus` (Peng et al., EuroSys 2018): every job one worker first, then each worker to the
//!   job whose predicted remaining time it cuts most: `g(w) = R·(t(1) − t(w))`.
//! - `pollux` (Qiao et al., OSDI 2021), its `p = −1` power mean of speed-ups: maximise
//!   `(Σ SPEEDUP_j^−1)^−1`, `SPEEDUP_j(w) = t_j(share)/t_j(w)` (relative to the fair share);
//!   `g(w) = −t(w)/t(share)`, every job one worker first. Goodput's batch-size term does not
//!   apply to the curve workloads (their iterations are fixed work).
//! - `tiresias` (Gu et al., NSDI 2019), discretised 2D-LAS without job sizes: queues by attained
//!   service (worker-seconds), jobs in the same queue first come first served; jobs are served in
//!   that order up to their demand (here: the equal share of the cluster when they arrived),
//!   as many as the workers allow.
//! - `themis` (Mahajan et al., NSDI 2020): finish-time fairness `ρ = T_shared/T_ideal`; each
//!   round the fraction `d` of jobs with the worst `ρ` bid, the workers go to maximise the
//!   product of their `1/ρ` (Themis's partial allocation, here its greedy on `Σ −ln ρ`), and what
//!   they leave goes to the others the same way. `T_shared = age + R·t(w)`, `T_ideal =
//!   (done + R)·t(share)` (the job alone on its `1/N` of the cluster).
//!
//! "Every job one worker first" is [`FIRST`]: a first worker worth more than any later one, less
//! the job's attained service, so that when there are more jobs than workers the least served
//! get one first (the greedy would otherwise serve them in job order: first come first served).

use super::Gains;

/// A first worker's value, above any later marginal value.
pub const FIRST: f64 = 1e9;

/// A job as the peers read it.
#[derive(Clone, Copy, Debug)]
pub struct PeerJob<'a> {
    /// Predicted seconds per iteration with `w` workers at `[w]`, `w = 1..`; `[0]` unused.
    pub seconds: &'a [f64],
    /// Predicted iterations left (declared length, or predicted).
    pub remaining_iters: f64,
    /// Iterations done here.
    pub done_iters: f64,
    pub age_s: f64,
    pub attained_service: f64,
}

impl PeerJob<'_> {
    fn max_workers(&self) -> usize {
        self.seconds.len().saturating_sub(1)
    }

    fn t(&self, w: usize) -> f64 {
        self.seconds[w.clamp(1, self.max_workers().max(1))]
    }
}

/// A first worker's value for `job`: [`FIRST`], less its attained service.
fn first(job: &PeerJob<'_>) -> f64 {
    FIRST - job.attained_service.clamp(0.0, FIRST / 2.0)
}

fn table(n: usize, g: impl Fn(usize) -> f64) -> Gains {
    Gains((0..=n).map(|w| if w == 0 { 0.0 } else { g(w) }).collect())
}

/// Optimus: the reduction of the job's predicted remaining time.
pub fn optimus(job: &PeerJob<'_>) -> Gains {
    let r = job.remaining_iters.max(0.0);
    table(job.max_workers(), |w| first(job) + r * (job.t(1) - job.t(w)))
}

/// Pollux with `p = −1`: minus the inverse speed-up relative to the fair share `share`.
pub fn pollux(job: &PeerJob<'_>, share: u32) -> Gains {
    let at_share = job.t(share.max(1) as usize);
    table(job.max_workers(), |w| first(job) - job.t(w) / at_share)
}

/// Tiresias's order: queue (attained service against `queue_limits`, worker-seconds,
/// ascending), then arrival (earliest first, `arrival_s`). Returns each job's priority weight,
/// `2^−rank`: a job's every worker is worth more than all later jobs' together.
pub fn tiresias_priorities(attained: &[f64], arrival_s: &[f64], queue_limits: &[f64]) -> Vec<f64> {
    let queue = |s: f64| queue_limits.iter().filter(|&&l| s >= l).count();
    let mut order: Vec<usize> = (0..attained.len()).collect();
    order.sort_by(|&a, &b| {
        queue(attained[a]).cmp(&queue(attained[b])).then(arrival_s[a].total_cmp(&arrival_s[b])).then(a.cmp(&b))
    });
    let mut weights = vec![0.0; attained.len()];
    for (rank, &j) in order.iter().enumerate() {
        weights[j] = 0.5f64.powi(rank.min(1000) as i32);
    }
    weights
}

/// Tiresias: `priority` per worker up to the job's `demand`, nothing beyond.
pub fn tiresias(job: &PeerJob<'_>, demand: u32, priority: f64) -> Gains {
    let demand = demand.max(1) as usize;
    table(job.max_workers().min(demand), |w| priority * w as f64)
}

/// Themis's finish-time fairness of a job with `w` workers (`share`: the fair share's count).
pub fn themis_rho(job: &PeerJob<'_>, w: usize, share: u32) -> f64 {
    let ideal = (job.done_iters + job.remaining_iters).max(1e-9) * job.t(share.max(1) as usize);
    if w == 0 {
        return f64::INFINITY;
    }
    (job.age_s + job.remaining_iters.max(0.0) * job.t(w)) / ideal
}

/// Themis: which jobs bid this round (the `ceil(d·m)` worst `ρ` at their current counts),
/// given each job's `ρ` now.
pub fn themis_bidders(rho_now: &[f64], d: f64) -> Vec<bool> {
    let m = rho_now.len();
    let k = ((d.clamp(0.0, 1.0) * m as f64).ceil() as usize).min(m);
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| rho_now[b].total_cmp(&rho_now[a]).then(a.cmp(&b)));
    let mut bids = vec![false; m];
    for &j in &order[..k] {
        bids[j] = true;
    }
    bids
}

/// Themis's gains: `−ln ρ(w)` from the first worker. A bidder's first worker is [`FIRST`];
/// the others' values are scaled far below, so they get what the bidders leave.
pub fn themis(job: &PeerJob<'_>, share: u32, bidder: bool) -> Gains {
    let at_one = themis_rho(job, 1, share).ln();
    let (base, scale) = if bidder { (first(job), 1.0) } else { (1.0 + 1.0 / (1.0 + job.attained_service), 1e-6) };
    table(job.max_workers(), |w| scale * (base + at_one - themis_rho(job, w, share).ln()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{GainFn, JobBid, Problem, slaq};

    /// `t(w) = 1/w` seconds per iteration up to 8 workers: linear speed-up.
    fn linear() -> Vec<f64> {
        (0..=8).map(|w| if w == 0 { 0.0 } else { 1.0 / w as f64 }).collect()
    }

    fn job(seconds: &[f64], remaining: f64) -> PeerJob<'_> {
        PeerJob { seconds, remaining_iters: remaining, done_iters: 0.0, age_s: 0.0, attained_service: 0.0 }
    }

    fn allocate(gains: Vec<Gains>, workers: u32) -> Vec<u32> {
        let bids: Vec<JobBid<Gains>> = gains.into_iter().map(|g| JobBid::new(Some(g))).collect();
        slaq::allocate(&Problem { num_workers: workers, jobs: &bids }).workers
    }

    #[test]
    fn optimus_gives_the_long_jobs_the_extra_workers() {
        let t = linear();
        let got = allocate(vec![optimus(&job(&t, 10.0)), optimus(&job(&t, 1000.0))], 6);
        assert_eq!(got, vec![1, 5], "each one first, then the job whose remaining time falls most");
    }

    #[test]
    fn pollux_equalises_speed_ups_against_the_fair_share() {
        let t = linear();
        // Identical jobs: the p = -1 mean is best with equal shares.
        let got = allocate(vec![pollux(&job(&t, 10.0), 3), pollux(&job(&t, 1000.0), 3)], 6);
        assert_eq!(got, vec![3, 3]);
        assert!(pollux(&job(&t, 1.0), 3).gain(3) > pollux(&job(&t, 1.0), 3).gain(2));
    }

    #[test]
    fn tiresias_serves_the_least_attained_queue_then_first_come() {
        // Job 0 came first but has crossed the queue limit; job 2 came before job 1.
        let w = tiresias_priorities(&[500.0, 10.0, 20.0], &[0.0, 30.0, 20.0], &[100.0]);
        assert!(w[2] > w[1] && w[1] > w[0], "{w:?}");
        let t = linear();
        let gains = (0..3).map(|j| tiresias(&job(&t, 1.0), 3, w[j])).collect();
        assert_eq!(allocate(gains, 7), vec![1, 3, 3], "each up to its demand, in order");
    }

    #[test]
    fn themis_bids_the_worst_off_and_gives_them_the_workers_first() {
        let t = linear();
        let starved = PeerJob { age_s: 100.0, ..job(&t, 10.0) };
        let fresh = job(&t, 10.0);
        let rho = [themis_rho(&starved, 1, 4), themis_rho(&fresh, 1, 4)];
        assert!(rho[0] > rho[1]);
        let bids = themis_bidders(&rho, 0.5);
        assert_eq!(bids, vec![true, false]);
        let got = allocate(vec![themis(&starved, 4, bids[0]), themis(&fresh, 4, bids[1])], 8);
        assert_eq!(got, vec![8, 0], "the bidder takes every worker it has use for");
        let both = allocate(vec![themis(&starved, 4, true), themis(&fresh, 4, true)], 8);
        // Both bid: the product of 1/ρ grows most where ρ moves most, the fresh job's (the
        // starved one's ρ is mostly its age, which no worker undoes).
        assert!(both[0] >= 1 && both[1] > both[0], "{both:?}");
        assert_eq!(themis_bidders(&rho, 1.0), vec![true, true]);
    }
}
