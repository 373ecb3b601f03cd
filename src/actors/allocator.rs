//! The allocator actor: it keeps every job's latest bid (job actors push theirs when it
//! changes, so an epoch never waits on an actor), and every epoch it expires silent workers,
//! runs the configured policy on the bids, maps counts to concrete workers with as few moves as
//! possible, tells the jobs whose worker count changed, and publishes only what changed. It owns
//! the worker registry; the maths is `policy::*`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, info, warn};

use super::job::{Bid, BidUpdate, JobActor, WorkersChanged, job_model};
use super::registry::{JobRef, WorkerRegistry};
use super::types::{self, JobSpeeds};
use crate::bus::Publisher;
use crate::bus::durable::Durable;
use crate::cluster::ranks::{self, PortBook};
use crate::metrics::Metrics;
use crate::policy::table::{DEFAULT_TABLE_LEN, Tabled};
use crate::policy::{ByRef, GainFn, JobBid, PolicyKind};
use crate::protocol::{
    EndReason, EpochGains, EpochSummary, JobAllocation, JobCommand, JobOutcome, JobStatus, Launch, Outcome,
    RejectCause, RendezvousUse, Role, Running, StatusSnapshot, WorkerAssignment, WorkerSpec, WorkerStatus,
};
use crate::quality::GainCurve;
use crate::quality::speeds::TypeRatios;
use crate::schedule::{self, EpochInput, EpochJob, EpochPlan, FloorLedger, JobModel, PlaceSettings, PlanSettings};

/// What the allocator needs of the configuration.
#[derive(Clone, Debug)]
pub struct AllocatorSettings {
    pub epoch: Duration,
    pub policy: PolicyKind,
    pub plan: PlanSettings,
    /// Placement: the method, and what a move costs and must pay back.
    pub place: PlaceSettings,
    pub worker_timeout: Duration,
    /// A job that holds workers and has been quiet this long bids for none (see `JobQuiet`).
    pub stale_job: Option<Duration>,
    /// The term every assignment carries (the leader's lease, or this start's incarnation):
    /// agents ignore a term older than one they have obeyed.
    pub term: Option<u64>,
    /// This replica's name when replicas share a lease (for `status`).
    pub replica: Option<String>,
    /// Epochs run only while it holds (the leader's lease).
    pub fence: crate::bus::lease::Fence,
    /// A submitted job whose generation has sent no report for this long is restarted (as if
    /// its process had failed). `None`: never.
    pub stall_timeout: Option<Duration>,
    /// A submitted job keeps its workers for at least this long after each change (see
    /// `min_generation_ms`).
    pub min_generation: Duration,
    /// First rendezvous port, ports per address, and how long a port given back cools.
    pub rendezvous: (u16, u16, Duration),
    /// ... and at least this many times its measured restart cost.
    pub restart_amortisation: f64,
    /// The horizon a job's gains are predicted over (`horizon_s`): a submitted job's restart
    /// costs its bid that much of it (`schedule::restart_priced`).
    pub bid_horizon_s: f64,
    /// The weight of the completion term in the jobs' bids (`schedule::finish`; 0: off).
    pub completion_weight: f64,
    /// `[tenants]`: each tenant's jobs are planned inside its quota (none: one pool); a
    /// reload replaces them between epochs.
    pub tenants: super::tenants::Tenants,
}

/// A cluster of several worker types this epoch: each worker's type (an index into the types'
/// sorted names) and each job's speed on each (in the jobs' id order).
struct TypedCluster {
    type_of: Vec<usize>,
    speeds: Vec<Vec<f64>>,
}

/// A message encoded for publishing (`None`: it could not be encoded, and that was logged).
type Encoded = Option<crate::bus::Outgoing>;

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

/// What a job bids this epoch: its own gains, or (a submitted job, which every change
/// restarts) those gains with the restart priced in.
enum BidGain<'a> {
    Curve(ByRef<'a, Tabled<GainCurve>>),
    Priced(schedule::GainTable),
}

impl GainFn for BidGain<'_> {
    fn gain(&self, workers: u32) -> f64 {
        match self {
            BidGain::Curve(c) => c.gain(workers),
            BidGain::Priced(t) => t.gain(workers),
        }
    }

    fn table(&self) -> &[f64] {
        match self {
            BidGain::Curve(c) => c.table(),
            BidGain::Priced(t) => t.table(),
        }
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        match self {
            BidGain::Curve(c) => c.gain_at_speed(workers, speed),
            BidGain::Priced(t) => t.gain_at_speed(workers, speed),
        }
    }
}

/// Seconds before the first restart of a failed generation; doubled at each further restart,
/// up to `RESTART_BACKOFF_MAX_S`.
const RESTART_BACKOFF_S: f64 = 1.0;
const RESTART_BACKOFF_MAX_S: f64 = 60.0;
/// Entries of a submitted job's restart-priced gain table (its workers are capped there).
const PRICED_TABLE_LEN: usize = 16 * DEFAULT_TABLE_LEN;
/// Ended jobs kept for `status` (and `slaq submit --wait`).
const ENDED_KEPT: usize = 256;

/// Ended jobs whose last generation is remembered, so that a job of the same id started again
/// counts on from it (an agent still running the old one ignores a generation lower than its
/// own as stale).
const PAST_GENERATIONS_KEPT: usize = 100_000;

/// Where a submitted job's current generation stands.
#[derive(Clone, Debug, Default)]
struct Supervision {
    /// Generations restarted after a failure or a stall.
    restarts: u32,
    /// When the current generation started.
    generation_started_s: f64,
    /// When its report count last grew.
    progress_s: f64,
    /// A generation that failed (counted once), and when its restart is due.
    failed_generation: Option<u64>,
    restart_at_s: Option<f64>,
    /// Its restarts are used up: it is being ended as failed.
    ending: bool,
    /// A new generation (not the first) has not reported yet: its restart is being timed.
    timing_restart: bool,
    /// What a restart costs it: seconds from a new generation to its first new report
    /// (a moving average of the last few), once measured.
    restart_s: Option<f64>,
}

impl Supervision {
    /// How long the current generation keeps its workers: `min_generation_s`, or `factor`
    /// times the measured restart cost if that is longer.
    fn tenure_s(&self, min_generation_s: f64, factor: f64) -> f64 {
        min_generation_s.max(self.restart_s.map_or(0.0, |r| r * factor))
    }
}

struct JobEntry {
    /// Unique per job for the life of the process (a job that leaves and returns gets a new
    /// one): workers name their job by it in the registry.
    key: u64,
    /// Its actor, when it runs in this process; `None` when it runs on the replica that owns
    /// its partition (`[cluster] shared`), which learns its worker count from its allocation.
    addr: Option<Addr<JobActor>>,
    workers: Vec<String>,
    attained_service: f64,
    ledger: FloorLedger,
    bid: Option<Bid>,
    /// What the last epoch predicted for this job, checked against its reports at the next.
    pending: Option<PendingGain>,
    /// The worker count `pending` was predicted at, with the current bid (`None`: a new bid
    /// came since): the same bid at the same count predicts the same, so it is not recomputed.
    pending_for: Option<u32>,
    /// Attained service, entitled and granted worker-epochs when the plan was last saved.
    saved_plan: Option<(f64, f64, f64)>,
    /// The batch size last published (jobs that declare `batch_sizes`).
    batch: Option<u32>,
    /// It has sent nothing for `stale_job` (the ingest loop says so).
    quiet: bool,
    /// When its workers last changed (seconds on the allocator's clock).
    workers_since_s: f64,
    /// Its processes' generation: one more at every change of its membership.
    generation: u64,
    /// A worker of it went silent and was removed: its membership changed at the next epoch.
    lost_workers: bool,
    /// What the agents run for it (a submitted job), and how its generations fare.
    command: Option<JobCommand>,
    supervision: Supervision,
    /// When it registered (seconds on the allocator's clock; after a restart, as restored from
    /// its fair clock): its age for the finish-time bound.
    since_s: f64,
    /// Its predicted iterations per second at 0, 1, … workers, from its latest bid, when the
    /// finish-time bound is on; else empty (no `Pace`).
    pace_rates: Vec<f64>,
    /// Its iterations left as of its latest bid (declared, or predicted from its curve: a
    /// search on the curve, done once per bid, not per epoch); read by the bound and the
    /// completion term.
    remaining_iters: f64,
    /// Its speed on each worker type, measured (issue #31), and the epoch being measured.
    speeds: JobSpeeds,
}

