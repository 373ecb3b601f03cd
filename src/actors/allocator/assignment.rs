//! Assignment: the plan applied to concrete workers with as few moves as possible (`move_workers`),
//! a new generation for each job whose membership changed, every member told its rank in it
//! (`new_generations`, `launches`), an agent that runs another job than recorded told again
//! (`reconcile`), and an unknown worker asked to say hello. Only workers that move cost anything.

use std::collections::{HashMap, HashSet};

use tracing::{debug, warn};

use super::super::registry::{JobRef, WorkerRegistry};
use super::planning::check_prediction;
use super::state::{Allocated, Allocator, Asked, Count, Current, Effect, JobEntry, per_job};
use crate::cluster::ranks::{self, PortBook};
use crate::protocol::{EpochGains, JobCommand, Launch, Role, Running, WorkerAssignment, WorkerSpec};
use crate::schedule::{self, EpochPlan, FloorLedger};

/// Seconds between saves of a job's service and floor ledger.
const PLAN_SAVE_S: f64 = 30.0;

/// A worker whose heartbeat shows another job than recorded is told again at most this often
/// (an assignment just published may still be on its way).
pub(super) const RETELL_AFTER_S: f64 = 2.0;

/// Unknown workers asked at once, at most.
const MAX_PROMPTED: usize = 10_000;

/// What an epoch's moves changed (`Allocator::move_workers`).
pub(super) struct Moved {
    /// Each job's membership changed (a worker joined or left, or was lost).
    job_changed: Vec<bool>,
    /// Workers that moved.
    pub(super) workers: usize,
    /// Workers taken from one tenant's job for another's: the process they ran gets the
    /// taker's grace at most (`WorkerAssignment::reclaim_grace_ms`).
    taken: HashSet<String>,
    /// Workers whose job's change went without the save it was asked for: the grace left to
    /// that job's processes there (ms).
    cut: HashMap<String, u64>,
    /// Each worker's job now: the plan's, but for moves that wait for a save asked for.
    pub(super) next: Vec<Option<usize>>,
    /// Workers per job now.
    pub(super) counts: Vec<u32>,
    /// Each worker serves its job as a parameter server now.
    pub(super) serves: Vec<bool>,
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

impl Allocator {
    /// A heartbeat says the agent runs another job than recorded, and its assignment is not
    /// on its way (told more than `RETELL_AFTER_S` ago): it is told again, and counted. An
    /// agent following a newer term (a new leader) is not this scheduler's to correct.
    pub(super) fn reconcile(&mut self, worker: &str, running: &Running, now_s: f64, fx: &mut Vec<Effect>) {
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
        fx.push(Effect::Count(Count::Mismatch));
        debug!(worker, recorded = ?recorded, runs = ?running.job, "an agent runs another job than recorded: told again");
        let message = WorkerAssignment {
            role: entry.role,
            launch: entry.launch.as_deref().cloned(),
            command: entry
                .launch
                .as_ref()
                .and(recorded)
                .and_then(|j| self.jobs.get(j))
                .and_then(|e| e.command.as_deref().cloned()),
            stop_grace_ms: recorded.and_then(|j| grace_ms(self.settings.tenants.get().as_deref(), j)),
            ..assignment(self.settings.term, worker, self.epoch.max(1), recorded.map(str::to_string))
        };
        fx.push(Effect::Assign(message));
    }

    /// A heartbeat from a worker not in the registry: it is asked to say hello again (as after
    /// a restart without state), at most once per `PROMPT_EVERY_S` per worker and for at most
    /// `MAX_PROMPTED` workers at a time, so forged heartbeats cannot turn the scheduler into an
    /// amplifier.
    pub(super) fn prompt(&mut self, worker: &str, now_s: f64, fx: &mut Vec<Effect>) {
        if self.prompted.len() < MAX_PROMPTED && !self.prompted.contains_key(worker) {
            self.prompted.insert(worker.to_string(), now_s);
            let hello_again = assignment(self.settings.term, worker, self.epoch, None);
            fx.push(Effect::Assign(WorkerAssignment { hello_again: true, ..hello_again }));
        }
    }

