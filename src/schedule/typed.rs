//! Counts by worker type: the planner's count step on a cluster of several worker types (issue
//! #31). One data-parallel world is one type (Gavel's rule: a mixed world runs at its slowest
//! member's speed), so each job gets a type *and* a count.
//!
//! - [`allocate`]: SLAQ's greedy over (job, type): workers go, a step at a time, to the largest
//!   gain per worker among every job's next allowed size on its type (a job without workers may
//!   start on any type), with each step the steepest one to any larger size (the concave hull's
//!   step, as [`super::bid::concave_hull`] gives the one-type greedy). With one type and every
//!   size allowed it hands out exactly what `policy::slaq::allocate` does (tested).
//! - [`allocate_sized`]: the same with the work the jobs do first, then their gains (the Gavel
//!   simulator's slaq, issue #43).
//! - [`due_grants`]: the finish-time bound of issue #30 on types: a job whose predicted finish,
//!   were it to wait one more epoch, would pass its deadline (K times its fair finish) is granted
//!   the fewest workers of a type that still meet it; jobs already late get their fastest
//!   option. Grants go in order of slack (least first) while capacity lasts; [`allocate`] starts
//!   from them.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A job's gains on one worker type, at the sizes it may run at there.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeGains {
    /// Allowed sizes, ascending, all > 0.
    pub sizes: Vec<u32>,
    /// The gain at each size (the restart a change costs already priced in).
    pub gains: Vec<f64>,
}

/// A job as the typed count step sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TypedJob {
    /// Per type of the cluster: its gains there (`None`: it cannot run there).
    pub options: Vec<Option<TypeGains>>,
    /// Workers it must get first (the bound's grant): a type and a size of it.
    pub grant: Option<(usize, u32)>,
    /// Worker-seconds it has received: leftovers go to the least served first.
    pub attained: f64,
}

/// Each job's type and count (`None`: no workers).
pub type TypedAllocation = Vec<Option<(usize, u32)>>;

/// Caps on groups of jobs (tenants on a typed cluster, issue #43): job `j` is in group `of[j]`
/// (out of range, or `of` empty: none), and a group's jobs together get at most `cap[g]`
/// workers, of whatever types.
#[derive(Clone, Copy, Debug, Default)]
pub struct Groups<'a> {
    pub of: &'a [usize],
    pub cap: &'a [u32],
}

impl Groups<'_> {
    /// No caps.
    pub const NONE: Groups<'static> = Groups { of: &[], cap: &[] };

    fn of(&self, j: usize) -> Option<usize> {
        self.of.get(j).copied().filter(|&g| g < self.cap.len())
    }

    /// The most workers job `j` may get: its group's cap (none: no limit).
    pub fn room_of(&self, j: usize) -> u32 {
        self.of(j).map_or(u32::MAX, |g| self.cap[g])
    }
}

/// What is left to hand out: workers per type, and per group.
struct Room<'a> {
    free: Vec<u32>,
    left: Vec<u32>,
    groups: Groups<'a>,
}

