//! Property tests of the allocation policies.

use proptest::prelude::*;
use slaq::policy::table::Tabled;
use slaq::policy::{Allocation, JobBid, PolicyKind, Problem, check_contract, fair};

/// A concave gain table: increments that never grow.
fn concave_table(max_len: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(0.0f64..10.0, 1..max_len).prop_map(|mut increments| {
        increments.sort_by(|a, b| b.total_cmp(a));
        let mut table = vec![0.0];
        for inc in increments {
            table.push(table.last().copied().unwrap_or(0.0) + inc);
        }
        table
    })
}

fn table_gain(table: Vec<f64>) -> impl Fn(u32) -> f64 + Clone {
    move |w: u32| table[(w as usize).min(table.len() - 1)]
}

/// One job: minimum, room above it, attained service, gain table.
type JobSpec = (u32, u32, f64, Vec<f64>);
type TableFn = fn(u32) -> f64;

fn bids_strategy() -> impl Strategy<Value = (u32, Vec<JobSpec>)> {
    let job = (0u32..3, 0u32..12, 0.0f64..100.0, concave_table(10));
    (0u32..40, prop::collection::vec(job, 0..8))
}

fn build(jobs: &[JobSpec]) -> Vec<JobBid<impl Fn(u32) -> f64 + Clone>> {
    jobs.iter()
        .map(|(min, extra, service, table)| JobBid {
            min_workers: *min,
            max_workers: min + extra,
            attained_service: *service,
            gain: Some(table_gain(table.clone())),
            weight: 1.0,
        })
        .collect()
}

fn total_gain<G: Fn(u32) -> f64>(bids: &[JobBid<G>], allocation: &[u32]) -> f64 {
    bids.iter().zip(allocation).map(|(b, &w)| b.gain.as_ref().map_or(0.0, |g| g(w))).sum()
}

/// The best total gain over every allocation within the bounds (exhaustive; small cases).
fn brute_force_best<G: Fn(u32) -> f64>(bids: &[JobBid<G>], capacity: u32) -> f64 {
    fn go<G: Fn(u32) -> f64>(bids: &[JobBid<G>], i: usize, left: u32, acc: f64, best: &mut f64) {
        if i == bids.len() {
            *best = best.max(acc);
            return;
        }
        let b = &bids[i];
        for w in b.min_workers..=b.max_workers.min(left) {
            let g = b.gain.as_ref().map_or(0.0, |g| g(w));
            go(bids, i + 1, left - w, acc + g, best);
        }
    }
    let mut best = f64::NEG_INFINITY;
    go(bids, 0, capacity, 0.0, &mut best);
    best
}

proptest! {
    #[test]
    fn every_policy_keeps_its_contract((capacity, jobs) in bids_strategy()) {
        let bids = build(&jobs);
        let problem = Problem { num_workers: capacity, jobs: &bids };
        for kind in [PolicyKind::Slaq, PolicyKind::Fair] {
            let allocation = kind.allocate(&problem);
            prop_assert!(check_contract(&problem, &allocation).is_ok(), "{kind:?}: {:?}", check_contract(&problem, &allocation));
        }
    }

    #[test]
    fn slaq_is_optimal_on_concave_gains((capacity, jobs) in bids_strategy()) {
        let bids = build(&jobs);
        let minima: u32 = bids.iter().map(|b| b.min_workers).sum();
        prop_assume!(minima <= capacity);
        let allocation = slaq::policy::slaq::allocate(&Problem { num_workers: capacity, jobs: &bids });
        let got = total_gain(&bids, &allocation.workers);
        let best = brute_force_best(&bids, capacity);
        prop_assert!(got >= best - 1e-9 * best.abs().max(1.0), "greedy {got} < optimum {best}");
    }

    #[test]
    fn slaq_is_deterministic((capacity, jobs) in bids_strategy()) {
        let bids = build(&jobs);
        let problem = Problem { num_workers: capacity, jobs: &bids };
        prop_assert_eq!(slaq::policy::slaq::allocate(&problem), slaq::policy::slaq::allocate(&problem));
    }

    #[test]
    fn fair_is_max_min_fair_and_work_conserving((capacity, jobs) in bids_strategy()) {
        let bids = build(&jobs);
        let minima: u32 = bids.iter().map(|b| b.min_workers).sum();
        prop_assume!(minima <= capacity);
        let Allocation { workers } = fair::allocate(&Problem { num_workers: capacity, jobs: &bids });
        let total: u32 = workers.iter().sum();
        let room: u32 = bids.iter().map(|b| b.max_workers).sum();
        // Work-conserving: idle workers only when every job is at its maximum.
        prop_assert_eq!(total, capacity.min(room));
        // Max-min fair: a job can only have fewer workers than another (by 2 or more) if it is
        // at its maximum or the other is at its minimum.
        for (a, ba) in bids.iter().enumerate() {
            for (b, bb) in bids.iter().enumerate() {
                if workers[a] + 1 < workers[b] {
                    prop_assert!(workers[a] == ba.max_workers || workers[b] == bb.min_workers,
                        "job {a} has {} and job {b} has {}: {workers:?}", workers[a], workers[b]);
                }
            }
        }
    }
}