    /// Applies the plan to the registry: each worker whose job or role changed is recorded (and
    /// saved); one that is idle now is told so. At the first epoch of a term every worker is told
    /// what it serves, changed or not. Returns which jobs' membership changed (`lost` marks those
    /// that changed without a move), how many workers moved and which were taken from one
    /// tenant's job for another's (their processes get the taker's grace at most). Only
    /// workers that move cost anything here: with the roles as the last epoch left them
    /// (`now.serves`, `None`: not known), an epoch whose plan moves none (`EpochPlan::kept`)
    /// reads no worker.
    pub(super) fn move_workers(
        &mut self,
        epoch: u64,
        (now, keys): (Current, &[u64]),
        (plan, asked): (&EpochPlan, &Asked),
        lost: Vec<bool>,
        now_s: f64,
        fx: &mut Vec<Effect>,
    ) -> Moved {
        // Nothing to tell: no worker changes job or role (a plan that moves nobody says so,
        // `kept`, and then no worker is read), none whose job was asked to save has its grace
        // cut, and it is not the first epoch of a term.
        let Current { jobs: current, serves, counts } = now;
        let kept = |current: &[Option<usize>]| plan.kept() || plan.next(current) == current;
        if let Some(serves) = serves.filter(|s| {
            !self.tell_all && *s == plan.serves && kept(&current) && asked.cut_ms.iter().all(Option::is_none)
        }) {
            return Moved {
                job_changed: lost,
                workers: 0,
                taken: HashSet::new(),
                cut: HashMap::new(),
                next: current,
                counts,
                serves,
            };
        }
        self.move_each(epoch, (&current, keys), (plan, asked), lost, now_s, fx)
    }

