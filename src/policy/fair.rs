//! Work-conserving max-min fair share: every job gets its minimum, then the remaining workers
//! are water-filled up to a common level, jobs capped by their maximum giving their leftovers to
//! the others. The workers that do not divide evenly go to the least served jobs (attained
//! worker-seconds), so over time nobody is favoured. SLAQ's baseline.

use super::{Allocation, JobBid, Problem, by_least_service, grant_minima};

/// The fair allocation; see the module documentation.
pub fn allocate<G>(problem: &Problem<'_, G>) -> Allocation {
    let jobs = problem.jobs;
    let (minima, left) = grant_minima(problem);
    if left == 0 || jobs.is_empty() {
        return Allocation { workers: minima };
    }
    let capacity = u64::from(problem.num_workers);
    let at_level = |level: u32| -> u64 {
        jobs.iter().zip(&minima).map(|(j, &min)| u64::from(level.clamp(min, j.max_workers.max(min)))).sum()
    };
    // The highest level whose water-filling fits the capacity.
    let (mut lo, mut hi) = (0u32, problem.num_workers);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if at_level(mid) <= capacity { lo = mid } else { hi = mid - 1 }
    }
    let level = lo;
    let mut workers: Vec<u32> =
        jobs.iter().zip(&minima).map(|(j, &min)| level.clamp(min, j.max_workers.max(min))).collect();
    let mut spare = capacity - workers.iter().map(|&w| u64::from(w)).sum::<u64>();
    let can_grow =
        |ord: usize, workers: &[u32], jobs: &[JobBid<G>]| workers[ord] == level && jobs[ord].max_workers > level;
    for ord in by_least_service(jobs, (0..jobs.len()).filter(|&o| can_grow(o, &workers, jobs))) {
        if spare == 0 {
            break;
        }
        workers[ord] += 1;
        spare -= 1;
    }
    Allocation { workers }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::check_contract;

    fn bid(min: u32, max: u32, service: f64) -> JobBid<fn(u32) -> f64> {
        JobBid { min_workers: min, max_workers: max, attained_service: service, gain: None }
    }

    #[test]
    fn caps_give_their_leftovers_to_the_others() {
        let jobs = [bid(0, 2, 0.0), bid(0, 100, 0.0), bid(0, 100, 0.0)];
        let p = Problem { num_workers: 12, jobs: &jobs };
        let a = allocate(&p);
        assert_eq!(a.workers, vec![2, 5, 5]);
        check_contract(&p, &a).unwrap();
    }

    #[test]
    fn remainders_go_to_the_least_served() {
        let jobs = [bid(0, 100, 9.0), bid(0, 100, 1.0), bid(0, 100, 5.0)];
        let a = allocate(&Problem { num_workers: 4, jobs: &jobs });
        assert_eq!(a.workers, vec![1, 2, 1]);
        let a = allocate(&Problem { num_workers: 2, jobs: &jobs });
        assert_eq!(a.workers, vec![0, 1, 1], "more jobs than workers: least served first");
    }

    #[test]
    fn minima_come_first() {
        let jobs = [bid(6, 100, 0.0), bid(0, 100, 0.0)];
        assert_eq!(allocate(&Problem { num_workers: 8, jobs: &jobs }).workers, vec![6, 2]);
    }
}
