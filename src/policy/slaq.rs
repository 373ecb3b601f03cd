//! SLAQ's allocation: workers go one at a time to the job with the largest marginal predicted
//! gain `g(w+1) − g(w)`, from a max-heap.
//!
//! 1. Every job gets its minimum (in job order while capacity lasts).
//! 2. Jobs without a prediction yet get a fair share of the cluster, `⌊W / #jobs⌋` (at least one
//!    worker while any is free), as in SLAQ's prototype.
//! 3. The greedy phase: pop the largest marginal gain, give that job one worker, push its next
//!    marginal gain; stop when the best marginal gain is not positive or nothing is free. Equal
//!    gains go to the lower job order, so the result is deterministic.
//! 4. Workers still free go one each to jobs that have none (least served first), so a job
//!    predicted to have converged still reports now and then and its prediction can change;
//!    the rest are dealt round-robin (fewest workers first) to jobs whose predicted gain does
//!    not fall with one more worker, so the policy is work-conserving without slowing anyone
//!    down. Workers that would slow every job stay idle.
//!
//! Step 3 runs as a threshold search over the marginal gains ([`allocate`]), linear in the
//! workers handed out; [`allocate_by_heap`] runs it as the heap and is its definition (a
//! property test holds them equal, ties included). Gains are best given as
//! [`super::table::Tabled`] curves, so the search reads numbers.
//!
//! When every `g` is concave (diminishing returns, as with a decaying loss curve and a
//! sublinear speed-up) the greedy phase maximises `Σ g_j(w_j)` subject to the capacity and the
//! bounds: this is the classic result for separable concave resource allocation. When a `g` is
//! not concave (e.g. a speed-up that only pays off past several workers) greedy can stop early
//! on that job; it then allocates as if the job's curve were its prefix up to the first dip.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use super::{Allocation, GainFn, JobBid, JobOrd, Problem, grant_minima, one_each_by_least_service};

#[derive(Clone, Copy, Debug)]
struct Candidate {
    marginal: f64,
    ord: JobOrd,
    /// `g(w)` at the job's current count, so each pop evaluates `g` once.
    gain_now: f64,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap on the gain; on equal gains the lower job order is "greater" (popped first).
        self.marginal.total_cmp(&other.marginal).then_with(|| other.ord.cmp(&self.ord))
    }
}

/// The SLAQ allocation; see the module documentation. The greedy phase runs as a threshold
/// search ([`greedy_by_threshold`]); [`allocate_by_heap`] is the same policy one heap pop per
/// worker, the definition this one is tested against.
pub fn allocate<G: GainFn>(problem: &Problem<'_, G>) -> Allocation {
    allocate_with(problem, greedy_by_threshold)
}

/// The SLAQ allocation with the greedy phase as a max-heap popped once per worker: the
/// reference [`allocate`] must equal exactly (`tests/it/policy_props.rs`), and a benchmark
/// baseline (`slaq bench alloc`).
pub fn allocate_by_heap<G: GainFn>(problem: &Problem<'_, G>) -> Allocation {
    allocate_with(problem, greedy_by_heap)
}

/// A greedy phase: hands out at most `left` workers on top of `workers` and returns how many
/// are still free.
type Greedy<G> = fn(&[JobBid<G>], &mut [u32], u32) -> u32;

fn allocate_with<G: GainFn>(problem: &Problem<'_, G>, greedy: Greedy<G>) -> Allocation {
    let jobs = problem.jobs;
    let (mut workers, mut left) = grant_minima(problem);
    if jobs.is_empty() {
        return Allocation { workers };
    }

    let fair_share = (problem.num_workers / jobs.len() as u32).max(1);
    for (ord, job) in jobs.iter().enumerate() {
        if job.gain.is_none() {
            let want = fair_share.min(job.max_workers).saturating_sub(workers[ord]).min(left);
            workers[ord] += want;
            left -= want;
        }
    }

    left = greedy(jobs, &mut workers, left);

    // Leftovers: first one each to jobs that have none (least served first), then round-robin
    // (fewest workers first) to jobs that one more worker does not slow down.
    left = one_each_by_least_service(jobs, &mut workers, left, |w, o| w[o] == 0 && jobs[o].max_workers > 0);
    deal_harmless(jobs, &mut workers, left);
    Allocation { workers }
}

