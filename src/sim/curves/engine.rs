//! The discrete-event simulator: jobs advance through their recorded curves at the speed their
//! workers give them; every epoch the policy reallocates from the predictors' bids, and the
//! predictors see only the losses reported so far.
//!
//! Events are arrivals, iteration completions and epoch ticks; between events every running
//! job progresses at `1/t(w)` iterations per second, so the run is exact, not time-stepped.

use super::moves::Teams;
use crate::policy::{GainFn, Gains, JobBid, PolicyKind, peers};
use crate::quality::{GainCurve, JobPredictor, Objective, PredictorConfig};
use crate::schedule::{
    self, EpochInput, EpochJob, EpochPlan, FloorLedger, JobModel, PlaceSettings, Placer, PlanSettings, Tenancy,
};

use super::metrics::{RunMetrics, Tracker};
use super::replay::ReplayJob;
use super::speedup::SpeedupModel;
use super::workload::SimJob;

/// A policy as the simulator runs it: the allocation rule and the gains' normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PolicySpec {
    pub name: &'static str,
    pub kind: PolicyKind,
    pub objective: Objective,
}

impl PolicySpec {
    /// The named policies: `slaq` (greedy on the quality objective), `slaq-paper` (greedy on
    /// SLAQ's ΔL/max ΔL normalisation, under the same floor), `fair`, `oracle` (the greedy
    /// on each job's true future curve and true speed-up, looking over the planning horizon; see
    /// [`oracle_gain`]), `srpt-oracle` (the completion-time reference: heSRPT on each job's true
    /// remaining work and speed-up; see [`srpt_weights`]) and the peers ([`PolicySpec::is_peer`]).
    pub fn named(name: &str) -> Option<PolicySpec> {
        let (name, kind, objective) = match name {
            "slaq" => ("slaq", PolicyKind::Slaq, Objective::Quality),
            "slaq-paper" => ("slaq-paper", PolicyKind::Slaq, Objective::DeltaLoss),
            "fair" => ("fair", PolicyKind::Fair, Objective::Quality),
            "oracle" => ("oracle", PolicyKind::Slaq, Objective::Quality),
            "srpt-oracle" => ("srpt-oracle", PolicyKind::Slaq, Objective::Quality),
            "optimus" => ("optimus", PolicyKind::Slaq, Objective::Quality),
            "pollux" => ("pollux", PolicyKind::Slaq, Objective::Quality),
            "tiresias" => ("tiresias", PolicyKind::Slaq, Objective::Quality),
            "themis" => ("themis", PolicyKind::Slaq, Objective::Quality),
            "themis-d1" => ("themis-d1", PolicyKind::Slaq, Objective::Quality),
            _ => return None,
        };
        Some(PolicySpec { name, kind, objective })
    }

    pub const NAMES: [&'static str; 10] =
        ["slaq", "slaq-paper", "fair", "oracle", "srpt-oracle", "optimus", "pollux", "tiresias", "themis", "themis-d1"];

    /// The peers' policies (`policy::peers`): their own rules through the one greedy, on the
    /// jobs' predicted times and remaining work, with neither slaq's floor nor its bound.
    pub fn is_peer(&self) -> bool {
        matches!(self.name, "optimus" | "pollux" | "tiresias" | "themis" | "themis-d1")
    }

    /// The oracles bid with the truth (each job's future curve, remaining work and speed-up),
    /// not with a prediction.
    pub fn is_oracle(&self) -> bool {
        matches!(self.name, "oracle" | "srpt-oracle")
    }

    /// The plan's settings for this policy: the run's, but neither floor nor bound for the
    /// completion-time reference and the peers (either would make them other policies).
    fn plan(&self, plan: PlanSettings) -> PlanSettings {
        if self.name == "srpt-oracle" || self.is_peer() {
            PlanSettings { floor: 0.0, max_slowdown: 0.0, ..plan }
        } else {
            plan
        }
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
    /// Workers every job keeps while the cluster has that many for each (an instantaneous
    /// minimum; SLAQ's prototype kept 3 cores per job). The default, 0, leaves the guarantee
    /// to the fairness floor of `plan`, which is in attained service.
    pub min_workers_per_job: u32,
    /// The planner's fairness floor and finish-time bound.
    pub plan: PlanSettings,
    /// Whether the finish-time bound reads each job's declared length (its curve's iterations,
    /// as a `max_iter`) or predicts it: Optimus's steps to convergence (95% of the predicted
    /// drop) on the job's fitted curve, never less than the Tiresias-like prior of as many
    /// iterations again as it has run here (nor one epoch on one worker).
    pub predict_length: bool,
    /// The weight of the completion term in slaq's bids (`schedule::finish`, issue #41): 0 is
    /// the quality gain alone; larger values value finishing more.
    pub completion_weight: f64,
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
            min_workers_per_job: 0,
            plan: PlanSettings::default(),
            predict_length: false,
            completion_weight: schedule::DEFAULT_COMPLETION_WEIGHT,
            predictor: PredictorConfig::default(),
            max_time_s: 1e7,
        }
    }
}

