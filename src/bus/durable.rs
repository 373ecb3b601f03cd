//! The scheduler's durable state in JetStream (works on nats-server 2.9 and 2.10+).
//!
//! - Stream `<prefix>_reports` (dots in the prefix become `_`) on the subjects
//!   `<prefix>.v1.job.*.loss` and `<prefix>.v1.job.*.bye`: every loss report and every bye,
//!   the last `report_history` per job and subject (older ones are discarded), messages no larger
//!   than the scheduler accepts, file storage. The scheduler reads it with an ordered consumer,
//!   so after a restart it first replays what it missed, byes included. The duplicate window is
//!   the server's smallest (100 ms): `Nats-Msg-Id` is stream-wide, so a job could otherwise
//!   squat another job's ids; the job actors' own idempotence (a repeated `iter` is a
//!   duplicate) is what de-duplicates.
//! - Key-value bucket `<prefix>_state`: `job.<id>` (the `JobSpec`), `pred.<id>` (the job's
//!   predictor, saved every few seconds), `plan.<id>` (its service and fairness-floor ledger,
//!   saved about every 30 s when it changed) and `workers.<s>` for s < `WORKER_SHARDS` (the
//!   `WorkerSpec`s and jobs of the workers in shard s, encoded when written, so that a burst of
//!   hellos or moves costs a write per shard, not per worker). The earlier layout's
//!   `worker.<id>` and `assign.<id>` are read too, moved into their shards, and deleted when
//!   their worker is forgotten. Values are MessagePack.
//!
//! Writes never block an actor: they are queued (the latest per key) for one writer task. The
//! writer is **fenced**: it writes only while the scheduler certainly holds its lease
//! ([`Fence`]), every write expects the key's last revision as this scheduler knows it (so a
//! write over someone else's is refused, not lost: a conflict), carries the writer's term in a
//! `Slaq-Term` header, and a write that fails is retried with backoff until it is written or
//! superseded by a newer value for its key. A deposed scheduler's queue is dropped.
//!
//! 2.9's pitfall: async-nats' `create_key_value` fails there, so the bucket's stream is created
//! directly and bound with `get_key_value`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, context::PublishErrorKind, kv, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::BusError;
use super::lease::Fence;
pub use super::provision::{DurableSettings, bucket_name, stream_name};
use super::provision::{kv_bucket_stream, reports_stream};
use crate::protocol::{self, Encoding, JobSpec, Subjects, WorkerSpec};

/// The header every state write carries: the term of the scheduler that wrote it.
pub const TERM_HEADER: &str = "Slaq-Term";

/// Everything the bucket held at start-up.
#[derive(Debug, Default)]
pub struct SavedState {
    pub jobs: Vec<(JobSpec, Option<Bytes>)>,
    /// Each job's attained service and floor ledger, as the allocator saved them.
    pub plans: HashMap<String, (f64, crate::schedule::FloorLedger)>,
    pub workers: Vec<WorkerSpec>,
    /// Worker → job (absent: idle).
    pub assignments: HashMap<String, String>,
    /// Values that did not decode (skipped, with a warning).
    pub undecodable: usize,
}

/// One key's last value as read from the bucket.
struct SavedEntry {
    key: String,
    value: Bytes,
    revision: u64,
    /// A value (not a delete or purge marker).
    put: bool,
}

/// How long a read of the bucket may wait for its next value.
const READ_IDLE: Duration = Duration::from_secs(30);

/// What the writer counts (the service's metrics read them).
#[derive(Debug, Default)]
pub struct DurableCounters {
    /// Write attempts that failed (each is retried until written or superseded).
    pub failed: AtomicU64,
    /// Writes refused because someone else had written the key since this scheduler knew it.
    pub conflicts: AtomicU64,
    /// Writes dropped because this scheduler was deposed.
    pub fenced: AtomicU64,
    /// Writes made.
    pub written: AtomicU64,
}

/// A handle to the durable state; cheap to clone (one per job actor: the JetStream handles
/// inside carry the stream's cached info, kilobytes, so they are shared, not copied).
#[derive(Clone)]
pub struct Durable(Arc<Inner>);

/// One queued write.
#[derive(Clone, Debug)]
enum Op {
    Put(Bytes),
    Delete,
    /// A shard of the workers (`workers.<s>`), encoded as it is when written: a burst of
    /// changes to a shard costs one write.
    Workers(u32),
}

