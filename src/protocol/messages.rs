//! The message types of the contract, each with its validation beside it. Unknown fields are
//! ignored when decoding, so newer senders can add fields.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::subjects::valid_job_id;
use super::{ProtocolError, RejectCause};

/// Largest accepted batch size in a report or spec.
pub const MAX_BATCH_SIZE: u32 = 1 << 24;

pub(super) fn one() -> f64 {
    1.0
}

pub(super) fn is_one(w: &f64) -> bool {
    *w == 1.0
}
fn one_u32() -> u32 {
    1
}

/// The id a payload names must be its subject's (a worker's subject id is one token, so a
/// payload naming a tenant's job, two tokens, never matches it).
fn check_id(field: &str, subject_id: &str) -> Result<(), ProtocolError> {
    if !valid_job_id(field) {
        return Err(ProtocolError::InvalidId);
    }
    if field != subject_id {
        return Err(ProtocolError::Invalid("id in the payload differs from the subject's", RejectCause::IdMismatch));
    }
    Ok(())
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
    /// A parameter-server job: the scheduler splits its slots into workers and servers
    /// (`role: "ps"`). Default: all-reduce, workers only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parameter_server: bool,
    /// The largest per-worker batch that fits; a larger one is accumulated over passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_local_batch: Option<u32>,
    /// What the agents run on the job's workers, once per generation (`slaq submit`). A job
    /// with a command exists without any process of its own: it is not forgotten for silence,
    /// and its processes are restarted when they fail or stall. A later hello without a
    /// command keeps the one submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<JobCommand>,
    /// The only worker counts the job may run at (e.g. powers of two), besides none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_counts: Option<Vec<u32>>,
    /// The iteration the job stops at, if it knows (a `max_iter`, epochs × steps): what the
    /// finish-time bound (`[scheduler] max_slowdown`) predicts its remaining work from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iters: Option<u64>,
    /// Its speed on worker types, if it knows (e.g. steps per second measured elsewhere:
    /// `{"v100": 2.5, "k80": 0.35}`; only the ratios matter): the prior for a type it has not
    /// run on, until its own measurements there take over (issue #31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speeds: Option<std::collections::BTreeMap<String, f64>>,
    /// Seconds between its saves, if it saves on a schedule and not at a stop (its reports'
    /// `checkpoint_age_s` say when it last did): the scheduler changes its workers right after
    /// a save, not between two, unless a guarantee needs them (`save_wait_max_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_every_s: Option<f64>,
    /// It saves when asked (with `checkpoint_every_s`: it saves on a schedule, not at a stop):
    /// before a change of its workers the scheduler asks it to save (its allocation's `save`)
    /// and waits for the save its reports' `checkpoint_age_s` show, at most its tenant's grace
    /// (the stop then gets what is left of it), so a move or a reclaim loses no work.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub save_on_request: bool,
    /// Its priority class inside its tenant, capped by the tenant's `max_priority` (with
    /// `[tenants]`; ignored without): a higher class is served first from its tenant's quota.
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub priority: u8,
    /// Scheduler-owned, never read from a hello: the reports stream's sequence at which an
    /// earlier job of the same id ended (its bye). The scheduler saves it with the spec, and
    /// drops stream messages of the job at or below it, so a restarted scheduler's replay
    /// never feeds this job its predecessor's reports or ends it with its predecessor's bye.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_before: Option<u64>,
}

/// Largest total size of a command's arguments, environment and paths, in bytes.
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;
/// Most arguments and environment variables a command may have (each).
pub const MAX_COMMAND_ITEMS: usize = 256;
/// Most restarts a job may ask for before it ends as failed.
pub const MAX_RESTARTS: u32 = 100;

fn three() -> u32 {
    3
}

/// A submitted job's command: run by each agent given one of its workers, with the arguments
/// as they are (never through a shell unless `argv` names one), the environment added to
/// torchrun's and slaq's (which it may not override), in `cwd`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCommand {
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Where the job keeps its checkpoints (`SLAQ_CHECKPOINT_DIR`; a directory every worker
    /// reaches, such as a shared file system).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_dir: Option<String>,
    /// Failed or stalled generations restarted before the job ends as failed.
    #[serde(default = "three")]
    pub max_restarts: u32,
}

