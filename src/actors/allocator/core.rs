//! The allocator without I/O (issue #42): a plain struct that takes inputs with the time passed
//! in (`Allocator::handle`) and runs epochs (`Allocator::epoch`), and answers with the
//! `Effect`s (`state.rs`) the shell performs: messages to publish, state to save, jobs to tell, counters.
//! It never reads a clock, holds an actor's address or touches NATS, so every timing rule is a
//! unit test on a fake `now_s` (`tests.rs`). What it decides is split by concern: `supervision`
//! (silent workers, outages, backoff, stalls), `planning` (the jobs as the planner sees them),
//! `assignment` (moves, generations, launches, telling again) and `status`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::super::bid::{Bid, job_model};
use super::super::registry::{JobRef, WorkerRegistry};
use super::super::types;
use super::assignment::Moved;
use super::planning::{TenancyInput, TypedCluster, current_jobs};
use super::state::{Allocator, AllocatorSettings, Count, Current, Effect, JobEntry, Layout, per_job};
use super::tables::KeptTables;
use crate::cluster::ranks::PortBook;
use crate::protocol::{EpochGains, EpochSummary, JobCommand, JobOutcome, Outcome, Role, Running, WorkerSpec};
use crate::schedule::tenants::TenantSet;
use crate::schedule::{EpochPlan, FloorLedger};

/// What happens to the allocator, with the time it happened at (`Allocator::handle`). Each is
/// moved once into `handle` and never kept, so a bid's size in the enum costs nothing.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// A job registered: its actor runs in this process (`local`), or on the replica that owns
    /// its partition; a submitted job's command (sent again when a hello changes it). The shell
    /// makes it from its `JobStarted` message, which carries the actor's address.
    JobStarted {
        job: String,
        local: bool,
        command: Option<JobCommand>,
    },
    /// A job's new bid (a job unknown here is ignored: a bid still in flight after a bye).
    Bid {
        job: String,
        bid: Bid,
    },
    /// A job ended; its workers keep its name until the next epoch reassigns them.
    JobStopped {
        job: String,
        outcome: Outcome,
    },
    /// A job went quiet (nothing heard for `stale_job`), or spoke again.
    JobQuiet {
        job: String,
        quiet: bool,
    },
    WorkerHello(WorkerSpec),
    /// A worker's heartbeat, with what its agent says it runs.
    WorkerBeat {
        worker: String,
        running: Option<Running>,
    },
    Restore(Restore),
    Remote(RemoteJobs),
}

/// What durable state held at start-up: workers, each with the job it served. Handled after the
/// jobs' `JobStarted`, so the jobs are known.
#[derive(Debug, Default)]
pub struct Restore {
    pub workers: Vec<WorkerSpec>,
    pub assignments: HashMap<String, String>,
    /// Each job's attained service and floor ledger.
    pub plans: HashMap<String, (f64, FloorLedger)>,
}

/// What the owners of partitions sent, merged by the leader (`[cluster] shared`): jobs that ended
/// there, new bids (a job not known yet is registered; one that also ended started again), and
/// jobs that went quiet or spoke again.
#[derive(Debug, Default)]
pub struct RemoteJobs {
    pub bids: Vec<(String, Bid)>,
    pub gone: Vec<(String, Outcome)>,
    pub quiet: Vec<(String, bool)>,
}

/// An epoch's effects and its summary: the core's phases timed (`collect_ms`, `policy_ms`); the
/// shell adds the time it took to publish, the total and the CPU time.
#[derive(Debug)]
pub struct EpochOutput {
    pub effects: Vec<Effect>,
    pub summary: EpochSummary,
}

/// Ended jobs kept for `status` (and `slaq submit --wait`).
const ENDED_KEPT: usize = 256;
/// Ended jobs whose last generation is remembered, so that a job of the same id started again
/// counts on from it (an agent still running the old one ignores a generation lower than its
/// own as stale).
const PAST_GENERATIONS_KEPT: usize = 100_000;
/// Epoch summaries kept for `status` and benchmarks.
const EPOCH_HISTORY: usize = 1024;

impl Allocator {
    /// An allocator with no job and no worker, whose first epoch tells every worker.
    pub fn new(settings: AllocatorSettings, persist: bool) -> Self {
        let (base, span, cooldown) = settings.rendezvous;
        let registry = WorkerRegistry::new(settings.worker_timeout.as_secs_f64());
        Allocator {
            ports: PortBook::new(base, span, cooldown.as_secs_f64()),
            settings,
            persist,
            jobs: BTreeMap::new(),
            registry,
            epoch: 0,
            history: VecDeque::new(),
            was_disconnected: false,
            prompted: HashMap::new(),
            next_key: 0,
            default_model: Arc::new(job_model(&crate::protocol::JobSpec::new("-"), &[], None)),
            tell_all: true,
            ended: VecDeque::new(),
            past_generations: HashMap::new(),
            past_order: VecDeque::new(),
            without_ranks: 0,
            submitted: 0,
            jobs_changed: 0,
            last_layout: None,
            spare_jobs: Vec::new(),
            kept_tables: KeptTables::default(),
        }
    }

