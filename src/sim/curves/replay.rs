//! One job replaying its recorded curve: the state both the simulator and `slaq emulate`
//! advance, so the two measure the very same thing.

use super::metrics::{ActiveJob, JobOutcome};
use super::speedup::SpeedupCurve;
use super::workload::SimJob;

/// A job's progress through its curve.
#[derive(Clone, Debug)]
pub struct ReplayJob<'a> {
    pub job: &'a SimJob,
    /// Its true speed-up curve (what its iterations really take).
    pub speedup: SpeedupCurve,
    /// Index of the next loss point this job produces.
    pub next: usize,
    /// Fraction of the current iteration done.
    pub progress: f64,
    pub workers: u32,
    pub active: bool,
    /// Restarting on its workers (holding them, making no progress): teams' runs only
    /// ([`crate::sim::teams`]), where every change of workers costs a restart.
    pub paused: bool,
    /// Best (lowest) loss so far, history included.
    pub best_loss: f64,
    /// The metrics' normalised loss: of the best loss so far, clamped to [0, 1].
    pub norm_loss: f64,
    pub initial_norm_loss: f64,
    /// ∫ norm_loss dt since arrival.
    pub loss_area: f64,
    most_useful: u32,
    reached_90: Option<f64>,
    reached_95: Option<f64>,
    finished: Option<f64>,
    /// Worker counts it has run at: the last seen, and how many times it was (re)launched at
    /// a new nonzero count after its first start ([`ReplayJob::note_workers`]).
    last_workers: u32,
    started: bool,
    restarts: u32,
}

/// An iteration that has just finished.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Completed {
    /// 1-based iteration number.
    pub iter: u64,
    pub loss: f64,
    /// How long it took with the job's workers.
    pub seconds: f64,
    pub workers: u32,
    /// The job has stopped with this iteration.
    pub finished: bool,
}

impl<'a> ReplayJob<'a> {
    pub fn new(job: &'a SimJob, speedup: SpeedupCurve) -> Self {
        let best_loss = job.loss[..job.offset].iter().copied().fold(job.loss_first, f64::min);
        let norm = job.quality(best_loss);
        ReplayJob {
            job,
            speedup: speedup.clone(),
            next: job.offset,
            progress: 0.0,
            workers: 0,
            active: false,
            paused: false,
            best_loss,
            norm_loss: norm,
            initial_norm_loss: norm,
            loss_area: 0.0,
            most_useful: speedup.most_useful_workers(),
            reached_90: None,
            reached_95: None,
            finished: None,
            last_workers: 0,
            started: false,
            restarts: 0,
        }
    }

    /// Notes its worker count after a decision: a change to a new nonzero count after it first
    /// started is a restart (an elastic job relaunches from its checkpoint on every change of
    /// workers; a stop to zero is counted when it resumes).
    pub fn note_workers(&mut self) {
        if self.workers != self.last_workers {
            if self.workers > 0 {
                self.restarts += u32::from(self.started);
                self.started = true;
            }
            self.last_workers = self.workers;
        }
    }

    /// Seconds the current iteration takes with the current workers.
    pub fn iteration_seconds(&self) -> f64 {
        self.job.one_worker_seconds[self.next] * self.speedup.factor(self.workers)
    }

    /// Whether it is running (active with workers, not restarting).
    pub fn running(&self) -> bool {
        self.active && self.workers > 0 && !self.paused
    }

    /// When its current iteration would finish, at the current speed.
    pub fn completes_at(&self, now: f64) -> Option<f64> {
        self.running().then(|| now + (1.0 - self.progress) * self.iteration_seconds())
    }

    /// `dt` seconds pass at the current speed; an active job accrues loss area, running or not.
    pub fn advance(&mut self, dt: f64) {
        if self.active {
            self.loss_area += self.norm_loss * dt;
        }
        if self.running() {
            self.progress += dt / self.iteration_seconds();
        }
    }

    /// The job arrives at `now`, bringing the history `loss[..offset]`.
    pub fn arrive(&mut self, now: f64) {
        self.active = true;
        self.note_thresholds(now);
    }

    fn note_thresholds(&mut self, now: f64) {
        if self.norm_loss <= 0.10 && self.reached_90.is_none() {
            self.reached_90 = Some(now);
        }
        if self.norm_loss <= 0.05 && self.reached_95.is_none() {
            self.reached_95 = Some(now);
        }
    }

    /// Finishes the current iteration if it is done by `now`.
    pub fn complete(&mut self, now: f64) -> Option<Completed> {
        if !(self.running() && self.progress >= 1.0 - 1e-9) {
            return None;
        }
        let seconds = self.iteration_seconds();
        let (iter, loss, workers) = (self.next as u64 + 1, self.job.loss[self.next], self.workers);
        self.next += 1;
        self.progress = 0.0;
        self.best_loss = self.best_loss.min(loss);
        self.norm_loss = self.job.quality(self.best_loss);
        self.note_thresholds(now);
        // With no convergence threshold (0) the curve is replayed to its end: a non-monotone
        // curve reaches its final level (normalised 0) before its last iteration.
        let converged = self.job.converged_norm_loss > 0.0 && self.norm_loss <= self.job.converged_norm_loss;
        let finished = self.next == self.job.loss.len() || converged;
        if finished {
            self.finished = Some(now);
            self.active = false;
            self.workers = 0;
        }
        Some(Completed { iter, loss, seconds, workers, finished })
    }

    /// What the metrics need of it now.
    pub fn view(&self) -> ActiveJob {
        ActiveJob {
            norm_loss: self.norm_loss,
            workers: self.workers,
            group: self.job.group,
            most_useful: self.most_useful,
        }
    }

    /// Its outcome, times relative to its arrival.
    pub fn outcome(&self) -> JobOutcome {
        let since_arrival = |t: Option<f64>| t.map(|t| t - self.job.arrival_s);
        JobOutcome {
            id: self.job.id.clone(),
            family: self.job.family.clone(),
            group: self.job.group,
            arrival_s: self.job.arrival_s,
            initial_norm_loss: self.initial_norm_loss,
            loss_area: self.loss_area,
            time_to_90_s: since_arrival(self.reached_90),
            time_to_95_s: since_arrival(self.reached_95),
            completion_s: since_arrival(self.finished),
            restarts: self.restarts,
            fair_clock_s: None,
        }
    }
}