/// Environment variables slaq sets for a job's processes; a command's `env` may not set them.
pub fn reserved_env(name: &str) -> bool {
    const TORCHRUN: [&str; 7] =
        ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"];
    TORCHRUN.contains(&name) || name.starts_with("SLAQ_")
}

impl JobCommand {
    pub fn new(argv: Vec<String>) -> Self {
        JobCommand { argv, env: BTreeMap::new(), cwd: None, checkpoint_dir: None, max_restarts: three() }
    }

    pub fn validate(&self) -> Result<(), ProtocolError> {
        let invalid = |m| Err(ProtocolError::Invalid(m, RejectCause::InvalidSpec));
        if self.argv.first().is_none_or(|a| a.is_empty()) {
            return invalid("command: argv is empty");
        }
        if self.argv.len() > MAX_COMMAND_ITEMS || self.env.len() > MAX_COMMAND_ITEMS {
            return Err(ProtocolError::Invalid("command: too many arguments or variables", RejectCause::Oversized));
        }
        let paths = [&self.cwd, &self.checkpoint_dir];
        let texts = self.argv.iter().chain(self.env.keys()).chain(self.env.values()).chain(paths.into_iter().flatten());
        let (mut bytes, mut nul) = (0usize, false);
        for t in texts {
            bytes += t.len() + 1;
            nul |= t.contains('\0');
        }
        if bytes > MAX_COMMAND_BYTES {
            return Err(ProtocolError::Invalid("command: longer than 16 KiB", RejectCause::Oversized));
        }
        if nul {
            return invalid("command: a NUL byte");
        }
        let name_ok = |k: &str| {
            k.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        };
        if !self.env.keys().all(|k| name_ok(k)) {
            return invalid("command: an environment variable name outside [A-Za-z_][A-Za-z0-9_]*");
        }
        if self.env.keys().any(|k| reserved_env(k)) {
            return invalid("command: env may not set RANK, WORLD_SIZE, ..., MASTER_PORT or SLAQ_*");
        }
        if paths.into_iter().flatten().any(|p| !p.starts_with('/')) {
            return invalid("command: cwd and checkpoint_dir must be absolute paths");
        }
        if self.max_restarts > MAX_RESTARTS {
            return invalid("command: max_restarts above 100");
        }
        Ok(())
    }
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
            parameter_server: false,
            max_local_batch: None,
            command: None,
            worker_counts: None,
            max_iters: None,
            speeds: None,
            checkpoint_every_s: None,
            save_on_request: false,
            priority: 0,
            ended_before: None,
        }
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
        if self.max_local_batch.as_ref().is_some_and(bad_size) {
            return Err(ProtocolError::Invalid("max_local_batch out of range", RejectCause::Oversized));
        }
        if self.batch_sizes.as_ref().is_some_and(|sizes| sizes.len() > 64 || sizes.iter().any(bad_size)) {
            return Err(ProtocolError::Invalid("batch_sizes out of range", RejectCause::Oversized));
        }
        if let Some(command) = &self.command {
            command.validate()?;
        }
        if self
            .worker_counts
            .as_ref()
            .is_some_and(|c| c.is_empty() || c.len() > 64 || c.iter().any(|&n| n == 0 || n > MAX_BATCH_SIZE))
        {
            return invalid("worker_counts must be 1 to 64 counts, each at least 1");
        }
        // A job that could never run would wait for ever: a submitted one is never forgotten.
        let max = self.max_workers.unwrap_or(u32::MAX);
        if self.worker_counts.as_ref().is_some_and(|c| c.iter().all(|&n| n > max)) {
            return invalid("every worker_counts entry is above max_workers: the job could never run");
        }
        if self.max_iters == Some(0) {
            return invalid("max_iters must be at least 1");
        }
        if self.checkpoint_every_s.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
            return invalid("checkpoint_every_s must be positive and finite");
        }
        if self.save_on_request && self.checkpoint_every_s.is_none() {
            return invalid("save_on_request needs checkpoint_every_s (a job without it is taken to save at its stop)");
        }
        if let Some(speeds) = &self.speeds
            && (speeds.len() > 64 || speeds.iter().any(|(k, &v)| !(super::valid_id(k) && v.is_finite() && v > 0.0)))
        {
            return invalid("speeds: at most 64 worker types (valid ids), each a finite speed > 0");
        }
        if self.command.is_some() && max == 0 {
            return invalid("a submitted job with max_workers 0 could never run");
        }
        Ok(())
    }
}

