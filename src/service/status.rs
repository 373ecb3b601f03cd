//! Answers to status requests (`slaq status`, a job asking for its own), sent off the ingest
//! loop: the allocator may be mid-epoch. An answer fits in one NATS message.

use std::collections::HashMap;

use actix::prelude::*;
use tracing::warn;

use crate::actors::allocator::{AllocatorActor, GetStatus};
use crate::protocol::{self, Encoding, StatusRequest, StatusSnapshot};

/// Answers a request; a failure is logged.
pub(super) async fn send_reply<T: serde::Serialize>(
    client: &async_nats::Client,
    reply: String,
    encoding: Encoding,
    message: &T,
) {
    if let Err(e) = crate::bus::publish(client, reply, encoding, message).await {
        warn!(error = %e, "cannot send a reply");
    }
}

/// What a status answer is made of, taken from the ingest loop.
pub(super) struct Answer {
    pub allocator: Addr<AllocatorActor>,
    pub client: async_nats::Client,
    /// With shared work: the state connection and the number of partitions (their owners are
    /// read for the answer).
    pub shared: Option<(async_nats::Client, u32)>,
    pub prefix: String,
    /// Reports refused per job, for their own excess.
    pub dropped: HashMap<String, u64>,
}

impl Answer {
    /// Asks the allocator and answers on `reply`, on a task of its own. `own`: a job's request
    /// for itself (only that id, and nothing of the cluster's).
    pub fn spawn(self, request: StatusRequest, own: bool, reply: String, encoding: Encoding) {
        let max_payload = self.client.server_info().max_payload.max(4096);
        actix::spawn(async move {
            let filter =
                GetStatus { jobs: request.jobs.clone(), limit: request.limit, own, no_workers: request.no_workers };
            let Ok(mut snapshot) = self.allocator.send(filter).await else { return };
            if let Some((state, count)) = self.shared {
                match crate::bus::partitions::owners(&state, &self.prefix, count).await {
                    Ok(owners) => snapshot.owners = owners,
                    Err(e) => warn!(error = %e, "cannot read the partitions' owners"),
                }
            }
            for job in &mut snapshot.jobs {
                job.dropped = self.dropped.get(&job.job).copied().unwrap_or(0);
            }
            let snapshot = fit_status(snapshot, &request, encoding, max_payload);
            if let Err(e) = crate::bus::publish(&self.client, reply, encoding, &snapshot).await {
                warn!(error = %e, "cannot answer a status request");
            }
        });
    }
}

/// A status answer that fits in one NATS message: the jobs (and workers) the allocator listed
/// for the request, in id order, cut at `limit` or where the encoded answer would exceed the
/// server's payload limit; `truncated` says so.
pub(super) fn fit_status(
    mut snapshot: StatusSnapshot,
    request: &StatusRequest,
    encoding: Encoding,
    max_payload: usize,
) -> StatusSnapshot {
    // The allocator sent the totals and only the jobs asked for, at most one past the limit.
    let limit = request.limit.unwrap_or(usize::MAX);
    if snapshot.jobs.len() > limit || snapshot.workers.len() > limit {
        snapshot.jobs.truncate(limit);
        snapshot.workers.truncate(limit);
        snapshot.truncated = true;
    }
    // Halve the lists until the answer fits (with room for headers).
    let budget = max_payload.saturating_sub(1024);
    while protocol::encode(encoding, &snapshot).map_or(0, |b| b.len()) > budget
        && !(snapshot.jobs.is_empty() && snapshot.workers.is_empty() && snapshot.ended.is_empty())
    {
        let (jobs, workers) = (snapshot.jobs.len() / 2, snapshot.workers.len() / 2);
        snapshot.jobs.truncate(jobs);
        snapshot.workers.truncate(workers);
        // The newest outcomes stay.
        snapshot.ended.drain(..snapshot.ended.len() / 2);
        snapshot.truncated = true;
    }
    snapshot
}
