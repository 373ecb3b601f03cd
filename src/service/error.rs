//! Why the scheduler cannot start.

use std::net::SocketAddr;

use crate::bus::BusError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot listen for HTTP on {addr}")]
    Http { addr: SocketAddr, source: std::io::Error },
    #[error(
        "the NATS server has JetStream but the state connection (user {user}) cannot use it: {detail}. \
         Give that user publish on $JS.API.> and its inbox in the state account (config [nats.state_auth], \
         SLAQ_STATE_NATS_*), or run without durable state on purpose: state.mode = \"none\" \
         (SLAQ_STATE_MODE=none)"
    )]
    StateRefused { user: String, detail: String },
    #[error("state.mode is jetstream but the NATS server has no JetStream")]
    NoJetStream,
}