/// Any gain table, concave or not, with the coarse values that make equal marginals common, and
/// now and then a non-finite value (which drops the job from the greedy).
fn any_table(max_len: usize) -> impl Strategy<Value = Vec<f64>> {
    let step = prop_oneof![
        8 => (-2i32..6).prop_map(|k| f64::from(k) * 0.5),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        2 => 0.0f64..3.0,
    ];
    prop::collection::vec(step, 1..max_len).prop_map(|steps| {
        let mut table = vec![0.0];
        for s in steps {
            table.push(table.last().copied().unwrap_or(0.0) + s);
        }
        table
    })
}

/// One job: minimum, room above it, attained service, gain table if it has a prediction.
type AnyJob = (u32, u32, f64, Option<Vec<f64>>);

/// Jobs with any table, no table at all (no prediction yet), or no room.
fn any_bids() -> impl Strategy<Value = (u32, Vec<AnyJob>)> {
    let job = (0u32..3, 0u32..40, 0.0f64..4.0, prop::option::weighted(0.9, any_table(30)));
    (0u32..200, prop::collection::vec(job, 0..40))
}

fn any_job_bids(jobs: &[AnyJob]) -> Vec<JobBid<impl Fn(u32) -> f64 + Clone>> {
    jobs.iter()
        .map(|(min, extra, service, table)| JobBid {
            min_workers: *min,
            max_workers: min + extra,
            attained_service: service.floor(),
            gain: table.clone().map(table_gain),
            weight: 1.0,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The threshold search hands out exactly what the heap pops, ties and all.
    #[test]
    fn slaq_equals_the_heap_greedy((capacity, jobs) in any_bids()) {
        let bids = any_job_bids(&jobs);
        let problem = Problem { num_workers: capacity, jobs: &bids };
        prop_assert_eq!(slaq::policy::slaq::allocate(&problem), slaq::policy::slaq::allocate_by_heap(&problem));
    }

    /// The same with the gains read from tables of any length (the search reads a table in a
    /// tight loop and the curve past it): tables change no decision.
    #[test]
    fn slaq_on_tables_equals_the_heap_greedy_on_curves((capacity, jobs) in any_bids(), len in 1usize..12) {
        let curves = any_job_bids(&jobs);
        let tabled: Vec<_> = curves
            .iter()
            .map(|b| JobBid {
                min_workers: b.min_workers,
                max_workers: b.max_workers,
                attained_service: b.attained_service,
                gain: b.gain.clone().map(|g| Tabled::new(g, b.max_workers, len)), weight: 1.0,
            })
            .collect();
        let on_tables = slaq::policy::slaq::allocate(&Problem { num_workers: capacity, jobs: &tabled });
        let by_heap = slaq::policy::slaq::allocate_by_heap(&Problem { num_workers: capacity, jobs: &curves });
        prop_assert_eq!(on_tables, by_heap);
    }
}

#[test]
fn slaq_equals_the_heap_greedy_on_unbounded_equal_gains() {
    // Every marginal equal and no maximum: the lowest job order takes everything, and the
    // search must not generate keys for ever.
    let bids: Vec<JobBid<TableFn>> = (0..50).map(|_| JobBid::new(Some(f64::from as TableFn))).collect();
    let problem = Problem { num_workers: 10_000, jobs: &bids };
    let fast = slaq::policy::slaq::allocate(&problem);
    assert_eq!(fast, slaq::policy::slaq::allocate_by_heap(&problem));
    assert_eq!(fast.workers[0], 10_000);
}

#[test]
fn slaq_stays_within_capacity_when_minima_do_not_fit() {
    let bids: Vec<JobBid<TableFn>> =
        (0..5).map(|_| JobBid { min_workers: 3, max_workers: 10, ..JobBid::new(None) }).collect();
    let problem = Problem { num_workers: 7, jobs: &bids };
    for kind in [PolicyKind::Slaq, PolicyKind::Fair] {
        let allocation = kind.allocate(&problem);
        assert_eq!(allocation.total(), 7, "{kind:?}");
        check_contract(&problem, &allocation).unwrap();
    }
}