    pub fn settings(&self) -> &AllocatorSettings {
        &self.settings
    }

    /// Takes one input at `now_s` (seconds on the shell's monotonic clock) and returns what to do.
    pub fn handle(&mut self, now_s: f64, input: Input) -> Vec<Effect> {
        let mut fx = Vec::new();
        match input {
            Input::JobStarted { job, local, command } => {
                let entry = self.register(job, local, now_s);
                entry.local = local;
                if command.is_some() {
                    let new = entry.command.is_none();
                    entry.command = command.map(Box::new);
                    if new {
                        self.submitted += 1;
                    }
                }
            }
            Input::Bid { job, bid } => self.take_bid(&job, bid, now_s, &mut fx),
            Input::JobStopped { job, outcome } => self.stop_job(job, outcome, now_s),
            Input::JobQuiet { job, quiet } => self.set_quiet(&job, quiet),
            Input::WorkerHello(spec) => {
                if self.persist {
                    fx.push(Effect::SaveWorker(spec.clone()));
                }
                self.prompted.remove(&spec.worker);
                self.registry.hello(spec, now_s);
            }
            Input::WorkerBeat { worker, running } => self.beat(&worker, running, now_s, &mut fx),
            Input::Restore(restore) => self.restore(restore, now_s, &mut fx),
            Input::Remote(remote) => {
                // Ends first: a job in both ended, then started again.
                for (job, outcome) in remote.gone {
                    self.stop_job(job, outcome, now_s);
                }
                for (job, bid) in remote.bids {
                    self.register(job.clone(), false, now_s);
                    self.take_bid(&job, bid, now_s, &mut fx);
                }
                for (job, quiet) in remote.quiet {
                    self.set_quiet(&job, quiet);
                }
            }
        }
        fx
    }

    /// Runs one epoch at `now_s`, with NATS reachable or not (`connected`): supervision, then
    /// the plan (`schedule::plan_epoch`), then only what changed. `stopwatch_ms` reads a
    /// monotonic clock in ms for the summary's phase timings (tests pass a constant).
    pub fn epoch(&mut self, now_s: f64, connected: bool, stopwatch_ms: &dyn Fn() -> f64) -> EpochOutput {
        let started = stopwatch_ms();
        let mut fx = Vec::new();
        if self.kept_tables.due(self.jobs.len()) {
            self.kept_tables.compact(self.jobs.values_mut().filter_map(|e| e.kept_term.slot_mut()));
        }
        self.supervise(now_s, connected, &mut fx);
        let collected = stopwatch_ms();
        // The worker types in use (`None`: all of the default type).
        let names = types::names(&self.registry);
        let typed = names.as_deref().and_then(|names| self.typed_cluster(names, now_s));
        // Teams: each tenant's share of the cluster as it is now, and each job's tenant from its
        // id (its subject), once for the plan and the summary.
        let tenants = self.settings.tenants.get();
        let tenant_of = tenants.as_deref().map(|t| t.tenant_of(self.jobs.keys().map(String::as_str)));
        let shares = tenants.as_deref().map(|t| t.shares(self.registry.len() as u32).shares);
        let class_of = tenants.as_deref().map(|t| self.classes(t)).unwrap_or_default();
        let owed = match (&shares, &tenant_of) {
            (Some(shares), Some(tenant_of)) => self.guarantee_owed(shares, tenant_of),
            _ => false,
        };
        let last_layout = self.last_layout.take();
        // One pass over the jobs: what the rest of the epoch reads of each, and each as the
        // planner sees it (borrowing from its entry until the plan is made).
        let cx = super::planning::PassInput {
            settings: &self.settings,
            kept_tables: &self.kept_tables,
            default_model: (&self.default_model, self.default_model.is_special()),
            num_workers: self.registry.len() as u32,
            owed,
            tenants: tenants.as_deref().zip(tenant_of.as_deref()),
        };
        let spare = std::mem::take(&mut self.spare_jobs);
        let mut pass = super::planning::epoch_pass(&mut self.jobs, &cx, spare, now_s);
        let (mut ledgers, lost_workers) =
            (std::mem::take(&mut pass.state.ledgers), std::mem::take(&mut pass.state.lost_workers));
        let now = layout_now(last_layout, (self.jobs_changed, &self.registry), &pass.state.keys);
        let tenancy = tenants.as_deref().zip(shares).zip(tenant_of).map(|((_, shares), tenant_of)| {
            let held = std::mem::take(&mut pass.held_by_tenant);
            super::planning::TenancyInput { shares, tenant_of, held, class_of }
        });
        let plan = super::planning::plan(
            &self.settings,
            &self.registry,
            self.epoch,
            &pass,
            (&now.jobs, &now.counts),
            &mut ledgers,
            typed.as_ref(),
            tenancy.as_ref(),
        );
        let state = pass.state;
        self.spare_jobs = super::planned::recycle(pass.jobs);
        let planned = stopwatch_ms();
        let epoch = self.epoch + 1;
        let asked = self.ask_saves(epoch, (&now.jobs, &plan), &state, now_s, owed, names.is_some(), &mut fx);
        let moved = self.move_workers(epoch, (now, &state.keys), (&plan, &asked), lost_workers, now_s, &mut fx);
        let (resized, gains) = self.new_generations(epoch, &plan, &moved, ledgers, now_s, names.is_some(), &mut fx);
        // Jobs whose worker count changed, told after the assignments are out.
        fx.extend(resized.into_iter().map(|(job, workers)| Effect::TellJob { job, workers }));
        let timings = (collected - started, planned - collected);
        let teams = tenants.as_deref().zip(tenancy.as_ref());
        let summary = self.summary(epoch, (&plan, &moved), typed.as_ref(), teams, (state.without_bid, timings, gains));
        self.epoch = epoch;
        self.last_layout = Some(Layout {
            jobs_changed: self.jobs_changed,
            workers_changed: self.registry.changes(),
            workers: Current { jobs: moved.next, serves: Some(moved.serves), counts: moved.counts },
        });
        EpochOutput { effects: fx, summary }
    }

