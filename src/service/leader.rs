//! The leader's start and loop: the allocator, the subscriptions, and the ingest loop.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix::prelude::*;
use async_nats::Message;
use futures_util::{Stream, StreamExt};
use tracing::info;

use super::ingest::{self, Ingest};
use super::inputs::Kept;
use super::routes::{LogOnce, Routes};
use super::threads::{Arrival, JobThreads};
use super::{Connections, ServeConfig, ServiceError, inputs, intake, start};
use crate::actors::allocator::{AllocatorActor, RecentEpochs, StopAllocator};
use crate::bus::durable::SavedState;
use crate::metrics::Metrics;
use crate::protocol::EpochSummary;

/// Handles for code that runs the service in process (benchmarks, tests).
#[derive(Clone)]
pub struct ServiceHandle {
    pub allocator: Addr<AllocatorActor>,
    pub metrics: Arc<Metrics>,
    /// Where the HTTP listener is bound (with port 0 in the settings, the port it got).
    pub http_addr: Option<SocketAddr>,
    /// The scheduler's NATS connections' events (disconnects, messages dropped).
    pub bus: Arc<crate::bus::BusCounters>,
}

impl ServiceHandle {
    pub async fn epochs(&self) -> Vec<EpochSummary> {
        self.allocator.send(RecentEpochs(usize::MAX)).await.unwrap_or_default()
    }

    /// Loss points observed by all job actors together (asks each, like an epoch's bids).
    pub async fn observed_points(&self) -> u64 {
        self.allocator.send(crate::actors::allocator::CountPoints).await.unwrap_or(0)
    }
}

/// Runs the scheduler until `shutdown` completes. Must be called inside an actix `System`.
/// `on_ready` receives handles once the subscriptions are in place.
pub async fn run(
    clients: Connections,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
    on_ready: impl FnOnce(ServiceHandle),
) -> Result<(), ServiceError> {
    let Connections { bus: client, state: state_client, counters, .. } = clients;
    let metrics = Arc::new(Metrics::new());
    let durable = start::open_state(&state_client, &config).await?;
    // Bound first, so a taken port fails the start rather than a scrape later.
    let http = start::http(&config, &metrics, &counters, durable.as_ref(), &client).await?;
    let saved = match &durable {
        Some(d) => d.load().await?,
        None => SavedState::default(),
    };
    let term = start::term(&config, durable.as_ref()).await?;
    let (allocator_thread, allocator, mut ending) =
        start::allocator(&client, &config, term, &metrics, durable.as_ref());
    let _ = http.allocator.set(allocator.clone());
    let replay_until = start::replay_until(&config, durable.as_ref()).await?;
    let (mut losses, mut messages) = inputs::subscribe(&client, &config, durable.as_ref()).await?;
    let mut owner_bids = inputs::owner_bids(&state_client, &config).await?;
    let mut curves = crate::bus::subscribe(&client, config.subjects.ctl_curve_all()).await?;
    inputs::confirm(&client, &metrics).await;
    info!(prefix = config.subjects.prefix(), policy = ?config.policy, epoch_ms = config.epoch.as_millis() as u64, "slaq scheduler serving");
    let (allocator_addr, bus, http_addr) = (allocator.clone(), counters.clone(), http.addr);
    on_ready(ServiceHandle { allocator: allocator_addr, metrics: metrics.clone(), http_addr, bus });
    let mut ingest = Ingest {
        client,
        state_client,
        durable,
        term,
        own_inboxes: ingest::own_inboxes(&config),
        last_stream_seq: 0,
        replay_until,
        routes: Routes::for_config(&config),
        threads: JobThreads::new(config.job_threads),
        intake: config.durable.partitions.map(intake::Intake::new),
        config,
        allocator: allocator.clone(),
        report_counters: ingest::report_counters(&metrics),
        metrics,
        log: LogOnce::new(Duration::from_secs(10)),
        bus: counters,
    };
    ingest.restore(saved);
    tokio::pin!(shutdown);
    let mut sweep = tokio::time::interval(sweep_every(&ingest.config));
    loop {
        let mut first = None;
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = sweep.tick() => ingest.sweep(),
            Some((job, reason)) = ending.recv() => ingest.end_job(&job, reason, None),
            message = losses.next() => match message {
                Some(kept) => first = Some(kept),
                None => break,
            },
            message = messages.next() => match message {
                Some(message) => first = Some((message, None)),
                None => break,
            },
            Some(message) = owner_bids.next() => ingest.owner_bids(message),
            Some(message) = curves.next() => ingest.curve(message),
        }
        drain(&mut ingest, first, &mut losses, &mut messages).await;
        losses.turn();
    }
    info!("slaq scheduler stopping");
    allocator.do_send(StopAllocator);
    if let Some(stop) = http.stop {
        let _ = stop.send(());
    }
    ingest.stop().await;
    allocator_thread.stop();
    Ok(())
}

