//! The **finish-time bound**: no job is planned to finish more than `K` times later than it
//! would under fair sharing (`[scheduler] max_slowdown`, [`PlanSettings::max_slowdown`]).
//!
//! Themis (Mahajan et al., NSDI 2020) measures a job's fairness as ρ = its finish time in the
//! shared cluster over its finish time with `1/N` of the cluster. A job's fair reference here is
//! kept on a **fair clock** ([`PaceLedger`]) that runs as the fair policy would have run it: each
//! epoch the jobs fair sharing would still be running get whole workers as `policy::fair` gives
//! them (the water level, the spare workers to the least served by the clock's own service), and
//! each clock advances at its job's predicted speed-up at that count. Its fair finish `F`
//! (seconds from its arrival) is when that clock reaches the job's whole work (done + predicted
//! remaining), or when it did. The job's predicted finish with `w` workers is
//! `age + remaining / rate(w)`; the bound gives each job, before any quality-driven worker is
//! handed out, the fewest workers that keep that at or below `K·F`, when waiting one more epoch
//! would miss it. Waiting is decided jointly: in deadline order, once the work due by a job's
//! deadline exceeds what the whole cluster can do by then, that job and every earlier one are
//! served now (jobs that could each wait cannot all wait). A job already past its bound gets up
//! to `⌈K·share⌉` workers (it catches up at `K` times the fair rate, not by taking the cluster).
//! When the bound's demands exceed the cluster, jobs already past their bound come first, then
//! the jobs whose ρ at their fair share would be largest.
//!
//! Unlike the service floor of [`super::counts`], which bounds the share of worker-epochs a job
//! gets over a window, this bounds what a user sees: when the job ends. A nearly converged job
//! can be parked, but only for as long as it can still make its deadline.
//!
//! Pure: the caller gives each job's [`Pace`] (age, work done and left, its rate at each count)
//! and keeps its [`PaceLedger`] from epoch to epoch.

use crate::policy::{JobBid, Problem, fair};
use crate::quality::TimeCurve;

pub use super::water::water_level;

/// Most workers a job's rate table covers (its rate is taken flat beyond).
pub const RATE_TABLE_LEN: u32 = 256;

/// A job's [`Pace::rates`] from its time model: iterations per second at `0, 1, …` workers, up
/// to `max` (and [`RATE_TABLE_LEN`]).
pub fn rate_table(time: &TimeCurve, max: u32) -> Vec<f64> {
    std::iter::once(0.0).chain((1..=max.min(RATE_TABLE_LEN)).map(|w| 1.0 / time.seconds(w))).collect()
}

/// Hands `want[j]` more workers to each job in the order `order` makes, while `left` lasts,
/// into `floors`. When every want fits in `left`, the order decides nothing and is not made (at
/// 100,000 jobs its sort was 4% of an epoch, and the wants most often fit).
pub(super) fn grant_in_order(want: &[u32], order: impl FnOnce() -> Vec<usize>, mut left: u32, floors: &mut [u32]) {
    if want.iter().map(|&w| u64::from(w)).sum::<u64>() <= u64::from(left) {
        floors.iter_mut().zip(want).for_each(|(f, &w)| *f += w);
        return;
    }
    for j in order() {
        let w = want[j].min(left);
        floors[j] += w;
        left -= w;
    }
}

/// `f64::total_cmp`'s order as unsigned integers: `total_order(a).cmp(&total_order(b))` is
/// `a.total_cmp(&b)`, and `!total_order(x)` orders as `-x` does (descending).
pub(super) fn total_order(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 { !bits } else { bits | 1 << 63 }
}

/// The jobs `keyed` gives, by ascending key, equal keys in job order: one sort of integers, each
/// a key and its job side by side (at 100,000 jobs, sorts of (key, job) pairs by a comparator
/// were 4-5% of an epoch).
pub(super) fn in_key_order(keyed: impl Iterator<Item = (u64, usize)>) -> Vec<usize> {
    let mut packed: Vec<u128> = keyed.map(|(key, j)| (u128::from(key) << 64) | j as u128).collect();
    packed.sort_unstable();
    packed.into_iter().map(|p| p as u64 as usize).collect()
}

/// Rates kept inline in a [`Rates`]: those at `0..RATE_HEAD` workers.
pub const RATE_HEAD: usize = 8;

/// A job's work per second at `0, 1, …, n` workers, the first [`RATE_HEAD`] also kept inline.
/// At thousands of jobs the bound reads each job's rates at its few workers every epoch; read
/// from each job's table, that was a cache miss per job (perf: the load of the rate was most of
/// the fair clocks' time), read from here it comes with the job's other figures.
#[derive(Clone, Copy, Debug)]
pub struct Rates<'a> {
    head: [f64; RATE_HEAD],
    all: &'a [f64],
    /// The highest rate at a whole count of workers, where the table is kept from epoch to
    /// epoch ([`RateTable`]): a deadline no count makes is known without a scan of the table
    /// (most of the bound's time at 4,000 jobs was such scans, 256 rates each). `+inf` for a
    /// table lent for one epoch: finding its peak would cost the scan it saves.
    peak: f64,
}

