//! Allocation policies: pure functions from the jobs' bids and the free capacity to a worker
//! count per job. Jobs are dense indices (`JobOrd`): the caller maps its ids to positions in
//! [`Problem::jobs`] and maps the answer back, as quickwit's scheduler does.
//!
//! Every policy has the same signature, `fn(&Problem<G>) -> Allocation`, so the simulator and
//! the live allocator call any of them the same way (see [`PolicyKind::allocate`]).

pub mod fair;
pub mod gavel;
mod kind;
pub mod peers;
pub mod slaq;
pub mod table;

pub use kind::PolicyKind;

use crate::quality::GainCurve;

/// Dense index of a job in a [`Problem`].
pub type JobOrd = usize;

/// A job's predicted gain as a function of its worker count, `g(0) = 0`.
pub trait GainFn {
    fn gain(&self, workers: u32) -> f64;

    /// `g(0), g(1), …` precomputed, if it keeps a table ([`table::Tabled`]): equal to `gain`
    /// wherever both answer. Allocations read it in a tight loop.
    fn table(&self) -> &[f64] {
        &[]
    }

    /// The gain of `workers` workers that run `speed` times as fast as the ones its curve was
    /// measured on (a worker type, issue #31). Exact for a loss predictor's curve; for a bare
    /// table, the gain scaled by the speed (exact where the gain is linear in the work done).
    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        self.gain(workers) * speed
    }
}

impl GainFn for GainCurve {
    fn gain(&self, workers: u32) -> f64 {
        GainCurve::gain(self, workers)
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        if workers == 0 { 0.0 } else { self.gain_of(self.iterations(workers) * speed) }
    }
}

impl<F: Fn(u32) -> f64> GainFn for F {
    fn gain(&self, workers: u32) -> f64 {
        self(workers)
    }
}

/// Gains given as values `g(0), g(1), …, g(n)`, flat past `n` (the deep-learning planner's
/// gains, `schedule::gains`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gains(pub Vec<f64>);

impl GainFn for Gains {
    fn gain(&self, workers: u32) -> f64 {
        let n = self.0.len();
        if n == 0 { 0.0 } else { self.0[(workers as usize).min(n - 1)] }
    }
}

/// A borrowed gain curve bids too (the planner raises bounds without copying curves).
#[derive(Debug)]
pub struct ByRef<'a, G>(pub &'a G);

impl<G: GainFn> GainFn for ByRef<'_, G> {
    fn gain(&self, workers: u32) -> f64 {
        self.0.gain(workers)
    }

    fn table(&self) -> &[f64] {
        self.0.table()
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        self.0.gain_at_speed(workers, speed)
    }
}

/// What a job asks of one allocation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobBid<G> {
    pub min_workers: u32,
    pub max_workers: u32,
    /// Worker-seconds it has received so far: ties in fair shares go to the least served.
    pub attained_service: f64,
    /// Predicted gains; `None` while the job has no prediction yet.
    pub gain: Option<G>,
    /// Its weight among the jobs it shares with (`JobSpec::weight` as its tenant caps it; 1
    /// for all makes every policy what it is unweighted): `fair` water-fills in proportion to
    /// it, `slaq` values its gains times it.
    pub weight: f64,
}

impl<G> JobBid<G> {
    /// A bid with no bounds beyond the cluster and no history.
    pub fn new(gain: Option<G>) -> Self {
        JobBid { min_workers: 0, max_workers: u32::MAX, attained_service: 0.0, gain, weight: 1.0 }
    }

    /// The same bid, its gains borrowed.
    pub fn by_ref(&self) -> JobBid<ByRef<'_, G>> {
        JobBid {
            min_workers: self.min_workers,
            max_workers: self.max_workers,
            attained_service: self.attained_service,
            gain: self.gain.as_ref().map(ByRef),
            weight: self.weight,
        }
    }

    /// The same bid, its gains scaled by its weight ([`Scaled`]).
    pub fn scaled(&self) -> JobBid<Scaled<'_, G>>
    where
        G: GainFn,
    {
        JobBid {
            min_workers: self.min_workers,
            max_workers: self.max_workers,
            attained_service: self.attained_service,
            gain: self.gain.as_ref().map(|g| Scaled::new(g, self.weight)),
            weight: self.weight,
        }
    }
}

/// Whether any job's weight is not 1 (the weighted paths run only then).
pub fn weighted<G>(jobs: &[JobBid<G>]) -> bool {
    jobs.iter().any(|j| j.weight != 1.0)
}

