//! `[cluster] shared` (issue #19): replicas that share the jobs.
//!
//! The server maps each job's reports and byes to its partition
//! (`<prefix>.v1.part.<p>.job.<id>.<kind>`, `partition::of`). Every replica runs an [`Owner`]:
//! it holds some partitions' leases (`bus::partitions`), runs the job actors of those
//! partitions (restored from the state bucket when it takes one over), reads their reports with
//! one ordered consumer per partition, and sends their bids to the leader each epoch as
//! `PartitionBids` (`intake`) on the state connection: the bids that changed, the jobs that ended
//! or went quiet, and, every [`FULL_EVERY`] epochs or when a new leader asks, all of its bids and
//! the roster of its jobs. The leader (`service::run`) merges them with `intake::Intake`.
//!
//! Hellos go to the leader, which saves the spec and puts the hello into the job's partition
//! before it answers: the owner starts the actor from the stream, in order with the job's
//! reports and byes. Allocations go to the job and to its owner (the actor's worker count).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::routes::{Greeting, LogOnce, Route, Routes};
use super::threads::{Arrival, JobSetup, JobThreads, send_report};
use super::{Connections, ServeConfig, ServiceError};
use crate::actors::bid::Bid;
use crate::actors::job::{BidUpdate, JobActor, ReportCounters, SavedJob, Stop, UpdateSpec, WorkersChanged};
use crate::bus::durable::Durable;
use crate::bus::lease::Fence;
use crate::bus::partitions::{Changes, Partitions};
use crate::partition;
use crate::protocol::{
    self, Encoding, Inbound, JobAllocation, JobSpec, Outcome, PartitionBids, ProtocolError, RejectCause, chunks,
};

/// Every this many epochs an owner sends all its bids and its roster (a lost message is made
/// good within this many epochs).
pub const FULL_EVERY: u64 = 30;

/// Reading a partition taken over starts this long before its jobs' oldest save plus the save
/// interval (clocks of replicas and servers differ).
const REPLAY_MARGIN_MS: u64 = 10_000;

/// How a job running here is reached: its actor, on its partition.
struct Owned {
    addr: Addr<JobActor>,
    partition: u32,
}

/// What an owner sends the leader at its next flush.
#[derive(Default)]
struct News {
    /// Each job's last bid.
    latest: HashMap<String, Bid>,
    /// Jobs whose bid changed since the last flush.
    changed: BTreeSet<String>,
    /// Jobs that left, per partition.
    gone: HashMap<u32, Vec<(String, Outcome)>>,
    /// Jobs that went quiet (or spoke again), per partition.
    quiet: HashMap<u32, Vec<(String, bool)>>,
}

/// Forwards the job actors' bids to the owner loop.
struct Forward(mpsc::UnboundedSender<BidUpdate>);

impl Actor for Forward {
    type Context = Context<Self>;
}

impl Handler<BidUpdate> for Forward {
    type Result = ();
    fn handle(&mut self, msg: BidUpdate, _: &mut Self::Context) {
        let _ = self.0.send(msg);
    }
}

/// A message read from a partition's consumer, with its stream sequence and when the server
/// stored it (Unix nanoseconds; read only for a bye, see [`fresh`]).
type FromStream = (u32, async_nats::Message, Option<u64>, Option<i128>);

/// A replica's share of the jobs (see the module's documentation).
pub struct Owner {
    config: ServeConfig,
    state: async_nats::Client,
    durable: Durable,
    replica: String,
    partitions: u32,
    /// The partitions held, with their terms.
    held: HashMap<u32, u64>,
    /// Partitions taken whose saved jobs are being read.
    gaining: HashMap<u32, u64>,
    loaded_to: mpsc::UnboundedSender<Loaded>,
    consumers: HashMap<u32, tokio::task::JoinHandle<()>>,
    from_stream: mpsc::Sender<FromStream>,
    /// The jobs whose actors run here.
    jobs: Routes<Owned>,
    /// What the next flush sends the leader.
    news: News,
    last_seq: HashMap<u32, u64>,
    /// Per partition held, the stream's last sequence before its saved jobs were read: a
    /// message up to it of a job not running here is of a job that ended (or was never
    /// saved), read again, and starts nothing.
    replayed_to: HashMap<u32, u64>,
    flushes: u64,
    full_next: bool,
    threads: JobThreads,
    forward: Recipient<BidUpdate>,
    /// Messages refused, by cause (logged once per cause every 10 s).
    refused: HashMap<RejectCause, u64>,
    log: LogOnce,
}

