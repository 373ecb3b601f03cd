//! The leader's ingest loop's state: it decodes and validates every message, routes loss
//! reports to the job's actor with `try_send` (a full mailbox is counted, `overloaded`, never
//! waited on), and answers hellos and status requests. Bad input is counted by cause, logged at
//! most once per cause every 10 s, answered with an error `Ack` where there is a reply subject,
//! and dropped. What a message does to the routing table is decided in `routes`; this is its I/O.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use tracing::{debug, info, warn};

use super::intake::Intake;
use super::routes::{Greeting, LogOnce, Routes};
use super::threads::{Arrival, JobSetup, JobThreads, send_report};
use super::{ServeConfig, status};
use crate::actors::allocator::{AllocatorActor, Input, JobStarted, Restore};
use crate::actors::job::{JobActor, ReportCounters, SavedJob, Stop, UpdateSpec};
use crate::bus::BusCounters;
use crate::bus::durable::{Durable, SavedState};
use crate::metrics::Metrics;
use crate::protocol::{
    self, Ack, Encoding, EndReason, Inbound, JobEnd, JobSpec, LossPoint, Outcome, ProtocolError, RejectCause,
    StatusRequest,
};

/// How long a read that checks a gap in the reports stream (or a job's unread bye) may take.
const GAP_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a job's hello waits for its spec to be saved before it goes unanswered (the job
/// asks again).
const HELLO_SAVE_WAIT: Duration = Duration::from_secs(30);

/// The scheduler's own reply subjects (its connections' inbox prefixes): no client's inbox.
pub(super) fn own_inboxes(config: &ServeConfig) -> Vec<String> {
    [&config.nats_auth, &config.state_auth]
        .iter()
        .filter_map(|a| a.inbox_prefix.clone())
        .filter(|p| !config.reply_prefixes.contains(p))
        .collect()
}

/// What job actors count reports under.
pub(super) fn report_counters(metrics: &Metrics) -> ReportCounters {
    ReportCounters {
        accepted: metrics.accepted("loss"),
        duplicate: metrics.rejected(RejectCause::Duplicate),
        far_ahead: metrics.rejected(RejectCause::BadIteration),
    }
}

/// What a message still has to do that waits, left by `Ingest::handle` for `Ingest::finish`:
/// rare (a report or a heartbeat leaves nothing), so the loop's hot path builds no future.
pub(super) enum Waiting {
    Answer(Answer),
    /// A job's hello (it may read the stream and wait for its save before it is answered).
    Hello {
        spec: Box<JobSpec>,
        subject: String,
        reply: Option<String>,
        encoding: Encoding,
    },
}

/// An answer to send.
pub(super) struct Answer {
    reply: String,
    encoding: Encoding,
    ack: Ack,
}

/// The leader's loop state (see the module's documentation).
pub(super) struct Ingest {
    pub client: async_nats::Client,
    /// The state connection (the partitions' owners, with shared work).
    pub state_client: async_nats::Client,
    pub durable: Option<Durable>,
    /// This scheduler's term, in its answers to hellos.
    pub term: Option<u64>,
    /// Reply subjects that are the scheduler's own (never answered).
    pub own_inboxes: Vec<String>,
    /// The last stream sequence read from the reports stream.
    pub last_stream_seq: u64,
    /// The stream's last sequence when this scheduler started: up to it, the stream is read
    /// again (a replay), and a report of an unknown job registers none.
    pub replay_until: u64,
    pub config: ServeConfig,
    pub allocator: Addr<AllocatorActor>,
    pub threads: JobThreads,
    /// The jobs (their actors; none with shared work, where they run on their owners).
    pub routes: Routes<Option<Addr<JobActor>>>,
    /// Message counters by kind and cause (also what `status` shows).
    pub metrics: Arc<Metrics>,
    /// What job actors count reports under.
    pub report_counters: ReportCounters,
    pub log: LogOnce,
    pub bus: Arc<BusCounters>,
    /// With shared work (`[cluster] shared`): the owners' bids, merged; job actors run on the
    /// partitions' owners, not here.
    pub intake: Option<Intake>,
}

