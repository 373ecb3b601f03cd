//! One job replaying its recorded curve: the state both the simulator and `slaq emulate`
//! advance, so the two measure the very same thing.

use super::engine::SpeedupModel;
use super::metrics::{ActiveJob, JobOutcome};
use super::workload::SimJob;

/// A job's progress through its curve.
#[derive(Clone, Debug)]
pub struct ReplayJob<'a> {
    pub job: &'a SimJob,
    /// Index of the next loss point this job produces.
    pub next: usize,
    /// Fraction of the current iteration done.
    pub progress: f64,
    pub workers: u32,
    pub active: bool,
    pub norm_loss: f64,
    pub initial_norm_loss: f64,
    reached_90: Option<f64>,
    reached_95: Option<f64>,
    finished: Option<f64>,
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
    pub fn new(job: &'a SimJob) -> Self {
        let norm = if job.offset == 0 { 1.0 } else { job.norm_loss(job.loss[job.offset - 1]) };
        ReplayJob {
            job,
            next: job.offset,
            progress: 0.0,
            workers: 0,
            active: false,
            norm_loss: norm,
            initial_norm_loss: norm,
            reached_90: None,
            reached_95: None,
            finished: None,
        }
    }

    /// Seconds the current iteration takes with the current workers.
    pub fn iteration_seconds(&self, speedup: &SpeedupModel) -> f64 {
        self.job.one_worker_seconds[self.next] * speedup.factor(self.workers)
    }

    /// Whether it is running (active with workers).
    pub fn running(&self) -> bool {
        self.active && self.workers > 0
    }

    /// When its current iteration would finish, at the current speed.
    pub fn completes_at(&self, now: f64, speedup: &SpeedupModel) -> Option<f64> {
        self.running().then(|| now + (1.0 - self.progress) * self.iteration_seconds(speedup))
    }

    /// `dt` seconds pass at the current speed.
    pub fn advance(&mut self, dt: f64, speedup: &SpeedupModel) {
        if self.running() {
            self.progress += dt / self.iteration_seconds(speedup);
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
    pub fn complete(&mut self, now: f64, speedup: &SpeedupModel) -> Option<Completed> {
        if !(self.running() && self.progress >= 1.0 - 1e-9) {
            return None;
        }
        let seconds = self.iteration_seconds(speedup);
        let (iter, loss, workers) = (self.next as u64 + 1, self.job.loss[self.next], self.workers);
        self.next += 1;
        self.progress = 0.0;
        self.norm_loss = self.job.norm_loss(loss);
        self.note_thresholds(now);
        let finished = self.next == self.job.loss.len() || self.norm_loss <= self.job.converged_norm_loss;
        if finished {
            self.finished = Some(now);
            self.active = false;
            self.workers = 0;
        }
        Some(Completed { iter, loss, seconds, workers, finished })
    }

    /// What the metrics need of it now.
    pub fn view(&self) -> ActiveJob {
        ActiveJob { norm_loss: self.norm_loss, workers: self.workers, group: self.job.group }
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
            time_to_90_s: since_arrival(self.reached_90),
            time_to_95_s: since_arrival(self.reached_95),
            completion_s: since_arrival(self.finished),
        }
    }
}
