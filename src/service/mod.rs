//! `slaq serve`: the live scheduler. [`run`] takes a connected NATS client and a shutdown
//! future (so tests pass their own), starts the allocator actor and the job-actor threads, and
//! runs the ingest loop until shutdown.
//!
//! The ingest loop holds one wildcard subscription per message kind (not one per job), decodes
//! and validates every message, and routes loss reports to the job's actor with `try_send`:
//! a full mailbox is counted (`overloaded`), never waited on. Bad input is counted by cause,
//! logged at most once per cause every 10 s, answered with an error `Ack` where there is a reply
//! subject, and dropped. The loop is the only owner of the job routing table.

pub mod config;
pub mod ended;
mod http;
pub mod intake;

mod replica;
pub mod shard;

pub use replica::run_replica;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use futures_util::StreamExt;
use tracing::{debug, info, warn};

use crate::actors::allocator::{
    AllocatorActor, AllocatorSettings, GetEpochs, GetStatus, Input, JobStarted, Restore, StopAllocator,
};
use crate::actors::job::{JobActor, Report, ReportCounters, SaveNow, SavedJob, Stop, UpdateSpec};
use crate::bus::durable::{Durable, SavedState};
use crate::bus::{BusCounters, BusError, NatsAuth, Publisher};
use crate::metrics::Metrics;
use crate::protocol::{
    self, Ack, Encoding, EndReason, EpochSummary, Inbound, InboundLimits, JobCommand, JobSpec, Outcome, ProtocolError,
    RejectCause, StatusRequest, StatusSnapshot,
};
use crate::quality::JobPredictor;
pub use config::{Overrides, RawConfig, ServeConfig, StateMode};

/// The scheduler's two NATS connections. `bus` talks with jobs, workers and operators: it
/// receives their messages, publishes allocations and assignments, and answers requests, on
/// inbox subjects only. `state` does every JetStream and key-value operation and reads the
/// reports stream. Under `deploy/nats/slaq-auth.conf` they are users of two accounts, so no
/// reply subject a client chooses, and no acknowledgement JetStream sends on one, can reach the
/// scheduler's state or lease.
#[derive(Clone)]
pub struct Connections {
    pub bus: async_nats::Client,
    pub state: async_nats::Client,
    /// The leases (`[ha]`): the state connection's user on a connection of its own, so that
    /// a renewal never waits behind bulk state traffic (the server handles one connection's
    /// requests in order; a takeover's consumer on a large bucket held it up for seconds).
    pub lease: async_nats::Client,
    /// The connections' events.
    pub counters: Arc<BusCounters>,
}

impl Connections {
    /// One connection for both (benchmarks, tests, a server without accounts).
    pub fn single(client: async_nats::Client, counters: Arc<BusCounters>) -> Self {
        Connections { bus: client.clone(), state: client.clone(), lease: client, counters }
    }

    /// Connects both as `config` says (the state connection only with durable state).
    pub async fn connect(config: &ServeConfig) -> Result<Self, BusError> {
        let counters = Arc::new(BusCounters::default());
        let connect = |name: String, auth: NatsAuth, capacity: usize| {
            let counters = counters.clone();
            async move { crate::bus::connect_counting(&config.nats_urls, &name, capacity, &auth, counters).await }
        };
        let bus = connect(config.client_name.clone(), config.nats_auth.clone(), config.subscription_capacity).await?;
        // The state connection's subscriptions are JetStream's answers and the reports
        // stream: never fewer than the default buffer, whatever the bus's.
        let state_capacity = config.subscription_capacity.max(STATE_SUBSCRIPTION_CAPACITY);
        let state = match config.state_mode {
            StateMode::None => bus.clone(),
            _ => connect(format!("{}-state", config.client_name), config.state_auth.clone(), state_capacity).await?,
        };
        let lease = match config.ha {
            Some(_) => {
                connect(format!("{}-lease", config.client_name), config.state_auth.clone(), LEASE_SUBSCRIPTION_CAPACITY)
                    .await?
            }
            None => state.clone(),
        };
        Ok(Connections { bus, state, lease, counters })
    }
}

/// At most this many ended jobs are remembered (see `ended`), the oldest forgotten first.
pub(crate) const ENDED_CAP: usize = 200_000;

/// How long the end of a job whose hello was not read yet waits for that hello (see `ended`):
/// far past any delay between a job's hello and its bye, short enough that a new job of the
/// same id is seldom taken for the old one's late hello.
pub(crate) const LATE_HELLO_WAIT: Duration = Duration::from_secs(60);

/// How long an ended job is remembered: as long as the stream keeps its messages.
pub(crate) fn ended_keep(config: &ServeConfig) -> Duration {
    config.durable.report_retention.max(Duration::from_secs(60))
}

/// How long a job's hello waits for its spec to be saved before it goes unanswered (the job
/// asks again).
const HELLO_SAVE_WAIT: Duration = Duration::from_secs(30);

/// The lease connection's subscription buffer (its requests' answers only).
const LEASE_SUBSCRIPTION_CAPACITY: usize = 1024;

/// The smallest subscription buffer of the state connection.
const STATE_SUBSCRIPTION_CAPACITY: usize = 65_536;

