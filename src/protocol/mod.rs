//! The wire contract, version 1 (see `shared/DESIGN.md` and the README): subjects, message
//! types, the MessagePack/JSON codec and validation. Pure: no I/O.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Longest job or worker id.
pub const MAX_ID_LEN: usize = 64;
/// Largest accepted batch size in a report or spec.
pub const MAX_BATCH_SIZE: u32 = 1 << 24;

/// Whether `id` is a valid job or worker id: 1–64 characters from `[A-Za-z0-9_-]`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What a subject is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    JobHello,
    JobLoss,
    JobBye,
    JobAlloc,
    WorkerHello,
    WorkerBeat,
    WorkerAssign,
    CtlStatus,
    CtlEpoch,
}

/// Subject names under a prefix (`slaq` by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    /// `prefix` must be one or more valid NATS tokens separated by dots.
    pub fn new(prefix: &str) -> Result<Self, ProtocolError> {
        let ok = !prefix.is_empty() && prefix.split('.').all(valid_id);
        if !ok {
            return Err(ProtocolError::InvalidPrefix(prefix.to_string()));
        }
        Ok(Subjects { prefix: prefix.to_string() })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn job(&self, job: &str, what: &str) -> String {
        format!("{}.v1.job.{job}.{what}", self.prefix)
    }

    fn worker(&self, worker: &str, what: &str) -> String {
        format!("{}.v1.worker.{worker}.{what}", self.prefix)
    }

    pub fn job_hello(&self, job: &str) -> String {
        self.job(job, "hello")
    }
    pub fn job_loss(&self, job: &str) -> String {
        self.job(job, "loss")
    }
    pub fn job_bye(&self, job: &str) -> String {
        self.job(job, "bye")
    }
    pub fn job_alloc(&self, job: &str) -> String {
        self.job(job, "alloc")
    }
    pub fn worker_hello(&self, worker: &str) -> String {
        self.worker(worker, "hello")
    }
    pub fn worker_beat(&self, worker: &str) -> String {
        self.worker(worker, "beat")
    }
    pub fn worker_assign(&self, worker: &str) -> String {
        self.worker(worker, "assign")
    }
    pub fn ctl_status(&self) -> String {
        format!("{}.v1.ctl.status", self.prefix)
    }
    pub fn ctl_epoch(&self) -> String {
        format!("{}.v1.ctl.epoch", self.prefix)
    }

    /// The wildcard subscriptions of the scheduler: one per message kind, not one per job.
    pub fn scheduler_subscriptions(&self) -> [String; 5] {
        [
            format!("{}.v1.job.*.hello", self.prefix),
            format!("{}.v1.job.*.loss", self.prefix),
            format!("{}.v1.job.*.bye", self.prefix),
            format!("{}.v1.worker.*.hello", self.prefix),
            format!("{}.v1.worker.*.beat", self.prefix),
        ]
    }

    /// Splits a subject into its kind and id (empty for `ctl` subjects). Allocation-free: it
    /// runs once per message.
    pub fn parse<'a>(&self, subject: &'a str) -> Result<(Kind, &'a str), ProtocolError> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix(".v1."))
            .ok_or(ProtocolError::UnknownSubject)?;
        match rest {
            "ctl.status" => return Ok((Kind::CtlStatus, "")),
            "ctl.epoch" => return Ok((Kind::CtlEpoch, "")),
            _ => {}
        }
        let (scope, rest) = rest.split_once('.').ok_or(ProtocolError::UnknownSubject)?;
        let (id, what) = rest.rsplit_once('.').ok_or(ProtocolError::UnknownSubject)?;
        let kind = match (scope, what) {
            ("job", "hello") => Kind::JobHello,
            ("job", "loss") => Kind::JobLoss,
            ("job", "bye") => Kind::JobBye,
            ("job", "alloc") => Kind::JobAlloc,
            ("worker", "hello") => Kind::WorkerHello,
            ("worker", "beat") => Kind::WorkerBeat,
            ("worker", "assign") => Kind::WorkerAssign,
            _ => return Err(ProtocolError::UnknownSubject),
        };
        // An id with a dot in it would be several tokens: `valid_id` refuses it.
        if !valid_id(id) {
            return Err(ProtocolError::InvalidId);
        }
        Ok((kind, id))
    }
}