impl JobEntry {
    fn new(key: u64, addr: Option<Addr<JobActor>>, now_s: f64) -> Self {
        JobEntry {
            key,
            addr,
            workers: Vec::new(),
            attained_service: 0.0,
            ledger: FloorLedger::default(),
            bid: None,
            pending: None,
            pending_for: None,
            saved_plan: None,
            batch: None,
            quiet: false,
            workers_since_s: now_s,
            generation: 0,
            lost_workers: false,
            command: None,
            supervision: Supervision::default(),
            since_s: now_s,
            pace_rates: Vec::new(),
            remaining_iters: 0.0,
            speeds: JobSpeeds::default(),
        }
    }
}

/// A job's loss when an epoch started, its bid's normaliser, and the drop the bid predicted
/// over the epoch for the workers it was given.
#[derive(Clone, Copy, Debug)]
struct PendingGain {
    loss_at_start: f64,
    scale: f64,
    predicted: f64,
}

/// Epoch summaries kept for `status` and benchmarks.
const EPOCH_HISTORY: usize = 1024;
/// Seconds between saves of a job's service and floor ledger.
const PLAN_SAVE_S: f64 = 30.0;

/// A worker whose heartbeat shows another job than recorded is told again at most this often
/// (an assignment just published may still be on its way).
const RETELL_AFTER_S: f64 = 2.0;

/// An unknown worker is asked to say hello again at most this often.
const PROMPT_EVERY_S: f64 = 5.0;
/// Unknown workers asked at once, at most.
const MAX_PROMPTED: usize = 10_000;

pub struct AllocatorActor {
    settings: AllocatorSettings,
    publisher: Publisher,
    jobs: BTreeMap<String, JobEntry>,
    registry: WorkerRegistry,
    epoch: u64,
    started: Instant,
    history: VecDeque<EpochSummary>,
    metrics: Arc<Metrics>,
    durable: Option<Durable>,
    /// Whether NATS was unreachable at the last epoch: silence then is not a worker's fault.
    was_disconnected: bool,
    /// When each unknown worker was last asked to say hello again (bounded; see `WorkerBeat`).
    prompted: HashMap<String, f64>,
    /// The last job key handed out.
    next_key: u64,
    /// The model of a job that has not bid yet.
    default_model: Arc<JobModel>,
    /// The next epoch publishes every worker's assignment, changed or not: the first epoch of
    /// a term (a restart or a fail-over), so that assignments lost in a crash are made good.
    tell_all: bool,
    /// Epochs skipped in a row because the lease was not certainly held.
    skipped: u64,
    /// The rendezvous port each job's rank 0 listens on, per machine.
    ports: PortBook,
    /// Jobs that ended lately (for `status`).
    ended: VecDeque<JobOutcome>,
    /// The last generation of jobs that ended (at most `PAST_GENERATIONS_KEPT`, oldest out).
    past_generations: HashMap<String, u64>,
    past_order: VecDeque<String>,
    /// Generations started without ranks (no free rendezvous port), since this start.
    without_ranks: u64,
    /// Jobs with a command (supervised): without any, an epoch skips their checks.
    submitted: usize,
    /// Where a submitted job whose restarts are used up is sent to be ended (the service's
    /// ingest loop ends it as it would on a bye).
    ending: Option<tokio::sync::mpsc::UnboundedSender<(String, EndReason)>>,
}

impl AllocatorActor {
    pub fn new(
        settings: AllocatorSettings,
        publisher: Publisher,
        metrics: Arc<Metrics>,
        durable: Option<Durable>,
    ) -> Self {
        let (base, span, cooldown) = settings.rendezvous;
        let ports = PortBook::new(base, span, cooldown.as_secs_f64());
        AllocatorActor {
            settings,
            publisher,
            jobs: BTreeMap::new(),
            registry: WorkerRegistry::default(),
            epoch: 0,
            started: Instant::now(),
            history: VecDeque::new(),
            metrics,
            durable,
            was_disconnected: false,
            prompted: HashMap::new(),
            next_key: 0,
            default_model: Arc::new(job_model(&crate::protocol::JobSpec::new("-"), &[], None)),
            tell_all: true,
            ports,
            skipped: 0,
            ended: VecDeque::new(),
            past_generations: HashMap::new(),
            past_order: VecDeque::new(),
            without_ranks: 0,
            submitted: 0,
            ending: None,
        }
    }

    /// Submitted jobs whose restarts are used up are sent here to be ended.
    pub fn ending_to(mut self, to: tokio::sync::mpsc::UnboundedSender<(String, EndReason)>) -> Self {
        self.ending = Some(to);
        self
    }

    /// A submitted job's generation failed (a process exited non-zero, or it stalled): it is
    /// restarted after a backoff, or, its restarts used up, ended as failed.
    fn fail(&mut self, job: &str, why: &str) {
        let now_s = self.now_s();
        let Some(entry) = self.jobs.get_mut(job) else { return };
        let Some(command) = &entry.command else { return };
        let sup = &mut entry.supervision;
        if sup.ending || sup.failed_generation == Some(entry.generation) {
            return;
        }
        sup.failed_generation = Some(entry.generation);
        if sup.restarts >= command.max_restarts {
            warn!(job, why, restarts = sup.restarts, "the job's restarts are used up: it ends as failed");
            self.metrics.jobs_failed.inc();
            self.end(job, EndReason::Failed);
            return;
        }
        sup.restarts += 1;
        let backoff = (RESTART_BACKOFF_S * 2f64.powi(sup.restarts as i32 - 1)).min(RESTART_BACKOFF_MAX_S);
        sup.restart_at_s = Some(now_s + backoff);
        self.metrics.job_restarts.inc();
        warn!(
            job,
            why,
            restart = sup.restarts,
            generation = entry.generation,
            backoff_s = backoff,
            "restarting the job's processes"
        );
    }

    /// Sends a submitted job to the ingest loop to be ended (as a bye would), once.
    fn end(&mut self, job: &str, reason: EndReason) {
        let Some(entry) = self.jobs.get_mut(job).filter(|e| e.command.is_some()) else { return };
        let sup = &mut entry.supervision;
        if std::mem::replace(&mut sup.ending, true) {
            return;
        }
        sup.restart_at_s = None;
        if let Some(to) = &self.ending {
            let _ = to.send((job.to_string(), reason));
        }
    }

