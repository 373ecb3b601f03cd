//! [`plan_epoch`]: one epoch's whole decision, from the jobs' bids and models and each worker's
//! current job to each worker's next job, its role, each job's batch and its SLO verdict.
//!
//! 1. **Counts** ([`super::counts`]): each job's own minimum honoured up to its fair share, the
//!    fairness floor, then the policy; jobs that run only at some sizes are held to them.
//! 2. **Workers** ([`super::place`]): with one slot per machine (or no machines) every layout is
//!    equally local, and each job keeps what it can of its workers ([`fewest_moves`]); on machines
//!    with several slots jobs are placed with locality ([`place`]) and the layouts mapped to
//!    workers with the fewest moves ([`assign_workers`]).
//! 3. **Batch and roles** ([`super::batch`]): Courier's batch on the layout chosen, for the jobs
//!    that declare batch sizes; a parameter-server job's last workers serve parameters.
//!
//! Pure and deterministic: the same input gives the same plan (the LP rounding draws from a
//! generator seeded by [`EpochInput::seed`]).

mod types;

use rand::SeedableRng;

use crate::cluster::model::BatchChoice;
use crate::policy::{ByRef, GainFn, JobBid, PolicyKind};

use super::batch::batch_to_run;
use super::counts::{FloorLedger, PlanSettings, honoured_minimums, plan, restrict_sizes};
use super::job::{JobModel, ps_split};
use super::place::{PlaceSettings, assign_workers, fewest_moves, layouts_of, place};
use super::slowdown::Pace;
use super::tenants::{Quotas, TenantShare, quotas_holding};

/// One job as the planner sees it.
#[derive(Clone, Debug)]
pub struct EpochJob<'a, G> {
    /// Its bounds, attained service and gains (`None`: no quality bid).
    pub bid: JobBid<G>,
    /// Its `min_workers` is its own request, honoured up to its fair share
    /// ([`honoured_minimums`]); `false`: the bounds are the scheduler's own (a job that keeps
    /// exactly its workers) and stand.
    pub own_minimum: bool,
    /// The only sizes it may run at, ascending (`None`: any).
    pub sizes: Option<&'a [u32]>,
    /// Its time model: what placement, batch and roles are priced with.
    pub model: &'a JobModel,
    /// Its age, work done and left and rates, for the finish-time bound (`None`: not bounded).
    pub pace: Option<Pace<'a>>,
}

/// Everything one epoch is decided on, besides the floor ledgers.
#[derive(Clone, Debug)]
pub struct EpochInput<'a, G> {
    pub policy: PolicyKind,
    pub plan: PlanSettings,
    pub place: PlaceSettings,
    /// The jobs, in the order of the job indices used in `current`.
    pub jobs: &'a [EpochJob<'a, G>],
    /// Each worker's machine, as a dense index (`None`: every worker is its own machine).
    pub machine_of: Option<&'a [usize]>,
    /// Each worker's job now (an index into `jobs`; anything else is free).
    pub current: &'a [Option<usize>],
    /// Each job's workers in `current`, if the caller keeps them (the allocator keeps them
    /// with its layout); `None`: counted from `current`. With them, an epoch whose counts are
    /// the ones held reads no worker.
    pub held: Option<&'a [u32]>,
    /// Seeds the placement's randomised rounding.
    pub seed: u64,
    /// Worker types (issue #31): each worker's type and each job's speed on each type. With
    /// more than one type in use, each job gets a type and a count ([`super::typed`]), and its
    /// workers are all of that type.
    pub types: Option<Types<'a>>,
    /// Teams (issue #32): each job's tenant and each tenant's share. The count step then runs
    /// inside each tenant's quota ([`super::tenants::quotas`]) on the tenant's own jobs; on
    /// several worker types, one allocation with each tenant's jobs capped by its quota
    /// (issue #43, `epoch/types.rs`).
    pub tenants: Option<Tenancy<'a>>,
    /// Whether some job's model is special ([`JobModel::is_special`]): without one, an epoch
    /// decides no batch and no role. `None`: read from each job's model. A caller that keeps it
    /// (the allocator, per bid) spares that read, a cache miss per job (perf: 3% of an epoch at
    /// 4,000 jobs, 5% at 100,000).
    pub special: Option<bool>,
}

/// Each job's tenant and what each tenant is promised.
#[derive(Clone, Copy, Debug)]
pub struct Tenancy<'a> {
    pub shares: &'a [TenantShare],
    /// `tenant_of[j]`: job `j`'s tenant, an index into `shares` (a job with none gets nothing).
    pub tenant_of: &'a [usize],
    /// Per tenant, the workers its jobs hold within their `min_run_s` (empty: none), which its
    /// quota keeps unless a guarantee needs them ([`super::tenants::quotas_holding`]).
    pub held: &'a [u32],
    /// `class_of[j]`: job `j`'s priority class inside its tenant (empty: all 0). A tenant's
    /// quota serves its higher classes first; each class's jobs share what the classes above
    /// left, by the policy.
    pub class_of: &'a [u8],
}

impl Tenancy<'_> {
    /// Job `j`'s tenant, if it has one the shares know.
    fn of(&self, j: usize) -> Option<usize> {
        self.tenant_of.get(j).copied().filter(|&t| t < self.shares.len())
    }

    /// Each tenant's demand: what its jobs could use together (their `max_workers`, within the
    /// cluster's `num_workers`).
    fn demands<G>(&self, jobs: &[EpochJob<'_, G>], num_workers: u32) -> Vec<u32> {
        let mut demand = vec![0u32; self.shares.len()];
        for (j, job) in jobs.iter().enumerate() {
            if let Some(t) = self.of(j) {
                demand[t] = demand[t].saturating_add(job.bid.max_workers).min(num_workers);
            }
        }
        demand
    }

    /// The tenants' quotas ([`quotas_holding`] on their `demand`) and what `plan` makes inside
    /// them (`workers_of(made, j)`: job `j`'s workers in it). A tenant whose jobs use less than
    /// its quota (they gain nothing from more, or on several types the types they run on are
    /// full) wants only what they use: the quotas are computed again with that demand, so the
    /// rest goes to tenants that want it (demands only fall: at most one pass per tenant). The
    /// ledgers are as they came for every pass. A tenant's quota is at least what its jobs got.
    fn within_quotas<T>(
        &self,
        num_workers: u32,
        mut demand: Vec<u32>,
        ledgers: &mut [FloorLedger],
        mut plan: impl FnMut(&Quotas, &mut [FloorLedger]) -> T,
        workers_of: impl Fn(&T, usize) -> u32,
    ) -> (T, Quotas) {
        let fresh = ledgers.to_vec();
        loop {
            ledgers.clone_from_slice(&fresh);
            let mut q = quotas_holding(num_workers, self.shares, &demand, self.held);
            let made = plan(&q, ledgers);
            let mut used = vec![0u32; self.shares.len()];
            for j in 0..self.tenant_of.len() {
                if let Some(t) = self.of(j) {
                    used[t] += workers_of(&made, j);
                }
            }
            let mut lowered = false;
            for t in 0..used.len() {
                if used[t] < q.workers[t] && used[t] < demand[t] {
                    demand[t] = used[t];
                    lowered = true;
                }
            }
            if !lowered {
                for (w, &u) in q.workers.iter_mut().zip(&used) {
                    *w = (*w).max(u);
                }
                return (made, q);
            }
        }
    }
}