#[derive(Debug)]
struct Pending {
    op: Op,
    attempts: u32,
    /// Not before this (backoff after a failure).
    not_before: Option<Instant>,
    /// After a conflict: not before the lease was renewed past this count (proof that this
    /// scheduler still leads before it writes over the other writer).
    after_renewal: Option<u64>,
    /// Told once this value, or a newer one of the key, is written (dropped unanswered if the
    /// write is given up: the lease was lost).
    written: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Pending {
    fn new(op: Op) -> Self {
        Pending { op, attempts: 0, not_before: None, after_renewal: None, written: Vec::new() }
    }
}

struct Inner {
    js: jetstream::Context,
    kv: kv::Store,
    bucket: String,
    stream: String,
    subjects: Subjects,
    /// `DurableSettings::partitions`: where a job's bye goes when the leader ends it.
    partitions: Option<u32>,
    fence: Fence,
    /// The term written in every write's header (0: none yet).
    term: AtomicU64,
    counters: Arc<DurableCounters>,
    /// Writes not yet made, latest per key . One writer task
    /// drains it, a bounded number at a time, so a burst (200,000 jobs registering) costs one
    /// value per key, not one task per write.
    pending: std::sync::Mutex<HashMap<String, Pending>>,
    /// Writes handed to JetStream and not answered yet.
    in_flight: AtomicUsize,
    /// The last revision of each key as this scheduler knows it (absent: the key does not
    /// exist); keys in `stale` must be read again before they are written.
    revisions: std::sync::Mutex<(HashMap<String, u64>, HashSet<String>)>,
    wake: Arc<tokio::sync::Notify>,
    /// The workers' specs and assignments by shard, as saved (`WORKER_SHARDS` keys), each
    /// locked on its own: the writer encodes one while the allocator changes others.
    workers: Vec<std::sync::Mutex<BTreeMap<String, SavedWorker>>>,
    /// Workers with keys of the earlier layout (`worker.<id>`, `assign.<id>`): deleted when the
    /// worker is forgotten, so that no later start finds it there.
    legacy_workers: std::sync::Mutex<HashSet<String>>,
}

/// Shards of the workers' state: each is one key, `workers.<s>`, holding its workers' specs and
/// assignments (one key per worker cost a million writes to register a million workers).
pub const WORKER_SHARDS: u32 = 256;

/// A worker as saved: its spec and the job it serves (`None`: idle).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct SavedWorker {
    pub spec: WorkerSpec,
    #[serde(default)]
    pub job: Option<String>,
}

/// The shard a worker is saved in.
pub fn worker_shard(worker: &str) -> u32 {
    crate::partition::of(worker, WORKER_SHARDS)
}

/// The workers a shard's value holds (`None`: it does not decode).
pub fn decode_worker_shard(bytes: &[u8]) -> Option<Vec<SavedWorker>> {
    decode(bytes)
}

/// Bucket writes in flight at once.
const WRITES_IN_FLIGHT: usize = 128;
/// Backoff after a failed write: doubling from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));
/// How long a single write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What became of one write.
enum Outcome {
    Written,
    Conflict,
    /// The key's last write was this scheduler's own (one that timed out here but landed), with
    /// another value: written again at once, nobody else's doing.
    Again,
    Failed(String),
}

