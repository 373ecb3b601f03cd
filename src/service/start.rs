//! What a start opens: the durable state, the HTTP listener, the term, and the allocator.

use std::net::SocketAddr;

use actix::prelude::*;
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::{info, warn};

use super::{ServeConfig, ServiceError, StateMode, http};
use crate::actors::allocator::{AllocatorActor, AllocatorSettings};
use crate::bus::Publisher;
use crate::bus::durable::Durable;
use crate::protocol::EndReason;

/// The durable state, as `state_mode` asks: JetStream when the server has it (`auto`), required
/// (`jetstream`), or none.
pub(super) async fn open_state(
    state_client: &async_nats::Client,
    config: &ServeConfig,
) -> Result<Option<Durable>, ServiceError> {
    // A server whose INFO says it has JetStream but does not answer the state connection has
    // refused it (credentials, account, permissions): never a reason to run without durable
    // state. Read after the attempt: the client has the server's INFO once it is connected.
    let server_has_jetstream = || state_client.server_info().jetstream;
    Ok(match config.state_mode {
        StateMode::None => {
            info!("state.mode = none: core NATS only (at most once; nothing survives a restart)");
            None
        }
        mode => match Durable::open(state_client, &config.subjects, &config.durable, config.fence.clone()).await {
            Ok(Some(durable)) => Some(durable),
            Ok(None) if server_has_jetstream() => {
                return Err(ServiceError::StateRefused {
                    user: config.state_auth.user.clone().unwrap_or_else(|| "(no user)".into()),
                    detail: "its JetStream API did not answer the state connection".into(),
                });
            }
            Err(e) => return Err(e.into()),
            Ok(None) if mode == StateMode::JetStream => return Err(ServiceError::NoJetStream),
            Ok(None) => {
                warn!(
                    "the NATS server has no JetStream: core NATS only (at most once; nothing survives a restart); \
                     state.mode = \"none\" says so on purpose, \"jetstream\" refuses to start without it"
                );
                None
            }
        },
    })
}

/// The HTTP listener serving `app` on `config`'s `[http] listen`: the address bound, and the
/// sender that stops it. A replica binds an address it may have just let go (a standby's
/// listener, or a deposed leader's): with `[ha]` a taken address is tried again for 5 s.
pub(super) async fn listen(
    config: &ServeConfig,
    addr: SocketAddr,
    app: axum::Router,
) -> Result<(SocketAddr, tokio::sync::oneshot::Sender<()>), ServiceError> {
    if config.http_token.is_none() && !addr.ip().is_loopback() {
        warn!(%addr, "the page and /metrics are served past loopback without a token ([http] token)");
    }
    let mut tries = if config.ha.is_some() { 50 } else { 1 };
    let listener = loop {
        tries -= 1;
        match tokio::net::TcpListener::bind(addr).await {
            Err(_) if tries > 0 => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            bound => break bound.map_err(|source| ServiceError::Http { addr, source })?,
        }
    };
    let bound = listener.local_addr().map_err(|source| ServiceError::Http { addr, source })?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = stop_rx.await;
        });
        if let Err(e) = server.await {
            warn!(error = %e, "HTTP listener failed");
        }
    });
    info!(addr = %bound, "serving the page (/), /metrics, /healthz and /readyz");
    Ok((bound, stop_tx))
}

/// The page's token, as `[http] token` sets it.
pub(super) fn token(config: &ServeConfig) -> super::page::Token {
    super::page::Token(config.http_token.as_deref().map(std::sync::Arc::from))
}

/// What the allocator needs of the configuration, with the term its assignments carry.
pub fn allocator_settings(config: &ServeConfig, term: Option<u64>) -> AllocatorSettings {
    AllocatorSettings {
        epoch: config.epoch,
        policy: config.policy,
        plan: config.plan,
        place: config.place,
        worker_timeout: config.worker_timeout,
        stale_job: config.stale_job,
        stall_timeout: config.stall_timeout,
        min_generation: config.min_generation,
        save_wait_max: config.save_wait_max,
        rendezvous: config.rendezvous,
        restart_amortisation: config.restart_amortisation,
        bid_horizon_s: config.horizon_s,
        completion_weight: config.completion_weight,
        tenants: config.tenants.clone(),
        term,
        replica: config.ha.as_ref().map(|ha| ha.replica.clone()),
    }
}

