//! Pollux's workloads on Pollux's job model (`slaq simulate --pollux-workload`): 16 machines ×
//! 4 GPUs, a decision every 60 s, a 30 s checkpoint-restart whenever a job's placement changes,
//! each job's step time, gradient statistics and completion from its application's traces
//! ([`crate::cluster::trace`]), as in the published simulator (petuum/adaptdl, `simulator/`).
//!
//! The scheduler sees what a job reports, never the traces: the step and sync times of the
//! shapes it ran in (fitted into [`PerfParams`] by [`model::fit`]), its gradient statistics at
//! its current epoch, its progress and its declared length (the progress of its last epoch).
//! Every decision is the live scheduler's: [`plan_epoch`] (counts, placement, batch).
//!
//! Policies:
//! - `fair`: each job asks for the GPUs and batch its user chose (the workload's
//!   `num_replicas`, `batch_size`), max-min shared, placed best-fit; no batch choice.
//! - `slaq`: quality-driven counts on locality- and batch-aware gains, LP-rounding placement,
//!   Courier's batch.
//! - `slaq-no-placement`: the same counts, but slots handed out in machine order (first fit).
//! - `slaq-no-batch`: the same, but each job keeps its user's batch.
//!
//! Like Pollux, a job is not trusted beyond twice the GPUs it has run on (its model is a
//! prior there), nor beyond half to twice the per-GPU batches it has run at; it starts at its
//! user's batch. slaq's gains are net of the restart a change costs
//! ([`Config::restart_horizon_s`]); fair sharing, which has no gains to weigh a restart
//! against, keeps a job's slots for at least [`min_residence`] decisions after a change, so
//! that restarts cost it at most a tenth of a job's time.

pub mod report;
pub mod workload;

pub use workload::{WorkloadJob, load_workload, published};

use crate::cluster::model::{self, BatchConfig, BatchLimits, Observation, PerfParams, Shape, step_gain};
use crate::cluster::place::Layout;
use crate::policy::{Gains, JobBid, PolicyKind};
use crate::schedule::place::layouts_of;
use crate::schedule::{
    self, EpochInput, EpochJob, FloorLedger, JobModel, PlaceSettings, Placer, PlanSettings, plan_epoch,
};

/// The compared policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    Fair,
    Slaq,
    SlaqNoPlacement,
    SlaqNoBatch,
}

impl Policy {
    pub const ALL: [Policy; 4] = [Policy::Fair, Policy::Slaq, Policy::SlaqNoPlacement, Policy::SlaqNoBatch];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fair => "fair",
            Policy::Slaq => "slaq",
            Policy::SlaqNoPlacement => "slaq-no-placement",
            Policy::SlaqNoBatch => "slaq-no-batch",
        }
    }
}

/// The cluster and the job model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub machines: u32,
    pub slots: u32,
    pub epoch_s: f64,
    pub restart_s: f64,
    /// Each job's SLO on its iteration time, as a multiple of the step time of its user's choice
    /// (requested GPUs packed, requested batch); `None`: no SLO.
    pub slo_factor: Option<f64>,
    pub seed: u64,
    /// Hard stop (seconds of simulated time).
    pub max_s: f64,
    /// The fairness floor and its window (`schedule::plan`), as in the live scheduler.
    pub plan: PlanSettings,
    /// The horizon `H` that slaq's gains are counted over, so that a change, which first loses
    /// the restart, is bid only where it pays within `H` (and a spread job moves to fewer
    /// machines only then). 120 s was chosen on workloads 1–4 at load 1.0 among 60, 90, 120,
    /// 180, 300 and 600 s, and is reported on workloads 5–8 and the other loads, which it did
    /// not see (docs/evaluation.md, "Pollux's workloads").
    pub restart_horizon_s: f64,
    /// Pollux's restart penalty in slaq's bids (`schedule::restart_factor`): a running job's
    /// gains on any other allocation scaled by `(age − restarts·restart_s)/(age + restart_s)`.
    pub restart_penalty: bool,
    /// Whether slaq is told how long each job is (its last epoch's progress, what
    /// Optimus+Oracle gets) or not (as Pollux is not).
    pub job_length: JobLength,
}

/// What slaq knows of a job's length (`--job-length`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum JobLength {
    /// Told: the progress left is the declared length minus the progress made.
    #[default]
    Known,
    /// Not told: the progress left is taken to be `factor` times what the job has made so far
    /// (with 1, a job is as likely to be past its middle as not: the least-attained-service
    /// prior of Tiresias), and at least what it makes in one decision on one GPU.
    Unknown { factor: f64 },
}

