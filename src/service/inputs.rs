//! What the scheduler reads: the subscriptions (one wildcard per message kind, not one per
//! job), the reports stream with durable state, and the partitions' owners' bids with shared
//! work.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tracing::warn;

use super::{ServeConfig, ServiceError};
use crate::bus::durable::Durable;

/// A message and, when it came from the reports stream, its stream sequence.
pub(super) type Kept = (async_nats::Message, Option<u64>);

/// Loss reports (and byes, with durable state) on a stream of their own, polled first: they are
/// nearly all the traffic. The rest (hellos, heartbeats, status requests) share a merged stream.
pub(super) type Inputs = (Losses, futures_util::stream::SelectAll<async_nats::Subscriber>);

/// The loss reports as the scheduler reads them. Core NATS's are polled without a boxed stream
/// between: each layer moves the whole message, and this is the ingest's hot path.
pub(super) enum Losses {
    /// Core NATS: the reports' two subscriptions (jobs without a tenant, tenants' jobs), each
    /// read until it has nothing ready, the other then (a job's reports all come on one).
    Core([async_nats::Subscriber; 2]),
    /// The reports stream (with durable state), or nothing (shared work: the owners read it).
    Kept(Pin<Box<dyn Stream<Item = Kept>>>),
}

impl Stream for Losses {
    type Item = Kept;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Kept>> {
        match self.get_mut() {
            Losses::Core([jobs, tenants]) => match jobs.poll_next_unpin(cx) {
                Poll::Ready(Some(message)) => Poll::Ready(Some((message, None))),
                // Ended when both have (an ended subscription stays ended).
                ended => match (tenants.poll_next_unpin(cx), ended) {
                    (Poll::Ready(Some(message)), _) => Poll::Ready(Some((message, None))),
                    (Poll::Ready(None), Poll::Ready(None)) => Poll::Ready(None),
                    _ => Poll::Pending,
                },
            },
            Losses::Kept(reports) => reports.poll_next_unpin(cx),
        }
    }
}

/// Subscribes to everything the scheduler reads (not yet flushed). With durable state, reports and byes come from
/// the stream (first those kept there, then new ones), each with its stream sequence: nothing
/// published while the scheduler was down (restarting, failing over, or NATS itself) is missed.
pub(super) async fn subscribe(
    client: &async_nats::Client,
    config: &ServeConfig,
    durable: Option<&Durable>,
) -> Result<Inputs, ServiceError> {
    let [hello, job_status, loss, bye, worker_hello, worker_beat] = config.subjects.scheduler_subscriptions();
    let [tenant_hello, tenant_status, tenant_loss, tenant_bye] = config.subjects.tenant_subscriptions();
    let subscribe = |subject: String| crate::bus::subscribe(client, subject);
    let mut subscriptions = Vec::new();
    let losses = match durable {
        // Shared work: the partitions' owners read the reports and byes.
        Some(_) if config.durable.partitions.is_some() => Losses::Kept(Box::pin(futures_util::stream::pending())),
        Some(d) => Losses::Kept(Box::pin(d.reports().await?.filter_map(|m| async move {
            match m {
                Ok(m) if skipped_by_the_server(m.subject.as_str()) => None,
                Ok(m) => {
                    let seq = m.info().ok().map(|i| i.stream_sequence);
                    Some((m.message, seq))
                }
                Err(e) => {
                    warn!(error = %e, "reading the reports stream");
                    None
                }
            }
        }))),
        None => {
            subscriptions.push(subscribe(bye).await?);
            subscriptions.push(subscribe(tenant_bye).await?);
            let tenants_loss = subscribe(tenant_loss).await?;
            Losses::Core([subscribe(loss).await?, tenants_loss])
        }
    };
    for subject in [hello, job_status, worker_hello, worker_beat, config.subjects.ctl_status()] {
        subscriptions.push(subscribe(subject).await?);
    }
    // Tenants' jobs (`job.<tenant>.<name>.*`); a partitioned scheduler refuses their hellos.
    for subject in [tenant_hello, tenant_status] {
        subscriptions.push(subscribe(subject).await?);
    }
    Ok((losses, futures_util::stream::select_all(subscriptions)))
}

/// Whether a test's fail point `reports-skip` (its argument a subject) has the consumer lose
/// this message, as nats-server 2.9 did after a purge of one subject: the gap read must find it
/// by sequence, every time (a fail point is nothing outside the tests' builds).
fn skipped_by_the_server(subject: &str) -> bool {
    fail::fail_point!("reports-skip", |skip: Option<String>| skip.as_deref() == Some(subject));
    // Outside the tests' builds the fail point is nothing, and `subject` unused.
    let _ = subject;
    false
}

/// With shared work, the owners' bids, on the state connection (their account); a new leader
/// asks for all of them at once. Without, nothing.
pub(super) async fn owner_bids(
    state_client: &async_nats::Client,
    config: &ServeConfig,
) -> Result<futures_util::stream::SelectAll<async_nats::Subscriber>, ServiceError> {
    if config.durable.partitions.is_none() {
        return Ok(futures_util::stream::select_all(Vec::new()));
    }
    let bids = crate::bus::subscribe(state_client, config.subjects.part_bids_all()).await?;
    let _ = tokio::time::timeout(Duration::from_secs(5), state_client.flush()).await;
    if let Err(e) = state_client.publish(config.subjects.part_bids_sync(), Bytes::new()).await {
        warn!(error = %e, "cannot ask the partitions' owners for their bids");
    }
    Ok(futures_util::stream::select_all(vec![bids]))
}

/// A subscription returns before the server has it: flushes so that "ready" means messages
/// published from now on reach the scheduler, and says so (`metrics.ready`).
pub(super) async fn confirm(client: &async_nats::Client, metrics: &crate::metrics::Metrics) {
    if tokio::time::timeout(Duration::from_secs(5), client.flush()).await.is_err() {
        warn!("NATS did not confirm the subscriptions within 5 s; continuing");
    } else {
        metrics.ready.set(1);
    }
}