/// Handles for code that runs the service in process (benchmarks, tests).
#[derive(Clone)]
pub struct ServiceHandle {
    pub allocator: Addr<AllocatorActor>,
    pub metrics: Arc<Metrics>,
    /// Where the HTTP listener is bound (with port 0 in the settings, the port it got).
    pub http_addr: Option<SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot listen for HTTP on {addr}")]
    Http { addr: SocketAddr, source: std::io::Error },
    #[error(
        "the NATS server has JetStream but the state connection (user {user}) cannot use it: {detail}. \
         Give that user publish on $JS.API.> and its inbox in the state account (config [nats.state_auth], \
         SLAQ_STATE_NATS_*), or run without durable state on purpose: state.mode = \"none\" \
         (SLAQ_STATE_MODE=none)"
    )]
    StateRefused { user: String, detail: String },
    #[error("state.mode is jetstream but the NATS server has no JetStream")]
    NoJetStream,
}

impl ServiceHandle {
    pub async fn epochs(&self) -> Vec<EpochSummary> {
        self.allocator.send(GetEpochs).await.unwrap_or_default()
    }

    /// Loss points observed by all job actors together (asks each, like an epoch's bids).
    pub async fn observed_points(&self) -> u64 {
        self.allocator.send(crate::actors::allocator::CountPoints).await.unwrap_or(0)
    }
}

/// Runs the scheduler until `shutdown` completes. Must be called inside an actix `System`.
/// `on_ready` receives handles once the subscriptions are in place.
pub async fn run(
    clients: Connections,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(ServiceHandle),
) -> Result<(), ServiceError> {
    let Connections { bus: client, state: state_client, counters, .. } = clients;
    let metrics = Arc::new(Metrics::new());
    let durable = open_state(&state_client, &config).await?;
    // Bound first, so a taken port fails the start rather than a scrape later.
    let (http_addr, stop_http) = match config.http_listen {
        None => (None, None),
        Some(addr) => {
            let state = http::HttpState {
                metrics: metrics.clone(),
                bus: counters.clone(),
                durable: durable.clone(),
                client: client.clone(),
                epoch: config.epoch,
            };
            let (bound, stop) = serve_http(addr, state).await?;
            (Some(bound), Some(stop))
        }
    };
    let saved = match &durable {
        Some(d) => d.load().await?,
        None => SavedState::default(),
    };
    let term = match (config.term, &durable) {
        (Some(term), _) => Some(term),
        (None, Some(d)) => Some(d.incarnation().await?),
        (None, None) => None,
    };
    info!(term = ?term, "assignments carry this term");
    if let (Some(d), Some(term)) = (&durable, term) {
        d.set_term(term);
    }
    let publisher = Publisher::new(client.clone(), config.subjects.clone()).fenced(config.fence.clone());
    let settings = allocator_settings(&config, term);
    // Submitted jobs the allocator ends (restarts used up) come back here to be ended.
    let (ending_tx, mut ending) = tokio::sync::mpsc::unbounded_channel();
    // The allocator on a thread of its own: an epoch (hundreds of ms at a million workers) must
    // not hold up the ingest loop, status answers or the lease's renewal on this one.
    let allocator_thread = Arbiter::new();
    let allocator = {
        let (metrics, durable, fence) = (metrics.clone(), durable.clone(), config.fence.clone());
        AllocatorActor::start_in_arbiter(&allocator_thread.handle(), move |_| {
            AllocatorActor::new(settings, publisher, metrics, durable).fenced(fence).ending_to(ending_tx)
        })
    };
    let arbiters: Vec<Arbiter> = (0..config.job_threads).map(|_| Arbiter::new()).collect();
    let mut job_arbiters: Vec<ArbiterHandle> = arbiters.iter().map(|a| a.handle()).collect();
    if job_arbiters.is_empty() {
        job_arbiters.push(Arbiter::current());
    }

    let ingest_intake = config.durable.partitions.map(intake::Intake::new);
    // What the stream held before this start: read again (a replay), it registers no job.
    let replay_until = match &durable {
        Some(d) if config.durable.partitions.is_none() => d.last_sequence().await?,
        _ => 0,
    };
    let (mut losses, mut messages) = subscribe(&client, &config, durable.as_ref()).await?;
    // With shared work the owners' bids come on the state connection (their account), and a
    // new leader asks for all of them at once.
    let mut owner_bids = match config.durable.partitions {
        Some(_) => {
            let subject = config.subjects.part_bids_all();
            let bids = state_client
                .subscribe(subject.clone())
                .await
                .map_err(|source| BusError::Subscribe { subject, source })?;
            let _ = tokio::time::timeout(Duration::from_secs(5), state_client.flush()).await;
            if let Err(e) = state_client.publish(config.subjects.part_bids_sync(), Bytes::new()).await {
                warn!(error = %e, "cannot ask the partitions' owners for their bids");
            }
            futures_util::stream::select_all(vec![bids])
        }
        None => futures_util::stream::select_all(Vec::new()),
    };
    // A subscription returns before the server has it: flush so that "ready" means messages
    // published from now on reach us.
    if tokio::time::timeout(Duration::from_secs(5), client.flush()).await.is_err() {
        warn!("NATS did not confirm the subscriptions within 5 s; continuing");
    } else {
        metrics.ready.set(1);
    }
    info!(prefix = config.subjects.prefix(), policy = ?config.policy, epoch_ms = config.epoch.as_millis() as u64, "slaq scheduler serving");
    on_ready(ServiceHandle { allocator: allocator.clone(), metrics: metrics.clone(), http_addr });
    let report_counters = ReportCounters {
        accepted: metrics.accepted("loss"),
        duplicate: metrics.rejected(RejectCause::Duplicate),
        far_ahead: metrics.rejected(RejectCause::BadIteration),
    };

    // The scheduler's own reply subjects are no client's inbox.
    let own_inboxes: Vec<String> = [&config.nats_auth, &config.state_auth]
        .iter()
        .filter_map(|a| a.inbox_prefix.clone())
        .filter(|p| !config.reply_prefixes.contains(p))
        .collect();
    let mut ingest = Ingest {
        client: client.clone(),
        state_client: state_client.clone(),
        durable,
        term,
        own_inboxes,
        last_stream_seq: 0,
        replay_until,
        ended: ended::Ended::new(ended_keep(&config), ENDED_CAP, LATE_HELLO_WAIT),
        was_disconnected: false,
        config,
        allocator: allocator.clone(),
        arbiters: job_arbiters,
        next_arbiter: 0,
        jobs: HashMap::new(),
        metrics,
        report_counters,
        last_logged: HashMap::new(),
        bus: counters,
        intake: ingest_intake,
    };
    ingest.restore(saved);
    tokio::pin!(shutdown);
    let shortest = [ingest.config.idle_job_timeout, ingest.config.stale_job].into_iter().flatten().min();
    let sweep_every =
        shortest.map_or(Duration::from_secs(5), |t| (t / 4).clamp(Duration::from_millis(50), Duration::from_secs(5)));
    let mut sweep = tokio::time::interval(sweep_every);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = sweep.tick() => ingest.sweep(),
            Some((job, reason)) = ending.recv() => ingest.end_job(&job, reason, None),
            message = losses.next() => match message {
                Some((message, seq)) => ingest.stream_message(message, seq).await,
                None => break,
            },
            message = messages.next() => match message {
                Some(message) => ingest.handle(message, None).await,
                None => break,
            },
            Some(message) = owner_bids.next() => ingest.owner_bids(message),
        }
    }
    info!("slaq scheduler stopping");
    allocator.do_send(StopAllocator);
    if let Some(stop) = stop_http {
        let _ = stop.send(());
    }
    ingest.stop(arbiters).await;
    allocator_thread.stop();
    Ok(())
}