impl<'a> Room<'a> {
    fn new(capacity: &[u32], groups: Groups<'a>) -> Room<'a> {
        Room { free: capacity.to_vec(), left: groups.cap.to_vec(), groups }
    }

    /// The most workers job `j` may still add, of any type (its group's room).
    fn limit(&self, j: usize) -> u32 {
        self.groups.of(j).map_or(u32::MAX, |g| self.left[g])
    }

    /// Whether job `j` may add `n` workers of type `ty`.
    fn fits(&self, j: usize, ty: usize, n: u32) -> bool {
        self.free.get(ty).is_some_and(|&f| f >= n) && self.limit(j) >= n
    }

    /// Job `j` changes from `had` to `now` workers of type `ty` (`now >= had`).
    fn take(&mut self, j: usize, ty: usize, had: u32, now: u32) {
        self.free[ty] -= now - had;
        if let Some(g) = self.groups.of(j) {
            self.left[g] -= now - had;
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Step {
    key: f64,
    job: usize,
    ty: usize,
    size: u32,
}

impl Eq for Step {}
impl PartialOrd for Step {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Step {
    fn cmp(&self, other: &Self) -> Ordering {
        // Largest key first; ties to the lower job, then the lower type.
        self.key.total_cmp(&other.key).then(other.job.cmp(&self.job)).then(other.ty.cmp(&self.ty))
    }
}

/// The best next step of `job` from `now` (its type and size, or none) within the room left.
fn best_step(j: usize, job: &TypedJob, now: Option<(usize, u32)>, room: &Room<'_>) -> Option<Step> {
    let mut best: Option<Step> = None;
    let mut consider = |ty: usize, g: &TypeGains, from: u32, base: f64| {
        for (&size, &gain) in g.sizes.iter().zip(&g.gains) {
            if size <= from || !room.fits(j, ty, size - from) || !gain.is_finite() {
                continue;
            }
            let key = (gain - base) / f64::from(size - from);
            let step = Step { key, job: j, ty, size };
            if best.is_none_or(|b| step > b) {
                best = Some(step);
            }
        }
    };
    match now {
        Some((ty, size)) => {
            if let Some(g) = &job.options[ty] {
                let base = g.sizes.iter().position(|&s| s == size).map_or(0.0, |i| g.gains[i]);
                consider(ty, g, size, base);
            }
        }
        None => {
            for (ty, g) in job.options.iter().enumerate() {
                if let Some(g) = g {
                    consider(ty, g, 0, 0.0);
                }
            }
        }
    }
    best
}

/// The jobs' grants, while capacity lasts (in job order), and the room left.
fn granted<'a>(jobs: &[TypedJob], capacity: &[u32], groups: Groups<'a>) -> (TypedAllocation, Room<'a>) {
    let mut room = Room::new(capacity, groups);
    let mut out: TypedAllocation = vec![None; jobs.len()];
    for (j, job) in jobs.iter().enumerate() {
        if let Some((ty, size)) = job.grant
            && size > 0
            && room.fits(j, ty, size)
        {
            room.take(j, ty, 0, size);
            out[j] = Some((ty, size));
        }
    }
    (out, room)
}

/// SLAQ's greedy by type; see the module documentation. Only steps with a positive gain are
/// taken.
pub fn allocate(jobs: &[TypedJob], capacity: &[u32]) -> TypedAllocation {
    allocate_in(jobs, capacity, Groups::NONE)
}

/// [`allocate`] with each group's jobs held to its cap.
pub fn allocate_in(jobs: &[TypedJob], capacity: &[u32], groups: Groups<'_>) -> TypedAllocation {
    let (mut out, mut room) = granted(jobs, capacity, groups);
    let mut heap: BinaryHeap<Step> =
        jobs.iter().enumerate().filter_map(|(j, job)| best_step(j, job, out[j], &room)).collect();
    while let Some(step) = heap.pop() {
        if step.key <= 0.0 {
            break;
        }
        let j = step.job;
        // Lazy: capacity may have shrunk since the step was computed.
        let Some(fresh) = best_step(j, &jobs[j], out[j], &room) else { continue };
        if fresh.key < step.key || fresh.ty != step.ty || fresh.size != step.size {
            heap.push(fresh);
            continue;
        }
        room.take(j, step.ty, out[j].map_or(0, |(_, s)| s), step.size);
        out[j] = Some((step.ty, step.size));
        if let Some(next) = best_step(j, &jobs[j], out[j], &room) {
            heap.push(next);
        }
    }
    leftovers(jobs, &mut out, &mut room);
    out
}

/// The most jobs [`allocate_exact`] solves as an LP.
pub const EXACT_MAX_JOBS: usize = 512;

/// The branch-and-bound nodes [`allocate_exact_in`] searches with groups before it settles for
/// its best whole choice so far (or, without one, leaves it to the greedy).
const MIP_NODE_LIMIT: u64 = 2_000;

/// The same objective solved exactly for several types: maximise `Σ_j g_j(t_j, k_j)` over one
/// (type, size) per job within each type's capacity, as an LP over every job's options (at most
/// one chosen per job) solved with `microlp`, then rounded: jobs the LP sets whole keep their
/// option; the fractional ones (at most one per binding constraint) take, in the order of their
/// largest fraction, the best option that still fits. The greedy ([`allocate`]) is exact for one
/// type and concave gains; across types it is not: it gives a fast type to whichever job gains
/// most there, where the LP gives it to the job that loses most elsewhere (Gavel's comparative
/// advantage). Grants and leftovers as in [`allocate`]; if the solver fails, or more than
/// [`EXACT_MAX_JOBS`] jobs compete (the LP takes about 250 ms at 400 jobs on this machine, see
/// `slaq bench alloc --types 3`), the greedy decides.
pub fn allocate_exact(jobs: &[TypedJob], capacity: &[u32]) -> TypedAllocation {
    allocate_exact_in(jobs, capacity, Groups::NONE)
}

/// [`allocate_exact`] with each group's jobs held to its cap (a constraint of the LP, and of
/// the rounding, the greedy and the leftovers).
pub fn allocate_exact_in(jobs: &[TypedJob], capacity: &[u32], groups: Groups<'_>) -> TypedAllocation {
    use microlp::{ComparisonOp, OptimizationDirection, Problem};
    if jobs.len() > EXACT_MAX_JOBS {
        return allocate_in(jobs, capacity, groups);
    }
    let (mut out, mut room) = granted(jobs, capacity, groups);
    // With groups (tenants), whole options: a rounded LP can leave a group short of its cap
    // where another choice of types fills every cap.
    let whole = !groups.cap.is_empty();
    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let mut per_type: Vec<Vec<(microlp::Variable, f64)>> = vec![Vec::new(); room.free.len()];
    let mut per_group: Vec<Vec<(microlp::Variable, f64)>> = vec![Vec::new(); room.left.len()];
    let mut vars: Vec<(usize, usize, u32, f64, microlp::Variable)> = Vec::new();
    for (j, job) in jobs.iter().enumerate().filter(|(j, _)| out[*j].is_none()) {
        let mut one: Vec<(microlp::Variable, f64)> = Vec::new();
        for (ty, g) in job.options.iter().enumerate() {
            let Some(g) = g else { continue };
            for (&size, &gain) in g.sizes.iter().zip(&g.gains) {
                if !(room.fits(j, ty, size) && gain.is_finite() && gain > 0.0) {
                    continue;
                }
                let v = if whole { lp.add_binary_var(gain) } else { lp.add_var(gain, (0.0, 1.0)) };
                one.push((v, 1.0));
                per_type[ty].push((v, f64::from(size)));
                if let Some(g) = groups.of(j) {
                    per_group[g].push((v, f64::from(size)));
                }
                vars.push((j, ty, size, gain, v));
            }
        }
        if !one.is_empty() {
            lp.add_constraint(one.as_slice(), ComparisonOp::Le, 1.0);
        }
    }
    let limits = per_type.iter().zip(&room.free).chain(per_group.iter().zip(&room.left));
    for (terms, &limit) in limits {
        if !terms.is_empty() {
            lp.add_constraint(terms.as_slice(), ComparisonOp::Le, f64::from(limit));
        }
    }
    let solved = if vars.is_empty() {
        None
    } else if whole {
        let mut options = microlp::SolveOptions::default();
        options.node_limit = Some(MIP_NODE_LIMIT);
        lp.solve_with(options).ok()
    } else {
        lp.solve().ok()
    };
    let Some(solution) = solved.as_ref().and_then(|o| o.solution()) else {
        return allocate_in(jobs, capacity, groups);
    };
    // Per job, its options with their fractions.
    let mut by_job: Vec<Vec<(f64, f64, usize, u32)>> = vec![Vec::new(); jobs.len()];
    for &(j, ty, size, gain, v) in &vars {
        by_job[j].push((solution.var_value(v), gain, ty, size));
    }
    let mut order: Vec<(f64, usize)> = by_job
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.is_empty())
        .map(|(j, o)| (o.iter().map(|x| x.0).fold(0.0, f64::max), j))
        .filter(|x| x.0 > 1e-6)
        .collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, j) in order {
        let mut options = by_job[j].clone();
        options.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
        if let Some(&(_, _, ty, size)) = options.iter().find(|o| o.0 > 1e-6 && room.fits(j, o.2, o.3)) {
            room.take(j, ty, 0, size);
            out[j] = Some((ty, size));
        }
    }
    leftovers(jobs, &mut out, &mut room);
    out
}

/// Every job's best gain over its options, summed (jobs whose best is not finite left out): a
/// bound no allocation's total gain passes, so a value weighted above it decides first.
pub(crate) fn best_gains(jobs: &[TypedJob]) -> f64 {
    jobs.iter()
        .map(|job| job.options.iter().flatten().flat_map(|g| g.gains.iter().copied()).fold(0.0, f64::max))
        .filter(|g| g.is_finite())
        .sum()
}

/// The work each option of a job does, aligned with [`TypedJob::options`] (per type, one value
/// per size there), in the caller's units (the Gavel simulator: GPUs of the job's own size on its
/// fastest type).
pub type Work = Vec<Option<Vec<f64>>>;

/// [`allocate_exact`] with the work the jobs do decided before their quality (issue #43). Each
/// option is valued at its gain plus `M · work`, with `M` larger than every job's best gain
/// together, so the LP first maximises the work done and only then, among the allocations that
/// do as much, the gain: which jobs run, and where what adds no work goes. The caller says what
/// an option's work is (the Gavel simulator: its throughput against the job's at its own size on
/// its fastest type, in GPUs of that size). With sublinear speed-ups a GPU does more work for a
/// job waiting at its own size than for one growing past it, so nobody grows while others wait
/// (unless growing does more), and with room to spare the spare goes by gain: no mode to pick
/// by load.
pub fn allocate_sized(jobs: &[TypedJob], capacity: &[u32], work: &[Work]) -> TypedAllocation {
    let m = 1.0 + best_gains(jobs);
    let valued: Vec<TypedJob> = jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let options = job
                .options
                .iter()
                .enumerate()
                .map(|(t, o)| {
                    let work = work.get(j).and_then(|w| w.get(t)).and_then(Option::as_ref);
                    o.as_ref().map(|g| TypeGains {
                        sizes: g.sizes.clone(),
                        gains: g
                            .gains
                            .iter()
                            .enumerate()
                            .map(|(i, &gain)| gain + m * work.and_then(|w| w.get(i)).copied().unwrap_or(0.0).max(0.0))
                            .collect(),
                    })
                })
                .collect();
            TypedJob { options, ..job.clone() }
        })
        .collect();
    allocate_exact(&valued, capacity)
}

