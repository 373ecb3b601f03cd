//! The report of `slaq simulate --pollux-workload`: each policy's means over the workloads, the
//! published schedulers' means on the same workloads, and every workload's figures.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{Config, JobOutcome, Policy, Summary, WorkloadJob, published};
use crate::sim::curves::metrics::percentile;

/// One workload file: its name (`workload-3`), the load its directory stands for (`1.0`) and
/// its jobs.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub load: String,
    pub jobs: Vec<WorkloadJob>,
}

/// Each run's figures, by workload index and policy name.
pub type Results = BTreeMap<(usize, &'static str), (Summary, Vec<JobOutcome>)>;

/// The published schedulers compared against.
const PUBLISHED: [&str; 3] = ["pollux", "tiresias", "optimus"];

/// The report: JSON (every figure) and a table of the means.
pub fn report(
    workloads: &[Workload],
    policies: &[Policy],
    results: &Results,
    published_dir: &Path,
    config: &Config,
    job_length: &str,
) -> (Value, String) {
    let figures = Figures { workloads, policies, results, published_dir };
    let published_means = figures.published_means();
    let out = json!({
        "policies": figures.per_policy(),
        "published_mean_jct_s": published_means,
        "workloads": figures.per_workload(),
        "cluster": {"machines": config.machines, "slots": config.slots, "epoch_s": config.epoch_s, "restart_s": config.restart_s},
        "job_length": job_length,
    });
    (out, figures.table(config, &published_means))
}

/// What the report reads.
struct Figures<'a> {
    workloads: &'a [Workload],
    policies: &'a [Policy],
    results: &'a Results,
    published_dir: &'a Path,
}

