//! How a teams' run changes a job's workers, as the live path does: a shrink is a graceful stop
//! (the job is told at once and keeps its workers for its tenant's grace, then restarts on
//! fewer), a grow waits for free workers and restarts the job on more; every change costs the
//! job a restart of `restart_s` on all its workers. A shrink not needed to restore a guarantee
//! waits until the job has run `hold_s` (and its tenant's `min_run_s`) since its last grow.

use super::replay::ReplayJob;
use crate::schedule::{Quotas, Saves, TenantShare};

use crate::sim::teams::track::Track;

/// Each tenant's timing settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TenantTimes {
    pub grace_s: f64,
    pub min_run_s: f64,
}

/// A job's pending change.
#[derive(Clone, Debug)]
struct Move {
    /// Workers the last plan gave it.
    target: u32,
    /// When a shrink to `target` takes effect (told at `noticed_at`).
    release_at: Option<f64>,
    noticed_at: f64,
    /// When its restart ends.
    resume_at: Option<f64>,
    /// When its workers last changed (a grant, or a release).
    changed_at: f64,
    /// When its current generation began computing (its last checkpoint is a whole number of
    /// `checkpoint_s` after).
    started_at: f64,
    /// What the last plan gave it (`None` before its first plan).
    planned: Option<u32>,
    /// Its saves, as the scheduler sees them.
    saves: Saves,
    /// Levels of workers it was planned above what it held while a lower class of its tenant
    /// held workers, each with when it was first wanted (rising).
    class_waits: Vec<(u32, f64)>,
}

/// The longest interval between a job's saves that a change of its workers waits for (the
/// live allocator's default).
const SAVE_WAIT_MAX_S: f64 = crate::schedule::saves::DEFAULT_MAX_WAIT_S;

impl Default for Move {
    fn default() -> Self {
        Move {
            target: 0,
            release_at: None,
            noticed_at: 0.0,
            resume_at: None,
            changed_at: f64::NEG_INFINITY,
            started_at: 0.0,
            planned: None,
            saves: Saves::default(),
            class_waits: Vec::new(),
        }
    }
}

/// The teams of one run: who each job belongs to, what each tenant is promised, and the
/// changes in flight. The engine ([`crate::sim::curves::engine::run_with`]) calls it.
pub struct Teams<'a> {
    pub shares: &'a [TenantShare],
    pub times: &'a [TenantTimes],
    /// `tenant_of[j]`: the tenant of the workload's job `j`.
    pub tenant_of: &'a [usize],
    /// Seconds a change of workers costs the job (no progress on any of its workers).
    pub restart_s: f64,
    /// Seconds a job keeps workers it got, unless a guarantee needs them (the live scheduler's
    /// `min_generation_ms`).
    pub hold_s: f64,
    /// A job's state is saved every this many seconds of a generation (0: at its stop, within
    /// the grace, as `slaq.elastic` with a checkpoint directory does: nothing is lost).
    pub checkpoint_s: f64,
    /// `class_of[j]`: the priority class of job `j` inside its tenant (empty: all 0).
    pub class_of: &'a [u8],
    num_workers: u32,
    max_per_job: u32,
    moves: Vec<Move>,
    /// Each tenant's workers in the last plan: grants never take a tenant past it.
    quota: Vec<u32>,
    /// The jobs the last plan held for their next save.
    saving: Vec<bool>,
    pub track: Track,
}

