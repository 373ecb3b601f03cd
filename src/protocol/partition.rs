//! What the replicas that share the jobs (`[cluster] shared`, issue #19) send each other: a
//! partition owner's [`PartitionBids`] to the leader (`<prefix>.v1.ctl.bids.<p>`, MessagePack),
//! each job's bid as a [`WireBid`]. Checked whole on receipt (`PartitionBids::decode`), cut to fit
//! a message on sending (`chunks`).

use serde::{Deserialize, Serialize};

use super::messages::{is_one, one};
use super::{Encoding, Outcome, ProtocolError, RejectCause, decode, encode, valid_job_id};
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
    pub checkpoint_every_s: Option<f64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub save_on_request: bool,
    #[serde(default)]
    pub priority: u8,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: f64,
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
    /// Jobs that ended, with how (`finished`, `cancelled`, `failed`, `expired`). Read before
    /// `bids`: a job in both ended, then started again (its new bid is the later news).
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
        if ids.into_iter().any(|j| !valid_job_id(j) || crate::partition::of(j, partitions) != m.partition) {
            return bad("a job id that is invalid or of another partition");
        }
        let finite = |b: &WireBid| {
            b.min_workers <= b.max_workers
                && b.weight.is_finite()
                && b.weight > 0.0
                && b.gain.is_none_or(|g| (1..=64).all(|w| g.gain(w.min(b.max_workers.max(1))).is_finite()))
        };
        if !m.bids.iter().all(|(_, b)| finite(b)) {
            return bad("a bid with bounds out of order or gains that are not finite");
        }
        Ok(m)
    }
}

/// `m` cut into messages that encode within `budget` bytes: bids split in halves until each
/// part fits; the gone list rides on the first (a job that ended and started again in one
/// flush is ended before its new bid is read), the roster and quiet lists on the last.
pub fn chunks(m: PartitionBids, budget: usize) -> Vec<PartitionBids> {
    let size = |m: &PartitionBids| encode(Encoding::MsgPack, m).map_or(usize::MAX, |b| b.len());
    if m.bids.len() <= 1 || size(&m) <= budget {
        return vec![m];
    }
    let mut first =
        PartitionBids { replica: m.replica.clone(), partition: m.partition, term: m.term, ..Default::default() };
    let mut rest = m;
    first.bids = rest.bids.drain(..rest.bids.len() / 2).collect();
    first.gone = std::mem::take(&mut rest.gone);
    let mut out = chunks(first, budget);
    out.extend(chunks(rest, budget));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A message of partition `p` under `term`: bids of `jobs`, `gone` finished, `roster`.
    pub(crate) fn message(p: u32, term: u64, jobs: &[&str], gone: &[&str], roster: Option<&[&str]>) -> PartitionBids {
        let bid = |_| WireBid {
            model: JobModel::unknown(),
            min_workers: 0,
            max_workers: 4,
            gain: None,
            last_iter: None,
            last_loss: None,
            predicted_gain: None,
            points: 1,
            generation: None,
            sizes: None,
            checkpoint_age_s: None,
            max_iters: None,
            checkpoint_every_s: None,
            save_on_request: false,
            priority: 0,
            speeds: None,
            weight: 1.0,
        };
        PartitionBids {
            replica: "r".into(),
            partition: p,
            term,
            bids: jobs.iter().map(|j| (j.to_string(), bid(j))).collect(),
            gone: gone.iter().map(|j| (j.to_string(), Outcome::Finished)).collect(),
            quiet: Vec::new(),
            roster: roster.map(|r| r.iter().map(|j| j.to_string()).collect()),
        }
    }

    /// `n` job ids of partition `p` (of 4): one-token ids and tenants' jobs, `TENANT.NAME`, in turn.
    pub(crate) fn ids(p: u32, n: usize) -> Vec<String> {
        let id = |i: u32| if i.is_multiple_of(2) { format!("job-{i}") } else { format!("team-{}.job-{i}", i % 3) };
        (0..).map(id).filter(|j| crate::partition::of(j, 4) == p).take(n).collect()
    }

    #[test]
    fn malformed_messages_are_refused_whole() {
        let jobs = ids(2, 2);
        let ok = message(2, 1, &[jobs[0].as_str()], &[], Some(&[jobs[1].as_str()]));
        let bytes = encode(Encoding::MsgPack, &ok).unwrap();
        assert_eq!(PartitionBids::decode(&bytes, 4).unwrap(), ok);
        assert!(PartitionBids::decode(&bytes, 2).is_err(), "partition 2 of 2");
        let other = ids(3, 1);
        let wrong = message(2, 1, &[other[0].as_str()], &[], None);
        assert!(PartitionBids::decode(&encode(Encoding::MsgPack, &wrong).unwrap(), 4).is_err());
        let mut unbounded = ok.clone();
        unbounded.bids[0].1.min_workers = 9;
        assert!(PartitionBids::decode(&encode(Encoding::MsgPack, &unbounded).unwrap(), 4).is_err());
        assert!(PartitionBids::decode(b"\x93garbage", 4).is_err());
    }

    #[test]
    fn chunks_fit_and_keep_every_bid_once() {
        let jobs = ids(0, 40);
        let refs: Vec<&str> = jobs.iter().map(String::as_str).collect();
        let m = message(0, 3, &refs, &refs[..2], Some(&refs));
        let parts = chunks(m.clone(), 2_000);
        assert!(parts.len() > 1);
        let back: Vec<String> = parts.iter().flat_map(|c| c.bids.iter().map(|(j, _)| j.clone())).collect();
        assert_eq!(back, jobs);
        assert!(parts[..parts.len() - 1].iter().all(|c| c.roster.is_none() && c.quiet.is_empty()));
        assert_eq!(parts.last().unwrap().roster, m.roster);
        assert_eq!(parts[0].gone, m.gone);
        assert!(parts[1..].iter().all(|c| c.gone.is_empty()));
    }
}
