//! `slaq serve`: the live scheduler. [`run`] (in `leader`) takes a connected NATS client and a
//! shutdown future (so tests pass their own), starts the allocator actor and the job-actor
//! threads, and runs the ingest loop (`ingest`) until shutdown. With `[cluster] shared`, every
//! replica also runs a partition owner (`shard`). Both keep their jobs in a `routes::Routes`,
//! the one place that decides what a message does to a job; they keep only their I/O.

pub mod config;
mod connections;
mod curves;
pub mod ended;
mod error;
mod http;
mod ingest;
mod inputs;
pub mod intake;
mod leader;
mod page;
mod replica;
pub mod routes;
pub mod shard;
mod start;
mod status;
mod threads;

pub use config::{Overrides, RawConfig, ServeConfig, StateMode};
pub use connections::Connections;
pub use error::ServiceError;
pub use leader::{ServiceHandle, run};
pub use replica::run_replica;
pub use start::allocator_settings;
