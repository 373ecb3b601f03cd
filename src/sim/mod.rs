//! Trace-driven simulator.
