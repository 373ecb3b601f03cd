//! The loss-curve simulator: jobs replay recorded loss curves at the speed their workers give
//! them; the same predictor ([`crate::quality`]) and planner ([`crate::schedule::plan_epoch`])
//! as the live scheduler decide.

pub mod engine;
pub mod fixtures;
pub mod metrics;
pub mod moves;
pub mod replay;
pub mod report;
pub mod speedup;
pub mod workload;

use std::collections::BTreeMap;

pub use engine::{DEFAULT_WORKERS, PolicySpec, SimConfig};
pub use metrics::{RunMetrics, Summary, reduction_pct};
pub use speedup::{SpeedupKind, SpeedupModel};
pub use workload::{Group, SimJob, WorkloadConfig};

/// A simulation configuration file: `[workload]` and `[sim]` tables, every key optional
/// (defaults as documented on [`WorkloadConfig`] and [`SimConfig`]), unknown keys rejected.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimulationFile {
    pub workload: WorkloadConfig,
    pub sim: SimConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}")]
    Io { path: String, source: std::io::Error },
    #[error("invalid settings in {path}")]
    Parse { path: String, source: toml::de::Error },
    #[error("invalid simulation settings: {0}")]
    Invalid(&'static str),
}

impl SimulationFile {
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: display.clone(), source })?;
        let file: SimulationFile =
            toml::from_str(&text).map_err(|source| ConfigError::Parse { path: display, source })?;
        file.sim.validate()?;
        Ok(file)
    }
}

impl SimConfig {
    /// Checks the settings a run cannot work with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.num_workers == 0 {
            return Err(ConfigError::Invalid("num_workers must be positive"));
        }
        if !(self.epoch_s > 0.0 && self.gain_horizon_s > 0.0 && self.max_time_s > 0.0) {
            return Err(ConfigError::Invalid("epoch_s, gain_horizon_s and max_time_s must be positive"));
        }
        let s = self.speedup;
        if !((0.0..=1.0).contains(&s.serial_fraction) && s.comm_fraction >= 0.0) {
            return Err(ConfigError::Invalid("speedup.serial_fraction must be in [0, 1], comm_fraction >= 0"));
        }
        self.plan.validate().map_err(ConfigError::Invalid)?;
        if !(self.completion_weight.is_finite() && self.completion_weight >= 0.0) {
            return Err(ConfigError::Invalid("completion_weight must be a number, 0 or more"));
        }
        Ok(())
    }
}

/// The runs of every policy at one cluster size, on the same workload.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClusterRuns {
    pub workers: u32,
    pub runs: Vec<RunMetrics>,
}

/// How much better one policy is than another, in percent (positive: better).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Versus {
    /// The headline: reduction of the mean loss area.
    pub loss_area_reduction_pct: f64,
    pub avg_active_norm_loss_reduction_pct: f64,
    pub time_to_90_reduction_pct: f64,
    pub time_to_95_reduction_pct: f64,
    pub mean_jct_reduction_pct: f64,
}

impl ClusterRuns {
    pub fn run(&self, policy: &str) -> Option<&RunMetrics> {
        self.runs.iter().find(|r| r.policy == policy)
    }

    /// Each non-fair policy against fair, keyed `"{policy}_vs_fair"`, and slaq against
    /// slaq-paper (`"slaq_vs_slaq-paper"`) when both ran.
    pub fn comparisons(&self) -> BTreeMap<String, Versus> {
        let mut out = BTreeMap::new();
        if let Some(fair) = self.run("fair") {
            for r in self.runs.iter().filter(|r| r.policy != "fair") {
                out.insert(format!("{}_vs_fair", r.policy), Versus::of(&r.summary, &fair.summary));
            }
        }
        if let (Some(slaq), Some(paper)) = (self.run("slaq"), self.run("slaq-paper")) {
            out.insert("slaq_vs_slaq-paper".to_string(), Versus::of(&slaq.summary, &paper.summary));
        }
        out
    }
}

impl Versus {
    /// How much better `a` is than `b`.
    pub fn of(a: &Summary, b: &Summary) -> Versus {
        Versus {
            loss_area_reduction_pct: reduction_pct(a.mean_loss_area, b.mean_loss_area),
            avg_active_norm_loss_reduction_pct: reduction_pct(a.avg_active_norm_loss, b.avg_active_norm_loss),
            time_to_90_reduction_pct: reduction_pct(a.mean_time_to_90_s, b.mean_time_to_90_s),
            time_to_95_reduction_pct: reduction_pct(a.mean_time_to_95_s, b.mean_time_to_95_s),
            mean_jct_reduction_pct: reduction_pct(a.mean_jct_s, b.mean_jct_s),
        }
    }
}

/// Runs every policy at every cluster size on one workload, using up to `parallelism`
/// threads. `on_job_done` is called once per finished job of any run (for progress bars).
pub fn compare(
    jobs: &[SimJob],
    config: &SimConfig,
    policies: &[PolicySpec],
    worker_counts: &[u32],
    parallelism: usize,
    on_job_done: &(dyn Fn() + Sync),
) -> Vec<ClusterRuns> {
    let tasks: Vec<(u32, PolicySpec)> =
        worker_counts.iter().flat_map(|&w| policies.iter().map(move |&p| (w, p))).collect();
    let mut results = super::parallel::map(&tasks, parallelism, |&(workers, policy)| {
        let config = SimConfig { num_workers: workers, ..*config };
        engine::run(jobs, &config, policy, |_| on_job_done())
    })
    .into_iter();
    worker_counts
        .iter()
        .map(|&workers| {
            let mut runs: Vec<RunMetrics> = results.by_ref().take(policies.len()).collect();
            if let Some(fair) = runs.iter().find(|r| r.policy == "fair").cloned() {
                for run in &mut runs {
                    run.compare_with_fair(&fair);
                }
            }
            ClusterRuns { workers, runs }
        })
        .collect()
}