/// Step 4's round-robin: while `left` lasts, one worker at a time to the open job with the
/// fewest workers (the lower job order on ties) if one more worker does not lower its gain; a
/// job it would is passed over for good.
///
/// As a min-heap on `(workers, order)` popped once per worker; dealt here from two queues in
/// that order instead: the jobs not yet dealt to, sorted, and the jobs just given a worker,
/// which come out sorted as they went in (each goes in one worker above the one that came out,
/// and those come out in order). Merging them pops what the heap would, without its `log n`
/// per worker: at thousands of jobs the heap was a tenth of an epoch.
fn deal_harmless<G: GainFn>(jobs: &[JobBid<G>], workers: &mut [u32], mut left: u32) {
    if left == 0 {
        return;
    }
    let mut waiting: Vec<JobOrd> = (0..jobs.len()).filter(|&o| workers[o] < jobs[o].max_workers).collect();
    waiting.sort_unstable_by_key(|&o| (workers[o], o));
    let mut waiting = waiting.into_iter().peekable();
    let mut dealt: VecDeque<JobOrd> = VecDeque::new();
    // Each job's gain at its current workers once computed (NaN: not yet): a job given a worker
    // is checked again at one more, and its gain there is the one just computed.
    let mut gain_at = vec![f64::NAN; jobs.len()];
    while left > 0 {
        let from_dealt = match (waiting.peek(), dealt.front()) {
            (Some(&a), Some(&b)) => (workers[b], b) < (workers[a], a),
            (None, Some(_)) => true,
            (_, None) => false,
        };
        let Some(ord) = (if from_dealt { dealt.pop_front() } else { waiting.next() }) else { break };
        let w = workers[ord];
        let harmless = jobs[ord].gain.as_ref().is_none_or(|g| {
            let now = if gain_at[ord].is_nan() { g.gain(w) } else { gain_at[ord] };
            let next = g.gain(w + 1);
            gain_at[ord] = next;
            next >= now
        });
        if harmless {
            workers[ord] += 1;
            left -= 1;
            if workers[ord] < jobs[ord].max_workers {
                dealt.push_back(ord);
            }
        }
    }
}

/// The greedy phase as a heap: pop the largest marginal gain, give that job a worker, push its
/// next marginal gain. The job on top gets a worker and its next marginal gain replaces it in
/// place (one sift-down instead of a pop and a push: this loop runs once per worker).
fn greedy_by_heap<G: GainFn>(jobs: &[JobBid<G>], workers: &mut [u32], mut left: u32) -> u32 {
    let mut heap = BinaryHeap::with_capacity(jobs.len());
    for (ord, job) in jobs.iter().enumerate() {
        if let Some(g) = job.gain.as_ref().filter(|_| workers[ord] < job.max_workers) {
            let gain_now = g.gain(workers[ord]);
            let marginal = g.gain(workers[ord] + 1) - gain_now;
            if marginal.is_finite() {
                heap.push(Candidate { marginal, ord, gain_now });
            }
        }
    }
    while left > 0 {
        let Some(mut top) = heap.peek_mut() else { break };
        if top.marginal <= 0.0 {
            break;
        }
        let ord = top.ord;
        workers[ord] += 1;
        left -= 1;
        let w = workers[ord];
        let gain_now = top.gain_now + top.marginal;
        let next = jobs[ord].gain.as_ref().filter(|_| w < jobs[ord].max_workers).map(|g| g.gain(w + 1) - gain_now);
        match next {
            Some(marginal) if marginal.is_finite() => *top = Candidate { marginal, ord, gain_now },
            _ => {
                std::collections::binary_heap::PeekMut::pop(top);
            }
        }
    }
    left
}

/// One job's walk along its marginal gains in the threshold search.
struct Run {
    ord: JobOrd,
    /// Workers it has if every marginal generated so far is taken.
    w: u32,
    /// The gain at `w`, accumulated exactly as the heap accumulates it (`gain + marginal`), so
    /// the marginals are bit-for-bit the heap's.
    acc: f64,
    /// The smallest marginal generated so far (the key of the last entry).
    key: f64,
    /// Whether more entries may follow (not at its maximum, no non-finite or non-positive key).
    open: bool,
}

