//! The per-job actor: owns one job's predictor. It observes loss reports, refits at most every
//! `refit_interval` (so a burst of reports costs one fit), and pushes its bid (its gain curve)
//! to the allocator whenever the bid changes: after a refit, when its worker count changes, and
//! once when it starts. The allocator therefore never waits on a job actor: an epoch uses each
//! job's latest bid, and a slow actor's bid is merely older.

use std::time::Duration;

use actix::prelude::*;

use std::sync::Arc;

use super::bid::{Bid, job_model};
use crate::bus::durable::Durable;
use crate::cluster::model::Observation;
use crate::protocol::{JobSpec, LossPoint};
use crate::quality::JobPredictor;
use crate::quality::history::{HistoryPoint, JobCurve, LossHistory};
use crate::schedule;
use crate::schedule::JobModel;

/// The largest first iteration a job may report (iterations are also model inputs as `f64`).
const MAX_FIRST_ITER: u64 = 1 << 40;

pub struct JobActor {
    spec: JobSpec,
    allocator: Recipient<BidUpdate>,
    horizon_s: f64,
    epoch_s: f64,
    predictor: JobPredictor,
    workers: u32,
    refit_interval: Duration,
    refit_scheduled: bool,
    counters: ReportCounters,
    /// A report more than this many iterations past the last one is refused.
    max_iter_jump: u64,
    /// Where the predictor is saved, and how often at most.
    durable: Option<(Durable, Duration)>,
    /// Points observed since the last save.
    unsaved: bool,
    /// A save is scheduled for the points the save interval held back.
    save_scheduled: bool,
    last_saved: Option<std::time::Instant>,
    /// The last iteration of the predictor this actor was restored with: replayed reports up to
    /// it are already in the predictor (not duplicates).
    restored_iter: u64,
    /// The shapes it ran in, for its iteration-time model (latest per shape and per-worker
    /// batch, at most [`MAX_SHAPES`]), and its latest gradient statistics.
    shapes: Vec<Observation>,
    grads: Option<(f64, f64)>,
    /// Its model as last fitted; `None` once its spec, shapes or gradients change.
    model: Option<Arc<JobModel>>,
    /// The latest generation of its processes that reported a new iteration.
    generation: Option<u64>,
    /// The work a stop would lose, as its latest report said.
    checkpoint_age_s: Option<f64>,
    /// Its reports for people to look at (the page), apart from the predictor's window.
    history: LossHistory,
}

/// Shapes a job's iteration-time model remembers.
const MAX_SHAPES: usize = 64;

/// What a job actor saves to the durable state: its predictor, and what its iteration-time
/// model is fitted from.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct SavedJob {
    pub predictor: JobPredictor,
    #[serde(default)]
    pub shapes: Vec<Observation>,
    #[serde(default)]
    pub grads: Option<(f64, f64)>,
    /// When it was saved (Unix ms): its reports from before are in it (`None` in older saves).
    #[serde(default)]
    pub saved_at_ms: Option<u64>,
}

/// [`SavedJob`] as written, borrowing the actor's state (same fields, so it decodes as one).
#[derive(serde::Serialize)]
struct SavedJobRef<'a> {
    predictor: &'a JobPredictor,
    shapes: &'a [Observation],
    grads: Option<(f64, f64)>,
    saved_at_ms: Option<u64>,
}

impl SavedJob {
    /// Decodes a saved job; a state written before shapes were saved holds the predictor alone.
    pub fn decode(bytes: &[u8]) -> Result<SavedJob, rmp_serde::decode::Error> {
        rmp_serde::from_slice::<SavedJob>(bytes).or_else(|_| {
            rmp_serde::from_slice::<JobPredictor>(bytes).map(|predictor| SavedJob {
                predictor,
                shapes: Vec::new(),
                grads: None,
                saved_at_ms: None,
            })
        })
    }
}

impl JobActor {
    /// Start it with `start_in_arbiter` and set the mailbox capacity in the creating closure.
    /// Bids go to `allocator`, made by [`schedule::make_bid`] as the simulator makes them.
    /// `predictor` is a fresh one, or one restored from durable state.
    pub fn new(
        spec: JobSpec,
        predictor: JobPredictor,
        refit_interval: Duration,
        allocator: Recipient<BidUpdate>,
        horizon_s: f64,
        epoch_s: f64,
    ) -> Self {
        // A restored job shows the points its predictor kept (their times were not saved).
        let mut history = LossHistory::default();
        for (iter, loss) in predictor.window() {
            history.push(HistoryPoint { iter, loss, at_ms: None, workers: 0 }, None);
        }
        JobActor {
            spec,
            allocator,
            horizon_s,
            epoch_s,
            history,
            restored_iter: predictor.last_iter().unwrap_or(0),
            predictor,
            workers: 0,
            refit_interval,
            refit_scheduled: false,
            counters: ReportCounters::default(),
            generation: None,
            checkpoint_age_s: None,
            max_iter_jump: u64::MAX,
            durable: None,
            unsaved: false,
            save_scheduled: false,
            last_saved: None,
            shapes: Vec::new(),
            grads: None,
            model: None,
        }
    }

