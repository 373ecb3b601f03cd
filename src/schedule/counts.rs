//! Worker counts per job for one epoch: the **fairness floor** first, then the policy hands out
//! the rest ([`plan`]), then jobs that run only at some sizes are held to them
//! ([`restrict_sizes`]). Every job's entitlement and grant is booked in its [`FloorLedger`].
//!
//! ## The fairness floor
//! With floor `f` (0 = pure quality, 1 = fair), over a sliding window of the last
//! [`PlanSettings::floor_window`] epochs of its life every active job receives at least `f`
//! times its max-min fair share of worker-epochs. The share is the continuous water level of
//! the epoch (`W / n` when no bound binds, so 1.28 workers for 50 jobs on 64 workers). A job in
//! deficit is served, up to its deficit rounded up, before any quality-driven worker is handed
//! out; when the deficits exceed the cluster, the jobs furthest behind (attained over entitled)
//! are served first. The floor is in attained service, not an instantaneous minimum: a nearly
//! converged job may be parked for up to `(1 − f)` of the window and then resumed, and its

use std::collections::VecDeque;

use crate::policy::{Allocation, ByRef, GainFn, JobBid, PolicyKind, Problem};

use super::slowdown::{Pace, PaceLedger, bound_floors, grant_in_order, in_key_order, total_order, water_level};

/// How the planner decides.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlanSettings {
    /// Fairness floor `f` in [0, 1]: 0 is pure quality, 1 is fair sharing in attained service.
    pub floor: f64,
    /// Epochs in the floor's sliding window.
    pub floor_window: usize,
    /// The finish-time bound `K` (see `schedule::slowdown`): no job with a known pace is planned
    /// to finish more than `K` times later than under fair sharing. 0: off.
    pub max_slowdown: f64,
}

/// The default floor, 0.25, chosen with the finish-time bound and the completion weight
/// (issue #41) on issue #6's curve workloads, seeds 1–3, before any held-out run
/// (`benches/runs/2026-11-26-issue41-default.txt`): with the bound keeping every job's finish,
/// the floor need only keep a parked job's service from falling below a quarter of its fair
/// share over a window. (Issue #8 chose 0.5 when the floor was the only guarantee.) The window,
/// 24 epochs (2 minutes at 5 s), lets a nearly converged job be parked for a minute at a time.
pub const DEFAULT_FLOOR: f64 = 0.25;

/// The default finish-time bound `K`, 1.75: chosen with the floor and the completion weight on
/// the same seeds (see [`DEFAULT_FLOOR`]).
pub const DEFAULT_MAX_SLOWDOWN: f64 = 1.75;

impl Default for PlanSettings {
    fn default() -> Self {
        PlanSettings { floor: DEFAULT_FLOOR, floor_window: 24, max_slowdown: DEFAULT_MAX_SLOWDOWN }
    }
}

impl PlanSettings {
    pub fn validate(&self) -> Result<(), &'static str> {
        if !(0.0..=1.0).contains(&self.floor) {
            return Err("floor must be in [0, 1]");
        }
        if self.floor_window == 0 {
            return Err("floor_window must be at least 1 epoch");
        }
        if !(self.max_slowdown == 0.0 || self.max_slowdown >= 1.0) || self.max_slowdown.is_nan() {
            return Err("max_slowdown must be 0 (off) or at least 1");
        }
        Ok(())
    }

    /// The finish-time bound, infinite when off.
    pub fn slowdown_bound(&self) -> f64 {
        if self.max_slowdown >= 1.0 { self.max_slowdown } else { f64::INFINITY }
    }

    /// Whether the floor or the bound constrains a quality policy at all.
    pub fn bounded(&self) -> bool {
        self.floor > 0.0 || self.slowdown_bound().is_finite()
    }
}

/// One job's floor bookkeeping: what it was entitled to and what it got, per epoch, over the
/// sliding window. O(window) memory.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FloorLedger {
    epochs: VecDeque<(f64, f64)>,
    entitled: f64,
    granted: f64,
    /// Records since the sums were last recomputed from the window.
    #[serde(default)]
    since_sum: usize,
    /// The job's fair clock, for the finish-time bound.
    #[serde(default)]
    pace: PaceLedger,
}

