//! The discrete-event simulator: jobs advance through their recorded curves at the speed their
//! workers give them; every epoch the policy reallocates from the predictors' bids, and the
//! predictors see only the losses reported so far.
//!
//! Events are arrivals, iteration completions and epoch ticks; between events every running
//! job progresses at `1/t(w)` iterations per second, so the run is exact, not time-stepped.

use crate::policy::{GainFn, JobBid, PolicyKind, Problem};
use crate::quality::{GainCurve, JobPredictor, Objective, PredictorConfig};

use super::metrics::{RunMetrics, Tracker};
use super::replay::ReplayJob;
use super::workload::SimJob;

/// How iteration time grows with workers: `t(w) = t₁·(σ + (1−σ)/w + c·log2 w)`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpeedupModel {
    /// Serial fraction σ of an iteration (does not parallelise).
    pub serial_fraction: f64,
    /// Communication cost c per doubling of workers, as a fraction of the one-worker time.
    pub comm_fraction: f64,
}

impl Default for SpeedupModel {
    fn default() -> Self {
        SpeedupModel { serial_fraction: 0.05, comm_fraction: 0.02 }
    }
}

impl SpeedupModel {
    pub fn factor(&self, workers: u32) -> f64 {
        let w = f64::from(workers.max(1));
        self.serial_fraction + (1.0 - self.serial_fraction) / w + self.comm_fraction * w.log2()
    }

    /// The worker count with the shortest iteration time: more workers slow a job down.
    pub fn most_useful_workers(&self) -> u32 {
        let w = (1.0 - self.serial_fraction) * std::f64::consts::LN_2 / self.comm_fraction.max(1e-12);
        let (lo, hi) = (w.floor().max(1.0) as u32, w.ceil().max(1.0) as u32);
        if self.factor(lo) <= self.factor(hi) { lo } else { hi }
    }
}

/// A policy as the simulator runs it: the allocation rule and the gains' normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PolicySpec {
    pub name: &'static str,
    pub kind: PolicyKind,
    pub objective: Objective,
}

impl PolicySpec {
    /// The named policies: `slaq` (greedy on the quality objective), `slaq-paper` (greedy on
    /// SLAQ's ΔL/max ΔL normalisation) and `fair`.
    pub fn named(name: &str) -> Option<PolicySpec> {
        let (name, kind, objective) = match name {
            "slaq" => ("slaq", PolicyKind::Slaq, Objective::Quality),
            "slaq-paper" => ("slaq-paper", PolicyKind::Slaq, Objective::DeltaLoss),
            "fair" => ("fair", PolicyKind::Fair, Objective::Quality),
            "slaq-oracle" => ("slaq-oracle", PolicyKind::Slaq, Objective::Quality),
            _ => return None,
        };
        Some(PolicySpec { name, kind, objective })
    }

    pub const NAMES: [&'static str; 4] = ["slaq", "slaq-paper", "fair", "slaq-oracle"];

    /// The oracle bids with each job's true future curve and speed-up (for analysis only: it
    /// shows how much of the gap to a perfect predictor is prediction error).
    pub fn is_oracle(&self) -> bool {
        self.name == "slaq-oracle"
    }
}

/// Cluster and scheduler settings of a run.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    pub num_workers: u32,
    pub epoch_s: f64,
    /// Seconds ahead over which gains are predicted (at least one epoch): allocations persist
    /// and curves saturate, so a one-epoch gain favours the steepest job too much.
    pub gain_horizon_s: f64,
    pub speedup: SpeedupModel,
    /// Workers any one job may hold.
    pub max_workers_per_job: u32,
    /// Workers every job keeps while the cluster has that many for each (SLAQ's prototype
    /// kept 3 cores per job): a job with no workers reports nothing, so its prediction could
    /// never recover from a pessimistic fit.
    pub min_workers_per_job: u32,
    pub predictor: PredictorConfig,
    /// A run stops here even if jobs remain (they are reported as unfinished).
    pub max_time_s: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            num_workers: DEFAULT_WORKERS,
            epoch_s: 5.0,
            gain_horizon_s: 60.0,
            speedup: SpeedupModel::default(),
            max_workers_per_job: u32::MAX,
            min_workers_per_job: 1,
            predictor: PredictorConfig::default(),
            max_time_s: 1e7,
        }
    }
}