/// Drains `pending` for as long as the handle lives.
async fn writer(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        if this.fence.deposed() {
            let dropped = std::mem::take(&mut *this.pending.lock().unwrap_or_else(|p| p.into_inner()));
            if !dropped.is_empty() {
                this.counters.fenced.fetch_add(dropped.len() as u64, Ordering::Relaxed);
                warn!(writes = dropped.len(), "deposed: state writes dropped");
            }
        }
        let now = Instant::now();
        let batch: Vec<(String, Pending)> = if this.fence.holds() {
            let renewals = this.fence.renewals();
            let mut pending = this.pending.lock().unwrap_or_else(|p| p.into_inner());
            let due: Vec<String> = pending
                .iter()
                .filter(|(_, p)| p.not_before.is_none_or(|t| t <= now))
                .filter(|(_, p)| p.after_renewal.is_none_or(|r| this.fence.is_unfenced() || renewals > r))
                .map(|(k, _)| k.clone())
                .collect();
            due.into_iter().filter_map(|k| pending.remove(&k).map(|p| (k, p))).collect()
        } else {
            Vec::new()
        };
        if batch.is_empty() {
            let wake = this.wake.clone();
            let idle = this.pending.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
            drop(this);
            // Woken by a write; with writes waiting (backoff, the lease), look again soon.
            let wait = if idle { Duration::from_secs(1) } else { Duration::from_millis(50) };
            let _ = tokio::time::timeout(wait, wake.notified()).await;
            continue;
        }
        this.in_flight.fetch_add(batch.len(), Ordering::Relaxed);
        let this_ref = &this;
        let results: Vec<(String, Pending, Outcome)> = futures_util::stream::iter(batch)
            .map(|(key, pending)| async move {
                let outcome = this_ref.apply(&key, &pending.op).await;
                this_ref.in_flight.fetch_sub(1, Ordering::Relaxed);
                (key, pending, outcome)
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        let mut logged = false;
        for (key, mut pending, outcome) in results {
            let retry = match outcome {
                Outcome::Written => {
                    this.counters.written.fetch_add(1, Ordering::Relaxed);
                    for waiter in pending.written {
                        let _ = waiter.send(());
                    }
                    continue;
                }
                Outcome::Conflict => {
                    this.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    if !logged {
                        warn!(key, "a state key was written by someone else: read again before writing");
                        logged = true;
                    }
                    pending.after_renewal = Some(this.fence.renewals());
                    pending
                }
                Outcome::Again => pending,
                Outcome::Failed(e) => {
                    this.counters.failed.fetch_add(1, Ordering::Relaxed);
                    if !logged {
                        warn!(key, error = %e, attempts = pending.attempts + 1, "saving state failed; retrying");
                        logged = true;
                    }
                    pending
                }
            };
            let mut retry = retry;
            retry.attempts += 1;
            let backoff = BACKOFF.0.saturating_mul(1 << retry.attempts.min(10)).min(BACKOFF.1);
            retry.not_before = Some(Instant::now() + backoff);
            // A newer value for the key supersedes the one that failed (and answers its waiters).
            match this.pending.lock().unwrap_or_else(|p| p.into_inner()).entry(key) {
                std::collections::hash_map::Entry::Occupied(mut newer) => {
                    newer.get_mut().written.append(&mut retry.written)
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(retry);
                }
            }
        }
    }
}

impl Inner {
    /// After a conflict: the key's last write, if this scheduler made it under its current
    /// term (a write that timed out here but landed): its revision, and whether it holds what
    /// `op` writes.
    async fn own_last_write(&self, key: &str, op: &Op) -> Option<(u64, bool)> {
        let term = self.term.load(Ordering::Relaxed);
        if term == 0 {
            return None;
        }
        let stream = self.js.get_stream_no_info(format!("KV_{}", self.bucket)).await.ok()?;
        let subject = format!("$KV.{}.{key}", self.bucket);
        let last =
            tokio::time::timeout(WRITE_TIMEOUT, stream.get_last_raw_message_by_subject(&subject)).await.ok()?.ok()?;
        let header = |name: &str| last.headers.get(name).map(|v| v.as_str().to_string());
        if header(TERM_HEADER)?.parse::<u64>().ok()? != term {
            return None;
        }
        let deleted = header("KV-Operation").is_some_and(|o| o == "DEL" || o == "PURGE");
        let same = match op {
            Op::Put(bytes) => !deleted && last.payload == *bytes,
            Op::Delete => deleted,
            Op::Workers(_) => false,
        };
        Some((last.sequence, same))
    }

    fn is_conflict(kind: PublishErrorKind) -> bool {
        matches!(kind, PublishErrorKind::WrongLastSequence)
    }

    /// The revision a write of `key` must expect, reading it again if it is stale.
    async fn expected_revision(&self, key: &str) -> Result<u64, String> {
        let stale = self.revisions.lock().unwrap_or_else(|p| p.into_inner()).1.contains(key);
        if stale {
            let entry = self.kv.entry(key).await.map_err(|e| e.to_string())?;
            let revision = entry.map_or(0, |e| e.revision);
            let mut revisions = self.revisions.lock().unwrap_or_else(|p| p.into_inner());
            revisions.1.remove(key);
            revisions.0.insert(key.to_string(), revision);
            return Ok(revision);
        }
        Ok(self.revisions.lock().unwrap_or_else(|p| p.into_inner()).0.get(key).copied().unwrap_or(0))
    }

    /// A shard of the workers as it is now: its value, or a delete once it is empty.
    fn workers_value(&self, shard: u32) -> Op {
        let Some(saved) = self.workers.get(shard as usize) else { return Op::Delete };
        let saved = saved.lock().unwrap_or_else(|p| p.into_inner());
        if saved.is_empty() {
            return Op::Delete;
        }
        let list: Vec<&SavedWorker> = saved.values().collect();
        match protocol::encode(Encoding::MsgPack, &list) {
            Ok(bytes) => Op::Put(Bytes::from(bytes)),
            Err(e) => {
                warn!(shard, error = %e, "cannot encode a shard of the workers");
                Op::Delete
            }
        }
    }

    async fn apply(&self, key: &str, op: &Op) -> Outcome {
        let resolved;
        let op = match op {
            Op::Workers(shard) => {
                resolved = self.workers_value(*shard);
                &resolved
            }
            op => op,
        };
        let expected = match self.expected_revision(key).await {
            Ok(r) => r,
            Err(e) => return Outcome::Failed(e),
        };
        let mut message = jetstream::message::PublishMessage::build()
            .header(TERM_HEADER, self.term.load(Ordering::Relaxed).to_string().as_str())
            .expected_last_subject_sequence(expected);
        message = match op {
            Op::Put(bytes) => message.payload(bytes.clone()),
            _ => message.header("KV-Operation", "DEL"),
        };
        // The last check before the write leaves: a scheduler paused since the batch began
        // (SIGSTOP) must not write once it may have lost its lease.
        if !self.fence.holds() {
            return Outcome::Failed("the lease is not certainly held".into());
        }
        let subject = format!("$KV.{}.{key}", self.bucket);
        let sent = tokio::time::timeout(WRITE_TIMEOUT, async {
            let ack = self.js.send_publish(subject, message).await?;
            ack.await
        })
        .await;
        match sent {
            Ok(Ok(ack)) => {
                self.revisions.lock().unwrap_or_else(|p| p.into_inner()).0.insert(key.to_string(), ack.sequence);
                Outcome::Written
            }
            Ok(Err(e)) if Self::is_conflict(e.kind()) => {
                if let Some((revision, same)) = self.own_last_write(key, op).await {
                    let mut revisions = self.revisions.lock().unwrap_or_else(|p| p.into_inner());
                    revisions.1.remove(key);
                    revisions.0.insert(key.to_string(), revision);
                    debug!(key, same, "a write of this scheduler that timed out had landed");
                    return if same { Outcome::Written } else { Outcome::Again };
                }
                let mut revisions = self.revisions.lock().unwrap_or_else(|p| p.into_inner());
                revisions.0.remove(key);
                revisions.1.insert(key.to_string());
                Outcome::Conflict
            }
            Ok(Err(e)) => Outcome::Failed(e.to_string()),
            Err(_) => Outcome::Failed("timed out".into()),
        }
    }
}

impl Durable {
    /// Creates the stream and the bucket if missing, and brings an existing stream made by an
    /// earlier version to this one's limits. `Ok(None)`: the server has no JetStream. Writes
    /// are made while `fence` holds.
    pub async fn open(
        client: &async_nats::Client,
        subjects: &Subjects,
        settings: &DurableSettings,
        fence: Fence,
    ) -> Result<Option<Durable>, BusError> {
        let js = jetstream::new(client.clone());
        let setup =
            |what: &str, e: &dyn std::fmt::Display| BusError::JetStream { what: what.into(), detail: e.to_string() };
        let config = reports_stream(subjects, settings);
        let created = tokio::time::timeout(settings.timeout, js.get_or_create_stream(config.clone())).await;
        let mut stream = match created {
            Err(_) => {
                warn!(timeout = ?settings.timeout, "JetStream did not answer (not enabled on this server, or this connection may not use it)");
                return Ok(None);
            }
            Ok(Err(e))
                if matches!(e.kind(), jetstream::context::CreateStreamErrorKind::JetStreamUnavailable)
                    || e.to_string().contains("not enabled") =>
            {
                return Ok(None);
            }
            Ok(Err(e)) => return Err(setup("JetStream reports stream", &e)),
            Ok(Ok(stream)) => stream,
        };
        let current = stream.info().await.map_err(|e| setup("JetStream reports stream", &e))?.config.clone();
        if current.subjects != config.subjects
            || current.max_message_size != config.max_message_size
            || current.max_messages_per_subject != config.max_messages_per_subject
            || current.max_age != config.max_age
            || current.duplicate_window != config.duplicate_window
        {
            let updated = stream::Config { num_replicas: current.num_replicas, ..config };
            js.update_stream(&updated).await.map_err(|e| setup("updating the reports stream", &e))?;
            debug!("reports stream brought to this version's limits");
        }
        let bucket = bucket_name(subjects.prefix());
        let kv_stream = kv_bucket_stream(&bucket, settings.replicas, Duration::ZERO);
        tokio::time::timeout(settings.timeout, js.get_or_create_stream(kv_stream))
            .await
            .map_err(|_| setup("JetStream", &"no answer while creating the state bucket"))?
            .map_err(|e| setup("JetStream state bucket", &e))?;
        let kv = js.get_key_value(&bucket).await.map_err(|e| setup("JetStream state bucket", &e))?;
        let inner = Arc::new(Inner {
            js,
            kv,
            bucket,
            stream: stream_name(subjects.prefix()),
            subjects: subjects.clone(),
            partitions: settings.partitions,
            fence,
            term: AtomicU64::new(0),
            counters: Arc::default(),
            pending: std::sync::Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            revisions: std::sync::Mutex::new((HashMap::new(), HashSet::new())),
            wake: Arc::new(tokio::sync::Notify::new()),
            workers: (0..WORKER_SHARDS).map(|_| std::sync::Mutex::default()).collect(),
            legacy_workers: std::sync::Mutex::default(),
        });
        tokio::spawn(writer(Arc::downgrade(&inner)));
        Ok(Some(Durable(inner)))
    }

    /// The term every later write carries.
    pub fn set_term(&self, term: u64) {
        self.0.term.store(term, Ordering::Relaxed);
    }

    pub fn counters(&self) -> Arc<DurableCounters> {
        self.0.counters.clone()
    }

    /// Writes queued and not yet made.
    pub fn pending(&self) -> usize {
        self.0.pending.lock().unwrap_or_else(|p| p.into_inner()).len() + self.0.in_flight.load(Ordering::Relaxed)
    }

    /// Reads the whole bucket (one ordered consumer, see `entries`), and remembers each key's
    /// revision for the writes that follow.
    pub async fn load(&self) -> Result<SavedState, BusError> {
        let entries = self.entries(&[">"], |_| true).await?;
        let mut state = SavedState::default();
        let (mut sharded, mut legacy) = (HashMap::<String, SavedWorker>::new(), HashMap::<String, SavedWorker>::new());
        let mut legacy_jobs: HashMap<String, String> = HashMap::new();
        let mut predictors: HashMap<String, Bytes> = HashMap::new();
        let mut specs: Vec<JobSpec> = Vec::new();
        for entry in entries {
            if !entry.put {
                continue;
            }
            let (key, value) = (entry.key, entry.value);
            let Some((kind, id)) = key.split_once('.') else { continue };
            match kind {
                "job" => match decode::<JobSpec>(&value) {
                    Some(spec) if spec.job == id => specs.push(spec),
                    _ => state.undecodable += 1,
                },
                "pred" => {
                    predictors.insert(id.to_string(), value);
                }
                "plan" => match decode::<(f64, crate::schedule::FloorLedger)>(&value) {
                    Some(plan) => {
                        state.plans.insert(id.to_string(), plan);
                    }
                    None => state.undecodable += 1,
                },
                "workers" => match (id.parse::<u32>(), decode_worker_shard(&value)) {
                    (Ok(shard), Some(list)) => {
                        for w in list {
                            let valid = worker_shard(&w.spec.worker) == shard
                                && protocol::valid_id(&w.spec.worker)
                                && w.job.as_deref().is_none_or(protocol::valid_job_id);
                            if valid {
                                sharded.insert(w.spec.worker.clone(), w);
                            } else {
                                state.undecodable += 1;
                            }
                        }
                    }
                    _ => state.undecodable += 1,
                },
                // The earlier layout, a key per worker: read, kept until the worker is forgotten,
                // and written into its shard.
                "worker" => match decode::<WorkerSpec>(&value) {
                    Some(spec) if spec.worker == id => {
                        legacy.insert(id.to_string(), SavedWorker { spec, job: None });
                    }
                    _ => state.undecodable += 1,
                },
                "assign" => match std::str::from_utf8(&value) {
                    Ok("") => {}
                    Ok(job) if protocol::valid_job_id(job) => {
                        legacy_jobs.insert(id.to_string(), job.to_string());
                    }
                    _ => state.undecodable += 1,
                },
                // This scheduler's own bookkeeping (`incarnation`).
                "meta" => {}
                _ => state.undecodable += 1,
            }
        }
        specs.sort_by(|a, b| a.job.cmp(&b.job));
        state.jobs = specs
            .into_iter()
            .map(|s| {
                let predictor = predictors.remove(&s.job);
                (s, predictor)
            })
            .collect();
        self.restore_workers(sharded, legacy, legacy_jobs, &mut state);
        if state.undecodable > 0 {
            warn!(undecodable = state.undecodable, "skipped state entries that did not decode");
        }
        Ok(state)
    }

    /// The workers read (`sharded`, and `legacy` keys of the earlier layout with their `jobs`)
    /// into `state` and into the shards this handle writes; a worker found only in legacy keys
    /// is written into its shard.
    fn restore_workers(
        &self,
        mut sharded: HashMap<String, SavedWorker>,
        legacy: HashMap<String, SavedWorker>,
        mut legacy_jobs: HashMap<String, String>,
        state: &mut SavedState,
    ) {
        let mut migrate = HashSet::new();
        *self.0.legacy_workers.lock().unwrap_or_else(|p| p.into_inner()) = legacy.keys().cloned().collect();
        for (id, mut w) in legacy {
            w.job = legacy_jobs.remove(&id);
            if let std::collections::hash_map::Entry::Vacant(slot) = sharded.entry(id) {
                migrate.insert(worker_shard(slot.key()));
                slot.insert(w);
            }
        }
        for shard in &self.0.workers {
            shard.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        for (id, w) in sharded {
            if let Some(job) = &w.job {
                state.assignments.insert(id.clone(), job.clone());
            }
            state.workers.push(w.spec.clone());
            if let Some(shard) = self.0.workers.get(worker_shard(&id) as usize) {
                shard.lock().unwrap_or_else(|p| p.into_inner()).insert(id, w);
            }
        }
        state.workers.sort_by(|a, b| a.worker.cmp(&b.worker));
        for shard in migrate {
            self.write(format!("workers.{shard}"), Op::Workers(shard));
        }
    }

    /// Records that a scheduler starts on this state and returns the write's revision: it
    /// grows with every start, so it orders a restarted scheduler's assignments after those of
    /// the one before (its epochs count from 1 again). The term of a scheduler without a lease.
    pub async fn incarnation(&self) -> Result<u64, BusError> {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.0
            .kv
            .put("meta.incarnation", stamp.as_millis().to_string().into())
            .await
            .map_err(|e| BusError::JetStream { what: "the state bucket".into(), detail: e.to_string() })
    }

    /// The loss reports and byes, oldest first: those kept in the stream, then new ones as
    /// they come.
    pub async fn reports(&self) -> Result<consumer::push::Ordered, BusError> {
        self.ordered("the reports stream".into(), String::new(), None).await
    }

    /// The reports stream's handle, for reads by sequence or subject.
    async fn reports_stream(&self) -> Result<stream::Stream<()>, BusError> {
        self.0.js.get_stream_no_info(&self.0.stream).await.map_err(|e| reports_error(&e))
    }

    /// The reports stream's last sequence now: a consumer started after this call replays up
    /// to it (what a restarted scheduler missed), then reads what comes.
    pub async fn last_sequence(&self) -> Result<u64, BusError> {
        let stream = self.reports_stream().await?;
        Ok(stream.get_info().await.map_err(|e| reports_error(&e))?.state.last_sequence)
    }

    /// The first bye the reports stream holds for `job` (on its partition's subject with
    /// `[cluster] shared`) past sequence `read` (what the consumer has delivered), decoded,
    /// with its sequence. A hello of a running job asks: such a bye means the hello is a new job
    /// of the same id, sent after its predecessor's bye. The first, not the last: the new job
    /// may have said bye too by the time its hello is read.
    pub async fn unread_bye(&self, job: &str, read: u64) -> Result<Option<(protocol::JobEnd, u64)>, BusError> {
        let subject = match self.0.partitions {
            None => self.0.subjects.job_bye(job),
            Some(n) => self.0.subjects.part_job_bye(crate::partition::of(job, n), job),
        };
        let stream = self.reports_stream().await?;
        let (message, seq) = match stream.raw_message_builder().sequence(read + 1).next_by_subject(subject).send().await
        {
            Ok(m) => stream_message(m),
            Err(e) if matches!(e.kind(), stream::RawMessageErrorKind::NoMessageFound) => return Ok(None),
            Err(e) => return Err(reports_error(&e)),
        };
        let encoding = super::encoding_of(&message);
        let end: Option<protocol::JobEnd> = protocol::decode(encoding, &message.payload, "job end").ok();
        Ok(end.filter(|e| e.validate(job).is_ok()).map(|e| (e, seq)))
    }

    /// The first message the reports stream holds at or after sequence `from`, as a consumer
    /// would have delivered it, and its sequence (`None`: there is none). Checks a gap in the
    /// sequences a consumer received: a message found inside the gap was skipped by the server.
    pub async fn message_from(&self, from: u64) -> Result<Option<(async_nats::Message, u64)>, BusError> {
        let filter = format!("{}.v1.>", self.0.subjects.prefix());
        match self.reports_stream().await?.raw_message_builder().sequence(from).next_by_subject(filter).send().await {
            Ok(m) => Ok(Some(stream_message(m))),
            Err(e) if matches!(e.kind(), stream::RawMessageErrorKind::NoMessageFound) => Ok(None),
            Err(e) => Err(reports_error(&e)),
        }
    }

    /// The reports and byes of partition `p` (`[cluster] shared`), oldest first, as
    /// [`Durable::reports`]. `since_ms` (Unix ms): only what the stream received from then on
    /// (what its jobs' saved predictors do not hold yet); `None`: everything it keeps.
    pub async fn reports_of(&self, p: u32, since_ms: Option<u64>) -> Result<consumer::push::Ordered, BusError> {
        self.ordered(format!("the reports of partition {p}"), self.0.subjects.part_filter(p), since_ms).await
    }

    /// An ordered consumer of the reports stream: `filter` (empty: all), from `since_ms` on.
    async fn ordered(
        &self,
        what: String,
        filter: String,
        since_ms: Option<u64>,
    ) -> Result<consumer::push::Ordered, BusError> {
        let err = |e: &dyn std::fmt::Display| BusError::JetStream { what: what.clone(), detail: e.to_string() };
        let stream = self.0.js.get_stream(&self.0.stream).await.map_err(|e| err(&e))?;
        let start =
            since_ms.and_then(|ms| time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok());
        let config = consumer::push::OrderedConfig {
            deliver_subject: self.0.js.client().new_inbox(),
            deliver_policy: match start {
                Some(start_time) => consumer::DeliverPolicy::ByStartTime { start_time },
                None => consumer::DeliverPolicy::All,
            },
            filter_subject: filter,
            ..Default::default()
        };
        let consumer = stream.create_consumer(config).await.map_err(|e| err(&e))?;
        consumer.messages().await.map_err(|e| err(&e))
    }

    /// The bucket's live values under each of `filters` (key patterns such as `job.*`; `>`:
    /// all) whose key `keep` accepts, each read with one ordered consumer of the bucket's
    /// stream, values included: no request per key, which at a million keys took minutes. The
    /// stream keeps one message per key, so the consumer delivers all it keeps (the latest per
    /// key wins, should a bucket keep more): asking for the last per subject instead made the
    /// server index every subject first (8.9 s at 2.2 million keys, past the API's timeout).
    /// Their revisions are remembered for the writes that follow.
    async fn entries(&self, filters: &[&str], keep: impl Fn(&str) -> bool) -> Result<Vec<SavedEntry>, BusError> {
        let err = |e: &dyn std::fmt::Display| BusError::JetStream {
            what: "reading the state bucket".into(),
            detail: e.to_string(),
        };
        // A large bucket's consumer takes the server a while to set up on a busy server.
        let mut js = self.0.js.clone();
        js.set_timeout(READ_IDLE);
        let stream = js.get_stream(format!("KV_{}", self.0.bucket)).await.map_err(|e| err(&e))?;
        // The read ends at the stream's end as it is now, or once it delivered as many messages
        // as it had to when it began: keys others rewrite meanwhile move to the end, and
        // following them until nothing was pending never ended while other owners saved (a
        // three-server cluster, 10,000 jobs).
        let last = stream.cached_info().state.last_sequence;
        let prefix = format!("$KV.{}.", self.0.bucket);
        // By key, the latest last (a bucket made with more history delivers older values first).
        let mut entries: HashMap<String, SavedEntry> = HashMap::new();
        for filter in filters {
            let config = consumer::push::OrderedConfig {
                deliver_subject: js.client().new_inbox(),
                filter_subject: if *filter == ">" { String::new() } else { format!("{prefix}{filter}") },
                deliver_policy: consumer::DeliverPolicy::All,
                replay_policy: consumer::ReplayPolicy::Instant,
                ..Default::default()
            };
            let consumer = stream.create_consumer(config).await.map_err(|e| err(&e))?;
            // As many messages as it had to deliver when made: each is delivered, or replaced by
            // a newer one (a rewrite) that is.
            let (to_deliver, mut delivered) = (consumer.cached_info().num_pending, 0u64);
            if to_deliver == 0 {
                continue;
            }
            let mut messages = consumer.messages().await.map_err(|e| err(&e))?;
            loop {
                // Every value is a message of its own and a rewrite or delete adds one; a silent
                // consumer is an error.
                let next = tokio::time::timeout(READ_IDLE, messages.next()).await;
                let message = match next {
                    Ok(Some(Ok(m))) => m,
                    Ok(Some(Err(e))) => return Err(err(&e)),
                    Ok(None) => return Err(err(&"the consumer ended")),
                    Err(_) => return Err(err(&format!("nothing delivered for {READ_IDLE:?}"))),
                };
                let info = message.info().map_err(|e| err(&e))?;
                let (revision, pending) = (info.stream_sequence, info.pending);
                let put = message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("KV-Operation"))
                    .is_none_or(|op| op.as_str() != "DEL" && op.as_str() != "PURGE");
                if let Some(key) = message.subject.as_str().strip_prefix(&prefix).filter(|k| keep(k)) {
                    let entry = SavedEntry { key: key.to_string(), value: message.payload.clone(), revision, put };
                    entries.insert(entry.key.clone(), entry);
                }
                delivered += 1;
                if pending == 0 || revision >= last || delivered >= to_deliver {
                    break;
                }
            }
        }
        let mut revisions = self.0.revisions.lock().unwrap_or_else(|p| p.into_inner());
        for entry in entries.values() {
            revisions.0.insert(entry.key.clone(), entry.revision);
        }
        Ok(entries.into_values().collect())
    }

    /// The saved jobs whose id `keep` accepts, each with its saved predictor (a partition's,
    /// when its owner takes it over).
    pub async fn load_jobs(&self, keep: impl Fn(&str) -> bool) -> Result<Vec<(JobSpec, Option<Bytes>)>, BusError> {
        let entries = self.entries(&["job.*", "pred.*"], |k| k.split_once('.').is_some_and(|(_, id)| keep(id))).await?;
        let (mut specs, mut predictors) = (Vec::new(), HashMap::new());
        for entry in entries.into_iter().filter(|e| e.put) {
            match entry.key.split_once('.') {
                Some(("job", id)) => specs.extend(decode::<JobSpec>(&entry.value).filter(|s| s.job == id)),
                Some(("pred", id)) => {
                    predictors.insert(id.to_string(), entry.value);
                }
                _ => {}
            }
        }
        specs.sort_by(|a, b| a.job.cmp(&b.job));
        Ok(specs
            .into_iter()
            .map(|s| {
                let predictor = predictors.remove(&s.job);
                (s, predictor)
            })
            .collect())
    }

    /// One job's saved spec and predictor, if it has a spec.
    pub async fn load_job(&self, job: &str) -> Result<Option<(JobSpec, Option<Bytes>)>, BusError> {
        let err = |e: &dyn std::fmt::Display| BusError::JetStream {
            what: "reading the state bucket".into(),
            detail: e.to_string(),
        };
        let read = |key: String| async move {
            let entry = self.0.kv.entry(key.clone()).await.map_err(|e| err(&e))?;
            let Some(entry) = entry else { return Ok(None) };
            self.0.revisions.lock().unwrap_or_else(|p| p.into_inner()).0.insert(key, entry.revision);
            Ok::<_, BusError>((entry.operation == kv::Operation::Put).then_some(entry.value))
        };
        let spec = read(format!("job.{job}")).await?.and_then(|v| decode::<JobSpec>(&v)).filter(|s| s.job == job);
        let Some(spec) = spec else { return Ok(None) };
        Ok(Some((spec, read(format!("pred.{job}")).await?)))
    }

    /// Ends a job through the stream (`[cluster] shared`: the leader ends a submitted job whose
    /// restarts are used up): a bye on its partition's subject, which its owner reads as the
    /// job's own, durably. Sent on a task; failures are logged.
    pub fn end_in_stream(&self, job: &str, reason: crate::protocol::EndReason) {
        let Some(n) = self.0.partitions else { return };
        let subject = self.0.subjects.part_job_bye(crate::partition::of(job, n), job);
        let end = crate::protocol::JobEnd { job: job.to_string(), reason };
        let Ok(payload) = protocol::encode(Encoding::MsgPack, &end) else { return };
        let js = self.0.js.clone();
        tokio::spawn(async move {
            let sent = async { js.publish(subject, payload.into()).await?.await };
            if let Err(e) = tokio::time::timeout(WRITE_TIMEOUT, sent)
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            {
                warn!(error = %e, "cannot end a job through the stream");
            }
        });
    }

    fn put<T: Serialize>(&self, key: String, value: &T) {
        self.put_then(key, value, None);
    }

    fn put_then<T: Serialize>(&self, key: String, value: &T, waiter: Option<tokio::sync::oneshot::Sender<()>>) {
        let bytes = match protocol::encode(Encoding::MsgPack, value) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                warn!(key, error = %e, "cannot encode state");
                return;
            }
        };
        self.write_then(key, Op::Put(bytes), waiter);
    }

    fn write(&self, key: String, op: Op) {
        self.write_then(key, op, None);
    }

    /// Queues a write; `waiter` is told once it (or a newer value of the key) is written.
    fn write_then(&self, key: String, op: Op, waiter: Option<tokio::sync::oneshot::Sender<()>>) {
        if self.0.fence.deposed() {
            self.0.counters.fenced.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut pending = self.0.pending.lock().unwrap_or_else(|p| p.into_inner());
        // A newer value replaces the one waiting, but not the wait for a renewal after a
        // conflict (the key still needs reading again under a lease known to be held), nor
        // those waiting for the key to be written.
        let (after_renewal, mut written) =
            pending.remove(&key).map_or((None, Vec::new()), |p| (p.after_renewal, p.written));
        written.extend(waiter);
        pending.insert(key, Pending { after_renewal, written, ..Pending::new(op) });
        drop(pending);
        self.0.wake.notify_one();
    }

    /// Waits (up to `timeout`) until every write queued so far has been made (or given up
    /// because the lease was lost).
    pub async fn flush(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.pending() > 0 && Instant::now() < deadline && !self.0.fence.deposed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Makes this handle believe `key`'s last revision is `revision`: what a write whose
    /// acknowledgement was lost (it timed out here, and landed) leaves behind. For tests.
    #[doc(hidden)]
    pub fn assume_revision(&self, key: &str, revision: u64) {
        self.0.revisions.lock().unwrap_or_else(|p| p.into_inner()).0.insert(key.to_string(), revision);
    }

    pub fn save_job(&self, spec: &JobSpec) {
        self.put(format!("job.{}", spec.job), spec);
    }

    /// [`Durable::save_job`], and the answer once the spec is in the bucket: `Err` if the write
    /// was given up (the lease was lost). A job's hello is answered only then, so an answered
    /// hello is never lost to a fail-over or a partition's takeover.
    pub fn save_job_acked(&self, spec: &JobSpec) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.put_then(format!("job.{}", spec.job), spec, Some(tx));
        rx
    }

    pub fn save_predictor(&self, job: &str, predictor: Bytes) {
        self.write(format!("pred.{job}"), Op::Put(predictor));
    }

    /// A job's attained service and floor ledger (the allocator spreads these over epochs).
    pub fn save_plan(&self, job: &str, attained_service: f64, ledger: &crate::schedule::FloorLedger) {
        self.put(format!("plan.{job}"), &(attained_service, ledger));
    }

    /// A job left: its spec, predictor and plan go. Its reports and byes stay in the stream
    /// until `report_retention` (a purge of one job's subjects skips other jobs' messages on
    /// nats-server before 2.10.11); a replay drops them by the job's `ended_before`.
    pub fn forget_job(&self, job: &str) {
        self.write(format!("job.{job}"), Op::Delete);
        self.write(format!("pred.{job}"), Op::Delete);
        self.write(format!("plan.{job}"), Op::Delete);
    }

    /// Changes one worker in its shard and, if `change` says it changed anything, queues the
    /// shard's write.
    fn change_worker(&self, worker: &str, change: impl FnOnce(&mut BTreeMap<String, SavedWorker>) -> bool) {
        let shard = worker_shard(worker);
        let Some(saved) = self.0.workers.get(shard as usize) else { return };
        if change(&mut saved.lock().unwrap_or_else(|p| p.into_inner())) {
            self.write(format!("workers.{shard}"), Op::Workers(shard));
        }
    }

    pub fn save_worker(&self, spec: &WorkerSpec) {
        self.change_worker(&spec.worker, |saved| match saved.get_mut(&spec.worker) {
            Some(w) if w.spec == *spec => false,
            Some(w) => {
                w.spec = spec.clone();
                true
            }
            None => {
                saved.insert(spec.worker.clone(), SavedWorker { spec: spec.clone(), job: None });
                true
            }
        });
    }

    pub fn forget_worker(&self, worker: &str) {
        self.change_worker(worker, |saved| saved.remove(worker).is_some());
        if self.0.legacy_workers.lock().unwrap_or_else(|p| p.into_inner()).remove(worker) {
            self.write(format!("worker.{worker}"), Op::Delete);
            self.write(format!("assign.{worker}"), Op::Delete);
        }
    }

    /// A worker's job (`None`: idle). A worker not saved (never said hello) is not saved by it.
    pub fn save_assignment(&self, worker: &str, job: Option<&str>) {
        self.change_worker(worker, |saved| match saved.get_mut(worker) {
            Some(w) if w.job.as_deref() != job => {
                w.job = job.map(str::to_string);
                true
            }
            _ => false,
        });
    }
}

fn reports_error(e: &dyn std::fmt::Display) -> BusError {
    BusError::JetStream { what: "the reports stream".into(), detail: e.to_string() }
}

/// A message read by sequence or subject, as a consumer would have delivered it.
fn stream_message(m: async_nats::jetstream::message::StreamMessage) -> (async_nats::Message, u64) {
    let length = m.payload.len();
    let message = async_nats::Message {
        subject: m.subject,
        reply: None,
        payload: m.payload,
        headers: Some(m.headers),
        status: None,
        description: None,
        length,
    };
    (message, m.sequence)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    match protocol::decode(Encoding::MsgPack, bytes, "saved state") {
        Ok(v) => Some(v),
        Err(e) => {
            debug!(error = %e, "undecodable state entry");
            None
        }
    }
}