impl JobLength {
    /// The progress a job has left, as slaq may know it: from its declared length (`target`,
    /// called only when the length is known), or from the progress it has made, at least
    /// `floor` (what it makes in one decision on one GPU).
    pub fn remaining(self, target: impl FnOnce() -> f64, progress: f64, floor: f64) -> f64 {
        match self {
            JobLength::Known => target() - progress,
            JobLength::Unknown { factor } => (factor * progress).max(floor).max(1e-9),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            machines: 16,
            slots: 4,
            epoch_s: 60.0,
            restart_s: 30.0,
            slo_factor: None,
            seed: 1,
            max_s: 30.0 * 86_400.0,
            plan: PlanSettings::default(),
            restart_horizon_s: 120.0,
            restart_penalty: true,
            job_length: JobLength::Known,
        }
    }
}

/// Decisions a job keeps its slots for after a change: restarts cost at most a tenth of its
/// time, `⌈restart / (0.1 · epoch)⌉` (5 at 30 s and 60 s). Chosen before any run.
pub fn min_residence(config: &Config) -> u32 {
    if config.restart_s <= 0.0 { 0 } else { (config.restart_s / (0.1 * config.epoch_s)).ceil() as u32 }
}

/// One job's outcome.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct JobOutcome {
    pub name: String,
    pub jct_s: Option<f64>,
    pub restarts: u32,
    /// Seconds run within / outside the SLO, and the summed relative excess of the latter.
    pub slo_met_s: f64,
    pub slo_missed_s: f64,
    pub slo_excess_s: f64,
}

/// A policy's figures on one workload.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub jobs: usize,
    pub finished: usize,
    pub mean_jct_s: f64,
    pub p99_jct_s: f64,
    pub restarts_per_job: f64,
    /// Percentage of running time spent within the job's SLO (`None` without SLOs).
    pub slo_met_pct: Option<f64>,
    /// Mean relative excess of the iteration time over the SLO while missed (percent).
    pub slo_mean_miss_pct: Option<f64>,
    /// Mean GPUs busy (allocated and not restarting) over the run, of the cluster.
    pub busy_pct: f64,
}

struct Job<'a> {
    spec: &'a WorkloadJob,
    limits: BatchLimits,
    batches: Vec<u32>,
    slo: Option<f64>,
    progress: f64,
    epoch: usize,
    layout: Layout,
    config: Option<BatchConfig>,
    restart_left: f64,
    restarts: Option<u32>,
    observations: Vec<Observation>,
    perf: PerfParams,
    max_profiled: u32,
    since_change: u32,
    ledger: FloorLedger,
    attained: f64,
    done_at: Option<f64>,
    slo_met_s: f64,
    slo_missed_s: f64,
    slo_excess_s: f64,
}

