//! What the planner knows about one deep-learning job ([`JobModel`]) and the iteration time it
//! predicts from it. Shared by the bid (`bid`) and the batch rule (`batch`), which import it
//! and not each other.

use crate::cluster::model::{BatchConfig, BatchLimits, PerfParams, Shape};
use crate::cluster::place::Layout;

/// What the planner knows about one job.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobModel {
    pub perf: PerfParams,
    pub limits: BatchLimits,
    /// Allowed total batches (declared, or a grid between the limits).
    pub batches: Vec<u32>,
    /// Latest gradient statistics `(grad_sqr, grad_var)`, if the job reports them.
    pub grads: Option<(f64, f64)>,
    pub slo_iter_s: Option<f64>,
    /// A parameter-server job (else all-reduce).
    pub ps: bool,
    /// Its current layout (slots per machine).
    pub current: Layout,
    /// The per-GPU batch its compute was seen at, while it was seen at only one.
    pub seen_local: Option<u32>,
    /// Before it has run: the batch its user chose, which it starts at.
    pub start_batch: Option<u32>,
    /// The per-GPU batches its model is trusted at: half the smallest to twice the largest it
    /// ran at (`None`: any). Like the GPUs a job is trusted with, the range grows as it runs.
    pub local_range: Option<(u32, u32)>,
}

impl JobModel {
    /// Whether an epoch has more to decide for it than its count and its workers: a batch
    /// size among its `batches`, or its parameter servers' roles.
    pub fn is_special(&self) -> bool {
        self.ps || !self.batches.is_empty()
    }

    /// A job that declares no batch sizes, serves no parameters and has not run anywhere: the
    /// prior time model.
    pub fn unknown() -> Self {
        JobModel {
            perf: PerfParams::PRIOR,
            limits: BatchLimits { init_batch: 1, max_batch: u32::MAX, min_local: 1, max_local: u32::MAX },
            batches: Vec::new(),
            grads: None,
            slo_iter_s: None,
            ps: false,
            current: Layout::new(),
            seen_local: None,
            start_batch: None,
            local_range: None,
        }
    }
}

/// What the shapes a job ran in say about the per-GPU batches its model knows: the one batch it
/// was seen at while there is only one (`JobModel::seen_local`), and the range it is trusted at
/// (`JobModel::local_range`).
pub fn seen_batches(shapes: &[crate::cluster::model::Observation]) -> (Option<u32>, Option<(u32, u32)>) {
    let seen = shapes.iter().map(|o| o.local_bsz as u32);
    let only = match shapes.first() {
        Some(o) if shapes.iter().all(|p| p.local_bsz == o.local_bsz) => Some(o.local_bsz as u32),
        _ => None,
    };
    (only, seen.clone().min().zip(seen.max()).map(|(lo, hi)| (lo / 2, hi.saturating_mul(2))))
}

/// One iteration of `job` with `config` on `counts` slots per machine.
pub fn iter_time(job: &JobModel, counts: &[u32], config: &BatchConfig) -> f64 {
    let shape = Shape::of(counts);
    if job.ps {
        let (workers, servers) = ps_split(job, shape.replicas, f64::from(config.local_bsz));
        let cross = if shape.machines <= 1 { 0.0 } else { 1.0 - 1.0 / f64::from(shape.machines) };
        job.perf.ps_iter_time(workers, servers, cross, f64::from(config.local_bsz), config.accum)
    } else {
        job.perf.iter_time(shape, f64::from(config.local_bsz), config.accum)
    }
}

/// Workers and parameter servers out of `slots` (at least one of each when `slots ≥ 2`): the
/// split with the shortest predicted synchronisation at per-GPU batch `local_bsz`.
pub fn ps_split(job: &JobModel, slots: u32, local_bsz: f64) -> (u32, u32) {
    if slots < 2 {
        return (slots, 0);
    }
    let compute = job.perf.compute(local_bsz);
    (1..slots)
        .map(|ps| (slots - ps, ps))
        .min_by(|a, b| {
            // Per worker: compute shared over fewer workers costs more than a faster sync saves.
            let t = |&(w, p): &(u32, u32)| (job.perf.ps_network(w, p, 0.5) + compute) / f64::from(w);
            t(a).total_cmp(&t(b))
        })
        .unwrap_or((slots - 1, 1))
}

/// A deep-learning job for the tests of `schedule`: a prior-like model with a network cost that
/// makes two machines much slower than one.
#[cfg(test)]
pub(crate) fn test_job(current: Layout) -> JobModel {
    JobModel {
        perf: PerfParams {
            alpha_c: 0.02,
            beta_c: 0.005,
            alpha_l: 0.02,
            beta_l: 0.0,
            alpha_n: 0.3,
            beta_n: 0.01,
            gamma: 1.0,
            log_k: 0.0,
        },
        limits: BatchLimits { init_batch: 32, max_batch: 512, min_local: 8, max_local: 64 },
        batches: vec![32, 64, 128, 256, 512],
        grads: None,
        slo_iter_s: None,
        ps: false,
        current,
        seen_local: None,
        start_batch: None,
        local_range: None,
    }
}
