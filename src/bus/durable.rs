//! The scheduler's durable state in JetStream (works on nats-server 2.9 and 2.10+).
//!
//! - Stream `<prefix>_reports` (dots in the prefix become `_`) on the subjects
//!   `<prefix>.v1.job.*.loss`: every loss report, the last `report_history` per job (older ones
//!   are discarded), file storage, a 2-minute duplicate window (`Nats-Msg-Id: <job>:<iter>`
//!   makes a job's re-publish harmless). The scheduler reads reports from it with an ordered
//!   consumer, so after a restart it first replays what it missed.
//! - Key-value bucket `<prefix>_state`: `job.<id>` (the `JobSpec`), `pred.<id>` (the job's
//!   predictor, saved every few seconds), `plan.<id>` (its service and fairness-floor ledger,
//!   saved about every 30 s when it changed), `worker.<id>` (the `WorkerSpec`) and `assign.<id>` (the job a worker
//!   serves; empty: idle). Values are MessagePack.
//!
//! Writes are fire-and-forget on spawned tasks (an actor never waits on JetStream); failures
//! are logged and counted. 2.9's pitfall: async-nats' `create_key_value` fails there, so the
//! bucket's stream is created directly and bound with `get_key_value`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use super::BusError;
use crate::protocol::{self, Encoding, JobSpec, Subjects, WorkerSpec};

/// What the stream and the bucket are called, and how much they keep.
#[derive(Clone, Debug, PartialEq)]
pub struct DurableSettings {
    /// Loss reports kept per job (enough for the reports between two predictor saves).
    pub report_history: i64,
    /// Copies of the stream and the bucket in a cluster.
    pub replicas: usize,
    /// How long to wait for JetStream when setting up.
    pub timeout: Duration,
}

impl Default for DurableSettings {
    fn default() -> Self {
        DurableSettings { report_history: 512, replicas: 1, timeout: Duration::from_secs(5) }
    }
}

/// The names derived from a subject prefix.
pub fn stream_name(prefix: &str) -> String {
    format!("{}_reports", prefix.replace('.', "_"))
}

pub fn bucket_name(prefix: &str) -> String {
    format!("{}_state", prefix.replace('.', "_"))
}

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

/// A handle to the durable state; cheap to clone (one per job actor: the JetStream handles
/// inside carry the stream's cached info, kilobytes, so they are shared, not copied).
#[derive(Clone)]
pub struct Durable(Arc<Inner>);

struct Inner {
    js: jetstream::Context,
    kv: kv::Store,
    stream: String,
    subjects: Subjects,
    /// Writes that failed.
    failed_writes: AtomicU64,
    /// Bucket writes not yet made, latest per key (`None`: delete). One writer task drains it,
    /// a bounded number at a time, so a burst (200,000 jobs registering) costs one value per key,
    /// not one task per write.
    pending: std::sync::Mutex<HashMap<String, Option<Bytes>>>,
    wake: Arc<tokio::sync::Notify>,
}

/// Bucket writes in flight at once.
const WRITES_IN_FLIGHT: usize = 128;

