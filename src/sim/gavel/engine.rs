//! The round-based engine: every `round_s` seconds the policy decides each active job's worker
//! type and count; jobs run at Gavel's measured throughput for that type and count, after a
//! restart whenever their type or count changed (the same cost for every policy).
//!
//! - `fair`, `gavel`: time fractions ([`crate::policy::gavel`]) recomputed whenever the set of
//!   jobs changes, turned into rounds by Gavel's priorities; a job runs on its scale factor.
//! - `slaq`, `slaq-blind`: each job's loss predictor ([`crate::quality::JobPredictor`], fed the
//!   job's reports) bids its gain for every type and allowed size (1/2/4/8 where the table
//!   measures it), the restart priced in, plus the default bid's completion term (the share of
//!   its declared steps the horizon gets done, [`crate::schedule::share_done`]); the
//!   finish-time bound grants the due jobs first ([`crate::schedule::typed::due_grants`]), then
//!   the exact count step with the work each option does first
//!   ([`crate::schedule::typed::allocate_sized`], the work from [`work_of`]), then the gains.
//!   `slaq` prices each type at the job's measured
//!   throughput there (given up front, as the issue allows); `slaq-blind` assumes every type
//!   runs the job as fast as the type it last ran on (before it ran: its equal-share speed).

use crate::policy::gavel::{Fractions, Rounds, TimeJob, fair_fractions, max_min_fractions};
use crate::quality::{JobPredictor, PredictorConfig};
use crate::schedule::share_done;
use crate::schedule::typed::{DueJob, TypeGains, TypedJob, Work, allocate_sized, due_grants};

use super::table::{Cluster, SCALE_FACTORS, Throughputs};
use super::workload::GavelJob;

/// The policies compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GavelPolicy {
    Fair,
    Gavel,
    SlaqBlind,
    Slaq,
}

impl GavelPolicy {
    pub const NAMES: [&'static str; 4] = ["fair", "gavel", "slaq-blind", "slaq"];

    pub fn named(name: &str) -> Option<Self> {
        match name {
            "fair" => Some(GavelPolicy::Fair),
            "gavel" => Some(GavelPolicy::Gavel),
            "slaq-blind" => Some(GavelPolicy::SlaqBlind),
            "slaq" => Some(GavelPolicy::Slaq),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// How a run is played. The defaults were chosen before any result was seen: Gavel's round,
/// a 30 s restart (checkpoint and reload) for every policy, an hour's horizon (ten rounds) over
/// which slaq's gains must pay for a restart, and the bound at K = 2 (the target is 3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GavelConfig {
    pub round_s: f64,
    pub restart_s: f64,
    pub horizon_s: f64,
    /// The finish-time bound K for slaq (0: off).
    pub max_slowdown: f64,
    /// The jobs measured: `measure.0..measure.1` of the trace.
    pub measure: (usize, usize),
    /// The run stops when every measured job is done or, at the latest, this long after the
    /// trace's last arrival (0: at it, so that every measured job ran under the trace's load;
    /// measured jobs not done then are `unfinished`).
    pub cutoff_s: f64,
    /// Rounds between refits of a job's predictor.
    pub refit_rounds: u32,
    /// The weight of slaq's completion term: the shipped default bid's
    /// ([`crate::schedule::DEFAULT_COMPLETION_WEIGHT`]), on the steps Gavel's jobs declare.
    pub completion_weight: f64,
    pub predictor: PredictorConfig,
}

impl Default for GavelConfig {
    fn default() -> Self {
        GavelConfig {
            round_s: 360.0,
            restart_s: 30.0,
            horizon_s: 3600.0,
            max_slowdown: 2.0,
            measure: (0, usize::MAX),
            cutoff_s: 0.0,
            refit_rounds: 5,
            completion_weight: crate::schedule::DEFAULT_COMPLETION_WEIGHT,
            predictor: PredictorConfig::default(),
        }
    }
}

/// What happened to one job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobResult {
    pub arrival_s: f64,
    pub finished_s: Option<f64>,
    /// ∫ normalised loss dt from arrival to completion (or to the end of the run).
    pub loss_area: f64,
    /// Times its type or count changed while it had workers, or it started again.
    pub restarts: u32,
}

impl JobResult {
    pub fn jct(&self) -> Option<f64> {
        self.finished_s.map(|f| f - self.arrival_s)
    }
}

/// One policy's run.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyRun {
    pub policy: GavelPolicy,
    pub jobs: Vec<JobResult>,
    /// Worker-seconds busy per cluster type, and the run's length.
    pub busy_s: Vec<f64>,
    pub end_s: f64,
    /// Work left when the run stopped, over every job of the trace, in seconds of one V100
    /// (each job's remaining fraction of its steps times its duration on its V100s).
    pub backlog_s: f64,
}

struct JobState<'a> {
    job: &'a GavelJob,
    /// Prefix minimum of its losses (the metrics' best loss so far).
    best: Vec<f64>,
    done: f64,
    alloc: Option<(usize, u32)>,
    last_type: Option<usize>,
    finished: Option<f64>,
    area: f64,
    restarts: u32,
    predictor: Option<JobPredictor>,
    reported: usize,
    refit_at: u32,
    fair_done: f64,
    fair_finish: Option<f64>,
    /// Worker-seconds received.
    attained: f64,
}

