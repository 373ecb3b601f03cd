//! What a teams' run measures of each tenant (defined once here; docs/teams.md explains them).
//!
//! - **Entitled**: `min(demand, guarantee)`, the guarantee as the cluster honours it (scaled
//!   down when the guarantees exceed it) and the demand what its active jobs could use: what
//!   the planner gave each (inside the tenant's quota, which is at least its entitlement), or
//!   for a job not yet planned, as many as a job may hold.
//! - **Below**: seconds while the workers it holds are fewer than it is entitled to
//!   (`share_seconds_below_guarantee`). Each rise of its entitlement above what it holds is a
//!   reclaim (`reclaims`; a tenant's first job arriving starts one), timed from that moment to
//!   the moment it holds that many, or is no longer entitled to them (then the level owed falls
//!   to its entitlement, still timed from the start): the longest is `max_reclaim_s`.
//! - **Held** counts the workers of its jobs whatever they do (a job draining in its grace or
//!   restarting holds them); **computing** only those of jobs making progress.
//! - **Windows**: every 60 s window in which its quota (what the planner gave it) was positive
//!   throughout: the workers it held over the quota's (`min_window_ratio`); every 600 s window:
//!   its share of the cluster against its quota's share, in points (`max_share_deviation_pts`).
//! - **Caps**: epochs ending with a tenant above guarantee + borrow limit, or the tenants
//!   together above the cluster (`cap_violations`).
//! - **Busy while waiting**: the fraction of the cluster computing, over the time some tenant
//!   wanted more workers than it held. A job held for its next save (`schedule::Saves`) wants
//!   what it holds, so this misses workers left idle while jobs wait for saves, which are:
//! - **Idle while saving**: worker-seconds no job held while some job was held for its next
//!   save, in percent of the cluster's worker-seconds over the run (only with periodic saves).

use crate::schedule::tenants::{TenantShare, scaled_guarantees};

#[derive(Clone, Debug, Default)]
struct Tenant {
    guaranteed: u32,
    cap: u32,
    /// Workers of its idle guarantee it does not lend (`lend_limit`).
    lend_limit: u32,
    max_held: u32,
    held: u32,
    entitled: u32,
    below_s: f64,
    /// Levels it is owed and since when, rising: `(workers, since)`.
    owed: Vec<(u32, f64)>,
    max_below_s: f64,
    reclaims: u32,
    held_ws: f64,
    computing_ws: f64,
    restart_ws: f64,
    lost_ws: f64,
    early: u32,
    revocations: u32,
    revoked_workers: u64,
    min_notice_s: Option<f64>,
    quota: u32,
    short: Window,
    long: Window,
    min_window_ratio: Option<f64>,
    max_share_dev_pts: f64,
    classes: ClassReclaims,
}

/// One window's accumulation.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    index: i64,
    held_ws: f64,
    quota_ws: f64,
    /// The quota was positive throughout.
    full: bool,
    seen: f64,
}

const SHORT_S: f64 = 60.0;
const LONG_S: f64 = 600.0;

/// The measurements of every tenant of a run.
#[derive(Clone, Debug)]
pub struct Track {
    num_workers: u32,
    tenants: Vec<Tenant>,
    cap_violations: u32,
    waiting_s: f64,
    waiting_busy_ws: f64,
    /// Worker-seconds free while some job was held for its next save (`None`: none ever was).
    idle_saving_ws: Option<f64>,
}

/// A tenant's class reclaims: each level of workers a job of a higher class was planned while
/// a lower class of the same tenant held workers, timed until it held them.
#[derive(Clone, Debug, Default)]
struct ClassReclaims {
    count: u32,
    max_s: f64,
}

/// One tenant's measurements at the end of a run.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TenantFigures {
    pub guaranteed: u32,
    pub max_held: u32,
    pub share_seconds_below_guarantee: f64,
    pub max_reclaim_s: f64,
    pub reclaims: u32,
    pub held_worker_s: f64,
    pub computing_worker_s: f64,
    /// Worker-seconds its jobs spent restarting, and lost to stops (work since the last
    /// checkpoint, done again).
    pub restart_worker_s: f64,
    pub lost_worker_s: f64,
    /// Revocations within `min_run_s` of the job's last change (each to restore a guarantee or
    /// for a higher class of its tenant).
    pub early_revocations: u32,
    /// Shrinks of its jobs, the workers they gave up and the least notice any got.
    pub revocations: u32,
    pub revoked_workers: u64,
    pub min_notice_s: Option<f64>,
    pub min_window_ratio: Option<f64>,
    pub max_share_deviation_pts: f64,
    /// Levels of workers a job of a higher class was planned while a lower class of its
    /// tenant held workers, each timed until it held them; and the longest (issue #43: within R).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_class_reclaim_s: Option<f64>,
    #[serde(skip_serializing_if = "is_zero")]
    pub class_reclaims: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The run's measurements.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TeamFigures {
    pub end_s: f64,
    pub tenants: Vec<TenantFigures>,
    pub cap_violations: u32,
    pub busy_fraction_while_waiting: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_while_saving_pct: Option<f64>,
}

