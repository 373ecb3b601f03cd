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
use std::sync::Arc;
use std::time::Instant;

use tracing::{info, warn};

use super::{ServeConfig, ServiceError, run};
use crate::bus::BusCounters;
use crate::bus::lease::{Held, Lease};

/// Runs a replica until `shutdown`. `config.ha` must be set.
pub async fn run_replica(
    client: async_nats::Client,
    counters: Arc<BusCounters>,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    let Some(ha) = config.ha.clone() else {
        return run(client, counters, config, shutdown, |_| {}).await;
    };
    let every = ha.lease / 4;
    tokio::pin!(shutdown);
    // JetStream may not be up yet (a cluster still electing its leaders): wait for it.
    let lease = loop {
        match Lease::open(&client, config.subjects.prefix(), &ha.replica, ha.lease, config.durable.replicas).await {
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
        let held = loop {
            match lease.try_acquire().await {
                Ok(Some(held)) => break held,
                Ok(None) => {}
                Err(e) => warn!(error = %e, "cannot reach the lease"),
            }
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = tokio::time::sleep(every) => {}
            }
        };
        info!(replica = %ha.replica, term = held.term, "leader: starting the scheduler");
        match lead(&client, &counters, &config, &lease, held, &mut shutdown).await {
            Led::Stopped => return Ok(()),
            Led::Deposed => warn!(replica = %ha.replica, "lost the lease: scheduler stopped, standing by"),
            Led::Failed => warn!(replica = %ha.replica, "gave the lease back: standing by"),
        }
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
    client: &async_nats::Client,
    counters: &Arc<BusCounters>,
    config: &ServeConfig,
    lease: &Lease,
    mut held: Held,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Led {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let config = ServeConfig { term: Some(held.term), ..config.clone() };
    let service = run(
        client.clone(),
        counters.clone(),
        config,
        async move {
            let _ = stop_rx.await;
        },
        |_| {},
    );
    tokio::pin!(service);
    let every = lease.ttl() / 4;
    let mut renew = tokio::time::interval(every);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewed = Instant::now();
    let led = loop {
        tokio::select! {
            result = &mut service => {
                // The scheduler ended by itself (it could not start, or failed): give the lease
                // back for another replica, and stand by again a little later.
                if let Err(e) = result {
                    warn!(error = %e, "the scheduler failed; giving the lease back");
                }
                lease.release(held).await;
                tokio::time::sleep(lease.ttl()).await;
                return Led::Failed;
            }
            _ = shutdown.as_mut() => break Led::Stopped,
            _ = renew.tick() => {
                match tokio::time::timeout(every, lease.renew(held)).await {
                    Ok(Ok(Some(next))) => {
                        held = next;
                        renewed = Instant::now();
                    }
                    Ok(Ok(None)) => break Led::Deposed,
                    Ok(Err(e)) => warn!(error = %e, "lease renewal failed"),
                    Err(_) => warn!("lease renewal timed out"),
                }
                if renewed.elapsed() >= lease.ttl() / 2 {
                    break Led::Deposed;
                }
            }
        }
    };
    let _ = stop_tx.send(());
    if let Err(e) = service.await {
        warn!(error = %e, "the scheduler stopped with an error");
    }
    if matches!(led, Led::Stopped) {
        lease.release(held).await;
    }
    led
}
