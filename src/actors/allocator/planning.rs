//! The jobs as the planner sees them: each epoch's `EpochJob`s from the latest bids (a
//! submitted job's restart priced in, the completion term, the finish-time bound's pace), the
//! worker types and machines, the plan itself (`schedule::plan_epoch`), and each job's
//! prediction checked against its reports at the next epoch.

use std::collections::BTreeMap;

use super::super::bid::Bid;
use super::super::registry::WorkerRegistry;
use super::super::types;
use super::planned::{BidGain, PlannedJob, recycle};
use super::state::{Allocator, AllocatorSettings, BidHead, Count, Effect, JobEntry, KeptTerm, PendingGain};
use super::tables::KeptTables;
use crate::policy::table::{DEFAULT_TABLE_LEN, Tabled};
use crate::policy::{ByRef, JobBid, PolicyKind};
use crate::protocol::EpochGains;
use crate::quality::GainCurve;
use crate::quality::speeds::{TypeRatios, TypeSpeeds, explorers};
use crate::schedule::{self, EpochInput, EpochJob, EpochPlan, FloorLedger, JobModel};

/// Entries of a submitted job's restart-priced gain table (its workers are capped there).
const PRICED_TABLE_LEN: usize = 16 * DEFAULT_TABLE_LEN;

/// A cluster of several worker types this epoch: each worker's type (an index into the types'
/// sorted names) and each job's speed on each (in the jobs' id order).
pub(super) struct TypedCluster {
    pub(super) type_of: Vec<usize>,
    speeds: Vec<Vec<f64>>,
    explore: Vec<(usize, usize)>,
}

/// The iterations a job has left: declared (`max_iters`), or predicted from its curve
/// (`schedule::predicted_remaining`, at least an epoch's iterations on one worker).
fn remaining_iters(bid: &Bid, curve: &GainCurve, epoch_s: f64) -> f64 {
    let last = bid.last_iter.unwrap_or(0);
    match bid.max_iters {
        Some(max) => max.saturating_sub(last) as f64,
        None => {
            let one_epoch = epoch_s / curve.time.seconds(1).max(1e-12);
            schedule::predicted_remaining(Some(curve), last as f64, one_epoch)
        }
    }
}

/// A job's completion term (`schedule::finish`): none under fair sharing or with weight 0.
fn finish_of(settings: &AllocatorSettings, curve: &GainCurve, remaining_iters: f64) -> Option<schedule::Finish> {
    let weight = settings.completion_weight;
    if weight <= 0.0 || settings.policy == PolicyKind::Fair {
        return None;
    }
    Some(schedule::Finish { time: curve.time, remaining_iters, horizon_s: settings.bid_horizon_s, weight })
}

/// The teams' side of an epoch's input, owned: `schedule::Tenancy` borrows it.
pub(super) struct TenancyInput {
    pub(super) shares: Vec<schedule::TenantShare>,
    pub(super) tenant_of: Vec<usize>,
    /// Per tenant, the workers its held jobs hold.
    pub(super) held: Vec<u32>,
    pub(super) class_of: Vec<u8>,
}

/// How a job keeps its workers this epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hold {
    None,
    /// Within its tenant's `min_run_s` of its last change: what it has is its minimum.
    Keep,
    /// Between two of its saves (`schedule::Saves`): exactly what it has.
    Save,
}

