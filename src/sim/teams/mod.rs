//! Teams in simulation (issue #32): `slaq simulate --tenants FILE.toml`. Each tenant has its own
//! arrivals of recorded curves; the loss-curve simulator runs them on one cluster with the
//! planner inside each tenant's quota ([`crate::schedule::tenants`]), every change of workers
//! going through the tenant's grace and a restart ([`moves`]), and measures each tenant
//! ([`track`]). Each tenant with a guarantee is also run alone on a private cluster of its
//! guaranteed size, with the same scheduler, so the shared cluster's worth to it is a ratio.
//!
//! The file (see `config/teams/*.toml`):
//!
//! ```toml
//! policy = "slaq"       # or fair
//! restart_s = 9.0       # what a change of workers costs a job (measured live: 6.5-8.9 s)
//! hold_s = 30.0         # a job keeps workers it got this long (min_generation_ms), guarantees aside
//! checkpoint_s = 0.0    # saves every this many s (0: at its stop, losing nothing)
//! [sim]                 # the loss-curve simulator's settings (64 workers, epoch 5 s, ...)
//! [tenants.a]           # as in slaq serve's [tenants.a]: guaranteed, weight, borrow_limit, ...
//! guaranteed = 32
//! [arrivals.a]          # its jobs: how many, how often, from when, of which curve families,
//!                       # and bursts (repeat, every_s); [arrivals."a.urgent"] another stream of
//!                       # a's, e.g. of a priority class (priority, capped by a's max_priority)
//! jobs = 40
//! interarrival_s = 10.0
//! start_s = 600.0
//! ```

pub mod track;

use std::collections::BTreeMap;

pub use crate::sim::curves::moves::{Teams, TenantTimes};
pub use track::{TeamFigures, TenantFigures};

use crate::schedule::tenants::{Resolved, TenantConfig, TenantShare, resolve};
use crate::sim::curves::{ConfigError, PolicySpec, SimConfig, SimJob, WorkloadConfig, engine, workload};
use crate::trace::TraceCurve;

/// One tenant's jobs.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Arrivals {
    pub jobs: usize,
    /// Mean seconds between its arrivals (Poisson), from `start_s`.
    pub interarrival_s: f64,
    pub start_s: f64,
    /// Mean seconds per iteration on one worker (as `[workload] base_iter_seconds`).
    pub base_iter_seconds: f64,
    /// Only curves of these families (all when empty).
    pub families: Vec<String>,
    /// Bursts: the block of `jobs` arrives this many times, `every_s` apart (each drawn anew).
    pub repeat: usize,
    pub every_s: f64,
    /// Its jobs' `JobSpec.priority` (their class is it capped by their tenant's `max_priority`).
    pub priority: u8,
}

impl Default for Arrivals {
    fn default() -> Self {
        let w = WorkloadConfig::default();
        Arrivals {
            jobs: 40,
            interarrival_s: w.mean_interarrival_s,
            start_s: 0.0,
            base_iter_seconds: w.base_iter_seconds,
            families: Vec::new(),
            repeat: 1,
            every_s: 0.0,
            priority: 0,
        }
    }
}

/// A teams' simulation file.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamsFile {
    #[serde(default = "slaq")]
    pub policy: String,
    #[serde(default = "restart_s")]
    pub restart_s: f64,
    #[serde(default = "hold_s")]
    pub hold_s: f64,
    /// Jobs save their state every this many seconds of a generation, and a stop loses the
    /// work since (0: a job saves at its stop, within the grace: nothing is lost).
    #[serde(default)]
    pub checkpoint_s: f64,
    #[serde(default)]
    pub sim: SimConfig,
    pub tenants: BTreeMap<String, TenantConfig>,
    #[serde(default)]
    pub arrivals: BTreeMap<String, Arrivals>,
}

fn slaq() -> String {
    "slaq".to_string()
}

/// The live DDP test's restarts measured 6.5 to 8.9 s (docs/guide.md): the larger, rounded up.
fn restart_s() -> f64 {
    9.0
}

/// The live scheduler's `min_generation_ms`.
fn hold_s() -> f64 {
    30.0
}

