//! Where the page's data comes from: this process's allocator while it leads (its status
//! snapshot and recent epochs), or, on a standby replica, the leader over NATS (`ctl.status`,
//! and the epochs it publishes on `ctl.epoch`). A job's curve comes from its actor: here if it
//! runs here, else from whichever process runs it (`ctl.curve.<job>`, see `service::curves`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Addr;
use futures_util::StreamExt;

use crate::actors::allocator::{AllocatorActor, GetStatus, JobActorOf, RecentEpochs};
use crate::actors::job::GetCurve;
use crate::metrics::Metrics;
use crate::protocol::{self, Encoding, EpochSummary, JobStatus, StatusRequest, StatusSnapshot, Subjects};

/// Epochs on the page's timeline.
const TIMELINE: usize = 240;

/// How long a request to another process over NATS may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// One epoch on the timeline.
#[derive(Clone, serde::Serialize)]
pub struct EpochPoint {
    epoch: u64,
    moved: usize,
    assigned: u64,
    jobs: usize,
    total_ms: f64,
}

impl From<&EpochSummary> for EpochPoint {
    fn from(s: &EpochSummary) -> Self {
        EpochPoint {
            epoch: s.epoch,
            moved: s.workers_moved,
            assigned: s.workers_assigned,
            jobs: s.num_jobs,
            total_ms: s.total_ms,
        }
    }
}

/// The page's connection: curves of jobs whose actor runs elsewhere, and a standby's status and
/// epochs (`epochs`: the leader's, as published, on a standby only).
#[derive(Clone)]
pub struct Bus {
    pub client: async_nats::Client,
    pub subjects: Subjects,
    pub epochs: Option<Arc<Mutex<VecDeque<EpochPoint>>>>,
}

impl Bus {
    pub fn new(client: async_nats::Client, subjects: Subjects) -> Self {
        Bus { client, subjects, epochs: None }
    }

    /// Keeps the last epochs the leader publishes (a standby's timeline) until the task
    /// returned is aborted.
    pub async fn watching_epochs(mut self) -> Result<(Self, tokio::task::JoinHandle<()>), async_nats::SubscribeError> {
        let epochs: Arc<Mutex<VecDeque<EpochPoint>>> = Arc::default();
        let mut published = self.client.subscribe(self.subjects.ctl_epoch()).await?;
        let kept = epochs.clone();
        let task = tokio::spawn(async move {
            while let Some(m) = published.next().await {
                let Ok(summary) = protocol::decode::<EpochSummary>(Encoding::MsgPack, &m.payload, "epoch") else {
                    continue;
                };
                let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                if kept.len() == TIMELINE {
                    kept.pop_front();
                }
                kept.push_back(EpochPoint::from(&summary));
            }
        });
        self.epochs = Some(epochs);
        Ok((self, task))
    }
}

/// Why there is nothing to show.
pub enum Unavailable {
    /// This process's allocator has not started, and it is no standby.
    Starting,
    /// The allocator is stopping.
    Stopping,
    /// A standby asked the leader, which did not answer.
    NoLeader,
}

/// The status snapshot (no worker listed) and the timeline.
pub async fn cluster(
    allocator: Option<&Addr<AllocatorActor>>,
    metrics: &Metrics,
    bus: &Bus,
) -> Result<(StatusSnapshot, Vec<EpochPoint>), Unavailable> {
    let Some(allocator) = allocator else {
        standby(bus)?;
        let request = StatusRequest { no_workers: true, ..StatusRequest::default() };
        let snapshot = ask_leader(bus, &request).await?;
        let epochs = bus.epochs.as_ref().map(|e| e.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect());
        return Ok((snapshot, epochs.unwrap_or_default()));
    };
    let filter = GetStatus { no_workers: true, ..GetStatus::default() };
    let (Ok(mut snapshot), Ok(recent)) = (allocator.send(filter).await, allocator.send(RecentEpochs(TIMELINE)).await)
    else {
        return Err(Unavailable::Stopping);
    };
    snapshot.accepted = metrics.accepted_counts();
    snapshot.rejected = metrics.rejected_counts();
    Ok((snapshot, recent.iter().map(EpochPoint::from).collect()))
}

/// Job `id`'s status, if the scheduler holds it.
pub async fn job_status(
    allocator: Option<&Addr<AllocatorActor>>,
    bus: &Bus,
    id: &str,
) -> Result<Option<JobStatus>, Unavailable> {
    let snapshot = match allocator {
        Some(allocator) => {
            let filter = GetStatus { jobs: Some(id.to_string()), own: true, no_workers: true, ..GetStatus::default() };
            allocator.send(filter).await.map_err(|_| Unavailable::Stopping)?
        }
        None => {
            standby(bus)?;
            let request = StatusRequest { jobs: Some(id.to_string()), no_workers: true, ..StatusRequest::default() };
            ask_leader(bus, &request).await?
        }
    };
    Ok(snapshot.jobs.into_iter().find(|j| j.job == id))
}

/// Job `id`'s curve (`JobCurve` in JSON) from its actor, wherever it runs; `None` if no actor
/// answered.
pub async fn curve(
    allocator: Option<&Addr<AllocatorActor>>,
    bus: &Bus,
    id: &str,
    ahead_s: f64,
) -> Option<serde_json::Value> {
    let here = match allocator {
        Some(allocator) => allocator.send(JobActorOf(id.to_string())).await.ok().flatten(),
        None => None,
    };
    if let Some(actor) = here {
        let curve = actor.send(GetCurve { ahead_s }).await.ok()?;
        return serde_json::to_value(curve).ok();
    }
    let ask = bus.client.request(bus.subjects.ctl_curve(id), bytes::Bytes::new());
    let answer = tokio::time::timeout(ASK_TIMEOUT, ask).await.ok()?.ok()?;
    serde_json::from_slice(&answer.payload).ok()
}

/// Without an allocator, only a standby (which watches the leader's epochs) asks the leader.
fn standby(bus: &Bus) -> Result<(), Unavailable> {
    if bus.epochs.is_some() { Ok(()) } else { Err(Unavailable::Starting) }
}

async fn ask_leader(bus: &Bus, request: &StatusRequest) -> Result<StatusSnapshot, Unavailable> {
    crate::bus::request(&bus.client, bus.subjects.ctl_status(), Encoding::MsgPack, request, ASK_TIMEOUT)
        .await
        .map_err(|_| Unavailable::NoLeader)
}
