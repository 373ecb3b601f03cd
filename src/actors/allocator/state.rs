//! The allocator's state and what it answers with, apart from the code that changes them (the
//! core, `core.rs`, and its concerns, which all import this and none of each other): the
//! settings, the `Allocator` struct and its jobs, and the `Effect`s the shell performs.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::super::bid::Bid;
use super::super::registry::WorkerRegistry;
use super::super::types::{self, JobSpeeds};
use super::tables::{KeptTables, Slot};
use crate::cluster::ranks::PortBook;
use crate::policy::PolicyKind;
use crate::policy::table::Tabled;
use crate::protocol::{EndReason, EpochSummary, JobAllocation, JobCommand, JobOutcome, WorkerAssignment, WorkerSpec};
use crate::quality::GainCurve;
use crate::schedule::{self, FloorLedger, JobModel, PlaceSettings, PlanSettings, Saves};

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
    /// A submitted job whose generation has sent no report for this long is restarted (as if
    /// its process had failed). `None`: never.
    pub stall_timeout: Option<Duration>,
    /// A submitted job keeps its workers for at least this long after each change (see
    /// `min_generation_ms`).
    pub min_generation: Duration,
    /// A job saving at most this far apart changes only right after a save (`save_wait_max_ms`,
    /// `schedule::Saves`; zero: never waits).
    pub save_wait_max: Duration,
    /// First rendezvous port, ports per address, and how long a port given back cools.
    pub rendezvous: (u16, u16, Duration),
    /// ... and at least this many times its measured restart cost.
    pub restart_amortisation: f64,
    /// The horizon a job's gains are predicted over (`horizon_s`): a submitted job's restart
    /// costs its bid that much of it (`schedule::restart_priced`).
    pub bid_horizon_s: f64,
    /// The weight of the completion term in the jobs' bids (`schedule::finish`; 0: off).
    pub completion_weight: f64,
    /// `[tenants]`: each tenant's jobs are planned inside its quota (none: one pool). Shared
    /// state: a reload (SIGHUP, in the service) replaces them, read here between epochs.
    pub tenants: super::super::tenants::Tenants,
}

/// What the shell does for the core, in the order given.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Publish a worker's assignment.
    Assign(WorkerAssignment),
    /// Publish a job's allocation (its workers, batch size, type).
    Allocate(JobAllocation),
    /// Tell a job's actor, if it runs here, its new worker count (after the epoch's messages
    /// are out: each rebids, and that work must not delay them).
    TellJob {
        job: String,
        workers: u32,
    },
    /// End a submitted job as a bye would (its restarts are used up, or rank 0 exited 0).
    EndJob {
        job: String,
        reason: EndReason,
    },
    SaveWorker(WorkerSpec),
    ForgetWorker(String),
    SaveAssignment {
        worker: String,
        job: Option<String>,
    },
    SavePlan {
        job: String,
        attained_service: f64,
        ledger: FloorLedger,
    },
    Count(Count),
}

/// The counters the core moves (the shell's metrics registry holds them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Count {
    BeatAccepted,
    BeatFromUnknownWorker,
    /// An agent ran another job than recorded and was told again.
    Mismatch,
    AgentRefusals(u64),
    JobFailed,
    JobRestarted,
    /// Seconds from a new generation to its first new report.
    RestartSeconds(f64),
    GenerationsWithoutRanks(u64),
    RendezvousPortsBusy(usize),
}

/// What is kept of a job's completion term between its bids, as its bid found the job, in its
/// slot of the allocator's [`KeptTables`]. It says what it holds: a job's command can come or
/// go between two bids (a hello that changes it), and then the epoch computes what the kept
/// values do not give.
#[derive(Clone, Copy, Debug, Default)]
pub(super) enum KeptTerm {
    #[default]
    None,
    /// A submitted job, whose gains are priced each epoch: the term's values at 0, 1, …
    /// workers as far as its priced table reaches (`schedule::Finish::terms`).
    Terms(Slot),
    /// Any other: its gain table with the term added (`schedule::Finish::summed_past`).
    Summed(Slot),
}

impl KeptTerm {
    pub(super) fn slot(&self) -> Option<Slot> {
        match *self {
            KeptTerm::None => None,
            KeptTerm::Terms(s) | KeptTerm::Summed(s) => Some(s),
        }
    }