/// The worker types of a cluster and how fast each job runs on each.
#[derive(Clone, Copy, Debug)]
pub struct Types<'a> {
    /// Each worker's type, a dense index (same order as `EpochInput::current`).
    pub type_of: &'a [usize],
    /// `speeds[j][t]`: how many times as fast job `j` runs on type `t` as its gain curve
    /// assumes (0: it cannot run there). A job with no entry runs at 1 everywhere.
    pub speeds: &'a [Vec<f64>],
    /// What moving a job to another type costs it, as the fraction of its gains it keeps (the
    /// restart over the horizon, as `restart_priced` charges a change of count).
    pub keep_on_move: f64,
    /// Jobs sent to try a type nobody has compared (`quality::speeds::explorers`): `(job, type)`.
    pub explore: &'a [(usize, usize)],
}

/// One epoch's decision.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochPlan {
    /// Workers per job.
    pub counts: Vec<u32>,
    /// Each worker's job (same order as `EpochInput::current`) when some worker moves;
    /// `None`: every worker keeps its job (read it with [`EpochPlan::next`]).
    pub moved: Option<Vec<Option<usize>>>,
    /// Whether each worker serves parameters (else it computes).
    pub serves: Vec<bool>,
    /// Each job's batch on its layout, for the jobs that declare batch sizes.
    pub batches: Vec<Option<BatchChoice>>,
    /// Jobs with an SLO that run this epoch, and of them those predicted to miss it.
    pub slo_jobs: usize,
    pub slo_missed: usize,
    /// Each tenant's workers and how they came about, with `EpochInput::tenants`.
    pub quotas: Option<Quotas>,
}

impl EpochPlan {
    /// Each worker's job: the workers moved, or `current` (the plan's input) when none moves.
    pub fn next<'a>(&'a self, current: &'a [Option<usize>]) -> &'a [Option<usize>] {
        self.moved.as_deref().unwrap_or(current)
    }

    /// Whether every worker keeps its job.
    pub fn kept(&self) -> bool {
        self.moved.is_none()
    }
}

/// The epoch's decision (see the module's documentation). `ledgers` (one per job) carry the
/// fairness floor from epoch to epoch: they are read and booked.
pub fn plan_epoch<G: GainFn>(input: &EpochInput<'_, G>, ledgers: &mut [FloorLedger]) -> EpochPlan {
    let num_workers = u32::try_from(input.current.len()).unwrap_or(u32::MAX);
    let typed = input.types.filter(|t| t.type_of.iter().any(|&x| x != t.type_of[0]));
    let mut quotas = None;
    let (counts, moved) = match typed {
        Some(types) => {
            let (counts, next, q) = types::typed_plan(input, &types, ledgers);
            quotas = q;
            (counts, Some(next))
        }
        None => {
            let counts = match input.tenants {
                Some(tenancy) => {
                    let (counts, q) = tenant_counts(input, &tenancy, num_workers, ledgers);
                    quotas = Some(q);
                    counts
                }
                None => counts(input, num_workers, ledgers),
            };
            let moved = workers(input, &counts);
            (counts, moved)
        }
    };
    let mut plan = EpochPlan {
        counts,
        serves: vec![false; input.current.len()],
        batches: vec![None; input.jobs.len()],
        slo_jobs: 0,
        slo_missed: 0,
        moved,
        quotas,
    };
    batches_and_roles(input, &mut plan);
    plan
}

/// Step 2: each worker's next job (`None`: every worker keeps its own). On machines with
/// several slots jobs are placed with locality; otherwise every layout is equally local and the
/// fewest workers move, none when every job's count is the one it holds.
fn workers<G>(input: &EpochInput<'_, G>, counts: &[u32]) -> Option<Vec<Option<usize>>> {
    let fewest = || {
        let counted;
        let held = match input.held {
            Some(held) => held,
            None => {
                counted = held_of(input.current, counts.len());
                &counted
            }
        };
        if held == counts {
            debug_assert_eq!(fewest_moves(counts, input.current), input.current, "the counts held are current's");
            return None;
        }
        Some(fewest_moves(counts, input.current))
    };
    let Some(of) = input.machine_of else { return fewest() };
    let mut capacity = vec![0u32; of.iter().max().map_or(0, |m| m + 1)];
    for &m in of {
        capacity[m] += 1;
    }
    if capacity.iter().all(|&c| c <= 1) {
        return fewest();
    }
    let held = layouts_of(input.jobs.len(), of, input.current);
    let models: Vec<JobModel> =
        input.jobs.iter().zip(held).map(|(j, current)| JobModel { current, ..j.model.clone() }).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(input.seed);
    let layouts = place(&models, counts, &capacity, &input.place, &mut rng);
    Some(assign_workers(&layouts, of, input.current))
}

/// Each of `jobs` jobs' workers in `current`; a worker of a job beyond them makes the counts
/// longer by one, so that they equal no plan's (that worker must be freed).
fn held_of(current: &[Option<usize>], jobs: usize) -> Vec<u32> {
    let mut held = vec![0u32; jobs];
    for j in current.iter().flatten() {
        match held.get_mut(*j) {
            Some(n) => *n += 1,
            None => {
                held.push(0);
                break;
            }
        }
    }
    held
}

/// Step 3: batches, SLO verdicts and roles, for the jobs that have them, on their layouts as
/// placed.
fn batches_and_roles<G>(input: &EpochInput<'_, G>, plan: &mut EpochPlan) {
    let jobs = input.jobs;
    let any_special = || jobs.iter().any(|j| j.model.is_special());
    debug_assert!(input.special.is_none_or(|s| s == any_special()), "the caller's `special` is the models'");
    if !input.special.unwrap_or_else(any_special) {
        return;
    }
    let own: Vec<usize>;
    let of = match input.machine_of {
        Some(of) => of,
        None => {
            own = (0..input.current.len()).collect();
            &own
        }
    };
    let next = plan.next(input.current);
    let layouts = layouts_of(jobs.len(), of, next);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for (w, job) in next.iter().enumerate() {
        if let Some(j) = job.filter(|&j| jobs[j].model.ps) {
            members[j].push(w);
        }
    }
    for (j, job) in jobs.iter().enumerate().filter(|(j, job)| job.model.is_special() && !layouts[*j].is_empty()) {
        let model = job.model;
        let on: Vec<u32> = layouts[j].iter().map(|l| l.1).collect();
        let choice = if model.batches.is_empty() { None } else { batch_to_run(model, &on) };
        plan.batches[j] = choice;
        if let (Some(c), Some(_)) = (choice, model.slo_iter_s) {
            plan.slo_jobs += 1;
            plan.slo_missed += usize::from(!c.meets_slo);
        }
        if model.ps && members[j].len() >= 2 {
            let local = choice.map_or(f64::from(model.limits.min_local), |c| f64::from(c.config.local_bsz));
            let (_, servers) = ps_split(model, members[j].len() as u32, local);
            for &w in members[j].iter().rev().take(servers as usize) {
                plan.serves[w] = true;
            }
        }
    }
}

/// The jobs' bids as the count step takes them: a job's own minimum is a request, honoured
/// within its fair share only (one job asking for the cluster must not take it).
fn bids_of<'g, G>(input: &EpochInput<'g, G>, num_workers: u32) -> Vec<JobBid<ByRef<'g, G>>> {
    let jobs = input.jobs;
    let mut bids: Vec<JobBid<ByRef<'_, G>>> = jobs.iter().map(|j| j.bid.by_ref()).collect();
    if jobs.iter().any(|j| j.own_minimum && j.bid.min_workers > 0) {
        let honoured = honoured_minimums(num_workers, &bids);
        for ((bid, job), min) in bids.iter_mut().zip(jobs).zip(honoured) {
            if job.own_minimum {
                bid.min_workers = min;
            }
        }
    }
    bids
}