/// One finished iteration. Decoded without copying the job id where the bytes allow (the
/// ingest's hot path: `decode_borrowed`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossReport<'a> {
    #[serde(borrow)]
    pub job: std::borrow::Cow<'a, str>,
    pub iter: u64,
    pub loss: f64,
    pub iter_seconds: f64,
    pub workers: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<f64>,
    /// Machines its workers span (placement-aware iteration-time model, `cluster::model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machines: Option<u32>,
    /// The part of `iter_seconds` spent synchronising gradients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_seconds: Option<f64>,
    /// Squared norm and variance of the gradient (statistical efficiency of larger batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_sqr: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_var: Option<f64>,
    /// The generation of the processes that ran the iteration (`SLAQ_GENERATION`): the first
    /// new iteration of a generation times what its restart cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The work a stop would lose now: seconds since the job's last checkpoint (0 for a job
    /// that checkpoints when it is stopped). A move costs it this plus the restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_age_s: Option<f64>,
}

impl<'a> LossReport<'a> {
    /// A report of `loss` after iteration `iter`, which took `iter_seconds` on `workers`, with
    /// every optional field unset (the job's id borrowed or owned).
    pub fn new(
        job: impl Into<std::borrow::Cow<'a, str>>,
        iter: u64,
        loss: f64,
        iter_seconds: f64,
        workers: u32,
    ) -> Self {
        LossReport {
            job: job.into(),
            iter,
            loss,
            iter_seconds,
            workers,
            batch_size: None,
            sent_at: None,
            machines: None,
            sync_seconds: None,
            grad_sqr: None,
            grad_var: None,
            generation: None,
            checkpoint_age_s: None,
        }
    }
}

/// The numbers of one loss report, as the job actor needs them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossPoint {
    pub iter: u64,
    pub loss: f64,
    pub iter_seconds: f64,
    pub workers: u32,
    pub batch_size: Option<u32>,
    pub machines: Option<u32>,
    pub sync_seconds: Option<f64>,
    /// `(grad_sqr, grad_var)` when both were reported.
    pub grads: Option<(f64, f64)>,
    pub generation: Option<u64>,
    pub checkpoint_age_s: Option<f64>,
}

impl LossReport<'_> {
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
        if self.machines.is_some_and(|m| m == 0 || m > self.workers.max(1)) {
            return Err(ProtocolError::Invalid("machines must be 1 to workers", RejectCause::Oversized));
        }
        if self.sync_seconds.is_some_and(|s| !(s.is_finite() && s >= 0.0 && s <= self.iter_seconds)) {
            return Err(ProtocolError::Invalid("sync_seconds must be in [0, iter_seconds]", RejectCause::NegativeTime));
        }
        let stat = |x: Option<f64>| x.is_some_and(|v| !(v.is_finite() && v >= 0.0));
        if stat(self.checkpoint_age_s) {
            return Err(ProtocolError::Invalid(
                "checkpoint_age_s must be finite and non-negative",
                RejectCause::NegativeTime,
            ));
        }
        if stat(self.grad_sqr) || stat(self.grad_var) {
            return Err(ProtocolError::Invalid(
                "gradient statistics must be finite and non-negative",
                RejectCause::NonFiniteLoss,
            ));
        }
        Ok(LossPoint {
            iter: self.iter,
            loss: self.loss,
            iter_seconds: self.iter_seconds,
            workers: self.workers,
            batch_size: self.batch_size,
            machines: self.machines,
            sync_seconds: self.sync_seconds,
            grads: self.grad_sqr.zip(self.grad_var),
            generation: self.generation,
            checkpoint_age_s: self.checkpoint_age_s,
        })
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

impl JobEnd {
    pub fn validate(&self, subject_job: &str) -> Result<(), ProtocolError> {
        check_id(&self.job, subject_job)
    }
}

/// A job's workers changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobAllocation {
    pub job: String,
    pub epoch: u64,
    pub workers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// The term of the leader that decided it (replicated schedulers, `bus::lease`): ignore an
    /// allocation older than one already seen. Absent from a scheduler without replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// The workers' type (`WorkerSpec.kind`; a world is one type). Absent while every worker is
    /// of the default type, or when the job has no workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<String>,
    /// Save now (a job that said `save_on_request`): a change of its workers waits for the save
    /// its next reports' `checkpoint_age_s` show, at most its tenant's grace. Its workers are
    /// the ones it has.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub save: bool,
}