/// The default cluster: 64 workers. With the default workload about 50 jobs are active at a
/// time and each could use up to 33 workers before the speed-up model turns down, so the jobs
/// could use far more workers than exist for most of the run, as in SLAQ's evaluation. The
/// `contended_fraction` of a run's metrics measures this.
pub const DEFAULT_WORKERS: u32 = 64;

struct JobState<'a> {
    replay: ReplayJob<'a>,
    predictor: JobPredictor,
    attained_service: f64,
    ledger: FloorLedger,
    bid: Option<GainCurve>,
    /// `srpt-oracle`'s heSRPT weight this epoch (its rank by true remaining work).
    srpt_weight: f64,
    /// `srpt-oracle`'s view of the job's true speed-up: its upper concave hull over the
    /// cluster's counts (a measured curve's dips would stop its greedy short).
    speed_hull: Vec<f64>,
    /// `tiresias`'s demand: the equal share of the cluster when the job arrived.
    demand: u32,
    /// `themis`: when the job's lease on its workers ends.
    lease_until: f64,
}

/// Runs one workload under one policy. Deterministic: same inputs, same result.
pub fn run(jobs: &[SimJob], config: &SimConfig, policy: PolicySpec, on_progress: impl FnMut(usize)) -> RunMetrics {
    run_with(jobs, config, policy, None, on_progress)
}

/// [`run`], with teams ([`crate::sim::teams`]) when `teams` is given: the planner runs inside
/// each tenant's quota, and every change of workers goes through `teams` (a shrink after the
/// tenant's grace, a restart on every change).
pub fn run_with(
    jobs: &[SimJob],
    config: &SimConfig,
    policy: PolicySpec,
    mut teams: Option<&mut Teams<'_>>,
    mut on_progress: impl FnMut(usize),
) -> RunMetrics {
    let mut states = new_states(jobs, config, policy);
    let mut arrivals: Vec<usize> = (0..jobs.len()).collect();
    arrivals.sort_by(|&a, &b| jobs[a].arrival_s.total_cmp(&jobs[b].arrival_s).then(a.cmp(&b)));
    let mut next_arrival = 0;
    let mut active: Vec<usize> = Vec::new();
    let mut now = 0.0f64;
    let mut next_epoch = 0.0f64;
    let mut metrics = Tracker::new(config.num_workers);
    let mut num_finished = 0;

    while num_finished < jobs.len() && now < config.max_time_s {
        // The next event: an arrival, an epoch tick, the earliest iteration completion, or a
        // teams' release or end of restart.
        let mut next_time = next_epoch.min(arrivals.get(next_arrival).map_or(f64::INFINITY, |&j| jobs[j].arrival_s));
        next_time = active.iter().filter_map(|&j| states[j].replay.completes_at(now)).fold(next_time, f64::min);
        next_time = next_time.min(teams.as_deref().and_then(Teams::next_event).unwrap_or(f64::INFINITY));
        let dt = (next_time - now).max(0.0);
        metrics.integrate(active.iter().map(|&j| states[j].replay.view()), dt);
        if let Some(teams) = teams.as_deref_mut() {
            teams.integrate(now, dt, active.iter().map(|&j| (j, &states[j].replay)));
        }
        for &j in &active {
            let s = &mut states[j];
            s.attained_service += dt * f64::from(s.replay.workers);
            s.replay.advance(dt);
        }
        now = next_time;
        if let Some(teams) = teams.as_deref_mut() {
            teams.on_time(now, &mut replays(&mut states));
            for &j in &active {
                states[j].replay.note_workers();
            }
        }

        for _ in 0..complete(&mut states, &mut active, now) {
            num_finished += 1;
            on_progress(num_finished);
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
            states[j].demand = (config.num_workers / active.len() as u32).max(1);
        }
        active.sort_unstable();

        if now >= next_epoch {
            reallocate(&mut states, &active, config, policy, now, teams.as_deref_mut());
            for &j in &active {
                states[j].replay.note_workers();
            }
            metrics.sample(now, active.iter().map(|&j| states[j].replay.view()));
            next_epoch = now + config.epoch_s;
        }
    }

    let outcomes = states
        .iter()
        .map(|s| crate::sim::curves::metrics::JobOutcome {
            fair_clock_s: s.ledger.pace().fair_finish_s(),
            ..s.replay.outcome()
        })
        .collect();
    metrics.finish(policy.name, outcomes, now)
}