/// A gain scaled by a job's weight, with its table scaled once (`slaq` with weights).
#[derive(Clone, Debug)]
pub struct Scaled<'a, G> {
    gain: &'a G,
    weight: f64,
    table: Vec<f64>,
}

impl<'a, G: GainFn> Scaled<'a, G> {
    pub fn new(gain: &'a G, weight: f64) -> Self {
        let table = if weight == 1.0 { Vec::new() } else { gain.table().iter().map(|g| g * weight).collect() };
        Scaled { gain, weight, table }
    }
}

impl<G: GainFn> GainFn for Scaled<'_, G> {
    fn gain(&self, workers: u32) -> f64 {
        self.gain.gain(workers) * self.weight
    }

    fn table(&self) -> &[f64] {
        if self.weight == 1.0 { self.gain.table() } else { &self.table }
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        self.gain.gain_at_speed(workers, speed) * self.weight
    }
}

/// One allocation decision's input.
#[derive(Clone, Copy, Debug)]
pub struct Problem<'a, G> {
    pub num_workers: u32,
    pub jobs: &'a [JobBid<G>],
}

/// Workers per job, indexed by [`JobOrd`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    pub workers: Vec<u32>,
}

impl Allocation {
    pub fn total(&self) -> u64 {
        self.workers.iter().map(|&w| u64::from(w)).sum()
    }
}

/// A broken post-condition of an allocation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContractViolation {
    #[error("allocation has {got} entries for {want} jobs")]
    WrongLength { got: usize, want: usize },
    #[error("allocation hands out {got} workers but only {capacity} exist")]
    OverCapacity { got: u64, capacity: u32 },
    #[error("job {job} gets {got} workers, above its maximum {max}")]
    AboveMax { job: JobOrd, got: u32, max: u32 },
    #[error("job {job} gets {got} workers, below its minimum {min} although capacity allowed it")]
    BelowMin { job: JobOrd, got: u32, min: u32 },
}

/// Checks what every policy promises: one entry per job, no more workers than exist, maxima
/// respected, and minima met whenever the minima of all jobs fit.
pub fn check_contract<G>(problem: &Problem<'_, G>, allocation: &Allocation) -> Result<(), ContractViolation> {
    if allocation.workers.len() != problem.jobs.len() {
        return Err(ContractViolation::WrongLength { got: allocation.workers.len(), want: problem.jobs.len() });
    }
    if allocation.total() > u64::from(problem.num_workers) {
        return Err(ContractViolation::OverCapacity { got: allocation.total(), capacity: problem.num_workers });
    }
    let minima: u64 = problem.jobs.iter().map(|j| u64::from(j.min_workers.min(j.max_workers))).sum();
    for (job, (bid, &got)) in problem.jobs.iter().zip(&allocation.workers).enumerate() {
        if got > bid.max_workers {
            return Err(ContractViolation::AboveMax { job, got, max: bid.max_workers });
        }
        let min = bid.min_workers.min(bid.max_workers);
        if minima <= u64::from(problem.num_workers) && got < min {
            return Err(ContractViolation::BelowMin { job, got, min });
        }
    }
    Ok(())
}

/// Gives every job its minimum (capped by its maximum), in job order while capacity lasts.
/// Returns the allocation and the capacity left.
fn grant_minima<G>(problem: &Problem<'_, G>) -> (Vec<u32>, u32) {
    let mut left = problem.num_workers;
    let workers = problem
        .jobs
        .iter()
        .map(|j| {
            let w = j.min_workers.min(j.max_workers).min(left);
            left -= w;
            w
        })
        .collect();
    (workers, left)
}

/// One more worker to each job that is a `candidate` (by the workers before any is given)
/// while `left` lasts, least attained service first (then job order); returns what is left. The
/// order is made only when it decides something: with none left, or enough for every candidate,
/// no sort.
fn one_each_by_least_service<G>(
    jobs: &[JobBid<G>],
    workers: &mut [u32],
    left: u32,
    candidate: impl Fn(&[u32], JobOrd) -> bool,
) -> u32 {
    if left == 0 {
        return 0;
    }
    let candidates: Vec<JobOrd> = (0..jobs.len()).filter(|&o| candidate(workers, o)).collect();
    let given =
        if candidates.len() <= left as usize { candidates } else { by_least_service(jobs, candidates.into_iter()) };
    let given = &given[..given.len().min(left as usize)];
    for &o in given {
        workers[o] += 1;
    }
    left - given.len() as u32
}

