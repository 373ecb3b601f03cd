//! The per-job actor: owns one job's predictor. It observes loss reports, refits at most every
//! `refit_interval` (so a burst of reports costs one fit, and the epoch never waits for one),
//! and answers the allocator's bid request with its gain curve.

use std::time::Duration;

use actix::prelude::*;

use crate::protocol::{JobSpec, JobStatus, LossPoint};
use crate::quality::{GainCurve, JobPredictor, PredictorConfig};

pub struct JobActor {
    spec: JobSpec,
    predictor: JobPredictor,
    workers: u32,
    refit_interval: Duration,
    refit_scheduled: bool,
    fitted: bool,
    duplicates: u64,
}

impl JobActor {
    /// Start it with `start_in_arbiter` and set the mailbox capacity in the creating closure.
    pub fn new(spec: JobSpec, predictor: PredictorConfig, refit_interval: Duration) -> Self {
        JobActor {
            spec,
            predictor: JobPredictor::new(predictor),
            workers: 0,
            refit_interval,
            refit_scheduled: false,
            fitted: false,
            duplicates: 0,
        }
    }
}

impl Actor for JobActor {
    type Context = Context<Self>;
}

/// A validated loss report for this job.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Report(pub LossPoint);

impl Handler<Report> for JobActor {
    type Result = ();

    fn handle(&mut self, Report(report): Report, ctx: &mut Self::Context) {
        if self.predictor.observe(report.iter, report.loss).is_err() {
            // The ingest side validated the values; what is left is a repeated or old `iter`.
            self.duplicates += 1;
            return;
        }
        if report.workers > 0 && report.iter_seconds > 0.0 {
            self.predictor.observe_time(report.workers, report.iter_seconds);
        }
        if !self.refit_scheduled {
            self.refit_scheduled = true;
            ctx.run_later(self.refit_interval, |act, _| {
                act.refit_scheduled = false;
                act.fitted = true;
                act.predictor.refit();
            });
        }
    }
}

/// The spec changed (the job said hello again).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UpdateSpec(pub JobSpec);

impl Handler<UpdateSpec> for JobActor {
    type Result = ();

    fn handle(&mut self, UpdateSpec(spec): UpdateSpec, _: &mut Self::Context) {
        self.spec = spec;
    }
}

/// The allocator asks for a bid; `workers` is what the job holds now.
#[derive(Message)]
#[rtype(result = "Bid")]
pub struct CollectBid {
    pub horizon_s: f64,
    pub workers: u32,
}

/// A job's answer: its bounds, its gain curve and what `status` shows.
#[derive(Clone, Debug)]
pub struct Bid {
    pub min_workers: u32,
    pub max_workers: u32,
    pub gain: Option<GainCurve>,
    pub status: JobStatus,
    pub duplicates: u64,
}

impl Handler<CollectBid> for JobActor {
    type Result = MessageResult<CollectBid>;

    fn handle(&mut self, msg: CollectBid, _: &mut Self::Context) -> Self::Result {
        self.workers = msg.workers;
        // Never fitted yet (its first points arrived within the refit interval): fit now, once.
        // Otherwise the bid uses the latest debounced fit, so an epoch never waits for fits.
        if !self.fitted && self.predictor.num_points() > 0 {
            self.predictor.refit();
            self.fitted = true;
        }
        let gain = self.predictor.gain_curve(msg.horizon_s, msg.workers);
        let status = JobStatus {
            job: self.spec.job.clone(),
            last_iter: self.predictor.last_iter(),
            last_loss: self.predictor.last_loss(),
            predicted_gain: gain.map(|g| g.gain(msg.workers.max(1))),
            workers: msg.workers,
            points: self.predictor.num_points(),
        };
        MessageResult(Bid {
            min_workers: self.spec.min_workers,
            max_workers: self.spec.max_workers.unwrap_or(u32::MAX),
            gain,
            status,
            duplicates: self.duplicates,
        })
    }
}

/// The job said bye.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

impl Handler<Stop> for JobActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// How many points this job's predictor has observed.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct CountPoints;

impl Handler<CountPoints> for JobActor {
    type Result = u64;
    fn handle(&mut self, _: CountPoints, _: &mut Self::Context) -> u64 {
        self.predictor.num_points()
    }
}