impl AsMut<PaceLedger> for FloorLedger {
    fn as_mut(&mut self) -> &mut PaceLedger {
        &mut self.pace
    }
}

impl FloorLedger {
    /// Worker-epochs the job is short of `floor` times its fair share, counting this epoch's
    /// fair share `fair_now` as already due.
    fn deficit(&self, floor: f64, fair_now: f64) -> f64 {
        floor * (self.entitled + fair_now) - self.granted
    }

    fn record(&mut self, fair: f64, granted: f64, window: usize) {
        self.epochs.push_back((fair, granted));
        self.entitled += fair;
        self.granted += granted;
        while self.epochs.len() > window {
            if let Some((f, g)) = self.epochs.pop_front() {
                self.entitled -= f;
                self.granted -= g;
            }
        }
        // Recomputed once a window (O(1) a record on average), so that float drift cannot
        // build up over a long life.
        self.since_sum += 1;
        if self.since_sum >= window {
            self.since_sum = 0;
            self.entitled = self.epochs.iter().map(|e| e.0).sum();
            self.granted = self.epochs.iter().map(|e| e.1).sum();
        }
    }

    /// What the latest epoch recorded granted is set to `granted`: what the job got when it
    /// was not what was planned (a change that waits for a save asked for).
    pub fn regrant(&mut self, granted: f64) {
        if let Some(last) = self.epochs.back_mut() {
            self.granted += granted - last.1;
            last.1 = granted;
        }
    }

    /// What the latest epoch recorded granted (0 before any).
    pub fn last_granted(&self) -> f64 {
        self.epochs.back().map_or(0.0, |e| e.1)
    }

    /// Worker-epochs granted over the window.
    pub fn granted(&self) -> f64 {
        self.granted
    }

    /// Fair-share worker-epochs over the window.
    pub fn entitled(&self) -> f64 {
        self.entitled
    }

    /// The job's fair clock (the finish-time bound's).
    pub fn pace(&self) -> &PaceLedger {
        &self.pace
    }
}

/// The continuous max-min fair share of each job: a common level clamped to each job's
/// `[min, max]`, the level chosen so the shares sum to the cluster (or everyone is at its max).
pub fn fair_shares<G>(num_workers: u32, bids: &[JobBid<G>]) -> Vec<f64> {
    let bounds: Vec<(f64, f64)> = bids
        .iter()
        .map(|b| {
            let max = f64::from(b.max_workers);
            (f64::from(b.min_workers).min(max), max)
        })
        .collect();
    water_level(f64::from(num_workers), &bounds)
}

/// Holds jobs that may run only at some sizes (`JobSpec::worker_counts`) to those sizes: each
/// such job's count goes down to the largest allowed size not above it (none is always
/// allowed); then the workers left over go, job by job in `order`, to a restricted job whose next
/// allowed size they reach within its `max`, or to an unrestricted job up to its `max`.
/// Unrestricted jobs keep at least what they had. `sizes` are ascending.
pub fn restrict_sizes(workers: &mut [u32], sizes: &[Option<&[u32]>], max: &[u32], capacity: u32, order: &[usize]) {
    for (w, allowed) in workers.iter_mut().zip(sizes) {
        if let Some(allowed) = allowed {
            *w = allowed.iter().copied().filter(|&s| s <= *w).max().unwrap_or(0);
        }
    }
    let mut free = u64::from(capacity).saturating_sub(workers.iter().map(|&w| u64::from(w)).sum::<u64>());
    for &j in order {
        if free == 0 {
            break;
        }
        let take = match sizes[j] {
            Some(allowed) => allowed
                .iter()
                .copied()
                .find(|&s| s > workers[j] && s <= max[j])
                .map(|s| u64::from(s - workers[j]))
                .filter(|&more| more <= free)
                .unwrap_or(0),
            None => free.min(u64::from(max[j].saturating_sub(workers[j]))),
        };
        workers[j] += take as u32;
        free -= take;
    }
}