impl<'a> JobState<'a> {
    fn new(job: &'a GavelJob) -> Self {
        let mut best = job.loss.clone();
        for i in 1..best.len() {
            best[i] = best[i].min(best[i - 1]);
        }
        JobState {
            job,
            best,
            done: 0.0,
            alloc: None,
            last_type: None,
            finished: None,
            area: 0.0,
            restarts: 0,
            predictor: None,
            reported: 0,
            refit_at: 0,
            fair_done: 0.0,
            fair_finish: None,
            attained: 0.0,
        }
    }

    /// One round from `from` on `alloc` at `rate` steps/s (after a restart if `alloc` is new);
    /// returns the seconds it held its workers.
    fn play_round(&mut self, alloc: Option<(usize, u32)>, rate: f64, from: f64, config: &GavelConfig) -> f64 {
        let restart = alloc.is_some() && alloc != self.alloc;
        self.restarts += u32::from(restart);
        self.alloc = alloc;
        if let Some((t, _)) = alloc {
            self.last_type = Some(t);
        }
        let to = from + config.round_s;
        let start = if restart { from + config.restart_s } else { from };
        self.advance(from, start.min(to), 0.0);
        let held_until = if self.advance(start.min(to), to, rate) { self.finished.unwrap_or(to) } else { to };
        let held_s = if alloc.is_some() { held_until - from } else { 0.0 };
        self.attained += f64::from(alloc.map_or(0, |a| a.1)) * held_s;
        if self.finished.is_some() {
            self.alloc = None;
        }
        feed_reports(self, rate, alloc.map_or(0, |a| a.1));
        held_s
    }

    /// The fair clock over one round at the agnostic policy's `rate`.
    fn book_fair_clock(&mut self, rate: f64, now: f64, round_s: f64) {
        if self.fair_finish.is_none() {
            let left = self.job.steps - self.fair_done;
            if rate * round_s >= left && rate > 0.0 {
                self.fair_finish = Some(now + left / rate);
            }
            self.fair_done += rate * round_s;
        }
    }

    fn quality(&self, steps: f64) -> f64 {
        let i = ((steps / self.job.steps_per_report()).floor() as usize).min(self.best.len() - 1);
        let (first, last) = (self.job.loss[0], self.job.loss[self.job.loss.len() - 1]);
        let range = first - last;
        if range.abs() < 1e-300 { 0.0 } else { ((self.best[i] - last) / range).clamp(0.0, 1.0) }
    }

    /// Runs `[from, to)` at `rate` steps/s (0: waiting), books the area; returns whether it
    /// finished.
    fn advance(&mut self, from: f64, to: f64, rate: f64) -> bool {
        const PIECES: usize = 6;
        if to <= from {
            return false;
        }
        if rate <= 0.0 {
            self.area += (to - from) * self.quality(self.done);
            return false;
        }
        let left = self.job.steps - self.done;
        let end = to.min(from + left / rate);
        let dt = (end - from) / PIECES as f64;
        for p in 0..PIECES {
            self.area += dt * self.quality(self.done + rate * dt * (p as f64 + 0.5));
        }
        self.done += rate * (end - from);
        if end < to || self.done >= self.job.steps * (1.0 - 1e-12) {
            self.done = self.job.steps;
            self.finished = Some(end);
            return true;
        }
        false
    }
}