    /// An epoch's summary: what it planned and moved, the accelerators and each team's use as
    /// the workers now are, the jobs without a bid, the core's phase timings (collecting,
    /// planning) and the gains checked.
    fn summary(
        &self,
        epoch: u64,
        (plan, moved): (&EpochPlan, &Moved),
        typed: Option<&TypedCluster>,
        teams: Option<(&TenantSet, &TenancyInput)>,
        (jobs_without_bid, (collect_ms, policy_ms), gains): (usize, (f64, f64), Option<EpochGains>),
    ) -> EpochSummary {
        let accelerators =
            types::accelerator_use_after(&self.registry, (&moved.next, &moved.counts), typed.map(|t| &t.type_of[..]));
        debug_assert_eq!(accelerators, types::accelerator_use(&self.registry), "the counts kept are the registry's");
        EpochSummary {
            epoch,
            num_jobs: self.jobs.len(),
            num_workers: self.registry.len(),
            workers_assigned: plan.counts.iter().map(|&c| u64::from(c)).sum(),
            workers_moved: moved.workers,
            jobs_without_bid,
            collect_ms,
            policy_ms,
            publish_ms: 0.0,
            total_ms: 0.0,
            cpu_ms: None,
            gains,
            slo_jobs: plan.slo_jobs,
            slo_missed: plan.slo_missed,
            accelerators,
            tenants: match (teams, &plan.quotas) {
                (Some((t, input)), Some(q)) => t.usage(q, &input.tenant_of, &input.class_of, &moved.counts),
                _ => Default::default(),
            },
        }
    }

    /// Keeps an epoch's summary, with the shell's timings, for `status` and benchmarks.
    pub fn record(&mut self, summary: EpochSummary) {
        if self.history.len() == EPOCH_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(summary);
    }

    /// The recent epoch summaries, oldest first.
    pub fn history(&self) -> impl ExactSizeIterator<Item = &EpochSummary> {
        self.history.iter()
    }

    /// Points observed by the jobs whose actor runs on another replica (what their bids say).
    pub fn remote_points(&self) -> u64 {
        self.jobs.values().filter(|e| !e.local).map(|e| e.bid.as_ref().map_or(0, |b| b.points)).sum()
    }

    fn set_quiet(&mut self, job: &str, quiet: bool) {
        if let Some(entry) = self.jobs.get_mut(job) {
            entry.quiet = quiet;
        }
    }

