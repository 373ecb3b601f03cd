//! The actors of the live scheduler: thin shells that own state and call the pure code in
//! `quality` and `policy`. One file per concern.

pub mod allocator;
pub mod bid;
pub mod job;
pub mod registry;
pub mod tenants;
pub mod types;