impl Allocator {
    /// A job's new bid (a job unknown here is ignored).
    pub(super) fn take_bid(&mut self, job: &str, mut bid: Bid, now_s: f64, fx: &mut Vec<Effect>) {
        if let Some(entry) = self.jobs.get_mut(job) {
            if bid.points > entry.bid.as_ref().map_or(0, |b| b.points) {
                let sup = &mut entry.supervision;
                sup.progress_s = now_s;
                // The first new iteration of the current generation (reports that say theirs;
                // the old generation's last reports, sent while it stops, do not count).
                let current = bid.generation.is_some_and(|g| g >= entry.generation);
                if current && entry.command.is_some() && std::mem::take(&mut sup.timing_restart) {
                    let took = now_s - sup.generation_started_s;
                    sup.restart_s = Some(sup.restart_s.map_or(took, |r| 0.5 * r + 0.5 * took));
                    fx.push(Effect::Count(Count::RestartSeconds(took)));
                }
            }
            entry.pace_rates = schedule::slowdown::RateTable::default();
            let bounded = self.settings.policy != PolicyKind::Fair && self.settings.plan.slowdown_bound().is_finite();
            if let Some(g) = bid.gain.as_ref().filter(|_| bounded) {
                let table = schedule::slowdown::rate_table(&g.curve().time, bid.max_workers);
                entry.pace_rates = schedule::slowdown::RateTable::new(table);
            }
            // Read by the bound and the completion term, which fair sharing has neither of.
            if let Some(g) = bid.gain.as_ref().filter(|_| self.settings.policy != PolicyKind::Fair) {
                entry.remaining_iters = remaining_iters(&bid, g.curve(), self.settings.epoch.as_secs_f64());
            }
            // The term once per bid (a submitted job's table is priced each epoch: its terms are
            // kept as far as that table can reach; another's gains are summed here).
            entry.finish = bid
                .gain
                .as_ref()
                .and_then(|g| finish_of(&self.settings, g.curve(), entry.remaining_iters))
                .map(Box::new);
            let len = bid.max_workers as usize + 1;
            let old = entry.kept_term.slot();
            entry.kept_term = match (&entry.finish, &bid.gain) {
                (Some(f), Some(_)) if entry.command.is_some() => {
                    let room = len.min(PRICED_TABLE_LEN);
                    KeptTerm::Terms(self.kept_tables.put(old, &f.terms(room), room))
                }
                (Some(f), Some(g)) => {
                    let room = len.min(DEFAULT_TABLE_LEN);
                    KeptTerm::Summed(self.kept_tables.put(old, &f.summed_past(g.as_ref(), room), room))
                }
                _ => {
                    if let Some(old) = old {
                        self.kept_tables.free(old);
                    }
                    KeptTerm::None
                }
            };
            entry.saves.declare(bid.checkpoint_every_s);
            if let Some(age) = bid.checkpoint_age_s {
                entry.saves.observe(now_s, age);
            }
            entry.head = Some(BidHead::of(&bid));
            entry.gain = bid.gain.take();
            entry.bid = Some(Box::new(bid));
            entry.pending_for = None;
        }
    }

    /// Whether some tenant holds fewer workers than it is entitled to (its jobs' demand being
    /// what their bids could use).
    pub(super) fn guarantee_owed(&self, shares: &[schedule::TenantShare], tenant_of: &[usize]) -> bool {
        let cluster = self.registry.len() as u32;
        let (mut demand, mut held) = (vec![0u32; shares.len()], vec![0u32; shares.len()]);
        for (e, &t) in self.jobs.values().zip(tenant_of) {
            if let (Some(d), Some(h)) = (demand.get_mut(t), held.get_mut(t)) {
                *d = d.saturating_add(e.bid.as_ref().map_or(0, |b| b.max_workers)).min(cluster);
                *h += e.workers.len() as u32;
            }
        }
        schedule::tenants::guarantee_owed(cluster, shares, &demand, &held)
    }

    /// Each job's priority class: what its bid asks, capped by its tenant's `max_priority`.
    pub(super) fn classes(&self, tenants: &schedule::tenants::TenantSet) -> Vec<u8> {
        self.jobs
            .iter()
            .map(|(id, e)| {
                let asked = e.bid.as_ref().map_or(0, |b| b.priority);
                tenants.config_of(id).map_or(0, |c| c.class_of(asked))
            })
            .collect()
    }

    /// On a cluster of several worker types (`names`, the types in use): each worker's type and
    /// each job's speed on each (after measuring the epoch that ended, `quality::speeds`);
    /// `None` on one type. Jobs' speeds are measured whenever some worker names its type, one
    /// type or several.
    pub(super) fn typed_cluster(&mut self, names: &[String], now_s: f64) -> Option<TypedCluster> {
        for entry in self.jobs.values_mut() {
            let (iter, time) = (entry.head.as_ref().and_then(|h| h.last_iter).unwrap_or(0), entry.gain.as_deref());
            let on = types::world_type(&self.registry, &entry.workers);
            let count = entry.workers.len() as u32;
            entry.speeds.epoch(on, count, iter, entry.generation, time.map(|g| &g.curve().time), now_s);
        }
        // One type in use: measured (a type that joins later is then compared), not decided.
        if names.len() < 2 {
            return None;
        }
        let ratios = TypeRatios::of(self.jobs.values().map(|e| &e.speeds.measured));
        let speeds: Vec<Vec<f64>> = self
            .jobs
            .values()
            .map(|e| {
                let t1 = e.gain.as_ref().map(|g| g.curve().time.seconds(1));
                e.speeds.row(names, t1, &ratios, e.bid.as_ref().and_then(|b| b.speeds.as_deref()))
            })
            .collect();
        // A type nobody has compared with another is tried by one job (issue #43).
        let known: Vec<(&TypeSpeeds, bool)> = self
            .jobs
            .values()
            .map(|e| (&e.speeds.measured, e.bid.as_ref().is_some_and(|b| b.speeds.is_some())))
            .collect();
        let explore = explorers(&known, names);
        Some(TypedCluster { type_of: types::type_of(&self.registry, names), speeds, explore })
    }
}