/// Plays `trace` under `policy`; see the module documentation.
pub fn run(
    table: &Throughputs,
    cluster: &Cluster,
    trace: &[GavelJob],
    policy: GavelPolicy,
    config: &GavelConfig,
) -> PolicyRun {
    let types = cluster.types.len();
    let (lo, hi) = (config.measure.0.min(trace.len()), config.measure.1.min(trace.len()));
    let cutoff = trace.last().map_or(0.0, |j| j.arrival_s) + config.cutoff_s;
    let mut jobs: Vec<JobState> = trace.iter().map(JobState::new).collect();
    let equal: Vec<f64> = trace.iter().map(|j| cluster.equal_share_rate(table, j.job_type, j.scale_factor)).collect();
    let mut busy_s = vec![0.0; types];
    let mut rounds = Rounds::default();
    let mut fractions: Fractions = Vec::new();
    let mut fraction_set: Vec<usize> = Vec::new();
    let mut now = 0.0;
    let mut round = 0u32;
    loop {
        let measured_done = jobs[lo..hi].iter().all(|j| j.finished.is_some());
        if measured_done || now >= cutoff {
            break;
        }
        let active: Vec<usize> =
            (0..jobs.len()).filter(|&j| trace[j].arrival_s <= now && jobs[j].finished.is_none()).collect();
        // The fair clock: what the agnostic policy would give each active job this round.
        let fair_rates = fair_clock_rates(&active, trace, cluster, table);
        let next: Vec<Option<(usize, u32)>> = match policy {
            GavelPolicy::Fair | GavelPolicy::Gavel => {
                if fraction_set != active {
                    let time_jobs = time_jobs(&active, trace, cluster, table);
                    fractions = if policy == GavelPolicy::Fair {
                        fair_fractions(&time_jobs, &cluster.counts)
                    } else {
                        max_min_fractions(&time_jobs, &cluster.counts)
                    };
                    fraction_set = active.clone();
                }
                time_shared(&mut rounds, &fractions, &active, &jobs, trace, cluster, table)
            }
            GavelPolicy::Slaq | GavelPolicy::SlaqBlind => {
                let blind = policy == GavelPolicy::SlaqBlind;
                let plan = Plan { table, cluster, config, equal: &equal, blind, now, round };
                plan.decide(&active, &mut jobs, &fair_rates)
            }
        };
        for (&j, alloc) in active.iter().zip(next) {
            let rate = alloc.map_or(0.0, |(t, k)| cluster.rate(table, t, trace[j].job_type, k));
            let held_s = jobs[j].play_round(alloc, rate, now, config);
            if let Some((t, k)) = alloc {
                busy_s[t] += f64::from(k) * held_s;
            }
        }
        for (&j, &rate) in active.iter().zip(&fair_rates) {
            jobs[j].book_fair_clock(rate, now, config.round_s);
        }
        // Jobs that arrive during the round wait for the next: their loss counts meanwhile.
        let to = now + config.round_s;
        for (j, state) in jobs.iter_mut().enumerate() {
            let a = trace[j].arrival_s;
            if a > now && a <= to {
                state.advance(a, to, 0.0);
            }
        }
        now = to;
        round += 1;
    }
    finish(policy, &jobs, busy_s, now)
}