impl<'a> Rates<'a> {
    pub fn new(all: &'a [f64]) -> Self {
        Rates { head: rate_head(all), all, peak: f64::INFINITY }
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'a, f64> {
        self.all.iter()
    }

    fn at(&self, i: usize) -> f64 {
        if i < RATE_HEAD { self.head[i] } else { self.all[i] }
    }

    /// Work per second at `workers`, fractional counts interpolated linearly; flat past the
    /// table, 0 where the table is not finite.
    fn rate(&self, workers: f64) -> f64 {
        let n = self.all.len();
        if n == 0 || workers <= 0.0 {
            return 0.0;
        }
        let last = (n - 1) as f64;
        let w = workers.min(last);
        // `w` is not negative (`min` ignores a NaN): truncation is its floor, without a call to
        // `floor` (not an instruction on the baseline x86-64 this is built for; perf showed it).
        let lo = w as usize;
        let hi = (lo + 1).min(n - 1);
        let t = w - lo as f64;
        let r = self.at(lo) * (1.0 - t) + self.at(hi) * t;
        if r.is_finite() { r.max(0.0) } else { 0.0 }
    }
}

/// The highest of [`Rates::rate`] at `1, 2, …` workers up to the table's end (0 with none).
fn peak(head: [f64; RATE_HEAD], all: &[f64]) -> f64 {
    let rates = Rates { head, all, peak: f64::INFINITY };
    (1..all.len()).map(|w| rates.rate(w as f64)).fold(0.0, f64::max)
}

/// The first [`RATE_HEAD`] rates of `all` (zeros past its end).
fn rate_head(all: &[f64]) -> [f64; RATE_HEAD] {
    let mut head = [0.0; RATE_HEAD];
    head.iter_mut().zip(all).for_each(|(h, &r)| *h = r);
    head
}

/// A job's rate table kept from epoch to epoch with its head (the allocator's, per bid): lent
/// as [`Rates`] without copying the head from the table each epoch.
#[derive(Clone, Debug, Default)]
pub struct RateTable {
    head: [f64; RATE_HEAD],
    all: Vec<f64>,
    peak: f64,
}

impl RateTable {
    pub fn new(all: Vec<f64>) -> Self {
        let head = rate_head(&all);
        RateTable { head, peak: peak(head, &all), all }
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    pub fn rates(&self) -> Rates<'_> {
        Rates { head: self.head, all: &self.all, peak: self.peak }
    }
}

/// What the finish-time bound needs of one job this epoch. Work is in any unit the caller likes
/// (iterations, progress), as long as `done`, `remaining` and `rates` agree.
#[derive(Clone, Copy, Debug)]
pub struct Pace<'a> {
    /// Seconds since the job arrived.
    pub age_s: f64,
    /// Work done so far, counted from any origin: the job's clock counts from what it was at the
    /// first epoch it saw (a counter such as the last iteration will do).
    pub done: f64,
    /// Work predicted left (declared, or predicted from its curve: never read if unknown).
    pub remaining: f64,
    /// Work per second at `0, 1, …, n` workers (`rates[0]` = 0); flat past `n`.
    pub rates: Rates<'a>,
    /// Seconds until the next decision (the epoch).
    pub wait_s: f64,
}

impl Pace<'_> {
    /// Work per second at `workers`, fractional counts interpolated linearly.
    pub fn rate(&self, workers: f64) -> f64 {
        self.rates.rate(workers)
    }

    /// The worker-seconds its remaining work takes on `workers` workers.
    fn worker_seconds(&self, workers: u32) -> f64 {
        f64::from(workers) * self.remaining / self.rate(f64::from(workers)).max(1e-12)
    }

    /// The job's predicted finish, seconds from its arrival, if it keeps `workers` from now on.
    pub fn finish_with(&self, workers: f64) -> f64 {
        let r = self.rate(workers);
        if self.remaining <= 0.0 {
            self.age_s
        } else if r <= 0.0 {
            f64::INFINITY
        } else {
            self.age_s + self.remaining / r
        }
    }
}

/// One job's fair clock, kept from epoch to epoch (inside its `FloorLedger`, which lends it
/// through `AsMut`). The clock runs in one-worker seconds (the speed-up at the fair share times
/// the time passed), not in work: the job's speed at one worker is learnt as it runs, and the
/// clock is converted at today's speed, so an early estimate off by 10× does not stay in it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PaceLedger {
    /// One-worker seconds fair sharing would have given the job by `last_age_s`.
    fair_s: f64,
    /// The job's age at the last epoch, and its speed-up at its fair share since then.
    last_age_s: f64,
    last_fair_speedup: f64,
    /// When (age) the clock reached the job's work, once it has.
    fair_finish_s: Option<f64>,
    /// `Pace::done` at the first epoch: the clock's work is counted from there.
    origin: Option<f64>,
    /// Worker-seconds fair sharing would have given the job, and its workers there since the
    /// last epoch: fair sharing breaks ties by least attained service, and so does the clock.
    fair_service_s: f64,
    last_fair_count: f64,
}

