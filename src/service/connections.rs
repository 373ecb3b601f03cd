//! The scheduler's NATS connections.

use std::sync::Arc;

use super::{ServeConfig, StateMode};
use crate::bus::{BusCounters, BusError, NatsAuth};

/// The scheduler's two NATS connections. `bus` talks with jobs, workers and operators: it
/// receives their messages, publishes allocations and assignments, and answers requests, on
/// inbox subjects only. `state` does every JetStream and key-value operation and reads the
/// reports stream. Under `deploy/nats/slaq-auth.conf` they are users of two accounts, so no
/// reply subject a client chooses, and no acknowledgement JetStream sends on one, can reach the
/// scheduler's state or lease.
#[derive(Clone)]
pub struct Connections {
    pub bus: async_nats::Client,
    pub state: async_nats::Client,
    /// The leases (`[ha]`): the state connection's user on a connection of its own, so that
    /// a renewal never waits behind bulk state traffic (the server handles one connection's
    /// requests in order; a takeover's consumer on a large bucket held it up for seconds).
    pub lease: async_nats::Client,
    /// The connections' events.
    pub counters: Arc<BusCounters>,
}

impl Connections {
    /// One connection for both (benchmarks, tests, a server without accounts).
    pub fn single(client: async_nats::Client, counters: Arc<BusCounters>) -> Self {
        Connections { bus: client.clone(), state: client.clone(), lease: client, counters }
    }

    /// Connects both as `config` says (the state connection only with durable state).
    pub async fn connect(config: &ServeConfig) -> Result<Self, BusError> {
        let counters = Arc::new(BusCounters::default());
        let connect = |name: String, auth: NatsAuth, capacity: usize| {
            let counters = counters.clone();
            async move { crate::bus::connect_counting(&config.nats_urls, &name, capacity, &auth, counters).await }
        };
        let bus = connect(config.client_name.clone(), config.nats_auth.clone(), config.subscription_capacity).await?;
        // The state connection's subscriptions are JetStream's answers and the reports
        // stream: never fewer than the default buffer, whatever the bus's.
        let state_capacity = config.subscription_capacity.max(STATE_SUBSCRIPTION_CAPACITY);
        let state = match config.state_mode {
            StateMode::None => bus.clone(),
            _ => connect(format!("{}-state", config.client_name), config.state_auth.clone(), state_capacity).await?,
        };
        let lease = match config.ha {
            Some(_) => {
                connect(format!("{}-lease", config.client_name), config.state_auth.clone(), LEASE_SUBSCRIPTION_CAPACITY)
                    .await?
            }
            None => state.clone(),
        };
        Ok(Connections { bus, state, lease, counters })
    }
}

/// The lease connection's subscription buffer (its requests' answers only).
const LEASE_SUBSCRIPTION_CAPACITY: usize = 1024;

/// The smallest subscription buffer of the state connection.
const STATE_SUBSCRIPTION_CAPACITY: usize = 65_536;
