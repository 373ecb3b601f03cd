//! The leader's side of `[cluster] shared` (issue #19): [`Intake`], its merge of what the
//! partitions' owners send it (`protocol::PartitionBids`) into the allocator's
//! `RemoteJobs`: a partition's bids count under its lease's term, so a bid still in flight from
//! a previous owner never replaces its new owner's, and a job its owner no longer has is ended.
//! The owners' side is `shard`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::actors::allocator::RemoteJobs;
use crate::actors::bid::Bid;
use crate::partition;
use crate::protocol::{Outcome, PartitionBids};

/// Ended jobs are remembered this long (a bid for one from a previous owner, still in flight,
/// must not bring it back).
const TOMBSTONE_KEEP: Duration = Duration::from_secs(120);

/// The leader's merge of the owners' messages (see the module's documentation).
pub struct Intake {
    partitions: u32,
    /// Each job's state under the highest term seen: `None` running, `Some(t)` ended at `t`.
    jobs: partition::Bids<Option<Instant>>,
}

impl Intake {
    pub fn new(partitions: u32) -> Intake {
        Intake { partitions, jobs: partition::Bids::default() }
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// What one message changes for the allocator.
    pub fn merge(&mut self, m: PartitionBids) -> RemoteJobs {
        let now = Instant::now();
        let mut out = RemoteJobs::default();
        // Ends first: a job in both ended, then started again.
        for (job, how) in m.gone {
            if self.jobs.offer(&job, m.term, Some(now)) {
                out.gone.push((job, how));
            }
        }
        for (job, bid) in m.bids {
            if self.jobs.offer(&job, m.term, None) {
                out.bids.push((job, Bid::from_wire(bid)));
            }
        }
        for (job, quiet) in m.quiet {
            if self.jobs.get(&job) == Some(&None) {
                out.quiet.push((job, quiet));
            }
        }
        if let Some(roster) = m.roster {
            // Jobs running here under this owner's term or an older one that the owner no
            // longer has: their end was lost (a bye purged before it was read, a message
            // lost): they end here too.
            let roster: HashSet<&str> = roster.iter().map(String::as_str).collect();
            let missing: Vec<String> = self
                .jobs
                .iter_terms()
                .filter(|(job, term, state)| {
                    state.is_none()
                        && *term <= m.term
                        && partition::of(job, self.partitions) == m.partition
                        && !roster.contains(job)
                })
                .map(|(job, _, _)| job.to_string())
                .collect();
            for job in missing {
                self.jobs.offer(&job, m.term, Some(now));
                out.gone.push((job, Outcome::Expired));
            }
            self.jobs.retain(|state| state.is_none_or(|t| now.duration_since(t) < TOMBSTONE_KEEP));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::partition_samples::{ids, message};
    use crate::protocol::{self, Encoding, valid_job_id};

    #[test]
    fn a_previous_owners_messages_change_nothing_after_the_new_owners() {
        let jobs = ids(1, 3);
        let [a, b, c] = [jobs[0].as_str(), jobs[1].as_str(), jobs[2].as_str()];
        let mut intake = Intake::new(4);
        assert_eq!(intake.merge(message(1, 5, &[a, b], &[], None)).bids.len(), 2);
        // The new owner (term 7) has a and c; b ended under it.
        let m = intake.merge(message(1, 7, &[a, c], &[b], None));
        assert_eq!((m.bids.len(), m.gone.len()), (2, 1));
        // The old owner's late messages: b back, a gone, c's bid: all refused.
        let late = intake.merge(message(1, 5, &[b, c], &[a], Some(&[a, b, c])));
        assert!(late.bids.is_empty() && late.gone.is_empty(), "{late:?}");
        // A roster under the current term ends what its owner does not have.
        let m = intake.merge(message(1, 7, &[], &[], Some(&[c])));
        assert_eq!(m.gone, vec![(a.to_string(), Outcome::Expired)]);
        // A job that ends and comes back under the same owner bids again.
        let m = intake.merge(message(1, 7, &[b], &[], None));
        assert_eq!(m.bids.len(), 1);
        // Both in one message: it ended, then started again (the allocator reads `gone` first).
        let m = intake.merge(message(1, 7, &[b], &[b], None));
        assert_eq!((m.gone.len(), m.bids.len()), (1, 1));
        assert_eq!(intake.jobs.get(b), Some(&None), "b runs");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Whatever arrives on a bids subject is decoded or refused, never a panic: random bytes,
        /// and valid messages with bytes flipped or cut.
        #[test]
        fn hostile_bids_are_refused_not_panicked_on(
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            flips in proptest::collection::vec((0usize..4096, proptest::prelude::any::<u8>()), 0..8),
            cut in 0usize..4096,
        ) {
            let _ = PartitionBids::decode(&noise, 4);
            let jobs = ids(1, 3);
            let refs: Vec<&str> = jobs.iter().map(String::as_str).collect();
            let mut bytes = protocol::encode(Encoding::MsgPack, &message(1, 2, &refs, &refs[..1], Some(&refs))).unwrap();
            for (at, b) in flips {
                let n = bytes.len();
                bytes[at % n] ^= b;
            }
            bytes.truncate(cut.max(1));
            if let Ok(m) = PartitionBids::decode(&bytes, 4) {
                // What passes is of its partition and valid.
                proptest::prop_assert!(m.partition < 4);
                proptest::prop_assert!(m.bids.iter().all(|(j, b)| valid_job_id(j) && b.min_workers <= b.max_workers));
                let mut intake = Intake::new(4);
                let _ = intake.merge(m);
            }
        }
    }
}