/// Each job's state before it arrives: its replay, a fresh predictor for the policy's objective.
fn new_states<'a>(jobs: &'a [SimJob], config: &SimConfig, policy: PolicySpec) -> Vec<JobState<'a>> {
    let predictor_config = PredictorConfig { objective: policy.objective, ..config.predictor };
    jobs.iter()
        .map(|job| JobState {
            replay: ReplayJob::new(job, config.speedup.curve(job.application)),
            predictor: JobPredictor::new(predictor_config),
            attained_service: 0.0,
            ledger: FloorLedger::default(),
            bid: None,
            srpt_weight: 0.0,
            speed_hull: if policy.name == "srpt-oracle" {
                concave_hull(&config.speedup.curve(job.application), config.num_workers)
            } else {
                Vec::new()
            },
            demand: 1,
            lease_until: 0.0,
        })
        .collect()
}

/// Iterations done by `now` are observed; jobs that finish leave `active`. Returns how many did.
fn complete(states: &mut [JobState<'_>], active: &mut Vec<usize>, now: f64) -> usize {
    let (mut k, mut finished) = (0, 0);
    while k < active.len() {
        let s = &mut states[active[k]];
        if let Some(done) = s.replay.complete(now) {
            // The simulator only feeds valid points, so a refusal here is a bug.
            let observed = s.predictor.observe(done.iter, done.loss);
            debug_assert!(observed.is_ok());
            s.predictor.observe_time(done.workers, done.seconds);
            if done.finished {
                finished += 1;
                active.swap_remove(k);
                continue;
            }
        }
        k += 1;
    }
    finished
}

fn replays<'s, 'a>(states: &'s mut [JobState<'a>]) -> Vec<&'s mut ReplayJob<'a>> {
    states.iter_mut().map(|s| &mut s.replay).collect()
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
#[derive(Clone, Debug)]
enum SimGain<'a> {
    Predicted(&'a GainCurve),
    /// With teams, where every change restarts the job: priced as the live scheduler prices a
    /// submitted job's ([`schedule::restart_priced`]).
    Priced(schedule::GainTable),
    Oracle {
        replay: &'a ReplayJob<'a>,
        horizon_s: f64,
    },
    Srpt {
        hull: &'a [f64],
        weight: f64,
    },
    /// A peer's table (`policy::peers`).
    Peer(Gains),
}

impl GainFn for SimGain<'_> {
    fn gain(&self, workers: u32) -> f64 {
        match self {
            SimGain::Predicted(g) => g.gain(workers),
            SimGain::Priced(t) => t.gain(workers),
            SimGain::Oracle { replay, horizon_s } => oracle_gain(replay, *horizon_s, workers),
            SimGain::Peer(t) => t.gain(workers),
            SimGain::Srpt { hull, weight } => weight * hull[(workers as usize).min(hull.len() - 1)],
        }
    }
}

/// The oracle's gain: slaq's objective computed on the truth. The reduction of the job's true
/// normalised loss (best so far, clamped, as the metric counts it) averaged over the horizon,
/// walking its true future curve at the speed its true speed-up gives `workers`. It looks to the
/// job's end if the horizon does (a plateau followed by a drop is valued for the drop).
pub fn oracle_gain(replay: &ReplayJob<'_>, horizon_s: f64, workers: u32) -> f64 {
    if workers == 0 {
        return 0.0;
    }
    let job = replay.job;
    let factor = replay.speedup.factor(workers);
    let (mut clock, mut area, mut quality) = (0.0, 0.0, replay.norm_loss);
    for i in replay.next..job.loss.len() {
        let fraction = if i == replay.next { 1.0 - replay.progress } else { 1.0 };
        clock += job.one_worker_seconds[i] * factor * fraction;
        if clock >= horizon_s {
            break;
        }
        // Each drop counts from the moment it happens to the horizon.
        let now = quality.min(job.quality(job.loss[i]));
        area += (quality - now) * (horizon_s - clock);
        quality = now;
    }
    area / horizon_s
}