    /// Counts reports here (the actor decides whether one is new) and refuses iterations more
    /// than `max_iter_jump` past the last.
    pub fn counting(mut self, counters: ReportCounters, max_iter_jump: u64) -> Self {
        self.counters = counters;
        self.max_iter_jump = max_iter_jump;
        self
    }

    /// Starts from saved shapes and gradient statistics (a restart).
    pub fn with_model(mut self, shapes: Vec<Observation>, grads: Option<(f64, f64)>) -> Self {
        self.shapes = shapes;
        self.shapes.truncate(MAX_SHAPES);
        self.grads = grads;
        self.model = None;
        self
    }

    /// Saves the predictor to `durable` at most every `interval` while points arrive.
    pub fn saving_to(mut self, durable: Durable, interval: Duration) -> Self {
        self.durable = Some((durable, interval));
        self
    }

    /// Saves the predictor if it has unsaved points and the last save is at least the save
    /// interval old (or `now` is set). Runs on the refit path, so an idle job costs nothing; the
    /// points after its last save are in the reports stream, which a restart replays.
    fn save(&mut self, now: bool) {
        let Some((durable, interval)) = &self.durable else { return };
        if !self.unsaved || !(now || self.last_saved.is_none_or(|t| t.elapsed() >= *interval)) {
            return;
        }
        self.last_saved = Some(std::time::Instant::now());
        let saved_at_ms = wall_ms_now().map(std::num::NonZeroU64::get);
        let saved = SavedJobRef { predictor: &self.predictor, shapes: &self.shapes, grads: self.grads, saved_at_ms };
        match rmp_serde::to_vec_named(&saved) {
            Ok(bytes) => durable.save_predictor(&self.spec.job, bytes.into()),
            Err(e) => tracing::warn!(job = %self.spec.job, error = %e, "cannot encode the predictor"),
        }
        self.unsaved = false;
    }
}

impl Actor for JobActor {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        // A fresh job bids its prior at once, so it can get workers in the next epoch.
        self.push_bid();
    }
}

impl JobActor {
    /// The bid, made as the simulator makes it (refits only if points arrived since the last
    /// refit; the debounce keeps that at most once per refit interval).
    fn bid(&mut self) -> Bid {
        let gain = schedule::make_bid(&mut self.predictor, self.horizon_s, self.epoch_s, self.workers);
        let model =
            Arc::clone(self.model.get_or_insert_with(|| Arc::new(job_model(&self.spec, &self.shapes, self.grads))));
        Bid {
            generation: self.generation,
            checkpoint_age_s: self.checkpoint_age_s,
            ..Bid::new(&self.spec, model, &self.predictor, gain, self.workers)
        }
    }

    fn push_bid(&mut self) {
        let bid = self.bid();
        self.allocator.do_send(BidUpdate { job: self.spec.job.clone(), bid });
    }
}

/// A validated loss report for this job, and when the scheduler received it (wall clock, ms
/// since the epoch: the time of its point in the job's history).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Report {
    pub point: LossPoint,
    pub at_ms: Option<std::num::NonZeroU64>,
}

/// The wall clock now, in ms since the Unix epoch (`None` before it), as a report's `at_ms`.
pub fn wall_ms_now() -> Option<std::num::NonZeroU64> {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?;
    std::num::NonZeroU64::new(since.as_millis() as u64)
}

impl Handler<Report> for JobActor {
    type Result = ();

    fn handle(&mut self, Report { point: report, at_ms }: Report, ctx: &mut Self::Context) {
        if report.iter <= self.restored_iter {
            // Replayed from the stream after a restart, and already in the restored predictor.
            return;
        }
        // The first point may be anywhere a real job could be (jobs resume); later ones may not
        // leap far ahead of the last.
        let too_far = match self.predictor.last_iter() {
            Some(last) => report.iter.saturating_sub(last) > self.max_iter_jump,
            None => report.iter > MAX_FIRST_ITER,
        };
        if too_far {
            // `iter = 2^64 − 1` would make every later report look old: not trusted.
            self.counters.far_ahead.inc();
            return;
        }
        if self.predictor.observe(report.iter, report.loss).is_err() {
            // The ingest side validated the values; what is left is a repeated or old `iter`.
            self.counters.duplicate.inc();
            return;
        }
        self.counters.accepted.inc();
        self.generation = self.generation.max(report.generation);
        let point = HistoryPoint { iter: report.iter, loss: report.loss, at_ms, workers: self.workers };
        self.history.push(point, report.generation);
        if report.checkpoint_age_s.is_some() {
            self.checkpoint_age_s = report.checkpoint_age_s;
        }
        if report.workers > 0 && report.iter_seconds > 0.0 {
            self.predictor.observe_time(report.workers, report.iter_seconds);
            if let Some(machines) = report.machines {
                self.observe_shape(&report, machines);
            }
        }
        if report.grads.is_some() {
            self.grads = report.grads;
            self.model = None;
        }
        self.unsaved = true;
        if !self.refit_scheduled {
            self.refit_scheduled = true;
            ctx.run_later(self.refit_interval, |act, ctx| {
                act.refit_scheduled = false;
                act.push_bid();
                act.save(false);
                // Points the save interval held back are saved when it has passed, even if no
                // report follows: a job that sends a burst and goes quiet must not depend on
                // the stream's history to get its points back after a restart.
                if act.unsaved
                    && !act.save_scheduled
                    && let Some((_, every)) = &act.durable
                {
                    act.save_scheduled = true;
                    ctx.run_later(*every, |act, _| {
                        act.save_scheduled = false;
                        act.save(true);
                    });
                }
            });
        }
    }
}

