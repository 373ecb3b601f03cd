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

mod io;
mod key;
mod queue;
mod snapshot;
mod write;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Serialize;
use tokio::time::Instant;
use tracing::{debug, warn};

pub use self::key::Key;
use self::queue::{LeaseView, Op, Outcome, WriteQueue};
pub use self::snapshot::{SavedState, SavedWorker, WORKER_SHARDS, decode_worker_shard, worker_shard};
use self::write::Revisions;
use super::BusError;
use super::lease::Fence;
pub use super::provision::{DurableSettings, bucket_name, stream_name};
use super::provision::{kv_bucket_stream, reports_stream};
use crate::protocol::{self, Encoding, JobSpec, Subjects, WorkerSpec};

/// The header every state write carries: the term of the scheduler that wrote it.
pub const TERM_HEADER: &str = "Slaq-Term";

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
    /// Writes not yet made, latest per key. One writer task drains it, a bounded number at a
    /// time, so a burst (200,000 jobs registering) costs one value per key, not one task per
    /// write.
    pending: std::sync::Mutex<WriteQueue<tokio::sync::oneshot::Sender<()>>>,
    /// Writes handed to JetStream and not answered yet.
    in_flight: AtomicUsize,
    /// The last revision of each key as this scheduler knows it (`write::Revisions`).
    revisions: std::sync::Mutex<Revisions>,
    wake: Arc<tokio::sync::Notify>,
    /// The workers' specs and assignments by shard, as saved (`WORKER_SHARDS` keys), each
    /// locked on its own: the writer encodes one while the allocator changes others.
    workers: Vec<std::sync::Mutex<BTreeMap<String, SavedWorker>>>,
    /// Workers with keys of the earlier layout (`worker.<id>`, `assign.<id>`): deleted when the
    /// worker is forgotten, so that no later start finds it there.
    legacy_workers: std::sync::Mutex<HashSet<String>>,
}