fn one() -> f64 {
    1.0
}
fn one_u32() -> u32 {
    1
}

/// A job joins (or rejoins).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub job: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default = "one")]
    pub weight: f64,
    #[serde(default)]
    pub min_workers: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_workers: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_iter_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_sizes: Option<Vec<u32>>,
}

impl JobSpec {
    /// A spec with every optional field at its default.
    pub fn new(job: &str) -> Self {
        JobSpec {
            job: job.to_string(),
            family: None,
            tenant: None,
            weight: 1.0,
            min_workers: 0,
            max_workers: None,
            target_loss: None,
            slo_iter_seconds: None,
            batch_sizes: None,
        }
    }
}

/// One finished iteration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossReport {
    pub job: String,
    pub iter: u64,
    pub loss: f64,
    pub iter_seconds: f64,
    pub workers: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<f64>,
}

/// The same fields as [`LossReport`], decoded without copying the job id: the ingest hot path.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct LossReportRef<'a> {
    #[serde(borrow)]
    pub job: std::borrow::Cow<'a, str>,
    pub iter: u64,
    pub loss: f64,
    pub iter_seconds: f64,
    pub workers: u32,
    #[serde(default)]
    pub batch_size: Option<u32>,
}

/// The numbers of one loss report, as the job actor needs them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossPoint {
    pub iter: u64,
    pub loss: f64,
    pub iter_seconds: f64,
    pub workers: u32,
}

impl LossReportRef<'_> {
    /// Checks a report received on the subject of job `subject_job`; returns its numbers.
    pub fn validate(&self, subject_job: &str) -> Result<LossPoint, ProtocolError> {
        check_id(&self.job, subject_job)?;
        if !self.loss.is_finite() {
            return Err(ProtocolError::Invalid("loss is not finite", RejectCause::NonFiniteLoss));
        }
        if self.iter == 0 {
            return Err(ProtocolError::Invalid("iter is 1-based", RejectCause::BadIteration));
        }
        if !(self.iter_seconds.is_finite() && self.iter_seconds >= 0.0) {
            return Err(ProtocolError::Invalid(
                "iter_seconds must be finite and non-negative",
                RejectCause::NegativeTime,
            ));
        }
        if self.batch_size.is_some_and(|b| b == 0 || b > MAX_BATCH_SIZE) {
            return Err(ProtocolError::Invalid("batch_size out of range", RejectCause::Oversized));
        }
        Ok(LossPoint { iter: self.iter, loss: self.loss, iter_seconds: self.iter_seconds, workers: self.workers })
    }
}

/// Decodes a message that borrows from `payload`.
pub fn decode_borrowed<'a, T: Deserialize<'a>>(
    encoding: Encoding,
    payload: &'a [u8],
    what: &'static str,
) -> Result<T, ProtocolError> {
    match encoding {
        Encoding::MsgPack => {
            rmp_serde::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
        Encoding::Json => {
            serde_json::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndReason {
    Finished,
    Cancelled,
    Failed,
}

/// A job leaves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobEnd {
    pub job: String,
    pub reason: EndReason,
}

/// A job's workers changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobAllocation {
    pub job: String,
    pub epoch: u64,
    pub workers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
}

/// A worker joins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub worker: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    #[serde(default = "one_u32")]
    pub slots: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// A worker is alive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub worker: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    #[default]
    Worker,
    Ps,
}

/// Which job a worker serves now (`job: None` means idle).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerAssignment {
    pub worker: String,
    pub epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default)]
    pub role: Role,
}

/// The reply to a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Ack {
    pub fn ok() -> Self {
        Ack { ok: true, error: None }
    }
    pub fn error(message: impl Into<String>) -> Self {
        Ack { ok: false, error: Some(message.into()) }
    }
}

/// One job in a status snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    pub job: String,
    #[serde(default)]
    pub last_iter: Option<u64>,
    #[serde(default)]
    pub last_loss: Option<f64>,
    /// Predicted normalised gain over the planning horizon with the job's current workers.
    #[serde(default)]
    pub predicted_gain: Option<f64>,
    pub workers: u32,
    pub points: u64,
}