/// Runs this replica's share of the jobs until `shutdown`: holds partitions, runs their job
/// actors and sends their bids to the leader. Must run inside an actix `System`.
pub async fn run_owner(
    clients: Connections,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    let (Some(ha), Some(n)) = (config.ha.clone(), config.durable.partitions) else { return Ok(()) };
    let ttl = ha.lease;
    tokio::pin!(shutdown);
    // The owner's writes (its jobs' predictors, their ends) hold while its partition leases are
    // renewed: a replica paused past them writes nothing when it resumes.
    let fence = Fence::held(Instant::now(), ttl / 2);
    let (durable, parts) = loop {
        match open(&clients, &config, (&ha.replica, n, ttl), fence.clone()).await {
            Ok(opened) => break opened,
            Err(e) => warn!(error = %e, "cannot open the partition leases yet; retrying"),
        }
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(ttl) => {}
        }
    };
    let (mut allocs, mut syncs) = subscribe(&clients, &config).await?;
    let mut curves = crate::bus::subscribe(&clients.bus, config.subjects.ctl_curve_all()).await?;
    let (bid_tx, mut bids) = mpsc::unbounded_channel();
    let (stream_tx, mut from_stream) = mpsc::channel(config.subscription_capacity.clamp(1024, 65_536));
    let (loaded_tx, mut loaded) = mpsc::unbounded_channel::<Loaded>();
    let mut owner = Owner {
        state: clients.state.clone(),
        durable,
        replica: ha.replica.clone(),
        partitions: n,
        held: HashMap::new(),
        gaining: HashMap::new(),
        loaded_to: loaded_tx,
        consumers: HashMap::new(),
        from_stream: stream_tx,
        jobs: Routes::for_config(&config),
        news: News::default(),
        last_seq: HashMap::new(),
        replayed_to: HashMap::new(),
        flushes: 0,
        full_next: false,
        threads: JobThreads::new(config.job_threads),
        forward: Forward(bid_tx).start().recipient(),
        refused: HashMap::new(),
        log: LogOnce::new(Duration::from_secs(10)),
        config,
    };
    info!(replica = %owner.replica, partitions = n, "sharing the jobs: taking partitions");
    // The leases are renewed on a task of their own: nothing the owner does (taking a partition
    // over, a burst of reports) may delay a renewal past the fence.
    let (changes_tx, mut changes) = mpsc::unbounded_channel::<Changes>();
    let (leave_tx, leave_rx) = tokio::sync::oneshot::channel::<()>();
    let leases = tokio::spawn(hold_leases(parts, fence, changes_tx, leave_rx));
    let mut flush = tokio::time::interval(owner.config.epoch);
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            Some(change) = changes.recv() => {
                owner.release(&change.released);
                owner.gain(&change.gained);
            }
            Some(done) = loaded.recv() => owner.loaded(done),
            _ = flush.tick() => owner.flush().await,
            Some(update) = bids.recv() => owner.bid(update),
            Some(first) = from_stream.recv() => owner.read_ready(first, &mut from_stream).await,
            Some(message) = allocs.next() => owner.alloc(message),
            Some(_) = syncs.next() => owner.full_next = true,
            Some(message) = curves.next() => owner.curve(&clients.bus, message),
            _ = sweep.tick() => owner.sweep(),
        }
    }
    info!(replica = %owner.replica, "giving the partitions back");
    owner.stop().await;
    let _ = leave_tx.send(());
    let _ = leases.await;
    Ok(())
}

impl Owner {
    /// A curve request: answered if the job's actor runs here (`curves`).
    fn curve(&self, bus: &async_nats::Client, message: async_nats::Message) {
        let actor = self.config.subjects.curve_job(&message.subject).and_then(|job| self.jobs.get(job));
        let (prefixes, own) = (&self.config.reply_prefixes, super::ingest::own_inboxes(&self.config));
        let actor = actor.map(|r| r.addr.addr.clone());
        super::curves::answer(bus, message, actor, self.config.horizon_s, |r| {
            crate::protocol::valid_reply(r, prefixes, &own)
        });
    }
}