/// The default cluster: 64 workers. With the default workload about 20 jobs are active at a
/// time and each could use up to 33 workers before the speed-up model turns down, so the jobs
/// could use far more workers than exist for most of the run, as in SLAQ's evaluation. The
/// `contended_fraction` of a run's metrics measures this.
pub const DEFAULT_WORKERS: u32 = 64;

struct JobState<'a> {
    replay: ReplayJob<'a>,
    predictor: JobPredictor,
    attained_service: f64,
}

/// Runs one workload under one policy. Deterministic: same inputs, same result.
pub fn run(jobs: &[SimJob], config: &SimConfig, policy: PolicySpec, mut on_progress: impl FnMut(usize)) -> RunMetrics {
    let predictor_config = PredictorConfig { objective: policy.objective, ..config.predictor };
    let mut states: Vec<JobState<'_>> = jobs
        .iter()
        .map(|job| JobState {
            replay: ReplayJob::new(job),
            predictor: JobPredictor::new(predictor_config),
            attained_service: 0.0,
        })
        .collect();
    let mut arrivals: Vec<usize> = (0..jobs.len()).collect();
    arrivals.sort_by(|&a, &b| jobs[a].arrival_s.total_cmp(&jobs[b].arrival_s).then(a.cmp(&b)));
    let mut next_arrival = 0;
    let mut active: Vec<usize> = Vec::new();
    let mut now = 0.0f64;
    let mut next_epoch = 0.0f64;
    let speedup = &config.speedup;
    let mut metrics = Tracker::new(config.num_workers, speedup.most_useful_workers().min(config.max_workers_per_job));
    let mut num_finished = 0;

    while num_finished < jobs.len() && now < config.max_time_s {
        // The next event: an arrival, an epoch tick or the earliest iteration completion.
        let mut next_time = next_epoch;
        if let Some(&j) = arrivals.get(next_arrival) {
            next_time = next_time.min(jobs[j].arrival_s);
        }
        for &j in &active {
            if let Some(t) = states[j].replay.completes_at(now, speedup) {
                next_time = next_time.min(t);
            }
        }
        let dt = (next_time - now).max(0.0);
        metrics.integrate(active.iter().map(|&j| states[j].replay.view()), dt);
        for &j in &active {
            let s = &mut states[j];
            s.attained_service += dt * f64::from(s.replay.workers);
            s.replay.advance(dt, speedup);
        }
        now = next_time;

        // Completions.
        let mut k = 0;
        while k < active.len() {
            let s = &mut states[active[k]];
            if let Some(done) = s.replay.complete(now, speedup) {
                // The simulator only feeds valid points, so a refusal here is a bug.
                let observed = s.predictor.observe(done.iter, done.loss);
                debug_assert!(observed.is_ok());
                s.predictor.observe_time(done.workers, done.seconds);
                if done.finished {
                    num_finished += 1;
                    on_progress(num_finished);
                    active.swap_remove(k);
                    continue;
                }
            }
            k += 1;
        }

        // Arrivals: the job brings its history (as if resumed from a checkpoint).
        while let Some(&j) = arrivals.get(next_arrival) {
            if jobs[j].arrival_s > now {
                break;
            }
            next_arrival += 1;
            let s = &mut states[j];
            warm_up(&mut s.predictor, &s.replay.job.loss[..s.replay.job.offset]);
            s.replay.arrive(now);
            active.push(j);
        }
        active.sort_unstable();

        if now >= next_epoch {
            reallocate(&mut states, &active, config, policy);
            metrics.sample(now, active.iter().map(|&j| states[j].replay.view()));
            next_epoch = now + config.epoch_s;
        }
    }

    let outcomes = states.iter().map(|s| s.replay.outcome()).collect();
    metrics.finish(policy.name, outcomes, now)
}

