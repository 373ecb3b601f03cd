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
//! When every `g` is concave (diminishing returns, as with a decaying loss curve and a
//! sublinear speed-up) the greedy phase maximises `Σ g_j(w_j)` subject to the capacity and the
//! bounds: this is the classic result for separable concave resource allocation. When a `g` is
//! not concave (e.g. a speed-up that only pays off past several workers) greedy can stop early
//! on that job; it then allocates as if the job's curve were its prefix up to the first dip.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{Allocation, GainFn, JobOrd, Problem, by_least_service, grant_minima};

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

/// The SLAQ allocation; see the module documentation.
pub fn allocate<G: GainFn>(problem: &Problem<'_, G>) -> Allocation {
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

    let mut heap = BinaryHeap::with_capacity(jobs.len());
    let push = |heap: &mut BinaryHeap<Candidate>, ord: JobOrd, w: u32, gain_now: f64| {
        if let Some(g) = jobs[ord].gain.as_ref().filter(|_| w < jobs[ord].max_workers) {
            let marginal = g.gain(w + 1) - gain_now;
            if marginal.is_finite() {
                heap.push(Candidate { marginal, ord, gain_now });
            }
        }
    };
    for (ord, job) in jobs.iter().enumerate() {
        if let Some(g) = &job.gain {
            push(&mut heap, ord, workers[ord], g.gain(workers[ord]));
        }
    }
    // The job on top gets a worker and its next marginal gain replaces it in place (one
    // sift-down instead of a pop and a push: this loop runs once per worker).
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

    // Leftovers: first one each to jobs that have none (least served first), then round-robin
    // (fewest workers first) to jobs that one more worker does not slow down.
    let idle = (0..jobs.len()).filter(|&o| workers[o] == 0 && jobs[o].max_workers > 0);
    for ord in by_least_service(jobs, idle) {
        if left == 0 {
            break;
        }
        workers[ord] = 1;
        left -= 1;
    }
    if left > 0 {
        let mut open: BinaryHeap<std::cmp::Reverse<(u32, JobOrd)>> = (0..jobs.len())
            .filter(|&o| workers[o] < jobs[o].max_workers)
            .map(|o| std::cmp::Reverse((workers[o], o)))
            .collect();
        while left > 0 {
            let Some(std::cmp::Reverse((w, ord))) = open.pop() else { break };
            let harmless = jobs[ord].gain.as_ref().is_none_or(|g| g.gain(w + 1) >= g.gain(w));
            if harmless {
                workers[ord] += 1;
                left -= 1;
                if workers[ord] < jobs[ord].max_workers {
                    open.push(std::cmp::Reverse((workers[ord], ord)));
                }
            }
        }
    }
    Allocation { workers }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{JobBid, check_contract};

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
    fn jobs_without_a_prediction_get_a_fair_share() {
        let mut jobs = vec![table_bid(&[0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0])];
        jobs.push(JobBid { gain: None, ..jobs[0].clone() });
        let a = allocate(&Problem { num_workers: 8, jobs: &jobs });
        assert_eq!(a.workers, vec![4, 4]);
    }
}