/// The durable state, as `state_mode` asks: JetStream when the server has it (`auto`), required
/// (`jetstream`), or none.
async fn open_state(state_client: &async_nats::Client, config: &ServeConfig) -> Result<Option<Durable>, ServiceError> {
    // A server whose INFO says it has JetStream but does not answer the state connection has
    // refused it (credentials, account, permissions): never a reason to run without durable
    // state. Read after the attempt: the client has the server's INFO once it is connected.
    let server_has_jetstream = || state_client.server_info().jetstream;
    Ok(match config.state_mode {
        StateMode::None => {
            info!("state.mode = none: core NATS only (at most once; nothing survives a restart)");
            None
        }
        mode => match Durable::open(state_client, &config.subjects, &config.durable, config.fence.clone()).await {
            Ok(Some(durable)) => Some(durable),
            Ok(None) if server_has_jetstream() => {
                return Err(ServiceError::StateRefused {
                    user: config.state_auth.user.clone().unwrap_or_else(|| "(no user)".into()),
                    detail: "its JetStream API did not answer the state connection".into(),
                });
            }
            Err(e) => return Err(e.into()),
            Ok(None) if mode == StateMode::JetStream => return Err(ServiceError::NoJetStream),
            Ok(None) => {
                warn!(
                    "the NATS server has no JetStream: core NATS only (at most once; nothing survives a restart); \
                     state.mode = \"none\" says so on purpose, \"jetstream\" refuses to start without it"
                );
                None
            }
        },
    })
}

/// `/metrics`, `/healthz` and `/readyz` on `addr`: the address bound, and the sender that stops
/// the listener.
async fn serve_http(
    addr: SocketAddr,
    state: http::HttpState,
) -> Result<(SocketAddr, tokio::sync::oneshot::Sender<()>), ServiceError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ServiceError::Http { addr, source })?;
    let bound = listener.local_addr().map_err(|source| ServiceError::Http { addr, source })?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let server = axum::serve(listener, http::router(state)).with_graceful_shutdown(async move {
            let _ = stop_rx.await;
        });
        if let Err(e) = server.await {
            warn!(error = %e, "HTTP listener failed");
        }
    });
    info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    Ok((bound, stop_tx))
}

fn allocator_settings(config: &ServeConfig, term: Option<u64>) -> AllocatorSettings {
    AllocatorSettings {
        epoch: config.epoch,
        policy: config.policy,
        plan: config.plan,
        place: config.place,
        worker_timeout: config.worker_timeout,
        stale_job: config.stale_job,
        stall_timeout: config.stall_timeout,
        min_generation: config.min_generation,
        rendezvous: config.rendezvous,
        restart_amortisation: config.restart_amortisation,
        bid_horizon_s: config.horizon_s,
        completion_weight: config.completion_weight,
        tenants: config.tenants.clone(),
        term,
        replica: config.ha.as_ref().map(|ha| ha.replica.clone()),
    }
}

/// How long a read that checks a gap in the reports stream may take.
const GAP_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// A message and, when it came from the reports stream, its stream sequence.
type Kept = (async_nats::Message, Option<u64>);

/// Loss reports (and byes, with durable state) on a stream of their own, polled first: they are
/// nearly all the traffic. The rest (hellos, heartbeats, status requests) share a merged stream.
type Inputs = (
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Kept>>>,
    futures_util::stream::SelectAll<async_nats::Subscriber>,
);

