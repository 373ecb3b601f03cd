//! Gavel's throughput table (`data/gavel/simulation_throughputs.json`, see `data/README.md`)
//! and the cluster of typed workers a run uses.
//!
//! The file maps a worker type to `"('<job type>', <scale factor>)"` keys, each holding the
//! job's steps per second alone on that many GPUs of the type under `"null"` (other keys, the
//! co-located pairs, are ignored). A zero or missing entry: the job cannot run so.

use std::collections::BTreeMap;
use std::path::Path;

/// The scale factors (GPUs per job) the table measures.
pub const SCALE_FACTORS: [u32; 4] = [1, 2, 4, 8];

#[derive(Debug, thiserror::Error)]
pub enum GavelError {
    #[error("cannot read {path}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a Gavel throughput file")]
    Json { path: String, source: serde_json::Error },
    #[error("{path}: key {key:?} of worker type {worker:?} is not \"('<job type>', <1|2|4|8>)\"")]
    Key { path: String, worker: String, key: String },
    #[error("{path}: throughput of {key:?} on {worker:?} is {value}, not a finite number >= 0")]
    Value { path: String, worker: String, key: String, value: f64 },
    #[error("{path}: no worker type {name:?} (it has: {known})")]
    UnknownWorker { path: String, name: String, known: String },
    #[error("{path}: the table has no {reference:?} worker type, which job durations are measured on")]
    NoReference { path: String, reference: String },
    #[error("job type {job:?} has no usable throughput on any worker type of the cluster")]
    Unusable { job: String },
    #[error("--cluster {0:?}: expected TYPE=COUNT[,TYPE=COUNT...] with counts > 0 and distinct types")]
    Cluster(String),
}

#[derive(serde::Deserialize)]
struct Entry {
    #[serde(rename = "null")]
    alone: Option<f64>,
}

/// Steps per second of every job type at every scale factor on every worker type of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Throughputs {
    /// The file's worker types, sorted.
    pub worker_types: Vec<String>,
    /// The job types, sorted.
    pub job_types: Vec<String>,
    /// `rates[worker][job][i]`: steps per second at `SCALE_FACTORS[i]` GPUs (0: cannot run).
    rates: Vec<Vec<[f64; 4]>>,
}

fn parse_key(key: &str) -> Option<(&str, u32)> {
    let inner = key.strip_prefix("('")?.strip_suffix(')')?;
    let (name, sf) = inner.rsplit_once("', ")?;
    let sf: u32 = sf.trim().parse().ok()?;
    (SCALE_FACTORS.contains(&sf) && !name.is_empty()).then_some((name, sf))
}

fn sf_index(sf: u32) -> Option<usize> {
    SCALE_FACTORS.iter().position(|&s| s == sf)
}

impl Throughputs {
    pub fn load(path: &Path) -> Result<Self, GavelError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| GavelError::Io { path: display.clone(), source })?;
        Self::parse(&text, &display)
    }

    /// Parses the file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, GavelError> {
        let raw: BTreeMap<String, BTreeMap<String, Entry>> =
            serde_json::from_str(text).map_err(|source| GavelError::Json { path: origin.into(), source })?;
        let mut jobs: BTreeMap<String, ()> = BTreeMap::new();
        let mut values: Vec<(usize, String, usize, f64)> = Vec::new();
        let worker_types: Vec<String> = raw.keys().cloned().collect();
        for (w, (worker, entries)) in raw.iter().enumerate() {
            for (key, entry) in entries {
                let bad_key = || GavelError::Key { path: origin.into(), worker: worker.clone(), key: key.clone() };
                let (name, sf) = parse_key(key).ok_or_else(bad_key)?;
                let value = entry.alone.unwrap_or(0.0);
                if !(value.is_finite() && value >= 0.0) {
                    let (path, worker, key) = (origin.into(), worker.clone(), key.clone());
                    return Err(GavelError::Value { path, worker, key, value });
                }
                jobs.insert(name.to_string(), ());
                values.push((w, name.to_string(), sf_index(sf).ok_or_else(bad_key)?, value));
            }
        }
        let job_types: Vec<String> = jobs.into_keys().collect();
        let mut rates = vec![vec![[0.0; 4]; job_types.len()]; worker_types.len()];
        for (w, name, i, value) in values {
            if let Ok(j) = job_types.binary_search(&name) {
                rates[w][j][i] = value;
            }
        }
        Ok(Throughputs { worker_types, job_types, rates })
    }

    /// The index of a worker type of the file.
    pub fn worker(&self, name: &str, origin: &str) -> Result<usize, GavelError> {
        self.worker_types.iter().position(|w| w == name).ok_or_else(|| GavelError::UnknownWorker {
            path: origin.into(),
            name: name.into(),
            known: self.worker_types.join(", "),
        })
    }

    /// Steps per second of job type `job` on `sf` GPUs of worker type `worker` (0: cannot run).
    pub fn rate(&self, worker: usize, job: usize, sf: u32) -> f64 {
        sf_index(sf).map_or(0.0, |i| self.rates[worker][job][i])
    }
}

/// A cluster: worker types (indices into the table) and how many of each.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    pub names: Vec<String>,
    pub types: Vec<usize>,
    pub counts: Vec<u32>,
}

