//! The state writes not yet made, without I/O (issue #42): the latest value per key, which are
//! due (backoff, a conflict waiting for the lease's next renewal), what a deposed writer drops,
//! and what becomes of a write once made. The writer task (`super::writer`) owns one behind a
//! lock and does the JetStream I/O; time and the lease are passed in, so every rule here is a
//! unit test on a fake clock.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::bus::lease::Fence;

/// Backoff after a failed write: doubling from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// One queued write.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Op {
    Put(Bytes),
    Delete,
    /// A shard of the workers (`workers.<s>`), encoded as it is when written: a burst of
    /// changes to a shard costs one write.
    Workers(u32),
}

/// A key's write waiting to be made, and who waits for it (`W`: a oneshot sender live).
#[derive(Debug)]
pub(super) struct Pending<W> {
    pub(super) op: Op,
    attempts: u32,
    /// Not before this (backoff after a failure).
    not_before: Option<Instant>,
    /// After a conflict: not before the lease was renewed past this count (proof that this
    /// scheduler still leads before it writes over the other writer).
    after_renewal: Option<u64>,
    /// Told once this value, or a newer one of the key, is written (dropped unanswered if the
    /// write is given up: the lease was lost).
    written: Vec<W>,
}

/// What became of one write.
#[derive(Debug, PartialEq)]
pub(super) enum Outcome {
    Written,
    Conflict,
    /// The key's last write was this scheduler's own (one that timed out here but landed), with
    /// another value: written again, nobody else's doing.
    Again,
    Failed(String),
}

/// The leader's lease as the writer sees it at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LeaseView {
    /// Certainly held now.
    pub(super) holds: bool,
    /// Lost for good: this scheduler writes nothing more.
    pub(super) deposed: bool,
    /// Renewals so far (a conflict waits for one more).
    pub(super) renewals: u64,
    /// No lease at all (a scheduler without replicas): nothing to wait for.
    pub(super) unfenced: bool,
}

impl LeaseView {
    pub(super) fn of(fence: &Fence) -> LeaseView {
        LeaseView {
            holds: fence.holds(),
            deposed: fence.deposed(),
            renewals: fence.renewals(),
            unfenced: fence.is_unfenced(),
        }
    }
}

impl<W> Pending<W> {
    /// Attempts made so far (a write that failed is tried again).
    pub(super) fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// The writes due now, and how many a deposed writer dropped.
pub(super) struct Due<W> {
    pub(super) writes: Vec<(String, Pending<W>)>,
    pub(super) dropped: usize,
}

/// The latest write per key.
#[derive(Debug)]
pub(super) struct WriteQueue<W> {
    pending: HashMap<String, Pending<W>>,
}

impl<W> Default for WriteQueue<W> {
    fn default() -> Self {
        WriteQueue { pending: HashMap::new() }
    }
}

/// The wait before attempt `attempts + 1` of a write that failed `attempts` times.
pub(super) fn backoff(attempts: u32) -> Duration {
    BACKOFF.0.saturating_mul(1 << attempts.min(10)).min(BACKOFF.1)
}

impl<W> WriteQueue<W> {
    pub(super) fn len(&self) -> usize {
        self.pending.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Queues `op` for `key`; `false` (nothing queued) once the writer is `deposed`. A newer value
    /// replaces the one waiting, but not the wait for a renewal after a conflict (the key
    /// still needs reading again under a lease known to be held), nor those waiting for the key
    /// to be written.
    pub(super) fn push(&mut self, key: String, op: Op, waiter: Option<W>, deposed: bool) -> bool {
        if deposed {
            return false;
        }
        let (after_renewal, mut written) =
            self.pending.remove(&key).map_or((None, Vec::new()), |p| (p.after_renewal, p.written));
        written.extend(waiter);
        self.pending.insert(key, Pending { op, attempts: 0, not_before: None, after_renewal, written });
        true
    }

    /// The writes to make at `now`: none unless the lease certainly holds, none in backoff, and
    /// after a conflict none before the lease was renewed again. A deposed writer drops its
    /// whole queue (its waiters are never answered).
    pub(super) fn take_due(&mut self, now: Instant, lease: LeaseView) -> Due<W> {
        if lease.deposed {
            let dropped = self.pending.len();
            self.pending.clear();
            return Due { writes: Vec::new(), dropped };
        }
        if !lease.holds {
            return Due { writes: Vec::new(), dropped: 0 };
        }
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.not_before.is_none_or(|t| t <= now))
            .filter(|(_, p)| p.after_renewal.is_none_or(|r| lease.unfenced || lease.renewals > r))
            .map(|(k, _)| k.clone())
            .collect();
        let writes = due.into_iter().filter_map(|k| self.pending.remove(&k).map(|p| (k, p))).collect();
        Due { writes, dropped: 0 }
    }

