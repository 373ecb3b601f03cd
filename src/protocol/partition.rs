//! What the replicas that share the jobs (`[cluster] shared`, issue #19) send each other: a
//! partition owner's [`PartitionBids`] to the leader (`<prefix>.v1.ctl.bids.<p>`, MessagePack),
//! each job's bid as a [`WireBid`]. Checked whole on receipt (`PartitionBids::decode`), cut to fit
//! a message on sending (`chunks`).

use serde::{Deserialize, Serialize};

use super::{Encoding, Outcome, ProtocolError, RejectCause, decode, encode, valid_id};
use crate::quality::GainCurve;
use crate::schedule::JobModel;

/// A job's bid (`actors::bid::Bid`) as a replica sends it to the leader (issue #19): everything the planner and
/// `status` read, nothing derived. The leader tabulates the gains as the job actor does, so a bid
/// that crossed the wire plans exactly as the one that did not (`tests/it/partitions.rs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireBid {
    pub model: JobModel,
    pub min_workers: u32,
    pub max_workers: u32,
    pub gain: Option<GainCurve>,
    #[serde(default)]
    pub last_iter: Option<u64>,
    #[serde(default)]
    pub last_loss: Option<f64>,
    #[serde(default)]
    pub predicted_gain: Option<f64>,
    pub points: u64,
    #[serde(default)]
    pub generation: Option<u64>,
    #[serde(default)]
    pub sizes: Option<Vec<u32>>,
    #[serde(default)]
    pub checkpoint_age_s: Option<f64>,
    #[serde(default)]
    pub max_iters: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speeds: Option<std::collections::BTreeMap<String, f64>>,
}

/// What the owner of a partition sends the leader (`<prefix>.v1.ctl.bids.<p>`, MessagePack).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PartitionBids {
    pub replica: String,
    pub partition: u32,
    /// The partition lease's term under which the owner runs these jobs.
    pub term: u64,
    #[serde(default)]
    pub bids: Vec<(String, WireBid)>,
    /// Jobs that ended, with how (`finished`, `cancelled`, `failed`, `expired`).
    #[serde(default)]
    pub gone: Vec<(String, Outcome)>,
    /// Jobs that went quiet (`true`) or spoke again.
    #[serde(default)]
    pub quiet: Vec<(String, bool)>,
    /// Every job the owner runs in the partition (full sends only).
    #[serde(default)]
    pub roster: Option<Vec<String>>,
}

impl PartitionBids {
    /// Decodes and checks one message: every job id valid and of this partition, every gain
    /// finite. A message that fails is refused whole.
    pub fn decode(bytes: &[u8], partitions: u32) -> Result<PartitionBids, ProtocolError> {
        let m: PartitionBids = decode(Encoding::MsgPack, bytes, "partition bids")?;
        let bad = |what| Err(ProtocolError::Invalid(what, RejectCause::InvalidSpec));
        if m.partition >= partitions {
            return bad("partition out of range");
        }
        let ids =
            m.bids.iter().map(|(j, _)| j).chain(m.gone.iter().map(|(j, _)| j)).chain(m.quiet.iter().map(|(j, _)| j));
        let ids = ids.chain(m.roster.iter().flatten());
        if ids.into_iter().any(|j| !valid_id(j) || crate::partition::of(j, partitions) != m.partition) {
            return bad("a job id that is invalid or of another partition");
        }
        let finite = |b: &WireBid| {
            b.min_workers <= b.max_workers
                && b.gain.is_none_or(|g| (1..=64).all(|w| g.gain(w.min(b.max_workers.max(1))).is_finite()))
        };
        if !m.bids.iter().all(|(_, b)| finite(b)) {
            return bad("a bid with bounds out of order or gains that are not finite");
        }
        Ok(m)
    }
}

/// `m` cut into messages that encode within `budget` bytes: bids split in halves until each
/// part fits; the roster, gone and quiet lists ride on the last.
pub fn chunks(m: PartitionBids, budget: usize) -> Vec<PartitionBids> {
    let size = |m: &PartitionBids| encode(Encoding::MsgPack, m).map_or(usize::MAX, |b| b.len());
    if m.bids.len() <= 1 || size(&m) <= budget {
        return vec![m];
    }
    let mut first =
        PartitionBids { replica: m.replica.clone(), partition: m.partition, term: m.term, ..Default::default() };
    let mut rest = m;
    first.bids = rest.bids.drain(..rest.bids.len() / 2).collect();
    let mut out = chunks(first, budget);
    out.extend(chunks(rest, budget));
    out
}