    /// Submitted jobs whose current generation has reported nothing for the stall timeout.
    fn stalled(&self, now_s: f64) -> Vec<String> {
        let Some(stall) = self.settings.stall_timeout.map(|d| d.as_secs_f64()).filter(|_| self.submitted > 0) else {
            return Vec::new();
        };
        self.jobs
            .iter()
            .filter(|(_, e)| e.command.is_some() && !e.workers.is_empty())
            .filter(|(_, e)| {
                let sup = &e.supervision;
                sup.restart_at_s.is_none()
                    && !sup.ending
                    && sup.failed_generation != Some(e.generation)
                    && now_s - sup.generation_started_s.max(sup.progress_s) > stall
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn now_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Runs an epoch, then schedules the next one a period later. After a stall (the process
    /// paused) one late epoch runs, never a burst of catch-up epochs, and none while the lease
    /// is not certainly held.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.settings.fence.holds() {
            if self.skipped > 0 {
                info!(skipped = self.skipped, "the lease is held again: epochs resume");
                self.skipped = 0;
            }
            self.epoch();
        } else {
            if self.skipped == 0 {
                warn!("the lease is not certainly held: no epoch");
            }
            self.skipped += 1;
            self.metrics.epochs_skipped.inc();
        }
        ctx.run_later(self.settings.epoch, |act, ctx| act.tick(ctx));
    }

    fn epoch(&mut self) {
        let started = Instant::now();
        let cpu_started = thread_cpu();
        let now_s = self.now_s();
        // A worker is silent for the timeout *while we can hear it*: during an outage nobody is
        // expired, and after it every worker gets the full timeout again.
        if !self.publisher.connected() {
            self.was_disconnected = true;
        } else {
            if std::mem::take(&mut self.was_disconnected) {
                self.registry.touch_all(now_s);
                info!("NATS is back: worker timeouts count from now");
            }
            let expired = self.registry.expire(now_s, self.settings.worker_timeout.as_secs_f64());
            if let Some((first, _)) = expired.first() {
                // One line per epoch, not per worker: a rack that goes takes thousands.
                info!(workers = expired.len(), first = %first, "workers silent too long, removed");
            }
            for (worker, job) in expired {
                debug!(worker = %worker, job = ?job.as_ref().map(|j| &j.id), "worker silent too long, removed");
                if let Some(d) = &self.durable {
                    d.forget_worker(&worker);
                }
                // Its job is told its new membership at this epoch (its list still names the
                // worker, so the change shows).
                if let Some(entry) = job.and_then(|j| self.jobs.get_mut(&j.id)) {
                    entry.lost_workers = true;
                }
            }
        }
        if self.publisher.connected() {
            // A stall is counted only while reports can reach us.
            for job in self.stalled(now_s) {
                self.fail(&job, "no report for the stall timeout");
            }
        }
        self.prompted.retain(|_, at| now_s - *at < PROMPT_EVERY_S);
        self.finish_epoch(started, cpu_started);
    }

    /// Plans, places and publishes one epoch: the jobs' state for the planner, the plan
    /// (`schedule::plan_epoch`), then only what changed: moved workers, and each job whose
    /// membership changed in a new generation. Jobs are visited in id order throughout (the
    /// `BTreeMap`'s order is the dense job index of the plan), never looked up by id: at 200,000
    /// jobs a lookup per job per step was most of an epoch's cost.
    fn finish_epoch(&mut self, started: Instant, cpu_started: Option<Duration>) {
        let collected = Instant::now();
        let now_s = self.now_s();
        let (mut ledgers, lost_workers, pinned) = self.epoch_state(now_s);
        let jobs_without_bid = self.jobs.values().filter(|e| e.bid.is_none()).count();
        let current = self.current_jobs();
        // The worker types in use (`None`: all of the default type).
        let names = types::names(&self.registry);
        let typed = names.as_deref().and_then(|names| self.typed_cluster(names, now_s));
        // Teams: each tenant's share of the cluster as it is now, and each job's tenant from its
        // id (its subject), once for the plan and the summary.
        let tenants = self.settings.tenants.get();
        let tenancy = tenants
            .as_deref()
            .map(|t| (t.shares(self.registry.len() as u32).shares, t.tenant_of(self.jobs.keys().map(String::as_str))));
        let plan = self.plan(&pinned, &current, &mut ledgers, now_s, typed.as_ref(), tenancy.as_ref());
        let policy_done = Instant::now();
        let epoch = self.epoch + 1;
        let mut outgoing = Vec::new();
        let moved = self.move_workers(epoch, &current, &plan, lost_workers, now_s, &mut outgoing);
        let (resized, told) = self.new_generations(epoch, &plan, &moved, ledgers, now_s, names.is_some());
        let workers_moved = moved.workers;
        outgoing.extend(told);
        let gains = self.check_predictions(self.settings.epoch.as_secs_f64());
        let publish_started = Instant::now();
        self.publisher.send_all(outgoing.into_iter().flatten().collect());
        let done = Instant::now();
        // Jobs whose worker count changed, told after the assignments are out: each rebids, and
        // that work must not delay this epoch's messages.
        for (addr, workers) in resized {
            addr.do_send(WorkersChanged(workers));
        }
        let summary = EpochSummary {
            epoch,
            num_jobs: self.jobs.len(),
            num_workers: self.registry.len(),
            workers_assigned: plan.counts.iter().map(|&c| u64::from(c)).sum(),
            workers_moved,
            jobs_without_bid,
            collect_ms: ms(collected - started),
            policy_ms: ms(policy_done - collected),
            publish_ms: ms(done - publish_started),
            total_ms: ms(done - started),
            cpu_ms: cpu_started.zip(thread_cpu()).map(|(a, b)| ms(b.saturating_sub(a))),
            gains,
            slo_jobs: plan.slo_jobs,
            slo_missed: plan.slo_missed,
            accelerators: types::accelerator_use(&self.registry),
            tenants: match (&tenants, &tenancy, &plan.quotas) {
                (Some(t), Some((_, tenant_of)), Some(q)) => t.usage(q, tenant_of, &plan.counts),
                _ => Default::default(),
            },
        };
        if let Some(m) = self.publisher.message(self.publisher.subjects().ctl_epoch(), &summary) {
            self.publisher.send_all(vec![m]);
        }
        debug!(epoch, jobs = summary.num_jobs, moved = workers_moved, total_ms = summary.total_ms, "epoch done");
        self.metrics.observe_epoch(&summary);
        if self.history.len() == EPOCH_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(summary);
        self.epoch = epoch;
    }

    /// One pass over the jobs (at 4,000 jobs each pass over the map costs a tenth of a ms):
    /// - the ledgers, lent to the planner and put back by `new_generations` (no copies);
    /// - whether a job lost a worker to silence (it has a new membership even if no worker
    ///   moves), or has a failed generation whose backoff is over (it restarts on its workers);
    /// - whether a submitted job is pinned: in the first `min_generation` of a generation it
    ///   keeps exactly its workers, as every change restarts its processes.
    fn epoch_state(&mut self, now_s: f64) -> (Vec<FloorLedger>, Vec<bool>, Vec<bool>) {
        let min_generation_s = self.settings.min_generation.as_secs_f64();
        let amortise = self.settings.restart_amortisation;
        let n = self.jobs.len();
        let mut ledgers: Vec<FloorLedger> = Vec::with_capacity(n);
        let (mut lost_workers, mut pinned): (Vec<bool>, Vec<bool>) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for e in self.jobs.values_mut() {
            ledgers.push(std::mem::take(&mut e.ledger));
            let sup = &e.supervision;
            let lost = std::mem::take(&mut e.lost_workers) || sup.restart_at_s.is_some_and(|t| now_s >= t);
            lost_workers.push(lost);
            pinned.push(
                e.command.is_some()
                    && !e.workers.is_empty()
                    && !lost
                    && !sup.ending
                    && now_s - sup.generation_started_s < sup.tenure_s(min_generation_s, amortise),
            );
        }
        (ledgers, lost_workers, pinned)
    }

    /// Each worker's job now, as its index in the jobs' id order. By key, not by name: a lookup
    /// by name reads two strings scattered over the heap per worker, most of an epoch at 16,000
    /// workers.
    ///
    /// Keys are handed out in order, so the live jobs' keys are usually dense: then a table
    /// indexed by key answers (a hash lookup per worker was a tenth of an epoch at 16,000
    /// workers); when churn has spread them over more than 8 slots per job, a hash map does.
    fn current_jobs(&self) -> Vec<Option<usize>> {
        let (lo, hi) = self.jobs.values().fold((u64::MAX, 0), |(lo, hi), e| (lo.min(e.key), hi.max(e.key)));
        if lo <= hi && hi - lo < 8 * self.jobs.len() as u64 + 64 {
            let mut ord_of = vec![u32::MAX; (hi - lo + 1) as usize];
            for (i, e) in self.jobs.values().enumerate() {
                ord_of[(e.key - lo) as usize] = i as u32;
            }
            let ord = |key: u64| {
                let slot = key.checked_sub(lo).and_then(|k| ord_of.get(k as usize)).copied()?;
                (slot != u32::MAX).then_some(slot as usize)
            };
            return self.registry.iter().map(|(_, w)| w.job.as_ref().and_then(|j| ord(j.key))).collect();
        }
        let ord_of: foldhash::HashMap<u64, usize> = self.jobs.values().enumerate().map(|(i, e)| (e.key, i)).collect();
        self.registry.iter().map(|(_, w)| w.job.as_ref().and_then(|j| ord_of.get(&j.key).copied())).collect()
    }

    /// The epoch's plan: the jobs as `EpochJob`s (`epoch_jobs`), then `schedule::plan_epoch`.
    fn plan(
        &self,
        pinned: &[bool],
        current: &[Option<usize>],
        ledgers: &mut [FloorLedger],
        now_s: f64,
        typed: Option<&TypedCluster>,
        tenancy: Option<&(Vec<schedule::tenants::TenantShare>, Vec<usize>)>,
    ) -> EpochPlan {
        let jobs = self.epoch_jobs(pinned, now_s);
        let machine_of = self.machines();
        let horizon = self.settings.bid_horizon_s;
        let types = typed.map(|t| schedule::Types {
            type_of: &t.type_of,
            speeds: &t.speeds,
            keep_on_move: if horizon > 0.0 {
                ((horizon - self.settings.place.restart_s) / horizon).clamp(0.0, 1.0)
            } else {
                1.0
            },
        });
        let input = EpochInput {
            policy: self.settings.policy,
            plan: self.settings.plan,
            place: self.settings.place,
            jobs: &jobs,
            machine_of: machine_of.as_deref(),
            current,
            seed: self.epoch,
            types,
            tenants: tenancy.map(|(shares, tenant_of)| schedule::Tenancy { shares, tenant_of }),
        };
        schedule::plan_epoch(&input, ledgers)
    }

    /// Applies the plan to the registry: each worker whose job or role changed is recorded (and
    /// saved); one that is idle now is told so. At the first epoch of a term every worker is told
    /// what it serves, changed or not. Returns which jobs' membership changed (`lost` marks those
    /// that changed without a move), how many workers moved and which were taken from one
    /// tenant's job for another's (their processes get the taker's grace at most). Only
    /// workers that move cost anything here.
    fn move_workers(
        &mut self,
        epoch: u64,
        current: &[Option<usize>],
        plan: &EpochPlan,
        lost: Vec<bool>,
        now_s: f64,
        outgoing: &mut Vec<Encoded>,
    ) -> Moved {
        // Submitted jobs' commands, for the first epoch of a term, which tells every worker.
        let commands: Vec<Option<JobCommand>> =
            if self.tell_all { self.jobs.values().map(|e| e.command.clone()).collect() } else { Vec::new() };
        let ids: Vec<&str> = self.jobs.keys().map(String::as_str).collect();
        let keys: Vec<u64> = self.jobs.values().map(|e| e.key).collect();
        let roles = plan.serves.iter().map(|&s| if s { Role::Ps } else { Role::Worker });
        let mut job_changed = lost;
        let mut workers_moved = 0;
        let mut taken = HashSet::new();
        let tell_all = std::mem::take(&mut self.tell_all);
        let tenants = self.settings.tenants.get();
        for ((((worker, entry), &before), &after), role) in
            self.registry.iter_mut().zip(current).zip(&plan.next).zip(roles)
        {
            // Same job and role, or no job and no stale name of a job that left.
            let same = before == after && role == entry.role && (after.is_some() || entry.job.is_none());
            if same && tell_all {
                // The first epoch of a term tells every worker what it serves, changed or not.
                let message = WorkerAssignment {
                    role,
                    launch: entry.launch.clone(),
                    command: entry.launch.as_ref().and(after).and_then(|j| commands.get(j).cloned().flatten()),
                    stop_grace_ms: after.and_then(|j| grace_ms(tenants.as_deref(), ids[j])),
                    ..assignment(self.settings.term, worker, epoch, after.map(|j| ids[j].to_string()))
                };
                entry.told_s = now_s;
                outgoing.push(self.publisher.message(self.publisher.subjects().worker_assign(worker), &message));
            }
            if same {
                continue;
            }
            entry.told_s = now_s;
            entry.role = role;
            let now_job = after.map(|j| ids[j]);
            workers_moved += 1;
            if let (Some(t), Some(b), Some(a)) = (tenants.as_deref(), before, after)
                && t.index_of(ids[b]) != t.index_of(ids[a])
            {
                taken.insert(worker.clone());
            }
            for j in [before, after].into_iter().flatten() {
                job_changed[j] = true;
            }
            entry.job = after.map(|j| JobRef { key: keys[j], id: ids[j].to_string() });
            if let Some(d) = &self.durable {
                d.save_assignment(worker, now_job);
            }
            if now_job.is_none() {
                // Idle now. A worker that joins a job is told below, with its job's other
                // members, in the job's new generation.
                entry.launch = None;
                let message = WorkerAssignment { role, ..assignment(self.settings.term, worker, epoch, None) };
                outgoing.push(self.publisher.message(self.publisher.subjects().worker_assign(worker), &message));
            }
        }
        Moved { job_changed, workers: workers_moved, taken }
    }

    /// Every job takes its ledger back and books its service; a job whose membership changed
    /// starts a new generation (every member, old or new, is told its rank in it) and is told
    /// its workers (naming their type when workers name theirs, `typed`), and so is a job whose
    /// batch changed. Returns the jobs whose worker count changed, with their new count, and the
    /// messages to send.
    fn new_generations(
        &mut self,
        epoch: u64,
        plan: &EpochPlan,
        moved: &Moved,
        ledgers: Vec<FloorLedger>,
        now_s: f64,
        typed: bool,
    ) -> (Vec<(Addr<JobActor>, u32)>, Vec<Encoded>) {
        let (job_changed, taken) = (&moved.job_changed, &moved.taken);
        let mut outgoing = Vec::new();
        let batches: Vec<Option<u32>> = plan.batches.iter().map(|c| c.map(|c| c.config.batch)).collect();
        let mut new_workers: Vec<Vec<String>> = vec![Vec::new(); self.jobs.len()];
        for ((worker, _), &after) in self.registry.iter().zip(&plan.next) {
            if let Some(j) = after.filter(|&j| job_changed[j]) {
                new_workers[j].push(worker.clone());
            }
        }
        let epoch_s = self.settings.epoch.as_secs_f64();
        let mut resized = Vec::new();
        // Jobs whose new generation found no free rendezvous port (logged once an epoch).
        let (mut without_ranks, mut without_ranks_count): (Option<&str>, usize) = (None, 0);
        let every = (PLAN_SAVE_S / epoch_s).ceil().max(1.0) as usize;
        let tenants = self.settings.tenants.get();
        for (j, (((id, entry), workers), ledger)) in self.jobs.iter_mut().zip(new_workers).zip(ledgers).enumerate() {
            entry.ledger = ledger;
            let count = if job_changed[j] { workers.len() } else { entry.workers.len() };
            entry.attained_service += epoch_s * count as f64;
            // Each job's plan is saved about once a PLAN_SAVE_S, the jobs spread over the epochs,
            // and only when it changed: at 200,000 jobs a save per job per epoch would be 40,000
            // writes a second. A restart restores it at most that stale.
            let stamp = (entry.attained_service, entry.ledger.entitled(), entry.ledger.granted());
            let due = (epoch as usize + j).is_multiple_of(every) && entry.saved_plan != Some(stamp);
            if let Some(d) = self.durable.as_ref().filter(|_| due) {
                d.save_plan(id, entry.attained_service, &entry.ledger);
                entry.saved_plan = Some(stamp);
            }
            if job_changed[j] && workers.len() != entry.workers.len() {
                if let Some(addr) = &entry.addr {
                    resized.push((addr.clone(), workers.len() as u32));
                }
                entry.workers_since_s = now_s;
            }
            if job_changed[j] {
                // A new generation: every member, old or new, is told its rank in it.
                entry.generation += 1;
                let sup = &mut entry.supervision;
                (sup.generation_started_s, sup.restart_at_s) = (now_s, None);
                sup.timing_restart = entry.generation > 1 && !workers.is_empty();
                let launches = launches(&self.registry, &mut self.ports, entry, &workers, batches[j], now_s);
                if launches.first().is_some_and(Option::is_none) {
                    without_ranks.get_or_insert(id.as_str());
                    without_ranks_count += 1;
                }
                for (worker, launch) in workers.iter().zip(launches) {
                    let Some(w) = self.registry.get_mut(worker) else { continue };
                    w.launch = launch;
                    w.told_s = now_s;
                    let message = WorkerAssignment {
                        role: w.role,
                        launch: w.launch.clone(),
                        command: w.launch.as_ref().and(entry.command.clone()),
                        stop_grace_ms: grace_ms(tenants.as_deref(), id),
                        // Taken from another tenant's job: that process gets this job's terms.
                        reclaim_grace_ms: grace_ms(tenants.as_deref(), id).filter(|_| taken.contains(worker)),
                        ..assignment(self.settings.term, worker, epoch, Some(id.clone()))
                    };
                    outgoing.push(self.publisher.message(self.publisher.subjects().worker_assign(worker), &message));
                }
            }
            let batch_changed = batches[j].is_some() && batches[j] != entry.batch;
            if (job_changed[j] && workers != entry.workers) || batch_changed {
                let workers = if job_changed[j] { workers } else { entry.workers.clone() };
                entry.batch = batches[j];
                let accelerator =
                    typed.then(|| types::world_type(&self.registry, &workers)).flatten().map(str::to_string);
                let message = JobAllocation {
                    job: id.clone(),
                    epoch,
                    workers,
                    batch_size: batches[j],
                    term: self.settings.term,
                    accelerator,
                };
                outgoing.push(self.publisher.message(self.publisher.subjects().job_alloc(id), &message));
                entry.workers = message.workers;
            }
        }
        self.without_ranks += without_ranks_count as u64;
        self.metrics.generations_without_ranks.inc_by(without_ranks_count as u64);
        if let Some((_, busy)) = self.ports.busiest(now_s) {
            self.metrics.rendezvous_ports_busy.set(busy as i64);
        }
        if let Some(first) = without_ranks {
            warn!(
                jobs = without_ranks_count,
                first,
                "no free rendezvous port at the rank-0 worker's address: these generations run without ranks \
                 (agents that share one --advertise address share its 1,000 ports)"
            );
        }
        (resized, outgoing)
    }

    /// On a cluster of several worker types (`names`, the types in use): each worker's type and
    /// each job's speed on each (after measuring the epoch that ended, `quality::speeds`);
    /// `None` on one type. Jobs' speeds are measured whenever some worker names its type, one
    /// type or several.
    fn typed_cluster(&mut self, names: &[String], now_s: f64) -> Option<TypedCluster> {
        for entry in self.jobs.values_mut() {
            let bid = entry.bid.as_ref();
            let (iter, time) = (bid.and_then(|b| b.last_iter).unwrap_or(0), bid.and_then(|b| b.gain.as_ref()));
            let on = types::world_type(&self.registry, &entry.workers);
            let count = entry.workers.len() as u32;
            entry.speeds.epoch(on, count, iter, entry.generation, time.map(|g| &g.curve().time), now_s);
        }
        // One type in use: measured (a type that joins later is then compared), not decided.
        if names.len() < 2 {
            return None;
        }
        let ratios = TypeRatios::of(self.jobs.values().map(|e| &e.speeds.measured));
        let speeds = self
            .jobs
            .values()
            .map(|e| {
                let t1 = e.bid.as_ref().and_then(|b| b.gain.as_ref()).map(|g| g.curve().time.seconds(1));
                e.speeds.row(names, t1, &ratios, e.bid.as_ref().and_then(|b| b.speeds.as_deref()))
            })
            .collect();
        Some(TypedCluster { type_of: types::type_of(&self.registry, names), speeds })
    }

    /// Each worker's machine as a dense index (a worker without one is its own machine), or
    /// `None` when no worker names a machine (a count the registry keeps: at 40,000 workers a
    /// scan for one was 2% of an epoch).
    fn machines(&self) -> Option<Vec<usize>> {
        self.registry.any_machine().then(|| {
            let mut index: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
            self.registry
                .iter()
                .map(|(id, w)| {
                    let n = index.len();
                    *index.entry(w.spec.machine.as_deref().unwrap_or(id.as_str())).or_insert(n)
                })
                .collect()
        })
    }

    /// Each job as the planner sees it this epoch, in id order: its bid and its model. A job that
    /// has not bid yet keeps exactly the workers it has, and so does a submitted job within its
    /// tenure (`pinned`): those bounds are the scheduler's own and stand. A job that has held
    /// workers and said nothing for `stale_job` bids for none until it reports again: a dead
    /// job's last prediction must not keep winning workers. A submitted job's gains carry the
    /// restart that any change costs it. Otherwise a job's own minimum is a request (honoured up
    /// to its fair share) and its own allowed sizes hold.
    fn epoch_jobs(&self, pinned: &[bool], now_s: f64) -> Vec<EpochJob<'_, schedule::Finishing<BidGain<'_>>>> {
        let stale_s = self.settings.stale_job.map_or(f64::INFINITY, |d| d.as_secs_f64());
        let num_workers = self.registry.len() as u32;
        self.jobs
            .values()
            .zip(pinned)
            .map(|(entry, &pinned)| {
                let have = entry.workers.len() as u32;
                let stale = entry.quiet && have > 0 && now_s - entry.workers_since_s > stale_s;
                let attained_service = entry.attained_service;
                let bid = match &entry.bid {
                    _ if pinned => JobBid { min_workers: have, max_workers: have, attained_service, gain: None },
                    _ if stale => JobBid { min_workers: 0, max_workers: 0, attained_service, gain: None },
                    Some(b) => JobBid {
                        min_workers: b.min_workers,
                        max_workers: b.max_workers,
                        attained_service,
                        gain: b.gain.as_ref().map(|g| {
                            let gain = match &entry.command {
                                // Every change restarts it: the measured cost once known, else the
                                // configured one (the prior), plus the work since its checkpoint.
                                Some(_) => BidGain::Priced(schedule::restart_priced(
                                    g,
                                    have,
                                    entry.supervision.restart_s.unwrap_or(self.settings.place.restart_s)
                                        + b.checkpoint_age_s.unwrap_or(0.0),
                                    self.settings.bid_horizon_s,
                                    b.max_workers.min(num_workers),
                                    PRICED_TABLE_LEN,
                                )),
                                None => BidGain::Curve(ByRef(g)),
                            };
                            schedule::Finishing::tabled(gain, self.finish_of(g.curve(), entry.remaining_iters))
                        }),
                    },
                    None => JobBid { min_workers: have, max_workers: have, attained_service, gain: None },
                };
                let own = entry.bid.as_ref().filter(|_| !pinned);
                let pace = own.filter(|_| !stale && !entry.pace_rates.is_empty()).and_then(|b| {
                    let last = b.last_iter?;
                    Some(schedule::Pace {
                        age_s: now_s - entry.since_s,
                        done: last as f64,
                        remaining: entry.remaining_iters,
                        rates: &entry.pace_rates,
                        wait_s: self.settings.epoch.as_secs_f64(),
                    })
                });
                EpochJob {
                    bid,
                    own_minimum: own.is_some(),
                    sizes: own.and_then(|b| b.sizes.as_deref()),
                    model: entry.bid.as_ref().map_or(self.default_model.as_ref(), |b| b.model.as_ref()),
                    pace,
                }
            })
            .collect()
    }

    /// A job's completion term (`schedule::finish`): none under fair sharing or with weight 0.
    fn finish_of(&self, curve: &GainCurve, remaining_iters: f64) -> Option<schedule::Finish> {
        let weight = self.settings.completion_weight;
        if weight <= 0.0 || self.settings.policy == PolicyKind::Fair {
            return None;
        }
        Some(schedule::Finish { time: curve.time, remaining_iters, horizon_s: self.settings.bid_horizon_s, weight })
    }

    /// Compares each job's prediction for the epoch that just ended with its reports, and
    /// records the prediction for the epoch that starts (at the workers it now has).
    fn check_predictions(&mut self, epoch_s: f64) -> Option<EpochGains> {
        let mut gains = EpochGains::default();
        for entry in self.jobs.values_mut() {
            let now = entry.bid.as_ref().and_then(|b| b.last_loss);
            if let (Some(p), Some(loss)) = (entry.pending, now) {
                gains.jobs += 1;
                gains.predicted += p.predicted;
                gains.realised += (p.loss_at_start - loss) / p.scale;
            }
            let workers = entry.workers.len() as u32;
            if entry.pending_for == Some(workers) {
                continue;
            }
            entry.pending_for = Some(workers);
            entry.pending = entry.bid.as_ref().and_then(|b| {
                let (gain, loss) = (b.gain.as_ref()?.curve(), b.last_loss?);
                // A prior (no points yet) predicts nothing checkable.
                (b.points >= 2).then(|| PendingGain {
                    loss_at_start: loss,
                    scale: gain.scale,
                    predicted: gain.predicted_drop(workers, epoch_s),
                })
            });
        }
        (gains.jobs > 0).then_some(gains)
    }

    /// The status, with the jobs whose id starts with `filter.jobs` and their workers (all
    /// without it), at most `filter.limit` + 1 of each (one past the limit says it was cut):
    /// at a million workers, listing all to answer for a few took seconds.
    fn snapshot(&self, filter: &GetStatus) -> StatusSnapshot {
        let now_s = self.now_s();
        let wanted = |job: &str| match filter.jobs.as_deref() {
            None => true,
            Some(id) if filter.own => job == id,
            Some(prefix) => job.starts_with(prefix),
        };
        let at_most = filter.limit.map_or(usize::MAX, |l| l.saturating_add(1));
        StatusSnapshot {
            term: self.settings.term,
            leader: self.settings.replica.clone(),
            owners: Default::default(),
            rendezvous: self.ports.busiest(now_s).filter(|_| !filter.own).map(|(address, busy)| RendezvousUse {
                address: address.to_string(),
                busy,
                ports: self.ports.span(),
                without_ranks: self.without_ranks,
            }),
            state: if self.durable.is_some() { "jetstream" } else { "none" }.to_string(),
            epoch: self.epoch,
            policy: format!("{:?}", self.settings.policy).to_lowercase(),
            jobs: self
                .jobs
                .iter()
                .filter(|(id, _)| wanted(id))
                .take(at_most)
                .map(|(id, e)| JobStatus {
                    job: id.clone(),
                    last_iter: e.bid.as_ref().and_then(|b| b.last_iter),
                    last_loss: e.bid.as_ref().and_then(|b| b.last_loss),
                    predicted_gain: e.bid.as_ref().and_then(|b| b.predicted_gain),
                    workers: e.workers.len() as u32,
                    points: e.bid.as_ref().map_or(0, |b| b.points),
                    dropped: 0,
                    batch_size: e.batch,
                    generation: e.generation,
                    restarts: e.supervision.restarts,
                    submitted: e.command.is_some(),
                    restart_s: e.supervision.restart_s,
                    speeds: e.speeds.measured.measured.clone(),
                })
                .collect(),
            workers: self
                .registry
                .iter()
                .filter(|(_, w)| filter.jobs.is_none() || w.job.as_ref().is_some_and(|j| wanted(&j.id)))
                .take(at_most)
                .map(|(id, w)| WorkerStatus {
                    worker: id.clone(),
                    job: w.job.as_ref().map(|j| j.id.clone()),
                    machine: w.spec.machine.clone(),
                    role: w.role,
                    silent_s: now_s - w.last_seen_s,
                    refused: w.refused,
                    accelerator: Some(types::accelerator(&w.spec).to_string()),
                })
                .collect(),
            // The message counters live in the metrics registry (one source for both).
            accepted: if filter.own { Default::default() } else { self.metrics.accepted_counts() },
            rejected: if filter.own { Default::default() } else { self.metrics.rejected_counts() },
            num_jobs: if filter.own { 0 } else { self.jobs.len() },
            num_workers: if filter.own { 0 } else { self.registry.len() },
            truncated: false,
            ended: self.ended.iter().filter(|o| wanted(&o.job)).cloned().collect(),
            accelerators: if filter.own { Default::default() } else { types::accelerator_use(&self.registry) },
            tenants: match self.history.back() {
                Some(last) if !filter.own => last.tenants.clone(),
                _ => Default::default(),
            },
        }
    }
}

/// CPU time this thread has used (Linux: `CLOCK_THREAD_CPUTIME_ID`): an epoch's work, apart
/// from the time it waited for a core.
fn thread_cpu() -> Option<Duration> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    ok.then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Actor for AllocatorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Control messages and bids arrive with `do_send`; epochs are timer-driven.
        ctx.run_later(self.settings.epoch, |act, ctx| act.tick(ctx));
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct JobStarted {
    pub job: String,
    /// Its actor, if it runs in this process (see `JobEntry::addr`).
    pub addr: Option<Addr<JobActor>>,
    /// A submitted job's command (sent again when a hello changes it).
    pub command: Option<JobCommand>,
}

impl Handler<JobStarted> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: JobStarted, _: &mut Self::Context) {
        let entry = self.register(msg.job, msg.addr.clone());
        entry.addr = msg.addr;
        if msg.command.is_some() {
            let new = entry.command.is_none();
            entry.command = msg.command;
            if new {
                self.submitted += 1;
            }
        }
    }
}

