//! slaq: a quality-driven scheduler for iterative ML training jobs, after SLAQ (SoCC 2017).
//!
//! The pure core ([`quality`], [`policy`]) predicts each job's loss reduction and decides how
//! many workers each job gets; the simulator ([`sim`]) runs that very code on recorded loss
//! curves. See `ARCHITECTURE.md` for the map and its invariants.

pub mod actors;
pub mod agent;
pub mod bus;
pub mod cluster;
pub mod emulate;
pub mod metrics;
pub mod partition;
pub mod policy;
pub mod protocol;
pub mod quality;
pub mod schedule;
pub mod service;
pub mod settings;
pub mod sim;
pub mod trace;