/// A file checked and resolved on its cluster.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub file: TeamsFile,
    pub policy: PolicySpec,
    pub resolved: Resolved,
    pub times: Vec<TenantTimes>,
    /// The arrival streams, each with its tenant (a tenant's own first, named `a`, then
    /// `a.<stream>` in name order; a tenant the file gives none has the default).
    pub arrivals: Vec<(usize, Arrivals)>,
}

#[derive(Debug, thiserror::Error)]
pub enum TeamsError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tenant(#[from] crate::schedule::tenants::TenantError),
    #[error("{0}")]
    Invalid(String),
}

impl Scenario {
    pub fn load(path: &std::path::Path) -> Result<Self, TeamsError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: display.clone(), source })?;
        let file: TeamsFile = toml::from_str(&text).map_err(|source| ConfigError::Parse { path: display, source })?;
        Self::new(file)
    }

    pub fn new(file: TeamsFile) -> Result<Self, TeamsError> {
        file.sim.validate()?;
        let policy = PolicySpec::named(&file.policy).filter(|p| !p.is_oracle()).ok_or_else(|| {
            TeamsError::Invalid(format!("unknown policy {:?}: slaq, slaq-paper or fair", file.policy))
        })?;
        let seconds = |x: f64| x.is_finite() && x >= 0.0;
        if !(seconds(file.restart_s) && seconds(file.hold_s) && seconds(file.checkpoint_s)) {
            return Err(TeamsError::Invalid("restart_s, hold_s and checkpoint_s must be seconds, 0 or more".into()));
        }
        if file.tenants.is_empty() {
            return Err(TeamsError::Invalid("no [tenants.<name>]".into()));
        }
        if let Some(name) = file.arrivals.keys().find(|n| !file.tenants.contains_key(tenant_of_stream(n))) {
            return Err(TeamsError::Invalid(format!("[arrivals.{name}] names no tenant")));
        }
        let resolved = resolve(file.sim.num_workers, &file.tenants)?;
        let times = file.tenants.values().map(|t| TenantTimes { grace_s: t.grace_s, min_run_s: t.min_run_s }).collect();
        let mut arrivals: Vec<(usize, Arrivals)> = Vec::new();
        for (t, name) in resolved.names.iter().enumerate() {
            let streams: Vec<&Arrivals> =
                file.arrivals.iter().filter(|(k, _)| tenant_of_stream(k) == name).map(|(_, a)| a).collect();
            if streams.is_empty() {
                arrivals.push((t, Arrivals::default()));
            }
            arrivals.extend(streams.into_iter().map(|a| (t, a.clone())));
        }
        if arrivals.iter().any(|(_, a)| !(seconds(a.start_s) && seconds(a.every_s) && a.repeat >= 1)) {
            return Err(TeamsError::Invalid(
                "arrivals' start_s and every_s must be seconds, 0 or more, repeat at least 1".into(),
            ));
        }
        Ok(Scenario { file, policy, resolved, times, arrivals })
    }

    /// Every tenant's jobs for `seed` (ids `<tenant>/job-NNNN`), each job's tenant and class.
    pub fn workload(&self, curves: &[TraceCurve], seed: u64) -> Result<Workload, TeamsError> {
        let (mut jobs, mut tenant_of, mut class_of) = (Vec::new(), Vec::new(), Vec::new());
        for (stream, (tenant, a)) in self.arrivals.iter().enumerate() {
            let name = &self.resolved.names[*tenant];
            let class = self.file.tenants.get(name).map_or(0, |c| c.class_of(a.priority));
            if a.jobs == 0 {
                continue;
            }
            let own: Vec<TraceCurve> =
                curves.iter().filter(|c| a.families.is_empty() || a.families.contains(&c.family)).cloned().collect();
            for burst in 0..a.repeat {
                let config = WorkloadConfig {
                    num_jobs: a.jobs,
                    mean_interarrival_s: a.interarrival_s,
                    base_iter_seconds: a.base_iter_seconds,
                    seed: seed.wrapping_mul(1_000_003).wrapping_add(stream as u64).wrapping_add((burst as u64) << 32),
                    ..WorkloadConfig::default()
                };
                let generated = workload::generate(&own, &config)
                    .map_err(|e| TeamsError::Invalid(format!("tenant {name:?}'s arrivals: {e}")))?;
                for mut job in generated {
                    job.id = format!("{name}/{burst}/{}", job.id);
                    job.arrival_s += a.start_s + burst as f64 * a.every_s;
                    jobs.push(job);
                    tenant_of.push(*tenant);
                    class_of.push(class);
                }
            }
        }
        Ok(Workload { jobs, tenant_of, class_of })
    }
}

