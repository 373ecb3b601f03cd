//! The job actors' threads, for both shells (the leader's ingest loop and a partition's owner):
//! a job's actor starts on the next thread in turn, and at the end every actor saves and stops
//! before its thread does.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::ServeConfig;
use crate::actors::job::{BidUpdate, JobActor, Report, ReportCounters, SaveNow, SavedJob, Stop, wall_ms_now};
use crate::bus::durable::Durable;
use crate::protocol::{JobSpec, LossPoint, ProtocolError, RejectCause};
use crate::quality::JobPredictor;

/// The threads job actors run on, taken in turn.
pub(crate) struct JobThreads {
    threads: Vec<Arbiter>,
    handles: Vec<ArbiterHandle>,
    next: usize,
}

impl JobThreads {
    /// `count` threads of their own (none: the caller's).
    pub fn new(count: usize) -> Self {
        let threads: Vec<Arbiter> = (0..count).map(|_| Arbiter::new()).collect();
        let mut handles: Vec<ArbiterHandle> = threads.iter().map(|a| a.handle()).collect();
        if handles.is_empty() {
            handles.push(Arbiter::current());
        }
        JobThreads { threads, handles, next: 0 }
    }

    /// Starts a job's actor on the next thread.
    pub fn spawn(&mut self, setup: JobSetup<'_>, spec: JobSpec, saved: Option<SavedJob>) -> Addr<JobActor> {
        let thread = &self.handles[self.next % self.handles.len()];
        self.next += 1;
        setup.spawn(thread, spec, saved)
    }

    /// Stops `actors` (each saving first), lets their last saves reach the writer, then stops
    /// the threads.
    pub async fn stop<'a>(self, actors: impl Iterator<Item = &'a Addr<JobActor>>, durable: Option<&Durable>) {
        for addr in actors {
            addr.do_send(SaveNow);
            addr.do_send(Stop);
        }
        if let Some(d) = durable {
            // The job actors' last saves (SaveNow) reach the writer first.
            tokio::time::sleep(Duration::from_millis(50)).await;
            d.flush(Duration::from_secs(3)).await;
        }
        for thread in self.threads {
            thread.stop();
        }
    }
}

/// When messages were received: both clocks read once for a batch of messages taken together
/// (two reads per report were 5% of the ingest loop: issue #44's profile).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    pub at: Instant,
    /// The wall clock, a report's time in its job's history.
    pub at_ms: Option<NonZeroU64>,
}

impl Arrival {
    pub fn now() -> Self {
        Arrival { at: Instant::now(), at_ms: wall_ms_now() }
    }
}

/// Hands a report received at `arrival` to its job's actor without waiting: a full mailbox is
/// the job's own excess (`overloaded`), a stopped actor an unknown job.
pub(crate) fn send_report(addr: &Addr<JobActor>, point: LossPoint, arrival: Arrival) -> Result<(), ProtocolError> {
    addr.try_send(Report { point, at_ms: arrival.at_ms }).map_err(|e| match e {
        SendError::Full(_) => ProtocolError::Invalid("job actor mailbox full", RejectCause::Overloaded),
        SendError::Closed(_) => ProtocolError::Invalid("job has stopped", RejectCause::UnknownJob),
    })
}

/// What a job actor is started with (the scheduler's, or a partition owner's).
pub(crate) struct JobSetup<'a> {
    pub config: &'a ServeConfig,
    pub durable: Option<Durable>,
    pub counters: ReportCounters,
    pub bids_to: Recipient<BidUpdate>,
}

impl JobSetup<'_> {
    /// Starts a job's actor on `arbiter`, from its saved predictor if there is one.
    fn spawn(self, arbiter: &ArbiterHandle, spec: JobSpec, saved: Option<SavedJob>) -> Addr<JobActor> {
        let config = self.config;
        let (predictor, shapes, grads) = match saved {
            Some(s) => (s.predictor, s.shapes, s.grads),
            None => (JobPredictor::new(config.predictor), Vec::new(), None),
        };
        let refit = config.refit_interval;
        let saving = self.durable.map(|d| (d, config.snapshot_interval));
        let (counters, max_iter_jump) = (self.counters, config.max_iter_jump);
        let bids_to = self.bids_to;
        let (horizon_s, epoch_s) = (config.horizon_s, config.epoch.as_secs_f64());
        // The mailbox is made here with its full capacity, before the actor first runs on its
        // own thread: a burst of reports arriving before then is queued, not refused at
        // actix's default of 16.
        let (tx, rx) = actix::dev::channel::channel(config.job_mailbox);
        arbiter.spawn_fn(move || {
            let ctx = Context::with_receiver(rx);
            let actor = JobActor::new(spec, predictor, refit, bids_to, horizon_s, epoch_s)
                .counting(counters, max_iter_jump)
                .with_model(shapes, grads);
            let actor = match saving {
                Some((durable, every)) => actor.saving_to(durable, every),
                None => actor,
            };
            actix::spawn(ctx.into_future(actor));
        });
        Addr::new(tx)
    }
}
