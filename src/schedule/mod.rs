//! The epoch planner: [`plan_epoch`] is one pure function for one epoch's whole decision, and
//! `sim::curves::engine`, `sim::pollux` and the live allocator (`actors::allocator`) all call it, so the
//! live scheduler takes exactly the decisions the simulators measured.
//!
//! - [`bid`]: what a job bids (its gains per worker count, from its model).
//! - [`slowdown`]: the finish-time bound: no job planned to end more than `K`× later than fair.
//! - [`counts`]: the bound, the fairness floor, then the policy, then allowed sizes: workers per job.
//! - [`place`]: counts to concrete workers, with locality where machines have several slots.
//! - [`batch`]: Courier's batch and a parameter-server job's roles on the layout chosen.
//! - [`saves`]: when a change of a job's workers waits for its next checkpoint.
//! - [`tenants`]: teams: each tenant's workers (guarantee, borrowing by weight, lending limits).
//! - [`epoch`]: [`plan_epoch`], the four in order.

pub mod batch;
pub mod bid;
pub mod counts;
pub mod epoch;
pub mod finish;
pub mod job;
pub mod place;
pub mod saves;
pub mod slowdown;
pub mod tenants;
pub mod typed;
pub mod water;

pub use batch::{batch_for, batch_to_run};
pub use bid::{GainTable, bid_horizon, concave_hull, gains, make_bid, rates, restart_factor, restart_priced};
pub use counts::{
    DEFAULT_FLOOR, DEFAULT_MAX_SLOWDOWN, FloorLedger, PlanSettings, fair_shares, honoured_minimums, plan,
    restrict_sizes,
};
pub use epoch::{EpochInput, EpochJob, EpochPlan, Tenancy, Types, plan_epoch};
pub use finish::{
    DEFAULT_COMPLETION_WEIGHT, Finish, Finishing, hesrpt_shares, hesrpt_weights, predicted_remaining, share_done,
    speedup_exponent,
};
pub use job::{JobModel, iter_time, ps_split, seen_batches};
pub use place::{LP_MAX_JOBS, PlaceSettings, Placer};
pub use saves::Saves;
pub use slowdown::{Pace, PaceLedger};
pub use tenants::{Quotas, TenantShare, quotas};