/// A job's true remaining work in one-worker seconds (what `srpt-oracle` ranks by).
pub fn true_remaining_s(replay: &ReplayJob<'_>) -> f64 {
    let job = replay.job;
    let mut left: f64 = job.one_worker_seconds[replay.next.min(job.loss.len())..].iter().sum();
    if replay.next < job.loss.len() {
        left -= job.one_worker_seconds[replay.next] * replay.progress;
    }
    left.max(0.0)
}

/// A job's speed with `workers` workers relative to one (0 with none).
fn speed_of(curve: &super::speedup::SpeedupCurve, workers: u32) -> f64 {
    if workers == 0 { 0.0 } else { 1.0 / curve.factor(workers) }
}

/// The upper concave hull of `0, speed(1), …, speed(n)` (`schedule::concave_hull`).
fn concave_hull(curve: &super::speedup::SpeedupCurve, n: u32) -> Vec<f64> {
    let points: Vec<f64> = (0..=n.max(1)).map(|k| speed_of(curve, k)).collect();
    schedule::concave_hull(&points)
}

/// `srpt-oracle`'s weights: heSRPT's (Berg et al., SIGMETRICS 2020) for the active jobs ranked
/// by true remaining work, the exponent `p` fitted on their true speed-ups up to twice the
/// equal share (`schedule::speedup_exponent`).
fn srpt_weights(states: &mut [JobState<'_>], active: &[usize], num_workers: u32) {
    let m = active.len();
    if m == 0 {
        return;
    }
    let up_to = (2 * num_workers / m as u32).max(2);
    let exponent = active
        .iter()
        .map(|&j| {
            let c = &states[j].replay.speedup;
            schedule::speedup_exponent(|k| speed_of(c, k), up_to.min(c.most_useful_workers()))
        })
        .sum::<f64>()
        / m as f64;
    let remaining: Vec<f64> = active.iter().map(|&j| true_remaining_s(&states[j].replay)).collect();
    let weights = schedule::hesrpt_weights(&remaining, exponent);
    for (&j, w) in active.iter().zip(weights) {
        states[j].srpt_weight = w;
    }
}

/// A job's gain this epoch: the oracle's truth, or its predictor's bid (priced for a restart
/// when every change restarts it, `restart_s > 0`).
fn sim_gain<'s>(
    s: &'s JobState<'_>,
    policy: PolicySpec,
    horizon_s: f64,
    restart_s: f64,
    table: u32,
) -> Option<SimGain<'s>> {
    match policy.name {
        "oracle" => return Some(SimGain::Oracle { replay: &s.replay, horizon_s }),
        "srpt-oracle" => return Some(SimGain::Srpt { hull: &s.speed_hull, weight: s.srpt_weight }),
        _ => {}
    }
    let g = s.bid.as_ref()?;
    Some(if restart_s > 0.0 {
        SimGain::Priced(schedule::restart_priced(g, s.replay.workers, restart_s, horizon_s, table, table as usize + 1))
    } else {
        SimGain::Predicted(g)
    })
}

/// The finish-time bound's view of a job: its progress and what it has left (its declared
/// length, or predicted), at the rates of its time model.
fn pace_of<'s>(s: &JobState<'_>, rates: &'s [f64], config: &SimConfig, now: f64) -> schedule::Pace<'s> {
    let r = &s.replay;
    let done = (r.next - r.job.offset) as f64 + r.progress;
    let remaining = remaining_of(s, config, rates.get(1).copied().unwrap_or(0.0) * config.epoch_s);
    schedule::Pace {
        age_s: now - r.job.arrival_s,
        done,
        remaining,
        rates: schedule::slowdown::Rates::new(rates),
        wait_s: config.epoch_s,
    }
}