/// A scenario's jobs for one seed.
pub struct Workload {
    pub jobs: Vec<SimJob>,
    pub tenant_of: Vec<usize>,
    pub class_of: Vec<u8>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The tenant an arrivals' stream belongs to: `a` and `a.<stream>` are tenant a's.
fn tenant_of_stream(key: &str) -> &str {
    key.split_once('.').map_or(key, |(t, _)| t)
}

/// One tenant's outcome in one run.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TenantRun {
    pub jobs: usize,
    pub unfinished: usize,
    /// Over its finished jobs.
    pub mean_jct_s: Option<f64>,
    pub mean_loss_area: f64,
    /// Its finished jobs' mean JCT per priority class, when its jobs use classes.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub class_mean_jct_s: BTreeMap<String, f64>,
}

/// One seed: the shared cluster, and each tenant with a guarantee alone on it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SeedRun {
    pub seed: u64,
    pub shared: Vec<TenantRun>,
    pub figures: TeamFigures,
    /// `None` for a tenant without a guarantee (it has no private cluster to compare with).
    pub alone: Vec<Option<TenantRun>>,
}

/// Runs `scenario` on the workload of `seed`: shared, then each tenant alone.
pub fn run_seed(scenario: &Scenario, curves: &[TraceCurve], seed: u64) -> Result<SeedRun, TeamsError> {
    let Workload { jobs, tenant_of, class_of } = scenario.workload(curves, seed)?;
    let shares = &scenario.resolved.shares;
    let (shared, figures) =
        run_teams(scenario, &scenario.file.sim, shares, &scenario.times, (&jobs, &tenant_of, &class_of));
    let tenants = shares.len();
    let shared: Vec<TenantRun> = (0..tenants).map(|t| of_tenant(&shared, &tenant_of, &class_of, t)).collect();
    let mut alone = Vec::with_capacity(tenants);
    for (t, g) in figures.tenants.iter().map(|f| f.guaranteed).enumerate() {
        let own: Vec<SimJob> = jobs.iter().zip(&tenant_of).filter(|(_, o)| **o == t).map(|(j, _)| j.clone()).collect();
        let own_classes: Vec<u8> = class_of.iter().zip(&tenant_of).filter(|(_, o)| **o == t).map(|(c, _)| *c).collect();
        if g == 0 || own.is_empty() {
            alone.push(None);
            continue;
        }
        let config = SimConfig { num_workers: g, ..scenario.file.sim };
        let zeros = vec![0; own.len()];
        let share = [TenantShare { guaranteed: g, ..shares[t] }];
        let (run, _) = run_teams(scenario, &config, &share, &scenario.times[t..=t], (&own, &zeros, &own_classes));
        alone.push(Some(of_tenant(&run, &zeros, &own_classes, 0)));
    }
    Ok(SeedRun { seed, shared, figures, alone })
}

fn run_teams(
    scenario: &Scenario,
    config: &SimConfig,
    shares: &[TenantShare],
    times: &[TenantTimes],
    (jobs, tenant_of, class_of): (&[SimJob], &[usize], &[u8]),
) -> (crate::sim::curves::RunMetrics, TeamFigures) {
    let mut teams = Teams::new(
        config.num_workers,
        config.max_workers_per_job,
        shares,
        times,
        tenant_of,
        scenario.file.restart_s,
        scenario.file.hold_s,
    );
    teams.checkpoint_s = scenario.file.checkpoint_s;
    teams.class_of = class_of;
    let run = engine::run_with(jobs, config, scenario.policy, Some(&mut teams), |_| {});
    let end = run.summary.makespan_s;
    (run, teams.track.finish(end))
}