impl Cluster {
    /// Parses `v100=36,p100=36,k80=36` against the table (an unknown type is an error).
    pub fn parse(spec: &str, table: &Throughputs, origin: &str) -> Result<Self, GavelError> {
        let mut cluster = Cluster { names: Vec::new(), types: Vec::new(), counts: Vec::new() };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || GavelError::Cluster(spec.into());
            let (name, count) = part.split_once('=').ok_or_else(bad)?;
            let count: u32 = count.trim().parse().map_err(|_| bad())?;
            let name = name.trim();
            if count == 0 || cluster.names.iter().any(|n| n == name) {
                return Err(bad());
            }
            cluster.types.push(table.worker(name, origin)?);
            cluster.names.push(name.to_string());
            cluster.counts.push(count);
        }
        if cluster.names.is_empty() {
            return Err(GavelError::Cluster(spec.into()));
        }
        Ok(cluster)
    }

    pub fn size(&self) -> u32 {
        self.counts.iter().sum()
    }

    /// Steps per second of job type `job` on `sf` workers of the cluster's type `t` (0: cannot
    /// run so, or the type has fewer than `sf` workers).
    pub fn rate(&self, table: &Throughputs, t: usize, job: usize, sf: u32) -> f64 {
        if self.counts[t] < sf { 0.0 } else { table.rate(self.types[t], job, sf) }
    }

    /// Gavel's equal-share throughput of a job on `sf` workers: `Σ_t rate_t · count_t / size`,
    /// what it runs at with an equal share of every type.
    pub fn equal_share_rate(&self, table: &Throughputs, job: usize, sf: u32) -> f64 {
        let size = f64::from(self.size());
        (0..self.types.len()).map(|t| self.rate(table, t, job, sf) * f64::from(self.counts[t]) / size).sum()
    }

    /// Checks that every job type runs on one worker of some type of the cluster.
    pub fn check_usable(&self, table: &Throughputs) -> Result<(), GavelError> {
        for (j, name) in table.job_types.iter().enumerate() {
            if (0..self.types.len()).all(|t| self.rate(table, t, j, 1) <= 0.0) {
                return Err(GavelError::Unusable { job: name.clone() });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"{
        "v100": {"('A', 1)": {"null": 4.0, "('B', 1)": [1.0, 2.0]}, "('A', 2)": {"null": 7.0},
                 "('B', 1)": {"null": 2.0}},
        "k80":  {"('A', 1)": {"null": 1.0}, "('B', 1)": {"null": 0.0}}
    }"#;

    #[test]
    fn the_table_reads_throughputs_alone_and_ignores_co_location() {
        let t = Throughputs::parse(SMALL, "small").unwrap();
        assert_eq!(t.worker_types, ["k80", "v100"]);
        assert_eq!(t.job_types, ["A", "B"]);
        let (k80, v100) = (0, 1);
        assert_eq!((t.rate(v100, 0, 1), t.rate(v100, 0, 2), t.rate(v100, 0, 4)), (4.0, 7.0, 0.0));
        assert_eq!((t.rate(k80, 0, 1), t.rate(k80, 1, 1), t.rate(k80, 1, 3)), (1.0, 0.0, 0.0));
        let c = Cluster::parse("v100=2, k80=6", &t, "small").unwrap();
        assert_eq!((c.names.clone(), c.types.clone(), c.size()), (vec!["v100".into(), "k80".into()], vec![1, 0], 8));
        // A: 4 steps/s on a quarter of the cluster, 1 on the rest.
        assert!((c.equal_share_rate(&t, 0, 1) - (4.0 * 2.0 + 6.0) / 8.0).abs() < 1e-12);
        assert_eq!(c.rate(&t, 0, 0, 2), 7.0);
        assert_eq!(Cluster::parse("v100=1", &t, "s").unwrap().rate(&t, 0, 0, 2), 0.0, "two GPUs on a one-GPU type");
        c.check_usable(&t).unwrap();
        // B cannot run on k80: a cluster of k80 alone cannot run it.
        let k = Cluster::parse("k80=4", &t, "small").unwrap();
        assert!(matches!(k.check_usable(&t), Err(GavelError::Unusable { job }) if job == "B"));
    }

    #[test]
    fn malformed_files_and_clusters_are_clear_errors() {
        let t = Throughputs::parse(SMALL, "small").unwrap();
        for bad in ["", "v100=", "v100=0", "v100=2,v100=3", "v100", "v100=x"] {
            assert!(matches!(Cluster::parse(bad, &t, "s"), Err(GavelError::Cluster(_))), "{bad:?}");
        }
        let e = Cluster::parse("a100=4", &t, "small").unwrap_err().to_string();
        assert!(e.contains("a100") && e.contains("k80, v100"), "{e}");
        assert!(matches!(Throughputs::parse("[1]", "f"), Err(GavelError::Json { .. })));
        assert!(matches!(Throughputs::parse(r#"{"v100": {"A": {"null": 1}}}"#, "f"), Err(GavelError::Key { .. })));
        assert!(matches!(
            Throughputs::parse(r#"{"v100": {"('A', 3)": {"null": 1}}}"#, "f"),
            Err(GavelError::Key { .. })
        ));
        assert!(matches!(
            Throughputs::parse(r#"{"v100": {"('A', 1)": {"null": -1}}}"#, "f"),
            Err(GavelError::Value { .. })
        ));
    }

    #[test]
    fn the_vendored_table_is_gavel_s() {
        let t = Throughputs::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/data/gavel/simulation_throughputs.json"
        )))
        .unwrap();
        assert_eq!(t.job_types.len(), 26);
        let (v100, k80) = (t.worker("v100", "").unwrap(), t.worker("k80", "").unwrap());
        let r50 = t.job_types.iter().position(|j| j == "ResNet-50 (batch size 128)").unwrap();
        assert!((t.rate(k80, r50, 1) - 0.347).abs() < 1e-3 && (t.rate(v100, r50, 1) - 2.497).abs() < 1e-3);
        assert_eq!(t.rate(k80, r50, 2), 0.0, "does not fit on two K80s");
    }
}
