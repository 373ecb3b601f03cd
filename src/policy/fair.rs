//! Work-conserving max-min fair share: every job gets its minimum, then the remaining workers
//! are water-filled up to a common level, jobs capped by their maximum giving their leftovers to
//! the others. The workers that do not divide evenly go to the least served jobs (attained
//! worker-seconds), so over time nobody is favoured. SLAQ's baseline. With weights (a tenant's
//! jobs', issue #43) the level is per unit of weight: a job of weight 3 fills to three times the
//! level of a job of weight 1, and the remainders go to the least served per unit of weight.

use super::{Allocation, JobBid, Problem, grant_minima, one_each_by_least_service, weighted};

/// The fair allocation; see the module documentation.
pub fn allocate<G>(problem: &Problem<'_, G>) -> Allocation {
    let jobs = problem.jobs;
    let (minima, left) = grant_minima(problem);
    if left == 0 || jobs.is_empty() {
        return Allocation { workers: minima };
    }
    if weighted(jobs) {
        return Allocation { workers: by_weight(jobs, minima, problem.num_workers) };
    }
    let capacity = u64::from(problem.num_workers);
    let at_level = |level: u32| -> u64 {
        jobs.iter().zip(&minima).map(|(j, &min)| u64::from(level.clamp(min, j.max_workers.max(min)))).sum()
    };
    let level = highest_fitting(at_level, capacity, problem.num_workers, jobs.len());
    let mut workers: Vec<u32> =
        jobs.iter().zip(&minima).map(|(j, &min)| level.clamp(min, j.max_workers.max(min))).collect();
    let spare = capacity - workers.iter().map(|&w| u64::from(w)).sum::<u64>();
    one_each_by_least_service(jobs, &mut workers, spare as u32, |w, o| w[o] == level && jobs[o].max_workers > level);
    Allocation { workers }
}

/// The highest level in `0..=top` whose water-filling (`at_level`, not decreasing) fits
/// `capacity`, level 0 fitting. The search starts at the mean share and gallops from there:
/// the level is most often within one of it, found in two or three passes over the jobs
/// instead of a bisection's `log2(top)` (at 4,000 jobs on 16,000 workers, fourteen passes were
/// a tenth of the finish-time bound, which asks for a fair cluster every epoch).
fn highest_fitting(at_level: impl Fn(u32) -> u64, capacity: u64, top: u32, jobs: usize) -> u32 {
    let guess = (capacity / jobs.max(1) as u64).min(u64::from(top)) as u32;
    let (mut lo, mut hi) = if at_level(guess) <= capacity {
        let (mut lo, mut step) = (guess, 1u32);
        loop {
            let next = lo.saturating_add(step).min(top);
            if next == lo {
                break (lo, lo);
            }
            if at_level(next) > capacity {
                break (lo, next - 1);
            }
            lo = next;
            step = step.saturating_mul(2);
        }
    } else {
        (0, guess.saturating_sub(1))
    };
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if at_level(mid) <= capacity { lo = mid } else { hi = mid - 1 }
    }
    lo
}