    /// `move_workers` worker by worker.
    fn move_each(
        &mut self,
        epoch: u64,
        (current, keys): (&[Option<usize>], &[u64]),
        (plan, asked): (&EpochPlan, &Asked),
        lost: Vec<bool>,
        now_s: f64,
        fx: &mut Vec<Effect>,
    ) -> Moved {
        // Submitted jobs' commands, for the first epoch of a term, which tells every worker.
        let commands: Vec<Option<JobCommand>> = if self.tell_all {
            self.jobs.values().map(|e| e.command.as_deref().cloned()).collect()
        } else {
            Vec::new()
        };
        let mut ids_read: Option<Vec<&str>> = None; // The jobs' ids, once a worker needs one.
        let roles = plan.serves.iter().map(|&s| if s { Role::Ps } else { Role::Worker });
        let (mut job_changed, mut workers_moved, mut taken, mut cut) = (lost, 0, HashSet::new(), HashMap::new());
        let (mut next, mut serves_now) = (Vec::with_capacity(current.len()), Vec::with_capacity(current.len()));
        let tell_all = std::mem::take(&mut self.tell_all);
        let tenants = self.settings.tenants.get();
        for ((((worker, entry), &before), &after), role) in
            self.registry.iter_mut().zip(current).zip(plan.next(current)).zip(roles)
        {
            // Same job and role, or no job and no stale name of a job that left; or a move that
            // waits for a save asked for (the worker stays as it is).
            let waits = before != after && asked.waits(before, after);
            let (after, role) = if waits { (before, entry.role) } else { (after, role) };
            let same = before == after && role == entry.role && (after.is_some() || entry.job.is_none());
            next.push(after);
            serves_now.push(role == Role::Ps);
            if let Some(ms) = asked.cut(before) {
                cut.insert(worker.clone(), ms);
            }
            if same && !tell_all {
                continue;
            }
            let ids = ids_read.get_or_insert_with(|| self.jobs.keys().map(String::as_str).collect());
            if same {
                // The first epoch of a term tells every worker what it serves, changed or not.
                let message = WorkerAssignment {
                    role,
                    launch: entry.launch.as_deref().cloned(),
                    command: entry.launch.as_ref().and(after).and_then(|j| commands.get(j).cloned().flatten()),
                    stop_grace_ms: after.and_then(|j| grace_ms(tenants.as_deref(), ids[j])),
                    ..assignment(self.settings.term, worker, epoch, after.map(|j| ids[j].to_string()))
                };
                entry.told_s = now_s;
                fx.push(Effect::Assign(message));
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
            if self.persist {
                fx.push(Effect::SaveAssignment { worker: worker.clone(), job: now_job.map(str::to_string) });
            }
            if now_job.is_none() {
                // Idle now. A worker that joins a job is told below, with its job's other
                // members, in the job's new generation.
                entry.launch = None;
                let idle = assignment(self.settings.term, worker, epoch, None);
                fx.push(Effect::Assign(WorkerAssignment { role, reclaim_grace_ms: cut.get(worker).copied(), ..idle }));
            }
        }
        let counts = per_job(&next, plan.counts.len());
        Moved { job_changed, workers: workers_moved, taken, cut, next, counts, serves: serves_now }
    }

    /// Every job takes its ledger back and books its service; a job whose membership changed
    /// starts a new generation (every member, old or new, is told its rank in it) and is told
    /// its workers (naming their type when workers name theirs, `typed`), and so is a job whose
    /// batch changed; then its prediction is checked (`check_prediction`), in the same pass.
    /// Returns the jobs whose worker count changed, with their new count, and the predictions
    /// checked (none: no job had one).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_generations(
        &mut self,
        epoch: u64,
        plan: &EpochPlan,
        moved: &Moved,
        ledgers: Vec<FloorLedger>,
        now_s: f64,
        typed: bool,
        fx: &mut Vec<Effect>,
    ) -> (Vec<(String, u32)>, Option<EpochGains>) {
        let (job_changed, taken, cut) = (&moved.job_changed, &moved.taken, &moved.cut);
        let batches: Vec<Option<u32>> = plan.batches.iter().map(|c| c.map(|c| c.config.batch)).collect();
        let mut new_workers = self.new_members(&moved.next, job_changed);
        let epoch_s = self.settings.epoch.as_secs_f64();
        let mut resized = Vec::new();
        let mut gains = EpochGains::default();
        // Jobs whose new generation found no free rendezvous port (logged once an epoch).
        let (mut without_ranks, mut without_ranks_count): (Option<String>, usize) = (None, 0);
        let every = (PLAN_SAVE_S / epoch_s).ceil().max(1.0) as usize;
        let tenants = self.settings.tenants.get();
        let mut generations = Generations {
            registry: &mut self.registry,
            ports: &mut self.ports,
            tenants: tenants.as_deref(),
            taken,
            cut,
            term: self.settings.term,
            epoch,
            now_s,
        };
        let ledgers = regranted(ledgers, plan, moved);
        for (j, ((id, entry), ledger)) in self.jobs.iter_mut().zip(ledgers).enumerate() {
            entry.ledger = ledger;
            let workers = if job_changed[j] { std::mem::take(&mut new_workers[j]) } else { Vec::new() };
            let count = if job_changed[j] { workers.len() } else { entry.workers.len() };
            entry.attained_service += epoch_s * count as f64;
            // Each job's plan is saved about once a PLAN_SAVE_S, the jobs spread over the epochs,
            // and only when it changed: at 200,000 jobs a save per job per epoch would be 40,000
            // writes a second. A restart restores it at most that stale.
            let stamp = (entry.attained_service, entry.ledger.entitled(), entry.ledger.granted());
            let due = (epoch as usize + j).is_multiple_of(every) && entry.saved_plan != Some(stamp);
            if due && self.persist {
                fx.push(Effect::SavePlan {
                    job: id.clone(),
                    attained_service: entry.attained_service,
                    ledger: entry.ledger.clone(),
                });
                entry.saved_plan = Some(stamp);
            }
            if job_changed[j] && workers.len() != entry.workers.len() {
                if entry.local {
                    resized.push((id.clone(), workers.len() as u32));
                }
                entry.workers_since_s = now_s;
            }
            if job_changed[j] {
                entry.saves.restarted(now_s);
            }
            if job_changed[j] && !generations.start(id, entry, &workers, batches[j], fx) {
                without_ranks.get_or_insert_with(|| id.clone());
                without_ranks_count += 1;
            }
            let batch_changed = batches[j].is_some() && batches[j] != entry.batch;
            if (job_changed[j] && workers != entry.workers) || batch_changed {
                let workers = if job_changed[j] { workers } else { entry.workers.clone() };
                entry.batch = batches[j];
                let at = Allocated { typed, id, epoch, term: self.settings.term };
                let message = at.of(generations.registry, workers, entry.batch);
                entry.workers = message.workers.clone();
                fx.push(Effect::Allocate(message));
            }
            check_prediction(entry, epoch_s, &mut gains);
        }
        self.count_ranks(without_ranks.as_deref(), without_ranks_count, now_s, fx);
        (resized, (gains.jobs > 0).then_some(gains))
    }

    /// The workers of each job whose membership changed, as moved (empty for the others; none
    /// at all when no membership changed, as in most epochs: then no worker is read, and no
    /// list per job is made).
    fn new_members(&self, next: &[Option<usize>], job_changed: &[bool]) -> Vec<Vec<String>> {
        if !job_changed.contains(&true) {
            return Vec::new();
        }
        let mut new_workers: Vec<Vec<String>> = vec![Vec::new(); self.jobs.len()];
        for ((worker, _), &after) in self.registry.iter().zip(next) {
            if let Some(j) = after.filter(|&j| job_changed[j]) {
                new_workers[j].push(worker.clone());
            }
        }
        new_workers
    }

