//! The JetStream I/O of the durable state: the reports stream read in order, by sequence and
//! by subject; the bucket's values read with ordered consumers; and `Store`, the bucket as
//! `write::apply` writes it. The rules are in the modules without I/O beside it.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, context::PublishErrorKind, kv, stream};
use bytes::Bytes;
use futures_util::StreamExt;

use super::key::{JOB_FILTERS, Key};
use super::queue::Op;
use super::snapshot::decode;
use super::write::{LastWrite, PublishError, Store};
use super::{Durable, Inner, TERM_HEADER, WRITE_TIMEOUT};
use crate::bus::BusError;
use crate::protocol::{self, JobSpec};

/// One key's last value as read from the bucket.
pub(super) struct SavedEntry {
    pub(super) key: String,
    pub(super) value: Bytes,
    pub(super) revision: u64,
    /// A value (not a delete or purge marker).
    pub(super) put: bool,
}

/// How long a read of the bucket may wait for its next value.
const READ_IDLE: Duration = Duration::from_secs(30);

/// The bucket's JetStream I/O, for `write::apply`.
impl Store for Inner {
    async fn revision(&self, key: &str) -> Result<u64, String> {
        let entry = self.kv.entry(key).await.map_err(|e| e.to_string())?;
        Ok(entry.map_or(0, |e| e.revision))
    }

    async fn publish(&self, key: &str, op: &Op, term: u64, expected: u64) -> Result<u64, PublishError> {
        let mut message = jetstream::message::PublishMessage::build()
            .header(TERM_HEADER, term.to_string().as_str())
            .expected_last_subject_sequence(expected);
        message = match op {
            Op::Put(bytes) => message.payload(bytes.clone()),
            _ => message.header("KV-Operation", "DEL"),
        };
        let subject = format!("$KV.{}.{key}", self.bucket);
        let sent = tokio::time::timeout(WRITE_TIMEOUT, async {
            let ack = self.js.send_publish(subject, message).await?;
            ack.await
        })
        .await;
        match sent {
            Ok(Ok(ack)) => Ok(ack.sequence),
            Ok(Err(e)) if matches!(e.kind(), PublishErrorKind::WrongLastSequence) => Err(PublishError::Conflict),
            Ok(Err(e)) => Err(PublishError::Other(e.to_string())),
            Err(_) => Err(PublishError::Other("timed out".into())),
        }
    }

    async fn last_write(&self, key: &str) -> Option<LastWrite> {
        let stream = self.js.get_stream_no_info(format!("KV_{}", self.bucket)).await.ok()?;
        let subject = format!("$KV.{}.{key}", self.bucket);
        let last =
            tokio::time::timeout(WRITE_TIMEOUT, stream.get_last_raw_message_by_subject(&subject)).await.ok()?.ok()?;
        let header = |name: &str| last.headers.get(name).map(|v| v.as_str().to_string());
        Some(LastWrite {
            revision: last.sequence,
            term: header(TERM_HEADER).and_then(|t| t.parse().ok()),
            deleted: header("KV-Operation").is_some_and(|o| o == "DEL" || o == "PURGE"),
            payload: last.payload,
        })
    }
}

impl Durable {
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

    /// The first bye the reports stream holds for `job` past sequence `read` (what the consumer
    /// has delivered), decoded, with its sequence. A hello of a running job asks: such a bye
    /// means the hello is a new job of the same id, sent after its predecessor's bye. The first,
    /// not the last: the new job may have said bye too by the time its hello is read. (With
    /// `[cluster] shared` the owners read hellos from the stream, in order: none asks.)
    pub async fn unread_bye(&self, job: &str, read: u64) -> Result<Option<(protocol::JobEnd, u64)>, BusError> {
        let subject = self.0.subjects.job_bye(job);
        let stream = self.reports_stream().await?;
        let (message, seq) = match stream.raw_message_builder().sequence(read + 1).next_by_subject(subject).send().await
        {
            Ok(m) => stream_message(m),
            Err(e) if matches!(e.kind(), stream::RawMessageErrorKind::NoMessageFound) => return Ok(None),
            Err(e) => return Err(reports_error(&e)),
        };
        let encoding = crate::bus::encoding_of(&message);
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
    pub(super) async fn entries(
        &self,
        filters: &[&str],
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<SavedEntry>, BusError> {
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
            revisions.set(&entry.key, entry.revision);
        }
        Ok(entries.into_values().collect())
    }

    /// The saved jobs whose id `keep` accepts, each with its saved predictor (a partition's,
    /// when its owner takes it over).
    pub async fn load_jobs(&self, keep: impl Fn(&str) -> bool) -> Result<Vec<(JobSpec, Option<Bytes>)>, BusError> {
        let entries =
            self.entries(&JOB_FILTERS, |k| Key::parse(k).as_ref().and_then(Key::job).is_some_and(&keep)).await?;
        let (mut specs, mut predictors) = (Vec::new(), HashMap::new());
        for entry in entries.into_iter().filter(|e| e.put) {
            match Key::parse(&entry.key) {
                Some(Key::Job(id)) => specs.extend(decode::<JobSpec>(&entry.value).filter(|s| s.job == id)),
                Some(Key::Predictor(id)) => {
                    predictors.insert(id, entry.value);
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
        let read = |key: Key| async move {
            let key = key.to_string();
            let entry = self.0.kv.entry(key.clone()).await.map_err(|e| err(&e))?;
            let Some(entry) = entry else { return Ok(None) };
            self.0.revisions.lock().unwrap_or_else(|p| p.into_inner()).set(&key, entry.revision);
            Ok::<_, BusError>((entry.operation == kv::Operation::Put).then_some(entry.value))
        };
        let spec = read(Key::Job(job.to_string())).await?.and_then(|v| decode::<JobSpec>(&v)).filter(|s| s.job == job);
        let Some(spec) = spec else { return Ok(None) };
        Ok(Some((spec, read(Key::Predictor(job.to_string())).await?)))
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
