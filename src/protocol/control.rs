//! What the scheduler tells its operators and `slaq submit --wait` (the control audience):
//! the status snapshot and its parts, how jobs ended, and the per-epoch summary.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::messages::{EndReason, Role, is_zero};

/// How a job ended: its bye's reason (or its restarts used up: `Failed`), or `Expired`: silent
/// for the idle timeout. On the wire as today's lowercase strings; a string this version does
/// not know reads as `Expired`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Finished,
    Cancelled,
    Failed,
    #[serde(other)]
    Expired,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Finished => "finished",
            Outcome::Cancelled => "cancelled",
            Outcome::Failed => "failed",
            Outcome::Expired => "expired",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl From<EndReason> for Outcome {
    fn from(reason: EndReason) -> Self {
        match reason {
            EndReason::Finished => Outcome::Finished,
            EndReason::Cancelled => Outcome::Cancelled,
            EndReason::Failed => Outcome::Failed,
        }
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
    /// Its reports refused for its rate or a full queue (its own excess).
    #[serde(default)]
    pub dropped: u64,
    /// The batch size last published to it (jobs that declare `batch_sizes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Its processes' generation (one more at every change of its membership).
    #[serde(default)]
    pub generation: u64,
    /// Generations of a submitted job restarted after a failure or a stall.
    #[serde(default)]
    pub restarts: u32,
    /// It was submitted with a command (the agents run it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub submitted: bool,
    /// A submitted job's measured restart cost: seconds from a new generation to its first new
    /// report (a moving average), once measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_s: Option<f64>,
    /// On a cluster of several worker types: its measured seconds per iteration on one worker
    /// of each type it has run on, and the epochs measured there (`quality::speeds`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub speeds: BTreeMap<String, (f64, u32)>,
    /// Its age over the age at which fair sharing would have finished it, once it would have
    /// (the finish-time bound's fair clock): a lower bound on its slowdown while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<f64>,
    /// The generations that were restarts after a failure or a stall (the newest 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarted: Vec<u64>,
}

/// How a job ended, kept for a while after it left (`slaq submit --wait` reads it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    pub job: String,
    pub outcome: Outcome,
    pub restarts: u32,
    pub epoch: u64,
    /// Its measured restart cost (see `JobStatus::restart_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_s: Option<f64>,
}

/// One worker in a status snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub worker: String,
    #[serde(default)]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    #[serde(default)]
    pub role: Role,
    /// Seconds since its last heartbeat.
    pub silent_s: f64,
    /// Assignments and commands its agent refused (as its heartbeats say).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused: u64,
    /// Its worker type (`slaq worker --accelerator`; `default` when it names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<String>,
}

/// How many workers of a type there are and how many run a job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceleratorUse {
    pub workers: usize,
    pub busy: usize,
}

/// One priority class of a tenant at an epoch (issue #43).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassUse {
    pub workers: u32,
    pub jobs: usize,
    pub waiting: usize,
}

/// One tenant's workers at an epoch (issue #32, `[tenants]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUse {
    /// Its guarantee on the cluster as it is (scaled down when the guarantees exceed it).
    pub guaranteed: u32,
    /// What the planner gave it: its entitlement plus what it borrows.
    pub quota: u32,
    /// Workers its jobs hold after this epoch.
    pub workers: u32,
    /// Workers above its guarantee, and of its idle guarantee that others hold.
    pub borrowed: u32,
    pub lent: u32,
    pub jobs: usize,
    /// Its jobs without workers.
    pub waiting: usize,
    /// Per priority class (its number), when any of its jobs is above class 0.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, ClassUse>,
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
    /// How many jobs and workers there are in all (the lists may hold fewer).
    #[serde(default)]
    pub num_jobs: usize,
    #[serde(default)]
    pub num_workers: usize,
    /// The lists were cut (to the request's limit, or to fit NATS' payload limit).
    #[serde(default)]
    pub truncated: bool,
    /// The term of the answering scheduler's assignments (see `WorkerAssignment::term`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// The replica that answers, the leader, when replicas share the lease (`[ha]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Jobs that ended lately, newest last (at most 256, since this scheduler started).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ended: Vec<JobOutcome>,
    /// With replicas sharing the jobs (`[cluster] shared`): each live replica and the
    /// partitions it holds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub owners: BTreeMap<String, Vec<u32>>,
    /// Rendezvous ports (`MASTER_PORT`) at the address whose ports are most used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendezvous: Option<RendezvousUse>,
    /// Where the scheduler keeps what must survive a restart: `jetstream`, or `none` (core NATS
    /// only: `state.mode = "none"`, or `auto` on a server without JetStream).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Workers and busy workers per worker type (`default` for workers that name none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub accelerators: BTreeMap<String, AcceleratorUse>,
    /// Each tenant's workers at the last epoch (`[tenants]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, TenantUse>,
}