/// Weighted water-filling: the real level `L` at which `Σ clamp(L·weight, min, max)` fills the
/// capacity, each job its whole part of that, then the remainders one each to the least served
/// per unit of weight among the jobs below their share, then to any job below its maximum.
fn by_weight<G>(jobs: &[JobBid<G>], minima: Vec<u32>, num_workers: u32) -> Vec<u32> {
    let weight = |o: usize| if jobs[o].weight.is_finite() && jobs[o].weight > 0.0 { jobs[o].weight } else { 1.0 };
    let max = |o: usize| jobs[o].max_workers.max(minima[o]);
    let share = |o: usize, level: f64| (level * weight(o)).clamp(f64::from(minima[o]), f64::from(max(o)));
    let capacity = f64::from(num_workers);
    let filled = |level: f64| (0..jobs.len()).map(|o| share(o, level)).sum::<f64>();
    let (mut lo, mut hi) = (0.0, capacity / (0..jobs.len()).map(weight).fold(f64::INFINITY, f64::min));
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if filled(mid) <= capacity { lo = mid } else { hi = mid }
    }
    let shares: Vec<f64> = (0..jobs.len()).map(|o| share(o, lo)).collect();
    let mut workers: Vec<u32> = shares.iter().map(|&s| (s + 1e-9).floor() as u32).collect();
    let mut spare = num_workers.saturating_sub(workers.iter().sum());
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| {
        (jobs[a].attained_service / weight(a)).total_cmp(&(jobs[b].attained_service / weight(b))).then(a.cmp(&b))
    });
    for below_share in [true, false] {
        for &o in &order {
            let room = if below_share { f64::from(workers[o]) + 1e-9 < shares[o] } else { workers[o] < max(o) };
            if spare > 0 && room {
                workers[o] += 1;
                spare -= 1;
            }
        }
    }
    workers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::check_contract;

    fn bid(min: u32, max: u32, service: f64) -> JobBid<fn(u32) -> f64> {
        JobBid { min_workers: min, max_workers: max, attained_service: service, gain: None, weight: 1.0 }
    }

    #[test]
    fn weights_fill_in_proportion_and_remainders_go_to_the_least_served_per_weight() {
        let w = |weight, max, service| JobBid { weight, ..bid(0, max, service) };
        let jobs = [w(3.0, 100, 0.0), w(1.0, 100, 0.0)];
        let p = Problem { num_workers: 4, jobs: &jobs };
        assert_eq!(allocate(&p).workers, vec![3, 1]);
        check_contract(&p, &allocate(&p)).unwrap();
        // A cap gives its leftovers to the others, in proportion.
        let jobs = [w(3.0, 1, 0.0), w(1.0, 100, 0.0), w(2.0, 100, 0.0)];
        assert_eq!(allocate(&Problem { num_workers: 7, jobs: &jobs }).workers, vec![1, 2, 4]);
        // 1.5 and 0.5 of two workers: one each whole, the remainder to the least served per
        // unit of weight (6 worker-seconds at weight 3 is 2 per unit, below 3 at weight 1).
        let jobs = [w(3.0, 100, 6.0), w(1.0, 100, 3.0)];
        assert_eq!(allocate(&Problem { num_workers: 2, jobs: &jobs }).workers, vec![2, 0]);
        let jobs = [w(3.0, 100, 9.0), w(1.0, 100, 1.0)];
        assert_eq!(allocate(&Problem { num_workers: 2, jobs: &jobs }).workers, vec![1, 1]);
        // Minima first, and every worker handed out.
        let jobs = [JobBid { weight: 4.0, ..bid(0, 100, 0.0) }, bid(5, 100, 0.0)];
        assert_eq!(allocate(&Problem { num_workers: 8, jobs: &jobs }).workers, vec![3, 5]);
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

    proptest::proptest! {
        /// The galloping search finds the level a bisection over the whole cluster finds, for
        /// any minima, caps and capacity (caps below, at and above the mean share all occur).
        #[test]
        fn the_gallop_finds_the_bisections_level(
            bounds in proptest::collection::vec((0u32..4, 0u32..40), 1..30),
            capacity in 0u64..400,
            top in 0u32..400,
        ) {
            let at_level = |level: u32| -> u64 {
                bounds.iter().map(|&(min, max)| u64::from(level.clamp(min, max.max(min)))).sum()
            };
            let at_zero: u64 = bounds.iter().map(|&(min, _)| u64::from(min)).sum();
            proptest::prop_assume!(at_zero <= capacity);
            let (mut lo, mut hi) = (0u32, top);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if at_level(mid) <= capacity { lo = mid } else { hi = mid - 1 }
            }
            proptest::prop_assert_eq!(highest_fitting(at_level, capacity, top, bounds.len()), lo);
        }
    }
}