/// Step 1 with tenants: each tenant's quota ([`quotas`], its demand being what its jobs could
/// use), then step 1 inside each quota on the tenant's jobs (their floors and bounds against
/// their share of it).
fn tenant_counts<G: GainFn>(
    input: &EpochInput<'_, G>,
    tenancy: &Tenancy<'_>,
    num_workers: u32,
    ledgers: &mut [FloorLedger],
) -> (Vec<u32>, Quotas) {
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); tenancy.shares.len()];
    for j in 0..input.jobs.len() {
        if let Some(t) = tenancy.of(j) {
            members[t].push(j);
        }
    }
    let demand = tenancy.demands(input.jobs, num_workers);
    tenancy.within_quotas(
        num_workers,
        demand,
        ledgers,
        |q, ledgers| counts_in_quotas(input, &members, tenancy.class_of, q, ledgers),
        |out, j| out[j],
    )
}

/// Step 1 inside each tenant's quota, on its own jobs: class by class from the highest, each
/// class on what the classes above it left.
fn counts_in_quotas<G: GainFn>(
    input: &EpochInput<'_, G>,
    members: &[Vec<usize>],
    class_of: &[u8],
    quotas: &Quotas,
    ledgers: &mut [FloorLedger],
) -> Vec<u32> {
    let mut out = vec![0u32; input.jobs.len()];
    let class = |j: usize| class_of.get(j).copied().unwrap_or(0);
    for (t, members) in members.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
        let mut classes: Vec<u8> = members.iter().map(|&j| class(j)).collect();
        classes.sort_unstable_by(|a, b| b.cmp(a));
        classes.dedup();
        let mut left = quotas.workers[t];
        for c in classes {
            let members: Vec<usize> = members.iter().copied().filter(|&j| class(j) == c).collect();
            counts_of(input, &members, left, ledgers, &mut out);
            left -= members.iter().map(|&j| out[j]).sum::<u32>().min(left);
        }
    }
    out
}

/// Step 1 on `members` alone, with `workers`: their counts into `out`.
fn counts_of<G: GainFn>(
    input: &EpochInput<'_, G>,
    members: &[usize],
    workers: u32,
    ledgers: &mut [FloorLedger],
    out: &mut [u32],
) {
    let jobs = sub_jobs(input, members);
    let own = EpochInput {
        policy: input.policy,
        plan: input.plan,
        place: input.place,
        jobs: &jobs,
        machine_of: None,
        current: &[],
        held: None,
        seed: input.seed,
        types: None,
        tenants: None,
        special: None,
    };
    let mut own_ledgers: Vec<FloorLedger> = members.iter().map(|&j| std::mem::take(&mut ledgers[j])).collect();
    let counts = counts(&own, workers, &mut own_ledgers);
    for ((&j, c), ledger) in members.iter().zip(counts).zip(own_ledgers) {
        out[j] = c;
        ledgers[j] = ledger;
    }
}

/// The jobs `members` alone, their gains borrowed.
fn sub_jobs<'a, G>(input: &'a EpochInput<'_, G>, members: &[usize]) -> Vec<EpochJob<'a, ByRef<'a, G>>> {
    members
        .iter()
        .map(|&j| {
            let job = &input.jobs[j];
            EpochJob {
                bid: job.bid.by_ref(),
                own_minimum: job.own_minimum,
                sizes: job.sizes,
                model: job.model,
                pace: job.pace,
            }
        })
        .collect()
}