    /// Registers a job, or returns it as it is.
    fn register(&mut self, job: String, local: bool, now_s: f64) -> &mut JobEntry {
        match self.jobs.entry(job) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                self.next_key += 1;
                self.jobs_changed += 1;
                let mut entry = JobEntry::new(self.next_key, local, now_s);
                // Generations are monotonic per job id: a job that ended and started again
                // counts on from its predecessor.
                entry.generation = self.past_generations.remove(v.key()).unwrap_or(0);
                v.insert(entry)
            }
        }
    }

    /// A job ended: its workers keep the job's name in the registry until the next epoch
    /// reassigns them.
    fn stop_job(&mut self, job: String, outcome: Outcome, now_s: f64) {
        let Some(entry) = self.jobs.remove(&job) else { return };
        self.jobs_changed += 1;
        if let Some(slot) = entry.kept_term.slot() {
            self.kept_tables.free(slot);
        }
        if entry.generation > 0 {
            if self.past_order.len() >= PAST_GENERATIONS_KEPT
                && let Some(oldest) = self.past_order.pop_front()
            {
                self.past_generations.remove(&oldest);
            }
            self.past_generations.insert(job.clone(), entry.generation);
            self.past_order.push_back(job.clone());
        }
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

    /// What durable state held: each job's service and fair clock, the workers and their jobs.
    fn restore(&mut self, msg: Restore, now_s: f64, fx: &mut Vec<Effect>) {
        for (job, (attained, ledger)) in msg.plans {
            if let Some(entry) = self.jobs.get_mut(&job) {
                entry.attained_service = attained;
                // Its age counts on from where the saved fair clock left it.
                entry.since_s = now_s - ledger.pace().age_s();
                entry.ledger = ledger;
            }
        }
        for spec in msg.workers {
            let job = msg.assignments.get(&spec.worker).and_then(|id| {
                let entry = self.jobs.get_mut(id)?;
                entry.workers.push(spec.worker.clone());
                Some(JobRef { key: entry.key, id: id.clone() })
            });
            self.registry.restore(spec, job, now_s);
        }
        for (id, entry) in self.jobs.iter_mut() {
            entry.workers.sort();
            entry.workers_since_s = now_s;
            if entry.local && !entry.workers.is_empty() {
                fx.push(Effect::TellJob { job: id.clone(), workers: entry.workers.len() as u32 });
            }
        }
    }

    /// A heartbeat: from a known worker, what its agent runs is checked against the record (a
    /// restored scheduler learns generations, a mismatch is told again, an exit is judged,
    /// refusals are counted); from an unknown one, a prompt to say hello again.
    fn beat(&mut self, worker: &str, running: Option<Running>, now_s: f64, fx: &mut Vec<Effect>) {
        if !self.registry.beat(worker, now_s) {
            fx.push(Effect::Count(Count::BeatFromUnknownWorker));
            self.prompt(worker, now_s, fx);
            return;
        }
        fx.push(Effect::Count(Count::BeatAccepted));
        let Some(running) = running else { return };
        self.learn_generation(worker, &running);
        self.reconcile(worker, &running, now_s, fx);
        self.exited(worker, &running, now_s, fx);
        if let Some(w) = self.registry.get_mut(worker)
            && running.refused != w.refused
        {
            // A smaller count is a new agent for the worker, counting from 0.
            let before = if running.refused < w.refused { 0 } else { w.refused };
            fx.push(Effect::Count(Count::AgentRefusals(running.refused - before)));
            w.refused = running.refused;
        }
    }

    /// A restored scheduler does not know its jobs' generations; their agents say which they
    /// run: a job's generation is never below what an agent of its workers runs.
    fn learn_generation(&mut self, worker: &str, running: &Running) {
        let (Some(job), Some(generation)) = (running.job.as_deref(), running.generation) else { return };
        let serves = self.registry.get(worker).and_then(|w| w.job.as_ref()).is_some_and(|j| j.id == job);
        if let Some(entry) = self.jobs.get_mut(job).filter(|_| serves) {
            entry.generation = entry.generation.max(generation);
        }
    }
}

/// The workers as the epoch starts: the layout the last epoch left (`last`) while no job and no
/// worker came or went since (nothing read; `jobs_changed`, `Allocator::jobs_changed`), else
/// read from the registry.
fn layout_now(last: Option<Layout>, (jobs_changed, registry): (u64, &WorkerRegistry), keys: &[u64]) -> Current {
    let unchanged = |l: &Layout| (l.jobs_changed, l.workers_changed) == (jobs_changed, registry.changes());
    let now = match last.filter(unchanged) {
        Some(layout) => layout.workers,
        None => {
            let jobs = current_jobs(registry, keys);
            let counts = per_job(&jobs, keys.len());
            Current { jobs, serves: None, counts }
        }
    };
    debug_assert_eq!(now.jobs, current_jobs(registry, keys), "the layout kept is the registry's");
    debug_assert_eq!(now.counts, per_job(&now.jobs, keys.len()), "the counts kept are the layout's");
    debug_assert!(
        now.serves.as_ref().is_none_or(|s| s.iter().copied().eq(registry.iter().map(|(_, w)| w.role == Role::Ps))),
        "the roles kept are the registry's"
    );
    now
}