impl<'a> Teams<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        num_workers: u32,
        max_per_job: u32,
        shares: &'a [TenantShare],
        times: &'a [TenantTimes],
        tenant_of: &'a [usize],
        restart_s: f64,
        hold_s: f64,
    ) -> Self {
        Teams {
            shares,
            times,
            tenant_of,
            restart_s,
            hold_s,
            checkpoint_s: 0.0,
            class_of: &[],
            num_workers,
            max_per_job,
            moves: vec![Move::default(); tenant_of.len()],
            quota: vec![num_workers; shares.len()],
            saving: vec![false; tenant_of.len()],
            track: Track::new(num_workers, shares),
        }
    }

    /// What a change of job `j`'s workers would cost it now, in seconds of its time: the
    /// restart, and the work since its last checkpoint (as the live scheduler prices a
    /// submitted job's restart with its reports' `checkpoint_age_s`).
    pub fn stop_cost_s(&self, j: usize, now: f64) -> f64 {
        let m = &self.moves[j];
        let age = if m.resume_at.is_none() && self.checkpoint_s > 0.0 {
            (now - m.started_at).max(0.0) % self.checkpoint_s
        } else {
            0.0
        };
        self.restart_s + age
    }

    /// Which of the `active` jobs wait for their next save before their workers change
    /// ([`Saves`], fed here with each computing job's checkpoint age): none while a tenant is
    /// owed its guarantee (a reclaim waits for no save: the job has its grace). Such a job's
    /// count is what it holds, neither more nor fewer.
    pub fn waiting_for_saves(&mut self, now: f64, active: &[usize], jobs: &[&ReplayJob<'_>]) -> Vec<bool> {
        let owed = self.track.guarantee_owed();
        self.saving.fill(false);
        active
            .iter()
            .map(|&j| {
                let m = &mut self.moves[j];
                let computing = jobs[j].workers > 0 && m.resume_at.is_none() && m.release_at.is_none();
                if !(computing && self.checkpoint_s > 0.0) {
                    return false;
                }
                m.saves.declare(Some(self.checkpoint_s));
                m.saves.observe(now, (now - m.started_at).max(0.0) % self.checkpoint_s);
                self.saving[j] = !owed && m.saves.waits(now, SAVE_WAIT_MAX_S);
                self.saving[j]
            })
            .collect()
    }

    /// The next release or end of a restart.
    pub fn next_event(&self) -> Option<f64> {
        self.moves.iter().flat_map(|m| [m.release_at, m.resume_at]).flatten().min_by(f64::total_cmp)
    }

    /// The run's state over `[now, now + dt]`, for the metrics.
    pub fn integrate<'r>(&mut self, now: f64, dt: f64, active: impl Iterator<Item = (usize, &'r ReplayJob<'r>)>) {
        let n = self.shares.len();
        let (mut held, mut computing, mut demand) = (vec![0u32; n], vec![0u32; n], vec![0u32; n]);
        let mut saving = false;
        // Per tenant, the lowest class holding workers; the active jobs with what they hold.
        let mut lowest = vec![None::<u8>; n];
        let mut seen: Vec<(usize, u32)> = Vec::new();
        for (j, r) in active {
            saving |= self.saving[j];
            let t = self.tenant_of[j];
            if r.workers > 0 {
                let class = self.class(j);
                lowest[t] = Some(lowest[t].map_or(class, |l| l.min(class)));
            }
            if !self.class_of.is_empty() {
                seen.push((j, r.workers));
            }
            held[t] += r.workers;
            if r.running() {
                computing[t] += r.workers;
            }
            // What it could use: its plan, or before one, as much as a job may hold.
            let wants = self.moves[j].planned.unwrap_or(self.max_per_job);
            demand[t] = demand[t].saturating_add(wants).min(self.num_workers);
        }
        if saving {
            self.track.idle_while_saving(self.num_workers.saturating_sub(held.iter().sum()), dt);
        }
        self.time_class_waits(now, &lowest, &seen);
        self.track.integrate(now, dt, &held, &computing, &demand);
    }

    fn class(&self, j: usize) -> u8 {
        self.class_of.get(j).copied().unwrap_or(0)
    }

    /// Each level of workers a job of a higher class than the lowest holding workers in its
    /// tenant was planned is timed from when it was first wanted until the job holds it (as a
    /// guarantee's levels are): a class reclaim, against R.
    fn time_class_waits(&mut self, now: f64, lowest: &[Option<u8>], seen: &[(usize, u32)]) {
        for &(j, workers) in seen {
            let (t, class) = (self.tenant_of[j], self.class(j));
            let m = &mut self.moves[j];
            let outranks = lowest[t].is_some_and(|l| class > l);
            let want = m.planned.filter(|_| outranks).unwrap_or(0);
            // A level no longer wanted falls to what is (still timed from when it was first);
            // a level held is met.
            for level in &mut m.class_waits {
                level.0 = level.0.min(want.max(workers));
            }
            m.class_waits.dedup_by_key(|level| level.0);
            let (met, open): (Vec<_>, Vec<_>) = m.class_waits.iter().partition(|&&(level, _)| level <= workers);
            m.class_waits = open;
            for (_, since) in met {
                self.track.class_reclaimed(t, now - since);
            }
            if want > workers && m.class_waits.last().is_none_or(|&(top, _)| top < want) {
                m.class_waits.push((want, now));
            }
        }
    }

    /// Restarts that end and shrinks that take effect by `now`; freed workers go to the jobs
    /// planned more.
    pub fn on_time(&mut self, now: f64, jobs: &mut [&mut ReplayJob<'_>]) {
        let mut released = false;
        // By index: a release calls `self.restart`, which needs all of `self`.
        #[allow(clippy::needless_range_loop)]
        for j in 0..self.moves.len() {
            let (m, r) = (&mut self.moves[j], &mut *jobs[j]);
            if !r.active {
                *m = Move::default();
                continue;
            }
            if m.resume_at.is_some_and(|t| t <= now) {
                m.resume_at = None;
                m.started_at = now;
                m.saves.restarted(now);
                r.paused = false;
            }
            if m.release_at.is_some_and(|t| t <= now) {
                m.release_at = None;
                if m.target < r.workers {
                    self.track.revoked(self.tenant_of[j], r.workers - m.target, now - m.noticed_at);
                    let before = r.workers;
                    r.workers = m.target;
                    m.changed_at = now;
                    self.restart(j, before, now, r);
                    released = true;
                }
            }
        }
        if released {
            self.grant(now, jobs);
        }
    }

    /// An epoch's plan (`counts[i]` for job `active[i]`): shrinks are told, grows granted from
    /// free workers.
    pub fn apply(
        &mut self,
        now: f64,
        active: &[usize],
        counts: &[u32],
        quotas: Option<&Quotas>,
        jobs: &mut [&mut ReplayJob<'_>],
    ) {
        if let Some(q) = quotas {
            self.track.set_quotas(&q.workers);
            self.quota.clone_from(&q.workers);
        }
        let owed = self.track.guarantee_owed();
        let graces: Vec<f64> = (0..self.times.len()).map(|t| self.grace_of(t)).collect();
        // Per tenant, the highest class planned more than it holds: it takes lower classes'
        // workers through their grace, holds or not.
        let mut wanting = vec![None::<u8>; self.times.len()];
        for (&j, &c) in active.iter().zip(counts) {
            if c > jobs[j].workers {
                let t = self.tenant_of[j];
                wanting[t] = wanting[t].max(Some(self.class(j)));
            }
        }
        for (&j, &c) in active.iter().zip(counts) {
            let outranked = wanting[self.tenant_of[j]].is_some_and(|w| w > self.class(j));
            let (m, held) = (&mut self.moves[j], jobs[j].workers);
            let times = self.times[self.tenant_of[j]];
            m.planned = Some(c);
            m.saves.decided();
            if let Some(at) = m.release_at {
                // Told to stop: it stops at its deadline, giving up at least what it was told
                // (a reclaim is never put off by a later plan), and may be granted more after;
                // sooner if a tenant owed its guarantee now has a shorter grace.
                m.target = m.target.min(c);
                m.release_at = Some(at.min(now + graces[self.tenant_of[j]]));
            } else if c >= held {
                m.target = c;
            } else if owed || outranked || now >= m.changed_at + self.hold_s.max(times.min_run_s) {
                m.target = c;
                m.release_at = Some(now + graces[self.tenant_of[j]]);
                m.noticed_at = now;
                if now < m.changed_at + times.min_run_s {
                    // Only to restore a guarantee or for a higher class: counted.
                    self.track.early(self.tenant_of[j]);
                }
            } else {
                m.target = held;
            }
        }
        self.grant(now, jobs);
        self.track.check_caps(active.iter().map(|&j| (self.tenant_of[j], jobs[j].workers)));
    }

    /// The grace a job of tenant `t` is given at a shrink: its tenant's, but no longer than the
    /// grace of a tenant owed its guarantee (workers taken back come with the lender's terms,
    /// as live: so each tenant's reclaim bound depends on its own grace only).
    fn grace_of(&self, t: usize) -> f64 {
        self.track.owed().filter(|&o| o != t).map(|o| self.times[o].grace_s).fold(self.times[t].grace_s, f64::min)
    }

    /// Free workers to the jobs planned more than they hold, higher classes first, then in job
    /// order, no tenant past its quota (a tenant's jobs still draining hold workers its others
    /// were planned).
    fn grant(&mut self, now: f64, jobs: &mut [&mut ReplayJob<'_>]) {
        let mut held = vec![0u32; self.quota.len()];
        for (j, r) in jobs.iter().enumerate().filter(|(_, r)| r.active) {
            held[self.tenant_of[j]] += r.workers;
        }
        let mut free = self.num_workers.saturating_sub(held.iter().sum());
        let mut grown = Vec::new();
        // Higher classes first (a class reclaim's workers go to the class that took them), then
        // job order.
        let mut order: Vec<usize> = (0..self.moves.len()).collect();
        if !self.class_of.is_empty() {
            order.sort_by_key(|&j| std::cmp::Reverse(self.class(j)));
        }
        for j in order {
            let (m, r) = (&mut self.moves[j], &mut *jobs[j]);
            if free == 0 {
                break;
            }
            let t = self.tenant_of[j];
            if !r.active || m.release_at.is_some() || m.target <= r.workers {
                continue;
            }
            let more = (m.target - r.workers).min(free).min(self.quota[t].saturating_sub(held[t]));
            if more == 0 {
                continue;
            }
            free -= more;
            held[t] += more;
            let before = r.workers;
            r.workers += more;
            m.changed_at = now;
            grown.push((j, before));
        }
        for (j, before) in grown {
            self.restart(j, before, now, jobs[j]);
        }
    }

    /// Job `j`, which ran on `before` workers, restarts on its workers now: a pause of
    /// `restart_s`, and with periodic checkpoints (`checkpoint_s`) the work since the last one
    /// is lost and done again (the pause grows by as long).
    fn restart(&mut self, j: usize, before: u32, now: f64, r: &mut ReplayJob<'_>) {
        let (m, tenant) = (&mut self.moves[j], self.tenant_of[j]);
        let was_running = m.resume_at.is_none() && before > 0;
        let lost_s = if was_running && self.checkpoint_s > 0.0 {
            (now - m.started_at).max(0.0) % self.checkpoint_s
        } else {
            0.0
        };
        if r.workers == 0 {
            m.resume_at = None;
            r.paused = false;
        } else {
            r.paused = true;
            m.resume_at = Some(now + self.restart_s + lost_s);
            self.track.restarted(tenant, f64::from(r.workers) * self.restart_s);
        }
        self.track.lost(tenant, f64::from(before) * lost_s);
    }
}

#[cfg(test)]
mod tests {
    use super::super::speedup::SpeedupModel;
    use super::super::workload::{self, SimJob, WorkloadConfig};
    use super::*;
    use crate::trace::TraceCurve;

    /// Two jobs of one 50-iteration curve.
    fn two_jobs() -> Vec<SimJob> {
        let curve = TraceCurve {
            id: "c".into(),
            family: "f".into(),
            dataset: String::new(),
            loss: (1..=50).map(|k| 1.0 / f64::from(k)).collect(),
            iter_seconds: Some(vec![1.0; 50]),
        };
        workload::generate(&[curve], &WorkloadConfig { num_jobs: 2, ..WorkloadConfig::default() }).unwrap()
    }

    /// The jobs arrived at 0 s, the second holding all 8 workers.
    fn arrived(jobs: &[SimJob]) -> Vec<ReplayJob<'_>> {
        let speedup = SpeedupModel::default();
        let mut replays: Vec<ReplayJob<'_>> =
            jobs.iter().map(|j| ReplayJob::new(j, speedup.curve(j.application))).collect();
        for r in &mut replays {
            r.arrive(0.0);
        }
        replays[1].workers = 8;
        replays
    }

    /// #40.3: B (grace 120 s) borrowed A's idle guarantee; A (grace 30 s) takes it back: B's job
    /// is given A's 30 s, not its own 120 s, so A's bound depends on A's grace only. A shrink
    /// that restores no one's guarantee keeps the job's own grace.
    #[test]
    fn workers_taken_back_come_with_the_lenders_grace() {
        let jobs = two_jobs();
        let mut replays = arrived(&jobs);
        let shares = [TenantShare::new(4), TenantShare::new(4)];
        let times = [TenantTimes { grace_s: 30.0, min_run_s: 0.0 }, TenantTimes { grace_s: 120.0, min_run_s: 0.0 }];
        let quotas = |a: u32, b: u32| Quotas { workers: vec![a, b], ..Quotas::default() };
        let mut teams = Teams::new(8, u32::MAX, &shares, &times, &[0, 1], 9.0, 0.0);
        teams.integrate(0.0, 0.0, replays.iter().enumerate());
        teams.apply(0.0, &[0, 1], &[4, 4], Some(&quotas(4, 4)), &mut replays.iter_mut().collect::<Vec<_>>());
        assert_eq!(teams.next_event(), Some(30.0), "B's job stops within A's grace");
        // Nobody owed: B's job shrinks on its own grace.
        let mut teams = Teams::new(8, u32::MAX, &shares, &times, &[0, 1], 9.0, 0.0);
        replays[0].active = false;
        teams.integrate(0.0, 0.0, replays.iter().enumerate().filter(|(_, r)| r.active));
        teams.apply(0.0, &[1], &[4], Some(&quotas(0, 4)), &mut replays.iter_mut().collect::<Vec<_>>());
        assert_eq!(teams.next_event(), Some(120.0));
    }

    #[test]
    fn a_shrink_waits_out_the_grace_is_never_called_off_and_every_change_restarts() {
        let jobs = two_jobs();
        let mut replays = arrived(&jobs);
        let shares = [TenantShare::new(4), TenantShare::new(4)];
        let times = [TenantTimes { grace_s: 60.0, min_run_s: 0.0 }; 2];
        let mut teams = Teams::new(8, u32::MAX, &shares, &times, &[0, 1], 9.0, 30.0);
        let quotas = |a: u32, b: u32| Quotas { workers: vec![a, b], ..Quotas::default() };
        let view = |replays: &[ReplayJob<'_>]| -> Vec<u32> { replays.iter().map(|r| r.workers).collect() };
        // A's job arrives: B is told to give back 4, and keeps them for its grace.
        teams.integrate(0.0, 0.0, replays.iter().enumerate());
        teams.apply(0.0, &[0, 1], &[4, 4], Some(&quotas(4, 4)), &mut replays.iter_mut().collect::<Vec<_>>());
        assert_eq!(view(&replays), [0, 8]);
        assert_eq!(teams.next_event(), Some(60.0));
        // A later plan wanting B at 8 again does not call the stop off.
        teams.apply(5.0, &[0, 1], &[0, 8], Some(&quotas(0, 8)), &mut replays.iter_mut().collect::<Vec<_>>());
        teams.apply(10.0, &[0, 1], &[4, 4], Some(&quotas(4, 4)), &mut replays.iter_mut().collect::<Vec<_>>());
        teams.on_time(59.9, &mut replays.iter_mut().collect::<Vec<_>>());
        assert_eq!(view(&replays), [0, 8]);
        // At 60 s B restarts on 4 and A gets the 4 freed, both restarting for 9 s.
        teams.on_time(60.0, &mut replays.iter_mut().collect::<Vec<_>>());
        assert_eq!(view(&replays), [4, 4]);
        assert!(replays.iter().all(|r| r.paused));
        assert_eq!(teams.next_event(), Some(69.0));
        teams.on_time(69.0, &mut replays.iter_mut().collect::<Vec<_>>());
        assert!(replays.iter().all(|r| !r.paused && r.running()));
        let f = teams.track.finish(69.0);
        assert_eq!((f.tenants[1].revocations, f.tenants[1].min_notice_s), (1, Some(60.0)));
        assert_eq!(f.tenants[1].lost_worker_s, 0.0, "saved at its stop: nothing lost");
        // With a checkpoint every 50 s and no save at the stop, B's stop at 60 s (its generation
        // began at 0 s) loses 10 s on its 8 workers, and its restart is as much longer.
        let mut teams = Teams::new(8, u32::MAX, &shares, &times, &[0, 1], 9.0, 30.0);
        teams.checkpoint_s = 50.0;
        for r in &mut replays {
            (r.workers, r.paused) = (0, false);
        }
        replays[1].workers = 8;
        assert_eq!(teams.stop_cost_s(1, 40.0), 9.0 + 40.0);
        teams.apply(0.0, &[0, 1], &[4, 4], Some(&quotas(4, 4)), &mut replays.iter_mut().collect::<Vec<_>>());
        teams.on_time(60.0, &mut replays.iter_mut().collect::<Vec<_>>());
        teams.on_time(69.0, &mut replays.iter_mut().collect::<Vec<_>>());
        assert!(!replays[0].paused && replays[1].paused, "A restarts in 9 s, B in 9 + 10 s");
        assert_eq!(teams.next_event(), Some(79.0));
        assert_eq!(teams.track.finish(79.0).tenants[1].lost_worker_s, 80.0);
    }

    /// Issue #43: with saves every 50 s, a computing job waits for its next save (free only at
    /// the first decision after one), and waits for none while a tenant is owed its guarantee.
    #[test]
    fn a_computing_job_waits_for_its_save_unless_a_guarantee_is_owed() {
        let jobs = two_jobs();
        let mut replays = arrived(&jobs);
        let shares = [TenantShare::new(4), TenantShare::new(4)];
        let times = [TenantTimes { grace_s: 30.0, min_run_s: 0.0 }; 2];
        let mut teams = Teams::new(8, u32::MAX, &shares, &times, &[0, 1], 9.0, 0.0);
        teams.checkpoint_s = 50.0;
        replays[0].active = false;
        let waits = |teams: &mut Teams<'_>, now: f64, replays: &[ReplayJob<'_>]| {
            teams.waiting_for_saves(now, &[1], &replays.iter().collect::<Vec<_>>())[0]
        };
        teams.integrate(0.0, 0.0, replays.iter().enumerate().filter(|(_, r)| r.active));
        assert!(waits(&mut teams, 5.0, &replays), "between saves");
        teams.apply(5.0, &[1], &[8], None, &mut replays.iter_mut().collect::<Vec<_>>());
        assert!(!waits(&mut teams, 50.0, &replays), "it saved at 50 s");
        teams.apply(50.0, &[1], &[8], None, &mut replays.iter_mut().collect::<Vec<_>>());
        assert!(waits(&mut teams, 55.0, &replays), "a save frees it at one decision only");
        // A's job arrives: A is owed its guarantee, and B's job waits for no save.
        replays[0].active = true;
        teams.integrate(55.0, 0.0, replays.iter().enumerate());
        assert!(!waits(&mut teams, 60.0, &replays));
        teams.checkpoint_s = 0.0;
        assert!(!waits(&mut teams, 60.0, &replays), "a job saving at its stop never waits");
    }
}