/// A worker joins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub worker: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    #[serde(default = "one_u32")]
    pub slots: u32,
    /// Its worker type, e.g. `v100` (`slaq worker --accelerator`): a job's workers are all of
    /// one type, and each job's speed is learned per type. Absent: the type `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The address the worker's machine is reached at by the other members of a job
    /// (`MASTER_ADDR` when it runs a job's rank 0). Default: the machine's name, else
    /// `127.0.0.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise: Option<String>,
}

impl WorkerSpec {
    /// Where the other members of a job reach this worker: `advertise`, else its machine's name
    /// if that is a host name, else `127.0.0.1`.
    pub fn address(&self) -> &str {
        match (&self.advertise, &self.machine) {
            (Some(a), _) => a,
            (None, Some(m)) if valid_host(m) => m,
            _ => "127.0.0.1",
        }
    }

    pub fn validate(&self, subject_worker: &str) -> Result<(), ProtocolError> {
        check_id(&self.worker, subject_worker)?;
        if self.slots == 0 || self.slots > 1024 {
            return Err(ProtocolError::Invalid("slots must be 1..=1024", RejectCause::InvalidSpec));
        }
        if self.kind.as_deref().is_some_and(|k| !crate::protocol::valid_id(k)) {
            return Err(ProtocolError::Invalid(
                "kind (the worker type) must be 1-64 characters from [A-Za-z0-9_-]",
                RejectCause::InvalidSpec,
            ));
        }
        if self.advertise.as_deref().is_some_and(|a| !valid_host(a)) {
            return Err(ProtocolError::Invalid(
                "advertise must be a host name or IP address (1-253 characters from [A-Za-z0-9.:_-])",
                RejectCause::InvalidSpec,
            ));
        }
        Ok(())
    }
}

/// A worker is alive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub worker: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<f64>,
    /// What the agent runs now: the assignment it follows. The scheduler compares it with what
    /// it recorded for the worker and sends its assignment again where they differ (an
    /// assignment lost in a crash). Absent from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Running>,
}

/// The assignment an agent follows, as its heartbeat tells it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// The job it runs (absent: idle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The term and epoch of the assignment (0 and 0 before its first).
    #[serde(default)]
    pub term: u64,
    #[serde(default)]
    pub epoch: u64,
    /// The generation of the job's processes it runs (see [`Launch`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The generation's process ended by itself (not stopped by the agent): its exit code, or
    /// 128 + the signal that killed it; 126 when the agent refused or could not start it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// Assignments and commands the agent refused since it started (inconsistent ranks, older
    /// terms or generations, commands outside `--allow-command`, commands that would not start).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused: u64,
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u8(n: &u8) -> bool {
    *n == 0
}

impl Heartbeat {
    /// A heartbeat that says nothing of what the worker runs.
    pub fn new(worker: &str) -> Self {
        Heartbeat { worker: worker.to_string(), at: None, running: None }
    }

    pub fn validate(&self, subject_worker: &str) -> Result<(), ProtocolError> {
        check_id(&self.worker, subject_worker)?;
        if self.running.as_ref().and_then(|r| r.job.as_deref()).is_some_and(|j| !valid_job_id(j)) {
            return Err(ProtocolError::InvalidId);
        }
        Ok(())
    }
}

/// What a worker does for its job: compute gradients, or serve parameters (a parameter-server
/// job's servers, `JobSpec::parameter_server`).
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
    /// The scheduler does not know this worker (it restarted without state, or expired the
    /// worker): the agent should say hello again. Ignored by older agents.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hello_again: bool,
    /// The term of the leader that decided it (replicated schedulers, `bus::lease`): an agent
    /// ignores an assignment from a term older than one it has obeyed. Absent from a scheduler
    /// without replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// Where this worker's process stands in the job's current generation (its rank, the world
    /// and the rendezvous), the same for every member of it: sent with every assignment to a
    /// job. Absent from an idle assignment and from older schedulers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// The submitted job's command (with `launch`): what the agent runs for this generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<JobCommand>,
    /// How long its process has between SIGTERM and SIGKILL when it is stopped (to save a
    /// checkpoint): its tenant's `grace_s` (`[tenants]`). Absent: the agent's own
    /// `--stop-grace-s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace_ms: Option<u64>,
    /// The worker is taken from another tenant's job for this one: the process it runs now gets
    /// at most this grace (milliseconds, this job's tenant's `grace_s`) whatever its own, so
    /// that a tenant's reclaim promise depends on its own setting only (the lender's terms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_grace_ms: Option<u64>,
}