/// The HTTP listener, if `[http] listen` asks for one: where it is bound, what stops it, and
/// where the page finds the allocator once it runs.
pub(super) struct Http {
    pub addr: Option<SocketAddr>,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub allocator: std::sync::Arc<std::sync::OnceLock<Addr<AllocatorActor>>>,
}

/// Binds the HTTP listener (before anything else that may fail later: a taken port fails the
/// start rather than a scrape).
pub(super) async fn http(
    config: &ServeConfig,
    metrics: &std::sync::Arc<crate::metrics::Metrics>,
    bus: &std::sync::Arc<crate::bus::BusCounters>,
    durable: Option<&Durable>,
    client: &async_nats::Client,
) -> Result<Http, ServiceError> {
    let page = super::page::PageState::new(
        metrics.clone(),
        config.epoch,
        config.horizon_s,
        super::page::Bus::new(client.clone(), config.subjects.clone()),
    );
    let allocator = page.allocator.clone();
    let Some(addr) = config.http_listen else { return Ok(Http { addr: None, stop: None, allocator }) };
    let state = http::HttpState {
        metrics: metrics.clone(),
        bus: bus.clone(),
        durable: durable.cloned(),
        client: client.clone(),
        epoch: config.epoch,
    };
    let (bound, stop) = listen(config, addr, http::router(state, page, token(config))).await?;
    Ok(Http { addr: Some(bound), stop: Some(stop), allocator })
}

/// The term assignments carry: the configured one, or the durable state's next incarnation
/// (none without durable state).
pub(super) async fn term(config: &ServeConfig, durable: Option<&Durable>) -> Result<Option<u64>, ServiceError> {
    let term = match (config.term, durable) {
        (Some(term), _) => Some(term),
        (None, Some(d)) => Some(d.incarnation().await?),
        (None, None) => None,
    };
    info!(term = ?term, "assignments carry this term");
    if let (Some(d), Some(term)) = (durable, term) {
        d.set_term(term);
    }
    Ok(term)
}

/// The allocator on a thread of its own (an epoch, hundreds of ms at a million workers, must
/// not hold up the ingest loop, status answers or the lease's renewal), and where it sends the
/// submitted jobs it ends (restarts used up) to be ended by the ingest loop.
pub(super) fn allocator(
    client: &async_nats::Client,
    config: &ServeConfig,
    term: Option<u64>,
    metrics: &std::sync::Arc<crate::metrics::Metrics>,
    durable: Option<&Durable>,
) -> (Arbiter, Addr<AllocatorActor>, UnboundedReceiver<(String, EndReason)>) {
    let publisher = Publisher::new(client.clone(), config.subjects.clone()).fenced(config.fence.clone());
    let settings = allocator_settings(config, term);
    let (ending_tx, ending) = tokio::sync::mpsc::unbounded_channel();
    let thread = Arbiter::new();
    let (metrics, durable, fence) = (metrics.clone(), durable.cloned(), config.fence.clone());
    let allocator = AllocatorActor::start_in_arbiter(&thread.handle(), move |_| {
        AllocatorActor::new(settings, publisher, metrics, durable).fenced(fence).ending_to(ending_tx)
    });
    (thread, allocator, ending)
}

/// Where the reports stream ended when this scheduler started (0: none is read here): a
/// message up to it, read again (a replay), registers no job.
pub(super) async fn replay_until(config: &ServeConfig, durable: Option<&Durable>) -> Result<u64, ServiceError> {
    Ok(match durable {
        Some(d) if config.durable.partitions.is_none() => d.last_sequence().await?,
        _ => 0,
    })
}