/// Subscribes to everything the scheduler reads (not yet flushed). With durable state, reports and byes come from
/// the stream (first those kept there, then new ones), each with its stream sequence: nothing
/// published while the scheduler was down (restarting, failing over, or NATS itself) is missed.
async fn subscribe(
    client: &async_nats::Client,
    config: &ServeConfig,
    durable: Option<&Durable>,
) -> Result<Inputs, ServiceError> {
    let [hello, job_status, loss, bye, worker_hello, worker_beat] = config.subjects.scheduler_subscriptions();
    let [tenant_hello, tenant_status, tenant_loss, tenant_bye] = config.subjects.tenant_subscriptions();
    let subscribe = |subject: String| {
        let client = client.clone();
        async move { client.subscribe(subject.clone()).await.map_err(|source| BusError::Subscribe { subject, source }) }
    };
    let mut subscriptions = Vec::new();
    let losses: std::pin::Pin<Box<dyn futures_util::Stream<Item = Kept>>> = match durable {
        // Shared work: the partitions' owners read the reports and byes.
        Some(_) if config.durable.partitions.is_some() => Box::pin(futures_util::stream::pending()),
        Some(d) => Box::pin(d.reports().await?.filter_map(|m| async move {
            match m {
                Ok(m) if skipped_by_the_server(m.subject.as_str()) => None,
                Ok(m) => {
                    let seq = m.info().ok().map(|i| i.stream_sequence);
                    Some((m.message, seq))
                }
                Err(e) => {
                    warn!(error = %e, "reading the reports stream");
                    None
                }
            }
        })),
        None => {
            subscriptions.push(subscribe(bye).await?);
            subscriptions.push(subscribe(tenant_bye).await?);
            let tenants_loss = subscribe(tenant_loss).await?;
            Box::pin(futures_util::stream::select(subscribe(loss).await?, tenants_loss).map(|m| (m, None)))
        }
    };
    for subject in [hello, job_status, worker_hello, worker_beat, config.subjects.ctl_status()] {
        subscriptions.push(subscribe(subject).await?);
    }
    // Tenants' jobs (`job.<tenant>.<name>.*`); a partitioned scheduler refuses their hellos.
    for subject in [tenant_hello, tenant_status] {
        subscriptions.push(subscribe(subject).await?);
    }
    Ok((losses, futures_util::stream::select_all(subscriptions)))
}

/// Whether a test's fail point `reports-skip` (its argument a subject) has the consumer lose
/// this message, as nats-server 2.9 did after a purge of one subject: the gap read must find it
/// by sequence, every time (a fail point is nothing outside the tests' builds).
fn skipped_by_the_server(subject: &str) -> bool {
    fail::fail_point!("reports-skip", |skip: Option<String>| skip.as_deref() == Some(subject));
    // Outside the tests' builds the fail point is nothing, and `subject` unused.
    let _ = subject;
    false
}

/// A job as the ingest loop sees it: where its reports go, how fast they may come, and when it
/// was last heard from.
struct Route {
    /// Its actor (`None`: it runs on its partition's owner, `[cluster] shared`).
    addr: Option<Addr<JobActor>>,
    limiter: governor::DefaultDirectRateLimiter,
    /// Its reports refused for its rate or a full mailbox (its own excess only).
    dropped: u64,
    /// Its last report or hello (or its restore).
    last_heard: Instant,
    /// Silent for longer than `stale_job` (the allocator was told).
    quiet: bool,
    /// A submitted job's command: kept when a later hello has none; such a job is supervised
    /// (restarted when it fails or stalls), not forgotten for silence.
    command: Option<JobCommand>,
    /// The stream sequence its predecessor of the same id ended at (`JobSpec::ended_before`):
    /// stream messages up to it are not its own.
    ended_before: Option<u64>,
    /// Its hello was read (not only its reports, `register_on_report`).
    announced: bool,
}

impl Route {
    /// A job just heard from.
    fn new(addr: Option<Addr<JobActor>>, command: Option<JobCommand>, quota: governor::Quota) -> Route {
        let limiter = governor::RateLimiter::direct(quota);
        Route {
            addr,
            limiter,
            dropped: 0,
            last_heard: Instant::now(),
            quiet: false,
            command,
            ended_before: None,
            announced: true,
        }
    }
}

/// Answers a request; a failure is logged.
async fn send_reply<T: serde::Serialize>(client: &async_nats::Client, reply: String, encoding: Encoding, message: &T) {
    if let Err(e) = crate::bus::publish(client, reply, encoding, message).await {
        warn!(error = %e, "cannot send a reply");
    }
}

/// A status answer that fits in one NATS message: the jobs (and workers) the allocator listed
/// for the request, in id order, cut at `limit` or where the encoded answer would exceed the
/// server's payload limit; `truncated` says so.
fn fit_status(
    mut snapshot: StatusSnapshot,
    request: &StatusRequest,
    encoding: Encoding,
    max_payload: usize,
) -> StatusSnapshot {
    // The allocator sent the totals and only the jobs asked for, at most one past the limit.
    let limit = request.limit.unwrap_or(usize::MAX);
    if snapshot.jobs.len() > limit || snapshot.workers.len() > limit {
        snapshot.jobs.truncate(limit);
        snapshot.workers.truncate(limit);
        snapshot.truncated = true;
    }
    // Halve the lists until the answer fits (with room for headers).
    let budget = max_payload.saturating_sub(1024);
    while protocol::encode(encoding, &snapshot).map_or(0, |b| b.len()) > budget
        && !(snapshot.jobs.is_empty() && snapshot.workers.is_empty() && snapshot.ended.is_empty())
    {
        let (jobs, workers) = (snapshot.jobs.len() / 2, snapshot.workers.len() / 2);
        snapshot.jobs.truncate(jobs);
        snapshot.workers.truncate(workers);
        // The newest outcomes stay.
        snapshot.ended.drain(..snapshot.ended.len() / 2);
        snapshot.truncated = true;
    }
    snapshot
}