/// The minimums a plan can honour: each job's own `min_workers`, up to its fair share of the
/// cluster counted as if nobody had a minimum (rounded down). A minimum is a request, not a
/// claim on the cluster: one job asking for 1,024 workers gets at most what fair sharing would
/// give it, and a job whose minimum fits its share gets it whatever the others ask.
pub fn honoured_minimums<G>(num_workers: u32, bids: &[JobBid<G>]) -> Vec<u32> {
    if bids.iter().all(|b| b.min_workers == 0) {
        return vec![0; bids.len()];
    }
    let unbounded: Vec<JobBid<()>> = bids
        .iter()
        .map(|b| JobBid { min_workers: 0, max_workers: b.max_workers, attained_service: 0.0, gain: None, weight: 1.0 })
        .collect();
    fair_shares(num_workers, &unbounded)
        .into_iter()
        .zip(bids)
        .map(|(share, b)| b.min_workers.min((share + 1e-9).floor() as u32))
        .collect()
}

/// Worker counts for this epoch: the finish-time bound first (for the jobs with a `pace`, one per
/// bid or none at all), then the service floor, then `policy`; books every job's entitlement and
/// grant in `ledgers` (one per bid, same order). Fair sharing needs no floor (it is the floor at
/// 1); its ledgers are kept all the same.
pub fn plan<G: GainFn>(
    policy: PolicyKind,
    settings: &PlanSettings,
    num_workers: u32,
    bids: &[JobBid<G>],
    paces: &[Option<Pace<'_>>],
    ledgers: &mut [FloorLedger],
) -> Allocation {
    debug_assert_eq!(bids.len(), ledgers.len());
    let fair = fair_shares(num_workers, bids);
    let allocation = if policy == PolicyKind::Fair || !settings.bounded() {
        policy.allocate(&Problem { num_workers, jobs: bids })
    } else {
        // Without minimums, the fair shares are the fair cluster's water level (its bounds
        // are each job's [0, max] while no job is done).
        let fair_is_level = bids.iter().all(|b| b.min_workers == 0 || b.max_workers == 0);
        let floors = floors(settings, num_workers, bids, (&fair, fair_is_level), paces, ledgers);
        let raised: Vec<JobBid<ByRef<'_, G>>> = bids
            .iter()
            .zip(&floors)
            .map(|(b, &floor)| JobBid { min_workers: b.min_workers.max(floor).min(b.max_workers), ..b.by_ref() })
            .collect();
        policy.allocate(&Problem { num_workers, jobs: &raised })
    };
    let got: Vec<f64> = allocation.workers.iter().map(|&w| f64::from(w)).collect();
    book(settings, &fair, &got, ledgers);
    allocation
}

/// The workers each job must get this epoch before the policy decides: the finish-time bound's
/// (for the jobs with a `pace`; `paces` empty: none has one), then the service floor's, `fair`
/// being the jobs' [`fair_shares`], and `fair_is_level` saying that they are also the water
/// level of `num_workers` over each job's `[0, max]` (no job has a minimum), which the bound's
/// fair cluster then reuses. Moves every job's fair clock. What the jobs then got is booked
/// with [`book`].
pub fn floors<G>(
    settings: &PlanSettings,
    num_workers: u32,
    bids: &[JobBid<G>],
    (fair, fair_is_level): (&[f64], bool),
    paces: &[Option<Pace<'_>>],
    ledgers: &mut [FloorLedger],
) -> Vec<u32> {
    let mut floors = if paces.is_empty() {
        vec![0; bids.len()]
    } else {
        debug_assert_eq!(paces.len(), bids.len());
        let max: Vec<u32> = bids.iter().map(|b| b.max_workers).collect();
        bound_floors(settings.slowdown_bound(), num_workers, &max, (fair, fair_is_level), paces, ledgers)
    };
    if settings.floor > 0.0 {
        floor_workers(settings.floor, num_workers, bids, ledgers, fair, &mut floors);
    }
    floors
}

/// Books each job's fair share and what it `got` (workers, or their equivalent) into its floor
/// ledger's window.
pub fn book(settings: &PlanSettings, fair: &[f64], got: &[f64], ledgers: &mut [FloorLedger]) {
    for ((ledger, &share), &got) in ledgers.iter_mut().zip(fair).zip(got) {
        ledger.record(share, got, settings.floor_window);
    }
}

/// Raises `floors` (what each job already has, from the finish-time bound) to the workers each
/// job must get this epoch to stay at or above the service floor, granted in order of how far
/// behind the jobs are while the cluster lasts.
fn floor_workers<G>(
    floor: f64,
    num_workers: u32,
    bids: &[JobBid<G>],
    ledgers: &[FloorLedger],
    fair: &[f64],
    floors: &mut [u32],
) {
    let want: Vec<u32> = ledgers
        .iter()
        .zip(fair)
        .zip(bids)
        .map(|((ledger, &share), bid)| {
            // At most the fair share (rounded up) per epoch: a job far behind catches up at the
            // fair rate rather than in one burst on many workers, which its speed-up would waste.
            let deficit = ledger.deficit(floor, share).min(share);
            if deficit <= 1e-9 { 0 } else { (deficit - 1e-9).ceil().min(f64::from(bid.max_workers)) as u32 }
        })
        .zip(floors.iter())
        .map(|(w, &already)| w.saturating_sub(already))
        .collect();
    let behind = |j: usize| ledgers[j].granted / (ledgers[j].entitled + fair[j]).max(1e-12);
    // The furthest behind first, equals in job order; no comparison reads a ledger (at 100,000
    // jobs the comparisons' reads were 4% of an epoch).
    let order = || in_key_order((0..bids.len()).filter(|&j| want[j] > 0).map(|j| (total_order(behind(j)), j)));
    let left = num_workers.saturating_sub(floors.iter().sum());
    grant_in_order(&want, order, left, floors);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Gain = fn(u32) -> f64;

    fn service_floors(floor: f64, n: u32, b: &[JobBid<Gain>], l: &[FloorLedger], fair: &[f64]) -> Vec<u32> {
        let mut floors = vec![0; b.len()];
        floor_workers(floor, n, b, l, fair, &mut floors);
        floors
    }

    #[test]
    fn restricted_sizes_round_down_and_the_rest_goes_where_it_fits() {
        let pow2: &[u32] = &[1, 2, 4, 8];
        // Job 0 (powers of two) was given 7: 4. Its 3 spare workers: job 1 (powers of two, at
        // 2) reaches 4 with 2 of them, job 2 (any size, max 10) takes the last.
        let mut w = vec![7, 2, 3];
        restrict_sizes(&mut w, &[Some(pow2), Some(pow2), None], &[16, 16, 10], 12, &[1, 2, 0]);
        assert_eq!(w, vec![4, 4, 4]);
        // Nothing it may take: a restricted job below its smallest size gets none.
        let mut w = vec![1, 5];
        restrict_sizes(&mut w, &[Some(&[2, 4][..]), None], &[4, 5], 6, &[0, 1]);
        assert_eq!(w, vec![0, 5]);
    }

    proptest! {
        #[test]
        fn restricted_sizes_are_kept_and_the_cluster_is_not_exceeded(
            jobs in prop::collection::vec((0u32..20, prop::option::of(prop::collection::btree_set(1u32..16, 1..4)), 0u32..20), 1..8),
            capacity in 0u32..60,
        ) {
            let sets: Vec<Option<Vec<u32>>> = jobs.iter().map(|(_, s, _)| s.as_ref().map(|s| s.iter().copied().collect())).collect();
            let sizes: Vec<Option<&[u32]>> = sets.iter().map(|s| s.as_deref()).collect();
            let max: Vec<u32> = jobs.iter().map(|j| j.2.max(j.0)).collect();
            // A plan within the capacity and each job's maximum.
            let mut left = capacity;
            let mut w: Vec<u32> = jobs.iter().map(|j| { let g = j.0.min(left); left -= g; g }).collect();
            let before = w.clone();
            let order: Vec<usize> = (0..w.len()).collect();
            restrict_sizes(&mut w, &sizes, &max, capacity, &order);
            prop_assert!(w.iter().sum::<u32>() <= capacity);
            for (j, &got) in w.iter().enumerate() {
                prop_assert!(got <= max[j]);
                match &sizes[j] {
                    Some(allowed) => prop_assert!(got == 0 || allowed.contains(&got), "{got} not in {allowed:?}"),
                    None => prop_assert!(got >= before[j], "an unrestricted job lost workers"),
                }
            }
        }
    }

    fn bids(n: usize, gain: Gain) -> Vec<JobBid<Gain>> {
        (0..n).map(|_| JobBid::new(Some(gain))).collect()
    }

    #[test]
    fn fair_shares_are_water_levels() {
        let mut b = bids(4, f64::from);
        b[0].max_workers = 1;
        let shares = fair_shares(10, &b);
        assert!((shares[0] - 1.0).abs() < 1e-9);
        for s in &shares[1..] {
            assert!((s - 3.0).abs() < 1e-6, "{shares:?}");
        }
    }

    #[test]
    fn a_worthless_job_is_parked_but_gets_its_floor_over_the_window() {
        // Job 0 gains nothing, job 1 gains a lot: pure quality would starve job 0 for ever.
        let gains: [Gain; 2] = [|_| 0.0, |w| f64::from(w)];
        let b: Vec<JobBid<Gain>> = gains.iter().map(|&g| JobBid::new(Some(g))).collect();
        let settings = PlanSettings { floor: 0.5, floor_window: 10, max_slowdown: 0.0 };
        let mut ledgers = vec![FloorLedger::default(); 2];
        let mut got = 0;
        for _ in 0..100 {
            let a = plan(PolicyKind::Slaq, &settings, 4, &b, &[], &mut ledgers);
            got += a.workers[0];
            assert!(ledgers[0].granted() >= 0.5 * ledgers[0].entitled() - 1e-9, "{ledgers:?}");
        }
        // Fair share is 2 workers a epoch: at floor 0.5 it gets 1 per epoch on average.
        assert!((95..=110).contains(&got), "{got}");
        let mut none = vec![FloorLedger::default(); 2];
        let pure = PlanSettings { floor: 0.0, ..settings };
        assert_eq!(plan(PolicyKind::Slaq, &pure, 4, &b, &[], &mut none).workers, vec![0, 4]);
    }

    #[test]
    fn floor_one_is_fair_in_attained_service() {
        let gains: [Gain; 3] = [|_| 0.0, |w| f64::from(w), |w| 2.0 * f64::from(w)];
        let b: Vec<JobBid<Gain>> = gains.iter().map(|&g| JobBid::new(Some(g))).collect();
        let settings = PlanSettings { floor: 1.0, floor_window: 6, max_slowdown: 0.0 };
        let mut ledgers = vec![FloorLedger::default(); 3];
        for _ in 0..30 {
            plan(PolicyKind::Slaq, &settings, 6, &b, &[], &mut ledgers);
        }
        for l in &ledgers {
            assert!((l.granted() - l.entitled()).abs() < 1e-9, "{ledgers:?}");
        }
    }

    #[test]
    fn a_minimum_is_honoured_up_to_the_fair_share_only() {
        let mut b = bids(3, f64::from);
        b[0].min_workers = 1024;
        b[1].min_workers = 2;
        b[2].max_workers = 1;
        // 8 workers: shares 3.5, 3.5, 1 with nobody's minimum counted.
        assert_eq!(honoured_minimums(8, &b), vec![3, 2, 0]);
        b[1].min_workers = 5;
        assert_eq!(honoured_minimums(8, &b), vec![3, 3, 0]);
        assert_eq!(honoured_minimums(0, &b), vec![0, 0, 0]);
        // Planned with those minimums, the job asking for the cluster leaves the others theirs.
        b[1].min_workers = 2;
        let mut raised = b.clone();
        for (bid, m) in raised.iter_mut().zip(honoured_minimums(8, &b)) {
            bid.min_workers = m;
        }
        let mut ledgers = vec![FloorLedger::default(); 3];
        let a = plan(PolicyKind::Fair, &PlanSettings::default(), 8, &raised, &[], &mut ledgers);
        assert!(a.workers[1] >= 2 && a.workers[0] <= 4, "{:?}", a.workers);
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(PlanSettings::default().validate().is_ok());
        for bad in [
            PlanSettings { floor: -0.1, ..PlanSettings::default() },
            PlanSettings { floor: 1.1, ..PlanSettings::default() },
            PlanSettings { floor_window: 0, ..PlanSettings::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_ledger_sums_its_window_and_forgets_what_falls_out() {
        let mut l = FloorLedger::default();
        l.record(2.0, 1.0, 3);
        l.record(2.0, 0.0, 3);
        assert_eq!((l.entitled(), l.granted()), (4.0, 1.0));
        l.record(1.0, 4.0, 3);
        l.record(1.0, 2.0, 3);
        // The first epoch (2, 1) fell out of the window of 3.
        assert_eq!((l.entitled(), l.granted()), (4.0, 6.0));
        // And so on, record after record, between the sums recomputed from the window.
        let mut m = FloorLedger::default();
        let window: Vec<(f64, f64)> = (1..=10).map(|k| (f64::from(k), f64::from(k * k % 7))).collect();
        for (i, &(fair, got)) in window.iter().enumerate() {
            m.record(fair, got, 4);
            let kept = &window[i.saturating_sub(3)..=i];
            let want = (kept.iter().map(|e| e.0).sum::<f64>(), kept.iter().map(|e| e.1).sum::<f64>());
            assert_eq!((m.entitled(), m.granted()), want, "after record {i}");
        }
        // Owed: floor × (entitled + this epoch's share) − granted.
        assert!((l.deficit(0.5, 2.0) - (0.5 * 6.0 - 6.0)).abs() < 1e-12);
        assert!((l.deficit(1.0, 4.0) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn the_floor_serves_first_the_job_furthest_behind_its_share() {
        // One worker, two jobs owed it. Job 1 got 1 of the 2 worker-epochs it was entitled to,
        // job 0 got 2 of 4: with this epoch's half share counted as due, job 1 has had 1/2.5 and
        // job 0 2/4.5 of what they were owed, so job 1 is further behind and is served.
        let b = bids(2, f64::from);
        let mut ledgers = vec![FloorLedger::default(); 2];
        ledgers[0].record(2.0, 1.0, 24);
        ledgers[0].record(2.0, 1.0, 24);
        ledgers[1].record(1.0, 0.0, 24);
        ledgers[1].record(1.0, 1.0, 24);
        let fair = fair_shares(1, &b);
        assert_eq!(fair, vec![0.5, 0.5]);
        assert_eq!(service_floors(1.0, 1, &b, &ledgers, &fair), vec![0, 1]);
    }

    #[test]
    fn whole_shares_are_honoured_whatever_the_rounding() {
        // Ten jobs on ten workers: a share of exactly one each, however the water level rounds.
        let mut b = bids(10, f64::from);
        b.iter_mut().for_each(|j| j.min_workers = 1);
        assert_eq!(honoured_minimums(10, &b), vec![1; 10]);
        b.iter_mut().for_each(|j| j.min_workers = 2);
        assert_eq!(honoured_minimums(10, &b), vec![1; 10]);
        assert_eq!(honoured_minimums(30, &b), vec![2; 10]);
    }

    #[test]
    fn deficits_beyond_the_cluster_go_to_the_furthest_behind() {
        let b = bids(3, |_| 0.0);
        let mut ledgers = vec![FloorLedger::default(); 3];
        ledgers[0].record(2.0, 0.0, 8);
        ledgers[1].record(2.0, 1.0, 8);
        ledgers[2].record(2.0, 2.0, 8);
        // Each is owed at most its fair share (1) per epoch; two workers go to the two furthest
        // behind, and job 2, owed only this epoch's share, waits.
        let floors = service_floors(1.0, 2, &b, &ledgers, &[1.0, 1.0, 1.0]);
        assert_eq!(floors, vec![1, 1, 0]);
        // "Behind" is granted over entitled: a job that got 2 of 8 is further behind than one
        // that got 1 of 2, though it got more.
        let mut ledgers = vec![FloorLedger::default(); 2];
        ledgers[0].record(8.0, 2.0, 8);
        ledgers[1].record(2.0, 1.0, 8);
        let floors = service_floors(1.0, 1, &bids(2, |_| 0.0), &ledgers, &[1.0, 1.0]);
        assert_eq!(floors, vec![1, 0]);
    }

    /// One job of [`run_jobs`]: arrives at an epoch, has work to do, and gains `slope` per
    /// worker (quality's view of it).
    #[derive(Clone, Copy, Debug)]
    struct ToyJob {
        arrive: u32,
        work: f64,
        slope: f64,
    }

    /// Runs `jobs` on `workers` workers with linear speed-ups (one unit of work per worker per
    /// one-second epoch), exact knowledge of every job's work, and returns each job's completion
    /// time from its arrival.
    fn run_jobs(policy: PolicyKind, settings: &PlanSettings, workers: u32, jobs: &[ToyJob]) -> Vec<f64> {
        let rates: Vec<f64> = (0..=workers).map(f64::from).collect();
        let mut done = vec![0.0f64; jobs.len()];
        let mut finished: Vec<Option<f64>> = vec![None; jobs.len()];
        let mut ledgers: Vec<FloorLedger> = vec![FloorLedger::default(); jobs.len()];
        let mut attained = vec![0.0f64; jobs.len()];
        for t in 0..10_000u32 {
            let active: Vec<usize> =
                (0..jobs.len()).filter(|&j| jobs[j].arrive <= t && finished[j].is_none()).collect();
            if active.is_empty() {
                if finished.iter().all(Option::is_some) {
                    break;
                }
                continue;
            }
            let gains: Vec<Box<dyn Fn(u32) -> f64>> = active
                .iter()
                .map(|&j| Box::new(move |w: u32| jobs[j].slope * f64::from(w)) as Box<dyn Fn(u32) -> f64>)
                .collect();
            let bids: Vec<JobBid<&dyn Fn(u32) -> f64>> = active
                .iter()
                .zip(&gains)
                .map(|(&j, g)| JobBid { attained_service: attained[j], ..JobBid::new(Some(g.as_ref())) })
                .collect();
            let paces: Vec<Option<Pace<'_>>> = active
                .iter()
                .map(|&j| {
                    Some(Pace {
                        age_s: f64::from(t - jobs[j].arrive),
                        done: done[j],
                        remaining: jobs[j].work - done[j],
                        rates: crate::schedule::slowdown::Rates::new(&rates),
                        wait_s: 1.0,
                    })
                })
                .collect();
            let mut lent: Vec<FloorLedger> = active.iter().map(|&j| std::mem::take(&mut ledgers[j])).collect();
            let a = plan(policy, settings, workers, &bids, &paces, &mut lent);
            for ((&j, l), &w) in active.iter().zip(lent).zip(&a.workers) {
                ledgers[j] = l;
                attained[j] += f64::from(w);
                let left = jobs[j].work - done[j];
                if f64::from(w) >= left - 1e-9 && w > 0 {
                    finished[j] = Some(f64::from(t - jobs[j].arrive) + left / f64::from(w));
                }
                done[j] += f64::from(w);
            }
        }
        finished.into_iter().map(|f| f.unwrap_or(f64::INFINITY)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
        /// With exact knowledge of every job's work and speed, the bound at K = 1 ends no job
        /// much later than fair sharing does, however lopsided quality's gains are: within two
        /// epochs and 50% (integer workers round where fair shares are fractional, and the fair
        /// clock is an emulation of the fair run, not the run; 25% fails about one workload in
        /// 10,000, see docs/fairness.md). Without the
        /// bound (pure quality) the same workloads leave jobs far later.
        #[test]
        fn at_k_one_no_job_ends_much_later_than_under_fair_sharing(
            jobs in prop::collection::vec((0u32..20, 2.0f64..60.0, 0.01f64..100.0), 2..8),
            workers in 2u32..8,
        ) {
            let jobs: Vec<ToyJob> = jobs.into_iter().map(|(arrive, work, slope)| ToyJob { arrive, work, slope }).collect();
            let fair = run_jobs(PolicyKind::Fair, &PlanSettings::default(), workers, &jobs);
            let bounded = PlanSettings { floor: 0.0, floor_window: 24, max_slowdown: 1.0 };
            let slaq = run_jobs(PolicyKind::Slaq, &bounded, workers, &jobs);
            for (j, (&s, &f)) in slaq.iter().zip(&fair).enumerate() {
                prop_assert!(s <= 1.5 * f + 2.0, "job {j}: {s} s bounded, {f} s fair ({jobs:?}, {workers} workers)");
            }
        }
    }
}
