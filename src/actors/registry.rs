//! The worker registry: which workers exist, when each was last heard from, and which job each
//! serves. A plain struct (no actix): the allocator actor owns it.

use std::collections::BTreeMap;

use crate::protocol::{Launch, Role, WorkerSpec};

#[derive(Clone, Debug, PartialEq)]
pub struct WorkerEntry {
    pub spec: WorkerSpec,
    /// Seconds (on the caller's monotonic clock) of the last hello or heartbeat.
    pub last_seen_s: f64,
    pub job: Option<JobRef>,
    /// What it does for its job (a parameter-server job's servers are `Ps`).
    pub role: Role,
    /// When its assignment was last published (seconds on the caller's clock); `-inf`: never.
    pub told_s: f64,
    /// Its place in its job's current generation, as last published.
    pub launch: Option<Launch>,
    /// Assignments and commands its agent says it refused.
    pub refused: u64,
}

/// The job a worker serves: its name, and the allocator's key for it (unique per job for the
/// life of the process), which the epoch's bookkeeping compares instead of names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRef {
    pub key: u64,
    pub id: String,
}

/// Workers by id, in id order (the worker order of placements).
#[derive(Clone, Debug, Default)]
pub struct WorkerRegistry {
    workers: BTreeMap<String, WorkerEntry>,
}

impl WorkerRegistry {
    /// A worker says hello (again): it keeps its job if it had one.
    pub fn hello(&mut self, spec: WorkerSpec, now_s: f64) {
        let id = spec.worker.clone();
        let (job, role, told_s, launch, refused) =
            self.workers.remove(&id).map_or((None, Role::Worker, f64::NEG_INFINITY, None, 0), |w| {
                (w.job, w.role, w.told_s, w.launch, w.refused)
            });
        self.workers.insert(id, WorkerEntry { spec, last_seen_s: now_s, job, role, told_s, launch, refused });
    }

    /// A worker known from saved state, with the job it served.
    pub fn restore(&mut self, spec: WorkerSpec, job: Option<JobRef>, now_s: f64) {
        let entry = WorkerEntry {
            spec,
            last_seen_s: now_s,
            job,
            role: Role::Worker,
            told_s: f64::NEG_INFINITY,
            launch: None,
            refused: 0,
        };
        self.workers.insert(entry.spec.worker.clone(), entry);
    }

    /// Every worker counts as heard from now (after an outage of our own).
    pub fn touch_all(&mut self, now_s: f64) {
        self.workers.values_mut().for_each(|w| w.last_seen_s = now_s);
    }

    /// A heartbeat; `false` if the worker is unknown (it must say hello first).
    pub fn beat(&mut self, worker: &str, now_s: f64) -> bool {
        match self.workers.get_mut(worker) {
            Some(w) => {
                w.last_seen_s = now_s;
                true
            }
            None => false,
        }
    }

    /// Forgets workers silent for longer than `timeout_s`; returns them with the job each had.
    pub fn expire(&mut self, now_s: f64, timeout_s: f64) -> Vec<(String, Option<JobRef>)> {
        let gone: Vec<String> =
            self.workers.iter().filter(|(_, w)| now_s - w.last_seen_s > timeout_s).map(|(id, _)| id.clone()).collect();
        gone.into_iter().filter_map(|id| self.workers.remove(&id).map(|w| (id, w.job))).collect()
    }

    pub fn get(&self, worker: &str) -> Option<&WorkerEntry> {
        self.workers.get(worker)
    }

    pub fn get_mut(&mut self, worker: &str) -> Option<&mut WorkerEntry> {
        self.workers.get_mut(worker)
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &WorkerEntry)> {
        self.workers.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut WorkerEntry)> {
        self.workers.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> WorkerSpec {
        WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None }
    }

    #[test]
    fn silent_workers_expire_with_their_job() {
        let mut r = WorkerRegistry::default();
        r.hello(spec("a"), 0.0);
        r.hello(spec("b"), 0.0);
        let j = JobRef { key: 1, id: "j".into() };
        r.iter_mut().for_each(|(_, w)| w.job = Some(j.clone()));
        assert!(r.beat("a", 9.0));
        assert!(!r.beat("zzz", 9.0));
        assert_eq!(r.expire(12.0, 10.0), vec![("b".to_string(), Some(j.clone()))]);
        assert_eq!(r.len(), 1);
        r.hello(spec("a"), 13.0);
        assert_eq!(r.iter().next().unwrap().1.job, Some(j), "a re-hello keeps the job");
    }
}