impl Handler<BidUpdate> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: BidUpdate, _: &mut Self::Context) {
        // A bid from a job that has left (still in flight) is dropped.
        self.take_bid(&msg.job, msg.bid);
    }
}

impl AllocatorActor {
    /// A job's new bid (a job unknown here is ignored).
    fn take_bid(&mut self, job: &str, bid: Bid) {
        if let Some(entry) = self.jobs.get_mut(job) {
            if bid.points > entry.bid.as_ref().map_or(0, |b| b.points) {
                let now_s = self.started.elapsed().as_secs_f64();
                let sup = &mut entry.supervision;
                sup.progress_s = now_s;
                // The first new iteration of the current generation (reports that say theirs;
                // the old generation's last reports, sent while it stops, do not count).
                let current = bid.generation.is_some_and(|g| g >= entry.generation);
                if current && entry.command.is_some() && std::mem::take(&mut sup.timing_restart) {
                    let took = now_s - sup.generation_started_s;
                    sup.restart_s = Some(sup.restart_s.map_or(took, |r| 0.5 * r + 0.5 * took));
                    self.metrics.restart_seconds.observe(took);
                }
            }
            entry.pace_rates.clear();
            let bounded = self.settings.policy != PolicyKind::Fair && self.settings.plan.slowdown_bound().is_finite();
            if let Some(g) = bid.gain.as_ref().filter(|_| bounded) {
                entry.pace_rates = schedule::slowdown::rate_table(&g.curve().time, bid.max_workers);
            }
            // Read by the bound and the completion term, which fair sharing has neither of.
            if let Some(g) = bid.gain.as_ref().filter(|_| self.settings.policy != PolicyKind::Fair) {
                entry.remaining_iters = remaining_iters(&bid, g.curve(), self.settings.epoch.as_secs_f64());
            }
            entry.bid = Some(bid);
            entry.pending_for = None;
        }
    }