/// What an owner reads besides its partitions: the jobs' allocations (bus; a job's id is one
/// token, or a tenant's job's two), and a new leader's call for every bid (state connection).
/// A job's hello it reads from its partition, where the leader puts it.
async fn subscribe(clients: &Connections, config: &ServeConfig) -> Result<(Subscribed, Subscribed), ServiceError> {
    let allocs = [
        crate::bus::subscribe(&clients.bus, config.subjects.job_alloc("*")).await?,
        crate::bus::subscribe(&clients.bus, config.subjects.job_alloc("*.*")).await?,
    ];
    let syncs = crate::bus::subscribe(&clients.state, config.subjects.part_bids_sync()).await?;
    Ok((futures_util::stream::select_all(allocs), futures_util::stream::select_all([syncs])))
}

type Subscribed = futures_util::stream::SelectAll<async_nats::Subscriber>;

/// Opens the owner's durable state (its writes held by `fence`) and this replica's partition
/// leases (one attempt).
async fn open(
    clients: &Connections,
    config: &ServeConfig,
    (replica, partitions, ttl): (&str, u32, Duration),
    fence: Fence,
) -> Result<(Durable, Partitions), ServiceError> {
    let durable = Durable::open(&clients.state, &config.subjects, &config.durable, fence)
        .await?
        .ok_or(ServiceError::NoJetStream)?;
    let prefix = config.subjects.prefix();
    let parts = Partitions::open(&clients.lease, prefix, replica, partitions, ttl, config.durable.replicas).await?;
    Ok((durable, parts))
}

/// Renews this replica's partitions every `ttl / 4` (and its fence with them), and passes what
/// changed to the owner loop; gives everything back when told to leave.
async fn hold_leases(
    mut parts: Partitions,
    fence: Fence,
    changes: mpsc::UnboundedSender<Changes>,
    mut leave: tokio::sync::oneshot::Receiver<()>,
) {
    let ttl = parts.ttl();
    let mut tick = tokio::time::interval(ttl / 4);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut leave => break,
            _ = tick.tick() => {
                let change = parts.tick().await;
                // The owner's writes hold as long as every partition it holds is held.
                let oldest = parts.held_until().into_iter().map(|(_, until)| until).min();
                if let Some(sent) = oldest.and_then(|until| until.checked_sub(ttl / 2)) {
                    fence.renewed(sent, ttl / 2);
                }
                let news = !(change.gained.is_empty() && change.released.is_empty());
                if news && changes.send(change).is_err() {
                    break;
                }
            }
        }
    }
    parts.leave().await;
}

/// Partitions taken, with their saved jobs as read (on a task, off the owner loop).
/// Partitions taken, with the stream's last sequence before their saved jobs were read and
/// those jobs (on a task, off the owner loop).
type Loaded = (Vec<(u32, u64)>, Result<(u64, Vec<(JobSpec, Option<bytes::Bytes>)>), crate::bus::BusError>);

impl Owner {
    fn refuse(&mut self, error: ProtocolError) {
        let cause = error.cause();
        *self.refused.entry(cause).or_default() += 1;
        if self.log.first(cause, Instant::now()) {
            warn!(error = %error, refused = ?self.refused, "partition owner refused messages (logged once per cause every 10 s)");
        }
    }

    /// Starts a job's actor here. `greeted`: by its hello; `announced`: its hello was read.
    fn start_job(&mut self, spec: JobSpec, saved: Option<SavedJob>, greeted: bool, announced: bool) {
        let partition = partition::of(&spec.job, self.partitions);
        let setup = JobSetup {
            config: &self.config,
            durable: Some(self.durable.clone()),
            counters: ReportCounters::default(),
            bids_to: self.forward.clone(),
        };
        let addr = self.threads.spawn(setup, spec.clone(), saved);
        self.jobs.insert(&spec, Owned { addr, partition }, Instant::now(), greeted, announced);
        debug!(job = %spec.job, partition, "job actor started");
    }

    /// Takes partitions over: their saved jobs are read on a task ([`Owner::loaded`] goes on).
    fn gain(&mut self, gained: &[(u32, u64)]) {
        if gained.is_empty() {
            return;
        }
        self.gaining.extend(gained.iter().copied());
        self.load(gained.to_vec(), Duration::ZERO);
    }