/// Feeds a resumed job's history, refitting along the way so that its candidates already have
/// out-of-sample scores when it arrives (at most about 40 refits per job).
fn warm_up(predictor: &mut JobPredictor, history: &[f64]) {
    let stride = (history.len() / 40).max(1);
    for (i, &loss) in history.iter().enumerate() {
        let observed = predictor.observe(i as u64 + 1, loss);
        debug_assert!(observed.is_ok());
        if i % stride == 0 || i + 1 == history.len() {
            predictor.refit();
        }
    }
}

/// A bid's gain curve: the predictor's, or the truth for the oracle.
#[derive(Clone, Copy, Debug)]
enum SimGain<'a> {
    Predicted(GainCurve),
    Oracle { job: &'a SimJob, next: usize, progress: f64, epoch_s: f64, speedup: SpeedupModel },
}

impl GainFn for SimGain<'_> {
    fn gain(&self, workers: u32) -> f64 {
        match *self {
            SimGain::Predicted(g) => g.gain(workers),
            SimGain::Oracle { job, next, progress, epoch_s, speedup } => {
                if workers == 0 {
                    return 0.0;
                }
                // Walk the true curve over the horizon at this worker count and average the
                // normalised-loss reduction over time, as the slaq objective does.
                let factor = speedup.factor(workers);
                let (mut clock, mut area) = (0.0, 0.0);
                let mut remaining_fraction = 1.0 - progress;
                for i in next..job.loss.len() {
                    clock += job.one_worker_seconds[i] * factor * remaining_fraction;
                    remaining_fraction = 1.0;
                    if clock >= epoch_s {
                        break;
                    }
                    let drop_here = job.norm_loss(if i == 0 { job.loss_first } else { job.loss[i - 1] })
                        - job.norm_loss(job.loss[i]);
                    area += drop_here * (epoch_s - clock);
                }
                (area / epoch_s).max(0.0)
            }
        }
    }
}

fn reallocate(states: &mut [JobState<'_>], active: &[usize], config: &SimConfig, policy: PolicySpec) {
    let needs_gains = policy.kind == PolicyKind::Slaq;
    let bids: Vec<JobBid<SimGain<'_>>> = active
        .iter()
        .map(|&j| {
            let s = &mut states[j];
            let gain = if !needs_gains {
                None
            } else if policy.is_oracle() {
                Some(SimGain::Oracle {
                    job: s.replay.job,
                    next: s.replay.next,
                    progress: s.replay.progress,
                    epoch_s: config.gain_horizon_s.max(config.epoch_s),
                    speedup: config.speedup,
                })
            } else {
                s.predictor.refit();
                // SLAQ's gain looks one epoch ahead; ours over the planning horizon.
                let horizon = match policy.objective {
                    Objective::DeltaLoss => config.epoch_s,
                    Objective::Quality => config.gain_horizon_s.max(config.epoch_s),
                };
                s.predictor.gain_curve(horizon, s.replay.workers).map(SimGain::Predicted)
            };
            JobBid {
                min_workers: config.min_workers_per_job,
                max_workers: config.max_workers_per_job,
                current_workers: s.replay.workers,
                attained_service: s.attained_service,
                gain,
            }
        })
        .collect();
    let problem = Problem { num_workers: config.num_workers, jobs: &bids };
    let allocation = policy.kind.allocate(&problem);
    debug_assert!(crate::policy::check_contract(&problem, &allocation).is_ok());
    for (&j, &w) in active.iter().zip(&allocation.workers) {
        states[j].replay.workers = w;
    }
}