/// The iterations a job has left as the scheduler sees them: its declared length (the curve's
/// iterations, as a `max_iter`), or predicted (`one_epoch`: an epoch's iterations on one
/// worker, the least predicted).
fn remaining_of(s: &JobState<'_>, config: &SimConfig, one_epoch: f64) -> f64 {
    let r = &s.replay;
    if config.predict_length {
        let done = (r.next - r.job.offset) as f64 + r.progress;
        schedule::predicted_remaining(s.bid.as_ref(), done, one_epoch)
    } else {
        (r.job.loss.len() - r.next) as f64 - r.progress
    }
}

/// `tiresias`'s queue limits in attained worker-seconds (two queues, as Tiresias's evaluation
/// runs): set once, before any run, at ten worker-minutes.
const TIRESIAS_QUEUE_LIMITS: [f64; 1] = [600.0];

/// `themis`'s lease: workers it grants are held this long (Themis leases for minutes on jobs of
/// hours; the curve workloads' jobs run minutes). Set once, before any run.
const THEMIS_LEASE_S: f64 = 30.0;

/// A peer's bid for each active job: its gain table and its bounds (none for slaq's own
/// policies). Themis's jobs holding a lease keep their workers: a bidder may get more, the
/// others exactly what they hold.
fn peer_tables(
    states: &[JobState<'_>],
    active: &[usize],
    config: &SimConfig,
    policy: PolicySpec,
    now: f64,
) -> Vec<(Gains, u32, u32)> {
    if !policy.is_peer() || active.is_empty() {
        return Vec::new();
    }
    let n = config.num_workers.min(config.max_workers_per_job);
    let share = (config.num_workers / active.len() as u32).max(1);
    let seconds: Vec<Vec<f64>> = active
        .iter()
        .map(|&j| {
            let time = states[j].predictor.time_curve();
            (0..=n).map(|w| if w == 0 { 0.0 } else { time.seconds(w) }).collect()
        })
        .collect();
    let views: Vec<peers::PeerJob<'_>> = active
        .iter()
        .zip(&seconds)
        .map(|(&j, seconds)| {
            let s = &states[j];
            let r = &s.replay;
            peers::PeerJob {
                seconds,
                remaining_iters: remaining_of(s, config, config.epoch_s / seconds[1]),
                done_iters: (r.next - r.job.offset) as f64 + r.progress,
                age_s: now - r.job.arrival_s,
                attained_service: s.attained_service,
            }
        })
        .collect();
    let free = |g: Gains| (g, config.min_workers_per_job, config.max_workers_per_job);
    match policy.name {
        "optimus" => views.iter().map(|v| free(peers::optimus(v))).collect(),
        "pollux" => views.iter().map(|v| free(peers::pollux(v, share))).collect(),
        "tiresias" => {
            let attained: Vec<f64> = views.iter().map(|v| v.attained_service).collect();
            let arrivals: Vec<f64> = active.iter().map(|&j| states[j].replay.job.arrival_s).collect();
            let priority = peers::tiresias_priorities(&attained, &arrivals, &TIRESIAS_QUEUE_LIMITS);
            active
                .iter()
                .enumerate()
                .map(|(i, &j)| free(peers::tiresias(&views[i], states[j].demand, priority[i])))
                .collect()
        }
        _ => {
            let d = if policy.name == "themis" { 0.2 } else { 1.0 };
            let rho: Vec<f64> = active
                .iter()
                .zip(&views)
                .map(|(&j, v)| peers::themis_rho(v, states[j].replay.workers as usize, share))
                .collect();
            let bidders = peers::themis_bidders(&rho, d);
            active
                .iter()
                .zip(&views)
                .zip(bidders)
                .map(|((&j, v), bidder)| {
                    let s = &states[j];
                    let held = if s.lease_until > now { s.replay.workers } else { 0 };
                    let max = if bidder || held == 0 { config.max_workers_per_job } else { held };
                    (peers::themis(v, share, bidder), held.max(config.min_workers_per_job), max)
                })
                .collect()
        }
    }
}

/// A job's completion term (`schedule::finish`): slaq's bids only, with a weight.
fn finish_of(s: &JobState<'_>, config: &SimConfig, policy: PolicySpec) -> Option<schedule::Finish> {
    if config.completion_weight <= 0.0 || policy.is_oracle() || policy.kind != PolicyKind::Slaq {
        return None;
    }
    let time = s.predictor.time_curve();
    let one_epoch = config.epoch_s / time.seconds(1);
    let remaining_iters = remaining_of(s, config, one_epoch);
    let horizon_s = config.gain_horizon_s;
    Some(schedule::Finish { time, remaining_iters, horizon_s, weight: config.completion_weight })
}

fn reallocate(
    states: &mut [JobState<'_>],
    active: &[usize],
    config: &SimConfig,
    policy: PolicySpec,
    now: f64,
    mut teams: Option<&mut Teams<'_>>,
) {
    let needs_gains = policy.kind == PolicyKind::Slaq;
    if policy.name == "srpt-oracle" {
        srpt_weights(states, active, config.num_workers);
    }
    let plan = policy.plan(config.plan);
    // The finish-time bound's view of each job: its declared length (the curve's iterations, as
    // a `max_iter`) and its predicted iteration time at each count, never the true speed-up.
    let bounded = needs_gains && plan.slowdown_bound().is_finite();
    let horizon_s = schedule::bid_horizon(policy.objective, config.gain_horizon_s, config.epoch_s);
    refresh_bids(states, active, config, !policy.is_oracle() && needs_gains, bounded);
    let mut ledgers: Vec<FloorLedger> = active.iter().map(|&j| std::mem::take(&mut states[j].ledger)).collect();
    let model = JobModel::unknown();
    let table = config.num_workers.min(config.max_workers_per_job);
    let rates: Vec<Vec<f64>> = active
        .iter()
        .filter(|_| bounded)
        .map(|&j| schedule::slowdown::rate_table(&states[j].predictor.time_curve(), table))
        .collect();
    // With teams every change restarts a job: its gains are priced for it (`sim_gain`).
    let restart_s = teams.as_deref().map_or(0.0, |t| t.restart_s);
    let mut peer_gains = peer_tables(states, active, config, policy, now);
    let view = teams.as_deref_mut().map(|t| TeamView::new(t, states, active, now)).unwrap_or_default();
    let finishes = finishes(states, active, config, policy, needs_gains);
    let mut epoch_jobs: Vec<EpochJob<'_, schedule::Finishing<'_, SimGain<'_>>>> = Vec::with_capacity(active.len());
    for (i, &j) in active.iter().enumerate() {
        let s = &states[j];
        let cost_s = teams.as_deref().map_or(0.0, |t| t.stop_cost_s(j, now));
        let peer = peer_gains.get_mut(i).map(|(t, _, _)| std::mem::take(t));
        let finish = finishes.get(i).and_then(Option::as_ref);
        let gain = needs_gains.then(|| job_gain(s, peer, policy, (horizon_s, cost_s, table), finish)).flatten();
        let (mut min_workers, mut max_workers) = peer_gains
            .get(i)
            .map_or((config.min_workers_per_job, config.max_workers_per_job), |&(_, min, max)| (min, max));
        let waits = view.saving_jobs.get(i).copied().unwrap_or(false);
        if waits {
            (min_workers, max_workers) = (s.replay.workers, s.replay.workers);
        }
        let bid = JobBid { min_workers, max_workers, attained_service: s.attained_service, gain, weight: 1.0 };
        // They declare no batch and name no machine: the plan is their counts (no worker tracked).
        let pace = rates.get(i).map(|rates| pace_of(s, rates, config, now));
        epoch_jobs.push(EpochJob { bid, own_minimum: !waits, sizes: None, model: &model, pace });
    }
    let current = current_workers(states, active, config.num_workers);
    let input = EpochInput {
        policy: policy.kind,
        plan,
        place: PlaceSettings { placer: Placer::Greedy, restart_s, horizon_s: config.gain_horizon_s },
        jobs: &epoch_jobs,
        machine_of: None,
        current: &current,
        held: None,
        seed: 0,
        types: None,
        tenants: teams.as_deref().map(|t| Tenancy {
            shares: t.shares,
            tenant_of: &view.tenant_of,
            held: &view.saving,
            class_of: &view.class_of,
        }),
        special: None,
    };
    let planned = schedule::plan_epoch(&input, &mut ledgers);
    debug_assert!(planned.counts.iter().sum::<u32>() <= config.num_workers);
    drop(epoch_jobs);
    for (&j, ledger) in active.iter().zip(ledgers) {
        states[j].ledger = ledger;
    }
    if policy.name.starts_with("themis") {
        leases(states, active, &planned.counts, now);
    }
    apply(states, active, &planned, now, teams);
}

/// Each active job's completion term (`finish_of`), which its gain borrows; none without gains.
fn finishes(
    states: &[JobState<'_>],
    active: &[usize],
    config: &SimConfig,
    policy: PolicySpec,
    needs_gains: bool,
) -> Vec<Option<schedule::Finish>> {
    let of = |&j: &usize| finish_of(&states[j], config, policy);
    if needs_gains { active.iter().map(of).collect() } else { Vec::new() }
}

/// A job's gains as it bids them: a peer's table, or its own curve priced for a stop of
/// `cost_s` (`horizon_s`, `table`), with its completion term (`finish_of`).
fn job_gain<'s>(
    s: &'s JobState<'_>,
    peer: Option<Gains>,
    policy: PolicySpec,
    (horizon_s, cost_s, table): (f64, f64, u32),
    finish: Option<&'s schedule::Finish>,
) -> Option<schedule::Finishing<'s, SimGain<'s>>> {
    let gain = match peer {
        Some(t) => Some(SimGain::Peer(t)),
        None => sim_gain(s, policy, horizon_s, cost_s, table),
    };
    gain.map(|gain| schedule::Finishing::new(gain, finish))
}

/// Themis: a job whose count changed holds it for a lease.
fn leases(states: &mut [JobState<'_>], active: &[usize], counts: &[u32], now: f64) {
    for (&j, &w) in active.iter().zip(counts) {
        if w != states[j].replay.workers {
            states[j].lease_until = now + THEMIS_LEASE_S;
        }
    }
}

/// What a teams' run adds to an epoch's input, per active job: its tenant and class, whether
/// it waits for its save (then it keeps what it holds), and per tenant the workers those hold
/// (its quota keeps them).
#[derive(Default)]
struct TeamView {
    tenant_of: Vec<usize>,
    class_of: Vec<u8>,
    saving_jobs: Vec<bool>,
    saving: Vec<u32>,
}

impl TeamView {
    fn new(teams: &mut Teams<'_>, states: &[JobState<'_>], active: &[usize], now: f64) -> Self {
        let tenant_of: Vec<usize> = active.iter().map(|&j| teams.tenant_of[j]).collect();
        let class_of: Vec<u8> =
            if teams.class_of.is_empty() { Vec::new() } else { active.iter().map(|&j| teams.class_of[j]).collect() };
        let saving_jobs = teams.waiting_for_saves(now, active, &states.iter().map(|s| &s.replay).collect::<Vec<_>>());
        let mut saving = vec![0u32; teams.shares.len()];
        for ((&j, &t), _) in active.iter().zip(&tenant_of).zip(&saving_jobs).filter(|(_, w)| **w) {
            saving[t] += states[j].replay.workers;
        }
        TeamView { tenant_of, class_of, saving_jobs, saving }
    }
}

/// Each active job's bid made from its predictor (`predicted`: slaq's bids), or, for the
/// oracle under the finish-time bound (`bounded`), its time model refitted: the oracle bids with
/// the truth, but its bound is priced with the time models.
fn refresh_bids(states: &mut [JobState<'_>], active: &[usize], config: &SimConfig, predicted: bool, bounded: bool) {
    if predicted {
        for &j in active {
            let s = &mut states[j];
            s.bid = schedule::make_bid(&mut s.predictor, config.gain_horizon_s, config.epoch_s, s.replay.workers);
        }
    } else if bounded {
        for &j in active {
            states[j].predictor.refit();
        }
    }
}

/// The workers: each active job holds its count of them, in job order, the rest are free.
fn current_workers(states: &[JobState<'_>], active: &[usize], num_workers: u32) -> Vec<Option<usize>> {
    let mut current: Vec<Option<usize>> = Vec::with_capacity(num_workers as usize);
    current.extend(
        active.iter().enumerate().flat_map(|(i, &j)| std::iter::repeat_n(Some(i), states[j].replay.workers as usize)),
    );
    current.resize(num_workers as usize, None);
    current
}

/// A plan's counts take effect: at once, or through the teams' moves.
fn apply(states: &mut [JobState<'_>], active: &[usize], plan: &EpochPlan, now: f64, teams: Option<&mut Teams<'_>>) {
    match teams {
        Some(teams) => teams.apply(now, active, &plan.counts, plan.quotas.as_ref(), &mut replays(states)),
        None => {
            for (&j, &w) in active.iter().zip(&plan.counts) {
                states[j].replay.workers = w;
            }
        }
    }
}