    pub(super) fn slot_mut(&mut self) -> Option<&mut Slot> {
        match self {
            KeptTerm::None => None,
            KeptTerm::Terms(s) | KeptTerm::Summed(s) => Some(s),
        }
    }
}

/// What each epoch reads of a job's latest bid ([`JobEntry::head`]).
#[derive(Clone, Debug)]
pub(super) struct BidHead {
    pub(super) min_workers: u32,
    pub(super) max_workers: u32,
    pub(super) weight: f64,
    pub(super) last_iter: Option<u64>,
    pub(super) last_loss: Option<f64>,
    pub(super) save_on_request: bool,
    pub(super) checkpoint_age_s: Option<f64>,
    pub(super) model: Arc<JobModel>,
    /// Its model is special ([`JobModel::is_special`]), read once per bid, not per epoch.
    pub(super) special: bool,
    pub(super) sizes: Option<Arc<[u32]>>,
}

impl BidHead {
    pub(super) fn of(bid: &Bid) -> Self {
        BidHead {
            min_workers: bid.min_workers,
            max_workers: bid.max_workers,
            weight: bid.weight,
            last_iter: bid.last_iter,
            last_loss: bid.last_loss,
            save_on_request: bid.save_on_request,
            checkpoint_age_s: bid.checkpoint_age_s,
            model: Arc::clone(&bid.model),
            special: bid.model.is_special(),
            sizes: bid.sizes.clone(),
        }
    }
}

pub(super) struct JobEntry {
    /// Unique per job for the life of the process (a job that leaves and returns gets a new
    /// one): workers name their job by it in the registry.
    pub(super) key: u64,
    /// Its actor runs in this process; else on the replica that owns its partition
    /// (`[cluster] shared`), which learns its worker count from its allocation.
    pub(super) local: bool,
    pub(super) workers: Vec<String>,
    pub(super) attained_service: f64,
    pub(super) ledger: FloorLedger,
    /// Its latest bid, without its gain (moved to `gain`): read rarely, as `head` and `gain`
    /// hold what each epoch reads of it.
    pub(super) bid: Option<Box<Bid>>,
    /// What each epoch reads of its latest bid, inline (`None` before its first bid): loaded
    /// from the boxed bid, these were a cache miss per job per epoch (perf, 4,000 jobs: the
    /// bid's first load alone was 8% of an epoch; at 100,000 jobs its last loss and
    /// `save_on_request` alone were about 10 ms).
    pub(super) head: Option<BidHead>,
    /// Its latest bid's gain, moved out of the bid, so that the epoch borrows it without
    /// loading the bid.
    pub(super) gain: Option<Box<Tabled<GainCurve>>>,
    /// What the last epoch predicted for this job, checked against its reports at the next.
    pub(super) pending: Option<PendingGain>,
    /// The worker count `pending` was predicted at, with the current bid (`None`: a new bid
    /// came since): the same bid at the same count predicts the same, so it is not recomputed.
    pub(super) pending_for: Option<u32>,
    /// Attained service, entitled and granted worker-epochs when the plan was last saved.
    pub(super) saved_plan: Option<(f64, f64, f64)>,
    /// The batch size last published (jobs that declare `batch_sizes`).
    pub(super) batch: Option<u32>,
    /// It has sent nothing for `stale_job` (the ingest loop says so).
    pub(super) quiet: bool,
    /// When its workers last changed.
    pub(super) workers_since_s: f64,
    /// Its saves, from the checkpoint ages its bids carry.
    pub(super) saves: Saves,
    /// When it was asked to save before a change of its workers (`JobSpec::save_on_request`),
    /// while that change waits for the save.
    pub(super) asked_s: Option<f64>,
    /// Its processes' generation: one more at every change of its membership.
    pub(super) generation: u64,
    /// A worker of it went silent and was removed: its membership changed at the next epoch.
    pub(super) lost_workers: bool,
    /// What the agents run for it (a submitted job), and how its generations fare.
    /// Boxed, as `speeds`: every epoch streams every entry, and these two are read rarely.
    pub(super) command: Option<Box<JobCommand>>,
    pub(super) supervision: Supervision,
    /// When it registered (after a restart, as restored from its fair clock): its age for the
    /// finish-time bound.
    pub(super) since_s: f64,
    /// Its predicted iterations per second at 0, 1, … workers, from its latest bid, when the
    /// finish-time bound is on; else empty (no `Pace`). Its first rates, read every epoch, are
    /// kept inline rather than read from the table.
    pub(super) pace_rates: schedule::slowdown::RateTable,
    /// Its iterations left as of its latest bid (declared, or predicted from its curve: a
    /// search on the curve, done once per bid, not per epoch); read by the bound and the
    /// completion term.
    pub(super) remaining_iters: f64,
    /// Its completion term as of its latest bid (none under fair sharing, with weight 0 or
    /// without a gain), and what is kept of it, computed once per bid, not per epoch.
    pub(super) finish: Option<Box<crate::schedule::Finish>>,
    pub(super) kept_term: KeptTerm,
    /// Its speed on each worker type, measured (issue #31), and the epoch being measured.
    pub(super) speeds: Box<JobSpeeds>,
}

