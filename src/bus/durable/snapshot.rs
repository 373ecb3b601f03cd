//! The bucket's values decoded into what a start restores, without I/O (issue #42): each key
//! parsed once (`Key`), each value checked against its key, the earlier layout's per-worker keys
//! merged into the shards.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::debug;

use super::key::Key;
use crate::protocol::{self, Encoding, JobSpec, WorkerSpec};

/// Shards of the workers' state: each is one key, `workers.<s>`, holding its workers' specs and
/// assignments (one key per worker cost a million writes to register a million workers).
pub const WORKER_SHARDS: u32 = 256;

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

/// The workers as a start finds them, for the handle that writes their shards.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Workers {
    /// Every worker by id, from its shard or (found only there) the earlier layout's keys.
    pub by_id: HashMap<String, SavedWorker>,
    /// Shards to write: they gain workers found only in the earlier layout.
    pub migrate: HashSet<u32>,
    /// Workers with keys of the earlier layout, deleted when the worker is forgotten.
    pub legacy: HashSet<String>,
}

/// The bucket's values (`key`, value; deletes left out) as a start restores them: the jobs in
/// id order each with its predictor, plans, workers and their jobs, and what did not decode.
pub(super) fn decode_state(entries: impl IntoIterator<Item = (String, Bytes)>) -> (SavedState, Workers) {
    let mut state = SavedState::default();
    let (mut sharded, mut legacy) = (HashMap::<String, SavedWorker>::new(), HashMap::<String, SavedWorker>::new());
    let mut legacy_jobs: HashMap<String, String> = HashMap::new();
    let mut predictors: HashMap<String, Bytes> = HashMap::new();
    let mut specs: Vec<JobSpec> = Vec::new();
    for (text, value) in entries {
        let key = match Key::parse(&text) {
            Some(key) => key,
            // A key of no layout: counted if it looks like one (`kind.id`).
            None => {
                state.undecodable += usize::from(text.contains('.'));
                continue;
            }
        };
        match key {
            Key::Job(id) => match decode::<JobSpec>(&value) {
                Some(spec) if spec.job == id => specs.push(spec),
                _ => state.undecodable += 1,
            },
            Key::Predictor(id) => {
                predictors.insert(id, value);
            }
            Key::Plan(id) => match decode::<(f64, crate::schedule::FloorLedger)>(&value) {
                Some(plan) => {
                    state.plans.insert(id, plan);
                }
                None => state.undecodable += 1,
            },
            Key::Workers(shard) => match decode_worker_shard(&value) {
                Some(list) => {
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
                None => state.undecodable += 1,
            },
            // The earlier layout, a key per worker: read, kept until the worker is forgotten,
            // and written into its shard.
            Key::LegacyWorker(id) => match decode::<WorkerSpec>(&value) {
                Some(spec) if spec.worker == id => {
                    legacy.insert(id, SavedWorker { spec, job: None });
                }
                _ => state.undecodable += 1,
            },
            Key::LegacyAssign(id) => match std::str::from_utf8(&value) {
                Ok("") => {}
                Ok(job) if protocol::valid_job_id(job) => {
                    legacy_jobs.insert(id, job.to_string());
                }
                _ => state.undecodable += 1,
            },
            // This scheduler's own bookkeeping (`incarnation`).
            Key::Meta(_) => {}
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
    let workers = merge_workers(sharded, legacy, legacy_jobs);
    (state.workers, state.assignments) = listed(&workers.by_id);
    (state, workers)
}

/// The workers' specs in id order, and each busy worker's job.
fn listed(workers: &HashMap<String, SavedWorker>) -> (Vec<WorkerSpec>, HashMap<String, String>) {
    let mut specs: Vec<WorkerSpec> = workers.values().map(|w| w.spec.clone()).collect();
    specs.sort_by(|a, b| a.worker.cmp(&b.worker));
    let jobs = workers.iter().filter_map(|(id, w)| Some((id.clone(), w.job.clone()?))).collect();
    (specs, jobs)
}

/// The workers of the shards (`sharded`) and of the earlier layout's keys (`legacy`, with their
/// `jobs`): a worker in both is its shard's; one only in legacy keys moves into its shard.
fn merge_workers(
    mut sharded: HashMap<String, SavedWorker>,
    legacy: HashMap<String, SavedWorker>,
    mut jobs: HashMap<String, String>,
) -> Workers {
    let mut migrate = HashSet::new();
    let legacy_ids = legacy.keys().cloned().collect();
    for (id, mut w) in legacy {
        w.job = jobs.remove(&id);
        if let std::collections::hash_map::Entry::Vacant(slot) = sharded.entry(id) {
            migrate.insert(worker_shard(slot.key()));
            slot.insert(w);
        }
    }
    Workers { by_id: sharded, migrate, legacy: legacy_ids }
}

/// A saved value (MessagePack), or `None` (logged at debug) if it does not decode.
pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    match protocol::decode(Encoding::MsgPack, bytes, "saved state") {
        Ok(v) => Some(v),
        Err(e) => {
            debug!(error = %e, "undecodable state entry");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgpack<T: Serialize>(value: &T) -> Bytes {
        Bytes::from(protocol::encode(Encoding::MsgPack, value).expect("encodes"))
    }

    fn worker(id: &str) -> WorkerSpec {
        WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None }
    }

    #[test]
    fn a_snapshot_restores_jobs_plans_and_workers_and_counts_what_does_not_decode() {
        let spec = JobSpec::new("b");
        let ledger = crate::schedule::FloorLedger::default();
        let shard = worker_shard("w1");
        let listed = vec![SavedWorker { spec: worker("w1"), job: Some("b".into()) }];
        let wrong_shard = (shard + 1) % WORKER_SHARDS;
        let entries = vec![
            ("job.b".to_string(), msgpack(&spec)),
            ("job.a".to_string(), msgpack(&JobSpec::new("a"))),
            ("pred.b".to_string(), Bytes::from_static(b"predictor")),
            ("plan.b".to_string(), msgpack(&(12.5, &ledger))),
            (format!("workers.{shard}"), msgpack(&listed)),
            (format!("workers.{wrong_shard}"), msgpack(&listed)),
            ("meta.incarnation".to_string(), Bytes::from_static(b"1")),
            // Undecodable: a spec under another job's key, garbage, a kind of no layout.
            ("job.c".to_string(), msgpack(&JobSpec::new("d"))),
            ("plan.c".to_string(), Bytes::from_static(b"\xc1")),
            ("jobs.x".to_string(), Bytes::new()),
            // Not a key of the layout at all: skipped, not counted.
            ("nodot".to_string(), Bytes::new()),
        ];
        let (state, workers) = decode_state(entries);
        let ids: Vec<&str> = state.jobs.iter().map(|(s, _)| s.job.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "in id order");
        assert_eq!(state.jobs[1].1.as_deref(), Some(&b"predictor"[..]));
        assert_eq!(state.plans.get("b").map(|p| p.0), Some(12.5));
        assert_eq!(state.assignments, HashMap::from([("w1".to_string(), "b".to_string())]));
        assert_eq!(state.undecodable, 4, "the shard that does not hold its workers, and three more");
        assert!(workers.migrate.is_empty() && workers.legacy.is_empty());
    }

    #[test]
    fn the_earlier_layout_is_merged_into_the_shards_and_a_shard_wins() {
        let shard_of_w2 = worker_shard("w2");
        let entries = vec![
            ("worker.w1".to_string(), msgpack(&worker("w1"))),
            ("assign.w1".to_string(), Bytes::from_static(b"j")),
            ("worker.w2".to_string(), msgpack(&worker("w2"))),
            ("assign.w2".to_string(), Bytes::from_static(b"old")),
            (format!("workers.{shard_of_w2}"), msgpack(&vec![SavedWorker { spec: worker("w2"), job: None }])),
            ("worker.w3".to_string(), msgpack(&worker("other"))),
            ("assign.w4".to_string(), Bytes::from_static(b"not a job id!")),
        ];
        let (state, workers) = decode_state(entries);
        assert_eq!(state.workers.iter().map(|w| w.worker.as_str()).collect::<Vec<_>>(), ["w1", "w2"]);
        assert_eq!(state.assignments, HashMap::from([("w1".to_string(), "j".to_string())]), "w2's shard says idle");
        assert_eq!(workers.migrate, HashSet::from([worker_shard("w1")]), "only w1 moves into its shard");
        assert_eq!(workers.legacy, HashSet::from(["w1".to_string(), "w2".to_string()]));
        assert_eq!(state.undecodable, 2);
    }
}
