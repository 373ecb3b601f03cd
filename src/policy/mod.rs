//! Allocation policies: pure functions from the jobs' bids and the free capacity to a worker
//! count per job. Jobs are dense indices (`JobOrd`): the caller maps its ids to positions in
//! [`Problem::jobs`] and maps the answer back, as quickwit's scheduler does.
//!
//! Every policy has the same signature, `fn(&Problem<G>) -> Allocation`, so the simulator and
//! the live allocator call any of them the same way (see [`PolicyKind::allocate`]).

pub mod fair;
pub mod placement;
pub mod slaq;
pub mod table;

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
}

impl GainFn for GainCurve {
    fn gain(&self, workers: u32) -> f64 {
        GainCurve::gain(self, workers)
    }
}

impl<F: Fn(u32) -> f64> GainFn for F {
    fn gain(&self, workers: u32) -> f64 {
        self(workers)
    }
}

/// Gains given as values `g(0), g(1), …, g(n)`, flat past `n` (the deep-learning planner's
/// gains, `cluster::planner::gains`).
#[derive(Clone, Debug, PartialEq)]
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
}

impl<G> JobBid<G> {
    /// A bid with no bounds beyond the cluster and no history.
    pub fn new(gain: Option<G>) -> Self {
        JobBid { min_workers: 0, max_workers: u32::MAX, attained_service: 0.0, gain }
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

/// The allocation policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Greedy marginal gain ([`slaq::allocate`]).
    Slaq,
    /// Work-conserving max-min fair share ([`fair::allocate`]).
    Fair,
}

impl PolicyKind {
    pub fn allocate<G: GainFn>(self, problem: &Problem<'_, G>) -> Allocation {
        match self {
            PolicyKind::Slaq => slaq::allocate(problem),
            PolicyKind::Fair => fair::allocate(problem),
        }
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

/// Jobs in the order that ties are broken in: least attained service first, then job order.
fn by_least_service<G>(jobs: &[JobBid<G>], candidates: impl Iterator<Item = JobOrd>) -> Vec<JobOrd> {
    let mut order: Vec<JobOrd> = candidates.collect();
    order.sort_by(|&a, &b| jobs[a].attained_service.total_cmp(&jobs[b].attained_service).then(a.cmp(&b)));
    order
}