/// Compares a job's prediction for the epoch that just ended with its reports (into `gains`),
/// and records the prediction for the epoch that starts, at the workers it now has: the same bid
/// at the same count predicts the same, so it is not recomputed. Called by `new_generations`
/// once the job's workers are decided, in its one pass over the jobs.
pub(super) fn check_prediction(entry: &mut JobEntry, epoch_s: f64, gains: &mut EpochGains) {
    if let (Some(p), Some(loss)) = (entry.pending, entry.head.as_ref().and_then(|h| h.last_loss)) {
        gains.jobs += 1;
        gains.predicted += p.predicted;
        gains.realised += (p.loss_at_start - loss) / p.scale;
    }
    let workers = entry.workers.len() as u32;
    if entry.pending_for == Some(workers) {
        return;
    }
    entry.pending_for = Some(workers);
    entry.pending = entry.bid.as_ref().and_then(|b| {
        let (gain, loss) = (entry.gain.as_ref()?.curve(), b.last_loss?);
        // A prior (no points yet) predicts nothing checkable.
        (b.points >= 2).then(|| PendingGain {
            loss_at_start: loss,
            scale: gain.scale,
            predicted: gain.predicted_drop(workers, epoch_s),
        })
    });
}

/// What the epoch's one pass over the jobs ([`epoch_pass`]) reads besides them, borrowed from
/// the allocator field by field (the pass borrows its jobs mutably, then lends them to the
/// plan).
pub(super) struct PassInput<'a, 't> {
    pub(super) settings: &'a AllocatorSettings,
    pub(super) kept_tables: &'a KeptTables,
    /// The model of a job that has not bid yet, and whether it is special.
    pub(super) default_model: (&'a JobModel, bool),
    pub(super) num_workers: u32,
    /// Some tenant is owed its guarantee (`Allocator::guarantee_owed`): a job between two saves
    /// is not held for them.
    pub(super) owed: bool,
    /// With tenants: them, and each job's tenant.
    pub(super) tenants: Option<(&'t schedule::tenants::TenantSet, &'t [usize])>,
}

/// What the epoch's one pass over the jobs gives: what the rest of the epoch reads of them
/// (`state`), the jobs as the planner sees them, whether any job's model is special
/// (`EpochInput::special`), and per tenant the workers its held jobs hold.
pub(super) struct EpochPass<'a> {
    pub(super) state: EpochState,
    pub(super) jobs: Vec<PlannedJob<'a>>,
    pub(super) special: bool,
    pub(super) held_by_tenant: Vec<u32>,
}