    /// Registers a job (its actor here, or `None`: on the replica owning its partition).
    fn register(&mut self, job: String, addr: Option<Addr<JobActor>>) -> &mut JobEntry {
        let now_s = self.now_s();
        match self.jobs.entry(job) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                self.next_key += 1;
                let mut entry = JobEntry::new(self.next_key, addr, now_s);
                entry.supervision.progress_s = now_s;
                // Generations are monotonic per job id: a job that ended and started again
                // counts on from its predecessor.
                entry.generation = self.past_generations.remove(v.key()).unwrap_or(0);
                v.insert(entry)
            }
        }
    }
}

/// What the owners of partitions sent, merged by the leader (`[cluster] shared`): new bids (a job
/// not known yet is registered), jobs that ended there, and jobs that went quiet or spoke again.
#[derive(Debug, Message, Default)]
#[rtype(result = "()")]
pub struct RemoteJobs {
    pub bids: Vec<(String, Bid)>,
    pub gone: Vec<(String, Outcome)>,
    pub quiet: Vec<(String, bool)>,
}

impl Handler<RemoteJobs> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: RemoteJobs, _: &mut Self::Context) {
        for (job, bid) in msg.bids {
            self.register(job.clone(), None);
            self.take_bid(&job, bid);
        }
        for (job, outcome) in msg.gone {
            self.stop_job(job, outcome);
        }
        for (job, quiet) in msg.quiet {
            if let Some(entry) = self.jobs.get_mut(&job) {
                entry.quiet = quiet;
            }
        }
    }
}