/// Step 1: workers per job.
fn counts<G: GainFn>(input: &EpochInput<'_, G>, num_workers: u32, ledgers: &mut [FloorLedger]) -> Vec<u32> {
    let jobs = input.jobs;
    let bids = bids_of(input, num_workers);
    let paces: Vec<Option<Pace<'_>>> =
        if jobs.iter().any(|j| j.pace.is_some()) { jobs.iter().map(|j| j.pace).collect() } else { Vec::new() };
    let mut counts = plan(input.policy, &input.plan, num_workers, &bids, &paces, ledgers).workers;
    // Jobs that run only at some sizes get one of them; what that frees goes to others, the
    // least served first.
    if jobs.iter().any(|j| j.sizes.is_some()) {
        let sizes: Vec<Option<&[u32]>> = jobs.iter().map(|j| j.sizes).collect();
        let max: Vec<u32> = bids.iter().map(|b| b.max_workers).collect();
        let mut order: Vec<usize> = (0..bids.len()).collect();
        order.sort_by(|&a, &b| bids[a].attained_service.total_cmp(&bids[b].attained_service));
        restrict_sizes(&mut counts, &sizes, &max, num_workers, &order);
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::place::Layout;
    use crate::schedule::Placer;
    use crate::schedule::job::test_job;
    use proptest::prelude::*;

    type Gain = fn(u32) -> f64;

    fn settings() -> (PlanSettings, PlaceSettings) {
        (
            PlanSettings { floor: 0.0, floor_window: 4, max_slowdown: 0.0 },
            PlaceSettings { placer: Placer::Lp, restart_s: 30.0, horizon_s: 600.0 },
        )
    }

    fn input<'a>(
        jobs: &'a [EpochJob<'a, Gain>],
        machine_of: Option<&'a [usize]>,
        current: &'a [Option<usize>],
    ) -> EpochInput<'a, Gain> {
        let (plan, place) = settings();
        EpochInput {
            policy: PolicyKind::Slaq,
            plan,
            place,
            jobs,
            machine_of,
            current,
            held: None,
            seed: 7,
            types: None,
            tenants: None,
            special: None,
        }
    }

    fn of_job(next: &[Option<usize>], j: usize) -> Vec<usize> {
        next.iter().enumerate().filter(|(_, x)| **x == Some(j)).map(|(w, _)| w).collect()
    }

    #[test]
    fn on_typed_workers_each_job_gets_one_type_where_it_gains_most_against_the_others() {
        // Workers 0-3 are type 0 (fast), 4-7 type 1 (slow). Job 0 runs 8x faster on the fast
        // type, job 1 only 1.25x: job 0 goes fast and job 1 slow, each all on one type, though
        // job 1 gains more per worker on either.
        let model = test_job(Layout::new());
        let g: Gain = |w| 1.0 - 0.8f64.powi(w as i32);
        let job = |max| EpochJob {
            bid: JobBid { max_workers: max, ..JobBid::new(Some(g)) },
            own_minimum: true,
            sizes: None,
            model: &model,
            pace: None,
        };
        let jobs = [job(4), job(4)];
        let type_of = [0, 0, 0, 0, 1, 1, 1, 1];
        let speeds = vec![vec![1.0, 0.125], vec![1.0, 0.8]];
        let types = Types { type_of: &type_of, speeds: &speeds, keep_on_move: 0.9, explore: &[] };
        let current = [None; 8];
        let plan = |current: &[Option<usize>], types: Types<'_>| {
            let input = EpochInput { types: Some(types), ..input(&jobs, None, current) };
            plan_epoch(&input, &mut vec![FloorLedger::default(); 2])
        };
        let p = plan(&current, types);
        assert_eq!(p.counts, vec![4, 4]);
        assert_eq!(of_job(p.next(&current), 0), vec![0, 1, 2, 3]);
        assert_eq!(of_job(p.next(&current), 1), vec![4, 5, 6, 7]);
        // A job may not run on a type (speed 0): job 1 then waits rather than mix.
        let no_slow = vec![vec![1.0, 0.125], vec![1.0, 0.0]];
        let p = plan(&current, Types { speeds: &no_slow, ..types });
        for j in 0..2 {
            let on: Vec<usize> = of_job(p.next(&current), j).iter().map(|&w| type_of[w]).collect();
            assert!(on.windows(2).all(|w| w[0] == w[1]), "job {j} on one type: {on:?}");
        }
        assert!(of_job(p.next(&current), 1).iter().all(|&w| type_of[w] == 0));
        // Under the fair policy: equal counts, one type each.
        let fair = EpochInput { policy: PolicyKind::Fair, types: Some(types), ..input(&jobs, None, &current) };
        let p = plan_epoch(&fair, &mut vec![FloorLedger::default(); 2]);
        assert_eq!(p.counts, vec![4, 4]);
        for j in 0..2 {
            let on: Vec<usize> = of_job(p.next(&current), j).iter().map(|&w| type_of[w]).collect();
            assert!(on.windows(2).all(|w| w[0] == w[1]), "job {j} on one type: {on:?}");
        }
        // One type in use: the untyped path, exactly.
        let one = [0; 8];
        let p1 = plan(&current, Types { type_of: &one, ..types });
        assert_eq!(p1, plan_epoch(&input(&jobs, None, &current), &mut vec![FloorLedger::default(); 2]));
    }

    #[test]
    fn on_typed_workers_the_floor_and_the_bound_are_met_in_equal_share_workers() {
        // Workers 0-3 fast (type 0), 4-7 four times slower for both jobs: each job's
        // equal-share speed is (4·1 + 4·0.25)/8 = 0.625. Job 0 gains on every worker, job 1
        // (converged) on none: pure quality parks job 1 on the slow workers (rate 1.0).
        let model = test_job(Layout::new());
        let eager: Gain = |w| f64::from(w);
        let done: Gain = |_| 0.0;
        let rates: Vec<f64> = (0..=8u32).map(f64::from).collect();
        let pace = Pace {
            age_s: 0.0,
            done: 0.0,
            remaining: 1000.0,
            rates: crate::schedule::slowdown::Rates::new(&rates),
            wait_s: 5.0,
        };
        fn job<'a>(model: &'a JobModel, g: Gain, pace: Option<Pace<'a>>) -> EpochJob<'a, Gain> {
            EpochJob {
                bid: JobBid { max_workers: 8, ..JobBid::new(Some(g)) },
                own_minimum: true,
                sizes: None,
                model,
                pace,
            }
        }
        let type_of = [0, 0, 0, 0, 1, 1, 1, 1];
        let speeds = vec![vec![1.0, 0.25], vec![1.0, 0.25]];
        let types = Types { type_of: &type_of, speeds: &speeds, keep_on_move: 1.0, explore: &[] };
        let current = [None; 8];
        let run = |jobs: &[EpochJob<'_, Gain>], plan: PlanSettings, ledgers: &mut [FloorLedger]| {
            let (_, place) = settings();
            let input = EpochInput {
                policy: PolicyKind::Slaq,
                plan,
                place,
                jobs,
                machine_of: None,
                current: &current,
                held: None,
                seed: 7,
                types: Some(types),
                tenants: None,
                special: None,
            };
            plan_epoch(&input, ledgers)
        };
        let on = |p: &EpochPlan, j: usize| -> (Vec<usize>, f64) {
            let ws = of_job(p.next(&current), j);
            let rate = ws.iter().map(|&w| speeds[j][type_of[w]]).sum();
            (ws.iter().map(|&w| type_of[w]).collect(), rate)
        };
        let no_pace = [job(&model, eager, None), job(&model, done, None)];
        let off = PlanSettings { floor: 0.0, floor_window: 4, max_slowdown: 0.0 };
        let p = run(&no_pace, off, &mut vec![FloorLedger::default(); 2]);
        assert_eq!(on(&p, 1).0, vec![1; 4], "unbounded, the converged job is parked on the slow workers");
        // The service floor (half its share of 4 equal-share workers: 2, worth 1.25 fast
        // workers' speed) is met on fast workers, not by parking it on 2 slow ones.
        let floor = PlanSettings { floor: 0.5, ..off };
        let mut ledgers = vec![FloorLedger::default(); 2];
        let p = run(&no_pace, floor, &mut ledgers);
        let (types_1, rate_1) = on(&p, 1);
        assert!(rate_1 >= 0.625 * 2.0, "floor met in speed: {types_1:?}, rate {rate_1}");
        assert!(types_1.windows(2).all(|w| w[0] == w[1]), "one type: {types_1:?}");
        assert_eq!(types_1, vec![0, 0]);
        // What it got is booked as equal-share workers: 2 fast ones are 3.2.
        assert!((ledgers[1].granted() - 2.0 / 0.625).abs() < 1e-9, "{}", ledgers[1].granted());
        // The finish-time bound (K = 2): fair finish 1000 / (4 · 0.625) = 400 s, so 1.25 units
        // per second are due from now, and waiting an epoch would miss: 2 fast workers.
        let paced = [job(&model, eager, Some(pace)), job(&model, done, Some(pace))];
        let bound = PlanSettings { max_slowdown: 2.0, ..off };
        let p = run(&paced, bound, &mut vec![FloorLedger::default(); 2]);
        let (types_1, rate_1) = on(&p, 1);
        assert_eq!(types_1, vec![0, 0], "bound met on the type fast enough");
        assert!(rate_1 >= 1.25);
    }

    #[test]
    fn a_job_owed_its_floor_is_not_pinned_to_its_type_when_another_type_serves_it_and_the_others_better() {
        // Two fast workers (0, 1) and four slow ones. Each job holds one fast worker and is
        // owed its floor; job 0 runs 7.2 times slower on the slow type, job 1 only 2.1 times.
        // Both floors are met with job 0 on both fast workers and job 1 on the four slow ones,
        // and that is what the gains want: no slow worker may stay idle.
        let model = test_job(Layout::new());
        let g: Gain = |w| 1.0 - 0.8f64.powi(w as i32);
        let job = EpochJob {
            bid: JobBid { max_workers: 4, ..JobBid::new(Some(g)) },
            own_minimum: true,
            sizes: None,
            model: &model,
            pace: None,
        };
        let jobs = [job.clone(), job];
        let type_of = [0, 0, 1, 1, 1, 1];
        let speeds = vec![vec![1.0, 1.0 / 7.2], vec![1.0, 1.0 / 2.1]];
        let types = Types { type_of: &type_of, speeds: &speeds, keep_on_move: 0.9, explore: &[] };
        let current = [Some(1), Some(0), None, None, None, None];
        let (_, place) = settings();
        // A floor of 0.3 of a share of 3: one equal-share worker each, which one fast worker meets.
        let plan = PlanSettings { floor: 0.3, floor_window: 4, max_slowdown: 0.0 };
        let input = EpochInput {
            policy: PolicyKind::Slaq,
            plan,
            place,
            jobs: &jobs,
            machine_of: None,
            current: &current,
            held: None,
            seed: 7,
            types: Some(types),
            tenants: None,
            special: None,
        };
        let p = plan_epoch(&input, &mut vec![FloorLedger::default(); 2]);
        assert_eq!(of_job(p.next(&current), 0), vec![0, 1]);
        assert_eq!(of_job(p.next(&current), 1), vec![2, 3, 4, 5]);
    }

    /// A job of gain `g` that may take up to 8 workers.
    fn up_to_8(g: Gain, model: &JobModel) -> EpochJob<'_, Gain> {
        EpochJob {
            bid: JobBid { max_workers: 8, ..JobBid::new(Some(g)) },
            own_minimum: true,
            sizes: None,
            model,
            pace: None,
        }
    }

    #[test]
    fn with_tenants_each_tenant_s_jobs_share_its_quota_and_idle_guarantees_are_borrowed() {
        // Tenants A and B guaranteed 4 of 8 each. A's job gains on every worker, B's two jobs
        // barely: by quality alone A would take nearly all; each tenant holds its 4 instead,
        // and B's 4 go to its own two jobs.
        let model = test_job(Layout::new());
        let eager: Gain = |w| f64::from(w);
        let meek: Gain = |w| 1e-3 * f64::from(w.min(1));
        let job = |g: Gain| up_to_8(g, &model);
        let jobs = [job(eager), job(meek), job(meek)];
        let shares = [TenantShare::new(4), TenantShare::new(4)];
        let current = [None; 8];
        let plan = |tenant_of: &[usize], jobs: &[EpochJob<'_, Gain>]| {
            let tenancy = Tenancy { shares: &shares, tenant_of, held: &[], class_of: &[] };
            let input = EpochInput { tenants: Some(tenancy), ..input(jobs, None, &current) };
            plan_epoch(&input, &mut vec![FloorLedger::default(); jobs.len()])
        };
        let untenanted = plan_epoch(&input(&jobs, None, &current), &mut vec![FloorLedger::default(); 3]);
        assert!(untenanted.counts[0] >= 6, "{:?}", untenanted.counts);
        let p = plan(&[0, 1, 1], &jobs);
        assert_eq!(p.counts[0], 4);
        assert_eq!(p.counts[1] + p.counts[2], 4);
        assert!(p.counts[1] >= 1 && p.counts[2] >= 1, "{:?}", p.counts);
        let q = p.quotas.expect("quotas");
        assert_eq!((q.workers, q.borrowed), (vec![4, 4], vec![0, 0]));
        // B has no jobs: A borrows B's idle guarantee.
        let p = plan(&[0], &jobs[..1]);
        assert_eq!(p.counts, vec![8]);
        assert_eq!(p.quotas.unwrap().lent, vec![0, 4]);
        // A job of no tenant gets nothing.
        assert_eq!(plan(&[0, 7, 1], &jobs).counts[1], 0);
        // Every worker is given to one job, and each job's workers are what its count says.
        let p = plan(&[0, 1, 1], &jobs);
        for (j, &c) in p.counts.iter().enumerate() {
            assert_eq!(of_job(p.next(&current), j).len() as u32, c);
        }
    }

    #[test]
    fn inside_a_tenant_a_higher_class_is_served_first_and_other_tenants_are_unaffected() {
        // A and B guaranteed 4 of 8 each, all three jobs gaining on every worker. A's meek job
        // of class 1 takes all it can use of A's 4 (3) before A's eager class-0 job gets the
        // rest, which by gain alone would take nearly all; B's job keeps its 4 either way.
        let model = test_job(Layout::new());
        let eager: Gain = |w| f64::from(w);
        let meek: Gain = |w| 1e-3 * f64::from(w);
        let mut high = up_to_8(meek, &model);
        high.bid.max_workers = 3;
        let jobs = [up_to_8(eager, &model), high, up_to_8(eager, &model)];
        let shares = [TenantShare::new(4), TenantShare::new(4)];
        let current = [None; 8];
        let plan = |class_of: &[u8]| {
            let tenancy = Tenancy { shares: &shares, tenant_of: &[0, 0, 1], held: &[], class_of };
            let input = EpochInput { tenants: Some(tenancy), ..input(&jobs, None, &current) };
            plan_epoch(&input, &mut vec![FloorLedger::default(); 3]).counts
        };
        let flat = plan(&[]);
        assert!(flat[1] < 3 && flat[2] == 4, "{flat:?}");
        assert_eq!(plan(&[0, 1, 0]), vec![1, 3, 4]);
        assert_eq!(plan(&[0, 1, 0])[2], flat[2], "B is isolated from A's classes");
    }

    #[test]
    fn on_typed_workers_tenants_hold_their_quotas_and_classes_and_weights_apply_inside() {
        // 12 workers, 6 of each of two types; A and B guaranteed 6 each; every job gains on
        // every worker, on either type.
        let model = test_job(Layout::new());
        let eager: Gain = |w| f64::from(w);
        let meek: Gain = |w| 1e-3 * f64::from(w);
        let type_of = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1];
        let speeds: Vec<Vec<f64>> = Vec::new();
        let types = Types { type_of: &type_of, speeds: &speeds, keep_on_move: 0.9, explore: &[] };
        let shares = [TenantShare::new(6), TenantShare::new(6)];
        let plan =
            |jobs: &[EpochJob<'_, Gain>], tenant_of: &[usize], class_of: &[u8], current: &[Option<usize>], policy| {
                let tenancy = Tenancy { shares: &shares, tenant_of, held: &[], class_of };
                let input =
                    EpochInput { policy, types: Some(types), tenants: Some(tenancy), ..input(jobs, None, current) };
                let p = plan_epoch(&input, &mut vec![FloorLedger::default(); jobs.len()]);
                for (j, &c) in p.counts.iter().enumerate() {
                    let on: Vec<usize> = of_job(p.next(current), j).iter().map(|&w| type_of[w]).collect();
                    assert_eq!(on.len() as u32, c);
                    assert!(on.windows(2).all(|w| w[0] == w[1]), "job {j} on one type: {on:?}");
                }
                p
            };
        let idle = [None; 12];
        // B alone borrows A's idle guarantee: all 12.
        let b = [up_to_8(eager, &model), up_to_8(eager, &model)];
        let p = plan(&b, &[1, 1], &[], &idle, PolicyKind::Slaq);
        assert_eq!(p.counts.iter().sum::<u32>(), 12);
        assert_eq!(p.quotas.expect("quotas").lent, vec![6, 0]);
        // A's job arrives while B's two hold a type each: A takes back its 6.
        let all = [up_to_8(eager, &model), up_to_8(eager, &model), up_to_8(eager, &model)];
        let held: Vec<Option<usize>> = type_of.iter().map(|&t| Some(t + 1)).collect();
        let p = plan(&all, &[0, 1, 1], &[], &held, PolicyKind::Slaq);
        assert_eq!(p.counts[0], 6);
        assert_eq!(p.counts[1] + p.counts[2], 6);
        assert_eq!(p.quotas.expect("quotas").workers, vec![6, 6]);
        // Without tenants, the three split by gain alone and A gets no more than B's each.
        let flat = EpochInput { types: Some(types), ..input(&all, None, &held) };
        assert!(plan_epoch(&flat, &mut vec![FloorLedger::default(); 3]).counts[0] < 6);
        // Inside A, its class-1 job (meek, at most 3) is served first; B is unaffected.
        let mut high = up_to_8(meek, &model);
        high.bid.max_workers = 3;
        let keen: Gain = |w| 100.0 * f64::from(w);
        let classed = [up_to_8(keen, &model), high, up_to_8(eager, &model), up_to_8(eager, &model)];
        let unclassed = plan(&classed, &[0, 0, 1, 1], &[], &idle, PolicyKind::Slaq);
        assert!(unclassed.counts[1] < 3, "by gain alone the meek job gets less: {:?}", unclassed.counts);
        let p = plan(&classed, &[0, 0, 1, 1], &[0, 1, 0, 0], &idle, PolicyKind::Slaq);
        assert_eq!((p.counts[0], p.counts[1], p.counts[2] + p.counts[3]), (3, 3, 6));
        assert_eq!(p.counts[2] + p.counts[3], unclassed.counts[2] + unclassed.counts[3], "B is unaffected");
        // Under fair too: A's class-1 job (at most 5) takes 5 of A's 6, where fair alone gives 3.
        let mut high = up_to_8(meek, &model);
        high.bid.max_workers = 5;
        let classed = [up_to_8(eager, &model), high, up_to_8(eager, &model), up_to_8(eager, &model)];
        let fair = |class_of: &[u8]| plan(&classed, &[0, 0, 1, 1], class_of, &idle, PolicyKind::Fair).counts;
        assert_eq!((fair(&[]), fair(&[0, 1, 0, 0])), (vec![3, 3, 3, 3], vec![1, 5, 3, 3]));
        // Weights inside a tenant, capped by it upstream: fair shares A's 6 as 3 to 1.
        let mut heavy = up_to_8(eager, &model);
        heavy.bid.weight = 3.0;
        let weighted = [heavy, up_to_8(eager, &model), up_to_8(eager, &model), up_to_8(eager, &model)];
        let p = plan(&weighted, &[0, 0, 1, 1], &[], &idle, PolicyKind::Fair);
        assert_eq!(p.counts, vec![5, 1, 3, 3], "4.5 and 1.5, as on one type");
        let tenancy = Tenancy { shares: &shares, tenant_of: &[0, 0, 1, 1], held: &[], class_of: &[] };
        let one = EpochInput { policy: PolicyKind::Fair, tenants: Some(tenancy), ..input(&weighted, None, &idle) };
        assert_eq!(plan_epoch(&one, &mut vec![FloorLedger::default(); 4]).counts, p.counts);
        // And slaq values the heavy job's gains three times: it takes more of A's 6.
        let p = plan(&weighted, &[0, 0, 1, 1], &[], &idle, PolicyKind::Slaq);
        assert!(p.counts[0] > p.counts[1] && p.counts[0] + p.counts[1] == 6, "{:?}", p.counts);
        // A job of no tenant gets nothing.
        assert_eq!(plan(&all, &[0, 7, 1], &[], &idle, PolicyKind::Slaq).counts[1], 0);
    }

    #[test]
    fn with_tenants_a_quota_its_jobs_do_not_use_goes_to_a_tenant_that_wants_it() {
        // A and B guaranteed 4 of 8 each. A's one job slows down past 2 workers: the 2 it
        // leaves of its quota go to B, whose job gains on every worker.
        let model = test_job(Layout::new());
        let eager: Gain = |w| f64::from(w);
        let two: Gain = |w| if w <= 2 { f64::from(w) } else { 2.0 - 0.1 * f64::from(w - 2) };
        let job = |g: Gain| up_to_8(g, &model);
        let jobs = [job(two), job(eager)];
        let shares = [TenantShare::new(4), TenantShare::new(4)];
        let current = [None; 8];
        let tenancy = Tenancy { shares: &shares, tenant_of: &[0, 1], held: &[], class_of: &[] };
        let input = EpochInput { tenants: Some(tenancy), ..input(&jobs, None, &current) };
        let p = plan_epoch(&input, &mut vec![FloorLedger::default(); 2]);
        assert_eq!(p.counts, vec![2, 6]);
        let q = p.quotas.expect("quotas");
        assert_eq!((q.workers, q.lent), (vec![2, 6], vec![2, 0]));
    }

    #[test]
    fn on_machines_a_job_is_packed_and_a_kept_job_keeps_its_workers() {
        // Two machines of four slots; job 0 holds workers 0 and 1 (machine 0) and stays at 2;
        // job 1 gains most and can take 4: it must get one whole machine, not 2 + 2.
        let model = test_job(Layout::new());
        let g0: Gain = |w| [0.0, 1.0, 2.0, 2.0, 2.0][w.min(4) as usize];
        let g1: Gain = |w| f64::from(w.min(4));
        let jobs = [
            EpochJob {
                bid: JobBid { max_workers: 2, ..JobBid::new(Some(g0)) },
                own_minimum: true,
                sizes: None,
                model: &model,
                pace: None,
            },
            EpochJob {
                bid: JobBid { max_workers: 4, ..JobBid::new(Some(g1)) },
                own_minimum: true,
                sizes: None,
                model: &model,
                pace: None,
            },
        ];
        let machine_of = [0, 0, 0, 0, 1, 1, 1, 1];
        let current = [Some(0), Some(0), None, None, None, None, None, None];
        let mut ledgers = vec![FloorLedger::default(); 2];
        let p = plan_epoch(&input(&jobs, Some(&machine_of), &current), &mut ledgers);
        assert_eq!(p.counts, vec![2, 4]);
        assert_eq!(of_job(p.next(&current), 0), vec![0, 1], "kept");
        assert_eq!(of_job(p.next(&current), 1), vec![4, 5, 6, 7], "one whole machine");
        assert!(p.serves.iter().all(|s| !s), "no parameter-server job");
        // The same without machines: the fewest moves, whatever the machines.
        let p = plan_epoch(&input(&jobs, None, &current), &mut ledgers);
        assert_eq!(of_job(p.next(&current), 0), vec![0, 1]);
        assert_eq!(of_job(p.next(&current), 1), vec![2, 3, 4, 5]);
    }

    #[test]
    fn batches_roles_and_slo_verdicts_are_decided_on_the_layout_placed() {
        let batch = test_job(Layout::new());
        let mut ps = test_job(Layout::new());
        ps.ps = true;
        ps.batches.clear();
        let mut slo = test_job(Layout::new());
        slo.slo_iter_s = Some(1e-9);
        let g: Gain = |w| f64::from(w.min(3));
        let job = |model| EpochJob {
            bid: JobBid { max_workers: 3, ..JobBid::new(Some(g)) },
            own_minimum: true,
            sizes: None,
            model,
            pace: None,
        };
        let jobs = [job(&batch), job(&ps), job(&slo)];
        let machine_of: Vec<usize> = (0..12).map(|w| w / 4).collect();
        let current = vec![None; 12];
        let p = plan_epoch(&input(&jobs, Some(&machine_of), &current), &mut vec![FloorLedger::default(); 3]);
        assert_eq!(p.counts, vec![3, 3, 3]);
        let b = p.batches[0].expect("a batch for the job that declares sizes");
        assert_eq!(Some(b), batch_to_run(&batch, &[3]), "Courier's batch on three GPUs of one machine");
        assert_eq!(p.batches[1], None, "the ps job declares no batch");
        let servers = of_job(p.next(&current), 1).into_iter().filter(|&w| p.serves[w]).count() as u32;
        assert_eq!(servers, ps_split(&ps, 3, f64::from(ps.limits.min_local)).1);
        assert!(servers >= 1 && of_job(p.next(&current), 0).iter().all(|&w| !p.serves[w]));
        assert_eq!((p.slo_jobs, p.slo_missed), (1, 1), "an SLO of a nanosecond is missed");
    }

    #[test]
    fn own_minimums_are_honoured_within_the_fair_share_and_the_scheduler_s_bounds_stand() {
        let model = test_job(Layout::new());
        let none: Gain = |_| 0.0;
        let all: Gain = f64::from;
        let jobs = [
            EpochJob {
                bid: JobBid { min_workers: 100, ..JobBid::new(Some(none)) },
                own_minimum: true,
                sizes: None,
                model: &model,
                pace: None,
            },
            EpochJob { bid: JobBid::new(Some(all)), own_minimum: true, sizes: None, model: &model, pace: None },
        ];
        let current = vec![None; 8];
        let p = plan_epoch(&input(&jobs, None, &current), &mut vec![FloorLedger::default(); 2]);
        assert_eq!(p.counts, vec![4, 4], "a minimum of 100 is honoured up to the fair share");
        // The same bound set by the scheduler (a job keeping exactly its workers) stands.
        let pinned = [
            EpochJob {
                bid: JobBid { min_workers: 6, max_workers: 6, ..JobBid::new(Some(none)) },
                own_minimum: false,
                sizes: None,
                model: &model,
                pace: None,
            },
            EpochJob { bid: JobBid::new(Some(all)), own_minimum: true, sizes: None, model: &model, pace: None },
        ];
        let p = plan_epoch(&input(&pinned, None, &current), &mut vec![FloorLedger::default(); 2]);
        assert_eq!(p.counts, vec![6, 2]);
    }

    #[test]
    fn sizes_are_kept_and_the_rest_goes_to_the_least_served() {
        let model = test_job(Layout::new());
        let g: Gain = f64::from;
        let pow2: &[u32] = &[1, 2, 4];
        let jobs = [
            EpochJob {
                bid: JobBid { max_workers: 3, ..JobBid::new(Some(g)) },
                own_minimum: true,
                sizes: Some(pow2),
                model: &model,
                pace: None,
            },
            EpochJob {
                bid: JobBid { max_workers: 3, attained_service: 5.0, ..JobBid::new(Some(g)) },
                own_minimum: true,
                sizes: None,
                model: &model,
                pace: None,
            },
        ];
        let current = vec![None; 6];
        let p = plan_epoch(&input(&jobs, None, &current), &mut vec![FloorLedger::default(); 2]);
        assert_eq!(p.counts, vec![2, 3], "3 is not an allowed size: 2");
        assert_eq!(p.next(&current).iter().filter(|x| x.is_none()).count(), 1);
    }

    /// A plan that gives every job the count it holds moves nobody and says so (`moved` is
    /// `None`), whether the caller gives the counts held or they are counted; a worker of a job
    /// beyond the jobs is freed all the same.
    #[test]
    fn a_plan_that_keeps_every_count_moves_nobody() {
        let model = test_job(Layout::new());
        let g: Gain = f64::from;
        let job = EpochJob {
            bid: JobBid { max_workers: 2, ..JobBid::new(Some(g)) },
            own_minimum: true,
            sizes: None,
            model: &model,
            pace: None,
        };
        let jobs = [job.clone(), job];
        let current = [Some(0), Some(1), Some(0), Some(1)];
        for held in [None, Some(&[2u32, 2][..])] {
            let p =
                plan_epoch(&EpochInput { held, ..input(&jobs, None, &current) }, &mut vec![FloorLedger::default(); 2]);
            assert_eq!(p.counts, vec![2, 2]);
            assert!(p.kept() && p.next(&current) == current, "{p:?}");
        }
        let current = [Some(0), Some(1), Some(0), Some(1), Some(7)];
        let p = plan_epoch(&input(&jobs, None, &current), &mut vec![FloorLedger::default(); 2]);
        assert_eq!(p.moved, Some(vec![Some(0), Some(1), Some(0), Some(1), None]), "the stranger's worker is freed");
        let current = [Some(0), Some(1), Some(0), None];
        let p = plan_epoch(&input(&jobs, None, &current), &mut vec![FloorLedger::default(); 2]);
        assert_eq!(p.moved, Some(vec![Some(0), Some(1), Some(0), Some(1)]), "job 1 grows");
    }

    /// Tenants' shares as the property tests draw them: (guaranteed, weight, borrow and lend
    /// limits).
    fn drawn_shares(drawn: &[(u32, u32, Option<u32>, Option<u32>)]) -> Vec<TenantShare> {
        drawn
            .iter()
            .map(|&(guaranteed, weight, borrow_limit, lend_limit)| TenantShare {
                guaranteed,
                weight: f64::from(weight),
                borrow_limit,
                lend_limit,
            })
            .collect()
    }

    proptest! {
        /// Whatever the bids and the cluster: counts within bounds and the cluster, the workers
        /// mapped exactly to the counts, on as many machines as the cluster's shape needs, and
        /// the same input planned twice gives the same plan.
        #[test]
        fn the_plan_is_consistent_and_deterministic(
            jobs in prop::collection::vec((0u32..4, 1u32..10, 0u32..3, any::<bool>()), 1..8),
            machines in prop::collection::vec(1usize..5, 1..6),
            occupied in prop::collection::vec(prop::option::of(0usize..10), 0..30),
            floor in 0.0f64..1.0,
            seed in any::<u64>(),
        ) {
            let slopes: [Gain; 3] = [|w| f64::from(w).sqrt(), |w| f64::from(w.min(3)), |_| 0.0];
            let model = test_job(Layout::new());
            let mut ps = test_job(Layout::new());
            ps.ps = true;
            let epoch_jobs: Vec<EpochJob<'_, Gain>> = jobs.iter().map(|&(min, max, g, is_ps)| EpochJob {
                bid: JobBid { min_workers: min.min(max), max_workers: max, attained_service: f64::from(g), gain: Some(slopes[g as usize]), weight: 1.0 },
                own_minimum: true,
                sizes: None,
                model: if is_ps { &ps } else { &model },
                pace: None,
            }).collect();
            let machine_of: Vec<usize> = machines.iter().enumerate().flat_map(|(m, &n)| std::iter::repeat_n(m, n)).collect();
            let current: Vec<Option<usize>> = (0..machine_of.len()).map(|w| occupied.get(w).copied().flatten()).collect();
            let (_, place) = settings();
            let input = EpochInput {
                policy: PolicyKind::Slaq,
                plan: PlanSettings { floor, floor_window: 4, max_slowdown: 0.0 },
                place,
                jobs: &epoch_jobs,
                machine_of: Some(&machine_of),
                current: &current,
                held: None,
                seed,
                types: None,
                tenants: None,
                special: None,
            };
            let mut ledgers = vec![FloorLedger::default(); jobs.len()];
            let p = plan_epoch(&input, &mut ledgers.clone());
            prop_assert!(p.counts.iter().sum::<u32>() as usize <= machine_of.len());
            for (j, &c) in p.counts.iter().enumerate() {
                prop_assert!(c <= jobs[j].1);
                prop_assert_eq!(of_job(p.next(&current), j).len(), c as usize, "job {} of {:?}", j, p.counts);
            }
            prop_assert!(p.serves.iter().zip(p.next(&current)).all(|(&s, j)| !s || j.is_some_and(|j| jobs[j].3)));
            prop_assert_eq!(plan_epoch(&input, &mut ledgers), p);
        }

        /// With tenants: each tenant's jobs hold at most its quota, every tenant with demand
        /// at least min(demand, guarantee) of it, and the workers map exactly to the counts.
        #[test]
        fn with_tenants_no_tenant_s_jobs_exceed_its_quota(
            jobs in prop::collection::vec((0usize..4, 1u32..10, 0u32..3), 1..10),
            shares in prop::collection::vec((0u32..12, 1u32..4, prop::option::of(0u32..8), prop::option::of(0u32..8)), 1..4),
            workers in 1usize..30,
            floor in 0.0f64..1.0,
        ) {
            let slopes: [Gain; 3] = [|w| f64::from(w).sqrt(), |w| f64::from(w.min(3)), |_| 0.0];
            let model = test_job(Layout::new());
            let epoch_jobs: Vec<EpochJob<'_, Gain>> = jobs.iter().map(|&(_, max, g)| EpochJob {
                bid: JobBid { max_workers: max, attained_service: f64::from(g), ..JobBid::new(Some(slopes[g as usize])) },
                own_minimum: true,
                sizes: None,
                model: &model,
                pace: None,
            }).collect();
            let shares = drawn_shares(&shares);
            let tenant_of: Vec<usize> = jobs.iter().map(|j| j.0).collect();
            let current = vec![None; workers];
            let (_, place) = settings();
            let input = EpochInput {
                policy: PolicyKind::Slaq,
                plan: PlanSettings { floor, floor_window: 4, max_slowdown: 0.0 },
                place,
                jobs: &epoch_jobs,
                machine_of: None,
                current: &current,
                held: None,
                seed: 1,
                types: None,
                tenants: Some(Tenancy { shares: &shares, tenant_of: &tenant_of, held: &[], class_of: &[] }),
                special: None,
            };
            let p = plan_epoch(&input, &mut vec![FloorLedger::default(); jobs.len()]);
            let q = p.quotas.clone().expect("quotas");
            for t in 0..shares.len() {
                let held: u32 = (0..jobs.len()).filter(|&j| tenant_of[j] == t).map(|j| p.counts[j]).sum();
                let demand: u32 = (0..jobs.len()).filter(|&j| tenant_of[j] == t).map(|j| jobs[j].1).sum::<u32>().min(workers as u32);
                prop_assert!(held <= q.workers[t], "tenant {} holds {} of its {}", t, held, q.workers[t]);
                prop_assert!(q.workers[t] >= demand.min(q.guaranteed[t]));
            }
            for (j, &c) in p.counts.iter().enumerate() {
                prop_assert!(tenant_of[j] < shares.len() || c == 0);
                prop_assert_eq!(of_job(p.next(&current), j).len(), c as usize);
            }
        }

        /// With tenants on several worker types (classes, weights, speeds, workers held now
        /// drawn): no tenant's jobs above its quota, the quotas within the cluster, each job on
        /// one type with exactly its count, and a tenant short of `min(demand, guarantee)`
        /// only where no idle worker is one its jobs could use.
        #[test]
        fn on_typed_workers_with_tenants_no_tenant_s_jobs_exceed_its_quota(
            jobs in prop::collection::vec((0usize..4, 1u32..10, 0u32..3, 0u8..3, 1u32..4, prop::collection::vec(0u32..4, 3)), 1..10),
            shares in prop::collection::vec((0u32..12, 1u32..4, prop::option::of(0u32..8), prop::option::of(0u32..8)), 1..4),
            per_type in prop::collection::vec(1usize..12, 2..4),
            occupied in prop::collection::vec(prop::option::of(0usize..10), 0..30),
            policy in prop::sample::select(vec![PolicyKind::Slaq, PolicyKind::Fair]),
        ) {
            let slopes: [Gain; 3] = [|w| f64::from(w).sqrt(), |w| f64::from(w.min(3)), |_| 0.0];
            let model = test_job(Layout::new());
            let epoch_jobs: Vec<EpochJob<'_, Gain>> = jobs.iter().map(|&(_, max, g, _, weight, _)| EpochJob {
                bid: JobBid { max_workers: max, attained_service: f64::from(g), weight: f64::from(weight), ..JobBid::new(Some(slopes[g as usize])) },
                own_minimum: true,
                sizes: None,
                model: &model,
                pace: None,
            }).collect();
            let shares = drawn_shares(&shares);
            let tenant_of: Vec<usize> = jobs.iter().map(|j| j.0).collect();
            let class_of: Vec<u8> = jobs.iter().map(|j| j.3).collect();
            let speeds: Vec<Vec<f64>> = jobs.iter().map(|j| j.5.iter().map(|&v| f64::from(v) / 2.0).collect()).collect();
            let type_of: Vec<usize> = per_type.iter().enumerate().flat_map(|(t, &n)| std::iter::repeat_n(t, n)).collect();
            let workers = type_of.len();
            let current: Vec<Option<usize>> = (0..workers).map(|w| occupied.get(w).copied().flatten().filter(|&j| j < jobs.len())).collect();
            let types = Types { type_of: &type_of, speeds: &speeds, keep_on_move: 0.9, explore: &[] };
            let (_, place) = settings();
            let input = EpochInput {
                policy,
                plan: PlanSettings { floor: 0.0, floor_window: 4, max_slowdown: 0.0 },
                place,
                jobs: &epoch_jobs,
                machine_of: None,
                current: &current,
                held: None,
                seed: 1,
                types: Some(types),
                tenants: Some(Tenancy { shares: &shares, tenant_of: &tenant_of, held: &[], class_of: &class_of }),
                special: None,
            };
            let p = plan_epoch(&input, &mut vec![FloorLedger::default(); jobs.len()]);
            let q = p.quotas.clone().expect("quotas");
            prop_assert!(q.workers.iter().sum::<u32>() as usize <= workers);
            let mut idle = vec![0u32; per_type.len()];
            for (w, job) in p.next(&current).iter().enumerate() {
                if job.is_none() {
                    idle[type_of[w]] += 1;
                }
            }
            for (j, &c) in p.counts.iter().enumerate() {
                prop_assert!(tenant_of[j] < shares.len() || c == 0);
                let on: Vec<usize> = of_job(p.next(&current), j).iter().map(|&w| type_of[w]).collect();
                prop_assert_eq!(on.len(), c as usize);
                prop_assert!(on.windows(2).all(|w| w[0] == w[1]), "job {} on {:?}", j, on);
            }
            for t in 0..shares.len() {
                let mine: Vec<usize> = (0..jobs.len()).filter(|&j| tenant_of[j] == t).collect();
                let held: u32 = mine.iter().map(|&j| p.counts[j]).sum();
                let demand: u32 = mine.iter().map(|&j| jobs[j].1).sum::<u32>().min(workers as u32);
                prop_assert!(held <= q.workers[t], "tenant {} holds {} of its {}", t, held, q.workers[t]);
                if held < demand.min(q.guaranteed[t]) {
                    // Each of its jobs is at its max, or no idle worker is one it could use.
                    for &j in &mine {
                        let ty = of_job(p.next(&current), j).first().map(|&w| type_of[w]);
                        let usable = |u: usize| idle[u] > 0 && speeds[j][u] > 0.0;
                        let could = match ty {
                            Some(u) => p.counts[j] < jobs[j].1 && usable(u),
                            None => (0..per_type.len()).any(usable),
                        };
                        prop_assert!(!could, "tenant {} holds {} < {}: job {} could grow, idle {:?}", t, held, demand.min(q.guaranteed[t]), j, idle);
                    }
                }
            }
        }
    }
}