/// What one process of a job needs to join its generation: torchrun's environment
/// (`cluster::ranks`). Every change of the job's membership starts a new generation, and every
/// member of one is told the same `generation`, `world_size` and rendezvous.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    pub generation: u64,
    pub world_size: u32,
    pub rank: u32,
    pub local_rank: u32,
    pub local_world_size: u32,
    /// The index of this worker's machine among the job's machines.
    pub group_rank: u32,
    /// The rank-0 worker's advertised address, and the port its rendezvous listens on.
    pub master_addr: String,
    pub master_port: u16,
    /// The global batch the scheduler chose, if the job declared batch sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
}

impl Launch {
    /// Checks that the numbers make one world and the address is a plain host name or IP
    /// address (it becomes an environment variable of a process the agent starts).
    pub fn check(&self) -> Result<(), &'static str> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err("rank outside the world");
        }
        if self.local_world_size == 0
            || self.local_rank >= self.local_world_size
            || self.local_world_size > self.world_size
        {
            return Err("local rank outside the machine's share of the world");
        }
        if self.local_rank > self.rank || self.group_rank > self.rank {
            return Err("ranks are not contiguous per machine");
        }
        if self.master_port == 0 {
            return Err("no rendezvous port");
        }
        if !valid_host(&self.master_addr) {
            return Err("rendezvous address is not 1-253 characters from [A-Za-z0-9.:_-]");
        }
        Ok(())
    }
}

/// A host name or IP address as an agent advertises it: 1-253 characters from
/// `[A-Za-z0-9.:_-]`, not starting with `-`.
pub fn valid_host(host: &str) -> bool {
    (1..=253).contains(&host.len())
        && !host.starts_with('-')
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'_' | b'-'))
}

/// The reply to a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The term of the scheduler that answered (see `WorkerAssignment::term`): an agent or a job
    /// confirms a term it has not seen before with a hello, so a forged assignment with a huge
    /// term cannot lock it. Absent from a scheduler without terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
}

