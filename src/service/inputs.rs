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
    /// Core NATS: the reports' two subscriptions (jobs without a tenant, tenants' jobs), read in
    /// turn (a backlog on one never holds the other back).
    Core(InTurn<async_nats::Subscriber>),
    /// The reports stream (with durable state), or nothing (shared work: the owners read it).
    Kept(Pin<Box<dyn Stream<Item = Kept>>>),
}

impl Losses {
    /// Core NATS's other subscription is read first from now on (see [`InTurn`]).
    pub(super) fn turn(&mut self) {
        if let Losses::Core(reports) = self {
            reports.turn();
        }
    }
}

impl Stream for Losses {
    type Item = Kept;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Kept>> {
        match self.get_mut() {
            Losses::Core(reports) => reports.poll_next(cx).map(|m| m.map(|m| (m, None))),
            Losses::Kept(reports) => reports.poll_next_unpin(cx),
        }
    }
}

/// Two streams read in turn: the one that gave the last item is polled first, and the other
/// after [`InTurn::turn`] (the leader's loop turns after each drain, at most `leader::DRAIN`
/// messages). With both backlogged each gets every other drain; with one quiet, it costs a poll
/// a drain, where futures' `Select`, alternating per item, cost 7% of the ingest's thread.
pub(super) struct InTurn<S> {
    /// The one polled first, then the other.
    streams: [S; 2],
}

impl<S: Stream + Unpin> InTurn<S> {
    pub(super) fn new(streams: [S; 2]) -> Self {
        InTurn { streams }
    }

    /// The next item of either; ended when both have (an ended stream stays ended).
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let [first, second] = &mut self.streams;
        match first.poll_next_unpin(cx) {
            Poll::Ready(Some(item)) => Poll::Ready(Some(item)),
            ended => match (second.poll_next_unpin(cx), ended) {
                (Poll::Ready(Some(item)), _) => {
                    self.turn();
                    Poll::Ready(Some(item))
                }
                (Poll::Ready(None), Poll::Ready(None)) => Poll::Ready(None),
                _ => Poll::Pending,
            },
        }
    }

    /// The other stream is polled first from now on.
    pub(super) fn turn(&mut self) {
        self.streams.swap(0, 1);
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
            Losses::Core(InTurn::new([subscribe(loss).await?, tenants_loss]))
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream::{self, BoxStream};

    fn next(streams: &mut InTurn<BoxStream<'static, u32>>) -> Poll<Option<u32>> {
        streams.poll_next(&mut Context::from_waker(futures_util::task::noop_waker_ref()))
    }

    fn take(streams: &mut InTurn<BoxStream<'static, u32>>, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| match next(streams) {
                Poll::Ready(Some(v)) => v,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn two_streams_are_read_in_turn_so_neither_waits_on_the_others_backlog() {
        // Both backlogged: one until a turn, then the other.
        let mut both = InTurn::new([stream::iter(0..1000).boxed(), stream::iter(5000..6000).boxed()]);
        assert_eq!(take(&mut both, 3), [0, 1, 2]);
        both.turn();
        assert_eq!(take(&mut both, 2), [5000, 5001]);
        both.turn();
        assert_eq!(take(&mut both, 1), [3]);
        // The one polled first has nothing: the other's, and it stays first.
        let mut few = InTurn::new([stream::pending().boxed(), stream::iter(5000..5003).boxed()]);
        assert_eq!(take(&mut few, 2), [5000, 5001]);
        // Once one has ended, the other is read alone; ended when both have.
        let mut done = InTurn::new([stream::iter(0..2).boxed(), stream::empty().boxed()]);
        done.turn();
        assert_eq!(take(&mut done, 2), [0, 1]);
        assert_eq!(next(&mut done), Poll::Ready(None));
        // Nothing ready on either, neither ended: pending.
        let mut quiet = InTurn::new([stream::pending().boxed(), stream::empty().boxed()]);
        assert_eq!(next(&mut quiet), Poll::Pending);
    }
}