/// The run's record when it stops at `now`.
fn finish(policy: GavelPolicy, jobs: &[JobState<'_>], busy_s: Vec<f64>, now: f64) -> PolicyRun {
    let results = jobs
        .iter()
        .map(|s| JobResult {
            arrival_s: s.job.arrival_s,
            finished_s: s.finished,
            loss_area: s.area,
            restarts: s.restarts,
        })
        .collect();
    let backlog_s = jobs
        .iter()
        .filter(|s| s.job.arrival_s <= now && s.finished.is_none())
        .map(|s| (1.0 - s.done / s.job.steps) * s.job.duration_s * f64::from(s.job.scale_factor))
        .sum();
    PolicyRun { policy, jobs: results, busy_s, end_s: now, backlog_s }
}

/// The agnostic fair policy's rate for each active job (steps/s): its fair fraction times its
/// equal-share throughput.
fn fair_clock_rates(active: &[usize], trace: &[GavelJob], cluster: &Cluster, table: &Throughputs) -> Vec<f64> {
    let jobs = time_jobs(active, trace, cluster, table);
    let x = fair_fractions(&jobs, &cluster.counts);
    x.iter().zip(&jobs).map(|(row, tj)| row.iter().zip(&tj.rates).map(|(x, r)| x * r).sum()).collect()
}

fn time_jobs(active: &[usize], trace: &[GavelJob], cluster: &Cluster, table: &Throughputs) -> Vec<TimeJob> {
    active
        .iter()
        .map(|&j| {
            let job = &trace[j];
            let rates =
                (0..cluster.types.len()).map(|t| cluster.rate(table, t, job.job_type, job.scale_factor)).collect();
            TimeJob { rates, scale_factor: job.scale_factor, weight: 1.0 }
        })
        .collect()
}

fn time_shared(
    rounds: &mut Rounds,
    fractions: &Fractions,
    active: &[usize],
    jobs: &[JobState],
    trace: &[GavelJob],
    cluster: &Cluster,
    table: &Throughputs,
) -> Vec<Option<(usize, u32)>> {
    // Rounds are kept per job of the trace; the fractions are over the active jobs.
    let all = time_jobs(&(0..trace.len()).collect::<Vec<_>>(), trace, cluster, table);
    let mut full: Fractions = vec![vec![0.0; cluster.types.len()]; trace.len()];
    let mut is_active = vec![false; trace.len()];
    for (row, &j) in fractions.iter().zip(active) {
        full[j].clone_from(row);
        is_active[j] = true;
    }
    let current: Vec<Option<usize>> = jobs.iter().map(|s| s.alloc.map(|a| a.0)).collect();
    let types = rounds.assign(&full, &all, &cluster.counts, &is_active, &current);
    active.iter().map(|&j| types[j].map(|t| (t, trace[j].scale_factor))).collect()
}

/// After a round: the reports the job made (one per `REPORT_S` of V100 time), the last of them
/// given to its predictor, with the seconds a report took at its current speed.
fn feed_reports(state: &mut JobState, rate: f64, workers: u32) {
    let Some(p) = state.predictor.as_mut() else { return };
    let spr = state.job.steps_per_report();
    let i = ((state.done / spr).floor() as usize).min(state.job.loss.len() - 1);
    if i > state.reported {
        state.reported = i;
        // Report i is iteration i + 1 (the first, the loss at the start, is iteration 1).
        if p.observe(i as u64 + 1, state.job.loss[i]).is_ok() && rate > 0.0 && workers > 0 {
            p.observe_time(workers, spr / rate);
        }
    }
}

/// The work of each of a job's options (`schedule::typed::allocate_sized`): its throughput
/// there against what it does at its own `size` on its fastest type, in GPUs of that size (so a
/// job at its own size on its fastest type does `size`); `rates[t]`: (size, steps/s) as the
/// policy believes. The LP thus maximises the work the cluster does, each job's counted in its
/// own units, and only then the quality gain. A job grows past its size only where that does
/// more work than the GPUs would do for a waiting job (speed-ups are sublinear, so a job
/// waiting at its own size usually wins them), and a job may run on a slow type at a larger
/// size when that does more.
fn work_of(size: u32, rates: &[Vec<(u32, f64)>]) -> Work {
    let size = size.max(1);
    // Its throughput at its own size on its fastest type (from its best per-GPU rate at a size
    // up to its own where its own size is not measured there).
    let own = rates
        .iter()
        .flat_map(|sizes| sizes.iter())
        .filter(|&&(k, _)| k <= size)
        .map(|&(k, r)| r * f64::from(size) / f64::from(k))
        .fold(0.0, f64::max);
    rates
        .iter()
        .map(|sizes| {
            (!sizes.is_empty())
                .then(|| sizes.iter().map(|&(_, r)| if own > 0.0 { f64::from(size) * r / own } else { 0.0 }).collect())
        })
        .collect()
}

struct Plan<'a> {
    table: &'a Throughputs,
    cluster: &'a Cluster,
    config: &'a GavelConfig,
    equal: &'a [f64],
    blind: bool,
    now: f64,
    round: u32,
}