struct Ingest {
    client: async_nats::Client,
    /// The state connection (the partitions' owners, with shared work).
    state_client: async_nats::Client,
    durable: Option<Durable>,
    /// This scheduler's term, in its answers to hellos.
    term: Option<u64>,
    /// Reply subjects that are the scheduler's own (never answered).
    own_inboxes: Vec<String>,
    /// The last stream sequence read from the reports stream.
    last_stream_seq: u64,
    /// The stream's last sequence when this scheduler started: up to it, the stream is read
    /// again (a replay), and a report of an unknown job registers none.
    replay_until: u64,
    /// Jobs that said bye: their later reports bring none back (see `ended`).
    ended: ended::Ended,
    /// NATS was unreachable at the last sweep: silence then is nobody's fault.
    was_disconnected: bool,
    config: ServeConfig,
    allocator: Addr<AllocatorActor>,
    arbiters: Vec<ArbiterHandle>,
    next_arbiter: usize,
    jobs: HashMap<String, Route>,
    /// Message counters by kind and cause (also what `status` shows).
    metrics: Arc<Metrics>,
    /// What job actors count reports under.
    report_counters: ReportCounters,
    last_logged: HashMap<RejectCause, Instant>,
    bus: Arc<BusCounters>,
    /// With shared work (`[cluster] shared`): the owners' bids, merged; job actors run on the
    /// partitions' owners, not here.
    intake: Option<intake::Intake>,
}

impl Ingest {
    /// Stops the job actors (each saving first) and their arbiters, lets the last saves reach
    /// the writer, and delivers what is queued before the connection goes.
    async fn stop(&self, arbiters: Vec<Arbiter>) {
        for addr in self.jobs.values().filter_map(|r| r.addr.as_ref()) {
            addr.do_send(SaveNow);
            addr.do_send(Stop);
        }
        for arbiter in arbiters {
            arbiter.stop();
        }
        if let Some(d) = &self.durable {
            // The job actors' last saves (SaveNow) reach the writer first.
            tokio::time::sleep(Duration::from_millis(50)).await;
            d.flush(Duration::from_secs(3)).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.flush()).await;
    }