    fn load(&self, gained: Vec<(u32, u64)>, after: Duration) {
        let tx = self.loaded_to.clone();
        let (durable, n) = (self.durable.clone(), self.partitions);
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let wanted: HashSet<u32> = gained.iter().map(|&(p, _)| p).collect();
            // The bound first: a hello stored before it had its spec saved before it.
            let read = async {
                let bound = durable.last_sequence().await?;
                Ok((bound, durable.load_jobs(|id| wanted.contains(&partition::of(id, n))).await?))
            };
            let _ = tx.send((gained, read.await));
        });
    }

    /// The saved jobs of partitions taken: they start, then the partitions' reports are read
    /// from their jobs' oldest save on (the actors skip what their saved predictors hold).
    fn loaded(&mut self, (gained, saved): Loaded) {
        // Those released meanwhile are not ours any more.
        let gained: Vec<(u32, u64)> =
            gained.into_iter().filter(|(p, term)| self.gaining.get(p) == Some(term)).collect();
        if gained.is_empty() {
            return;
        }
        let (bound, saved) = match saved {
            Ok(read) => read,
            Err(e) => {
                // Without the saved state its jobs would start afresh: read again.
                warn!(error = %e, "cannot read the taken partitions' jobs; reading again");
                self.load(gained, Duration::from_secs(1));
                return;
            }
        };
        let wanted: HashSet<u32> = gained.iter().map(|&(p, _)| p).collect();
        let count = saved.len();
        // Where each partition's reading starts: its jobs' oldest save, less a margin for the
        // clocks (the reports before it are in the saved predictors); from the first report it
        // keeps if any of its jobs has no dated save.
        let margin = self.config.snapshot_interval.as_millis() as u64 + REPLAY_MARGIN_MS;
        let mut since: HashMap<u32, Option<u64>> = HashMap::new();
        for (spec, predictor) in saved {
            let p = partition::of(&spec.job, self.partitions);
            if !wanted.contains(&p) {
                continue;
            }
            let saved = predictor.and_then(|bytes| SavedJob::decode(&bytes).ok());
            let at = saved.as_ref().and_then(|s| s.saved_at_ms).map(|ms| ms.saturating_sub(margin));
            let start = since.entry(p).or_insert(at);
            *start = start.zip(at).map(|(a, b)| a.min(b));
            if !self.jobs.contains(&spec.job) {
                self.start_job(spec, saved, false, true);
            }
        }
        for (p, term) in gained {
            self.gaining.remove(&p);
            self.held.insert(p, term);
            self.replayed_to.insert(p, bound);
            let from = since.get(&p).copied().flatten();
            self.consumers.insert(p, self.consume(p, from));
        }
        self.full_next = true;
        info!(replica = %self.replica, partitions = ?wanted, jobs = count, "took partitions over");
    }

    /// Reads partition `p`'s reports and byes into the owner loop, again from the start if the
    /// consumer fails.
    fn consume(&self, p: u32, since_ms: Option<u64>) -> tokio::task::JoinHandle<()> {
        let (durable, tx) = (self.durable.clone(), self.from_stream.clone());
        tokio::spawn(async move {
            loop {
                match durable.reports_of(p, since_ms).await {
                    Ok(mut messages) => {
                        debug!(partition = p, "reading the partition's reports");
                        while let Some(m) = messages.next().await {
                            match m {
                                Ok(m) => {
                                    let info = m.info().ok();
                                    let seq = info.as_ref().map(|i| i.stream_sequence);
                                    let stored = info.map(|i| i.published.unix_timestamp_nanos());
                                    if tx.send((p, m.message, seq, stored)).await.is_err() {
                                        return;
                                    }
                                }
                                Err(e) => warn!(partition = p, error = %e, "reading a partition's reports"),
                            }
                        }
                    }
                    Err(e) => warn!(partition = p, error = %e, "cannot read a partition's reports; retrying"),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }

    /// Partitions given back or lost: their actors stop (what they saved and the stream keep
    /// is what the next owner restores).
    fn release(&mut self, released: &[u32]) {
        if released.is_empty() {
            return;
        }
        for p in released {
            self.held.remove(p);
            self.gaining.remove(p);
            self.replayed_to.remove(p);
            if let Some(task) = self.consumers.remove(p) {
                task.abort();
            }
            self.news.gone.remove(p);
            self.news.quiet.remove(p);
        }
        let set: HashSet<u32> = released.iter().copied().collect();
        let gone = self.jobs.remove_where(|r| set.contains(&r.addr.partition));
        for (id, job) in &gone {
            job.addr.addr.do_send(Stop);
            self.news.latest.remove(id);
            self.news.changed.remove(id);
        }
        info!(replica = %self.replica, partitions = ?released, jobs = gone.len(), "gave partitions up");
    }

    fn bid(&mut self, update: BidUpdate) {
        if self.jobs.contains(&update.job) {
            self.news.changed.insert(update.job.clone());
            self.news.latest.insert(update.job, update.bid);
        }
    }

    /// `first` of the messages read from the partitions' streams, then those already received
    /// after it (at most `leader::DRAIN`, as the leader's loop does).
    async fn read_ready(&mut self, first: FromStream, from_stream: &mut mpsc::Receiver<FromStream>) {
        let (p, message, seq, stored) = first;
        self.read(p, message, seq, stored).await;
        for _ in 0..super::leader::DRAIN {
            let Ok((p, message, seq, stored)) = from_stream.try_recv() else { break };
            self.read(p, message, seq, stored).await;
        }
    }

    /// A report or bye read from partition `p`.
    async fn read(&mut self, p: u32, message: async_nats::Message, seq: Option<u64>, stored: Option<i128>) {
        if !self.held.contains_key(&p) {
            return;
        }
        if let Some(seq) = seq {
            let last = self.last_seq.entry(p).or_default();
            *last = (*last).max(seq);
        }
        if let Err(e) = self.stream_message(p, &message, seq, stored).await {
            self.refuse(e);
        }
    }

    async fn stream_message(
        &mut self,
        p: u32,
        message: &async_nats::Message,
        seq: Option<u64>,
        stored: Option<i128>,
    ) -> Result<(), ProtocolError> {
        let encoding = crate::bus::encoding_of(message);
        let subject = match self.config.subjects.unmap(message.subject.as_str()) {
            Some((mapped, subject)) if mapped == p => subject,
            _ => return Err(ProtocolError::UnknownSubject),
        };
        // Only a hello reads the tenants: a report does not touch their lock.
        let tenants = if subject.ends_with(".hello") { self.config.tenants.get() } else { None };
        let limits = self.config.inbound_limits(tenants.as_deref());
        let inbound = protocol::inbound(&self.config.subjects, &subject, &message.payload, encoding, &limits)?;
        // A job may publish its mapped subjects itself: only its own partition counts.
        let job = match &inbound {
            Inbound::JobLoss { job, .. } => *job,
            Inbound::JobBye(end) => end.job.as_str(),
            Inbound::JobHello(spec) => spec.job.as_str(),
            _ => return Err(ProtocolError::UnknownSubject),
        };
        if partition::of(job, self.partitions) != p {
            return Err(ProtocolError::Invalid("a job's message on another partition", RejectCause::IdMismatch));
        }
        match inbound {
            Inbound::JobLoss { job, point } => {
                if !self.jobs.admit(job, seq, self.replayed_to(p))? {
                    self.adopt(job).await?;
                }
                let now = Arrival::now();
                let was_quiet = self.jobs.deliver(job, now.at, |owned| send_report(&owned.addr, point, now))?;
                self.spoke(p, job, was_quiet);
                Ok(())
            }
            Inbound::JobBye(end) => {
                let how = Outcome::from(end.reason);
                if self.jobs.contains(&end.job) && !self.jobs.ours(&end.job, seq) {
                    return Err(ProtocolError::Invalid("a bye of an earlier job of this id", RejectCause::Ended));
                }
                // A bye read again from long ago (a partition taken over) waits for no hello.
                self.end_job(&end.job, how, seq, !stored.is_some_and(fresh));
                Ok(())
            }
            Inbound::JobHello(spec) => {
                // Read again (a partition taken over): the hello of an earlier job of this id, or
                // of a job that has ended since (its saved state is gone).
                match self.jobs.contains(&spec.job) {
                    true if !self.jobs.ours(&spec.job, seq) => {
                        Err(ProtocolError::Invalid("a hello of an earlier job of this id", RejectCause::Ended))
                    }
                    false if seq.is_some_and(|s| s <= self.replayed_to(p)) => {
                        Err(ProtocolError::Invalid("a kept hello of a job no longer known", RejectCause::UnknownJob))
                    }
                    _ => {
                        self.hello(p, *spec, seq);
                        Ok(())
                    }
                }
            }
            _ => Err(ProtocolError::UnknownSubject),
        }
    }

    /// What partition `p`'s consumer reads again, up to this sequence (see `replayed_to`).
    fn replayed_to(&self, p: u32) -> u64 {
        self.replayed_to.get(&p).copied().unwrap_or(0)
    }

    /// A report for a job not running here: started from its saved state (its hello reached
    /// the leader while nobody held its partition), or registered if the settings allow.
    async fn adopt(&mut self, job: &str) -> Result<(), ProtocolError> {
        let saved = self
            .durable
            .load_job(job)
            .await
            .map_err(|_| ProtocolError::Invalid("state unreadable", RejectCause::Overloaded))?;
        match saved {
            Some((spec, predictor)) => {
                let saved = predictor.and_then(|bytes| SavedJob::decode(&bytes).ok());
                self.start_job(spec, saved, false, true);
            }
            None => {
                self.jobs.may_register()?;
                let spec = JobSpec::new(job);
                self.durable.save_job(&spec);
                // Its hello, if it says one, may still be on its way.
                self.start_job(spec, None, false, false);
            }
        }
        Ok(())
    }

    /// A job ended (its bye, or silence): its actor stops, its state and kept messages go, and
    /// the leader is told. A bye for a job not running here is passed on too: the leader may
    /// still have it.
    fn end_job(&mut self, job: &str, how: Outcome, seq: Option<u64>, replayed: bool) {
        let p = partition::of(job, self.partitions);
        let at = seq.unwrap_or_else(|| self.last_seq.get(&p).copied().unwrap_or(0));
        let route = self.jobs.end(job, at, Instant::now());
        if route.is_none() {
            // A bye of a job not running here: its hello may be on its way, unless read again.
            self.jobs.remember_end(job, at, Instant::now(), replayed);
        }
        self.left(job, route, how);
    }

    /// A job left (ended, or silent): its actor stops, its state goes, and the leader is told.
    fn left(&mut self, job: &str, route: Option<Route<Owned>>, how: Outcome) {
        if let Some(route) = route {
            route.addr.addr.do_send(Stop);
            self.durable.forget_job(job);
        }
        self.news.latest.remove(job);
        self.news.changed.remove(job);
        self.news.gone.entry(partition::of(job, self.partitions)).or_default().push((job.to_string(), how));
        debug!(job, %how, "job left");
    }

    /// A job of partition `p` was heard from: the leader learns its quiet ended (`was_quiet`).
    fn spoke(&mut self, p: u32, job: &str, was_quiet: bool) {
        if was_quiet {
            self.news.quiet.entry(p).or_default().push((job.to_string(), false));
        }
    }

    /// A job's hello, read from partition `p` at `seq` (the leader answered it and put it there):
    /// in the stream's order, so everything the job's predecessor of the same id sent before it
    /// has been read, and nothing the job sent once answered has. A new job whose id ran before
    /// has its spec saved with where its predecessor's messages end (`ended_before`): a replica
    /// that takes the partition over and reads it again refuses them.
    fn hello(&mut self, p: u32, mut spec: JobSpec, seq: Option<u64>) {
        if self.jobs.late_hello(&spec.job, Instant::now()) {
            // The job's own hello, read after its bye (it did not wait for the answer): it has
            // ended, and starts nothing.
            return;
        }
        // Everything before this hello is its predecessor's.
        let read = seq.map_or_else(|| self.last_seq.get(&p).copied().unwrap_or(0), |s| s.saturating_sub(1));
        match self.jobs.greet(&mut spec, read) {
            Greeting::Known { .. } => {
                let was_quiet = self.jobs.heard(&spec.job, Instant::now());
                self.spoke(p, &spec.job, was_quiet);
                if let Some(owned) = self.jobs.get(&spec.job) {
                    owned.addr.addr.do_send(UpdateSpec(spec));
                }
            }
            Greeting::New => {
                if spec.ended_before.is_some() {
                    // After the leader's save of the spec (it saves, then puts the hello here).
                    self.durable.save_job(&spec);
                }
                self.start_job(spec, None, true, true)
            }
        }
    }

    /// An allocation the leader sent a job: its actor learns its worker count.
    fn alloc(&mut self, message: async_nats::Message) {
        let encoding = crate::bus::encoding_of(&message);
        let Ok(alloc) = protocol::decode::<JobAllocation>(encoding, &message.payload, "allocation") else { return };
        if let Some(route) = self.jobs.get(&alloc.job) {
            route.addr.addr.do_send(WorkersChanged(alloc.workers.len() as u32));
        }
    }

    /// Jobs silent for `idle_job_timeout` end; those silent for `stale_job` are reported quiet
    /// (submitted jobs are supervised by the leader instead).
    fn sweep(&mut self) {
        let connected = self.state.connection_state() == async_nats::connection::State::Connected;
        let swept = self.jobs.sweep(Instant::now(), connected);
        for (id, route) in swept.idle {
            self.left(&id, Some(route), Outcome::Expired);
        }
        for id in swept.quiet {
            self.news.quiet.entry(partition::of(&id, self.partitions)).or_default().push((id, true));
        }
    }

    /// Sends each held partition's news to the leader.
    async fn flush(&mut self) {
        self.flushes += 1;
        let full = std::mem::take(&mut self.full_next) || self.flushes.is_multiple_of(FULL_EVERY);
        let mut per: HashMap<u32, PartitionBids> = self
            .held
            .iter()
            .map(|(&p, &term)| {
                let m = PartitionBids {
                    replica: self.replica.clone(),
                    partition: p,
                    term,
                    roster: full.then(Vec::new),
                    ..Default::default()
                };
                (p, m)
            })
            .collect();
        let changed = std::mem::take(&mut self.news.changed);
        let ids: Box<dyn Iterator<Item = &String>> =
            if full { Box::new(self.news.latest.keys()) } else { Box::new(changed.iter()) };
        for id in ids {
            let (Some(job), Some(bid)) = (self.jobs.get(id), self.news.latest.get(id)) else { continue };
            if let Some(m) = per.get_mut(&job.addr.partition) {
                m.bids.push((id.clone(), bid.to_wire()));
            }
        }
        if full {
            for (id, job) in self.jobs.iter() {
                if let Some(roster) = per.get_mut(&job.addr.partition).and_then(|m| m.roster.as_mut()) {
                    roster.push(id.clone());
                }
            }
        }
        for (p, gone) in self.news.gone.drain() {
            if let Some(m) = per.get_mut(&p) {
                m.gone = gone;
            }
        }
        for (p, quiet) in self.news.quiet.drain() {
            if let Some(m) = per.get_mut(&p) {
                m.quiet = quiet;
            }
        }
        let max_payload = self.state.server_info().max_payload.max(4096);
        for (p, m) in per {
            if m.bids.is_empty() && m.gone.is_empty() && m.quiet.is_empty() && m.roster.is_none() {
                continue;
            }
            for chunk in chunks(m, max_payload.saturating_sub(1024)) {
                match protocol::encode(Encoding::MsgPack, &chunk) {
                    Ok(bytes) => {
                        if let Err(e) = self.state.publish(self.config.subjects.part_bids(p), bytes.into()).await {
                            warn!(partition = p, error = %e, "cannot send a partition's bids");
                        }
                    }
                    Err(e) => warn!(partition = p, error = %e, "cannot encode a partition's bids"),
                }
            }
        }
    }

    /// Stops every actor, each saving first, lets the saves reach the bucket, and stops the
    /// actors' threads.
    async fn stop(self) {
        for (_, task) in self.consumers {
            task.abort();
        }
        let actors = self.jobs.iter().map(|(_, r)| &r.addr.addr);
        self.threads.stop(actors, Some(&self.durable)).await;
    }
}

/// Whether a stream message stored at `published_ns` (Unix nanoseconds, the server's clock) is
/// recent enough that the hello its job sent before it may still be on its way; an older one
/// (a partition read again from its start) is a replay.
fn fresh(published_ns: i128) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
    now - published_ns < super::routes::LATE_HELLO_WAIT.as_nanos() as i128
}
