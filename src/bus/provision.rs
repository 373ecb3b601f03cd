//! JetStream provisioning: the streams and buckets slaq's state lives in, made 2.9-compatibly
//! (async-nats' own `create_key_value` fails on 2.9 servers), and their names. The store
//! (`durable`), the lease and the partitions call it; it calls neither.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};

use super::BusError;
use crate::protocol::Subjects;

/// What the stream and the bucket are called, and how much they keep.
#[derive(Clone, Debug, PartialEq)]
pub struct DurableSettings {
    /// Loss reports kept per job (enough for the reports between two predictor saves).
    pub report_history: i64,
    /// How long the stream keeps a report or bye (`max_age`): what a scheduler down for longer
    /// missed is gone. Nothing else removes a message: slaq never purges part of the stream
    /// (see the module's documentation).
    pub report_retention: Duration,
    /// The largest message the reports stream keeps (the scheduler's `max_payload_bytes`).
    pub max_message_bytes: usize,
    /// Copies of the stream and the bucket in a cluster.
    pub replicas: usize,
    /// How long to wait for JetStream when setting up.
    pub timeout: Duration,
    /// Replicas share the jobs in this many partitions (`[cluster] shared`): the server maps
    /// reports and byes to `<prefix>.v1.part.<p>.job.<id>.<kind>`, and the stream keeps those.
    pub partitions: Option<u32>,
}

impl Default for DurableSettings {
    fn default() -> Self {
        DurableSettings {
            report_history: 512,
            report_retention: Duration::from_secs(15 * 60),
            max_message_bytes: 64 * 1024,
            replicas: 1,
            timeout: Duration::from_secs(5),
            partitions: None,
        }
    }
}

/// The names derived from a subject prefix.
pub fn stream_name(prefix: &str) -> String {
    format!("{}_reports", prefix.replace('.', "_"))
}

pub fn bucket_name(prefix: &str) -> String {
    format!("{}_state", prefix.replace('.', "_"))
}

/// The smallest duplicate window a server accepts.
const DUPLICATE_WINDOW: Duration = Duration::from_millis(100);

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

/// The reports stream as this version wants it.
pub(super) fn reports_stream(subjects: &Subjects, settings: &DurableSettings) -> stream::Config {
    let prefix = subjects.prefix();
    stream::Config {
        name: stream_name(prefix),
        subjects: match settings.partitions {
            // A job's reports and byes, and a tenant's job's (`job.<tenant>.<name>.loss`).
            None => ["*", "*.*"]
                .iter()
                .flat_map(|id| [format!("{prefix}.v1.job.{id}.loss"), format!("{prefix}.v1.job.{id}.bye")])
                .collect(),
            // One subject, so that each partition's filter is a subset of one (2.9 wants that):
            // a job's id is one token, or a tenant's job's two.
            Some(_) => vec![format!("{prefix}.v1.part.*.job.>")],
        },
        max_messages_per_subject: settings.report_history,
        max_age: settings.report_retention,
        max_message_size: i32::try_from(settings.max_message_bytes).unwrap_or(i32::MAX),
        storage: stream::StorageType::File,
        num_replicas: settings.replicas.max(1),
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    }
}

/// Opens the key-value bucket `bucket` whose keys expire `ttl` after their last write, creating
/// it if missing (2.9-compatibly, as `durable` does) with `replicas` copies in a cluster.
/// Replicas starting together race to create it: the loser finds it made.
pub(super) async fn open_bucket(
    client: &async_nats::Client,
    bucket: &str,
    replicas: usize,
    ttl: Duration,
) -> Result<kv::Store, BusError> {
    let js = jetstream::new(client.clone());
    let err =
        |e: &dyn std::fmt::Display| BusError::JetStream { what: format!("bucket {bucket}"), detail: e.to_string() };
    let config = kv_bucket_stream(bucket, replicas, ttl);
    if let Err(e) = js.get_or_create_stream(config.clone()).await {
        js.get_stream(&config.name).await.map_err(|_| err(&e))?;
    }
    js.get_key_value(bucket).await.map_err(|e| err(&e))
}