/// `policy::slaq`'s step 4 by type: workers still free go first to the jobs that have none
/// (least served first; the type that gains most, then the one with most free workers), so a
/// job predicted to have converged still runs and reports; then, round after round, each job
/// (fewest workers first) grows to its next allowed size on its type where that gains no less
/// than it has. Nothing is left idle that a job could use without losing.
fn leftovers(jobs: &[TypedJob], out: &mut TypedAllocation, room: &mut Room<'_>) {
    let mut order: Vec<usize> = (0..jobs.len()).filter(|&j| out[j].is_none()).collect();
    order.sort_by(|&a, &b| jobs[a].attained.total_cmp(&jobs[b].attained).then(a.cmp(&b)));
    for j in order {
        let pick = jobs[j]
            .options
            .iter()
            .enumerate()
            .filter_map(|(t, g)| {
                let g = g.as_ref()?;
                let i = g.sizes.iter().position(|&s| room.fits(j, t, s))?;
                Some((g.gains[i] / f64::from(g.sizes[i]), room.free[t], t, g.sizes[i]))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(b.2.cmp(&a.2)));
        if let Some((_, _, t, size)) = pick {
            room.take(j, t, 0, size);
            out[j] = Some((t, size));
        }
    }
    loop {
        let mut grew = false;
        let mut order: Vec<usize> = (0..jobs.len()).filter(|&j| out[j].is_some()).collect();
        order.sort_by_key(|&j| (out[j].map_or(0, |a| a.1), j));
        for j in order {
            let Some((t, size)) = out[j] else { continue };
            let Some(g) = &jobs[j].options[t] else { continue };
            let Some(i) = g.sizes.iter().position(|&s| s == size) else { continue };
            if let Some((&next, &gain)) = g.sizes.get(i + 1).zip(g.gains.get(i + 1))
                && room.fits(j, t, next - size)
                && gain >= g.gains[i]
            {
                room.take(j, t, size, next);
                out[j] = Some((t, next));
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
}

/// The fair policy on typed workers: heterogeneity-agnostic max-min `counts` (`policy::fair`
/// over the whole cluster, or over each group's cap), each job then put on a type that holds
/// its count (the one it runs on first, else the one with most room); the jobs that fit
/// nowhere whole then get the most that fits (where most is left); what the shrinking left idle goes, as [`allocate`]'s leftovers do, to jobs
/// that can use it (within their group's cap), so no worker idles that a job could run on.
pub fn fair_by_fit(
    counts: &[u32],
    jobs: &[TypedJob],
    capacity: &[u32],
    now: &[Option<(usize, u32)>],
    groups: Groups<'_>,
) -> TypedAllocation {
    let mut room = Room::new(capacity, groups);
    let mut order: Vec<usize> = (0..jobs.len()).filter(|&j| counts[j] > 0).collect();
    order.sort_by_key(|&j| (std::cmp::Reverse(counts[j]), j));
    let mut out = vec![None; jobs.len()];
    // Every job that fits whole first, then the others shrunk to what is left.
    let mut shrunk = Vec::new();
    for j in order {
        let fits = |t: usize, room: &Room<'_>| {
            jobs[j].options[t].as_ref().is_some_and(|g| g.sizes.contains(&counts[j])) && room.fits(j, t, counts[j])
        };
        let types = room.free.len();
        let whole = now[j]
            .map(|x| x.0)
            .filter(|&t| fits(t, &room))
            .or_else(|| (0..types).filter(|&t| fits(t, &room)).max_by_key(|&t| (room.free[t], std::cmp::Reverse(t))));
        match whole {
            Some(t) => {
                room.take(j, t, 0, counts[j]);
                out[j] = Some((t, counts[j]));
            }
            None => shrunk.push(j),
        }
    }
    for j in shrunk {
        let pick = (0..room.free.len())
            .filter_map(|t| {
                let g = jobs[j].options[t].as_ref()?;
                g.sizes.iter().copied().filter(|&k| room.fits(j, t, k) && k <= counts[j]).max().map(|k| (t, k))
            })
            .max_by_key(|&(t, k)| (k, room.free[t], std::cmp::Reverse(t)));
        if let Some((t, k)) = pick {
            room.take(j, t, 0, k);
            out[j] = Some((t, k));
        }
    }
    leftovers(jobs, &mut out, &mut room);
    out
}

/// A job as the typed finish-time bound sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct DueJob {
    /// Steps it has left.
    pub remaining: f64,
    /// Seconds from now to its deadline (K times its fair finish, from its arrival).
    pub time_left: f64,
    /// Per type: (size, steps per second) at each size it may run at there.
    pub options: Vec<Vec<(u32, f64)>>,
    /// Its type and size now.
    pub current: Option<(usize, u32)>,
    /// The largest size a late job is granted.
    pub late_max: u32,
}

/// The bound's grants; see the module documentation. `epoch_s`: until the next decision;
/// `restart_s`: what a change of type or size costs.
pub fn due_grants(jobs: &[DueJob], capacity: &[u32], epoch_s: f64, restart_s: f64) -> TypedAllocation {
    let mut free = capacity.to_vec();
    let mut out: TypedAllocation = vec![None; jobs.len()];
    // (slack, job): the slack at the job's fastest option.
    let mut order: Vec<(f64, usize)> = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let fastest = job.options.iter().flatten().map(|o| o.1).fold(0.0, f64::max);
        if fastest > 0.0 && job.remaining > 0.0 {
            order.push((job.time_left - job.remaining / fastest, j));
        }
    }
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for (_, j) in order {
        let job = &jobs[j];
        let cost = |ty: usize, size: u32| if job.current == Some((ty, size)) { 0.0 } else { restart_s };
        let meets = |ty: usize, size: u32, rate: f64, wait: f64| {
            rate * (job.time_left - wait - cost(ty, size)).max(0.0) >= job.remaining
        };
        // Options that meet the deadline now: fewest workers, then the current one, then the
        // fastest.
        let mut now: Vec<(u32, bool, f64, usize)> = Vec::new();
        let mut late: Vec<(f64, usize, u32)> = Vec::new();
        for (ty, opts) in job.options.iter().enumerate() {
            for &(size, rate) in opts.iter().filter(|o| o.1 > 0.0) {
                if meets(ty, size, rate, 0.0) {
                    now.push((size, job.current != Some((ty, size)), -rate, ty));
                }
                if size <= job.late_max {
                    late.push((rate, ty, size));
                }
            }
        }
        now.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.total_cmp(&b.2)).then(a.3.cmp(&b.3)));
        let pick = if let Some(&(size, _, rate, ty)) = now.first() {
            // Granted only if waiting an epoch at this option would miss the deadline.
            if meets(ty, size, -rate, epoch_s + restart_s) {
                continue;
            }
            now.iter().map(|&(s, _, _, t)| (t, s)).find(|&(t, s)| free[t] >= s)
        } else {
            None
        };
        // Late, or no option that meets it fits: the fastest that fits, within `late_max`.
        late.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.2.cmp(&b.2)).then(a.1.cmp(&b.1)));
        let pick = pick.or_else(|| late.iter().map(|&(_, t, s)| (t, s)).find(|&(t, s)| free[t] >= s));
        if let Some((ty, size)) = pick {
            free[ty] -= size;
            out[j] = Some((ty, size));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{JobBid, Problem};
    use proptest::prelude::*;

    fn one(sizes: &[u32], gains: &[f64]) -> Option<TypeGains> {
        Some(TypeGains { sizes: sizes.to_vec(), gains: gains.to_vec() })
    }

    #[test]
    fn each_job_goes_to_the_type_where_a_worker_gains_most() {
        // Two types of one worker each. Job 0 gains 10 on type 0 and 2 on type 1; job 1 gains 3
        // on either. Greedy: job 0 takes type 0 (10), job 1 type 1 (3).
        let jobs = vec![
            TypedJob { options: vec![one(&[1], &[10.0]), one(&[1], &[2.0])], grant: None, attained: 0.0 },
            TypedJob { options: vec![one(&[1], &[3.0]), one(&[1], &[3.0])], grant: None, attained: 0.0 },
        ];
        assert_eq!(allocate(&jobs, &[1, 1]), vec![Some((0, 1)), Some((1, 1))]);
        // A grant is honoured first even where the greedy would not put it.
        let granted = vec![TypedJob { grant: Some((1, 1)), ..jobs[0].clone() }, jobs[1].clone()];
        assert_eq!(allocate(&granted, &[1, 1]), vec![Some((1, 1)), Some((0, 1))]);
        // A job never spans types: two workers of different types, a job that wants two.
        let big = vec![TypedJob {
            options: vec![one(&[1, 2], &[1.0, 3.0]), one(&[1, 2], &[1.0, 3.0])],
            grant: None,
            attained: 0.0,
        }];
        assert_eq!(allocate(&big, &[1, 1]), vec![Some((0, 1))]);
        // Allowed sizes only: 1 or 4, with the step to 4 paying more per worker.
        let sized = vec![TypedJob { options: vec![one(&[1, 4], &[1.0, 8.0])], grant: None, attained: 0.0 }];
        assert_eq!(allocate(&sized, &[4]), vec![Some((0, 4))]);
        assert_eq!(allocate(&sized, &[3]), vec![Some((0, 1))]);
    }

    #[test]
    fn the_exact_solve_gives_the_fast_type_to_the_job_that_loses_most_elsewhere() {
        // Job 0 gains 10 on the fast type and 9 on the slow one; job 1 10 and 1.4. One of each.
        let jobs = vec![
            TypedJob { options: vec![one(&[1], &[10.0]), one(&[1], &[9.0])], grant: None, attained: 0.0 },
            TypedJob { options: vec![one(&[1], &[10.0]), one(&[1], &[1.4])], grant: None, attained: 0.0 },
        ];
        assert_eq!(allocate(&jobs, &[1, 1]), vec![Some((0, 1)), Some((1, 1))], "the greedy: 11.4");
        assert_eq!(allocate_exact(&jobs, &[1, 1]), vec![Some((1, 1)), Some((0, 1))], "exact: 19");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// One type with every size allowed and concave gains: the same counts as the one-type
        /// greedy (`policy::slaq`), so the typed step extends the planner rather than replacing it.
        #[test]
        fn one_type_is_the_one_type_greedy(
            rates in proptest::collection::vec((0.05f64..2.0, 0.3f64..0.95), 1..8),
            capacity in 1u32..40,
        ) {
            let max = 12u32;
            let curve = |(a, r): (f64, f64), k: u32| a * (1.0 - r.powi(k as i32)) / (1.0 - r);
            let jobs: Vec<TypedJob> = rates.iter().map(|&p| {
                let sizes: Vec<u32> = (1..=max).collect();
                let gains = sizes.iter().map(|&k| curve(p, k)).collect();
                TypedJob { options: vec![Some(TypeGains { sizes, gains })], grant: None, attained: 0.0 }
            }).collect();
            let typed = allocate(&jobs, &[capacity]);
            let fns: Vec<_> = rates.iter().map(|&p| move |k: u32| curve(p, k.min(max))).collect();
            let bids: Vec<JobBid<_>> = fns.iter().map(|f| JobBid { max_workers: max, ..JobBid::new(Some(f)) }).collect();
            let flat = crate::policy::slaq::allocate(&Problem { num_workers: capacity, jobs: &bids });
            let counts: Vec<u32> = typed.iter().map(|a| a.map_or(0, |(_, k)| k)).collect();
            prop_assert_eq!(counts.iter().sum::<u32>(), flat.workers.iter().sum::<u32>());
            let value = |c: &[u32]| c.iter().zip(&rates).map(|(&k, &p)| curve(p, k)).sum::<f64>();
            prop_assert!((value(&counts) - value(&flat.workers)).abs() < 1e-9, "{:?} {:?}", counts, flat.workers);
        }

        /// Never more workers of a type than it has, one type per job, allowed sizes only.
        #[test]
        fn capacity_and_sizes_hold(
            gains in proptest::collection::vec(proptest::collection::vec(0.0f64..5.0, 3), 1..20),
            caps in proptest::collection::vec(0u32..9, 3),
        ) {
            let jobs: Vec<TypedJob> = gains.iter().map(|g| TypedJob {
                options: g.iter().enumerate().map(|(t, &x)| (t != 2 || x > 1.0).then(|| TypeGains {
                    sizes: vec![1, 2, 4], gains: vec![x, 1.5 * x, 2.0 * x],
                })).collect(),
                grant: None,
                attained: 0.0,
            }).collect();
            let a = allocate(&jobs, &caps);
            for (t, &cap) in caps.iter().enumerate() {
                let used: u32 = a.iter().flatten().filter(|x| x.0 == t).map(|x| x.1).sum();
                prop_assert!(used <= cap);
            }
            for (job, got) in jobs.iter().zip(&a) {
                if let Some((t, k)) = *got {
                    prop_assert!(job.options[t].as_ref().is_some_and(|g| g.sizes.contains(&k)));
                }
            }
        }
    }

    #[test]
    fn work_comes_before_growth_and_the_spare_grows_by_gain() {
        // Work by head: each worker up to a job's own size (one here) does one unit.
        let heads = |jobs: &[TypedJob], own: &[u32]| -> Vec<Work> {
            jobs.iter()
                .zip(own)
                .map(|(j, &own)| {
                    j.options
                        .iter()
                        .map(|o| o.as_ref().map(|g| g.sizes.iter().map(|&k| f64::from(k.min(own))).collect()))
                        .collect()
                })
                .collect()
        };
        // Four workers of one type; job 0 gains 1.0 on one, 1.9 on two, 3.5 on four; job 1
        // 0.5 on one. SLAQ's objective alone gives job 0 all four; with demands first, both
        // run and job 0 grows only into what is left.
        let mut typed = vec![
            TypedJob { options: vec![one(&[1, 2, 4], &[1.0, 1.9, 3.5])], grant: None, attained: 0.0 },
            TypedJob { options: vec![one(&[1], &[0.5])], grant: None, attained: 0.0 },
        ];
        assert_eq!(allocate_exact(&typed, &[4]), vec![Some((0, 4)), None]);
        assert_eq!(allocate_sized(&typed, &[4], &heads(&typed, &[1, 1])), vec![Some((0, 2)), Some((0, 1))]);
        // With room for everyone at its size and more, the spare goes where it gains.
        assert_eq!(allocate_sized(&typed, &[5], &heads(&typed, &[1, 1])), vec![Some((0, 4)), Some((0, 1))]);
        // A job at its size is served even when its gain is nil (it must still finish).
        typed[1].options = vec![one(&[1], &[0.0])];
        assert_eq!(allocate_sized(&typed, &[4], &heads(&typed, &[1, 1])), vec![Some((0, 2)), Some((0, 1))]);
        // Types: a two-worker job is not split to grow another past its size.
        let two = vec![
            TypedJob {
                options: vec![one(&[1, 2], &[0.9, 1.2]), one(&[1, 2], &[0.3, 0.4])],
                grant: None,
                attained: 0.0,
            },
            TypedJob { options: vec![one(&[2], &[0.8]), one(&[2], &[0.7])], grant: None, attained: 0.0 },
        ];
        assert_eq!(allocate_sized(&two, &[2, 2], &heads(&two, &[1, 2])), vec![Some((0, 2)), Some((1, 2))]);
        assert_eq!(allocate_sized(&two, &[2, 1], &heads(&two, &[1, 2])), vec![Some((1, 1)), Some((0, 2))]);
        // Work by speed: two fast workers and one slow. Job 0 gains most growing to two fast
        // ones; job 1 runs five times as fast on the fast type. By head, job 0 on both fast
        // workers and job 1 on the slow one do as much; by speed, job 1 runs fast.
        let fast_slow = vec![
            TypedJob { options: vec![one(&[1, 2], &[0.5, 0.95]), one(&[1], &[0.3])], grant: None, attained: 0.0 },
            TypedJob { options: vec![one(&[1], &[0.2]), one(&[1], &[0.04])], grant: None, attained: 0.0 },
        ];
        assert_eq!(allocate_sized(&fast_slow, &[2, 1], &heads(&fast_slow, &[1, 1])), vec![Some((0, 2)), Some((1, 1))]);
        let by_speed: Vec<Work> =
            vec![vec![Some(vec![1.0, 1.0]), Some(vec![0.6])], vec![Some(vec![1.0]), Some(vec![0.2])]];
        let got = allocate_sized(&fast_slow, &[2, 1], &by_speed);
        assert_eq!(got[1], Some((0, 1)), "{got:?}");
        assert!(got[0].is_some_and(|(_, k)| k == 1), "{got:?}");
    }

    #[test]
    fn the_bound_grants_lazily_the_fewest_workers_that_meet_the_deadline() {
        // 1000 steps left, 1 step/s on one worker, 2 on two (type 0); 0.9 on one of type 1.
        let job = |time_left: f64| DueJob {
            remaining: 1000.0,
            time_left,
            options: vec![vec![(1, 1.0), (2, 2.0)], vec![(1, 0.9)]],
            current: None,
            late_max: 2,
        };
        // Plenty of time: no grant.
        assert_eq!(due_grants(&[job(5000.0)], &[2, 1], 60.0, 10.0), vec![None]);
        // 1005 s left: one worker of type 0 would just make it now, not after waiting an epoch.
        assert_eq!(due_grants(&[job(1015.0)], &[2, 1], 60.0, 10.0), vec![Some((0, 1))]);
        // Type 0 full: the fastest option that fits, though it will be late.
        assert_eq!(due_grants(&[job(1015.0)], &[0, 1], 60.0, 10.0), vec![Some((1, 1))]);
        // Late (100 s left): the fastest option within late_max.
        assert_eq!(due_grants(&[job(100.0)], &[2, 1], 60.0, 10.0), vec![Some((0, 2))]);
        assert_eq!(due_grants(&[DueJob { late_max: 1, ..job(100.0) }], &[2, 1], 60.0, 10.0), vec![Some((0, 1))]);
        // Two due jobs, one worker: the one with less slack first, whatever their order.
        let single = |t: f64| DueJob { options: vec![vec![(1, 1.0)], vec![]], ..job(t) };
        assert_eq!(due_grants(&[single(1040.0), single(1015.0)], &[1, 0], 60.0, 10.0), vec![None, Some((0, 1))]);
        assert_eq!(due_grants(&[single(1015.0), single(1040.0)], &[1, 0], 60.0, 10.0), vec![Some((0, 1)), None]);
    }
}