impl Ack {
    pub fn ok() -> Self {
        Ack { ok: true, error: None, term: None }
    }
    pub fn error(message: impl Into<String>) -> Self {
        Ack { ok: false, error: Some(message.into()), term: None }
    }
    /// The answer carries the answering scheduler's term.
    pub fn with_term(self, term: Option<u64>) -> Self {
        Ack { term, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Encoding, decode_borrowed};

    #[test]
    fn validation_names_the_cause() {
        let ok = LossReport::new("j", 1, 1.0, 0.0, 1);
        assert!(ok.validate("j").is_ok());
        let cause = |r: LossReport, subject: &str| r.validate(subject).unwrap_err().cause();
        assert_eq!(cause(ok.clone(), "k"), RejectCause::IdMismatch);
        assert_eq!(cause(LossReport { loss: f64::NAN, ..ok.clone() }, "j"), RejectCause::NonFiniteLoss);
        assert_eq!(cause(LossReport { loss: f64::INFINITY, ..ok.clone() }, "j"), RejectCause::NonFiniteLoss);
        assert_eq!(cause(LossReport { iter: 0, ..ok.clone() }, "j"), RejectCause::BadIteration);
        assert_eq!(cause(LossReport { iter_seconds: -1.0, ..ok.clone() }, "j"), RejectCause::NegativeTime);
        assert_eq!(cause(LossReport { batch_size: Some(u32::MAX), ..ok.clone() }, "j"), RejectCause::Oversized);
        // Machines: 1 to the workers it spans.
        let spans = |machines| LossReport { workers: 3, machines: Some(machines), ..ok.clone() };
        assert!(spans(3).validate("j").is_ok() && spans(1).validate("j").is_ok());
        assert_eq!(cause(spans(4), "j"), RejectCause::Oversized);
        assert_eq!(cause(spans(0), "j"), RejectCause::Oversized);
        let bad = JobSpec { max_workers: Some(1), min_workers: 2, ..JobSpec::new("j") };
        assert_eq!(bad.validate("j").unwrap_err().cause(), RejectCause::InvalidSpec);
        assert_eq!(
            decode_borrowed::<LossReport>(Encoding::MsgPack, b"\xc1garbage", "loss report").unwrap_err().cause(),
            RejectCause::Undecodable
        );
    }

    /// Each rule of a spec's validation at its boundary: the last value accepted, the first
    /// refused, with the cause each gets.
    #[test]
    fn specs_are_checked_at_each_boundary() {
        let cause = |spec: JobSpec| spec.validate("j").err().map(|e| e.cause());
        let spec = JobSpec::new("j");
        assert_eq!(cause(spec.clone()), None);
        assert_eq!(cause(JobSpec { job: "k".into(), ..spec.clone() }), Some(RejectCause::IdMismatch));
        for weight in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(cause(JobSpec { weight, ..spec.clone() }), Some(RejectCause::InvalidSpec), "{weight}");
        }
        assert_eq!(cause(JobSpec { weight: 1e-9, ..spec.clone() }), None);
        assert_eq!(cause(JobSpec { min_workers: 3, max_workers: Some(3), ..spec.clone() }), None);
        assert_eq!(
            cause(JobSpec { min_workers: 3, max_workers: Some(2), ..spec.clone() }),
            Some(RejectCause::InvalidSpec)
        );
        assert_eq!(cause(JobSpec { min_workers: 3, max_workers: None, ..spec.clone() }), None);
        assert_eq!(cause(JobSpec { slo_iter_seconds: Some(0.5), ..spec.clone() }), None);
        for slo in [0.0, -0.5, f64::NAN, f64::INFINITY] {
            assert_eq!(cause(JobSpec { slo_iter_seconds: Some(slo), ..spec.clone() }), Some(RejectCause::InvalidSpec));
        }
        assert_eq!(cause(JobSpec { target_loss: Some(-3.0), ..spec.clone() }), None);
        assert_eq!(cause(JobSpec { max_iters: Some(1), ..spec.clone() }), None);
        assert_eq!(cause(JobSpec { max_iters: Some(0), ..spec.clone() }), Some(RejectCause::InvalidSpec));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let spec = JobSpec { checkpoint_every_s: Some(bad), ..spec.clone() };
            assert_eq!(cause(spec), Some(RejectCause::InvalidSpec));
        }
        assert_eq!(cause(JobSpec { checkpoint_every_s: Some(600.0), ..spec.clone() }), None);
        // Saving when asked is for a job that saves on a schedule (else it saves at its stop).
        let asks = JobSpec { save_on_request: true, ..spec.clone() };
        assert_eq!(cause(asks.clone()), Some(RejectCause::InvalidSpec));
        assert_eq!(cause(JobSpec { checkpoint_every_s: Some(600.0), ..asks }), None);
        let speeds = |pairs: &[(&str, f64)]| Some(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        assert_eq!(cause(JobSpec { speeds: speeds(&[("v100", 2.5), ("k80", 0.35)]), ..spec.clone() }), None);
        for bad in [speeds(&[("v100", 0.0)]), speeds(&[("v100", f64::NAN)]), speeds(&[("a b", 1.0)])] {
            assert_eq!(cause(JobSpec { speeds: bad, ..spec.clone() }), Some(RejectCause::InvalidSpec));
        }
        assert_eq!(cause(JobSpec { target_loss: Some(f64::NAN), ..spec.clone() }), Some(RejectCause::InvalidSpec));
        for (b, ok) in [(1, true), (MAX_BATCH_SIZE, true), (0, false), (MAX_BATCH_SIZE + 1, false)] {
            let want = (!ok).then_some(RejectCause::Oversized);
            assert_eq!(cause(JobSpec { max_local_batch: Some(b), ..spec.clone() }), want, "max_local_batch {b}");
            assert_eq!(cause(JobSpec { batch_sizes: Some(vec![8, b]), ..spec.clone() }), want, "batch_sizes {b}");
        }
        assert_eq!(cause(JobSpec { batch_sizes: Some(vec![8; 64]), ..spec.clone() }), None);
        assert_eq!(cause(JobSpec { batch_sizes: Some(vec![8; 65]), ..spec.clone() }), Some(RejectCause::Oversized));
    }

