//! The simulators: the live scheduler's pure core ([`crate::quality`], [`crate::schedule`])
//! driven offline, in virtual time. No network, no clock: a run is a pure function of its inputs
//! and seed.
//!
//! - [`curves`]: recorded loss curves (`slaq simulate`), the quality metrics of SLAQ.
//! - [`pollux`]: Pollux's deep-learning workloads on its measured traces
//!   (`slaq simulate --pollux-workload`), job completion times against the published schedulers.
//! - [`parallel`]: the one runner both use to run many runs at once.

pub mod curves;
pub mod gavel;
pub mod parallel;
pub mod pollux;
pub mod teams;