impl PaceLedger {
    /// Moves the fair clock to `pace.age_s` at the speed-up of the last epoch's fair share;
    /// returns when (age) fair sharing would have finished the job, if it would have by now.
    fn advance(&mut self, pace: &Pace<'_>) -> Option<f64> {
        let dt = (pace.age_s - self.last_age_s).max(0.0);
        self.fair_s += self.last_fair_speedup * dt;
        self.fair_service_s += self.last_fair_count * dt;
        self.last_age_s = pace.age_s;
        let one = pace.rate(1.0);
        let total = self.done(pace) + pace.remaining.max(0.0);
        let fair_done = one * self.fair_s;
        if one <= 0.0 || fair_done < total {
            // The work left may grow again after the clock passed it: then it runs again.
            self.fair_finish_s = None;
            return None;
        }
        // When the clock passed the work: at the last speed-up, that many seconds ago. Kept
        // once known.
        let rate = one * self.last_fair_speedup;
        let ago = if rate > 0.0 { (fair_done - total) / rate } else { 0.0 };
        Some(*self.fair_finish_s.get_or_insert((pace.age_s - ago).max(0.0)))
    }

    /// Work done since the first epoch the clock saw.
    fn done(&mut self, pace: &Pace<'_>) -> f64 {
        (pace.done - *self.origin.get_or_insert(pace.done)).max(0.0)
    }

    /// The job's age at the last epoch (a restarted scheduler counts on from it).
    pub fn age_s(&self) -> f64 {
        self.last_age_s
    }

    /// Sets the clock's speed until the next epoch to that of `count` workers, and returns the
    /// fair finish (seconds from arrival) if the job ran at `ahead` workers to its end.
    fn run_at(&mut self, pace: &Pace<'_>, count: f64, ahead: f64) -> f64 {
        let one = pace.rate(1.0);
        self.last_fair_speedup = if one > 0.0 { pace.rate(count) / one } else { 0.0 };
        self.last_fair_count = count;
        let rate = pace.rate(ahead);
        let left = self.done(pace) + pace.remaining.max(0.0) - one * self.fair_s;
        if rate <= 0.0 { f64::INFINITY } else { pace.age_s + left.max(0.0) / rate }
    }

    /// Fair finish as [`PaceLedger::advance`] then [`PaceLedger::run_at`] give it.
    #[cfg(test)]
    fn fair_finish(&mut self, pace: &Pace<'_>, share: f64) -> f64 {
        match self.advance(pace) {
            Some(at) => {
                self.run_at(pace, 0.0, 0.0);
                at
            }
            None => self.run_at(pace, share, share),
        }
    }

    /// When (seconds from arrival) the clock says fair sharing finished the job, once it has
    /// (`None` while the clock runs).
    pub fn fair_finish_s(&self) -> Option<f64> {
        self.fair_finish_s
    }

    /// Its age at the last epoch over its fair finish, once fair sharing would have finished it
    /// (a lower bound on its slowdown while it runs); `None` before.
    pub fn slowdown(&self) -> Option<f64> {
        self.fair_finish_s.filter(|&f| f > 0.0).map(|f| self.last_age_s / f)
    }

    /// One-worker seconds fair sharing would have given the job by the last epoch.
    pub fn fair_seconds(&self) -> f64 {
        self.fair_s
    }
}

impl AsMut<PaceLedger> for PaceLedger {
    fn as_mut(&mut self) -> &mut PaceLedger {
        self
    }
}