/// One pass over the jobs, for all an epoch reads of each before its plan: each job's entry is
/// touched once (at 10,000 jobs, a second pass over the entries to make the planner's jobs was
/// most of a tenth of an epoch, the entries no longer in cache). For each job, in id order:
/// - its key (workers name their job by it: `current_jobs`);
/// - whether it has bid yet (counted for the summary);
/// - its ledger, lent to the planner and put back by `new_generations` (no copies);
/// - whether it lost a worker to silence (it has a new membership even if no worker moves), or
///   has a failed generation whose backoff is over (it restarts on its workers);
/// - whether a submitted job is pinned: in the first `min_generation` of a generation it keeps
///   exactly its workers, as every change restarts its processes;
/// - whether it holds its workers ([`Hold`]): a save seen before this decision frees a job only
///   at it (`schedule::Saves::decided`);
/// - whether any job saves on request, and any was asked to (for `ask_saves`);
/// - the job as the planner sees it ([`PassInput::epoch_job`]).
pub(super) fn epoch_pass<'a>(
    jobs: &'a mut BTreeMap<String, JobEntry>,
    cx: &PassInput<'a, '_>,
    spare: Vec<PlannedJob<'static>>,
    now_s: f64,
) -> EpochPass<'a> {
    let settings = cx.settings;
    let min_generation_s = settings.min_generation.as_secs_f64();
    let amortise = settings.restart_amortisation;
    let max_wait_s = settings.save_wait_max.as_secs_f64();
    let min_run = cx.tenants.map(|(t, _)| t).filter(|t| t.configs.values().any(|c| c.min_run_s > 0.0));
    let n = jobs.len();
    let mut state = EpochState {
        keys: Vec::with_capacity(n),
        without_bid: 0,
        ledgers: Vec::with_capacity(n),
        lost_workers: Vec::with_capacity(n),
        saves_on_request: false,
        asked: false,
    };
    let mut held_by_tenant = vec![0u32; cx.tenants.map_or(0, |(t, _)| t.names.len())];
    let mut special = false;
    let mut planned = recycle(spare);
    planned.reserve(n);
    for (j, (id, e)) in jobs.iter_mut().enumerate() {
        state.keys.push(e.key);
        state.without_bid += usize::from(e.bid.is_none());
        let waits = e.saves.waits(now_s, max_wait_s);
        e.saves.decided();
        let idle = e.workers.is_empty() || e.bid.is_none();
        let hold = HoldIn {
            idle,
            waits,
            min_run: !idle
                && min_run.and_then(|t| t.config_of(id)).is_some_and(|c| now_s - e.workers_since_s < c.min_run_s),
        }
        .hold(cx.owed);
        state.saves_on_request |= e.head.as_ref().is_some_and(|h| h.save_on_request);
        state.asked |= e.asked_s.is_some();
        state.ledgers.push(std::mem::take(&mut e.ledger));
        let sup = &e.supervision;
        let lost = std::mem::take(&mut e.lost_workers) || sup.restart_at_s.is_some_and(|t| now_s >= t);
        state.lost_workers.push(lost);
        let pinned = e.command.is_some()
            && !e.workers.is_empty()
            && !lost
            && !sup.ending
            && now_s - sup.generation_started_s < sup.tenure_s(min_generation_s, amortise);
        // What is left is read only: the planner's job borrows from the entry.
        let e: &'a JobEntry = e;
        if let Some((_, tenant_of)) = cx.tenants
            && hold != Hold::None
            && let Some(held) = tenant_of.get(j).and_then(|&t| held_by_tenant.get_mut(t))
        {
            *held += e.workers.len() as u32;
        }
        special |= e.head.as_ref().map_or(cx.default_model.1, |h| h.special);
        planned.push(cx.epoch_job(id, e, pinned, hold, now_s));
    }
    EpochPass { state, jobs: planned, special, held_by_tenant }
}