/// A job went quiet (nothing heard for `stale_job`), or spoke again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct JobQuiet {
    pub job: String,
    pub quiet: bool,
}

impl Handler<JobQuiet> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: JobQuiet, _: &mut Self::Context) {
        if let Some(entry) = self.jobs.get_mut(&msg.job) {
            entry.quiet = msg.quiet;
        }
    }
}

/// Each member's place in a job's new generation (`cluster::ranks`), in the order of
/// `workers`: machines from the workers' specs (a worker without one is its own machine), the
/// rendezvous at the rank-0 worker's advertised address, on a port no other job's rank 0 at that
/// address holds. `None` for all if every port there is taken (logged).
fn launches(
    registry: &super::registry::WorkerRegistry,
    ports: &mut PortBook,
    entry: &JobEntry,
    workers: &[String],
    batch_size: Option<u32>,
    now_s: f64,
) -> Vec<Option<Launch>> {
    let specs: Vec<Option<&WorkerSpec>> = workers.iter().map(|w| registry.get(w).map(|e| &e.spec)).collect();
    let members: Vec<(&str, &str)> = workers
        .iter()
        .zip(&specs)
        .map(|(w, spec)| (spec.and_then(|s| s.machine.as_deref()).unwrap_or(w), w.as_str()))
        .collect();
    let layout = ranks::layout(&members);
    let Some(first) = layout.iter().position(|r| r.rank == 0) else {
        ports.release(entry.key, now_s);
        return Vec::new();
    };
    // Ports are booked per address, not per machine name: machines that advertise one
    // address share its ports (several agents on one host).
    let master_addr = specs[first].map_or("127.0.0.1", WorkerSpec::address).to_string();
    let Some(port) = ports.take(entry.key, &master_addr, now_s) else {
        debug!(address = %master_addr, "every rendezvous port at the address is taken: the job's processes get no ranks");
        return vec![None; workers.len()];
    };
    layout
        .iter()
        .map(|r| {
            Some(Launch {
                generation: entry.generation,
                world_size: r.world_size,
                rank: r.rank,
                local_rank: r.local_rank,
                local_world_size: r.local_world_size,
                group_rank: r.group_rank,
                master_addr: master_addr.clone(),
                master_port: port,
                batch_size,
            })
        })
        .collect()
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct JobStopped {
    pub job: String,
    /// `finished`, `cancelled`, `failed` or `expired` (see `JobOutcome`).
    pub outcome: Outcome,
}

impl Handler<JobStopped> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: JobStopped, _: &mut Self::Context) {
        self.stop_job(msg.job, msg.outcome);
    }
}