impl JobEntry {
    pub(super) fn new(key: u64, local: bool, now_s: f64) -> Self {
        JobEntry {
            key,
            local,
            workers: Vec::new(),
            attained_service: 0.0,
            ledger: FloorLedger::default(),
            bid: None,
            head: None,
            gain: None,
            pending: None,
            pending_for: None,
            saved_plan: None,
            batch: None,
            quiet: false,
            workers_since_s: now_s,
            saves: Saves::default(),
            asked_s: None,
            generation: 0,
            lost_workers: false,
            command: None,
            supervision: Supervision { progress_s: now_s, ..Supervision::default() },
            since_s: now_s,
            pace_rates: schedule::slowdown::RateTable::default(),
            remaining_iters: 0.0,
            finish: None,
            kept_term: KeptTerm::None,
            speeds: Box::default(),
        }
    }
}

/// The allocator's state: every job's latest bid, the worker registry, the epoch count and
/// what `status` shows. Owned by the actor (`super::AllocatorActor`), which feeds it.
pub struct Allocator {
    pub(super) settings: AllocatorSettings,
    /// Whether the shell keeps state (JetStream): without, no save is asked for.
    pub(super) persist: bool,
    /// In id order: the `BTreeMap`'s order is the dense job index of the plan.
    pub(super) jobs: BTreeMap<String, JobEntry>,
    pub(super) registry: WorkerRegistry,
    pub(super) epoch: u64,
    pub(super) history: VecDeque<EpochSummary>,
    /// Whether NATS was unreachable at the last epoch: silence then is not a worker's fault.
    pub(super) was_disconnected: bool,
    /// When each unknown worker was last asked to say hello again (bounded; see `WorkerBeat`).
    pub(super) prompted: HashMap<String, f64>,
    /// The last job key handed out.
    pub(super) next_key: u64,
    /// The model of a job that has not bid yet.
    pub(super) default_model: Arc<JobModel>,
    /// The next epoch publishes every worker's assignment, changed or not: the first epoch of
    /// a term (a restart or a fail-over), so that assignments lost in a crash are made good.
    pub(super) tell_all: bool,
    /// The rendezvous port each job's rank 0 listens on, per machine.
    pub(super) ports: PortBook,
    /// Jobs that ended lately (for `status`).
    pub(super) ended: VecDeque<JobOutcome>,
    /// The last generation of jobs that ended (at most `PAST_GENERATIONS_KEPT`, oldest out).
    pub(super) past_generations: HashMap<String, u64>,
    pub(super) past_order: VecDeque<String>,
    /// Generations started without ranks (no free rendezvous port), since this start.
    pub(super) without_ranks: u64,
    /// Jobs with a command (supervised): without any, an epoch skips their checks.
    pub(super) submitted: usize,
    /// Jobs registered or ended so far: a change of the jobs' id order.
    pub(super) jobs_changed: u64,
    /// The workers as the last epoch left them: the next epoch's while no job and no worker
    /// came or went, instead of a pass over the workers (`Allocator::current_jobs`).
    pub(super) last_layout: Option<Layout>,
    /// The last epoch's planned jobs' allocation, emptied (`planned::recycle`).
    pub(super) spare_jobs: Vec<super::planned::PlannedJob<'static>>,
    /// Every job's kept completion term, in job order (`JobEntry::kept_term` names its slot).
    pub(super) kept_tables: KeptTables,
}

/// The workers as an epoch left them (their roles known), with the jobs' and the registry's
/// change counts then (`Allocator::jobs_changed`, `WorkerRegistry::changes`): while neither has
/// changed, it is the registry's.
#[derive(Debug)]
pub(super) struct Layout {
    pub(super) jobs_changed: u64,
    pub(super) workers_changed: u64,
    pub(super) workers: Current,
}