/// Drains `pending` for as long as the handle lives.
async fn writer(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(this) = inner.upgrade() else { return };
        let batch: Vec<(String, Option<Bytes>)> = {
            let mut pending = this.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.drain().collect()
        };
        if batch.is_empty() {
            let wake = this.wake.clone();
            drop(this);
            // Woken by a write, or checks again after a while (the handle may be gone).
            let _ = tokio::time::timeout(Duration::from_secs(1), wake.notified()).await;
            continue;
        }
        let kv = &this.kv;
        let results: Vec<Result<(), String>> = futures_util::stream::iter(batch)
            .map(|(key, value)| async move {
                match value {
                    Some(bytes) => kv.put(key, bytes).await.map(drop).map_err(|e| e.to_string()),
                    None => kv.delete(key).await.map_err(|e| e.to_string()),
                }
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        for e in results.into_iter().filter_map(Result::err) {
            this.failed_writes.fetch_add(1, Ordering::Relaxed);
            warn!(error = %e, "saving state to JetStream failed");
        }
    }
}

/// The stream behind a key-value bucket, as a KV bucket of one value per key would be made.
/// Made by hand: async-nats' `create_key_value` fails on 2.9 servers. `max_age` zero keeps
/// values for ever; `replicas` copies in a cluster.
pub(super) fn kv_bucket_stream(bucket: &str, replicas: usize, max_age: Duration) -> stream::Config {
    stream::Config {
        name: format!("KV_{bucket}"),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        max_age,
        storage: stream::StorageType::File,
        num_replicas: replicas.max(1),
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    }
}

impl Durable {
    /// Creates the stream and the bucket if missing. `Ok(None)`: the server has no JetStream.
    pub async fn open(
        client: &async_nats::Client,
        subjects: &Subjects,
        settings: &DurableSettings,
    ) -> Result<Option<Durable>, BusError> {
        let js = jetstream::new(client.clone());
        let setup =
            |what: &str, e: &dyn std::fmt::Display| BusError::JetStream { what: what.into(), detail: e.to_string() };
        let name = stream_name(subjects.prefix());
        let config = stream::Config {
            name: name.clone(),
            subjects: vec![format!("{}.v1.job.*.loss", subjects.prefix())],
            max_messages_per_subject: settings.report_history,
            storage: stream::StorageType::File,
            num_replicas: settings.replicas.max(1),
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        let created = tokio::time::timeout(settings.timeout, js.get_or_create_stream(config)).await;
        match created {
            Err(_) => {
                warn!(timeout = ?settings.timeout, "JetStream did not answer (not enabled on this server?)");
                return Ok(None);
            }
            Ok(Err(e))
                if matches!(e.kind(), jetstream::context::CreateStreamErrorKind::JetStreamUnavailable)
                    || e.to_string().contains("not enabled") =>
            {
                return Ok(None);
            }
            Ok(Err(e)) => return Err(setup("JetStream reports stream", &e)),
            Ok(Ok(_)) => {}
        }
        let bucket = bucket_name(subjects.prefix());
        let kv_stream = kv_bucket_stream(&bucket, settings.replicas, Duration::ZERO);
        tokio::time::timeout(settings.timeout, js.get_or_create_stream(kv_stream))
            .await
            .map_err(|_| setup("JetStream", &"no answer while creating the state bucket"))?
            .map_err(|e| setup("JetStream state bucket", &e))?;
        let kv = js.get_key_value(bucket).await.map_err(|e| setup("JetStream state bucket", &e))?;
        let inner = Arc::new(Inner {
            js,
            kv,
            stream: name,
            subjects: subjects.clone(),
            failed_writes: AtomicU64::new(0),
            pending: std::sync::Mutex::new(HashMap::new()),
            wake: Arc::new(tokio::sync::Notify::new()),
        });
        tokio::spawn(writer(Arc::downgrade(&inner)));
        Ok(Some(Durable(inner)))
    }

    /// Reads the whole bucket (concurrently, 64 keys at a time).
    pub async fn load(&self) -> Result<SavedState, BusError> {
        let err = |e: &dyn std::fmt::Display| BusError::JetStream {
            what: "reading the state bucket".into(),
            detail: e.to_string(),
        };
        let keys: Vec<String> = match self.0.kv.keys().await {
            Ok(keys) => keys.try_collect().await.map_err(|e| err(&e))?,
            Err(e) => return Err(err(&e)),
        };
        let entries: Vec<(String, Option<Bytes>)> = futures_util::stream::iter(keys)
            .map(|key| async move {
                let value = self.0.kv.get(key.clone()).await;
                (key, value)
            })
            .buffer_unordered(64)
            .map(|(key, value)| value.map(|v| (key, v)).map_err(|e| err(&e)))
            .try_collect()
            .await?;
        let mut state = SavedState::default();
        let mut predictors: HashMap<String, Bytes> = HashMap::new();
        let mut specs: Vec<JobSpec> = Vec::new();
        for (key, value) in entries {
            let Some(value) = value else { continue };
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
                "worker" => match decode::<WorkerSpec>(&value) {
                    Some(spec) if spec.worker == id => state.workers.push(spec),
                    _ => state.undecodable += 1,
                },
                "assign" => match std::str::from_utf8(&value) {
                    Ok("") => {}
                    Ok(job) if protocol::valid_id(job) => {
                        state.assignments.insert(id.to_string(), job.to_string());
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
        state.workers.sort_by(|a, b| a.worker.cmp(&b.worker));
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
            .put("meta.incarnation", stamp.as_millis().to_string().into())
            .await
            .map_err(|e| BusError::JetStream { what: "the state bucket".into(), detail: e.to_string() })
    }

    /// The loss reports, oldest first: those kept in the stream, then new ones as they come.
    pub async fn reports(&self) -> Result<consumer::push::Ordered, BusError> {
        let err = |e: &dyn std::fmt::Display| BusError::JetStream {
            what: "the reports stream".into(),
            detail: e.to_string(),
        };
        let stream = self.0.js.get_stream(&self.0.stream).await.map_err(|e| err(&e))?;
        let config = consumer::push::OrderedConfig {
            deliver_subject: self.0.js.client().new_inbox(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        };
        let consumer = stream.create_consumer(config).await.map_err(|e| err(&e))?;
        consumer.messages().await.map_err(|e| err(&e))
    }

    /// Writes that failed so far.
    pub fn failed_writes(&self) -> u64 {
        self.0.failed_writes.load(Ordering::Relaxed)
    }

    fn spawn_write(&self, what: &'static str, write: impl Future<Output = Result<(), String>> + Send + 'static) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = write.await {
                this.0.failed_writes.fetch_add(1, Ordering::Relaxed);
                warn!(what, error = %e, "saving state to JetStream failed");
            }
        });
    }

    fn put<T: Serialize>(&self, key: String, value: &T) {
        let bytes = match protocol::encode(Encoding::MsgPack, value) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                warn!(key, error = %e, "cannot encode state");
                return;
            }
        };
        self.put_bytes(key, bytes);
    }

    fn write(&self, key: String, value: Option<Bytes>) {
        self.0.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(key, value);
        self.0.wake.notify_one();
    }

    fn put_bytes(&self, key: String, bytes: Bytes) {
        self.write(key, Some(bytes));
    }

    fn delete(&self, key: String) {
        self.write(key, None);
    }

    /// Waits (up to `timeout`) until every write queued so far has been handed to JetStream.
    pub async fn flush(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.0.pending.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn save_job(&self, spec: &JobSpec) {
        self.put(format!("job.{}", spec.job), spec);
    }

    pub fn save_predictor(&self, job: &str, predictor: Bytes) {
        self.put_bytes(format!("pred.{job}"), predictor);
    }

    /// A job's attained service and floor ledger (the allocator spreads these over epochs).
    pub fn save_plan(&self, job: &str, attained_service: f64, ledger: &crate::schedule::FloorLedger) {
        self.put(format!("plan.{job}"), &(attained_service, ledger));
    }

    /// A job left: its spec, predictor, plan and reports go.
    pub fn forget_job(&self, job: &str) {
        self.delete(format!("job.{job}"));
        self.delete(format!("pred.{job}"));
        self.delete(format!("plan.{job}"));
        let (js, stream, subject) = (self.0.js.clone(), self.0.stream.clone(), self.0.subjects.job_loss(job));
        self.spawn_write("purge", async move {
            let stream = js.get_stream(stream).await.map_err(|e| e.to_string())?;
            stream.purge().filter(subject).await.map(drop).map_err(|e| e.to_string())
        });
    }

    pub fn save_worker(&self, spec: &WorkerSpec) {
        self.put(format!("worker.{}", spec.worker), spec);
    }

    pub fn forget_worker(&self, worker: &str) {
        self.delete(format!("worker.{worker}"));
        self.delete(format!("assign.{worker}"));
    }

    pub fn save_assignment(&self, worker: &str, job: Option<&str>) {
        self.put_bytes(format!("assign.{worker}"), Bytes::from(job.unwrap_or_default().to_string()));
    }
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