impl Plan<'_> {
    /// Steps per second of job `j` on `k` workers of type `t`, as this policy believes.
    fn rate(&self, j: usize, state: &JobState, t: usize, k: u32) -> f64 {
        let job = state.job;
        let true_rate = self.cluster.rate(self.table, t, job.job_type, k);
        if !self.blind || true_rate <= 0.0 {
            return true_rate;
        }
        match state.last_type {
            Some(seen) => self.cluster.rate(self.table, seen, job.job_type, k).max(0.0),
            None => self.equal[j] * f64::from(k) / f64::from(job.scale_factor.max(1)),
        }
    }

    fn decide(&self, active: &[usize], jobs: &mut [JobState], fair_rates: &[f64]) -> Vec<Option<(usize, u32)>> {
        let types = self.cluster.types.len();
        let mut typed = Vec::with_capacity(active.len());
        let mut work = Vec::with_capacity(active.len());
        let mut due = Vec::with_capacity(active.len());
        for (&j, &fair_rate) in active.iter().zip(fair_rates) {
            let state = &mut jobs[j];
            let first = state.job.loss[0];
            let p = state.predictor.get_or_insert_with(|| {
                let mut p = JobPredictor::new(self.config.predictor);
                // The loss at its start is its first report.
                let _ = p.observe(1, first);
                p
            });
            if self.round >= state.refit_at {
                p.refit();
                state.refit_at = self.round + self.config.refit_rounds;
            }
            let current_k = state.alloc.map_or(0, |a| a.1);
            let curve = p.gain_curve(self.config.horizon_s, current_k.max(1));
            let state = &jobs[j];
            let spr = state.job.steps_per_report();
            let mut options = Vec::with_capacity(types);
            let mut rates = Vec::with_capacity(types);
            for t in 0..types {
                let sizes: Vec<(u32, f64)> = SCALE_FACTORS
                    .iter()
                    .map(|&k| (k, self.rate(j, state, t, k)))
                    .filter(|&(k, r)| r > 0.0 && k <= self.cluster.counts[t])
                    .collect();
                if sizes.is_empty() {
                    options.push(None);
                    rates.push(Vec::new());
                    continue;
                }
                let gains = sizes
                    .iter()
                    .map(|&(k, r)| {
                        let keep = state.alloc == Some((t, k));
                        let run =
                            if keep { self.config.horizon_s } else { self.config.horizon_s - self.config.restart_s };
                        let reports = r * run.max(0.0) / spr;
                        // No prediction: the fraction of the job the horizon runs.
                        let quality =
                            curve.as_ref().map_or(reports / state.job.loss.len() as f64, |c| c.gain_of(reports));
                        // The default bid's completion term, on the steps the job declares.
                        let left = state.job.steps - state.done;
                        quality + self.config.completion_weight * share_done(r * run.max(0.0), left)
                    })
                    .collect();
                options.push(Some(TypeGains { sizes: sizes.iter().map(|s| s.0).collect(), gains }));
                rates.push(sizes);
            }
            typed.push(TypedJob { options, grant: None, attained: state.attained });
            work.push(work_of(state.job.scale_factor, &rates));
            let deadline = self.deadline(state, fair_rate);
            due.push(DueJob {
                remaining: state.job.steps - state.done,
                time_left: deadline - self.now,
                options: rates,
                current: state.alloc,
                late_max: 2 * state.job.scale_factor,
            });
        }
        if self.config.max_slowdown > 0.0 {
            let grants = due_grants(&due, &self.cluster.counts, self.config.round_s, self.config.restart_s);
            for (t, g) in typed.iter_mut().zip(grants) {
                t.grant = g;
            }
        }
        allocate_sized(&typed, &self.cluster.counts, &work)
    }

    /// K times the job's fair finish, from its arrival (the fair clock's projection while it
    /// has not finished).
    fn deadline(&self, state: &JobState, fair_rate: f64) -> f64 {
        let arrival = state.job.arrival_s;
        let fair_finish = state.fair_finish.unwrap_or_else(|| {
            let left = (state.job.steps - state.fair_done).max(0.0);
            if fair_rate > 0.0 { self.now + left / fair_rate } else { f64::INFINITY }
        });
        arrival + self.config.max_slowdown * (fair_finish - arrival)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_options_work_is_its_throughput_against_its_own_size_on_its_fastest_type() {
        // A one-GPU job: 10 steps/s on one fast GPU, 18 on two; 2 and 3.8 on slow ones.
        let rates = [vec![(1, 10.0), (2, 18.0)], vec![(1, 2.0), (2, 3.8)], vec![]];
        let work = work_of(1, &rates);
        assert_eq!(work[0], Some(vec![1.0, 1.8]));
        assert_eq!(work[1], Some(vec![0.2, 0.38]));
        assert_eq!(work[2], None);
        // A four-GPU job the table measures only up to two GPUs on the slow type: its own size
        // is 40 steps/s on four fast ones, in GPUs of its size.
        let rates = [vec![(4, 40.0)], vec![(1, 2.0), (2, 3.8)]];
        let work = work_of(4, &rates);
        assert_eq!(work[0], Some(vec![4.0]));
        assert_eq!(work[1], Some(vec![0.2, 0.38]));
    }
}