/// Messages already received that the loop handles one after another before it polls its
/// other inputs again (its shutdown, sweep and ended jobs wait at most this many). A poll of
/// every branch per message held `slaq bench ingest` at 0.56 of raw NATS; draining, 0.67
/// (issue #44, `benches/runs/2026-11-27-issue44-ingest-drain.txt`).
pub(super) const DRAIN: usize = 255;

/// Handles `first` and the messages already received after it (at most `DRAIN` in all) before
/// the loop polls its other branches again, in the loop's order: the reports stream's first,
/// then the core subscriptions' (so a bye kept by the stream is read before a hello that
/// follows it). The clocks are read once for the lot, and again after anything that waited.
/// A report is handled without a future of its own (`Ingest::handle` waits for nothing); the
/// rare waits are boxed, so this loop's state stays small.
async fn drain<L, M>(ingest: &mut Ingest, first: Option<Kept>, losses: &mut L, messages: &mut M)
where
    L: Stream<Item = Kept> + Unpin,
    M: Stream<Item = Message> + Unpin,
{
    let mut arrival = Arrival::now();
    let mut next = first;
    // Polled without waking: the loop's `select!` polls them with its waker once this returns.
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    for _ in 0..DRAIN {
        let Some((message, seq)) = next.take().or_else(|| ready(losses, messages, &mut cx)) else { break };
        // The message is never held across a wait (it would be copied into this future).
        let waiting: Option<Wait<'_>> = match seq.filter(|&s| ingest.gap_before(s)) {
            Some(seq) => Some(Box::pin(ingest.after_gap(message, seq))),
            None => ingest.handle(&message, seq, arrival).map(|waiting| Box::pin(ingest.finish(waiting)) as _),
        };
        if let Some(wait) = waiting {
            wait.await;
            arrival = Arrival::now();
        }
    }
}

/// What a message handled in the drain left to wait for (rare: boxed, so the drain stays small).
type Wait<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// The next message already received: a report first, then the rest.
fn ready<L, M>(losses: &mut L, messages: &mut M, cx: &mut Context<'_>) -> Option<Kept>
where
    L: Stream<Item = Kept> + Unpin,
    M: Stream<Item = Message> + Unpin,
{
    match losses.poll_next_unpin(cx) {
        Poll::Ready(Some(kept)) => Some(kept),
        _ => match messages.poll_next_unpin(cx) {
            Poll::Ready(Some(message)) => Some((message, None)),
            _ => None,
        },
    }
}

/// How often the jobs are swept: a quarter of the shortest silence rule, within 50 ms to 5 s.
fn sweep_every(config: &ServeConfig) -> Duration {
    let shortest = [config.idle_job_timeout, config.stale_job].into_iter().flatten().min();
    shortest.map_or(Duration::from_secs(5), |t| (t / 4).clamp(Duration::from_millis(50), Duration::from_secs(5)))
}
