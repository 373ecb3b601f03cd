//! A job's bid, the one thing a job actor tells the allocator (and a partition's owner the
//! leader, as a `protocol::WireBid`): plain data, no actix, read by the allocator's core.

use std::sync::Arc;

use crate::cluster::model::{self, BatchLimits, Observation};
use crate::policy::table::{DEFAULT_TABLE_LEN, Tabled};
use crate::protocol::{JobSpec, WireBid};
use crate::quality::{GainCurve, JobPredictor};
use crate::schedule::{self, JobModel};

/// A job's bid: its bounds, its gain curve and what `status` shows of it.
#[derive(Clone, Debug)]
pub struct Bid {
    /// Its iteration-time model, batch limits and SLO, for placement and batch size.
    pub model: Arc<JobModel>,
    pub min_workers: u32,
    pub max_workers: u32,
    /// The gain curve, tabulated for the first workers ([`Tabled`]); boxed, so that the
    /// allocator keeps it apart from the rest of the bid (`JobEntry::gain`) without a copy.
    pub gain: Option<Box<Tabled<GainCurve>>>,
    pub last_iter: Option<u64>,
    pub last_loss: Option<f64>,
    /// Predicted gain over the horizon with its current workers (for `status`).
    pub predicted_gain: Option<f64>,
    pub points: u64,
    /// The latest generation of its processes that reported a new iteration (reports that say).
    pub generation: Option<u64>,
    /// The only worker counts it may run at (ascending), if it declared them.
    pub sizes: Option<Arc<[u32]>>,
    /// The work a stop would lose (seconds since its last checkpoint), if it says.
    pub checkpoint_age_s: Option<f64>,
    /// The iteration it stops at, if it declared one (`JobSpec::max_iters`).
    pub max_iters: Option<u64>,
    /// Seconds between its saves, if it declared them (`JobSpec::checkpoint_every_s`).
    pub checkpoint_every_s: Option<f64>,
    /// It saves when asked (`JobSpec::save_on_request`).
    pub save_on_request: bool,
    /// The priority it asked for (`JobSpec::priority`; its tenant caps it).
    pub priority: u8,
    /// The weight it asked for (`JobSpec::weight`; its tenant caps it).
    pub weight: f64,
    /// Its declared speeds per worker type (`JobSpec::speeds`).
    pub speeds: Option<Arc<std::collections::BTreeMap<String, f64>>>,
}

impl Bid {
    /// The bid of a job with `spec` and `model`, from its predictor and the gain curve made from
    /// it with `workers` workers (no generation or checkpoint age yet).
    pub fn new(
        spec: &JobSpec,
        model: Arc<JobModel>,
        predictor: &JobPredictor,
        gain: Option<GainCurve>,
        workers: u32,
    ) -> Bid {
        let max_workers = spec.max_workers.unwrap_or(u32::MAX);
        Bid {
            model,
            min_workers: spec.min_workers,
            max_workers,
            // Tabulated here, at refit, so the allocator's decision reads numbers.
            gain: gain.map(|g| Box::new(Tabled::new(g, max_workers, DEFAULT_TABLE_LEN))),
            last_iter: predictor.last_iter(),
            last_loss: predictor.last_loss(),
            predicted_gain: gain.map(|g| g.gain(workers.max(1))),
            points: predictor.num_points(),
            generation: None,
            checkpoint_age_s: None,
            max_iters: spec.max_iters,
            checkpoint_every_s: spec.checkpoint_every_s,
            save_on_request: spec.save_on_request,
            priority: spec.priority,
            weight: spec.weight,
            speeds: spec.speeds.clone().map(Arc::new),
            sizes: spec.worker_counts.as_ref().map(|c| {
                let mut c = c.clone();
                c.sort_unstable();
                c.dedup();
                c.into()
            }),
        }
    }

    pub fn to_wire(&self) -> WireBid {
        WireBid {
            model: (*self.model).clone(),
            min_workers: self.min_workers,
            max_workers: self.max_workers,
            gain: self.gain.as_ref().map(|t| *t.curve()),
            last_iter: self.last_iter,
            last_loss: self.last_loss,
            predicted_gain: self.predicted_gain,
            points: self.points,
            generation: self.generation,
            sizes: self.sizes.as_ref().map(|s| s.to_vec()),
            checkpoint_age_s: self.checkpoint_age_s,
            max_iters: self.max_iters,
            checkpoint_every_s: self.checkpoint_every_s,
            save_on_request: self.save_on_request,
            priority: self.priority,
            weight: self.weight,
            speeds: self.speeds.as_deref().cloned(),
        }
    }

    /// The bid a [`WireBid`] describes, its gains tabulated again.
    pub fn from_wire(w: WireBid) -> Bid {
        Bid {
            model: Arc::new(w.model),
            min_workers: w.min_workers,
            max_workers: w.max_workers,
            gain: w.gain.map(|g| Box::new(Tabled::new(g, w.max_workers, DEFAULT_TABLE_LEN))),
            last_iter: w.last_iter,
            last_loss: w.last_loss,
            predicted_gain: w.predicted_gain,
            points: w.points,
            generation: w.generation,
            sizes: w.sizes.map(Into::into),
            checkpoint_age_s: w.checkpoint_age_s,
            max_iters: w.max_iters,
            checkpoint_every_s: w.checkpoint_every_s,
            save_on_request: w.save_on_request,
            priority: w.priority,
            weight: w.weight,
            speeds: w.speeds.map(Arc::new),
        }
    }
}

/// What the planner knows of a job with `spec`, from the shapes it ran in (`cluster::model`).
pub fn job_model(spec: &JobSpec, shapes: &[Observation], grads: Option<(f64, f64)>) -> JobModel {
    let mut batches = spec.batch_sizes.clone().unwrap_or_default();
    batches.sort_unstable();
    batches.dedup();
    let limits = BatchLimits {
        init_batch: batches.first().copied().unwrap_or(1),
        max_batch: batches.last().copied().unwrap_or(u32::MAX),
        min_local: 1,
        max_local: spec.max_local_batch.unwrap_or(u32::MAX),
    };
    let (seen_local, local_range) = schedule::seen_batches(shapes);
    JobModel {
        perf: model::fit(shapes),
        limits,
        batches,
        grads,
        slo_iter_s: spec.slo_iter_seconds,
        ps: spec.parameter_server,
        current: Vec::new(),
        seen_local,
        start_batch: None,
        local_range,
    }
}
