//! Pollux's workload files and its published results.

use std::path::Path;

use crate::cluster::trace::{AppTrace, application};

/// One job of a workload file.
#[derive(Clone, Debug)]
pub struct WorkloadJob {
    pub name: String,
    pub submit_s: f64,
    pub app: &'static AppTrace,
    pub replicas: u32,
    pub batch: u32,
}

/// Reads a workload CSV (`name,time,application,num_replicas,batch_size`).
pub fn load_workload(path: &Path) -> Result<Vec<WorkloadJob>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = |what: &str| format!("{}:{}: {what}", path.display(), i + 1);
        if f.len() < 5 {
            return Err(bad("expected 5 fields"));
        }
        let app = application(f[2]).ok_or_else(|| bad("unknown application"))?;
        jobs.push(WorkloadJob {
            name: f[0].to_string(),
            submit_s: f[1].parse().map_err(|_| bad("time is not a number"))?,
            app,
            replicas: f[3].parse().map_err(|_| bad("num_replicas is not a number"))?,
            batch: f[4].parse().map_err(|_| bad("batch_size is not a number"))?,
        });
    }
    Ok(jobs)
}

/// The published mean JCT of `policy` (`pollux`, `optimus`, `tiresias`) at `load` for each
/// workload (`avgs`) and overall (`mean`), from `results/jobload-<policy>-<load>/summary.json`.
pub fn published(results: &Path, policy: &str, load: &str) -> Option<(std::collections::BTreeMap<String, f64>, f64)> {
    let path = results.join(format!("jobload-{policy}-{load}")).join("summary.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let avgs = v.get("avgs")?.as_object()?.iter().filter_map(|(k, x)| Some((k.clone(), x.as_f64()?))).collect();
    Some((avgs, v.get("mean")?.as_f64()?))
}