impl AllocatorActor {
    /// A job ended: its workers keep the job's name in the registry until the next epoch
    /// reassigns them.
    fn stop_job(&mut self, job: String, outcome: Outcome) {
        if let Some(entry) = self.jobs.remove(&job) {
            if entry.generation > 0 {
                if self.past_order.len() >= PAST_GENERATIONS_KEPT
                    && let Some(oldest) = self.past_order.pop_front()
                {
                    self.past_generations.remove(&oldest);
                }
                self.past_generations.insert(job.clone(), entry.generation);
                self.past_order.push_back(job.clone());
            }
            let now_s = self.now_s();
            self.ports.release(entry.key, now_s);
            if entry.command.is_some() {
                self.submitted -= 1;
            }
            if self.ended.len() == ENDED_KEPT {
                self.ended.pop_front();
            }
            self.ended.push_back(JobOutcome {
                job,
                outcome,
                restarts: entry.supervision.restarts,
                epoch: self.epoch,
                restart_s: entry.supervision.restart_s,
            });
        }
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerHello(pub WorkerSpec);

impl Handler<WorkerHello> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, WorkerHello(spec): WorkerHello, _: &mut Self::Context) {
        let now = self.now_s();
        if let Some(d) = &self.durable {
            d.save_worker(&spec);
        }
        self.prompted.remove(&spec.worker);
        self.registry.hello(spec, now);
    }
}

/// What durable state held at start-up: workers, each with the job it served. Sent after the
/// jobs' `JobStarted`, so the jobs are known.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Restore {
    pub workers: Vec<WorkerSpec>,
    pub assignments: HashMap<String, String>,
    /// Each job's attained service and floor ledger.
    pub plans: HashMap<String, (f64, FloorLedger)>,
}

impl Handler<Restore> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: Restore, _: &mut Self::Context) {
        let now = self.now_s();
        for (job, (attained, ledger)) in msg.plans {
            if let Some(entry) = self.jobs.get_mut(&job) {
                entry.attained_service = attained;
                // Its age counts on from where the saved fair clock left it.
                entry.since_s = now - ledger.pace().age_s();
                entry.ledger = ledger;
            }
        }
        for spec in msg.workers {
            let job = msg.assignments.get(&spec.worker).and_then(|id| {
                let entry = self.jobs.get_mut(id)?;
                entry.workers.push(spec.worker.clone());
                Some(JobRef { key: entry.key, id: id.clone() })
            });
            self.registry.restore(spec, job, now);
        }
        for entry in self.jobs.values_mut() {
            entry.workers.sort();
            entry.workers_since_s = now;
            if let Some(addr) = entry.addr.as_ref().filter(|_| !entry.workers.is_empty()) {
                addr.do_send(WorkersChanged(entry.workers.len() as u32));
            }
        }
    }
}

/// A worker's heartbeat, with what its agent says it runs.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerBeat {
    pub worker: String,
    pub running: Option<Running>,
}

