//! Quality prediction: curve families and their weighted fits, the iteration-time model, and
//! the per-job predictor that turns a loss history into the gain curve `g(w)` a job bids.
//!
//! Pure code: no I/O, no clock (time and iteration numbers are arguments), no async runtime.

pub mod curve;
pub mod eval;
pub mod history;
pub mod predictor;
pub mod runtime;
pub mod speeds;

pub use curve::{Curve, Family};
pub use predictor::{Candidate, GainCurve, JobPredictor, Model, Objective, ObserveError, PredictorConfig};
pub use runtime::{IterTimeModel, TimeCurve, TimePrior};