/// One worker in a status snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub worker: String,
    #[serde(default)]
    pub job: Option<String>,
    /// Seconds since its last heartbeat.
    pub silent_s: f64,
}

/// What the scheduler believes (`slaq.v1.ctl.status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusSnapshot {
    pub epoch: u64,
    pub policy: String,
    pub jobs: Vec<JobStatus>,
    pub workers: Vec<WorkerStatus>,
    /// Messages accepted, by kind.
    pub accepted: BTreeMap<String, u64>,
    /// Messages rejected, by cause.
    pub rejected: BTreeMap<String, u64>,
}

/// One line per epoch (`slaq.v1.ctl.epoch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochSummary {
    pub epoch: u64,
    pub num_jobs: usize,
    pub num_workers: usize,
    pub workers_assigned: u64,
    /// Workers whose assignment changed this epoch.
    pub workers_moved: usize,
    /// Jobs that have not bid yet (they keep their workers this epoch).
    pub late_bids: usize,
    /// Collecting the jobs' latest bids (job actors push them; nothing is awaited).
    pub gather_ms: f64,
    pub policy_ms: f64,
    pub publish_ms: f64,
    pub total_ms: f64,
}

/// The payload encoding: MessagePack maps with named fields, or JSON when the request says
/// `Content-Type: application/json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    #[default]
    MsgPack,
    Json,
}

impl Encoding {
    pub const JSON_CONTENT_TYPE: &'static str = "application/json";

    /// The encoding a `Content-Type` header value selects.
    pub fn from_content_type(content_type: Option<&str>) -> Self {
        match content_type {
            Some(v) if v.trim().eq_ignore_ascii_case(Self::JSON_CONTENT_TYPE) => Encoding::Json,
            _ => Encoding::MsgPack,
        }
    }
}

/// Why an incoming message was refused. Counted per cause; never fatal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectCause {
    Undecodable,
    UnknownSubject,
    InvalidId,
    IdMismatch,
    NonFiniteLoss,
    BadIteration,
    NegativeTime,
    InvalidSpec,
    Oversized,
    UnknownJob,
    UnknownWorker,
    Duplicate,
    Overloaded,
}

impl RejectCause {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectCause::Undecodable => "undecodable",
            RejectCause::UnknownSubject => "unknown_subject",
            RejectCause::InvalidId => "invalid_id",
            RejectCause::IdMismatch => "id_mismatch",
            RejectCause::NonFiniteLoss => "non_finite_loss",
            RejectCause::BadIteration => "bad_iteration",
            RejectCause::NegativeTime => "negative_time",
            RejectCause::InvalidSpec => "invalid_spec",
            RejectCause::Oversized => "oversized",
            RejectCause::UnknownJob => "unknown_job",
            RejectCause::UnknownWorker => "unknown_worker",
            RejectCause::Duplicate => "duplicate",
            RejectCause::Overloaded => "overloaded",
        }
    }
}