impl Ingest {
    /// Stops the job actors (each saving first) and their threads, lets the last saves reach
    /// the writer, and delivers what is queued before the connection goes.
    pub async fn stop(self) {
        let actors = self.routes.iter().filter_map(|(_, r)| r.addr.as_ref());
        self.threads.stop(actors, self.durable.as_ref()).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.flush()).await;
    }

    /// Starts the saved jobs with their predictors and hands the saved workers and assignments
    /// to the allocator. At most `max_jobs` jobs come back: those serving workers first, then
    /// those with a predictor, then the rest, in id order.
    pub fn restore(&mut self, mut saved: SavedState) {
        let num_workers = saved.workers.len();
        let serving: std::collections::HashSet<&str> = saved.assignments.values().map(String::as_str).collect();
        let rank = |(spec, predictor): &(JobSpec, Option<Bytes>)| {
            (!serving.contains(spec.job.as_str()), predictor.is_none(), spec.job.clone())
        };
        saved.jobs.sort_by_key(rank);
        let (mut restored, mut refused, mut undecodable) = (0usize, 0usize, 0usize);
        for (spec, predictor) in saved.jobs {
            if self.routes.room().is_err() {
                refused += 1;
                continue;
            }
            let predictor = predictor.and_then(|bytes| match SavedJob::decode(&bytes) {
                Ok(p) => Some(p),
                Err(e) => {
                    undecodable += 1;
                    debug!(job = %spec.job, error = %e, "saved predictor does not decode; starting afresh");
                    None
                }
            });
            if self.start_job(spec, predictor, false, true).is_ok() {
                restored += 1;
            }
        }
        if refused > 0 {
            warn!(jobs = refused, max_jobs = self.config.max_jobs, "saved jobs beyond max_jobs were not restored");
        }
        if undecodable > 0 {
            warn!(jobs = undecodable, "saved predictors that do not decode; those jobs start afresh");
        }
        if restored + num_workers > 0 {
            self.allocator.do_send(Input::Restore(Restore {
                workers: saved.workers,
                assignments: saved.assignments,
                plans: saved.plans,
            }));
            info!(jobs = restored, workers = num_workers, "restored from JetStream");
        }
    }

    /// A curve request: answered if the job's actor runs here (`curves`).
    pub fn curve(&self, message: async_nats::Message) {
        let job = self.config.subjects.curve_job(&message.subject);
        let actor = job.and_then(|job| self.routes.get(job)).and_then(|r| r.addr.clone());
        let (prefixes, own) = (&self.config.reply_prefixes, &self.own_inboxes);
        super::curves::answer(&self.client, message, actor, self.config.horizon_s, |r| {
            protocol::valid_reply(r, prefixes, own)
        });
    }

    /// Whether the reports stream skipped messages before `seq` (`read_gap` reads them). The
    /// consumer reads the whole stream, so past the replay its sequences follow one another.
    pub fn gap_before(&self, seq: u64) -> bool {
        // From the stream's first message on: a skip of the very first is a gap too.
        self.durable.is_some() && self.last_stream_seq >= self.replay_until && self.last_stream_seq + 1 < seq
    }

    /// The stream message at `seq`, after a gap before it: the gap is read, then it is handled.
    pub async fn after_gap(&mut self, message: async_nats::Message, seq: u64) {
        self.read_gap(seq).await;
        if let Some(waiting) = self.handle(&message, Some(seq), Arrival::now()) {
            self.finish(waiting).await;
        }
    }

    /// Reads the gap before the stream message at `seq` from its start: a message found there
    /// (the server skipped it: nats-server 2.9 did after a purge of one subject) is counted,
    /// logged and handled before the one at `seq`.
    pub async fn read_gap(&mut self, seq: u64) {
        let Some(d) = self.durable.clone() else { return };
        let mut next = self.last_stream_seq + 1;
        while self.last_stream_seq >= self.replay_until && next < seq {
            match tokio::time::timeout(GAP_READ_TIMEOUT, d.message_from(next)).await {
                Ok(Ok(Some((skipped, at)))) if at < seq => {
                    self.metrics.stream_skipped.inc();
                    warn!(sequence = at, subject = %skipped.subject, "the reports stream skipped a message on this consumer: read and handled by sequence");
                    if let Some(waiting) = self.handle(&skipped, Some(at), Arrival::now()) {
                        self.finish(waiting).await;
                    }
                    next = at + 1;
                }
                // The gap holds nothing: its messages were removed (limits, retention).
                Ok(Ok(_)) => break,
                Ok(Err(e)) => {
                    self.metrics.stream_gaps_unchecked.inc();
                    warn!(from = next, to = seq, error = %e, "cannot check a gap in the reports stream");
                    break;
                }
                Err(_) => {
                    self.metrics.stream_gaps_unchecked.inc();
                    warn!(from = next, to = seq, "cannot check a gap in the reports stream: timed out");
                    break;
                }
            }
        }
    }

    /// Handles one message received at `arrival`; `seq` is its sequence in the reports stream
    /// if it came from there (a stream message's reply subject is JetStream's, never answered).
    /// Nothing here waits: what the message still has to do that does (an answer, a hello) is
    /// returned for `finish`. A report or a heartbeat, nearly all the traffic, leaves nothing.
    pub fn handle(&mut self, message: &async_nats::Message, seq: Option<u64>, arrival: Arrival) -> Option<Waiting> {
        if let Some(seq) = seq {
            self.last_stream_seq = self.last_stream_seq.max(seq);
        }
        let encoding = crate::bus::encoding_of(message);
        let reply = message.reply.as_ref().map(|r| r.as_str()).filter(|_| seq.is_none());
        let subject = message.subject.as_str();
        let result = match reply {
            Some(r) if !protocol::valid_reply(r, &self.config.reply_prefixes, &self.own_inboxes) => {
                Err(ProtocolError::Invalid("reply subject is not an inbox", RejectCause::BadReply))
            }
            _ => self.dispatch(subject, &message.payload, encoding, reply, seq, arrival),
        };
        result.unwrap_or_else(|error| self.refused(&error, subject, reply, encoding).map(Waiting::Answer))
    }

    /// What a message left waiting (`handle`): the hello handled, the answer sent.
    pub async fn finish(&mut self, waiting: Waiting) {
        let answer = match waiting {
            Waiting::Answer(answer) => Some(answer),
            Waiting::Hello { spec, subject, reply, encoding } => {
                match self.job_hello(*spec, reply.as_deref(), encoding).await {
                    Ok(()) => {
                        self.metrics.accepted("job_hello").inc();
                        None
                    }
                    Err(error) => self.refused(&error, &subject, reply.as_deref(), encoding),
                }
            }
        };
        if let Some(Answer { reply, encoding, ack }) = answer {
            status::send_reply(&self.client, reply, encoding, &ack).await;
        }
    }

    /// A message refused: counted by cause, logged at most once per cause every 10 s, and
    /// answered with the error where it has a reply subject that is an inbox.
    fn refused(
        &mut self,
        error: &ProtocolError,
        subject: &str,
        reply: Option<&str>,
        encoding: Encoding,
    ) -> Option<Answer> {
        let cause = error.cause();
        self.metrics.rejected(cause).inc();
        if self.log.first(cause, Instant::now()) {
            warn!(cause = cause.as_str(), subject, error = %error, "message rejected (logged once per cause every 10 s)");
        }
        // Never on a reply subject that is not an inbox.
        let reply = reply.filter(|_| cause != RejectCause::BadReply)?;
        let ack = Ack::error(error.to_string()).with_term(self.term);
        Some(Answer { reply: reply.to_string(), encoding, ack })
    }

    async fn reply<T: serde::Serialize>(&self, reply: &str, encoding: Encoding, message: &T) {
        status::send_reply(&self.client, reply.to_string(), encoding, message).await;
    }

    /// A partition owner's bids (`[cluster] shared`): merged, then handed to the allocator;
    /// jobs the owners report ended leave the routing table. A message that does not decode is
    /// counted and dropped.
    pub fn owner_bids(&mut self, message: async_nats::Message) {
        let Some(intake) = self.intake.as_mut() else { return };
        let merged = match protocol::PartitionBids::decode(&message.payload, intake.partitions()) {
            Ok(m) => intake.merge(m),
            Err(e) => {
                let cause = e.cause();
                self.metrics.rejected(cause).inc();
                warn!(cause = cause.as_str(), error = %e, "a partition owner's message refused");
                return;
            }
        };
        let now = Instant::now();
        // Ends first: a job in both ended, then started again.
        for (job, _) in &merged.gone {
            // A job whose hello has not reached this leader yet: when it does, it starts nothing.
            if self.routes.end(job, 0, now).is_none() {
                self.routes.remember_end(job, 0, now, false);
            }
        }
        for (job, _) in &merged.bids {
            if !self.routes.contains(job) {
                // Its hello reached its owner; this leader may not have read it yet.
                self.routes.insert(&JobSpec::new(job.as_str()), None, now, false, false);
            }
        }
        if !(merged.bids.is_empty() && merged.gone.is_empty() && merged.quiet.is_empty()) {
            self.allocator.do_send(Input::Remote(merged));
        }
    }

    /// A job was heard from: the allocator learns its quiet ended (`was_quiet`).
    fn spoke(&self, id: &str, was_quiet: bool) {
        if was_quiet {
            self.allocator.do_send(Input::JobQuiet { job: id.to_string(), quiet: false });
        }
    }

    /// Handles one message; returns what it leaves waiting (see `handle`).
    fn dispatch(
        &mut self,
        subject: &str,
        payload: &Bytes,
        encoding: Encoding,
        reply: Option<&str>,
        seq: Option<u64>,
        arrival: Arrival,
    ) -> Result<Option<Waiting>, ProtocolError> {
        // Only a hello reads the tenants: a report does not touch their lock.
        let tenants = if subject.ends_with(".hello") { self.config.tenants.get() } else { None };
        let limits = self.config.inbound_limits(tenants.as_deref());
        let message = protocol::inbound(&self.config.subjects, subject, payload, encoding, &limits)?;
        let kind = message.kind();
        let waiting = match message {
            // Counted by its job's actor, which knows whether it is new.
            Inbound::JobLoss { job, point } => return self.report(job, point, seq, arrival).map(|()| None),
            // Counted by the allocator, which knows whether the worker is new.
            Inbound::WorkerBeat { worker, running } => {
                self.allocator.do_send(Input::WorkerBeat { worker: worker.to_string(), running });
                return Ok(None);
            }
            // Counted once handled.
            Inbound::JobHello(spec) => {
                let (subject, reply) = (subject.to_string(), reply.map(str::to_string));
                return Ok(Some(Waiting::Hello { spec, subject, reply, encoding }));
            }
            Inbound::JobBye(end) => self.job_bye(end, seq).map(|()| None)?,
            Inbound::WorkerHello(spec) => {
                self.allocator.do_send(Input::WorkerHello(spec));
                let ack = Ack::ok().with_term(self.term);
                reply.map(|reply| Waiting::Answer(Answer { reply: reply.to_string(), encoding, ack }))
            }
            Inbound::Status(request) => {
                let reply =
                    reply.ok_or(ProtocolError::Invalid("status needs a reply subject", RejectCause::UnknownSubject))?;
                self.status(request, false, reply, encoding);
                None
            }
            Inbound::JobStatus { job } => {
                let reply =
                    reply.ok_or(ProtocolError::Invalid("status needs a reply subject", RejectCause::UnknownSubject))?;
                let request = StatusRequest { jobs: Some(job.to_string()), limit: None, ..StatusRequest::default() };
                self.status(request, true, reply, encoding);
                None
            }
        };
        self.metrics.accepted(kind).inc();
        Ok(waiting)
    }

    /// A loss report to its job's actor (a job unknown so far is registered, if allowed). A job
    /// flooding reports loses its own excess, never another job's reports.
    fn report(&mut self, id: &str, point: LossPoint, seq: Option<u64>, arrival: Arrival) -> Result<(), ProtocolError> {
        let send = |addr: &Option<Addr<JobActor>>| match addr {
            Some(addr) => send_report(addr, point, arrival),
            None => Err(ProtocolError::Invalid("job runs on another replica", RejectCause::UnknownJob)),
        };
        // The common case, a job known here: its report reaches its actor in one lookup.
        if let Some(was_quiet) = self.routes.deliver_known(id, seq, arrival.at, send) {
            self.spoke(id, was_quiet?);
            return Ok(());
        }
        if !self.routes.admit(id, seq, self.replay_until)? {
            self.routes.may_register()?;
            let spec = JobSpec::new(id);
            // Its hello, if it says one, may still be on its way.
            self.start_job(spec.clone(), None, false, false)?;
            // Saved once admitted: a job refused at max_jobs leaves nothing behind.
            if let Some(d) = &self.durable {
                d.save_job(&spec);
            }
        }
        let was_quiet = self.routes.deliver(id, arrival.at, send)?;
        self.spoke(id, was_quiet);
        Ok(())
    }

    /// A job's hello: a new job is started, a known one gets the new spec (the submitted command
    /// stays when the job's own process says hello without one); answered with the term.
    async fn job_hello(
        &mut self,
        mut spec: JobSpec,
        reply: Option<&str>,
        encoding: Encoding,
    ) -> Result<(), ProtocolError> {
        let id = spec.job.clone();
        if self.routes.late_hello(&id, Instant::now()) {
            // The job's own hello, read after its bye: the job has ended, and this starts nothing.
            if let Some(reply) = reply {
                self.reply(reply, encoding, &Ack::ok().with_term(self.term)).await;
            }
            return Ok(());
        }
        if self.routes.announced(&id) {
            self.bye_before_hello(&id).await;
        }
        match self.routes.greet(&mut spec, self.last_stream_seq) {
            Greeting::Known { command_changed } => {
                let addr = self.routes.get(&id).and_then(|r| r.addr.clone());
                if command_changed {
                    let (job, addr, command) = (id.clone(), addr.clone(), spec.command.clone());
                    self.allocator.do_send(JobStarted { job, addr, command });
                }
                if let Some(addr) = addr {
                    addr.do_send(UpdateSpec(spec.clone()));
                }
                let was_quiet = self.routes.heard(&id, Instant::now());
                self.spoke(&id, was_quiet);
            }
            Greeting::New => self.start_job(spec.clone(), None, true, true)?,
        }
        let ack = Ack::ok().with_term(self.term);
        match (&self.durable, reply) {
            // Answered once the spec is saved (an answered hello survives a fail-over or its
            // partition's takeover), then, with shared work, once the hello is in the stream (its
            // partition's owner reads it in order with the job's messages, and may save the spec
            // again with what only it knows, `ended_before`). Not answered if a write is given up
            // (the lease was lost) or takes longer than a hello waits: the job says hello again.
            (Some(d), reply) => {
                let saved = d.save_job_acked(&spec);
                let in_stream = d.hello_in_stream(&spec);
                let (client, reply, job) = (self.client.clone(), reply.map(str::to_string), spec.job.clone());
                tokio::spawn(async move {
                    let both = async { saved.await.is_ok() && in_stream.await.is_ok() };
                    match (tokio::time::timeout(HELLO_SAVE_WAIT, both).await, reply) {
                        (Ok(true), Some(reply)) => status::send_reply(&client, reply, encoding, &ack).await,
                        (Ok(true), None) => {}
                        _ => warn!(job, "a hello not saved or not put into the stream in time: not answered"),
                    }
                });
            }
            (None, Some(reply)) => self.reply(reply, encoding, &ack).await,
            (None, None) => {}
        }
        Ok(())
    }

    /// A hello of a running job that said hello may follow that job's bye, not read yet (a job
    /// that ended and started again at once): the first such bye ends the running job now, so
    /// the hello starts a new one, and the bye, read later, ends nothing.
    async fn bye_before_hello(&mut self, id: &str) {
        let Some(d) = self.durable.clone().filter(|_| self.intake.is_none()) else { return };
        let Some(route) = self.routes.get(id) else { return };
        let read = self.last_stream_seq.max(route.ended_before.unwrap_or(0));
        let bye = match tokio::time::timeout(GAP_READ_TIMEOUT, d.unread_bye(id, read)).await {
            Ok(Ok(bye)) => bye,
            Ok(Err(e)) => return warn!(job = id, error = %e, "cannot read the job's first unread bye"),
            Err(_) => return warn!(job = id, "cannot read the job's first unread bye: timed out"),
        };
        if let Some((end, seq)) = bye
            && self.routes.ours(id, Some(seq))
        {
            self.end_job(id, end.reason, Some(seq));
        }
    }

    /// A job's bye: the job ends. A bye of a job already gone (read again in a replay) is
    /// remembered as its end; one of an earlier job of the same id ends nothing.
    fn job_bye(&mut self, end: JobEnd, seq: Option<u64>) -> Result<(), ProtocolError> {
        let id = end.job.as_str();
        if !self.routes.contains(id) {
            let known = self.routes.has_ended(id);
            // Its hello may be on its way (core NATS), unless this is a replay of the stream.
            let replayed = seq.is_some_and(|s| s <= self.replay_until);
            self.routes.remember_end(id, seq.unwrap_or(self.last_stream_seq), Instant::now(), replayed);
            return Err(match known {
                true => ProtocolError::Invalid("a bye of a job that ended", RejectCause::Ended),
                false => ProtocolError::Invalid("no such job", RejectCause::UnknownJob),
            });
        }
        if !self.routes.ours(id, seq) {
            return Err(ProtocolError::Invalid("a bye of an earlier job of this id", RejectCause::Ended));
        }
        self.end_job(id, end.reason, seq);
        Ok(())
    }

    /// A status request, answered off the ingest loop (the allocator may be mid-epoch), cut to
    /// fit one message. `own`: a job's request for itself (only that id, and nothing of the
    /// cluster's).
    fn status(&mut self, request: StatusRequest, own: bool, reply: &str, encoding: Encoding) {
        self.metrics.sync_bus(&self.bus);
        if let Some(d) = &self.durable {
            self.metrics.sync_state(&d.counters(), d.pending());
        }
        let dropped: HashMap<String, u64> =
            self.routes.iter().filter(|(_, r)| r.dropped > 0).map(|(id, r)| (id.clone(), r.dropped)).collect();
        let shared = self.intake.as_ref().filter(|_| !own).map(|i| (self.state_client.clone(), i.partitions()));
        let answer = status::Answer {
            allocator: self.allocator.clone(),
            client: self.client.clone(),
            shared,
            prefix: self.config.subjects.prefix().to_string(),
            dropped,
        };
        answer.spawn(request, own, reply.to_string(), encoding);
    }

    /// Ends a job (its bye, or the allocator's when a submitted job's restarts are used up):
    /// its actor stops, its kept messages up to `seq` go, and its workers go to others.
    pub fn end_job(&mut self, id: &str, reason: EndReason, seq: Option<u64>) {
        let at = seq.unwrap_or(self.last_stream_seq);
        let Some(route) = self.routes.end(id, at, Instant::now()) else { return };
        if route.addr.is_none()
            && let Some(d) = &self.durable
        {
            // Its actor runs on its partition's owner, which reads this bye as the job's own.
            d.end_in_stream(id, reason);
        }
        self.left(id, route.addr, Outcome::from(reason));
    }

    /// A job left: its actor stops, its saved state goes, and its workers go to others.
    fn left(&mut self, id: &str, addr: Option<Addr<JobActor>>, outcome: Outcome) {
        if let Some(addr) = addr {
            addr.do_send(Stop);
        }
        if let Some(d) = &self.durable {
            d.forget_job(id);
        }
        self.allocator.do_send(Input::JobStopped { job: id.to_string(), outcome });
        // Per job, so debug: at 100,000 jobs a line each would be the log.
        debug!(job = id, reason = %outcome, "job left");
    }

    /// Every few seconds: forgets jobs silent for `idle_job_timeout` (whatever their history: a
    /// restored job whose bye was lost is one of them), and tells the allocator which jobs went
    /// quiet for `stale_job` (the rules: `Routes::sweep`).
    pub fn sweep(&mut self) {
        let now = Instant::now();
        if self.intake.is_some() {
            // The partitions' owners hear the jobs' reports and sweep them; ends are remembered
            // for their time here too (those the owners report).
            self.routes.expire_ends(now);
            return;
        }
        let connected = self.client.connection_state() == async_nats::connection::State::Connected;
        let swept = self.routes.sweep(now, connected);
        let expired = swept.idle.len();
        for (id, route) in swept.idle {
            self.left(&id, route.addr, Outcome::Expired);
        }
        if expired > 0 {
            self.metrics.jobs_expired.inc_by(expired as u64);
            let timeout_s = self.config.idle_job_timeout.map_or(0.0, |t| t.as_secs_f64());
            info!(jobs = expired, timeout_s, "forgot jobs silent for the idle timeout");
        }
        for job in swept.quiet {
            self.allocator.do_send(Input::JobQuiet { job, quiet: true });
        }
    }

    /// Starts a job (its actor here, unless it runs on its partition's owner with shared work)
    /// and tells the allocator. `greeted`: by its hello; `announced`: its hello was read.
    fn start_job(
        &mut self,
        spec: JobSpec,
        saved: Option<SavedJob>,
        greeted: bool,
        announced: bool,
    ) -> Result<(), ProtocolError> {
        self.routes.room()?;
        let (id, command) = (spec.job.clone(), spec.command.clone());
        let addr = match self.intake {
            Some(_) => None,
            None => {
                let setup = JobSetup {
                    config: &self.config,
                    durable: self.durable.clone(),
                    counters: self.report_counters.clone(),
                    bids_to: self.allocator.clone().recipient(),
                };
                Some(self.threads.spawn(setup, spec.clone(), saved))
            }
        };
        self.routes.insert(&spec, addr.clone(), Instant::now(), greeted, announced);
        self.allocator.do_send(JobStarted { job: id.clone(), addr, command });
        // Per job, so debug: at 100,000 jobs this line would be the log.
        debug!(job = id, "job joined");
        Ok(())
    }
}