impl Track {
    pub fn new(num_workers: u32, shares: &[TenantShare]) -> Self {
        let promised: Vec<u32> = shares.iter().map(|s| s.guaranteed).collect();
        let guaranteed = scaled_guarantees(num_workers, &promised);
        let tenants = shares
            .iter()
            .zip(guaranteed)
            .map(|(s, g)| Tenant {
                guaranteed: g,
                cap: g.saturating_add(s.borrow_limit.unwrap_or(u32::MAX)),
                lend_limit: s.lend_limit.unwrap_or(u32::MAX),
                ..Tenant::default()
            })
            .collect();
        Track { num_workers, tenants, cap_violations: 0, waiting_s: 0.0, waiting_busy_ws: 0.0, idle_saving_ws: None }
    }

    /// Whether some tenant holds fewer workers than it is entitled to.
    pub fn guarantee_owed(&self) -> bool {
        self.tenants.iter().any(|t| t.held < t.entitled)
    }

    /// The tenants holding fewer workers than they are entitled to.
    pub fn owed(&self) -> impl Iterator<Item = usize> + '_ {
        self.tenants.iter().enumerate().filter(|(_, t)| t.held < t.entitled).map(|(i, _)| i)
    }

    /// The planner's quotas, for the windows.
    pub fn set_quotas(&mut self, quotas: &[u32]) {
        for (t, &q) in self.tenants.iter_mut().zip(quotas) {
            t.quota = q;
        }
    }

    /// The state over `[now, now + dt]`.
    pub fn integrate(&mut self, now: f64, dt: f64, held: &[u32], computing: &[u32], demand: &[u32]) {
        let n = f64::from(self.num_workers);
        let mut waiting = false;
        for (i, t) in self.tenants.iter_mut().enumerate() {
            t.held = held[i];
            t.max_held = t.max_held.max(held[i]);
            t.entitled = demand[i].min(t.guaranteed);
            waiting |= demand[i] > held[i];
            t.owe(now);
            if t.held < t.entitled {
                t.below_s += dt;
            }
            t.held_ws += f64::from(held[i]) * dt;
            t.computing_ws += f64::from(computing[i]) * dt;
            let (h, q) = (f64::from(held[i]), f64::from(t.quota));
            let short = t.short.add(now, dt, SHORT_S, h, q);
            if let Some(w) = short.filter(|w| w.full && w.quota_ws > 0.0) {
                let ratio = w.held_ws / w.quota_ws;
                t.min_window_ratio = Some(t.min_window_ratio.map_or(ratio, |r| r.min(ratio)));
            }
            if let Some(w) = t.long.add(now, dt, LONG_S, h, q).filter(|w| w.seen >= LONG_S - 1e-6) {
                let dev = 100.0 * (w.held_ws - w.quota_ws).abs() / (n * LONG_S);
                t.max_share_dev_pts = t.max_share_dev_pts.max(dev);
            }
        }
        if waiting && dt > 0.0 {
            self.waiting_s += dt;
            self.waiting_busy_ws += computing.iter().map(|&c| f64::from(c)).sum::<f64>() * dt;
        }
    }

    /// A higher class of `tenant`'s jobs waited `seconds` for workers a lower class held.
    pub fn class_reclaimed(&mut self, tenant: usize, seconds: f64) {
        let c = &mut self.tenants[tenant].classes;
        c.count += 1;
        c.max_s = c.max_s.max(seconds);
    }

    /// `[now, now + dt]` with `free` workers held by no job while some job waits for its save.
    pub fn idle_while_saving(&mut self, free: u32, dt: f64) {
        *self.idle_saving_ws.get_or_insert(0.0) += f64::from(free) * dt;
    }

    /// Workers taken from a job of `tenant`, told `notice_s` before.
    pub fn revoked(&mut self, tenant: usize, workers: u32, notice_s: f64) {
        let t = &mut self.tenants[tenant];
        t.revocations += 1;
        t.revoked_workers += u64::from(workers);
        t.min_notice_s = Some(t.min_notice_s.map_or(notice_s, |n| n.min(notice_s)));
    }

    pub fn restarted(&mut self, tenant: usize, worker_s: f64) {
        self.tenants[tenant].restart_ws += worker_s;
    }

    /// Work a stop lost: worker-seconds since the job's last checkpoint.
    pub fn lost(&mut self, tenant: usize, worker_s: f64) {
        self.tenants[tenant].lost_ws += worker_s;
    }

    /// A job told to give workers back within its tenant's `min_run_s` of its last change (only
    /// ever to restore a guarantee).
    pub fn early(&mut self, tenant: usize) {
        self.tenants[tenant].early += 1;
    }

    /// After an epoch's changes: `(tenant, workers)` of every active job. A violation is a
    /// tenant above guarantee + borrow limit, or the tenants together above the cluster less
    /// what lenders keep of their idle guarantees (beyond `lend_limit`).
    pub fn check_caps(&mut self, jobs: impl Iterator<Item = (usize, u32)>) {
        let mut held = vec![0u32; self.tenants.len()];
        for (t, w) in jobs {
            held[t] += w;
        }
        let over = self.tenants.iter().zip(&held).filter(|(t, h)| **h > t.cap).count() as u32;
        let kept: u32 = self
            .tenants
            .iter()
            .zip(&held)
            .map(|(t, &h)| t.guaranteed.saturating_sub(t.entitled.max(h)).saturating_sub(t.lend_limit))
            .sum();
        let total = u32::from(held.iter().sum::<u32>() > self.num_workers.saturating_sub(kept));
        self.cap_violations += over + total;
    }

    /// The figures, with stretches still open at `end_s` closed there.
    pub fn finish(mut self, end_s: f64) -> TeamFigures {
        let tenants = self
            .tenants
            .iter_mut()
            .map(|t| {
                if let Some(&(_, since)) = t.owed.first() {
                    t.max_below_s = t.max_below_s.max(end_s - since);
                }
                TenantFigures {
                    guaranteed: t.guaranteed,
                    max_held: t.max_held,
                    share_seconds_below_guarantee: t.below_s,
                    max_reclaim_s: t.max_below_s,
                    reclaims: t.reclaims,
                    held_worker_s: t.held_ws,
                    computing_worker_s: t.computing_ws,
                    restart_worker_s: t.restart_ws,
                    lost_worker_s: t.lost_ws,
                    early_revocations: t.early,
                    revocations: t.revocations,
                    revoked_workers: t.revoked_workers,
                    min_notice_s: t.min_notice_s,
                    min_window_ratio: t.min_window_ratio,
                    max_share_deviation_pts: t.max_share_dev_pts,
                    class_reclaims: t.classes.count,
                    max_class_reclaim_s: (t.classes.count > 0).then_some(t.classes.max_s),
                }
            })
            .collect();
        let busy =
            (self.waiting_s > 0.0).then(|| self.waiting_busy_ws / (self.waiting_s * f64::from(self.num_workers)));
        let cluster_ws = f64::from(self.num_workers) * end_s;
        TeamFigures {
            end_s,
            tenants,
            cap_violations: self.cap_violations,
            busy_fraction_while_waiting: busy,
            idle_while_saving_pct: self
                .idle_saving_ws
                .map(|ws| if cluster_ws > 0.0 { 100.0 * ws / cluster_ws } else { 0.0 }),
        }
    }
}

