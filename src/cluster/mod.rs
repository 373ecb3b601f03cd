//! Deep-learning jobs on machines with slots: the second and third systems behind slaq, pure.
//!
//! - `trace`: the measured job model of the Pollux traces (the simulator's ground truth).
//! - `model`: what the scheduler learns about a job (Pollux's iteration-time model, fitted from
//!   its reports; statistical efficiency from its gradient statistics) and Courier's batch rule.
//! - `place`: which machines a job's slots go on (Yu et al.'s LP rounding, best-fit greedy,
//!   baselines, exact search).
//! - `planner`: one epoch's decision for such jobs (counts by the SLAQ greedy on locality- and
//!   batch-aware gains, then placement with few moves, then batch sizes).
//! - `ranks`: the ranks, world and rendezvous port of each generation of a job's processes.

pub mod bench;
pub mod model;
pub mod place;
pub mod planner;
pub mod ranks;
pub mod trace;