impl<'a> PassInput<'a, '_> {
    /// A job as the planner sees it this epoch: its bid and its model. A job that has not bid
    /// yet keeps exactly the workers it has, and so does a submitted job within its tenure
    /// (`pinned`): those bounds are the scheduler's own and stand. A job that has held workers
    /// and said nothing for `stale_job` bids for none until it reports again: a dead job's last
    /// prediction must not keep winning workers. A submitted job's gains carry the restart that
    /// any change costs it. Otherwise a job's own minimum is a request (honoured up to its fair
    /// share) and its own allowed sizes hold.
    fn epoch_job(
        &self,
        id: &str,
        entry: &'a JobEntry,
        pinned: bool,
        held: Hold,
        now_s: f64,
    ) -> EpochJob<'a, schedule::Finishing<'a, BidGain<'a>>> {
        let settings = self.settings;
        let stale_s = settings.stale_job.map_or(f64::INFINITY, |d| d.as_secs_f64());
        let have = entry.workers.len() as u32;
        let stale = entry.quiet && have > 0 && now_s - entry.workers_since_s > stale_s;
        let attained_service = entry.attained_service;
        // A job's weight counts where its tenant allows (`max_weight`); without tenants, none.
        let weight_of =
            |h: &BidHead| self.tenants.and_then(|(t, _)| t.config_of(id)).map_or(1.0, |c| c.weight_of(h.weight));
        let bid = match &entry.head {
            _ if pinned => JobBid { min_workers: have, max_workers: have, attained_service, gain: None, weight: 1.0 },
            _ if stale => JobBid { min_workers: 0, max_workers: 0, attained_service, gain: None, weight: 1.0 },
            Some(h) => JobBid {
                // Held (its tenant's min_run_s): what it has is its minimum, which stands;
                // between two saves, what it has is all it gets too.
                min_workers: if held == Hold::None { h.min_workers } else { have.min(h.max_workers) },
                max_workers: if held == Hold::Save { have.min(h.max_workers) } else { h.max_workers },
                attained_service,
                gain: entry.gain.as_deref().map(|g| self.finishing(entry, h, g, have)),
                weight: weight_of(h),
            },
            None => JobBid { min_workers: have, max_workers: have, attained_service, gain: None, weight: 1.0 },
        };
        let own = entry.head.as_ref().filter(|_| !pinned);
        let pace = own.filter(|_| !stale && !entry.pace_rates.is_empty()).and_then(|h| {
            let last = h.last_iter?;
            Some(schedule::Pace {
                age_s: now_s - entry.since_s,
                done: last as f64,
                remaining: entry.remaining_iters,
                rates: entry.pace_rates.rates(),
                wait_s: settings.epoch.as_secs_f64(),
            })
        });
        EpochJob {
            bid,
            // A held job's minimum is the scheduler's, and stands.
            own_minimum: own.is_some() && (stale || held == Hold::None),
            sizes: own.and_then(|h| h.sizes.as_deref()),
            model: entry.head.as_ref().map_or(self.default_model.0, |h| h.model.as_ref()),
            pace,
        }
    }

    /// A job's gains this epoch with its completion term: a submitted job's priced for the
    /// restart that any change costs it (the measured cost once known, else the configured one,
    /// the prior, plus the work since its checkpoint); another's as bid. What was kept at its
    /// bid is used where it fits the job as it is now (`KeptTerm`).
    pub(super) fn finishing(
        &self,
        entry: &'a JobEntry,
        h: &BidHead,
        g: &'a Tabled<GainCurve>,
        have: u32,
    ) -> schedule::Finishing<'a, BidGain<'a>> {
        let finish = entry.finish.as_deref();
        let terms: &[f64] = match entry.kept_term {
            KeptTerm::Terms(slot) => self.kept_tables.get(slot),
            _ => &[],
        };
        if entry.command.is_none() {
            return match entry.kept_term {
                KeptTerm::Summed(slot) => {
                    schedule::Finishing::kept(BidGain::Curve(ByRef(g)), finish, self.kept_tables.get(slot))
                }
                _ => schedule::Finishing::tabled(BidGain::Curve(ByRef(g)), finish, terms),
            };
        }
        let restart_s = entry.supervision.restart_s.unwrap_or(self.settings.place.restart_s);
        let priced = schedule::restart_priced(
            g,
            have,
            restart_s + h.checkpoint_age_s.unwrap_or(0.0),
            self.settings.bid_horizon_s,
            h.max_workers.min(self.num_workers),
            PRICED_TABLE_LEN,
        );
        schedule::Finishing::tabled(BidGain::Priced(priced), finish, terms)
    }
}

/// The epoch's plan: `schedule::plan_epoch` on the jobs as the pass made them, the workers as
/// they are (`current`, with each job's count), the worker types and the tenants.
#[allow(clippy::too_many_arguments)]
pub(super) fn plan(
    settings: &AllocatorSettings,
    registry: &WorkerRegistry,
    seed: u64,
    pass: &EpochPass<'_>,
    (current, held_counts): (&[Option<usize>], &[u32]),
    ledgers: &mut [FloorLedger],
    typed: Option<&TypedCluster>,
    tenancy: Option<&TenancyInput>,
) -> EpochPlan {
    let machine_of = machines(registry);
    let horizon = settings.bid_horizon_s;
    let types = typed.map(|t| schedule::Types {
        type_of: &t.type_of,
        speeds: &t.speeds,
        explore: &t.explore,
        keep_on_move: if horizon > 0.0 {
            ((horizon - settings.place.restart_s) / horizon).clamp(0.0, 1.0)
        } else {
            1.0
        },
    });
    let input = EpochInput {
        policy: settings.policy,
        plan: settings.plan,
        place: settings.place,
        jobs: &pass.jobs,
        machine_of: machine_of.as_deref(),
        current,
        held: Some(held_counts),
        seed,
        types,
        tenants: tenancy.map(|t| schedule::Tenancy {
            shares: &t.shares,
            tenant_of: &t.tenant_of,
            held: &t.held,
            class_of: &t.class_of,
        }),
        special: Some(pass.special),
    };
    schedule::plan_epoch(&input, ledgers)
}