impl Tenant {
    /// Each level of workers it becomes entitled to is owed from that moment until it holds
    /// that many (or is no longer entitled to them: then the level owed falls to what it is).
    fn owe(&mut self, now: f64) {
        let (held, entitled) = (self.held, self.entitled);
        for level in &mut self.owed {
            level.0 = level.0.min(entitled);
        }
        self.owed.dedup_by_key(|l| l.0);
        let met = self.owed.iter().take_while(|l| l.0 <= held).count();
        for (_, since) in self.owed.drain(..met) {
            self.max_below_s = self.max_below_s.max(now - since);
        }
        if held < entitled && self.owed.last().is_none_or(|l| l.0 < entitled) {
            self.owed.push((entitled, now));
            self.reclaims += 1;
        }
    }
}

impl Window {
    /// Adds `[now, now + dt]` at `held` and `quota` workers; returns the window that ended, if
    /// one did (a stretch crossing a boundary is split).
    fn add(&mut self, now: f64, dt: f64, width: f64, held: f64, quota: f64) -> Option<Window> {
        let mut done = None;
        let (mut t, end) = (now, now + dt);
        loop {
            let index = (t / width).floor() as i64;
            if index != self.index {
                if self.seen > 0.0 {
                    done = Some(*self);
                }
                *self = Window { index, full: true, ..Window::default() };
            }
            let boundary = (index + 1) as f64 * width;
            let piece = end.min(boundary) - t;
            if piece > 0.0 {
                self.held_ws += held * piece;
                self.quota_ws += quota * piece;
                self.seen += piece;
                self.full &= quota > 0.0;
            }
            if end < boundary || piece <= 0.0 {
                return done;
            }
            t = boundary;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reclaim_is_timed_from_the_moment_workers_are_owed_to_the_moment_they_are_held() {
        let shares = [TenantShare::new(32), TenantShare::new(32)];
        let mut track = Track::new(64, &shares);
        // B holds all 64 while A has nothing to run.
        track.integrate(0.0, 100.0, &[0, 64], &[0, 64], &[0, 64]);
        assert!(!track.guarantee_owed());
        // A's job arrives at 100 s: it is owed 32 until it holds them at 170 s.
        track.integrate(100.0, 70.0, &[0, 64], &[0, 64], &[64, 64]);
        assert!(track.guarantee_owed());
        track.integrate(170.0, 30.0, &[32, 32], &[32, 32], &[64, 64]);
        let f = track.finish(200.0);
        assert_eq!(f.tenants[0].max_reclaim_s, 70.0);
        assert_eq!(f.tenants[0].reclaims, 1);
        assert_eq!(f.tenants[0].share_seconds_below_guarantee, 70.0);
        assert_eq!(f.tenants[1].reclaims, 0);
        // Busy while A waited: 64 of 64 computing, then 64 of 64.
        assert_eq!(f.busy_fraction_while_waiting, Some(1.0));
    }

    #[test]
    fn each_level_owed_is_timed_on_its_own() {
        let mut track = Track::new(64, &[TenantShare::new(32), TenantShare::new(32)]);
        // Owed 8 at 0 s, 16 at 30 s; holds 8 at 60 s, 16 at 95 s: reclaims of 60 s and 65 s,
        // not one of 95 s.
        track.integrate(0.0, 30.0, &[0, 56], &[0, 56], &[8, 56]);
        track.integrate(30.0, 30.0, &[0, 56], &[0, 56], &[16, 56]);
        track.integrate(60.0, 35.0, &[8, 48], &[8, 48], &[16, 48]);
        track.integrate(95.0, 5.0, &[16, 48], &[16, 48], &[16, 48]);
        let f = track.finish(100.0);
        assert_eq!((f.tenants[0].reclaims, f.tenants[0].max_reclaim_s), (2, 65.0));
        assert_eq!(f.tenants[0].share_seconds_below_guarantee, 95.0);
    }

    #[test]
    fn class_reclaims_are_counted_with_the_longest() {
        let mut track = Track::new(8, &[TenantShare::new(4), TenantShare::new(4)]);
        track.class_reclaimed(0, 60.0);
        track.class_reclaimed(0, 20.0);
        let f = track.finish(120.0);
        assert_eq!((f.tenants[0].class_reclaims, f.tenants[0].max_class_reclaim_s), (2, Some(60.0)));
        assert_eq!((f.tenants[1].class_reclaims, f.tenants[1].max_class_reclaim_s), (0, None));
    }

    #[test]
    fn windows_compare_what_was_held_with_the_quota() {
        let mut track = Track::new(10, &[TenantShare::new(0)]);
        track.set_quotas(&[10]);
        // 90 s at 10 of 10, then 30 s at 5: the second window holds 0.75 of its quota.
        track.integrate(0.0, 90.0, &[10], &[10], &[10]);
        track.integrate(90.0, 30.0, &[5], &[5], &[10]);
        track.integrate(120.0, 1.0, &[10], &[10], &[10]);
        let f = track.finish(121.0);
        assert_eq!(f.tenants[0].min_window_ratio, Some(0.75));
    }

    #[test]
    fn caps_count_tenants_above_guarantee_plus_borrow_limit_and_a_cluster_overcommitted() {
        let shares = [TenantShare { borrow_limit: Some(4), ..TenantShare::new(8) }, TenantShare::new(8)];
        let mut track = Track::new(16, &shares);
        track.check_caps([(0, 12), (1, 4)].into_iter());
        assert_eq!(track.cap_violations, 0);
        track.check_caps([(0, 13), (1, 4)].into_iter());
        assert_eq!(track.cap_violations, 2);
        // A idle lends at most 4 of its 8: B may hold 8 + 4 of 16, not 13.
        let lender = [TenantShare { lend_limit: Some(4), ..TenantShare::new(8) }, TenantShare::new(8)];
        let mut track = Track::new(16, &lender);
        track.check_caps([(1, 12)].into_iter());
        assert_eq!(track.cap_violations, 0);
        track.check_caps([(1, 13)].into_iter());
        assert_eq!(track.cap_violations, 1);
    }
}