/// The workers each job must get this epoch to keep its predicted finish within
/// `max_slowdown` (`K`) times its fair finish, granted while the cluster lasts, the jobs past
/// their bound first, then those with the largest ρ at their fair share. Books every job's fair
/// clock in `ledgers`. Jobs with no pace get none. Off (all zeros, clocks still kept) when the bound is not finite.
///
/// The fair clock's shares are those of a fair cluster, not of this one: a job that fair sharing
/// would have finished by now holds no share of it (under a quality policy, parked jobs linger
/// and would otherwise shrink everybody's fair share, and with it the bound).
pub fn slowdown_floors<L: AsMut<PaceLedger>>(
    max_slowdown: f64,
    num_workers: u32,
    max_workers: &[u32],
    fair: &[f64],
    paces: &[Option<Pace<'_>>],
    ledgers: &mut [L],
) -> Vec<u32> {
    bound_floors(max_slowdown, num_workers, max_workers, (fair, false), paces, ledgers)
}

/// [`slowdown_floors`], where `fair_is_level` says that `fair` is also the fair cluster's water
/// level while no job is done (`fair` is `water_level(num_workers, [0, max] each)`, as
/// `counts::fair_shares` gives it when no job has a minimum): the level is then not computed
/// twice (at 4,000 jobs each is a few percent of an epoch).
pub(crate) fn bound_floors<L: AsMut<PaceLedger>>(
    max_slowdown: f64,
    num_workers: u32,
    max_workers: &[u32],
    (fair, fair_is_level): (&[f64], bool),
    paces: &[Option<Pace<'_>>],
    ledgers: &mut [L],
) -> Vec<u32> {
    let k = max_slowdown;
    let mut need = vec![0u32; paces.len()];
    let mut urgency = vec![0.0f64; paces.len()];
    let mut late = vec![false; paces.len()];
    let mut deferred: Vec<Deferred> = Vec::new();
    let mut due_now = 0.0f64;
    let done_at: Vec<Option<f64>> =
        paces.iter().zip(ledgers.iter_mut()).map(|(p, l)| p.as_ref().and_then(|p| l.as_mut().advance(p))).collect();
    let levels = fair_is_level.then_some(fair).filter(|_| done_at.iter().all(Option::is_none));
    let (counts, virtual_fair) = fair_cluster(num_workers, max_workers, &done_at, levels, paces, ledgers);
    for (j, pace) in paces.iter().enumerate() {
        let Some(pace) = pace else { continue };
        let fair_finish = match done_at[j] {
            Some(at) => {
                ledgers[j].as_mut().run_at(pace, 0.0, 0.0);
                at
            }
            None => {
                let count = f64::from(counts[j]);
                ledgers[j].as_mut().run_at(pace, count, count.max(virtual_fair[j]))
            }
        };
        if !k.is_finite() || pace.remaining <= 0.0 || !fair_finish.is_finite() {
            continue;
        }
        let cap = max_workers[j].min(num_workers);
        let late_cap = ((k * fair[j] - 1e-9).ceil().max(1.0) as u32).min(cap);
        match demand(j, pace, k * fair_finish.max(1e-9), cap) {
            Demand::Late => {
                late[j] = true;
                need[j] = late_cap;
            }
            Demand::Now(w) => need[j] = w,
            Demand::Deferred(d) => deferred.push(d),
        }
        if need[j] > 0 {
            due_now += pace.worker_seconds(need[j]);
        }
        urgency[j] = pace.finish_with(fair[j]) / fair_finish.max(1e-9);
    }
    let wait = paces.iter().flatten().map(|p| p.wait_s).fold(0.0, f64::max);
    for d in owed_jointly(&mut deferred, due_now, num_workers, wait) {
        need[d.job] = d.workers;
    }
    // The late first, then the most urgent, equals in job order.
    let order = || {
        let (need, late, urgency) = (&need, &late, &urgency);
        let of = |is_late: bool| {
            let jobs = (0..paces.len()).filter(move |&j| need[j] > 0 && late[j] == is_late);
            in_key_order(jobs.map(|j| (!total_order(urgency[j]), j)))
        };
        let mut order = of(true);
        order.extend(of(false));
        order
    };
    let mut floors = vec![0; paces.len()];
    grant_in_order(&need, order, num_workers, &mut floors);
    floors
}

/// The fair cluster this epoch: the jobs fair sharing would still be running (a job without a
/// pace counts as running and as served the most), in whole workers as the fair policy gives
/// them (the spare ones to the least served by the clocks' own service), and their water levels.
fn fair_cluster<L: AsMut<PaceLedger>>(
    num_workers: u32,
    max_workers: &[u32],
    done_at: &[Option<f64>],
    levels: Option<&[f64]>,
    paces: &[Option<Pace<'_>>],
    ledgers: &mut [L],
) -> (Vec<u32>, Vec<f64>) {
    let level = || {
        let bounds: Vec<(f64, f64)> = max_workers
            .iter()
            .zip(done_at)
            .map(|(&m, d)| (0.0, if d.is_some() { 0.0 } else { f64::from(m) }))
            .collect();
        water_level(f64::from(num_workers), &bounds)
    };
    let levels = match levels {
        Some(levels) => {
            debug_assert!(levels.iter().zip(level()).all(|(a, b)| a.to_bits() == b.to_bits()), "the levels given");
            levels.to_vec()
        }
        None => level(),
    };
    let bids: Vec<JobBid<()>> = (0..paces.len())
        .map(|j| JobBid {
            min_workers: 0,
            max_workers: if done_at[j].is_some() { 0 } else { max_workers[j] },
            attained_service: if paces[j].is_some() { ledgers[j].as_mut().fair_service_s } else { f64::INFINITY },
            gain: None,
            weight: 1.0,
        })
        .collect();
    (fair::allocate(&Problem { num_workers, jobs: &bids }).workers, levels)
}

/// A job that could wait this epoch and still make its deadline: when it must finish (seconds
/// from now), on how many workers, and the worker-seconds that takes.
#[derive(Clone, Copy, Debug)]
struct Deferred {
    job: usize,
    slack: f64,
    workers: u32,
    worker_s: f64,
}

/// What the bound asks for one job this epoch.
enum Demand {
    /// Past its deadline, or unable to make it on any count: ⌈K·share⌉.
    Late,
    /// The fewest workers that make the deadline, owed now: waiting an epoch would miss it.
    Now(u32),
    /// It may wait, alone; [`owed_jointly`] decides whether it may wait with the others.
    Deferred(Deferred),
}

/// The bound's demand of job `job` with `pace` and `deadline` (seconds from its arrival), on at
/// most `cap` workers.
fn demand(job: usize, pace: &Pace<'_>, deadline: f64, cap: u32) -> Demand {
    let slack = deadline - pace.age_s;
    if slack <= 0.0 {
        return Demand::Late;
    }
    let rate = pace.remaining / slack;
    let needed = rate * (1.0 - 1e-9);
    if pace.rates.peak < needed {
        // No count makes it, the table's highest rate says (`find` below would scan it all).
        return Demand::Late;
    }
    // The fewest workers whose rate makes the deadline; past the table the rate is flat.
    let table = (pace.rates.len() as u32).saturating_sub(1).min(cap);
    match (1..=table).find(|&w| pace.rate(f64::from(w)) >= needed) {
        // Owed now only if, left idle until the next decision, it could no longer make the
        // deadline at that count: until then quality may use its workers.
        Some(w) if pace.age_s + pace.wait_s + pace.remaining / pace.rate(f64::from(w)) <= deadline => {
            Demand::Deferred(Deferred { job, slack, workers: w, worker_s: pace.worker_seconds(w) })
        }
        Some(w) => Demand::Now(w),
        None => Demand::Late,
    }
}

/// Waiting is joint: jobs that each could wait may not all wait. In deadline order, once the
/// worker-seconds due by a job's deadline (`due_now` for the jobs served now, then the deferred
/// ones) exceed what the cluster can do by then less the epoch waited, that job and every
/// earlier one are owed their workers now: those are returned.
///
/// Only a job whose deadline comes before the cluster could do all that is due can be that
/// job: the others are never sorted (at 4,000 jobs the sort of them all was 5% of an epoch).
/// They come after every such job in deadline order, so the order and the sums of those
/// before them are the full sort's.
fn owed_jointly(deferred: &mut [Deferred], due_now: f64, num_workers: u32, wait_s: f64) -> &[Deferred] {
    let capacity = |d: &Deferred| f64::from(num_workers) * (d.slack - wait_s);
    // Every sum of the work due is at most the total, but for roundings far below the margin
    // (the work is not negative).
    let total = deferred.iter().fold(due_now, |sum, d| sum + d.worker_s) * (1.0 + 1e-9);
    let mut may_be_owed = deferred.len();
    if total.is_finite() {
        may_be_owed = 0;
        for i in 0..deferred.len() {
            if capacity(&deferred[i]) < total {
                deferred.swap(i, may_be_owed);
                may_be_owed += 1;
            }
        }
    }
    let deferred = &mut deferred[..may_be_owed];
    // Job order breaks ties, as a stable sort of them in job order would.
    deferred.sort_unstable_by(|a, b| a.slack.total_cmp(&b.slack).then(a.job.cmp(&b.job)));
    let mut due = due_now;
    let mut tight = 0;
    for (i, d) in deferred.iter().enumerate() {
        due += d.worker_s;
        if due > capacity(d) {
            tight = i + 1;
        }
    }
    &deferred[..tight]
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Integer keys order jobs as the comparators on (key, job) did: ascending by
        /// `total_cmp` or descending (`!total_order`), equal keys in job order, for any floats
        /// (zeros of both signs, infinities, NaNs and repeats included).
        #[test]
        fn integer_keys_order_as_the_comparators(
            picks in proptest::collection::vec(0usize..10, 0..60),
            shuffle in proptest::collection::vec(0usize..1000, 0..60),
        ) {
            let special = [0.0, -0.0, 1.5, -1.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN, 1e-300, 2.0];
            let keys: Vec<f64> = picks.iter().map(|&i| special[i]).collect();
            let mut jobs: Vec<usize> = (0..keys.len()).collect();
            for (i, &s) in shuffle.iter().enumerate().take(jobs.len()) {
                jobs.swap(i, s % keys.len());
            }
            let mut up = jobs.clone();
            up.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]).then(a.cmp(&b)));
            proptest::prop_assert_eq!(in_key_order(jobs.iter().map(|&j| (total_order(keys[j]), j))), up);
            let mut down = jobs.clone();
            down.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]).then(a.cmp(&b)));
            proptest::prop_assert_eq!(in_key_order(jobs.iter().map(|&j| (!total_order(keys[j]), j))), down);
        }
    }

    #[test]
    fn rates_interpolate_and_are_flat_past_the_table() {
        let rates = [0.0, 1.0, 2.0, 2.5];
        let p = Pace { age_s: 0.0, done: 0.0, remaining: 10.0, rates: Rates::new(&rates), wait_s: 0.0 };
        assert_eq!(p.rate(0.0), 0.0);
        assert!((p.rate(1.5) - 1.5).abs() < 1e-12);
        assert!((p.rate(2.5) - 2.25).abs() < 1e-12);
        assert_eq!(p.rate(9.0), 2.5);
        assert_eq!(p.finish_with(2.0), 5.0);
        assert_eq!(p.finish_with(0.0), f64::INFINITY);
    }

    #[test]
    fn the_fair_clock_runs_at_the_fair_rate_of_each_epoch() {
        let rates = [0.0, 1.0, 2.0, 3.0, 4.0];
        let mut l = PaceLedger::default();
        // 100 units of work; fair share 2 workers (rate 2) for 10 s, then 1 worker.
        let at = |age: f64, done: f64| Pace {
            age_s: age,
            done,
            remaining: 100.0 - done,
            rates: Rates::new(&rates),
            wait_s: 0.0,
        };
        assert_eq!(l.fair_finish(&at(0.0, 0.0), 2.0), 50.0);
        assert_eq!(l.fair_finish(&at(10.0, 5.0), 1.0), 10.0 + 80.0);
        assert!((l.fair_seconds() - 20.0).abs() < 1e-12);
        assert_eq!(l.slowdown(), None, "fair sharing would not have finished it yet");
        // Fair would have finished at age 90; the job, slower, is still running at 120.
        assert_eq!(l.fair_finish(&at(120.0, 60.0), 1.0), 90.0);
        assert_eq!(l.fair_finish(&at(130.0, 70.0), 1.0), 90.0);
        assert_eq!(l.slowdown(), Some(130.0 / 90.0));
        // Its speed turns out twice what was thought: the clock's 130 one-worker seconds are
        // 260 units, past its work since age 50.
        let fast = [0.0, 2.0, 4.0, 6.0, 8.0];
        let p = Pace { age_s: 140.0, done: 80.0, remaining: 20.0, rates: Rates::new(&fast), wait_s: 0.0 };
        assert!(l.fair_finish(&p, 1.0) <= 140.0);
    }

    #[test]
    fn a_parked_job_is_given_just_what_its_deadline_needs() {
        // Alone on 2 workers (rate 2): 100 units take 50 s fair. K = 2: the deadline is 100 s.
        // From the start it needs 1 unit/s (one worker), and waiting an epoch (5 s) would miss.
        let rates = [0.0, 1.0, 2.0, 3.0, 4.0];
        let mut l = vec![PaceLedger::default()];
        let pace = |age: f64, done: f64| {
            [Some(Pace { age_s: age, done, remaining: 100.0 - done, rates: Rates::new(&rates), wait_s: 5.0 })]
        };
        assert_eq!(slowdown_floors(2.0, 2, &[8], &[2.0], &pace(0.0, 0.0), &mut l), vec![1]);
        // Ahead of its pace it may wait: at 20 s with 50 done, 50 left take 50 s on one worker.
        assert_eq!(slowdown_floors(2.0, 2, &[8], &[2.0], &pace(20.0, 50.0), &mut l), vec![0]);
        // Parked until 70 with 60 left: 2 per second over the 30 s left.
        assert_eq!(slowdown_floors(2.0, 2, &[8], &[2.0], &pace(70.0, 40.0), &mut l), vec![2]);
        // Past its deadline: ⌈K·share⌉, here the whole (two-worker) cluster.
        assert_eq!(slowdown_floors(2.0, 2, &[8], &[2.0], &pace(110.0, 50.0), &mut l), vec![2]);
        // Off: none, whatever the lateness.
        assert_eq!(slowdown_floors(f64::INFINITY, 2, &[8], &[2.0], &pace(120.0, 50.0), &mut l), vec![0]);
        // A late job on a big cluster catches up at K times its share, not on the cluster.
        let mut l = vec![PaceLedger::default()];
        slowdown_floors(2.0, 64, &[64], &[1.0], &pace(0.0, 0.0), &mut l);
        assert_eq!(slowdown_floors(2.0, 64, &[64], &[1.0], &pace(1000.0, 0.0), &mut l), vec![2]);
    }

    #[test]
    fn when_the_cluster_is_short_the_latest_jobs_come_first() {
        // Three jobs on two workers: a fair share of 2/3 each. All are long past their fair
        // finish (the jobs with 15, 16 and 19 units would have ended at 22.5, 24 and 28.5 s);
        // the two furthest past it, in ratio, are served.
        let rates = [0.0, 1.0, 2.0];
        let mut l = vec![PaceLedger::default(); 3];
        let p = |age: f64, rem: f64| {
            Some(Pace { age_s: age, done: 10.0, remaining: rem, rates: Rates::new(&rates), wait_s: 5.0 })
        };
        slowdown_floors(1.0, 2, &[2; 3], &[1.0; 3], &[p(0.0, 5.0), p(0.0, 6.0), p(0.0, 9.0)], &mut l);
        let now = [p(1000.0, 5.0), p(1000.0, 6.0), p(1000.0, 9.0)];
        assert_eq!(slowdown_floors(1.0, 2, &[2; 3], &[1.0; 3], &now, &mut l), vec![1, 1, 0]);
    }

    #[test]
    fn a_late_job_is_served_before_a_newcomer_that_could_take_the_cluster() {
        // K = 1, two workers. Job 0 (10 units) ran alone on one worker in its clock and would
        // have ended at 10 s; at 11 s it still has 2 left: late. Job 1 arrives with 20 units, and
        // with job 0 gone from the fair cluster its clock gives it both workers: it needs both now.
        // Its ρ at a one-worker share (2) is larger than the late job's (1.3); the late job still
        // comes first, with ⌈K·share⌉ = 1 (CI found the other order leaving a late job at 1.42×).
        let rates = [0.0, 1.0, 2.0];
        let mut l = vec![PaceLedger::default(); 2];
        let p = |age: f64, done: f64, total: f64| {
            Some(Pace { age_s: age, done, remaining: total - done, rates: Rates::new(&rates), wait_s: 1.0 })
        };
        slowdown_floors(1.0, 2, &[2; 2], &[1.0, 1.0], &[p(0.0, 0.0, 10.0), None], &mut l);
        assert_eq!(
            slowdown_floors(1.0, 2, &[2; 2], &[1.0, 1.0], &[p(11.0, 8.0, 10.0), p(0.0, 0.0, 20.0)], &mut l),
            vec![1, 1]
        );
    }

    #[test]
    fn jobs_that_could_each_wait_are_served_when_they_cannot_all_wait() {
        // Two workers, two jobs of 20 units, one worker each under fair sharing: both fair
        // finishes are at 20 s and, at K = 1.5, both deadlines at 30 s. At 14 s job 0 has been
        // parked (20 left), job 1 has 5 left. Alone, either could wait the 5 s epoch: job 0 then
        // makes 30 s on both workers (14 + 5 + 10), job 1 on one (14 + 5 + 5). Together they
        // cannot: 20 + 5 worker-seconds are due by 30 s and two workers give 22 after the wait.
        // So they are owed now; job 0, the further behind, first.
        let rates = [0.0, 1.0, 2.0];
        let p = |age: f64, done: f64| {
            Some(Pace { age_s: age, done, remaining: 20.0 - done, rates: Rates::new(&rates), wait_s: 5.0 })
        };
        let floors = |second_done: f64| {
            let mut l = vec![PaceLedger::default(); 2];
            slowdown_floors(1.5, 2, &[2; 2], &[1.0; 2], &[p(0.0, 0.0), p(0.0, 0.0)], &mut l);
            slowdown_floors(1.5, 2, &[2; 2], &[1.0; 2], &[p(14.0, 0.0), p(14.0, second_done)], &mut l)
        };
        assert_eq!(floors(15.0), vec![2, 0]);
        // With job 1 at 1 unit left, 21 worker-seconds fit in the 22: both may wait.
        assert_eq!(floors(19.0), vec![0, 0]);
    }

    /// The demand by its definition: the fewest workers whose rate makes the deadline, found by
    /// a scan of the table (what `demand` did before it read the table's peak).
    fn demand_by_scan(pace: &Pace<'_>, deadline: f64, cap: u32) -> Option<(u32, bool)> {
        let slack = deadline - pace.age_s;
        if slack <= 0.0 {
            return None;
        }
        let rate = pace.remaining / slack;
        let table = (pace.rates.len() as u32).saturating_sub(1).min(cap);
        let w = (1..=table).find(|&w| pace.rate(f64::from(w)) >= rate * (1.0 - 1e-9))?;
        Some((w, pace.age_s + pace.wait_s + pace.remaining / pace.rate(f64::from(w)) <= deadline))
    }

    proptest::proptest! {
        /// Skipping the order when every want fits grants what the order would: each job's
        /// want, in order, while workers last, on top of what it had.
        #[test]
        fn a_grant_without_its_order_is_the_grant_in_order(
            want in proptest::collection::vec(proptest::prop_oneof![1 => proptest::strategy::Just(0u32), 3 => 0u32..20], 0..30),
            had in proptest::collection::vec(0u32..5, 30),
            left in 0u32..300,
            seed in 0u64..1000,
        ) {
            let mut order: Vec<usize> = (0..want.len()).collect();
            order.sort_by_key(|&j| (j as u64).wrapping_mul(seed.wrapping_mul(2) + 1) % 31);
            let mut expected = had[..want.len()].to_vec();
            let mut rest = left;
            for &j in &order {
                let w = want[j].min(rest);
                expected[j] += w;
                rest -= w;
            }
            let mut floors = had[..want.len()].to_vec();
            grant_in_order(&want, || order.clone(), left, &mut floors);
            proptest::prop_assert_eq!(floors, expected);
        }

        /// Sorting only the jobs whose deadline comes before the cluster could do all that is
        /// due owes what the sort of them all owed: the same jobs, in the same order, with
        /// slacks that tie, are negative, or leave every job or none owed.
        #[test]
        fn the_jobs_left_unsorted_change_nothing_owed(
            jobs in proptest::collection::vec(
                (proptest::prop_oneof![3 => -5.0f64..200.0, 1 => proptest::sample::select(vec![0.0, 10.0, 50.0])], 0.0f64..400.0),
                0..40,
            ),
            (due_now, num_workers, wait_s) in (0.0f64..2000.0, 1u32..40, 0.0f64..20.0),
        ) {
            let mut deferred: Vec<Deferred> = jobs
                .iter()
                .enumerate()
                .map(|(job, &(slack, worker_s))| Deferred { job, slack, workers: 1, worker_s })
                .collect();
            // The definition: all of them in deadline order, job order on ties.
            let mut sorted = deferred.clone();
            sorted.sort_by(|a, b| a.slack.total_cmp(&b.slack).then(a.job.cmp(&b.job)));
            let (mut due, mut tight) = (due_now, 0);
            for (i, d) in sorted.iter().enumerate() {
                due += d.worker_s;
                if due > f64::from(num_workers) * (d.slack - wait_s) {
                    tight = i + 1;
                }
            }
            let expected: Vec<usize> = sorted[..tight].iter().map(|d| d.job).collect();
            let got: Vec<usize> = owed_jointly(&mut deferred, due_now, num_workers, wait_s).iter().map(|d| d.job).collect();
            proptest::prop_assert_eq!(got, expected);
        }

        /// The table's peak decides only what the scan would: the same demand on any table,
        /// with rates that fall, repeat, are negative or are not finite.
        #[test]
        fn the_peak_changes_no_demand(
            table in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => 0.0f64..10.0,
                    1 => proptest::sample::select(vec![-1.0, 0.0, f64::INFINITY, f64::NAN, 5.0]),
                ],
                0..40,
            ),
            (age, remaining, deadline) in (0.0f64..100.0, 0.0f64..500.0, 0.0f64..300.0),
            cap in 0u32..50,
        ) {
            let kept = RateTable::new(table);
            let pace = Pace { age_s: age, done: 0.0, remaining, rates: kept.rates(), wait_s: 5.0 };
            let got = match demand(0, &pace, deadline, cap) {
                Demand::Late => None,
                Demand::Now(w) => Some((w, false)),
                Demand::Deferred(d) => Some((d.workers, true)),
            };
            proptest::prop_assert_eq!(got, demand_by_scan(&pace, deadline, cap));
        }

        /// While the cluster can serve every demand, no job is left where its predicted finish
        /// passes `K` times its fair finish: it either gets workers that make the deadline, or it
        /// can still make it at the same count after waiting one epoch.
        #[test]
        fn while_the_cluster_lasts_no_job_is_planned_past_its_bound(
            jobs in proptest::collection::vec((0.0f64..500.0, 0.0f64..100.0, 0.1f64..100.0, 0.01f64..2.0, 0.0f64..0.3), 1..12),
            k in 1.0f64..4.0,
            extra in 0u32..40,
        ) {
            let tables: Vec<Vec<f64>> = jobs
                .iter()
                .map(|&(_, _, _, r1, serial)| {
                    std::iter::once(0.0).chain((1..=16).map(|w| r1 / (serial + (1.0 - serial) / f64::from(w)))).collect()
                })
                .collect();
            let paces: Vec<Option<Pace<'_>>> = jobs
                .iter()
                .zip(&tables)
                .map(|(&(age, done, remaining, _, _), rates)| Some(Pace { age_s: age, done, remaining, rates: Rates::new(rates), wait_s: 5.0 }))
                .collect();
            let n = jobs.len() as u32;
            let max = vec![16u32; jobs.len()];
            // A first pass to learn the demands, on a fresh clock each time.
            let fair = vec![2.0; jobs.len()];
            let demand: u32 =
                slowdown_floors(k, 1_000, &max, &fair, &paces, &mut vec![PaceLedger::default(); jobs.len()]).iter().sum();
            let workers = demand + extra;
            let fair = water_level(f64::from(workers), &vec![(0.0, 16.0); jobs.len()]);
            let mut ledgers = vec![PaceLedger::default(); jobs.len()];
            let floors = slowdown_floors(k, workers, &max, &fair, &paces, &mut ledgers);
            proptest::prop_assert!(floors.iter().sum::<u32>() <= workers);
            let mut check = vec![PaceLedger::default(); jobs.len()];
            let shares = water_level(f64::from(workers), &vec![(0.0, 16.0); jobs.len()]);
            for (j, pace) in paces.iter().enumerate() {
                let pace = pace.as_ref().unwrap();
                let fair_finish = check[j].run_at(pace, shares[j], shares[j]);
                let deadline = k * fair_finish;
                if pace.age_s >= deadline {
                    continue; // already late: it gets up to K times its share, tested above
                }
                let w = floors[j];
                let made = pace.finish_with(f64::from(w)) <= deadline * (1.0 + 1e-9);
                let can_wait = (1..=16).any(|c| pace.age_s + pace.wait_s + pace.remaining / pace.rate(f64::from(c)) <= deadline)
                    && w == 0;
                let cannot = pace.finish_with(16.0) > deadline;
                proptest::prop_assert!(made || can_wait || cannot, "job {j}: {w} workers, deadline {deadline}, {pace:?} (n {n})");
            }
        }
    }
}