/// Each worker's machine as a dense index (a worker without one is its own machine), or `None`
/// when no worker names a machine (a count the registry keeps: at 40,000 workers a scan for one
/// was 2% of an epoch).
fn machines(registry: &WorkerRegistry) -> Option<Vec<usize>> {
    registry.any_machine().then(|| {
        let mut index: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
        registry
            .iter()
            .map(|(id, w)| {
                let n = index.len();
                *index.entry(w.spec.machine.as_deref().unwrap_or(id.as_str())).or_insert(n)
            })
            .collect()
    })
}

/// Each worker's job now, as its index in the jobs' id order (`keys`, the jobs' keys in that
/// order). By key, not by name: a lookup by name reads two strings scattered over the heap per
/// worker, most of an epoch at 16,000 workers.
///
/// Keys are handed out in order, so the live jobs' keys are usually dense: then a table indexed
/// by key answers (a hash lookup per worker was a tenth of an epoch at 16,000 workers); when
/// churn has spread them over more than 8 slots per job, a hash map does.
pub(super) fn current_jobs(registry: &WorkerRegistry, keys: &[u64]) -> Vec<Option<usize>> {
    let (lo, hi) = keys.iter().fold((u64::MAX, 0), |(lo, hi), &k| (lo.min(k), hi.max(k)));
    if lo <= hi && hi - lo < 8 * keys.len() as u64 + 64 {
        let mut ord_of = vec![u32::MAX; (hi - lo + 1) as usize];
        for (i, &k) in keys.iter().enumerate() {
            ord_of[(k - lo) as usize] = i as u32;
        }
        let ord = |key: u64| {
            let slot = key.checked_sub(lo).and_then(|k| ord_of.get(k as usize)).copied()?;
            (slot != u32::MAX).then_some(slot as usize)
        };
        return registry.iter().map(|(_, w)| w.job.as_ref().and_then(|j| ord(j.key))).collect();
    }
    let ord_of: foldhash::HashMap<u64, usize> = keys.iter().enumerate().map(|(i, &k)| (k, i)).collect();
    registry.iter().map(|(_, w)| w.job.as_ref().and_then(|j| ord_of.get(&j.key).copied())).collect()
}

/// What the epoch's pass reads for the rest of the epoch, each in the jobs' id order.
pub(super) struct EpochState {
    pub(super) keys: Vec<u64>,
    pub(super) without_bid: usize,
    pub(super) ledgers: Vec<FloorLedger>,
    pub(super) lost_workers: Vec<bool>,
    /// Some job saves on request (`JobSpec::save_on_request`).
    pub(super) saves_on_request: bool,
    /// Some job was asked to save and waits for it.
    pub(super) asked: bool,
}

/// What decides whether a job holds its workers this epoch ([`Hold`]).
#[derive(Clone, Copy, Debug)]
struct HoldIn {
    /// It has no worker or no bid: nothing to hold.
    idle: bool,
    /// It saves on a schedule and has not saved since the last decision (`Saves::waits`).
    waits: bool,
    /// Within its tenant's `min_run_s` of its last change.
    min_run: bool,
}

impl HoldIn {
    /// Whether the job keeps its workers this epoch (issue #43), and how: none of its workers
    /// is rebalanced away, by its tenant's quota (`schedule::tenants::quotas_holding`) or inside
    /// it, except to restore a guarantee or for a higher class of its tenant (the planner serves
    /// it first, holds or not). A job between two saves keeps exactly what it has unless a
    /// guarantee is `owed`.
    fn hold(self, owed: bool) -> Hold {
        if self.idle {
            Hold::None
        } else if self.waits && !owed {
            Hold::Save
        } else if self.min_run {
            Hold::Keep
        } else {
            Hold::None
        }
    }
}