impl Job<'_> {
    fn count(&self) -> u32 {
        self.layout.iter().map(|l| l.1).sum()
    }

    fn counts(&self) -> Vec<u32> {
        self.layout.iter().map(|l| l.1).collect()
    }

    /// What the job reports: gradient statistics at its batch and epoch.
    fn grads(&self) -> (f64, f64) {
        let b = self.config.map_or(self.limits.init_batch, |c| c.batch);
        self.spec.app.grad_stats(f64::from(b), self.epoch)
    }

    fn model(&self, policy: Policy) -> JobModel {
        let fixed = matches!(policy, Policy::Fair | Policy::SlaqNoBatch);
        let (seen_local, local_range) = schedule::seen_batches(&self.observations);
        JobModel {
            perf: self.perf,
            limits: self.limits,
            batches: if fixed { vec![self.spec.batch] } else { self.batches.clone() },
            grads: Some(self.grads()),
            slo_iter_s: self.slo,
            ps: false,
            current: self.layout.clone(),
            seen_local,
            start_batch: self.observations.is_empty().then_some(self.spec.batch),
            local_range,
        }
    }

    /// Advances the job by `seconds` on its current allocation (the published simulator's
    /// `Job.step`); returns GPU-seconds busy.
    fn run(&mut self, now: f64, seconds: f64) -> f64 {
        let (Some(config), false) = (self.config, self.layout.is_empty()) else { return 0.0 };
        let gpus = f64::from(self.count());
        let delay = self.restart_left.min(seconds);
        self.restart_left -= delay;
        let mut t = now + delay;
        let mut left = seconds - delay;
        let app = self.spec.app;
        let target = app.target_progress();
        let counts = self.counts();
        let Some((step, sync)) = app.step_time(&counts, f64::from(config.local_bsz)) else { return 0.0 };
        let shape = Shape::of(&counts);
        let obs = Observation {
            machines: shape.machines,
            replicas: shape.replicas,
            local_bsz: f64::from(config.local_bsz),
            step,
            sync,
        };
        if left > 0.0 && !self.observations.contains(&obs) {
            self.observations.push(obs);
            self.perf = model::fit(&self.observations);
            self.max_profiled = self.max_profiled.max(shape.replicas);
        }
        let iter_s = step + (step - sync) * f64::from(config.accum);
        let busy = left * gpus;
        while left > 0.0 && self.done_at.is_none() {
            let (sqr, var) = app.grad_stats(f64::from(config.batch), self.epoch);
            let goodput = step_gain(sqr, var, f64::from(config.batch), f64::from(app.init_batch)) / iter_s;
            let next = app.progress_at(self.epoch + 1).min(target);
            let need = (next - self.progress) / goodput;
            if need > left {
                self.progress += goodput * left;
                self.account_slo(iter_s, left);
                t += left;
                left = 0.0;
            } else {
                self.account_slo(iter_s, need);
                self.progress = next;
                self.epoch += 1;
                t += need;
                left -= need;
                if self.epoch >= app.max_epochs || self.progress >= target {
                    self.done_at = Some(t);
                }
            }
        }
        busy - left * gpus
    }

    fn account_slo(&mut self, iter_s: f64, seconds: f64) {
        if let Some(slo) = self.slo {
            if iter_s <= slo * (1.0 + 1e-9) {
                self.slo_met_s += seconds;
            } else {
                self.slo_missed_s += seconds;
                self.slo_excess_s += seconds * (iter_s / slo - 1.0);
            }
        }
    }
}

/// Runs one workload under `policy`: every decision, the jobs bid ([`Job::bid`]), the planner
/// decides ([`plan_epoch`]), each job takes its new layout and batch ([`Job::apply`]) and runs
/// the decision's seconds ([`Job::run`]).
pub fn run(workload: &[WorkloadJob], policy: Policy, config: &Config) -> (Summary, Vec<JobOutcome>) {
    let mut jobs: Vec<Job<'_>> = workload.iter().map(|spec| Job::new(spec, config)).collect();
    let total = config.machines * config.slots;
    let machine_of: Vec<usize> = (0..total).map(|w| (w / config.slots) as usize).collect();
    let bidding = Bidding {
        policy,
        config,
        total,
        residence: min_residence(config),
        place: PlaceSettings {
            placer: match policy {
                Policy::Fair => Placer::Greedy,
                Policy::SlaqNoPlacement => Placer::FirstFit,
                _ => Placer::Lp,
            },
            restart_s: config.restart_s,
            horizon_s: config.restart_horizon_s,
        },
    };
    let mut decision = 0u64;
    let mut now = 0.0;
    let mut busy = 0.0;
    while now < config.max_s {
        let active: Vec<usize> =
            (0..jobs.len()).filter(|&j| jobs[j].spec.submit_s <= now && jobs[j].done_at.is_none()).collect();
        if active.is_empty() && jobs.iter().all(|j| j.done_at.is_some() || j.spec.submit_s <= now) {
            break;
        }
        // 1. What each job bids, and its model.
        let models: Vec<JobModel> = active.iter().map(|&j| jobs[j].model(policy)).collect();
        let mut epoch_jobs: Vec<EpochJob<'_, Gains>> =
            active.iter().zip(&models).map(|(&j, m)| jobs[j].bid(m, &bidding, now)).collect();
        // The finish-time bound's view of each job: its progress, what is left of it as slaq
        // may know it (`--job-length`), and its predicted rate at each count up to its bid's.
        let bounded = policy != Policy::Fair && config.plan.slowdown_bound().is_finite();
        let paced = if bounded { paced(&jobs, &active, &models, &epoch_jobs, config) } else { Vec::new() };
        for ((e, &j), (rates, remaining)) in epoch_jobs.iter_mut().zip(&active).zip(&paced) {
            e.pace = Some(schedule::Pace {
                age_s: now - jobs[j].spec.submit_s,
                done: jobs[j].progress,
                remaining: *remaining,
                rates: schedule::slowdown::Rates::new(rates),
                wait_s: config.epoch_s,
            });
        }
        // 2. The plan. Slot `w` is on machine `w / slots`; each job holds the slots of its layout.
        let current = held_slots(&jobs, &active, config);
        let input = EpochInput {
            policy: if policy == Policy::Fair { PolicyKind::Fair } else { PolicyKind::Slaq },
            plan: config.plan,
            place: bidding.place,
            jobs: &epoch_jobs,
            machine_of: Some(&machine_of),
            current: &current,
            held: None,
            seed: config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ decision,
            types: None,
            tenants: None,
            special: None,
        };
        let mut ledgers: Vec<FloorLedger> = active.iter().map(|&j| std::mem::take(&mut jobs[j].ledger)).collect();
        let planned = plan_epoch(&input, &mut ledgers);
        decision += 1;
        let layouts = layouts_of(active.len(), &machine_of, planned.next(&current));
        for (((&j, ledger), layout), batch) in active.iter().zip(ledgers).zip(layouts).zip(&planned.batches) {
            jobs[j].apply(ledger, layout, batch.map(|c| c.config), config.restart_s);
        }
        // 3. Run the epoch.
        for &j in &active {
            busy += jobs[j].run(now, config.epoch_s);
            jobs[j].attained += f64::from(jobs[j].count()) * config.epoch_s;
        }
        now += config.epoch_s;
    }
    let outcomes: Vec<JobOutcome> = jobs.iter().map(Job::outcome).collect();
    (summarise(&outcomes, busy / (f64::from(total) * now.max(1.0))), outcomes)
}

