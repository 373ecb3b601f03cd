//! The allocator's status: its jobs, their workers and the recent epochs, filtered by a job id
//! prefix and cut at a limit (`GetStatus`), as `slaq status` and the jobs see them.

use super::super::types;
use super::state::Allocator;
use crate::protocol::{JobStatus, RendezvousUse, StatusSnapshot, WorkerStatus};

/// The status: the jobs whose id starts with `jobs` (all: `None`) and their workers, at most
/// `limit` + 1 of each.
#[derive(Clone, Debug, Default)]
pub struct GetStatus {
    pub jobs: Option<String>,
    pub limit: Option<usize>,
    /// A job asks for itself: `jobs` is its exact id, and the answer holds that job, its
    /// workers and its outcome only (no counters, no totals, no other job).
    pub own: bool,
    /// The jobs and the totals, no worker listed (the page: 16,000 workers are counts there).
    pub no_workers: bool,
}

impl Allocator {
    /// The status at `now_s`, with the jobs whose id starts with `filter.jobs` and their workers (all
    /// without it), at most `filter.limit` + 1 of each (one past the limit says it was cut):
    /// at a million workers, listing all to answer for a few took seconds.
    pub fn snapshot(&self, now_s: f64, filter: &GetStatus) -> StatusSnapshot {
        let wanted = |job: &str| match filter.jobs.as_deref() {
            None => true,
            Some(id) if filter.own => job == id,
            Some(prefix) => job.starts_with(prefix),
        };
        let at_most = filter.limit.map_or(usize::MAX, |l| l.saturating_add(1));
        StatusSnapshot {
            term: self.settings.term,
            leader: self.settings.replica.clone(),
            owners: Default::default(),
            rendezvous: self.ports.busiest(now_s).filter(|_| !filter.own).map(|(address, busy)| RendezvousUse {
                address: address.to_string(),
                busy,
                ports: self.ports.span(),
                without_ranks: self.without_ranks,
            }),
            state: if self.persist { "jetstream" } else { "none" }.to_string(),
            epoch: self.epoch,
            policy: format!("{:?}", self.settings.policy).to_lowercase(),
            jobs: self
                .jobs
                .iter()
                .filter(|(id, _)| wanted(id))
                .take(at_most)
                .map(|(id, e)| JobStatus {
                    job: id.clone(),
                    last_iter: e.bid.as_ref().and_then(|b| b.last_iter),
                    last_loss: e.bid.as_ref().and_then(|b| b.last_loss),
                    predicted_gain: e.bid.as_ref().and_then(|b| b.predicted_gain),
                    workers: e.workers.len() as u32,
                    points: e.bid.as_ref().map_or(0, |b| b.points),
                    dropped: 0,
                    batch_size: e.batch,
                    generation: e.generation,
                    restarts: e.supervision.restarts,
                    submitted: e.command.is_some(),
                    restart_s: e.supervision.restart_s,
                    speeds: e.speeds.measured.measured.clone(),
                    slowdown: e.ledger.pace().slowdown(),
                    restarted: e.supervision.restarted.iter().copied().collect(),
                })
                .collect(),
            workers: self
                .registry
                .iter()
                .filter(|(_, w)| filter.jobs.is_none() || w.job.as_ref().is_some_and(|j| wanted(&j.id)))
                .take(if filter.no_workers { 0 } else { at_most })
                .map(|(id, w)| WorkerStatus {
                    worker: id.clone(),
                    job: w.job.as_ref().map(|j| j.id.clone()),
                    machine: w.spec.machine.clone(),
                    role: w.role,
                    silent_s: now_s - w.last_seen_s,
                    refused: w.refused,
                    accelerator: Some(types::accelerator(&w.spec).to_string()),
                })
                .collect(),
            // The message counters live in the shell's metrics registry, which adds them.
            accepted: Default::default(),
            rejected: Default::default(),
            num_jobs: if filter.own { 0 } else { self.jobs.len() },
            num_workers: if filter.own { 0 } else { self.registry.len() },
            truncated: false,
            ended: self.ended.iter().filter(|o| wanted(&o.job)).cloned().collect(),
            accelerators: if filter.own { Default::default() } else { types::accelerator_use(&self.registry) },
            tenants: match self.history.back() {
                Some(last) if !filter.own => last.tenants.clone(),
                _ => Default::default(),
            },
        }
    }
}