    #[test]
    fn workers_byes_and_ranks_are_checked_at_each_boundary() {
        let worker = WorkerSpec { worker: "w".into(), machine: None, slots: 1, kind: None, advertise: None };
        let cause = |w: WorkerSpec| w.validate("w").err().map(|e| e.cause());
        assert_eq!(cause(worker.clone()), None);
        assert_eq!(cause(WorkerSpec { slots: 1024, ..worker.clone() }), None);
        assert_eq!(cause(WorkerSpec { slots: 1025, ..worker.clone() }), Some(RejectCause::InvalidSpec));
        assert_eq!(cause(WorkerSpec { slots: 0, ..worker.clone() }), Some(RejectCause::InvalidSpec));
        assert_eq!(cause(WorkerSpec { kind: Some("v100".into()), ..worker.clone() }), None);
        for bad in ["", "a b", "v100\n", &"x".repeat(65)] {
            assert_eq!(cause(WorkerSpec { kind: Some(bad.into()), ..worker.clone() }), Some(RejectCause::InvalidSpec));
        }
        assert_eq!(cause(WorkerSpec { worker: "v".into(), ..worker.clone() }), Some(RejectCause::IdMismatch));
        for (addr, ok) in
            [("10.0.0.7", true), ("node-1.example", true), ("::1", true), ("a b", false), ("-x", false), ("", false)]
        {
            let w = WorkerSpec { advertise: Some(addr.into()), ..worker.clone() };
            assert_eq!(cause(w), (!ok).then_some(RejectCause::InvalidSpec), "{addr:?}");
        }
        assert_eq!(WorkerSpec { machine: Some("node-1".into()), ..worker.clone() }.address(), "node-1");
        assert_eq!(WorkerSpec { machine: Some("rack 1".into()), ..worker.clone() }.address(), "127.0.0.1");
        let advertised = WorkerSpec { advertise: Some("10.0.0.7".into()), machine: Some("node-1".into()), ..worker };
        assert_eq!(advertised.address(), "10.0.0.7");
        assert_eq!(Ack { ok: true, error: None, term: None }.with_term(Some(7)).term, Some(7));
        let bye = JobEnd { job: "j".into(), reason: EndReason::Finished };
        assert!(bye.validate("j").is_ok());
        assert_eq!(bye.validate("k").unwrap_err().cause(), RejectCause::IdMismatch);
        let launch = Launch {
            generation: 1,
            world_size: 4,
            rank: 3,
            local_rank: 1,
            local_world_size: 2,
            group_rank: 1,
            master_addr: "10.0.0.7".into(),
            master_port: 29500,
            batch_size: None,
        };
        assert_eq!(launch.check(), Ok(()));
        assert!(Launch { world_size: 0, rank: 0, ..launch.clone() }.check().is_err());
        assert!(Launch { rank: 4, ..launch.clone() }.check().is_err(), "rank = world size");
        assert!(Launch { local_world_size: 5, ..launch.clone() }.check().is_err());
        assert!(Launch { local_rank: 2, ..launch.clone() }.check().is_err());
        assert!(Launch { rank: 0, ..launch.clone() }.check().is_err(), "local rank 1 cannot be rank 0");
        assert!(Launch { master_addr: "x".repeat(254), ..launch.clone() }.check().is_err());
        // The boundaries that are valid: one machine holding the whole world; rank 0 (local
        // rank and group rank 0); a group rank equal to the rank (one worker per machine).
        assert_eq!(Launch { local_world_size: 4, local_rank: 3, group_rank: 0, ..launch.clone() }.check(), Ok(()));
        assert_eq!(Launch { rank: 0, local_rank: 0, group_rank: 0, ..launch.clone() }.check(), Ok(()));
        let spread = Launch { local_world_size: 1, local_rank: 0, group_rank: 3, ..launch.clone() };
        assert_eq!(spread.check(), Ok(()));
        assert!(Launch { group_rank: 4, ..spread }.check().is_err());
        assert_eq!(Launch { master_addr: "x".repeat(253), ..launch }.check(), Ok(()));
    }
}
