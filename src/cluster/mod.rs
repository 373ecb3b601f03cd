//! Deep-learning jobs on machines with slots: the second and third systems behind slaq, pure.
//!
//! - `trace`: the measured job model of the Pollux traces (the simulator's ground truth).
//! - `model`: what the scheduler learns about a job (Pollux's iteration-time model, fitted from
//!   its reports; statistical efficiency from its gradient statistics) and Courier's batch rule.
//! - `place`: which machines a job's slots go on (Yu et al.'s LP rounding, best-fit greedy,
//!   baselines, exact search).
//! - `ranks`: the ranks, world and rendezvous port of each generation of a job's processes.

pub mod bench;
pub mod model;
pub mod place;
pub mod ranks;
pub mod trace;