/// The workers, in the registry's order, as an epoch starts (`Allocator::layout_now`) or left
/// them.
#[derive(Debug)]
pub(super) struct Current {
    /// Each worker's job, as its index in the jobs' id order.
    pub(super) jobs: Vec<Option<usize>>,
    /// Each worker serves its job as a parameter server; `None`: not known (read if needed).
    pub(super) serves: Option<Vec<bool>>,
    /// Workers per job (`per_job` of `jobs`).
    pub(super) counts: Vec<u32>,
}

/// Restarted generations a job's status lists.
pub(super) const RESTARTS_KEPT: usize = 16;

/// Where a submitted job's current generation stands.
#[derive(Clone, Debug, Default)]
pub(super) struct Supervision {
    /// Generations restarted after a failure or a stall.
    pub(super) restarts: u32,
    /// The newest [`RESTARTS_KEPT`] of them (for people to see where).
    pub(super) restarted: std::collections::VecDeque<u64>,
    /// When the current generation started.
    pub(super) generation_started_s: f64,
    /// When its report count last grew.
    pub(super) progress_s: f64,
    /// A generation that failed (counted once), and when its restart is due.
    pub(super) failed_generation: Option<u64>,
    pub(super) restart_at_s: Option<f64>,
    /// Its restarts are used up: it is being ended as failed.
    pub(super) ending: bool,
    /// A new generation (not the first) has not reported yet: its restart is being timed.
    pub(super) timing_restart: bool,
    /// What a restart costs it: seconds from a new generation to its first new report
    /// (a moving average of the last few), once measured.
    pub(super) restart_s: Option<f64>,
}

impl Supervision {
    /// How long the current generation keeps its workers: `min_generation_s`, or `factor`
    /// times the measured restart cost if that is longer.
    pub(super) fn tenure_s(&self, min_generation_s: f64, factor: f64) -> f64 {
        min_generation_s.max(self.restart_s.map_or(0.0, |r| r * factor))
    }
}

/// A job's loss when an epoch started, its bid's normaliser, and the drop the bid predicted
/// over the epoch for the workers it was given.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingGain {
    pub(super) loss_at_start: f64,
    pub(super) scale: f64,
    pub(super) predicted: f64,
}

/// What the asks decided this epoch, per job index.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// Its workers' changes wait: no worker moves into or out of it.
    pub(super) wait: Vec<bool>,
    /// Its change goes without the save asked for: its processes get at most this grace (ms).
    pub(super) cut_ms: Vec<Option<u64>>,
}

impl Asked {
    /// Whether a move of a worker from job `before` to job `after` waits.
    pub(super) fn waits(&self, before: Option<usize>, after: Option<usize>) -> bool {
        [before, after].into_iter().flatten().any(|j| self.wait.get(j).copied().unwrap_or(false))
    }

    /// The grace left to the processes of job `before` on a worker whose job changes.
    pub(super) fn cut(&self, before: Option<usize>) -> Option<u64> {
        before.and_then(|j| self.cut_ms.get(j).copied().flatten())
    }
}

/// What a job's allocation is made for: job `id` at `epoch` under `term`, on a `typed` cluster
/// or not.
pub(super) struct Allocated<'a> {
    pub(super) typed: bool,
    pub(super) id: &'a str,
    pub(super) epoch: u64,
    pub(super) term: Option<u64>,
}

impl Allocated<'_> {
    /// The allocation of `workers` (naming their type on a typed cluster) and `batch_size`.
    pub(super) fn of(&self, registry: &WorkerRegistry, workers: Vec<String>, batch_size: Option<u32>) -> JobAllocation {
        let accelerator = self.typed.then(|| types::world_type(registry, &workers)).flatten().map(str::to_string);
        let (job, epoch, term) = (self.id.to_string(), self.epoch, self.term);
        JobAllocation { job, epoch, workers, batch_size, term, accelerator, save: false }
    }
}

/// Workers per job in a layout (each worker's job, an index below `jobs`).
pub(super) fn per_job(next: &[Option<usize>], jobs: usize) -> Vec<u32> {
    let mut counts = vec![0u32; jobs];
    for &j in next.iter().flatten() {
        counts[j] += 1;
    }
    counts
}