    /// What became of `key`'s write at `now`: written, its waiters (returned) are answered;
    /// otherwise it is queued again after a backoff (after a conflict, also after the lease's
    /// next renewal past `renewals`), unless a newer value came meanwhile, which supersedes it
    /// and takes its waiters.
    pub(super) fn settle(
        &mut self,
        key: String,
        mut pending: Pending<W>,
        outcome: &Outcome,
        now: Instant,
        renewals: u64,
    ) -> Vec<W> {
        match outcome {
            Outcome::Written => return pending.written,
            Outcome::Conflict => pending.after_renewal = Some(renewals),
            Outcome::Again | Outcome::Failed(_) => {}
        }
        pending.attempts += 1;
        pending.not_before = Some(now + backoff(pending.attempts));
        match self.pending.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut newer) => {
                newer.get_mut().written.append(&mut pending.written)
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(pending);
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELD: LeaseView = LeaseView { holds: true, deposed: false, renewals: 3, unfenced: false };

    fn put(n: u8) -> Op {
        Op::Put(Bytes::from(vec![n]))
    }

    fn keys<W>(due: &Due<W>) -> Vec<&str> {
        let mut keys: Vec<&str> = due.writes.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn the_latest_value_per_key_is_written_and_every_waiter_answered() {
        let mut q: WriteQueue<u32> = WriteQueue::default();
        let t0 = Instant::now();
        assert!(q.push("job.a".into(), put(1), Some(1), false));
        assert!(q.push("job.a".into(), put(2), Some(2), false));
        assert!(q.push("job.b".into(), Op::Delete, None, false));
        assert_eq!(q.len(), 2, "one write per key");
        let mut due = q.take_due(t0, HELD);
        assert_eq!(keys(&due), ["job.a", "job.b"]);
        let (key, pending) = due.writes.remove(due.writes.iter().position(|(k, _)| k == "job.a").expect("a"));
        assert_eq!(pending.op, put(2), "the newer value");
        assert_eq!(q.settle(key, pending, &Outcome::Written, t0, 3), [1, 2]);
    }

    #[test]
    fn nothing_is_written_while_the_lease_is_not_certainly_held() {
        let mut q: WriteQueue<u32> = WriteQueue::default();
        q.push("job.a".into(), put(1), None, false);
        let unsure = LeaseView { holds: false, ..HELD };
        assert!(q.take_due(Instant::now(), unsure).writes.is_empty());
        assert_eq!(q.len(), 1, "kept for when it holds again");
    }

    #[test]
    fn a_deposed_writer_drops_its_queue_and_queues_nothing_more() {
        let mut q: WriteQueue<u32> = WriteQueue::default();
        q.push("job.a".into(), put(1), Some(7), false);
        q.push("job.b".into(), put(1), None, false);
        let deposed = LeaseView { holds: false, deposed: true, ..HELD };
        let due = q.take_due(Instant::now(), deposed);
        assert_eq!((due.writes.len(), due.dropped), (0, 2));
        assert!(q.is_empty(), "dropped, its waiters never answered");
        assert!(!q.push("job.c".into(), put(1), None, true));
        assert!(q.is_empty());
    }

    #[test]
    fn a_failed_write_backs_off_doubling_and_a_newer_value_supersedes_it() {
        assert_eq!(
            (1..=7).map(backoff).collect::<Vec<_>>(),
            [200, 400, 800, 1600, 3200, 5000, 5000].map(Duration::from_millis)
        );
        let mut q: WriteQueue<u32> = WriteQueue::default();
        let t0 = Instant::now();
        q.push("job.a".into(), put(1), Some(1), false);
        let (key, pending) = q.take_due(t0, HELD).writes.pop().expect("due");
        assert!(q.settle(key, pending, &Outcome::Failed("timed out".into()), t0, 3).is_empty());
        assert!(q.take_due(t0 + Duration::from_millis(199), HELD).writes.is_empty(), "in its backoff");
        let (key, pending) = q.take_due(t0 + Duration::from_millis(200), HELD).writes.pop().expect("due again");
        // A newer value arrives while the old one is being written, which then fails: the newer
        // one stays (with the old one's waiters), not the old one.
        q.push(key.clone(), put(2), Some(2), false);
        let t1 = t0 + Duration::from_millis(200);
        assert!(q.settle(key, pending, &Outcome::Failed("timed out".into()), t1, 3).is_empty());
        let (key, pending) = q.take_due(t1, HELD).writes.pop().expect("the newer value, due at once");
        assert_eq!(pending.op, put(2));
        let mut waiters = q.settle(key, pending, &Outcome::Written, t1, 3);
        waiters.sort_unstable();
        assert_eq!(waiters, [1, 2]);
    }

    #[test]
    fn after_a_conflict_a_key_waits_for_the_lease_s_next_renewal() {
        let mut q: WriteQueue<u32> = WriteQueue::default();
        let t0 = Instant::now();
        q.push("workers.3".into(), Op::Workers(3), None, false);
        let (key, pending) = q.take_due(t0, HELD).writes.pop().expect("due");
        q.settle(key, pending, &Outcome::Conflict, t0, 3);
        let later = t0 + Duration::from_secs(60);
        assert!(q.take_due(later, HELD).writes.is_empty(), "no renewal since the conflict");
        // A newer value does not lift the wait.
        q.push("workers.3".into(), Op::Workers(3), None, false);
        assert!(q.take_due(later, HELD).writes.is_empty());
        assert_eq!(q.take_due(later, LeaseView { renewals: 4, ..HELD }).writes.len(), 1);
        // Without a lease there is nothing to wait for.
        q.push("workers.3".into(), Op::Workers(3), None, false);
        let (key, pending) = q.take_due(later, HELD).writes.pop().expect("due");
        q.settle(key, pending, &Outcome::Conflict, later, 3);
        let unfenced = LeaseView { unfenced: true, ..HELD };
        assert_eq!(q.take_due(later + Duration::from_secs(10), unfenced).writes.len(), 1);
    }
}
