//! The allocator actor, a thin shell around [`Allocator`] (`core`): it turns messages into the
//! core's inputs with the time on its clock, runs an epoch every period while the lease's fence
//! holds, and performs the effects the core returns: assignments and allocations published on
//! NATS, workers, assignments and plans saved, job actors told their worker count, submitted
//! jobs sent back to the ingest loop to be ended, counters moved. The decisions are all in the
//! core and its concerns (`supervision`, `planning`, `assignment`, `status`), tested there on a
//! fake clock; the maths is `schedule::*`.

mod asks;
mod assignment;
mod core;
mod planned;
mod planning;
mod state;
mod status;
mod supervision;
mod tables;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, info, warn};

pub use self::core::{EpochOutput, Input, RemoteJobs, Restore};
pub use self::state::{Allocator, AllocatorSettings, Count, Effect};
pub use self::status::GetStatus;
use super::job::{BidUpdate, JobActor, WorkersChanged};
use crate::bus::Publisher;
use crate::bus::durable::Durable;
use crate::bus::lease::Fence;
use crate::metrics::Metrics;
use crate::protocol::{EndReason, EpochSummary, JobCommand, RejectCause, StatusSnapshot};

pub struct AllocatorActor {
    core: Allocator,
    publisher: Publisher,
    metrics: Arc<Metrics>,
    durable: Option<Durable>,
    /// The clock the core's `now_s` is read on.
    started: Instant,
    /// Epochs run only while it holds (the leader's lease).
    fence: Fence,
    /// Epochs skipped in a row because the lease was not certainly held.
    skipped: u64,
    /// Where a submitted job whose restarts are used up is sent to be ended (the service's
    /// ingest loop ends it as it would on a bye).
    ending: Option<tokio::sync::mpsc::UnboundedSender<(String, EndReason)>>,
    /// The jobs whose actor runs in this process.
    addrs: HashMap<String, Addr<JobActor>>,
}

impl AllocatorActor {
    pub fn new(
        settings: AllocatorSettings,
        publisher: Publisher,
        metrics: Arc<Metrics>,
        durable: Option<Durable>,
    ) -> Self {
        AllocatorActor {
            core: Allocator::new(settings, durable.is_some()),
            publisher,
            metrics,
            durable,
            started: Instant::now(),
            fence: Fence::unfenced(),
            skipped: 0,
            ending: None,
            addrs: HashMap::new(),
        }
    }

    /// Epochs run only while `fence` holds (a replica's lease).
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// Submitted jobs whose restarts are used up are sent here to be ended.
    pub fn ending_to(mut self, to: tokio::sync::mpsc::UnboundedSender<(String, EndReason)>) -> Self {
        self.ending = Some(to);
        self
    }

    fn now_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Hands `input` to the core now and performs what it returns.
    fn input(&mut self, input: Input) {
        let effects = self.core.handle(self.now_s(), input);
        self.apply(effects);
    }

    /// Performs the core's effects in order; messages go out in one batch at the end, then the
    /// job actors are told their counts (each rebids, which must not delay the messages).
    fn apply(&mut self, effects: Vec<Effect>) {
        let subjects = self.publisher.subjects();
        let mut outgoing = Vec::new();
        let mut told = Vec::new();
        for effect in effects {
            match effect {
                Effect::Assign(a) => outgoing.extend(self.publisher.message(subjects.worker_assign(&a.worker), &a)),
                Effect::Allocate(a) => outgoing.extend(self.publisher.message(subjects.job_alloc(&a.job), &a)),
                Effect::TellJob { job, workers } => told.extend(self.addrs.get(&job).map(|a| (a.clone(), workers))),
                Effect::EndJob { job, reason } => {
                    if let Some(to) = &self.ending {
                        let _ = to.send((job, reason));
                    }
                }
                Effect::SaveWorker(spec) => self.durable.iter().for_each(|d| d.save_worker(&spec)),
                Effect::ForgetWorker(worker) => self.durable.iter().for_each(|d| d.forget_worker(&worker)),
                Effect::SaveAssignment { worker, job } => {
                    self.durable.iter().for_each(|d| d.save_assignment(&worker, job.as_deref()))
                }
                Effect::SavePlan { job, attained_service, ledger } => {
                    self.durable.iter().for_each(|d| d.save_plan(&job, attained_service, &ledger))
                }
                Effect::Count(count) => self.count(count),
            }
        }
        self.publisher.send_all(outgoing);
        for (addr, workers) in told {
            addr.do_send(WorkersChanged(workers));
        }
    }

    fn count(&self, count: Count) {
        let m = &self.metrics;
        match count {
            Count::BeatAccepted => m.accepted("worker_beat").inc(),
            Count::BeatFromUnknownWorker => m.rejected(RejectCause::UnknownWorker).inc(),
            Count::Mismatch => m.assignment_mismatches.inc(),
            Count::AgentRefusals(n) => m.agent_refusals.inc_by(n),
            Count::JobFailed => m.jobs_failed.inc(),
            Count::JobRestarted => m.job_restarts.inc(),
            Count::RestartSeconds(s) => m.restart_seconds.observe(s),
            Count::GenerationsWithoutRanks(n) => m.generations_without_ranks.inc_by(n),
            Count::RendezvousPortsBusy(n) => m.rendezvous_ports_busy.set(n as i64),
        }
    }

