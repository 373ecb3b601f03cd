//! `slaq serve` with `[ha] enabled`: a replica that stands by until it holds the leader's
//! lease (`bus::lease`), then runs the scheduler ([`super::run`]) restored from the durable
//! state, with the lease's term on every assignment, until the lease is lost or it is told to
//! stop. A deposed leader stops its scheduler (no more epochs) and stands by again.
//!
//! Timing, with lease `L`: the leader renews every `L/4` and gives up after `L/2` without a
//! renewal; the key expires `L` after its last write, so a standby takes over between `L` and
//! `L + L/4` after the leader's last renewal, and the old leader has stopped by then unless its
//! clock runs `L/2` slow. Workers ignore an older term in any case.

use std::future::Future;
use std::time::Instant;

use tracing::{info, warn};

use super::{Connections, ServeConfig, ServiceError, run};
use crate::bus::lease::{Fence, Held, Lease};

/// Runs a replica until `shutdown`. `config.ha` must be set. With `[cluster] shared` it also
/// runs its share of the jobs (`shard::run_owner`), leader or not.
pub async fn run_replica(
    clients: Connections,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    if config.durable.partitions.is_none() {
        return lead_or_stand_by(clients, config, shutdown).await;
    }
    let shutdown = futures_util::FutureExt::shared(Box::pin(shutdown));
    let (led, owned) = tokio::join!(
        lead_or_stand_by(clients.clone(), config.clone(), shutdown.clone()),
        super::shard::run_owner(clients, config, shutdown)
    );
    led.and(owned)
}

async fn lead_or_stand_by(
    clients: Connections,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    let Some(ha) = config.ha.clone() else {
        return run(clients, config, shutdown, |_| {}).await;
    };
    let every = ha.lease / 4;
    tokio::pin!(shutdown);
    // JetStream may not be up yet (a cluster still electing its leaders): wait for it.
    let lease = loop {
        match Lease::open(&clients.lease, config.subjects.prefix(), &ha.replica, ha.lease, config.durable.replicas)
            .await
        {
            Ok(lease) => break lease,
            Err(e) => warn!(error = %e, "cannot open the lease bucket yet; retrying"),
        }
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(ha.lease) => {}
        }
    };
    info!(replica = %ha.replica, lease = ?ha.lease, "standing by for the leader's lease");
    loop {
        let standby = Standby::serve(&clients, &config).await;
        let (held, fence) = loop {
            let sent = Instant::now();
            match lease.try_acquire().await {
                Ok(Some(held)) => break (held, Fence::held(sent, lease.ttl() / 2)),
                Ok(None) => {}
                Err(e) => warn!(error = %e, "cannot reach the lease"),
            }
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = tokio::time::sleep(every) => {}
            }
        };
        // The scheduler binds the listener's address itself while it leads.
        if let Some(standby) = standby {
            standby.stop();
        }
        info!(replica = %ha.replica, term = held.term, "leader: starting the scheduler");
        match lead(&clients, &config, &lease, held, fence, &mut shutdown).await {
            Led::Stopped => return Ok(()),
            Led::Deposed => warn!(replica = %ha.replica, "lost the lease: scheduler stopped, standing by"),
            Led::Failed => warn!(replica = %ha.replica, "gave the lease back: standing by"),
        }
    }
}

/// A standby replica's HTTP listener (`[http] listen`): `/healthz`, the page and its JSON read
/// from the leader over NATS (so any replica serves the whole cluster), 503 on `/readyz` and
/// `/metrics`. Stopped while this replica leads.
struct Standby {
    stop: tokio::sync::oneshot::Sender<()>,
    epochs: tokio::task::JoinHandle<()>,
}