/// Bucket writes in flight at once.
const WRITES_IN_FLIGHT: usize = 128;
/// How long a single write may take.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Drains `pending` for as long as the handle lives: what is due (`WriteQueue::take_due`) is
/// written, a bounded number at a time, and settled.
async fn writer(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        let due =
            this.pending.lock().unwrap_or_else(|p| p.into_inner()).take_due(Instant::now(), LeaseView::of(&this.fence));
        if due.dropped > 0 {
            this.counters.fenced.fetch_add(due.dropped as u64, Ordering::Relaxed);
            warn!(writes = due.dropped, "deposed: state writes dropped");
        }
        let batch = due.writes;
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
        let results: Vec<_> = futures_util::stream::iter(batch)
            .map(|(key, pending)| async move {
                let outcome = this_ref.apply(&key, &pending.op).await;
                this_ref.in_flight.fetch_sub(1, Ordering::Relaxed);
                (key, pending, outcome)
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        let mut logged = false;
        let renewals = this.fence.renewals();
        for (key, pending, outcome) in results {
            match &outcome {
                Outcome::Written => {
                    this.counters.written.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Conflict => {
                    this.counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    if !std::mem::replace(&mut logged, true) {
                        warn!(key, "a state key was written by someone else: read again before writing");
                    }
                }
                Outcome::Again => {}
                Outcome::Failed(e) => {
                    this.counters.failed.fetch_add(1, Ordering::Relaxed);
                    if !std::mem::replace(&mut logged, true) {
                        warn!(key, error = %e, attempts = pending.attempts() + 1, "saving state failed; retrying");
                    }
                }
            }
            let answered = this.pending.lock().unwrap_or_else(|p| p.into_inner()).settle(
                key,
                pending,
                &outcome,
                Instant::now(),
                renewals,
            );
            for waiter in answered {
                let _ = waiter.send(());
            }
        }
    }
}

impl Inner {
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

    /// Makes one queued write (`write::apply`), a shard of the workers encoded as it is now.
    async fn apply(&self, key: &str, op: &Op) -> Outcome {
        let resolved;
        let op = match op {
            Op::Workers(shard) => {
                resolved = self.workers_value(*shard);
                &resolved
            }
            op => op,
        };
        write::apply(self, &self.revisions, &self.fence, self.term.load(Ordering::Relaxed), key, op).await
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
            pending: std::sync::Mutex::new(WriteQueue::default()),
            in_flight: AtomicUsize::new(0),
            revisions: std::sync::Mutex::default(),
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
        let (state, workers) = snapshot::decode_state(entries.into_iter().filter(|e| e.put).map(|e| (e.key, e.value)));
        *self.0.legacy_workers.lock().unwrap_or_else(|p| p.into_inner()) = workers.legacy;
        for shard in &self.0.workers {
            shard.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        for (id, w) in workers.by_id {
            if let Some(shard) = self.0.workers.get(worker_shard(&id) as usize) {
                shard.lock().unwrap_or_else(|p| p.into_inner()).insert(id, w);
            }
        }
        // Workers found only in the earlier layout's keys are written into their shards.
        for shard in workers.migrate {
            self.write(Key::Workers(shard), Op::Workers(shard));
        }
        if state.undecodable > 0 {
            warn!(undecodable = state.undecodable, "skipped state entries that did not decode");
        }
        Ok(state)
    }

    /// Records that a scheduler starts on this state and returns the write's revision: it
    /// grows with every start, so it orders a restarted scheduler's assignments after those of
    /// the one before (its epochs count from 1 again). The term of a scheduler without a lease.
    pub async fn incarnation(&self) -> Result<u64, BusError> {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.0
            .kv
            .put(Key::Meta("incarnation".into()).to_string(), stamp.as_millis().to_string().into())
            .await
            .map_err(|e| BusError::JetStream { what: "the state bucket".into(), detail: e.to_string() })
    }

    /// Ends a job through the stream (`[cluster] shared`: the leader ends a submitted job whose
    /// restarts are used up): a bye on its partition's subject, which its owner reads as the
    /// job's own, durably. Sent on a task; failures are logged.
    pub fn end_in_stream(&self, job: &str, reason: crate::protocol::EndReason) {
        let end = crate::protocol::JobEnd { job: job.to_string(), reason };
        let sent = self.publish_in_partition(job, Subjects::part_job_bye, &end);
        tokio::spawn(async move {
            if let Err(e) = sent.await {
                warn!(error = %e, "cannot end a job through the stream");
            }
        });
    }

    /// Puts a job's hello into its partition's part of the stream (`[cluster] shared`: the
    /// leader, before it answers the hello), so that its partition's owner reads it in the
    /// stream's order: after the bye of an earlier job of the same id, before the job's own
    /// reports (sent once the hello is answered). Resolves when the stream has stored it.
    pub fn hello_in_stream(&self, spec: &JobSpec) -> impl std::future::Future<Output = Result<(), BusError>> + use<> {
        self.publish_in_partition(&spec.job, Subjects::part_job_hello, spec)
    }

    /// Publishes `message` on `job`'s partition subject (`subject`) into the reports stream;
    /// resolves when the stream has stored it (at once without partitions: nothing to do).
    fn publish_in_partition<T: Serialize>(
        &self,
        job: &str,
        subject: fn(&Subjects, u32, &str) -> String,
        message: &T,
    ) -> impl std::future::Future<Output = Result<(), BusError>> + use<T> {
        let subject = self.0.partitions.map(|n| subject(&self.0.subjects, crate::partition::of(job, n), job));
        let payload = protocol::encode(Encoding::MsgPack, message);
        let js = self.0.js.clone();
        async move {
            let fail = |detail: String| BusError::JetStream { what: "the reports stream".into(), detail };
            let Some(subject) = subject else { return Ok(()) };
            let payload = payload.map_err(|e| fail(e.to_string()))?;
            let sent = async { js.publish(subject, payload.into()).await?.await };
            match tokio::time::timeout(WRITE_TIMEOUT, sent).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(fail(e.to_string())),
                Err(_) => Err(fail("timed out".into())),
            }
        }
    }

    fn put<T: Serialize>(&self, key: Key, value: &T) {
        self.put_then(key, value, None);
    }

    fn put_then<T: Serialize>(&self, key: Key, value: &T, waiter: Option<tokio::sync::oneshot::Sender<()>>) {
        let bytes = match protocol::encode(Encoding::MsgPack, value) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                warn!(%key, error = %e, "cannot encode state");
                return;
            }
        };
        self.write_then(key, Op::Put(bytes), waiter);
    }

    fn write(&self, key: Key, op: Op) {
        self.write_then(key, op, None);
    }

    /// Queues a write; `waiter` is told once it (or a newer value of the key) is written.
    fn write_then(&self, key: Key, op: Op, waiter: Option<tokio::sync::oneshot::Sender<()>>) {
        let queued = self.0.pending.lock().unwrap_or_else(|p| p.into_inner()).push(
            key.to_string(),
            op,
            waiter,
            self.0.fence.deposed(),
        );
        if queued {
            self.0.wake.notify_one();
        } else {
            self.0.counters.fenced.fetch_add(1, Ordering::Relaxed);
        }
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
    pub fn assume_revision(&self, key: &Key, revision: u64) {
        self.0.revisions.lock().unwrap_or_else(|p| p.into_inner()).set(&key.to_string(), revision);
    }

    pub fn save_job(&self, spec: &JobSpec) {
        self.put(Key::Job(spec.job.clone()), spec);
    }

    /// [`Durable::save_job`], and the answer once the spec is in the bucket: `Err` if the write
    /// was given up (the lease was lost). A job's hello is answered only then, so an answered
    /// hello is never lost to a fail-over or a partition's takeover.
    pub fn save_job_acked(&self, spec: &JobSpec) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.put_then(Key::Job(spec.job.clone()), spec, Some(tx));
        rx
    }

    pub fn save_predictor(&self, job: &str, predictor: Bytes) {
        self.write(Key::Predictor(job.to_string()), Op::Put(predictor));
    }

    /// A job's attained service and floor ledger (the allocator spreads these over epochs).
    pub fn save_plan(&self, job: &str, attained_service: f64, ledger: &crate::schedule::FloorLedger) {
        self.put(Key::Plan(job.to_string()), &(attained_service, ledger));
    }

    /// A job left: its spec, predictor and plan go. Its reports and byes stay in the stream
    /// until `report_retention` (a purge of one job's subjects skips other jobs' messages on
    /// nats-server before 2.10.11); a replay drops them by the job's `ended_before`.
    pub fn forget_job(&self, job: &str) {
        self.write(Key::Job(job.to_string()), Op::Delete);
        self.write(Key::Predictor(job.to_string()), Op::Delete);
        self.write(Key::Plan(job.to_string()), Op::Delete);
    }

    /// Changes one worker in its shard and, if `change` says it changed anything, queues the
    /// shard's write.
    fn change_worker(&self, worker: &str, change: impl FnOnce(&mut BTreeMap<String, SavedWorker>) -> bool) {
        let shard = worker_shard(worker);
        let Some(saved) = self.0.workers.get(shard as usize) else { return };
        if change(&mut saved.lock().unwrap_or_else(|p| p.into_inner())) {
            self.write(Key::Workers(shard), Op::Workers(shard));
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
            self.write(Key::LegacyWorker(worker.to_string()), Op::Delete);
            self.write(Key::LegacyAssign(worker.to_string()), Op::Delete);
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