impl AllocatorActor {
    /// A heartbeat says the agent runs another job than recorded, and its assignment is not
    /// on its way (told more than `RETELL_AFTER_S` ago): it is told again, and counted. An
    /// agent following a newer term (a new leader) is not this scheduler's to correct.
    fn reconcile(&mut self, worker: &str, running: &Running, now_s: f64) {
        let term = self.settings.term.unwrap_or(0);
        let Some(entry) = self.registry.get_mut(worker) else { return };
        let recorded = entry.job.as_ref().map(|j| j.id.as_str());
        // The same job, and (where both say) the same generation of it.
        let generation = entry.launch.as_ref().map(|l| l.generation);
        let same_generation = generation.is_none() || running.generation.is_none() || generation == running.generation;
        if (recorded == running.job.as_deref() && same_generation)
            || running.term > term
            || now_s - entry.told_s < RETELL_AFTER_S
        {
            return;
        }
        entry.told_s = now_s;
        self.metrics.assignment_mismatches.inc();
        debug!(worker, recorded = ?recorded, runs = ?running.job, "an agent runs another job than recorded: told again");
        let message = WorkerAssignment {
            role: entry.role,
            launch: entry.launch.clone(),
            command: entry.launch.as_ref().and(recorded).and_then(|j| self.jobs.get(j)).and_then(|e| e.command.clone()),
            stop_grace_ms: recorded.and_then(|j| grace_ms(self.settings.tenants.get().as_deref(), j)),
            ..assignment(self.settings.term, worker, self.epoch.max(1), recorded.map(str::to_string))
        };
        let subject = self.publisher.subjects().worker_assign(worker);
        self.publisher.send_all(self.publisher.message(subject, &message).into_iter().collect());
    }
}

impl AllocatorActor {
    /// A restored scheduler does not know its jobs' generations; their agents say which they
    /// run: a job's generation is never below what an agent of its workers runs.
    fn learn_generation(&mut self, worker: &str, running: &Running) {
        let (Some(job), Some(generation)) = (running.job.as_deref(), running.generation) else { return };
        let serves = self.registry.get(worker).and_then(|w| w.job.as_ref()).is_some_and(|j| j.id == job);
        if let Some(entry) = self.jobs.get_mut(job).filter(|_| serves) {
            entry.generation = entry.generation.max(generation);
        }
    }

    /// A heartbeat says the process of the generation the worker should run exited non-zero
    /// by itself: the generation failed.
    /// Rank 0's process exiting 0 by itself ends the job as finished (as under torchrun: a
    /// command need not say bye).
    fn exited(&mut self, worker: &str, running: &Running) {
        let Some(code) = running.exit else { return };
        let Some(entry) = self.registry.get(worker) else { return };
        let current = entry.launch.as_ref().map(|l| l.generation);
        let rank0 = entry.launch.as_ref().is_some_and(|l| l.rank == 0);
        let Some(job) = entry.job.as_ref().map(|j| j.id.clone()) else { return };
        // After a restart the scheduler has no ranks for its restored workers (agents keep
        // running what they ran): the generation their agents run is taken as the current one.
        if running.job.as_deref() != Some(job.as_str())
            || running.generation.is_none()
            || (current.is_some() && running.generation != current)
        {
            return;
        }
        match code {
            0 if rank0 => {
                info!(job, "the job's rank 0 exited 0: finished");
                self.end(&job, EndReason::Finished);
            }
            0 => {}
            126 => self.fail(&job, "an agent refused or could not start the command"),
            _ => self.fail(&job, "a process exited non-zero"),
        }
    }
}

impl Handler<WorkerBeat> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, WorkerBeat { worker, running }: WorkerBeat, _: &mut Self::Context) {
        let now = self.now_s();
        if self.registry.beat(&worker, now) {
            self.metrics.accepted("worker_beat").inc();
            if let Some(running) = &running {
                self.learn_generation(&worker, running);
                self.reconcile(&worker, running, now);
                self.exited(&worker, running);
                if let Some(w) = self.registry.get_mut(&worker)
                    && running.refused != w.refused
                {
                    // A smaller count is a new agent for the worker, counting from 0.
                    let before = if running.refused < w.refused { 0 } else { w.refused };
                    self.metrics.agent_refusals.inc_by(running.refused - before);
                    w.refused = running.refused;
                }
            }
        } else {
            self.metrics.rejected(RejectCause::UnknownWorker).inc();
            // Ask it to say hello again (as after a restart without state), at most once per
            // PROMPT_EVERY_S per worker and for at most MAX_PROMPTED workers at a time, so forged
            // heartbeats cannot turn the scheduler into an amplifier.
            if self.prompted.len() < MAX_PROMPTED && !self.prompted.contains_key(&worker) {
                self.prompted.insert(worker.clone(), now);
                let message =
                    WorkerAssignment { hello_again: true, ..assignment(self.settings.term, &worker, self.epoch, None) };
                let subject = self.publisher.subjects().worker_assign(&worker);
                self.publisher.send_all(self.publisher.message(subject, &message).into_iter().collect());
            }
        }
    }
}

/// What an epoch's moves changed (`AllocatorActor::move_workers`).
struct Moved {
    /// Each job's membership changed (a worker joined or left, or was lost).
    job_changed: Vec<bool>,
    /// Workers that moved.
    workers: usize,
    /// Workers taken from one tenant's job for another's: the process they ran gets the
    /// taker's grace at most (`WorkerAssignment::reclaim_grace_ms`).
    taken: HashSet<String>,
}

/// A job's stop grace on the wire: its tenant's `grace_s`, with `[tenants]`.
fn grace_ms(tenants: Option<&schedule::tenants::TenantSet>, job: &str) -> Option<u64> {
    tenants?.config_of(job).map(|c| (c.grace_s * 1e3).round() as u64)
}

/// The one way an assignment is made: `worker` serves `job` (or nothing) from `epoch`, under
/// this scheduler's `term`, as a worker with no launch, no command and no prompt to say hello;
/// callers set what differs with struct update.
fn assignment(term: Option<u64>, worker: &str, epoch: u64, job: Option<String>) -> WorkerAssignment {
    WorkerAssignment {
        worker: worker.to_string(),
        epoch,
        job,
        role: Default::default(),
        hello_again: false,
        term,
        launch: None,
        command: None,
        stop_grace_ms: None,
        reclaim_grace_ms: None,
    }
}

/// The service stops: no more epochs (a deposed leader must not publish).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopAllocator;

impl Handler<StopAllocator> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, _: StopAllocator, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// The status: the jobs whose id starts with `jobs` (all: `None`) and their workers, at most
/// `limit` + 1 of each.
#[derive(Message)]
#[rtype(result = "StatusSnapshot")]
pub struct GetStatus {
    pub jobs: Option<String>,
    pub limit: Option<usize>,
    /// A job asks for itself: `jobs` is its exact id, and the answer holds that job, its
    /// workers and its outcome only (no counters, no totals, no other job).
    pub own: bool,
}

impl Handler<GetStatus> for AllocatorActor {
    type Result = MessageResult<GetStatus>;
    fn handle(&mut self, filter: GetStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot(&filter))
    }
}

/// The recent epoch summaries, oldest first.
#[derive(Message)]
#[rtype(result = "Vec<EpochSummary>")]
pub struct GetEpochs;

impl Handler<GetEpochs> for AllocatorActor {
    type Result = MessageResult<GetEpochs>;
    fn handle(&mut self, _: GetEpochs, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.history.iter().cloned().collect())
    }
}

/// Sums the points every job actor has observed (for benchmarks and tests): answers once all
/// job actors have answered.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct CountPoints;

impl Handler<CountPoints> for AllocatorActor {
    type Result = ResponseFuture<u64>;
    fn handle(&mut self, _: CountPoints, _: &mut Self::Context) -> Self::Result {
        // A job whose actor runs on another replica counts what its latest bid says.
        let remote: u64 =
            self.jobs.values().filter(|e| e.addr.is_none()).map(|e| e.bid.as_ref().map_or(0, |b| b.points)).sum();
        let requests: Vec<_> =
            self.jobs.values().filter_map(|e| e.addr.as_ref()).map(|a| a.send(super::job::CountPoints)).collect();
        Box::pin(async move {
            remote + futures_util::future::join_all(requests).await.into_iter().filter_map(Result::ok).sum::<u64>()
        })
    }
}