/// Jobs in the order that ties are broken in: least attained service first, then job order.
fn by_least_service<G>(jobs: &[JobBid<G>], candidates: impl Iterator<Item = JobOrd>) -> Vec<JobOrd> {
    // Sorted as (service, order) pairs side by side: no two are equal, so an unstable sort
    // gives the one order, and no comparison reads a job's bid.
    let mut keyed: Vec<(f64, JobOrd)> = candidates.map(|o| (jobs[o].attained_service, o)).collect();
    keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    keyed.into_iter().map(|(_, o)| o).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bid(min: u32, max: u32) -> JobBid<fn(u32) -> f64> {
        JobBid { min_workers: min, max_workers: max, attained_service: 0.0, gain: None, weight: 1.0 }
    }

    #[test]
    fn the_contract_names_each_broken_promise() {
        let jobs = [bid(1, 3), bid(0, 2)];
        let problem = Problem { num_workers: 4, jobs: &jobs };
        let check = |w: Vec<u32>| check_contract(&problem, &Allocation { workers: w });
        assert_eq!(check(vec![1, 2]), Ok(()));
        assert_eq!(check(vec![3, 1]), Ok(()));
        assert_eq!(check(vec![1]), Err(ContractViolation::WrongLength { got: 1, want: 2 }));
        assert_eq!(check(vec![3, 2]), Err(ContractViolation::OverCapacity { got: 5, capacity: 4 }));
        assert_eq!(check(vec![4, 0]), Err(ContractViolation::AboveMax { job: 0, got: 4, max: 3 }));
        assert_eq!(check(vec![0, 2]), Err(ContractViolation::BelowMin { job: 0, got: 0, min: 1 }));
        // Minima that do not fit the cluster cannot all be met: no violation for missing one.
        let crowded = [bid(3, 3), bid(3, 3)];
        let problem = Problem { num_workers: 4, jobs: &crowded };
        assert_eq!(check_contract(&problem, &Allocation { workers: vec![3, 1] }), Ok(()));
        // Minima that fit exactly must be met.
        let exact = [bid(2, 3), bid(2, 3)];
        let problem = Problem { num_workers: 4, jobs: &exact };
        assert!(check_contract(&problem, &Allocation { workers: vec![3, 1] }).is_err());
        assert_eq!(Allocation { workers: vec![2, 3, 0] }.total(), 5);
    }

    #[test]
    fn tabulated_gains_read_flat_past_their_end() {
        let g = Gains(vec![0.0, 1.0, 1.5]);
        assert_eq!((g.gain(0), g.gain(1), g.gain(2), g.gain(9)), (0.0, 1.0, 1.5, 1.5));
        assert_eq!(Gains(Vec::new()).gain(3), 0.0);
        assert_eq!(ByRef(&g).gain(2), 1.5);
        let curve = |w: u32| f64::from(w) * 2.0;
        assert_eq!(curve.gain(3), 6.0);
        assert!(curve.table().is_empty() && ByRef(&curve).table().is_empty());
    }

    #[test]
    fn a_predictor_s_gain_curve_bids_its_own_gains() {
        use crate::quality::{Model, TimeCurve};
        // A loss falling by 0.01 an iteration, one second an iteration per worker's share:
        // w workers run 10·w iterations in a 10 s epoch and cut the loss by 0.1·w.
        let curve = GainCurve {
            model: Model::Linear { loss: 1.0, slope: -0.01, k0: 0.0 },
            k_now: 0.0,
            model_now: 1.0,
            time: TimeCurve::fitted(0.0, 1.0, 0.0),
            epoch_seconds: 10.0,
            scale: 1.0,
            averaged: false,
        };
        let g = |w| GainFn::gain(&curve, w);
        assert_eq!(g(0), 0.0);
        assert!((g(1) - 0.1).abs() < 1e-12 && (g(3) - 0.3).abs() < 1e-12, "{} {}", g(1), g(3));
        assert_eq!(ByRef(&curve).gain(2), curve.gain(2));
    }

    #[test]
    fn ties_go_to_the_least_served_then_to_the_lower_order() {
        let mut jobs = vec![bid(0, 1); 4];
        for (j, s) in jobs.iter_mut().zip([3.0, 1.0, 1.0, 0.5]) {
            j.attained_service = s;
        }
        assert_eq!(by_least_service(&jobs, 0..4), vec![3, 1, 2, 0]);
        assert_eq!(
            grant_minima(&Problem { num_workers: 3, jobs: &[bid(2, 5), bid(2, 1), bid(4, 9)] }),
            (vec![2, 1, 0], 0)
        );
    }
}