/// Errors of the protocol layer.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("invalid subject prefix {0:?}")]
    InvalidPrefix(String),
    #[error("subject is not part of the slaq v1 contract")]
    UnknownSubject,
    #[error("id is not 1-64 characters from [A-Za-z0-9_-]")]
    InvalidId,
    #[error("cannot decode {what}")]
    Decode { what: &'static str, detail: String },
    #[error("cannot encode message")]
    Encode { detail: String },
    #[error("{0}")]
    Invalid(&'static str, RejectCause),
}

impl ProtocolError {
    /// The counter this error is counted under.
    pub fn cause(&self) -> RejectCause {
        match self {
            ProtocolError::InvalidPrefix(_) | ProtocolError::UnknownSubject => RejectCause::UnknownSubject,
            ProtocolError::InvalidId => RejectCause::InvalidId,
            ProtocolError::Decode { .. } | ProtocolError::Encode { .. } => RejectCause::Undecodable,
            ProtocolError::Invalid(_, cause) => *cause,
        }
    }
}

/// Encodes a message (MessagePack with named fields, so fields can be added later).
pub fn encode<T: Serialize>(encoding: Encoding, message: &T) -> Result<Vec<u8>, ProtocolError> {
    match encoding {
        Encoding::MsgPack => {
            rmp_serde::to_vec_named(message).map_err(|e| ProtocolError::Encode { detail: e.to_string() })
        }
        Encoding::Json => serde_json::to_vec(message).map_err(|e| ProtocolError::Encode { detail: e.to_string() }),
    }
}

/// Decodes a message; unknown fields are ignored.
pub fn decode<T: DeserializeOwned>(encoding: Encoding, payload: &[u8], what: &'static str) -> Result<T, ProtocolError> {
    match encoding {
        Encoding::MsgPack => {
            rmp_serde::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
        Encoding::Json => {
            serde_json::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
    }
}

fn check_id(field: &str, subject_id: &str) -> Result<(), ProtocolError> {
    if !valid_id(field) {
        return Err(ProtocolError::InvalidId);
    }
    if field != subject_id {
        return Err(ProtocolError::Invalid("id in the payload differs from the subject's", RejectCause::IdMismatch));
    }
    Ok(())
}

impl LossReport {
    /// Checks a report received on the subject of job `subject_job`.
    pub fn validate(&self, subject_job: &str) -> Result<LossPoint, ProtocolError> {
        LossReportRef {
            job: std::borrow::Cow::Borrowed(&self.job),
            iter: self.iter,
            loss: self.loss,
            iter_seconds: self.iter_seconds,
            workers: self.workers,
            batch_size: self.batch_size,
        }
        .validate(subject_job)
    }
}

impl JobSpec {
    pub fn validate(&self, subject_job: &str) -> Result<(), ProtocolError> {
        check_id(&self.job, subject_job)?;
        let invalid = |m| Err(ProtocolError::Invalid(m, RejectCause::InvalidSpec));
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return invalid("weight must be positive and finite");
        }
        if self.max_workers.is_some_and(|max| max < self.min_workers) {
            return invalid("max_workers is below min_workers");
        }
        if self.slo_iter_seconds.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
            return invalid("slo_iter_seconds must be positive and finite");
        }
        if self.target_loss.is_some_and(|t| !t.is_finite()) {
            return invalid("target_loss must be finite");
        }
        let bad_size = |b: &u32| *b == 0 || *b > MAX_BATCH_SIZE;
        if self.batch_sizes.as_ref().is_some_and(|sizes| sizes.len() > 64 || sizes.iter().any(bad_size)) {
            return Err(ProtocolError::Invalid("batch_sizes out of range", RejectCause::Oversized));
        }
        Ok(())
    }
}

impl JobEnd {
    pub fn validate(&self, subject_job: &str) -> Result<(), ProtocolError> {
        check_id(&self.job, subject_job)
    }
}

impl WorkerSpec {
    pub fn validate(&self, subject_worker: &str) -> Result<(), ProtocolError> {
        check_id(&self.worker, subject_worker)?;
        if self.slots == 0 || self.slots > 1024 {
            return Err(ProtocolError::Invalid("slots must be 1..=1024", RejectCause::InvalidSpec));
        }
        Ok(())
    }
}

impl Heartbeat {
    pub fn validate(&self, subject_worker: &str) -> Result<(), ProtocolError> {
        check_id(&self.worker, subject_worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(valid_id("job-1_A"));
        assert!(!valid_id(""));
        assert!(!valid_id("a.b"));
        assert!(!valid_id("a*"));
        assert!(!valid_id(&"x".repeat(65)));
        assert!(valid_id(&"x".repeat(64)));
    }

    #[test]
    fn subjects_round_trip() {
        let s = Subjects::new("slaq").unwrap();
        assert_eq!(s.parse(&s.job_loss("j1")).unwrap(), (Kind::JobLoss, "j1"));
        assert_eq!(s.parse(&s.worker_beat("w-2")).unwrap(), (Kind::WorkerBeat, "w-2"));
        assert_eq!(s.parse(&s.ctl_status()).unwrap(), (Kind::CtlStatus, ""));
        assert!(s.parse("other.v1.job.j1.loss").is_err());
        assert!(s.parse("slaq.v1.job.j1.nope").is_err());
        assert!(s.parse("slaq.v1.job.a.b.loss").is_err(), "an id is one token");
        assert!(s.parse("slaq.v1.job.loss").is_err());
        assert!(s.parse("slaq.v1.ctl.status.x").is_err());
        assert!(Subjects::new("a..b").is_err());
        assert!(Subjects::new("team-a.slaq").is_ok());
    }

    #[test]
    fn msgpack_is_named_and_tolerates_unknown_fields() {
        let report = LossReport {
            job: "j".into(),
            iter: 3,
            loss: 0.5,
            iter_seconds: 1.0,
            workers: 2,
            batch_size: None,
            sent_at: None,
        };
        let bytes = encode(Encoding::MsgPack, &report).unwrap();
        let back: LossReport = decode(Encoding::MsgPack, &bytes, "loss report").unwrap();
        assert_eq!(back, report);
        // A newer sender with an extra field.
        #[derive(Serialize)]
        struct Newer<'a> {
            job: &'a str,
            iter: u64,
            loss: f64,
            iter_seconds: f64,
            workers: u32,
            gpu_temp: f64,
        }
        let newer = rmp_serde::to_vec_named(&Newer {
            job: "j",
            iter: 1,
            loss: 1.0,
            iter_seconds: 0.1,
            workers: 1,
            gpu_temp: 70.0,
        })
        .unwrap();
        assert!(decode::<LossReport>(Encoding::MsgPack, &newer, "loss report").is_ok());
        let json = br#"{"job":"j","iter":1,"loss":1.0,"iter_seconds":0.1,"workers":1,"extra":[1,2]}"#;
        assert!(decode::<LossReport>(Encoding::Json, json, "loss report").is_ok());
    }

    #[test]
    fn defaults_apply() {
        let spec: JobSpec = decode(Encoding::Json, br#"{"job":"j"}"#, "spec").unwrap();
        assert_eq!(spec, JobSpec::new("j"));
        let w: WorkerSpec = decode(Encoding::Json, br#"{"worker":"w"}"#, "spec").unwrap();
        assert_eq!(w.slots, 1);
        let a: WorkerAssignment = decode(Encoding::Json, br#"{"worker":"w","epoch":3}"#, "a").unwrap();
        assert_eq!(a.role, Role::Worker);
        assert_eq!(a.job, None);
    }

    #[test]
    fn validation_names_the_cause() {
        let ok = LossReport {
            job: "j".into(),
            iter: 1,
            loss: 1.0,
            iter_seconds: 0.0,
            workers: 1,
            batch_size: None,
            sent_at: None,
        };
        assert!(ok.validate("j").is_ok());
        let cause = |r: LossReport, subject: &str| r.validate(subject).unwrap_err().cause();
        assert_eq!(cause(ok.clone(), "k"), RejectCause::IdMismatch);
        assert_eq!(cause(LossReport { loss: f64::NAN, ..ok.clone() }, "j"), RejectCause::NonFiniteLoss);
        assert_eq!(cause(LossReport { loss: f64::INFINITY, ..ok.clone() }, "j"), RejectCause::NonFiniteLoss);
        assert_eq!(cause(LossReport { iter: 0, ..ok.clone() }, "j"), RejectCause::BadIteration);
        assert_eq!(cause(LossReport { iter_seconds: -1.0, ..ok.clone() }, "j"), RejectCause::NegativeTime);
        assert_eq!(cause(LossReport { batch_size: Some(u32::MAX), ..ok.clone() }, "j"), RejectCause::Oversized);
        let bad = JobSpec { max_workers: Some(1), min_workers: 2, ..JobSpec::new("j") };
        assert_eq!(bad.validate("j").unwrap_err().cause(), RejectCause::InvalidSpec);
        assert_eq!(
            decode::<LossReport>(Encoding::MsgPack, b"\xc1garbage", "loss report").unwrap_err().cause(),
            RejectCause::Undecodable
        );
    }

    #[test]
    fn content_type_selects_json() {
        assert_eq!(Encoding::from_content_type(Some("application/json")), Encoding::Json);
        assert_eq!(Encoding::from_content_type(Some("Application/JSON ")), Encoding::Json);
        assert_eq!(Encoding::from_content_type(None), Encoding::MsgPack);
        assert_eq!(Encoding::from_content_type(Some("application/msgpack")), Encoding::MsgPack);
    }
}