    /// Runs an epoch, then schedules the next one a period later. After a stall (the process
    /// paused) one late epoch runs, never a burst of catch-up epochs, and none while the lease
    /// is not certainly held.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.fence.holds() {
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
        ctx.run_later(self.core.settings().epoch, |act, ctx| act.tick(ctx));
    }

    /// One epoch of the core, its effects performed, its summary timed, published and kept.
    fn epoch(&mut self) {
        let started = Instant::now();
        let cpu_started = thread_cpu();
        let stopwatch_ms = || ms(started.elapsed());
        let EpochOutput { effects, mut summary } =
            self.core.epoch(self.now_s(), self.publisher.connected(), &stopwatch_ms);
        let publish_started = Instant::now();
        self.apply(effects);
        summary.publish_ms = ms(publish_started.elapsed());
        summary.total_ms = ms(started.elapsed());
        summary.cpu_ms = cpu_started.zip(thread_cpu()).map(|(a, b)| ms(b.saturating_sub(a)));
        if let Some(m) = self.publisher.message(self.publisher.subjects().ctl_epoch(), &summary) {
            self.publisher.send_all(vec![m]);
        }
        debug!(epoch = summary.epoch, total_ms = summary.total_ms, "epoch done");
        self.metrics.observe_epoch(&summary);
        self.core.record(summary);
    }
}

/// CPU time this thread has used (Linux: `CLOCK_THREAD_CPUTIME_ID`): an epoch's work, apart
/// from the time it waited for a core.
pub fn thread_cpu() -> Option<Duration> {
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
        ctx.run_later(self.core.settings().epoch, |act, ctx| act.tick(ctx));
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct JobStarted {
    pub job: String,
    /// Its actor, if it runs in this process; else on the replica that owns its partition.
    pub addr: Option<Addr<JobActor>>,
    /// A submitted job's command (sent again when a hello changes it).
    pub command: Option<JobCommand>,
}

impl Handler<JobStarted> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: JobStarted, _: &mut Self::Context) {
        let local = msg.addr.is_some();
        match msg.addr {
            Some(addr) => self.addrs.insert(msg.job.clone(), addr),
            None => self.addrs.remove(&msg.job),
        };
        self.input(Input::JobStarted { job: msg.job, local, command: msg.command });
    }
}

impl Handler<BidUpdate> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, msg: BidUpdate, _: &mut Self::Context) {
        self.input(Input::Bid { job: msg.job, bid: msg.bid });
    }
}

impl Message for Input {
    type Result = ();
}

/// Every input but a job's start (`JobStarted`, which carries its actor).
impl Handler<Input> for AllocatorActor {
    type Result = ();
    fn handle(&mut self, input: Input, _: &mut Self::Context) {
        match &input {
            Input::JobStopped { job, .. } => {
                self.addrs.remove(job);
            }
            Input::Remote(remote) => remote.gone.iter().for_each(|(job, _)| {
                self.addrs.remove(job);
            }),
            _ => {}
        }
        self.input(input);
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

impl Message for GetStatus {
    type Result = StatusSnapshot;
}

impl Handler<GetStatus> for AllocatorActor {
    type Result = MessageResult<GetStatus>;
    fn handle(&mut self, filter: GetStatus, _: &mut Self::Context) -> Self::Result {
        let mut status = self.core.snapshot(self.now_s(), &filter);
        if !filter.own {
            // The message counters live in the metrics registry (one source for both).
            status.accepted = self.metrics.accepted_counts();
            status.rejected = self.metrics.rejected_counts();
        }
        MessageResult(status)
    }
}

/// The actor of a job whose actor runs in this process (`None`: no such job here, or its
/// actor runs on its partition's owner).
#[derive(Message)]
#[rtype(result = "Option<Addr<JobActor>>")]
pub struct JobActorOf(pub String);

impl Handler<JobActorOf> for AllocatorActor {
    type Result = Option<Addr<JobActor>>;
    fn handle(&mut self, JobActorOf(job): JobActorOf, _: &mut Self::Context) -> Self::Result {
        self.addrs.get(&job).cloned()
    }
}

/// The newest `0` epoch summaries, oldest first (all: `usize::MAX`).
#[derive(Message)]
#[rtype(result = "Vec<EpochSummary>")]
pub struct RecentEpochs(pub usize);

impl Handler<RecentEpochs> for AllocatorActor {
    type Result = MessageResult<RecentEpochs>;
    fn handle(&mut self, RecentEpochs(n): RecentEpochs, _: &mut Self::Context) -> Self::Result {
        let all = self.core.history();
        let skip = all.len().saturating_sub(n);
        MessageResult(all.skip(skip).cloned().collect())
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
        let remote = self.core.remote_points();
        let requests: Vec<_> = self.addrs.values().map(|a| a.send(super::job::CountPoints)).collect();
        Box::pin(async move {
            remote + futures_util::future::join_all(requests).await.into_iter().filter_map(Result::ok).sum::<u64>()
        })
    }
}
