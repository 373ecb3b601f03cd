//! The wire contract, version 1 (see `docs/reference.md`). Pure: no I/O.
//!
//! - `subjects`: subject names and ids.
//! - `messages`: the message types of jobs and workers, each with its validation.
//! - `control`: what operators read: status, how jobs ended, epoch summaries.
//! - `codec`: MessagePack (named fields) or JSON; `report_reader`, a loss report read from
//!   MessagePack without serde where it has the common shape (the ingest's hot path).
//! - `errors`: `RejectCause` (what the counters count) and `ProtocolError`.
//! - `inbound`: a received subject and payload, parsed and validated into an `Inbound`.
//! - `partition`: what replicas that share the jobs send each other (`PartitionBids`, `WireBid`).

mod codec;
mod control;
mod errors;
mod inbound;
mod messages;
mod partition;
mod report_reader;
mod subjects;

pub use codec::{Encoding, decode, decode_borrowed, encode};
pub use control::*;
pub use errors::{ProtocolError, RejectCause};
pub use inbound::{DEFAULT_TENANT, Inbound, InboundLimits, Tenants, inbound};
pub use messages::*;
/// Sample partition messages for the tests of their receivers (`service::intake`).
#[cfg(test)]
pub(crate) use partition::tests as partition_samples;
pub use partition::{PartitionBids, WireBid, chunks};
pub use subjects::{Kind, MAX_ID_LEN, MAX_REPLY_LEN, Subjects, tenant_of, valid_id, valid_job_id, valid_reply};