fn of_tenant(run: &crate::sim::curves::RunMetrics, tenant_of: &[usize], class_of: &[u8], t: usize) -> TenantRun {
    let own: Vec<(usize, _)> = run.jobs.iter().enumerate().filter(|(j, _)| tenant_of[*j] == t).collect();
    let done: Vec<f64> = own.iter().filter_map(|(_, j)| j.completion_s).collect();
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let areas: Vec<f64> = own.iter().map(|(_, j)| j.loss_area).collect();
    let class = |j: usize| class_of.get(j).copied().unwrap_or(0);
    let mut class_mean_jct_s = BTreeMap::new();
    if own.iter().any(|&(j, _)| class(j) > 0) {
        let mut by_class: BTreeMap<u8, Vec<f64>> = BTreeMap::new();
        for (j, job) in &own {
            by_class.entry(class(*j)).or_default().extend(job.completion_s);
        }
        class_mean_jct_s = by_class.iter().filter_map(|(c, v)| Some((c.to_string(), mean(v)?))).collect();
    }
    TenantRun {
        jobs: own.len(),
        unfinished: own.len() - done.len(),
        mean_jct_s: mean(&done),
        mean_loss_area: mean(&areas).unwrap_or(0.0),
        class_mean_jct_s,
    }
}

/// One tenant over every seed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TenantSummary {
    pub name: String,
    pub guaranteed: u32,
    pub grace_s: f64,
    /// R = epoch + grace + restart: the time within which a guarantee is promised back.
    pub reclaim_bound_s: f64,
    pub jobs: usize,
    pub unfinished: usize,
    /// Means over the seeds of its mean JCT (finished jobs) and mean loss area.
    pub mean_jct_s: Option<f64>,
    pub mean_loss_area: f64,
    /// Its share of the cluster's worker-seconds, mean over seeds, in percent.
    pub mean_share_pct: f64,
    /// Worst over the seeds.
    pub max_held: u32,
    pub max_reclaim_s: f64,
    pub max_reclaims: u32,
    pub mean_share_seconds_below_guarantee: f64,
    pub min_window_ratio: Option<f64>,
    pub max_share_deviation_pts: f64,
    pub revocations: u32,
    pub min_notice_s: Option<f64>,
    /// Worker-seconds its jobs spent restarting, in percent of those they held; and the work
    /// stops lost (since the last checkpoint), in percent of the worker-seconds computing.
    pub restart_pct: f64,
    pub lost_pct: f64,
    /// Revocations within `min_run_s` of the job's last change (each to restore a guarantee or
    /// for a higher class of its tenant).
    pub early_revocations: u32,
    /// Stretches while a higher class of its jobs waited for a lower class's workers (all
    /// seeds), and the longest: against `reclaim_bound_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_class_reclaim_s: Option<f64>,
    #[serde(skip_serializing_if = "is_zero")]
    pub class_reclaims: u32,
    /// Mean over seeds of its finished jobs' mean JCT per class (when its jobs use classes).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub class_mean_jct_s: BTreeMap<String, f64>,
    /// Alone on its guaranteed workers (tenants with a guarantee): means over seeds, and the
    /// shared run's over the alone run's per seed (below 1: the shared cluster is better).
    pub alone_mean_jct_s: Option<f64>,
    pub alone_mean_loss_area: Option<f64>,
    pub jct_ratio_mean: Option<f64>,
    pub jct_ratio_max: Option<f64>,
    pub loss_area_ratio_mean: Option<f64>,
    pub loss_area_ratio_max: Option<f64>,
}

/// Every seed's run, summarised per tenant.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub policy: &'static str,
    pub workers: u32,
    pub epoch_s: f64,
    pub restart_s: f64,
    pub hold_s: f64,
    pub seeds: Vec<u64>,
    pub warnings: Vec<String>,
    pub tenants: Vec<TenantSummary>,
    pub cap_violations: u32,
    pub min_busy_fraction_while_waiting: Option<f64>,
    /// Mean over seeds of the cluster idle while some job waited for its save, in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_idle_while_saving_pct: Option<f64>,
    pub runs: Vec<SeedRun>,
}