/// Each active job's predicted rate at each count up to its bid's, and what is left of its
/// progress as slaq may know it (`--job-length`).
fn paced(
    jobs: &[Job<'_>],
    active: &[usize],
    models: &[JobModel],
    epoch_jobs: &[EpochJob<'_, Gains>],
    config: &Config,
) -> Vec<(Vec<f64>, f64)> {
    active
        .iter()
        .zip(models)
        .zip(epoch_jobs)
        .map(|((&j, m), e)| {
            let rates = schedule::rates(m, e.bid.max_workers, config.slots);
            let remaining = jobs[j].remaining(&rates, config);
            (rates, remaining)
        })
        .collect()
}

/// Which active job holds each slot (slot `w` is on machine `w / slots`): each job the slots
/// of its layout.
fn held_slots(jobs: &[Job<'_>], active: &[usize], config: &Config) -> Vec<Option<usize>> {
    let mut current: Vec<Option<usize>> = vec![None; (config.machines * config.slots) as usize];
    for (i, &j) in active.iter().enumerate() {
        for &(m, c) in &jobs[j].layout {
            let on = &mut current[m * config.slots as usize..(m + 1) * config.slots as usize];
            for slot in on.iter_mut().filter(|s| s.is_none()).take(c as usize) {
                *slot = Some(i);
            }
        }
    }
    current
}

/// How the jobs of one run bid.
struct Bidding<'a> {
    policy: Policy,
    config: &'a Config,
    /// GPUs in the cluster.
    total: u32,
    /// Decisions fair sharing keeps a job's slots after a change.
    residence: u32,
    place: PlaceSettings,
}

impl<'a> Job<'a> {
    fn new(spec: &'a WorkloadJob, config: &Config) -> Self {
        let app = spec.app;
        let limits = app.limits();
        let slo = config.slo_factor.and_then(|f| {
            let replicas = spec.replicas.max(1);
            let c = limits.configure(spec.batch, replicas);
            let counts = Shape::packed_counts(replicas, config.slots);
            app.step_time(&counts, f64::from(c.local_bsz)).map(|(s, y)| f * (s + (s - y) * f64::from(c.accum)))
        });
        Job {
            spec,
            limits,
            batches: limits.grid(),
            slo,
            progress: 0.0,
            epoch: 0,
            layout: Layout::new(),
            config: None,
            restart_left: 0.0,
            restarts: None,
            observations: Vec::new(),
            perf: PerfParams::PRIOR,
            max_profiled: 0,
            since_change: u32::MAX,
            ledger: FloorLedger::default(),
            attained: 0.0,
            done_at: None,
            slo_met_s: 0.0,
            slo_missed_s: 0.0,
            slo_excess_s: 0.0,
        }
    }

    /// Its bid for the next decision, priced with `model` (its [`Job::model`]). Fair sharing
    /// has no gains to weigh a restart against: it keeps a job's slots for the residence and
    /// asks for the user's GPUs. slaq bids gains net of the restart, for up to twice the GPUs
    /// the job has run on (its model is trusted no further).
    fn bid<'m>(&self, model: &'m JobModel, how: &Bidding<'_>, now: f64) -> EpochJob<'m, Gains> {
        let cur = self.count();
        let fair = how.policy == Policy::Fair;
        let pinned = fair && cur > 0 && self.since_change < how.residence;
        let cap = if fair { self.spec.replicas.max(1) } else { (2 * self.max_profiled).clamp(1, how.total) };
        let (min, max) = if pinned { (cur, cur) } else { (0, cap) };
        let gain = (!fair).then(|| {
            let config = how.config;
            let rates = schedule::rates(model, max, config.slots);
            let remaining = self.remaining(&rates, config);
            let mut g = schedule::gains(&rates, remaining, how.place.horizon_s, cur, config.restart_s);
            if config.restart_penalty && cur > 0 {
                let factor =
                    schedule::restart_factor(now - self.spec.submit_s, self.restarts.unwrap_or(0), config.restart_s);
                for (k, v) in g.iter_mut().enumerate() {
                    if k as u32 != cur {
                        *v *= factor;
                    }
                }
            }
            Gains(schedule::concave_hull(&g))
        });
        let bid = JobBid { min_workers: min, max_workers: max, attained_service: self.attained, gain, weight: 1.0 };
        EpochJob { bid, own_minimum: false, sizes: None, model, pace: None }
    }

    /// The progress it has left as slaq may know it (`--job-length`): at least one decision on
    /// one GPU.
    fn remaining(&self, rates: &[f64], config: &Config) -> f64 {
        let one_gpu_decision = rates.get(1).copied().unwrap_or(0.0) * config.epoch_s;
        config.job_length.remaining(|| self.spec.app.target_progress(), self.progress, one_gpu_decision)
    }

    /// Takes the decision's layout and batch: a changed placement restarts it (`restart_s`).
    fn apply(&mut self, ledger: FloorLedger, mut layout: Layout, config: Option<BatchConfig>, restart_s: f64) {
        self.ledger = ledger;
        layout.sort_unstable();
        let mut old = self.layout.clone();
        old.sort_unstable();
        if layout != old {
            self.since_change = 0;
            if !layout.is_empty() {
                self.restart_left = restart_s;
                self.restarts = Some(self.restarts.map_or(0, |r| r + 1));
            }
        } else {
            self.since_change = self.since_change.saturating_add(1);
        }
        self.layout = layout;
        self.config = config;
    }

    fn outcome(&self) -> JobOutcome {
        JobOutcome {
            name: self.spec.name.clone(),
            jct_s: self.done_at.map(|t| t - self.spec.submit_s),
            restarts: self.restarts.unwrap_or(0),
            slo_met_s: self.slo_met_s,
            slo_missed_s: self.slo_missed_s,
            slo_excess_s: self.slo_excess_s,
        }
    }
}

fn summarise(outcomes: &[JobOutcome], busy: f64) -> Summary {
    let mut jcts: Vec<f64> = outcomes.iter().filter_map(|o| o.jct_s).collect();
    jcts.sort_by(f64::total_cmp);
    let n = jcts.len().max(1) as f64;
    let p99 = jcts.get(((0.99 * jcts.len() as f64).ceil() as usize).saturating_sub(1)).copied().unwrap_or(f64::NAN);
    let met: f64 = outcomes.iter().map(|o| o.slo_met_s).sum();
    let missed: f64 = outcomes.iter().map(|o| o.slo_missed_s).sum();
    let excess: f64 = outcomes.iter().map(|o| o.slo_excess_s).sum();
    let with_slo = met + missed > 0.0;
    Summary {
        jobs: outcomes.len(),
        finished: jcts.len(),
        mean_jct_s: jcts.iter().sum::<f64>() / n,
        p99_jct_s: p99,
        restarts_per_job: outcomes.iter().map(|o| f64::from(o.restarts)).sum::<f64>() / outcomes.len().max(1) as f64,
        slo_met_pct: with_slo.then(|| 100.0 * met / (met + missed)),
        slo_mean_miss_pct: (missed > 0.0).then(|| 100.0 * excess / missed),
        busy_pct: 100.0 * busy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::trace::application;
    use std::path::Path;

    #[test]
    fn a_job_of_unknown_length_is_judged_by_its_progress_alone() {
        let unknown = JobLength::Unknown { factor: 1.0 };
        // The declared length is never read.
        let told = |_: ()| -> f64 { panic!("the declared length was read") };
        assert_eq!(unknown.remaining(|| told(()), 30.0, 2.0), 30.0);
        assert_eq!(unknown.remaining(|| told(()), 0.5, 2.0), 2.0, "at least one decision on one GPU");
        assert_eq!(JobLength::Unknown { factor: 4.0 }.remaining(|| told(()), 30.0, 2.0), 120.0);
        assert_eq!(JobLength::Known.remaining(|| 100.0, 30.0, 2.0), 70.0);
    }

    fn one(app: &str, replicas: u32, batch: u32) -> WorkloadJob {
        WorkloadJob { name: "j".into(), submit_s: 0.0, app: application(app).unwrap(), replicas, batch }
    }

    /// The completion time straight from the traces: one job on a fixed placement and batch.
    fn direct(job: &WorkloadJob, counts: &[u32], restart_s: f64) -> f64 {
        let app = job.app;
        let c = app.limits().configure(job.batch, counts.iter().sum());
        let (step, sync) = app.step_time(counts, f64::from(c.local_bsz)).unwrap();
        let iter_s = step + (step - sync) * f64::from(c.accum);
        let mut t = restart_s;
        for e in 0..app.max_epochs {
            let (sqr, var) = app.grad_stats(f64::from(c.batch), e);
            let goodput = step_gain(sqr, var, f64::from(c.batch), f64::from(app.init_batch)) / iter_s;
            t += (app.progress_at(e + 1) - app.progress_at(e)) / goodput;
        }
        t
    }

    #[test]
    fn one_job_alone_matches_its_trace_within_one_percent() {
        for (app, replicas, batch, counts) in [
            ("cifar10", 4, 512, vec![4]),
            ("bert", 4, 48, vec![4]),
            ("ncf", 2, 4096, vec![2]),
            ("deepspeech2", 8, 320, vec![4, 4]),
        ] {
            let job = one(app, replicas, batch);
            let (summary, _) = run(std::slice::from_ref(&job), Policy::Fair, &Config::default());
            let want = direct(&job, &counts, 30.0);
            assert_eq!(summary.finished, 1, "{app}");
            assert!((summary.mean_jct_s / want - 1.0).abs() < 0.01, "{app}: {} vs {want}", summary.mean_jct_s);
            assert_eq!(summary.restarts_per_job, 0.0);
        }
    }

    #[test]
    fn workloads_parse_and_every_policy_finishes_a_small_one() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/pollux/workloads");
        let jobs = load_workload(&dir.join("workload-1.csv")).unwrap();
        assert_eq!(jobs.len(), 160);
        let small: Vec<WorkloadJob> = jobs.into_iter().take(12).collect();
        for policy in Policy::ALL {
            let (s, _) = run(&small, policy, &Config::default());
            assert_eq!(s.finished, 12, "{policy:?}");
            assert!(s.mean_jct_s > 0.0 && s.p99_jct_s >= s.mean_jct_s * 0.5, "{policy:?} {s:?}");
        }
        assert!(published(&dir.join("../results"), "pollux", "1.0").is_some_and(|p| (p.1 - 2751.13).abs() < 0.01));
    }

    #[test]
    fn slos_are_accounted() {
        // Alone under fair sharing, a job runs at its user's GPUs and batch: its step time is
        // its SLO at factor 1 (met all the time), and twice its SLO at factor 0.5 (missed all the
        // time, by 100%).
        let job = one("cifar10", 4, 512);
        let met = Config { slo_factor: Some(1.0), ..Config::default() };
        let (s, _) = run(std::slice::from_ref(&job), Policy::Fair, &met);
        assert!(s.slo_met_pct.is_some_and(|p| p > 99.9), "{s:?}");
        let missed = Config { slo_factor: Some(0.5), ..Config::default() };
        let (s, _) = run(std::slice::from_ref(&job), Policy::Fair, &missed);
        assert!(s.slo_met_pct.is_some_and(|p| p < 0.1), "{s:?}");
        assert!(s.slo_mean_miss_pct.is_some_and(|p| (p - 100.0).abs() < 0.5), "{s:?}");
        // Without a factor, no SLO is counted.
        let (s, _) = run(std::slice::from_ref(&job), Policy::Fair, &Config::default());
        assert_eq!(s.slo_met_pct, None);
    }
}