impl Run {
    /// Generates up to `count` more entries `(key bits, run)` into `out`, stopping after the
    /// first whose key is below `stop_below`; closes the run when no more can follow.
    fn extend<G: GainFn>(
        &mut self,
        job: &JobBid<G>,
        index: u32,
        count: usize,
        stop_below: u64,
        out: &mut Vec<(u64, u32)>,
    ) {
        let Some(g) = job.gain.as_ref() else {
            self.open = false;
            return;
        };
        let end = self.w.saturating_add(count.min(u32::MAX as usize) as u32).min(job.max_workers);
        // From the table while it lasts (a tight loop), then from the curve.
        let table = g.table();
        let (mut w, mut acc, mut key) = (self.w, self.acc, self.key);
        let mut open = true;
        while w < end {
            let next = match table.get(w as usize + 1) {
                Some(&v) => v,
                None => g.gain(w + 1),
            };
            let marginal = next - acc;
            let k = key.min(marginal);
            // The heap drops a job at a non-finite marginal and stops at a non-positive one;
            // later keys of this job are no larger, so nothing after it is ever taken.
            if !marginal.is_finite() || k <= 0.0 {
                open = false;
                break;
            }
            out.push((k.to_bits(), index));
            acc += marginal;
            key = k;
            w += 1;
            if k.to_bits() < stop_below {
                break;
            }
        }
        self.open = open && w < job.max_workers;
        (self.w, self.acc, self.key) = (w, acc, key);
    }
}

/// The greedy phase as a threshold search, without a heap pop per worker.
///
/// Give each job's `k`-th marginal gain the key `p_k = min(m_1, …, m_k)` (its prefix minimum).
/// The heap pops entries in decreasing key, equal keys in increasing job order and then in
/// increasing `k`: the job on top of the heap at any time holds the largest key among the
/// heads (a job whose head rose after a dip was already behind that dip's key). So the heap's
/// first `left` pops are exactly the `left` largest keys in that order, positive keys only (a
/// pop at a non-positive marginal stops it, and keys never rise). This finds the key `τ` of the
/// last worker handed out by selection over the keys generated so far, generating more of a job's
/// keys only while they could still be above `τ` (or tied at it and reached in job order), in
/// chunks that double. Every job takes its keys above `τ`; the rest go to keys equal to `τ`
/// in job order. The cost is linear in the keys generated, about `left` plus a few per job,
/// instead of `left · log(jobs)` heap operations each evaluating a gain. The first round
/// generates each job's keys down to the previous decision's threshold on this thread, which
/// usually leaves one selection to do; the property tests run thousands of unrelated problems
/// on one thread, so every hint, good or bad, is tested to give the heap's answer.
fn greedy_by_threshold<G: GainFn>(jobs: &[JobBid<G>], workers: &mut [u32], left: u32) -> u32 {
    if left == 0 {
        return 0;
    }
    SCRATCH.with_borrow_mut(|scratch| {
        let left = threshold_in(scratch, jobs, workers, left);
        scratch.clear();
        left
    })
}

/// The threshold search's buffers, kept per thread between decisions: at 100,000 jobs they
/// are tens of megabytes, and fresh pages for them every epoch cost more than the search.
#[derive(Default)]
struct Scratch {
    runs: Vec<Run>,
    entries: Vec<(u64, u32)>,
    grow: Vec<u32>,
    per_run: Vec<(u32, u32)>,
    /// The threshold of this thread's last decision: consecutive epochs are alike, so the first
    /// round generates each job's keys down to it. Only a hint: any value gives the same answer.
    last_tau: Option<u64>,
}