    /// Starts the saved jobs with their predictors and hands the saved workers and assignments
    /// to the allocator. At most `max_jobs` jobs come back: those serving workers first, then
    /// those with a predictor, then the rest, in id order.
    fn restore(&mut self, mut saved: SavedState) {
        let num_workers = saved.workers.len();
        let serving: std::collections::HashSet<&str> = saved.assignments.values().map(String::as_str).collect();
        let rank = |(spec, predictor): &(JobSpec, Option<Bytes>)| {
            (!serving.contains(spec.job.as_str()), predictor.is_none(), spec.job.clone())
        };
        saved.jobs.sort_by_key(rank);
        let (mut restored, mut refused, mut undecodable) = (0usize, 0usize, 0usize);
        for (spec, predictor) in saved.jobs {
            if self.jobs.len() >= self.config.max_jobs {
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
            if self.start_job(spec, predictor).is_ok() {
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

    /// A message of the reports stream. The consumer reads the whole stream, so past the
    /// replay its sequences follow one another; a gap is checked with a read at the gap's start,
    /// and a message found there (the server skipped it: nats-server 2.9 did after a purge of
    /// one subject) is counted, logged and handled before this one.
    async fn stream_message(&mut self, message: async_nats::Message, seq: Option<u64>) {
        if let (Some(seq), Some(d)) = (seq, self.durable.clone()) {
            let mut next = self.last_stream_seq + 1;
            // From the stream's first message on: a skip of the very first is a gap too.
            while self.last_stream_seq >= self.replay_until && next < seq {
                match tokio::time::timeout(GAP_READ_TIMEOUT, d.message_from(next)).await {
                    Ok(Ok(Some((skipped, at)))) if at < seq => {
                        self.metrics.stream_skipped.inc();
                        warn!(sequence = at, subject = %skipped.subject, "the reports stream skipped a message on this consumer: read and handled by sequence");
                        self.handle(skipped, Some(at)).await;
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
        self.handle(message, seq).await;
    }

    /// Handles one message; `seq` is its sequence in the reports stream if it came from there
    /// (a stream message's reply subject is JetStream's, never answered).
    async fn handle(&mut self, message: async_nats::Message, seq: Option<u64>) {
        if let Some(seq) = seq {
            self.last_stream_seq = self.last_stream_seq.max(seq);
        }
        let encoding = crate::bus::encoding_of(&message);
        let reply = message.reply.as_ref().map(|r| r.as_str()).filter(|_| seq.is_none());
        let subject = message.subject.as_str();
        let result = match reply {
            Some(r) if !protocol::valid_reply(r, &self.config.reply_prefixes, &self.own_inboxes) => {
                Err(ProtocolError::Invalid("reply subject is not an inbox", RejectCause::BadReply))
            }
            _ => self.dispatch(subject, &message.payload, encoding, reply, seq).await,
        };
        match result {
            Ok(Some(kind)) => self.metrics.accepted(kind).inc(),
            Ok(None) => {}
            Err(error) => {
                let cause = error.cause();
                self.metrics.rejected(cause).inc();
                let now = Instant::now();
                let quiet = self.last_logged.get(&cause).is_some_and(|t| now - *t < Duration::from_secs(10));
                if !quiet {
                    self.last_logged.insert(cause, now);
                    warn!(cause = cause.as_str(), subject, error = %error, "message rejected (logged once per cause every 10 s)");
                }
                // Never on a reply subject that is not an inbox.
                if let Some(reply) = reply.filter(|_| cause != RejectCause::BadReply) {
                    self.reply(reply, encoding, &Ack::error(error.to_string()).with_term(self.term)).await;
                }
            }
        }
    }

    async fn reply<T: serde::Serialize>(&self, reply: &str, encoding: Encoding, message: &T) {
        send_reply(&self.client, reply.to_string(), encoding, message).await;
    }

    /// A partition owner's bids (`[cluster] shared`): merged, then handed to the allocator;
    /// jobs the owners report ended leave the routing table. A message that does not decode is
    /// counted and dropped.
    fn owner_bids(&mut self, message: async_nats::Message) {
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
        for (job, _) in &merged.bids {
            if !self.jobs.contains_key(job) {
                let mut route = Route::new(None, None, self.config.report_quota);
                // Its hello reached its owner; this leader may not have read it yet.
                route.announced = false;
                self.jobs.insert(job.clone(), route);
            }
        }
        let now = Instant::now();
        for (job, _) in &merged.gone {
            // A job whose hello has not reached this leader yet: when it does, it starts nothing.
            let announced = self.jobs.remove(job).is_some_and(|r| r.announced);
            self.ended.end(job, 0, now, announced);
        }
        if !(merged.bids.is_empty() && merged.gone.is_empty() && merged.quiet.is_empty()) {
            self.allocator.do_send(Input::Remote(merged));
        }
    }

    /// What the scheduler accepts of a message (`[scheduler]` limits).
    fn limits<'t>(&self, tenants: Option<&'t crate::schedule::tenants::TenantSet>) -> InboundLimits<'t> {
        InboundLimits {
            max_payload_bytes: self.config.max_payload_bytes,
            max_min_workers: self.config.max_min_workers,
            // Partitions map one-token ids only: a tenant's job there would lose its reports.
            tenants: match tenants {
                _ if self.config.durable.partitions.is_some() => protocol::Tenants::OneToken,
                Some(t) => protocol::Tenants::Only(&t.names),
                None => protocol::Tenants::Any,
            },
        }
    }

    /// A job was heard from: its silence ends.
    fn heard(&mut self, id: &str) {
        if let Some(route) = self.jobs.get_mut(id) {
            route.last_heard = Instant::now();
            if std::mem::take(&mut route.quiet) {
                self.allocator.do_send(Input::JobQuiet { job: id.to_string(), quiet: false });
            }
        }
    }

    /// Handles one message; returns the kind to count as accepted here (`None`: counted elsewhere).
    async fn dispatch(
        &mut self,
        subject: &str,
        payload: &Bytes,
        encoding: Encoding,
        reply: Option<&str>,
        seq: Option<u64>,
    ) -> Result<Option<&'static str>, ProtocolError> {
        // Only a hello reads the tenants: a report does not touch their lock.
        let tenants = if subject.ends_with(".hello") { self.config.tenants.get() } else { None };
        let message =
            protocol::inbound(&self.config.subjects, subject, payload, encoding, &self.limits(tenants.as_deref()))?;
        // A report is counted by its job's actor, which knows whether it is new, and a
        // heartbeat by the allocator, which knows whether the worker is.
        let kind = (!matches!(message, Inbound::JobLoss { .. } | Inbound::WorkerBeat { .. })).then(|| message.kind());
        match message {
            Inbound::JobLoss { job, point } => self.report(job, point, seq)?,
            Inbound::JobHello(spec) => self.job_hello(*spec, reply, encoding).await?,
            Inbound::JobBye(end) => self.job_bye(end, seq)?,
            Inbound::WorkerHello(spec) => {
                self.allocator.do_send(Input::WorkerHello(spec));
                if let Some(reply) = reply {
                    self.reply(reply, encoding, &Ack::ok().with_term(self.term)).await;
                }
            }
            Inbound::WorkerBeat { worker, running } => {
                self.allocator.do_send(Input::WorkerBeat { worker: worker.to_string(), running })
            }
            Inbound::Status(request) => {
                let reply =
                    reply.ok_or(ProtocolError::Invalid("status needs a reply subject", RejectCause::UnknownSubject))?;
                self.status(request, false, reply, encoding);
            }
            Inbound::JobStatus { job } => {
                let reply =
                    reply.ok_or(ProtocolError::Invalid("status needs a reply subject", RejectCause::UnknownSubject))?;
                let request = StatusRequest { jobs: Some(job.to_string()), limit: None };
                self.status(request, true, reply, encoding);
            }
        }
        Ok(kind)
    }

    /// A loss report to its job's actor (a job unknown so far is registered, if allowed). A job
    /// flooding reports loses its own excess, never another job's reports.
    fn report(&mut self, id: &str, point: crate::protocol::LossPoint, seq: Option<u64>) -> Result<(), ProtocolError> {
        match self.jobs.get(id) {
            Some(route) if !ended::ours(route.ended_before, seq) => {
                return Err(ProtocolError::Invalid("a report of an earlier job of this id", RejectCause::Ended));
            }
            Some(_) => {}
            None if self.ended.get(id).is_some() => {
                return Err(ProtocolError::Invalid("a report after the job's bye", RejectCause::Ended));
            }
            None if seq.is_some_and(|s| s <= self.replay_until) => {
                return Err(ProtocolError::Invalid("a kept report of a job no longer known", RejectCause::UnknownJob));
            }
            None => {}
        }
        if !self.jobs.contains_key(id) {
            if !self.config.register_on_report {
                return Err(ProtocolError::Invalid("no such job (say hello first)", RejectCause::UnknownJob));
            }
            let spec = JobSpec::new(id);
            self.start_job(spec.clone(), None)?;
            // Its hello, if it says one, may still be on its way.
            if let Some(route) = self.jobs.get_mut(id) {
                route.announced = false;
            }
            // Saved once admitted: a job refused at max_jobs leaves nothing behind.
            if let Some(d) = &self.durable {
                d.save_job(&spec);
            }
        }
        let Some(route) = self.jobs.get_mut(id) else {
            return Err(ProtocolError::Invalid("no such job", RejectCause::UnknownJob));
        };
        // A job flooding reports loses its own excess, never another job's reports.
        if route.limiter.check().is_err() {
            route.dropped += 1;
            return Err(ProtocolError::Invalid("job over its report rate", RejectCause::RateLimited));
        }
        let Some(addr) = &route.addr else {
            return Err(ProtocolError::Invalid("job runs on another replica", RejectCause::UnknownJob));
        };
        addr.try_send(Report(point)).map_err(|e| {
            route.dropped += 1;
            match e {
                SendError::Full(_) => ProtocolError::Invalid("job actor mailbox full", RejectCause::Overloaded),
                SendError::Closed(_) => ProtocolError::Invalid("job has stopped", RejectCause::UnknownJob),
            }
        })?;
        self.heard(id);
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
        if !self.jobs.contains_key(&id) && self.ended.late_hello(&id, Instant::now()) {
            // The job's own hello, read after its bye: the job has ended, and this starts nothing.
            if let Some(reply) = reply {
                self.reply(reply, encoding, &Ack::ok().with_term(self.term)).await;
            }
            return Ok(());
        }
        if self.jobs.get(&id).is_some_and(|r| r.announced) {
            self.bye_before_hello(&id).await;
        }
        match self.jobs.get_mut(&id) {
            Some(route) => {
                route.announced = true;
                // The submitted command stays when the job's own process says hello.
                if spec.command.is_none() {
                    spec.command = route.command.clone();
                } else if spec.command != route.command {
                    route.command = spec.command.clone();
                    let (job, addr, command) = (id.clone(), route.addr.clone(), spec.command.clone());
                    self.allocator.do_send(JobStarted { job, addr, command });
                }
                spec.ended_before = route.ended_before;
                if let Some(addr) = &route.addr {
                    addr.do_send(UpdateSpec(spec.clone()));
                }
            }
            None => {
                // A new job of an id that ended: the stream up to its predecessor's bye, and
                // what has been read (its late reports, refused), is not its own. Not the
                // stream's end: the new job's own reports and bye may be there, not read yet.
                spec.ended_before = self.ended.get(&id).map(|end| end.max(self.last_stream_seq));
                self.start_job(spec.clone(), None)?;
                self.ended.hello(&id);
            }
        }
        self.heard(&id);
        let ack = Ack::ok().with_term(self.term);
        match (&self.durable, reply) {
            // Answered once the spec is saved: an answered hello survives a fail-over or its
            // partition's takeover. Not answered if the write is given up (the lease was lost)
            // or takes longer than a hello waits: the job says hello again.
            (Some(d), Some(reply)) => {
                let saved = d.save_job_acked(&spec);
                let (client, reply) = (self.client.clone(), reply.to_string());
                tokio::spawn(async move {
                    if let Ok(Ok(())) = tokio::time::timeout(HELLO_SAVE_WAIT, saved).await {
                        send_reply(&client, reply, encoding, &ack).await;
                    }
                });
            }
            (Some(d), None) => d.save_job(&spec),
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
        let Some(route) = self.jobs.get(id) else { return };
        let read = self.last_stream_seq.max(route.ended_before.unwrap_or(0));
        let bye = match tokio::time::timeout(GAP_READ_TIMEOUT, d.unread_bye(id, read)).await {
            Ok(Ok(bye)) => bye,
            Ok(Err(e)) => return warn!(job = id, error = %e, "cannot read the job's first unread bye"),
            Err(_) => return warn!(job = id, "cannot read the job's first unread bye: timed out"),
        };
        if let Some((end, seq)) = bye
            && self.jobs.get(id).is_some_and(|r| ended::ours(r.ended_before, Some(seq)))
        {
            self.end_job(id, end.reason, Some(seq));
        }
    }

    /// A job's bye: the job ends. A bye of a job already gone (read again in a replay) is
    /// remembered as its end; one of an earlier job of the same id ends nothing.
    fn job_bye(&mut self, end: crate::protocol::JobEnd, seq: Option<u64>) -> Result<(), ProtocolError> {
        let id = end.job.as_str();
        let Some(route) = self.jobs.get(id) else {
            let known = self.ended.get(id).is_some();
            // Its hello may be on its way (core NATS), unless this is a replay of the stream.
            let replayed = seq.is_some_and(|s| s <= self.replay_until);
            self.ended.end(id, seq.unwrap_or(self.last_stream_seq), Instant::now(), replayed);
            return Err(match known {
                true => ProtocolError::Invalid("a bye of a job that ended", RejectCause::Ended),
                false => ProtocolError::Invalid("no such job", RejectCause::UnknownJob),
            });
        };
        if !ended::ours(route.ended_before, seq) {
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
            self.jobs.iter().filter(|(_, r)| r.dropped > 0).map(|(id, r)| (id.clone(), r.dropped)).collect();
        let allocator = self.allocator.clone();
        let client = self.client.clone();
        let shared = self.intake.as_ref().filter(|_| !own).map(|i| (self.state_client.clone(), i.partitions()));
        let prefix = self.config.subjects.prefix().to_string();
        let reply = reply.to_string();
        let max_payload = self.client.server_info().max_payload.max(4096);
        // Answered off the ingest loop: the allocator may be mid-epoch.
        actix::spawn(async move {
            let filter = GetStatus { jobs: request.jobs.clone(), limit: request.limit, own };
            let Ok(mut snapshot) = allocator.send(filter).await else { return };
            if let Some((state, count)) = shared {
                match crate::bus::partitions::owners(&state, &prefix, count).await {
                    Ok(owners) => snapshot.owners = owners,
                    Err(e) => warn!(error = %e, "cannot read the partitions' owners"),
                }
            }
            for job in &mut snapshot.jobs {
                job.dropped = dropped.get(&job.job).copied().unwrap_or(0);
            }
            let snapshot = fit_status(snapshot, &request, encoding, max_payload);
            if let Err(e) = crate::bus::publish(&client, reply, encoding, &snapshot).await {
                warn!(error = %e, "cannot answer a status request");
            }
        });
    }

    /// Ends a job (its bye, or the allocator's when a submitted job's restarts are used up):
    /// its actor stops, its kept messages up to `seq` go, and its workers go to others.
    fn end_job(&mut self, id: &str, reason: EndReason, seq: Option<u64>) {
        let Some(route) = self.jobs.remove(id) else { return };
        self.ended.end(id, seq.unwrap_or(self.last_stream_seq), Instant::now(), route.announced);
        if let Some(addr) = route.addr {
            addr.do_send(Stop);
        } else if let Some(d) = &self.durable {
            // Its actor runs on its partition's owner, which reads this bye as the job's own.
            d.end_in_stream(id, reason);
        }
        if let Some(d) = &self.durable {
            d.forget_job(id);
        }
        let outcome = Outcome::from(reason);
        self.allocator.do_send(Input::JobStopped { job: id.to_string(), outcome });
        // Per job, so debug: at 100,000 jobs a line each would be the log.
        debug!(job = id, reason = %outcome, "job left");
    }

    /// Every few seconds: forgets jobs silent for `idle_job_timeout` (whatever their history: a
    /// restored job whose bye was lost is one of them), and tells the allocator which jobs went
    /// quiet for `stale_job`. While NATS is unreachable nobody is silent by their own fault:
    /// after an outage every job's clock starts again.
    fn sweep(&mut self) {
        let now = Instant::now();
        // Ends are remembered for their time here too (with shared work, those the owners report).
        self.ended.expire(now);
        if self.intake.is_some() {
            // The partitions' owners hear the jobs' reports and sweep them.
            return;
        }
        if self.client.connection_state() != async_nats::connection::State::Connected {
            self.was_disconnected = true;
            return;
        }
        if std::mem::take(&mut self.was_disconnected) {
            self.jobs.values_mut().for_each(|r| r.last_heard = now);
            return;
        }
        if let Some(timeout) = self.config.idle_job_timeout {
            // A submitted job is silent until its processes start (it may wait for workers):
            // its processes are supervised instead (restarted when they fail or stall).
            let idle: Vec<String> = self
                .jobs
                .iter()
                .filter(|(_, r)| r.command.is_none() && now.duration_since(r.last_heard) > timeout)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &idle {
                if let Some(addr) = self.jobs.remove(id).and_then(|r| r.addr) {
                    addr.do_send(Stop);
                }
                if let Some(d) = &self.durable {
                    d.forget_job(id);
                }
                self.allocator.do_send(Input::JobStopped { job: id.clone(), outcome: Outcome::Expired });
            }
            if !idle.is_empty() {
                self.metrics.jobs_expired.inc_by(idle.len() as u64);
                info!(jobs = idle.len(), timeout_s = timeout.as_secs_f64(), "forgot jobs silent for the idle timeout");
            }
        }
        if let Some(stale) = self.config.stale_job {
            for (id, route) in self.jobs.iter_mut() {
                if !route.quiet && route.command.is_none() && now.duration_since(route.last_heard) > stale {
                    route.quiet = true;
                    self.allocator.do_send(Input::JobQuiet { job: id.clone(), quiet: true });
                }
            }
        }
    }

    fn start_job(&mut self, spec: JobSpec, saved: Option<SavedJob>) -> Result<(), ProtocolError> {
        if self.jobs.len() >= self.config.max_jobs {
            return Err(ProtocolError::Invalid("too many jobs (max_jobs)", RejectCause::Overloaded));
        }
        let id = spec.job.clone();
        let command = spec.command.clone();
        let ended_before = spec.ended_before;
        // With shared work the job's actor runs on its partition's owner (`shard`).
        let addr = match self.intake {
            Some(_) => None,
            None => {
                let arbiter = &self.arbiters[self.next_arbiter % self.arbiters.len()];
                self.next_arbiter += 1;
                let job = JobSetup {
                    config: &self.config,
                    durable: self.durable.clone(),
                    counters: self.report_counters.clone(),
                    bids_to: self.allocator.clone().recipient(),
                };
                Some(job.spawn(arbiter, spec, saved))
            }
        };
        let mut route = Route::new(addr.clone(), command.clone(), self.config.report_quota);
        route.ended_before = ended_before;
        self.jobs.insert(id.clone(), route);
        self.allocator.do_send(JobStarted { job: id.clone(), addr, command });
        // Per job, so debug: at 100,000 jobs this line would be the log.
        debug!(job = id, "job joined");
        Ok(())
    }
}

/// What a job actor is started with (the scheduler's, or a partition owner's).
pub(crate) struct JobSetup<'a> {
    pub config: &'a ServeConfig,
    pub durable: Option<Durable>,
    pub counters: ReportCounters,
    pub bids_to: Recipient<crate::actors::job::BidUpdate>,
}

impl JobSetup<'_> {
    /// Starts a job's actor on `arbiter`, from its saved predictor if there is one.
    pub fn spawn(self, arbiter: &ArbiterHandle, spec: JobSpec, saved: Option<SavedJob>) -> Addr<JobActor> {
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