/// One tenant (`t`, `name`) over every seed's run.
fn tenant_summary(scenario: &Scenario, runs: &[SeedRun], t: usize, name: &str) -> TenantSummary {
    let sim = &scenario.file.sim;
    let n = runs.len().max(1) as f64;
    let mean_of = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let max_of = |v: &[f64]| v.iter().copied().reduce(f64::max);
    let figures: Vec<&TenantFigures> = runs.iter().map(|r| &r.figures.tenants[t]).collect();
    let shared: Vec<&TenantRun> = runs.iter().map(|r| &r.shared[t]).collect();
    let alone: Vec<(&TenantRun, &TenantRun)> =
        runs.iter().filter_map(|r| Some((&r.shared[t], r.alone[t].as_ref()?))).collect();
    let jct_ratio: Vec<f64> = alone.iter().filter_map(|(s, a)| Some(s.mean_jct_s? / a.mean_jct_s?)).collect();
    let area_ratio: Vec<f64> = alone
        .iter()
        .filter(|(_, a)| a.mean_loss_area > 0.0)
        .map(|(s, a)| s.mean_loss_area / a.mean_loss_area)
        .collect();
    let held: f64 = figures.iter().map(|f| f.held_worker_s).sum();
    let restart: f64 = figures.iter().map(|f| f.restart_worker_s).sum();
    let lost: f64 = figures.iter().map(|f| f.lost_worker_s).sum();
    let computing: f64 = figures.iter().map(|f| f.computing_worker_s).sum();
    TenantSummary {
        name: name.to_string(),
        guaranteed: figures.first().map_or(0, |f| f.guaranteed),
        grace_s: scenario.times[t].grace_s,
        reclaim_bound_s: sim.epoch_s + scenario.times[t].grace_s + scenario.file.restart_s,
        jobs: shared.iter().map(|s| s.jobs).sum(),
        unfinished: shared.iter().map(|s| s.unfinished).sum(),
        mean_jct_s: mean_of(shared.iter().filter_map(|s| s.mean_jct_s).collect()),
        mean_loss_area: shared.iter().map(|s| s.mean_loss_area).sum::<f64>() / n,
        mean_share_pct: runs
            .iter()
            .map(|r| {
                100.0 * r.figures.tenants[t].held_worker_s / (f64::from(sim.num_workers) * r.figures.end_s).max(1e-9)
            })
            .sum::<f64>()
            / n,
        max_held: figures.iter().map(|f| f.max_held).max().unwrap_or(0),
        max_reclaim_s: figures.iter().map(|f| f.max_reclaim_s).fold(0.0, f64::max),
        max_reclaims: figures.iter().map(|f| f.reclaims).max().unwrap_or(0),
        mean_share_seconds_below_guarantee: figures.iter().map(|f| f.share_seconds_below_guarantee).sum::<f64>() / n,
        min_window_ratio: figures.iter().filter_map(|f| f.min_window_ratio).reduce(f64::min),
        max_share_deviation_pts: figures.iter().map(|f| f.max_share_deviation_pts).fold(0.0, f64::max),
        revocations: figures.iter().map(|f| f.revocations).sum(),
        min_notice_s: figures.iter().filter_map(|f| f.min_notice_s).reduce(f64::min),
        restart_pct: if held > 0.0 { 100.0 * restart / held } else { 0.0 },
        lost_pct: if computing > 0.0 { 100.0 * lost / computing } else { 0.0 },
        early_revocations: figures.iter().map(|f| f.early_revocations).sum(),
        max_class_reclaim_s: figures.iter().filter_map(|f| f.max_class_reclaim_s).reduce(f64::max),
        class_mean_jct_s: {
            let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for s in &shared {
                for (c, v) in &s.class_mean_jct_s {
                    by.entry(c.clone()).or_default().push(*v);
                }
            }
            by.into_iter().filter_map(|(c, v)| Some((c, mean_of(v)?))).collect()
        },
        class_reclaims: figures.iter().map(|f| f.class_reclaims).sum(),
        alone_mean_jct_s: mean_of(alone.iter().filter_map(|(_, a)| a.mean_jct_s).collect()),
        alone_mean_loss_area: mean_of(alone.iter().map(|(_, a)| a.mean_loss_area).collect()),
        jct_ratio_mean: mean_of(jct_ratio.clone()),
        jct_ratio_max: max_of(&jct_ratio),
        loss_area_ratio_mean: mean_of(area_ratio.clone()),
        loss_area_ratio_max: max_of(&area_ratio),
    }
}