    /// Counts the generations started without ranks this epoch (`first` of them logged) and
    /// the busiest address's rendezvous ports.
    fn count_ranks(&mut self, first: Option<&str>, without_ranks: usize, now_s: f64, fx: &mut Vec<Effect>) {
        self.without_ranks += without_ranks as u64;
        if without_ranks > 0 {
            fx.push(Effect::Count(Count::GenerationsWithoutRanks(without_ranks as u64)));
        }
        if let Some((_, busy)) = self.ports.busiest(now_s) {
            fx.push(Effect::Count(Count::RendezvousPortsBusy(busy)));
        }
        if let Some(first) = first {
            warn!(
                jobs = without_ranks,
                first,
                "no free rendezvous port at the rank-0 worker's address: these generations run without ranks \
                 (agents that share one --advertise address share its 1,000 ports)"
            );
        }
    }
}

/// The ledgers the plan booked, each job's latest grant set to what it got where a change
/// that waits for a save asked for kept it from what was planned.
fn regranted(mut ledgers: Vec<FloorLedger>, plan: &EpochPlan, moved: &Moved) -> Vec<FloorLedger> {
    for ((ledger, &planned), &got) in ledgers.iter_mut().zip(&plan.counts).zip(&moved.counts) {
        if got != planned {
            let per_worker = if planned > 0 { ledger.last_granted() / f64::from(planned) } else { 1.0 };
            ledger.regrant(per_worker * f64::from(got));
        }
    }
    ledgers
}

/// What a job's new generation needs of the epoch (`Generations::start`).
struct Generations<'a> {
    registry: &'a mut WorkerRegistry,
    ports: &'a mut PortBook,
    tenants: Option<&'a schedule::tenants::TenantSet>,
    /// Workers taken from another tenant's job: their processes get the taker's grace.
    taken: &'a HashSet<String>,
    /// Workers whose job's change went without the save asked for: what is left of its grace.
    cut: &'a HashMap<String, u64>,
    term: Option<u64>,
    epoch: u64,
    now_s: f64,
}

impl Generations<'_> {
    /// Starts job `id`'s next generation on `workers`: every member, old or new, is told its
    /// rank in it. Returns whether it got ranks (a free rendezvous port at rank 0's address).
    fn start(
        &mut self,
        id: &str,
        entry: &mut JobEntry,
        workers: &[String],
        batch: Option<u32>,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let now_s = self.now_s;
        entry.generation += 1;
        let sup = &mut entry.supervision;
        if sup.restart_at_s.is_some() {
            if sup.restarted.len() == super::state::RESTARTS_KEPT {
                sup.restarted.pop_front();
            }
            sup.restarted.push_back(entry.generation);
        }
        (sup.generation_started_s, sup.restart_at_s) = (now_s, None);
        sup.timing_restart = entry.generation > 1 && !workers.is_empty();
        let launches = launches(self.registry, self.ports, entry, workers, batch, now_s);
        let ranked = !launches.first().is_some_and(Option::is_none);
        let grace = grace_ms(self.tenants, id);
        for (worker, launch) in workers.iter().zip(launches) {
            let Some(w) = self.registry.get_mut(worker) else { continue };
            w.launch = launch.map(Box::new);
            w.told_s = now_s;
            fx.push(Effect::Assign(WorkerAssignment {
                role: w.role,
                launch: w.launch.as_deref().cloned(),
                command: w.launch.as_ref().and(entry.command.as_deref().cloned()),
                stop_grace_ms: grace,
                // Taken from another tenant's job: that process gets this job's terms; one whose
                // job was asked to save and did not gets what is left of its grace.
                reclaim_grace_ms: [grace.filter(|_| self.taken.contains(worker)), self.cut.get(worker).copied()]
                    .into_iter()
                    .flatten()
                    .min(),
                ..assignment(self.term, worker, self.epoch, Some(id.to_string()))
            }));
        }
        ranked
    }
}

/// Each member's place in a job's new generation (`cluster::ranks`), in the order of
/// `workers`: machines from the workers' specs (a worker without one is its own machine), the
/// rendezvous at the rank-0 worker's advertised address, on a port no other job's rank 0 at that
/// address holds. `None` for all if every port there is taken (logged).
fn launches(
    registry: &WorkerRegistry,
    ports: &mut PortBook,
    entry: &JobEntry,
    workers: &[String],
    batch_size: Option<u32>,
    now_s: f64,
) -> Vec<Option<Launch>> {
    let specs: Vec<Option<&WorkerSpec>> = workers.iter().map(|w| registry.get(w).map(|e| &*e.spec)).collect();
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
