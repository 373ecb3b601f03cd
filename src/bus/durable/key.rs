//! The keys of the state bucket, built and parsed here and nowhere else (issue #42).

use std::fmt;

/// One key of the state bucket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// `job.<id>`: the job's `JobSpec`.
    Job(String),
    /// `pred.<id>`: its predictor (`SavedJob`), saved every few seconds.
    Predictor(String),
    /// `plan.<id>`: its attained service and fairness-floor ledger.
    Plan(String),
    /// `workers.<s>`: the specs and jobs of the workers in shard `s` (`WORKER_SHARDS`).
    Workers(u32),
    /// `worker.<id>`: a worker's spec in the earlier layout (read, moved into its shard, and
    /// deleted when the worker is forgotten).
    LegacyWorker(String),
    /// `assign.<id>`: a worker's job in the earlier layout.
    LegacyAssign(String),
    /// `meta.<name>`: the scheduler's own bookkeeping (`incarnation`).
    Meta(String),
}

/// The filters that read every job's spec and predictor (`Durable::load_jobs`): a job's id is
/// one token, or a tenant's job's two (`job.team-a.train`).
pub const JOB_FILTERS: [&str; 2] = ["job.>", "pred.>"];

impl Key {
    /// The key `text` names (`None`: no key of this layout). Ids are not checked here: a
    /// value's own id is compared with its key's where it is decoded.
    pub fn parse(text: &str) -> Option<Key> {
        let (kind, id) = text.split_once('.')?;
        let id_ = || id.to_string();
        Some(match kind {
            "job" => Key::Job(id_()),
            "pred" => Key::Predictor(id_()),
            "plan" => Key::Plan(id_()),
            "workers" => Key::Workers(id.parse().ok()?),
            "worker" => Key::LegacyWorker(id_()),
            "assign" => Key::LegacyAssign(id_()),
            "meta" => Key::Meta(id_()),
            _ => return None,
        })
    }

    /// The job a job's key is about (`job.`, `pred.` or `plan.`).
    pub fn job(&self) -> Option<&str> {
        match self {
            Key::Job(id) | Key::Predictor(id) | Key::Plan(id) => Some(id),
            _ => None,
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Job(id) => write!(f, "job.{id}"),
            Key::Predictor(id) => write!(f, "pred.{id}"),
            Key::Plan(id) => write!(f, "plan.{id}"),
            Key::Workers(shard) => write!(f, "workers.{shard}"),
            Key::LegacyWorker(id) => write!(f, "worker.{id}"),
            Key::LegacyAssign(id) => write!(f, "assign.{id}"),
            Key::Meta(name) => write!(f, "meta.{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_round_trips_and_the_legacy_keys_parse() {
        let keys = [
            Key::Job("team-a.train".into()),
            Key::Predictor("j".into()),
            Key::Plan("j-1".into()),
            Key::Workers(0),
            Key::Workers(255),
            Key::LegacyWorker("w-3".into()),
            Key::LegacyAssign("w-3".into()),
            Key::Meta("incarnation".into()),
        ];
        for key in keys {
            assert_eq!(Key::parse(&key.to_string()), Some(key.clone()), "{key}");
        }
        // As the earlier layout wrote them, and as this one does.
        assert_eq!(Key::parse("worker.gpu-7"), Some(Key::LegacyWorker("gpu-7".into())));
        assert_eq!(Key::parse("assign.gpu-7"), Some(Key::LegacyAssign("gpu-7".into())));
        assert_eq!(Key::parse("workers.12").map(|k| k.to_string()).as_deref(), Some("workers.12"));
        assert_eq!(Key::parse("job.a.b").and_then(|k| k.job().map(str::to_string)).as_deref(), Some("a.b"));
    }

    #[test]
    fn what_is_no_key_of_this_layout_is_refused() {
        for text in ["", "job", "jobs.x", "workers.x", "workers.-1", "workers.4294967296"] {
            assert_eq!(Key::parse(text), None, "{text:?}");
        }
    }
}