/// Summarises `runs` of `scenario`.
pub fn summarise(scenario: &Scenario, runs: Vec<SeedRun>) -> Summary {
    let sim = &scenario.file.sim;
    let tenants =
        scenario.resolved.names.iter().enumerate().map(|(t, name)| tenant_summary(scenario, &runs, t, name)).collect();
    Summary {
        policy: scenario.policy.name,
        workers: sim.num_workers,
        epoch_s: sim.epoch_s,
        restart_s: scenario.file.restart_s,
        hold_s: scenario.file.hold_s,
        seeds: runs.iter().map(|r| r.seed).collect(),
        warnings: scenario.resolved.warnings.clone(),
        tenants,
        cap_violations: runs.iter().map(|r| r.figures.cap_violations).sum(),
        min_busy_fraction_while_waiting: runs
            .iter()
            .filter_map(|r| r.figures.busy_fraction_while_waiting)
            .reduce(f64::min),
        mean_idle_while_saving_pct: {
            let idle: Vec<f64> = runs.iter().filter_map(|r| r.figures.idle_while_saving_pct).collect();
            (!idle.is_empty()).then(|| idle.iter().sum::<f64>() / idle.len() as f64)
        },
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curves() -> Vec<TraceCurve> {
        ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, f)| TraceCurve {
                id: format!("{f}-1"),
                family: f.to_string(),
                dataset: String::new(),
                loss: (1..=60 + 30 * i as u32).map(|k| 1.0 / f64::from(k).powf(0.5 + 0.2 * i as f64)).collect(),
                iter_seconds: Some(vec![1.0; 60 + 30 * i]),
            })
            .collect()
    }

    fn scenario(text: &str) -> Scenario {
        Scenario::new(toml::from_str(text).expect("a valid file")).expect("a valid scenario")
    }

    const RECLAIM: &str = "restart_s = 9.0\n[sim]\nnum_workers = 64\n\
        [tenants.a]\nguaranteed = 32\n[tenants.b]\nguaranteed = 32\n\
        [arrivals.a]\njobs = 12\nstart_s = 300.0\n[arrivals.b]\njobs = 20\n";

    /// Issue #43: tenant a's class-0 jobs fill its quota and keep workers for min_run_s (an
    /// hour); its class-1 jobs arriving take theirs within R all the same; b's job asking for
    /// class 3 is capped to b's max_priority 0.
    #[test]
    fn a_higher_class_gets_its_tenants_workers_within_r_whatever_holds_them() {
        let s = scenario(
            "restart_s = 9.0\n[sim]\nnum_workers = 16\n\
             [tenants.a]\nguaranteed = 8\nmin_run_s = 3600.0\nmax_priority = 1\n\
             [tenants.b]\nguaranteed = 8\n\
             [arrivals.a]\njobs = 8\n[arrivals.\"a.urgent\"]\njobs = 3\nstart_s = 300.0\npriority = 1\n\
             [arrivals.b]\njobs = 4\n[arrivals.\"b.pushy\"]\njobs = 2\npriority = 3\n",
        );
        let w = s.workload(&curves(), 1).unwrap();
        let b_classes: Vec<u8> =
            w.class_of.iter().zip(&w.tenant_of).filter(|(_, t)| **t == 1).map(|(c, _)| *c).collect();
        assert_eq!((b_classes.len(), b_classes.iter().max()), (6, Some(&0)), "b's priority 3 is capped to 0");
        let runs: Vec<SeedRun> = (1..=3).map(|seed| run_seed(&s, &curves(), seed).unwrap()).collect();
        let summary = summarise(&s, runs);
        let a = &summary.tenants[0];
        assert!(a.class_reclaims >= 1, "{a:?}");
        assert!(a.max_class_reclaim_s.is_some_and(|r| r <= a.reclaim_bound_s), "{a:?}");
        assert!(a.class_mean_jct_s["1"] < a.class_mean_jct_s["0"], "{a:?}");
        assert_eq!(summary.tenants[1].class_reclaims, 0);
    }

    #[test]
    fn a_borrowed_guarantee_comes_back_within_epoch_grace_and_restart_and_no_cap_is_passed() {
        let s = scenario(RECLAIM);
        let runs: Vec<SeedRun> = (1..=3).map(|seed| run_seed(&s, &curves(), seed).unwrap()).collect();
        let summary = summarise(&s, runs);
        let (a, b) = (&summary.tenants[0], &summary.tenants[1]);
        // B filled the cluster before A came; A was owed its 32 and got them back in time.
        assert_eq!(b.max_held, 64, "{b:?}");
        assert!(a.max_reclaims >= 1, "{a:?}");
        assert!(a.max_reclaim_s <= a.reclaim_bound_s && a.max_reclaim_s >= 60.0, "{a:?}");
        assert!(b.max_reclaim_s <= b.reclaim_bound_s, "{b:?}");
        assert_eq!(summary.cap_violations, 0);
        // Every revocation gave the whole grace as notice.
        assert!(b.revocations > 0 && b.min_notice_s.is_some_and(|n| n >= 60.0 - 1e-9), "{b:?}");
        assert_eq!(a.unfinished + b.unfinished, 0);
    }

    /// #40.3: three tenants with unequal graces. B (grace 240 s) fills the idle cluster; A (30 s)
    /// and C (90 s) come later and take their guarantees back from B. Each is promised its own
    /// bound, epoch + its grace + restart, and keeps it: B's jobs get the taker's grace. With
    /// B's own grace (the code before) A waited up to 240 s past its promised 40 s.
    #[test]
    fn each_tenant_keeps_its_own_reclaim_bound_whatever_the_borrowers_grace() {
        let s = scenario(
            "restart_s = 9.0
[sim]
num_workers = 64
             [tenants.a]
guaranteed = 16
grace_s = 30
[tenants.b]
guaranteed = 16
grace_s = 240
             [tenants.c]
guaranteed = 32
grace_s = 90
             [arrivals.a]
jobs = 8
start_s = 300.0
[arrivals.b]
jobs = 20
[arrivals.c]
jobs = 8
start_s = 600.0
",
        );
        let runs: Vec<SeedRun> = (1..=3).map(|seed| run_seed(&s, &curves(), seed).unwrap()).collect();
        let summary = summarise(&s, runs);
        for t in &summary.tenants {
            assert!(t.max_reclaim_s <= t.reclaim_bound_s + 1e-9, "{t:?}");
        }
        let (a, c) = (&summary.tenants[0], &summary.tenants[2]);
        assert!(a.max_reclaims >= 1 && c.max_reclaims >= 1, "both took workers back: {a:?} {c:?}");
        assert!(a.reclaim_bound_s < 45.0 && a.max_reclaim_s > 30.0, "{a:?}");
    }

    #[test]
    fn a_lender_s_idle_guarantee_beyond_its_lend_limit_stays_idle() {
        let s = scenario(
            "[sim]\nnum_workers = 64\n[tenants.a]\nguaranteed = 32\nlend_limit = 24\n[tenants.b]\nguaranteed = 32\n\
             [arrivals.a]\njobs = 0\n[arrivals.b]\njobs = 20\ninterarrival_s = 1.0\n",
        );
        let summary = summarise(&s, vec![run_seed(&s, &curves(), 1).unwrap()]);
        assert_eq!(summary.tenants[1].max_held, 56, "{:?}", summary.tenants[1]);
        assert_eq!(summary.cap_violations, 0);
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let err = |text: &str| match toml::from_str::<TeamsFile>(text) {
            Ok(file) => Scenario::new(file).err().map(|e| e.to_string()).unwrap_or_default(),
            Err(e) => e.to_string(),
        };
        assert!(err("[tenants.a]\n[arrivals.b]\n").contains("[arrivals.b] names no tenant"));
        assert!(err("policy = \"lottery\"\n[tenants.a]\n").contains("unknown policy"));
        assert!(err("[tenants.a]\nweight = 0\n").contains("weight must be a positive number"));
        assert!(err("[tenants.a]\nguarantee = 3\n").contains("unknown field"));
        assert!(err("restart_s = -1\n[tenants.a]\n").contains("restart_s"));
    }
}