impl JobActor {
    /// Remembers the shape a report was measured in (the latest report per shape).
    fn observe_shape(&mut self, report: &LossPoint, machines: u32) {
        let local = report.batch_size.map_or(1.0, |b| (f64::from(b) / f64::from(report.workers)).max(1.0));
        let obs = Observation {
            machines,
            replicas: report.workers,
            local_bsz: local.round(),
            step: report.iter_seconds,
            sync: report.sync_seconds.unwrap_or(0.0),
        };
        let same =
            |o: &Observation| o.machines == obs.machines && o.replicas == obs.replicas && o.local_bsz == obs.local_bsz;
        self.shapes.retain(|o| !same(o));
        if self.shapes.len() == MAX_SHAPES {
            self.shapes.remove(0);
        }
        self.shapes.push(obs);
        self.model = None;
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
        self.model = None;
        self.push_bid();
    }
}

/// Save the predictor now (the scheduler is stopping).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SaveNow;

impl Handler<SaveNow> for JobActor {
    type Result = ();

    fn handle(&mut self, _: SaveNow, _: &mut Self::Context) {
        self.save(true);
    }
}

/// The allocator changed this job's worker count.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkersChanged(pub u32);

impl Handler<WorkersChanged> for JobActor {
    type Result = ();

    fn handle(&mut self, WorkersChanged(workers): WorkersChanged, _: &mut Self::Context) {
        self.workers = workers;
        // At most once per epoch: a refit here (if points are pending) costs one fit.
        self.push_bid();
    }
}

/// The counters a job actor increments for each report it receives (shared handles into the
/// service's metrics registry: atomic adds, no messages).
#[derive(Clone, Debug)]
pub struct ReportCounters {
    pub accepted: prometheus::IntCounter,
    pub duplicate: prometheus::IntCounter,
    pub far_ahead: prometheus::IntCounter,
}

impl Default for ReportCounters {
    /// Counters registered nowhere (an actor outside a service).
    fn default() -> Self {
        let counter = || prometheus::IntCounter::new("slaq_unregistered_total", "not exported").expect("valid name");
        ReportCounters { accepted: counter(), duplicate: counter(), far_ahead: counter() }
    }
}

/// A job actor's latest bid, pushed to the allocator.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BidUpdate {
    pub job: String,
    pub bid: Bid,
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

/// Its loss history, with the predictor's curve and the next `ahead_s` seconds it predicts at
/// its current workers (the page's view of a job).
#[derive(Message)]
#[rtype(result = "JobCurve")]
pub struct GetCurve {
    pub ahead_s: f64,
}

impl Handler<GetCurve> for JobActor {
    type Result = MessageResult<GetCurve>;
    fn handle(&mut self, GetCurve { ahead_s }: GetCurve, _: &mut Self::Context) -> Self::Result {
        // The last fit (at most a refit interval old): a look never changes when it refits.
        MessageResult(JobCurve::new(&self.history, &self.predictor, self.workers, ahead_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_jobs_round_trip_and_old_saves_still_decode() {
        let mut predictor = JobPredictor::new(Default::default());
        for k in 1..=5u64 {
            predictor.observe(k, 1.0 / k as f64).unwrap();
        }
        let shape = Observation { machines: 1, replicas: 2, local_bsz: 32.0, step: 0.2, sync: 0.01 };
        let saved =
            SavedJobRef { predictor: &predictor, shapes: &[shape], grads: Some((1.0, 2.0)), saved_at_ms: Some(7) };
        let back = SavedJob::decode(&rmp_serde::to_vec_named(&saved).unwrap()).unwrap();
        assert_eq!((back.shapes, back.grads, back.saved_at_ms), (vec![shape], Some((1.0, 2.0)), Some(7)));
        assert_eq!(back.predictor.last_iter(), Some(5));
        // The format before shapes were saved: the predictor alone.
        let old = SavedJob::decode(&rmp_serde::to_vec_named(&predictor).unwrap()).unwrap();
        assert!(old.shapes.is_empty() && old.grads.is_none());
        assert_eq!(old.predictor.last_iter(), Some(5));
        assert!(SavedJob::decode(b"garbage").is_err());
    }
}