impl Standby {
    async fn serve(clients: &Connections, config: &ServeConfig) -> Option<Standby> {
        let addr = config.http_listen?;
        let bus = super::page::Bus::new(clients.bus.clone(), config.subjects.clone());
        let (bus, epochs) = match bus.watching_epochs().await {
            Ok(watching) => watching,
            Err(e) => {
                warn!(error = %e, "cannot watch the leader's epochs; no standby page");
                return None;
            }
        };
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
        let page = super::page::PageState::new(metrics, config.epoch, config.horizon_s, bus);
        let app = super::http::standby_router(page, super::start::token(config));
        match super::start::listen(config, addr, app).await {
            Ok((_, stop)) => Some(Standby { stop, epochs }),
            Err(e) => {
                warn!(error = %e, "cannot listen while standing by");
                epochs.abort();
                None
            }
        }
    }

    /// Stops the listener (the leader's own binds the address, trying again while it is let
    /// go) and the epochs' watch.
    fn stop(self) {
        let _ = self.stop.send(());
        self.epochs.abort();
    }
}

enum Led {
    /// Told to stop (the lease was given back).
    Stopped,
    /// The lease was lost or could not be renewed in time.
    Deposed,
    /// The scheduler ended by itself (it could not start, or failed); the lease was given back.
    Failed,
}

async fn lead(
    clients: &Connections,
    config: &ServeConfig,
    lease: &Lease,
    held: Held,
    fence: Fence,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Led {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let config = ServeConfig { term: Some(held.term), fence: fence.clone(), ..config.clone() };
    let service = run(
        clients.clone(),
        config,
        async move {
            let _ = stop_rx.await;
        },
        |_| {},
    );
    tokio::pin!(service);
    // The renewals run on a task of their own: a scheduler busy with a burst (a million
    // workers saying hello) neither delays a renewal nor waits for one.
    let (stop_renewing, renewing_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut renewer = tokio::spawn(keep_lease(lease.clone(), held, fence.clone(), renewing_stopped));
    let led = tokio::select! {
        result = &mut service => {
            // The scheduler ended by itself (it could not start, or failed): give the lease
            // back for another replica, and stand by again a little later.
            if let Err(e) = result {
                warn!(error = %e, "the scheduler failed; giving the lease back");
            }
            fence.depose();
            give_back(lease, stop_renewing, renewer).await;
            tokio::time::sleep(lease.ttl()).await;
            return Led::Failed;
        }
        _ = shutdown.as_mut() => Led::Stopped,
        _ = &mut renewer => Led::Deposed,
    };
    if matches!(led, Led::Deposed) {
        fence.depose();
    }
    let _ = stop_tx.send(());
    if let Err(e) = service.await {
        warn!(error = %e, "the scheduler stopped with an error");
    }
    if matches!(led, Led::Stopped) {
        give_back(lease, stop_renewing, renewer).await;
    }
    led
}

/// Stops the renewals and gives the lease back, if they still held it.
async fn give_back(
    lease: &Lease,
    stop_renewing: tokio::sync::oneshot::Sender<()>,
    renewer: tokio::task::JoinHandle<Option<Held>>,
) {
    let _ = stop_renewing.send(());
    if let Ok(Some(held)) = renewer.await {
        lease.release(held).await;
    }
}

/// Renews the leader's lease every quarter lease until `stop` (then returns the lease still
/// held) or until it is lost: taken by another, or not renewed for half a lease, when the fence
/// closes by itself (a process paused past it acts on nothing when it resumes). Returns `None`
/// when lost.
async fn keep_lease(
    lease: Lease,
    mut held: Held,
    fence: Fence,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Option<Held> {
    let every = lease.ttl() / 4;
    let mut renew = tokio::time::interval(every);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return Some(held),
            _ = renew.tick() => {}
        }
        if !fence.holds() {
            return None;
        }
        let sent = Instant::now();
        match tokio::time::timeout(every, lease.renew(held)).await {
            Ok(Ok(Some(next))) => {
                held = next;
                fence.renewed(sent, lease.ttl() / 2);
            }
            Ok(Ok(None)) => return None,
            Ok(Err(e)) => warn!(error = %e, "lease renewal failed"),
            Err(_) => warn!("lease renewal timed out"),
        }
        if !fence.holds() {
            return None;
        }
    }
}