/// How many of an address's rendezvous ports are held by jobs' rank 0 or cooling after a
/// rank 0 moved (see docs/guide.md: agents that share one `--advertise` address share them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RendezvousUse {
    pub address: String,
    pub busy: usize,
    /// Ports per address.
    pub ports: u16,
    /// Generations that ran without ranks because every port at their address was busy, since
    /// this scheduler started.
    pub without_ranks: u64,
}

/// What a status request may ask (any other payload: everything that fits).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusRequest {
    /// Only jobs whose id starts with this (and the workers serving them).
    #[serde(default)]
    pub jobs: Option<String>,
    /// At most this many jobs and workers.
    #[serde(default)]
    pub limit: Option<usize>,
    /// No worker listed (their counts by type are there): the page's overview.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_workers: bool,
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
    pub jobs_without_bid: usize,
    /// Expiring silent workers and reading the jobs' latest bids (pushed by the job actors;
    /// nothing is awaited).
    pub collect_ms: f64,
    /// The fairness floor, the policy and the placement.
    pub policy_ms: f64,
    pub publish_ms: f64,
    pub total_ms: f64,
    /// CPU time the epoch's thread used (its work, without the time it waited for a core on a
    /// busy machine), where the platform says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<f64>,
    /// Predicted against realised loss reduction over the previous epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gains: Option<EpochGains>,
    /// Running jobs with an SLO on their iteration time, and those whose batch, the fastest
    /// allowed, is still predicted to miss it.
    #[serde(default)]
    pub slo_jobs: usize,
    #[serde(default)]
    pub slo_missed: usize,
    /// Workers and busy workers per worker type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub accelerators: BTreeMap<String, AcceleratorUse>,
    /// Each tenant's workers (`[tenants]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, TenantUse>,
}

/// How good the last epoch's predictions were: over the jobs that bid both before and after
/// it, the normalised loss reduction their bids predicted for the workers they were given,
/// against the reduction their reports show (each job's reduction is divided by its bid's
/// normaliser, so jobs of any loss scale add up).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochGains {
    pub jobs: usize,
    pub predicted: f64,
    pub realised: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Encoding, decode};

    #[test]
    fn outcomes_are_the_wire_strings_of_before_and_an_unknown_one_reads_as_expired() {
        for (outcome, name) in [
            (Outcome::Finished, "finished"),
            (Outcome::Cancelled, "cancelled"),
            (Outcome::Failed, "failed"),
            (Outcome::Expired, "expired"),
        ] {
            assert_eq!(outcome.as_str(), name);
            for encoding in [Encoding::Json, Encoding::MsgPack] {
                // Encoded exactly as the string was, and read back.
                let bytes = crate::protocol::encode(encoding, &outcome).expect("encodes");
                assert_eq!(bytes, crate::protocol::encode(encoding, &name).expect("encodes"), "{name}");
                assert_eq!(decode::<Outcome>(encoding, &bytes, "outcome").expect("decodes"), outcome);
            }
        }
        let later = crate::protocol::encode(Encoding::Json, &"preempted").expect("encodes");
        assert_eq!(decode::<Outcome>(Encoding::Json, &later, "outcome").expect("decodes"), Outcome::Expired);
        for reason in [EndReason::Finished, EndReason::Cancelled, EndReason::Failed] {
            let wire = crate::protocol::encode(Encoding::Json, &reason).expect("encodes");
            assert_eq!(wire, crate::protocol::encode(Encoding::Json, &Outcome::from(reason)).expect("encodes"));
        }
    }
}
