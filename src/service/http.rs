//! The HTTP listener (`[http] listen`): `/metrics` in the Prometheus text format, `/healthz`
//! (the process answers), `/readyz` (connected to NATS, subscriptions confirmed, and an epoch
//! within the last two periods), and the page with its JSON (`page`). With `[http] token`,
//! everything but `/healthz` asks for it.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::page::{PageState, Token, require_token};
use crate::bus::BusCounters;
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    pub bus: Arc<BusCounters>,
    pub durable: Option<crate::bus::durable::Durable>,
    pub client: async_nats::Client,
    pub epoch: Duration,
}

pub fn router(state: HttpState, page: PageState, token: Token) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
        .merge(super::page::routes().with_state(page))
        .layer(axum::middleware::from_fn_with_state(token, require_token))
}

/// A standby replica's listener: `/healthz`, the page (read from the leader over NATS), and
/// 503 on `/readyz` and `/metrics` (the leader's are where it runs).
pub fn standby_router(page: PageState, token: Token) -> Router {
    let standby = || async { (StatusCode::SERVICE_UNAVAILABLE, "not ready: standing by (another replica leads)\n") };
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(standby))
        .route("/metrics", get(standby))
        .merge(super::page::routes().with_state(page))
        .layer(axum::middleware::from_fn_with_state(token, require_token))
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    state.metrics.sync_bus(&state.bus);
    if let Some(d) = &state.durable {
        state.metrics.sync_state(&d.counters(), d.pending());
    }
    let connected = state.client.connection_state() == async_nats::connection::State::Connected;
    state.metrics.nats_connected.set(i64::from(connected));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render())
}

/// Why the scheduler is not ready, if it is not.
fn not_ready(state: &HttpState) -> Option<String> {
    if state.client.connection_state() != async_nats::connection::State::Connected {
        return Some("not connected to NATS".into());
    }
    if state.metrics.ready.get() != 1 {
        return Some("subscriptions not confirmed yet".into());
    }
    let since = state.metrics.since_last_epoch();
    if since > 2 * state.epoch {
        return Some(format!("no epoch for {:.1} s (period {:.1} s)", since.as_secs_f64(), state.epoch.as_secs_f64()));
    }
    None
}

async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    match not_ready(&state) {
        None if state.durable.is_none() => {
            (StatusCode::OK, "ready; state: none (core NATS only: nothing survives a restart)\n".to_string())
        }
        None => (StatusCode::OK, "ready; state: jetstream\n".to_string()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}