impl Figures<'_> {
    /// A policy's mean of `f` over the workloads it ran.
    fn mean(&self, f: &dyn Fn(&Summary) -> Option<f64>, policy: &str) -> Option<f64> {
        let v: Vec<f64> =
            (0..self.workloads.len()).filter_map(|w| self.results.get(&(w, policy)).and_then(|r| f(&r.0))).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Every job's JCT over its JCT under fair, pooled over the workloads (when fair ran): the
    /// worst and the 95th percentile.
    fn slowdowns(&self, policy: &str) -> Option<(f64, f64)> {
        let mut ratios = Vec::new();
        for w in 0..self.workloads.len() {
            let (mine, fair) = (&self.results.get(&(w, policy))?.1, &self.results.get(&(w, "fair"))?.1);
            for (m, f) in mine.iter().zip(fair) {
                if let (Some(a), Some(b)) = (m.jct_s, f.jct_s) {
                    ratios.push(a / b.max(1e-9));
                }
            }
        }
        let worst = ratios.iter().copied().fold(f64::NAN, f64::max);
        (!ratios.is_empty()).then(|| (worst, percentile(&ratios, 0.95)))
    }

    /// Each policy's means over the workloads.
    fn per_policy(&self) -> Map<String, Value> {
        let mut per_policy = Map::new();
        for p in self.policies {
            let n = p.name();
            let slow = self.slowdowns(n);
            let unfinished: usize = (0..self.workloads.len())
                .filter_map(|w| self.results.get(&(w, n)))
                .map(|r| r.0.jobs - r.0.finished)
                .sum();
            per_policy.insert(
                n.to_string(),
                json!({
                    "mean_jct_s": self.mean(&|s| Some(s.mean_jct_s), n),
                    "p99_jct_s": self.mean(&|s| Some(s.p99_jct_s), n),
                    "restarts_per_job": self.mean(&|s| Some(s.restarts_per_job), n),
                    "slo_met_pct": self.mean(&|s| s.slo_met_pct, n),
                    "slo_mean_miss_pct": self.mean(&|s| s.slo_mean_miss_pct, n),
                    "busy_pct": self.mean(&|s| Some(s.busy_pct), n),
                    "worst_slowdown_vs_fair": slow.map(|s| s.0),
                    "p95_slowdown_vs_fair": slow.map(|s| s.1),
                    "unfinished_jobs": unfinished,
                }),
            );
        }
        per_policy
    }

    /// The published schedulers' means over the same workloads (the files' per-workload
    /// averages), for those published on every one.
    fn published_means(&self) -> Map<String, Value> {
        let mut published_means = Map::new();
        for name in PUBLISHED {
            let v: Vec<f64> = self
                .workloads
                .iter()
                .filter_map(|w| published(self.published_dir, name, &w.load).and_then(|p| p.0.get(&w.name).copied()))
                .collect();
            if v.len() == self.workloads.len() && !v.is_empty() {
                published_means.insert(name.to_string(), json!(v.iter().sum::<f64>() / v.len() as f64));
            }
        }
        published_means
    }

    /// Every workload's figures: each policy's summary, the published means, and each job's
    /// JCT and restarts under each policy.
    fn per_workload(&self) -> Map<String, Value> {
        self.workloads.iter().enumerate().map(|(w, workload)| self.workload(w, workload)).collect()
    }

    fn workload(&self, w: usize, workload: &Workload) -> (String, Value) {
        let pols: Map<String, Value> = self
            .policies
            .iter()
            .filter_map(|p| {
                Some((p.name().to_string(), serde_json::to_value(&self.results.get(&(w, p.name()))?.0).ok()?))
            })
            .collect();
        // Each policy's figure per job.
        let per_job = |f: fn(&JobOutcome) -> Value| -> Map<String, Value> {
            self.policies
                .iter()
                .filter_map(|p| {
                    let jobs = &self.results.get(&(w, p.name()))?.1;
                    Some((p.name().to_string(), Value::Object(jobs.iter().map(|o| (o.name.clone(), f(o))).collect())))
                })
                .collect()
        };
        let jct = per_job(|o| json!(o.jct_s));
        let restarts = per_job(|o| json!(o.restarts));
        let publ: Map<String, Value> = PUBLISHED
            .iter()
            .filter_map(|n| {
                Some((n.to_string(), json!(published(self.published_dir, n, &workload.load)?.0.get(&workload.name)?)))
            })
            .collect();
        (
            format!("{}@{}", workload.name, workload.load),
            json!({"policies": pols, "published_mean_jct_s": publ, "jct_s": jct, "restarts": restarts}),
        )
    }

    /// The means as a table, the published ones below.
    fn table(&self, config: &Config, published_means: &Map<String, Value>) -> String {
        let mut table = format!(
            "{} workload(s) on {} machines x {} GPUs: mean over workloads\n{:<20} {:>12} {:>12} {:>10} {:>8} {:>10} {:>10} {:>9}\n",
            self.workloads.len(),
            config.machines,
            config.slots,
            "policy",
            "mean JCT s",
            "p99 JCT s",
            "restarts",
            "busy %",
            "SLO met %",
            "worst/fair",
            "p95/fair"
        );
        let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
        for p in self.policies {
            let n = p.name();
            table += &format!(
                "{:<20} {:>12} {:>12} {:>10} {:>8} {:>10} {:>10} {:>9}\n",
                n,
                f(self.mean(&|s| Some(s.mean_jct_s), n)),
                f(self.mean(&|s| Some(s.p99_jct_s), n)),
                f(self.mean(&|s| Some(s.restarts_per_job), n)),
                f(self.mean(&|s| Some(s.busy_pct), n)),
                f(self.mean(&|s| s.slo_met_pct, n)),
                self.slowdowns(n).map_or("-".to_string(), |s| format!("{:.2}", s.0)),
                self.slowdowns(n).map_or("-".to_string(), |s| format!("{:.2}", s.1)),
            );
        }
        for (name, v) in published_means {
            table += &format!("{:<20} {:>12.1}   (published)\n", name, v.as_f64().unwrap_or(f64::NAN));
        }
        table
    }
}