impl Scratch {
    fn clear(&mut self) {
        self.runs.clear();
        self.entries.clear();
        self.grow.clear();
        self.per_run.clear();
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

fn threshold_in<G: GainFn>(scratch: &mut Scratch, jobs: &[JobBid<G>], workers: &mut [u32], left: u32) -> u32 {
    let Scratch { runs, entries, grow, per_run, last_tau } = scratch;
    runs.extend(jobs.iter().enumerate().filter_map(|(ord, job)| {
        let g = job.gain.as_ref().filter(|_| workers[ord] < job.max_workers)?;
        let w = workers[ord];
        Some(Run { ord, w, acc: g.gain(w), key: f64::INFINITY, open: true })
    }));
    if runs.is_empty() {
        return left;
    }
    let want = left as usize;
    entries.reserve(want + 2 * runs.len());
    let mut chunk = want.div_ceil(runs.len()) + 1;
    // First round: down to the last decision's threshold (at most four times the mean share),
    // or the mean share when there is none.
    let (mut count, mut stop_below) = match last_tau.take() {
        Some(tau) => (4 * chunk, tau),
        None => (chunk, 0),
    };
    grow.extend(0..runs.len() as u32);
    loop {
        for &r in grow.iter() {
            let run = &mut runs[r as usize];
            run.extend(&jobs[run.ord], r, count, stop_below, entries);
        }
        (count, stop_below) = (chunk, 0);
        chunk = chunk.saturating_mul(2);
        // The threshold: the `want`-th largest key, or none when every key generated fits.
        // (Selection reorders the entries; their order means nothing.)
        let tau = (entries.len() > want).then(|| {
            let (_, nth, _) = entries.select_nth_unstable_by(want - 1, |a, b| b.0.cmp(&a.0));
            nth.0
        });
        grow.clear();
        let Some(tau) = tau else {
            // Everything generated is taken; a job may have more above zero.
            grow.extend((0..runs.len() as u32).filter(|&r| runs[r as usize].open));
            if grow.is_empty() {
                for &(_, r) in entries.iter() {
                    workers[runs[r as usize].ord] += 1;
                }
                return left - entries.len() as u32;
            }
            continue;
        };
        // The threshold only rises as keys are added: keys below it are out for good.
        entries.retain(|e| e.0 >= tau);
        // Jobs whose keys may still be above the threshold generate more.
        grow.extend((0..runs.len() as u32).filter(|&r| {
            let run = &runs[r as usize];
            run.open && run.key.to_bits() > tau
        }));
        if !grow.is_empty() {
            continue;
        }
        if let Some(r) = count_taken(runs, entries, per_run, want, tau) {
            grow.push(r);
            continue;
        }
        for (run, &(above, tied)) in runs.iter().zip(per_run.iter()) {
            workers[run.ord] += above + tied;
        }
        *last_tau = Some(tau);
        return 0;
    }
}

/// Each run's keys above `tau` and keys equal to it that it takes, into `per_run`; the ties are
/// handed out in job order, `want` keys in all. Returns a run whose next keys may equal `tau`
/// too and come before later jobs' ties: it must generate more first.
fn count_taken(
    runs: &[Run],
    entries: &[(u64, u32)],
    per_run: &mut Vec<(u32, u32)>,
    want: usize,
    tau: u64,
) -> Option<u32> {
    per_run.clear();
    per_run.resize(runs.len(), (0, 0));
    let mut above = 0usize;
    for &(key, r) in entries {
        if key > tau {
            per_run[r as usize].0 += 1;
            above += 1;
        } else if key == tau {
            per_run[r as usize].1 += 1;
        }
    }
    let mut ties = want - above;
    let mut unfinished = None;
    for (r, count) in per_run.iter_mut().enumerate() {
        let take = count.1.min(ties as u32);
        ties -= take as usize;
        count.1 = take;
        if ties > 0 && unfinished.is_none() && runs[r].open && runs[r].key.to_bits() == tau {
            unfinished = Some(r as u32);
        }
    }
    unfinished
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::check_contract;

    type Table = Vec<f64>;

    fn table_bid(gains: &[f64]) -> JobBid<impl Fn(u32) -> f64 + Clone> {
        let table: Table = gains.to_vec();
        JobBid::new(Some(move |w: u32| table[(w as usize).min(table.len() - 1)]))
    }

    #[test]
    fn greedy_follows_marginal_gains() {
        let jobs = [table_bid(&[0.0, 10.0, 15.0, 17.0, 18.0]), table_bid(&[0.0, 8.0, 12.0, 13.0, 13.5])];
        let p = Problem { num_workers: 4, jobs: &jobs };
        let a = allocate(&p);
        // marginals: job0 10,5,2,1; job1 8,4,1,0.5 → 10, 8, 5, 4
        assert_eq!(a.workers, vec![2, 2]);
        check_contract(&p, &a).unwrap();
    }

    #[test]
    fn equal_gains_go_to_the_lower_order() {
        let jobs = [table_bid(&[0.0, 1.0, 2.0]), table_bid(&[0.0, 1.0, 2.0])];
        assert_eq!(allocate(&Problem { num_workers: 1, jobs: &jobs }).workers, vec![1, 0]);
    }

    #[test]
    fn leftovers_are_dealt_evenly_but_never_to_a_job_they_slow_down() {
        let flat = table_bid(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let slowing = table_bid(&[0.0, 1.0, 0.5, 0.2, 0.1, 0.0]);
        let jobs = [flat.clone(), flat, slowing];
        assert_eq!(allocate(&Problem { num_workers: 10, jobs: &jobs }).workers, vec![5, 4, 1]);
    }

    #[test]
    fn leftovers_go_to_a_job_one_more_worker_does_not_slow() {
        // Saturated after one worker: more are harmless to it (g(w + 1) = g(w)), so the
        // leftovers go there rather than idle.
        let saturated = table_bid(&[0.0, 1.0, 1.0, 1.0]);
        assert_eq!(allocate(&Problem { num_workers: 3, jobs: std::slice::from_ref(&saturated) }).workers, vec![3]);
    }

    #[test]
    fn leftovers_go_first_to_the_least_served_of_the_jobs_without_workers() {
        // Nothing gains: the two free workers go to the two jobs served least so far.
        let flat = table_bid(&[0.0, 0.0, 0.0]);
        let mut jobs = vec![flat.clone(), flat.clone(), flat];
        for (job, service) in jobs.iter_mut().zip([5.0, 1.0, 3.0]) {
            job.attained_service = service;
        }
        let problem = Problem { num_workers: 2, jobs: &jobs };
        assert_eq!(allocate(&problem).workers, vec![0, 1, 1]);
        assert_eq!(allocate_by_heap(&problem).workers, vec![0, 1, 1]);
        // Equal service: the lower job order first.
        jobs.iter_mut().for_each(|j| j.attained_service = 2.0);
        assert_eq!(allocate(&Problem { num_workers: 2, jobs: &jobs }).workers, vec![1, 1, 0]);
    }

    #[test]
    fn jobs_without_a_prediction_get_a_fair_share() {
        let mut jobs = vec![table_bid(&[0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0])];
        jobs.push(JobBid { gain: None, ..jobs[0].clone() });
        let a = allocate(&Problem { num_workers: 8, jobs: &jobs });
        assert_eq!(a.workers, vec![4, 4]);
    }

    /// Step 4's round-robin as it was defined: a min-heap on `(workers, order)`, one pop per
    /// worker.
    fn deal_by_heap<G: GainFn>(jobs: &[JobBid<G>], workers: &mut [u32], mut left: u32) {
        let mut open: BinaryHeap<std::cmp::Reverse<(u32, JobOrd)>> = (0..jobs.len())
            .filter(|&o| workers[o] < jobs[o].max_workers)
            .map(|o| std::cmp::Reverse((workers[o], o)))
            .collect();
        while left > 0 {
            let Some(std::cmp::Reverse((w, ord))) = open.pop() else { break };
            if jobs[ord].gain.as_ref().is_none_or(|g| g.gain(w + 1) >= g.gain(w)) {
                workers[ord] += 1;
                left -= 1;
                if workers[ord] < jobs[ord].max_workers {
                    open.push(std::cmp::Reverse((workers[ord], ord)));
                }
            }
        }
    }

    proptest::proptest! {
        /// The two queues deal exactly what the heap dealt: the same workers to the same jobs,
        /// ties and caps included (gains drawn from a few levels, so that equal gains, rises
        /// and falls all occur).
        #[test]
        fn the_deal_from_two_queues_is_the_heaps(
            jobs in proptest::collection::vec(
                (0u32..6, 1u32..10, proptest::collection::vec(0u8..4, 1..12), proptest::bool::ANY),
                0..40,
            ),
            left in 0u32..120,
        ) {
            let bids: Vec<JobBid<crate::policy::Gains>> = jobs
                .iter()
                .map(|(have, max, levels, predicted)| JobBid {
                    min_workers: 0,
                    max_workers: (*have).max(*max),
                    attained_service: 0.0,
                    gain: predicted.then(|| crate::policy::Gains(levels.iter().map(|&l| f64::from(l)).collect())),
                    weight: 1.0,
                })
                .collect();
            let have: Vec<u32> = jobs.iter().map(|j| j.0).collect();
            let (mut queues, mut heap) = (have.clone(), have);
            deal_harmless(&bids, &mut queues, left);
            deal_by_heap(&bids, &mut heap, left);
            proptest::prop_assert_eq!(queues, heap);
        }
    }
}
