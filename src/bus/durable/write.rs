//! One state write and its rules, the bucket behind `Store` (JetStream in `mod.rs`, a fake in
//! the tests): the revision it expects (the last one this scheduler knows, read again after a
//! conflict), the fence checked just before it leaves, and after a conflict whether the key's
//! last write was this scheduler's own (a write that timed out here but landed).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use bytes::Bytes;
use tracing::debug;

use super::queue::{Op, Outcome};
use crate::bus::lease::Fence;

/// A write the bucket refused.
#[derive(Debug, PartialEq)]
pub(super) enum PublishError {
    /// Someone wrote the key since the revision the write expected.
    Conflict,
    Other(String),
}

/// A key's last write as the bucket holds it.
#[derive(Debug, Clone)]
pub(super) struct LastWrite {
    pub(super) revision: u64,
    /// The term in its `Slaq-Term` header, if it has one.
    pub(super) term: Option<u64>,
    /// A delete (or purge) marker.
    pub(super) deleted: bool,
    pub(super) payload: Bytes,
}

/// What a write needs of the bucket.
pub(super) trait Store {
    /// The key's last revision (0: it has none).
    async fn revision(&self, key: &str) -> Result<u64, String>;
    /// Writes `op` (a value or a delete; never `Op::Workers`, resolved before) under `term`,
    /// expecting the key's last revision to be `expected`; its new revision.
    async fn publish(&self, key: &str, op: &Op, term: u64, expected: u64) -> Result<u64, PublishError>;
    /// The key's last write, if it can be read.
    async fn last_write(&self, key: &str) -> Option<LastWrite>;
}

/// The last revision of each key as this scheduler knows it (absent: the key does not exist),
/// and the keys that must be read again before they are written (after a conflict).
#[derive(Debug, Default)]
pub(super) struct Revisions {
    known: HashMap<String, u64>,
    stale: HashSet<String>,
}

impl Revisions {
    /// The revision a write of `key` expects, or `None`: read it again first.
    fn expected(&self, key: &str) -> Option<u64> {
        (!self.stale.contains(key)).then(|| self.known.get(key).copied().unwrap_or(0))
    }

    /// `key`'s last revision is `revision`, as read or written.
    pub(super) fn set(&mut self, key: &str, revision: u64) {
        self.stale.remove(key);
        self.known.insert(key.to_string(), revision);
    }

    /// Someone else wrote `key`: read it again before the next write.
    fn stale(&mut self, key: &str) {
        self.known.remove(key);
        self.stale.insert(key.to_string());
    }
}

/// Writes `op` to `key` under `term` while `fence` holds, and says what became of it.
pub(super) async fn apply(
    store: &impl Store,
    revisions: &Mutex<Revisions>,
    fence: &Fence,
    term: u64,
    key: &str,
    op: &Op,
) -> Outcome {
    let lock = || revisions.lock().unwrap_or_else(|p| p.into_inner());
    let known = lock().expected(key);
    let expected = match known {
        Some(revision) => revision,
        None => match store.revision(key).await {
            Ok(revision) => {
                lock().set(key, revision);
                revision
            }
            Err(e) => return Outcome::Failed(e),
        },
    };
    // The last check before the write leaves: a scheduler paused since the batch began
    // (SIGSTOP) must not write once it may have lost its lease.
    if !fence.holds() {
        return Outcome::Failed("the lease is not certainly held".into());
    }
    match store.publish(key, op, term, expected).await {
        Ok(revision) => {
            lock().set(key, revision);
            Outcome::Written
        }
        Err(PublishError::Conflict) => match store.last_write(key).await.and_then(|last| own(&last, term, op)) {
            Some((revision, same)) => {
                lock().set(key, revision);
                debug!(key, same, "a write of this scheduler that timed out had landed");
                if same { Outcome::Written } else { Outcome::Again }
            }
            None => {
                lock().stale(key);
                Outcome::Conflict
            }
        },
        Err(PublishError::Other(e)) => Outcome::Failed(e),
    }
}

/// After a conflict: if `last` was written by this scheduler under its current `term` (never
/// without one), its revision and whether it holds what `op` writes.
fn own(last: &LastWrite, term: u64, op: &Op) -> Option<(u64, bool)> {
    if term == 0 || last.term != Some(term) {
        return None;
    }
    let same = match op {
        Op::Put(bytes) => !last.deleted && last.payload == *bytes,
        Op::Delete => last.deleted,
        Op::Workers(_) => false,
    };
    Some((last.revision, same))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A key's last revision, the term that wrote it and its value (`None`: deleted).
    type Written = (u64, u64, Option<Bytes>);

    /// A bucket of one writer's making: each key's revisions, and who wrote last.
    #[derive(Default)]
    struct FakeBucket {
        keys: Mutex<HashMap<String, Written>>,
        next: Mutex<u64>,
        publishes: Mutex<u32>,
        /// Deposed while the revision is read (the process paused past its lease).
        depose_on_read: Option<Fence>,
    }

    impl FakeBucket {
        fn write_as(&self, key: &str, term: u64, value: Option<Bytes>) -> u64 {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            self.keys.lock().unwrap().insert(key.to_string(), (*next, term, value));
            *next
        }
    }

    impl Store for FakeBucket {
        async fn revision(&self, key: &str) -> Result<u64, String> {
            if let Some(fence) = &self.depose_on_read {
                fence.depose();
            }
            Ok(self.keys.lock().unwrap().get(key).map_or(0, |k| k.0))
        }

        async fn publish(&self, key: &str, op: &Op, term: u64, expected: u64) -> Result<u64, PublishError> {
            *self.publishes.lock().unwrap() += 1;
            let last = self.keys.lock().unwrap().get(key).map_or(0, |k| k.0);
            if last != expected {
                return Err(PublishError::Conflict);
            }
            let value = match op {
                Op::Put(b) => Some(b.clone()),
                _ => None,
            };
            Ok(self.write_as(key, term, value))
        }

        async fn last_write(&self, key: &str) -> Option<LastWrite> {
            let (revision, term, value) = self.keys.lock().unwrap().get(key).cloned()?;
            Some(LastWrite { revision, term: Some(term), deleted: value.is_none(), payload: value.unwrap_or_default() })
        }
    }

    fn value(s: &'static str) -> Op {
        Op::Put(Bytes::from_static(s.as_bytes()))
    }

    #[tokio::test]
    async fn a_write_expects_the_last_revision_and_a_stranger_s_write_is_a_conflict_read_again() {
        let (bucket, revisions, fence) = (FakeBucket::default(), Mutex::default(), Fence::unfenced());
        assert_eq!(apply(&bucket, &revisions, &fence, 5, "job.a", &value("1")).await, Outcome::Written);
        assert_eq!(apply(&bucket, &revisions, &fence, 5, "job.a", &value("2")).await, Outcome::Written);
        // Another scheduler (term 6) writes the key: this one's next write is refused, not lost.
        bucket.write_as("job.a", 6, Some(Bytes::from_static(b"theirs")));
        assert_eq!(apply(&bucket, &revisions, &fence, 5, "job.a", &value("3")).await, Outcome::Conflict);
        // Read again, the key is written over (the queue lets it only after a renewal).
        assert_eq!(apply(&bucket, &revisions, &fence, 5, "job.a", &value("3")).await, Outcome::Written);
        assert_eq!(bucket.keys.lock().unwrap()["job.a"].2.as_deref(), Some(&b"3"[..]));
    }

    #[tokio::test]
    async fn a_conflict_with_this_scheduler_s_own_landed_write_is_no_conflict() {
        let (bucket, revisions, fence) = (FakeBucket::default(), Mutex::default(), Fence::unfenced());
        // A write of term 5 that timed out here but landed: this handle still expects 0.
        bucket.write_as("job.a", 5, Some(Bytes::from_static(b"1")));
        assert_eq!(apply(&bucket, &revisions, &fence, 5, "job.a", &value("1")).await, Outcome::Written, "the same");
        bucket.write_as("job.b", 5, Some(Bytes::from_static(b"1")));
        assert_eq!(apply(&bucket, &revisions, &fence, 5, "job.b", &value("2")).await, Outcome::Again, "another value");
        assert_eq!(apply(&bucket, &revisions, &fence, 5, "job.b", &value("2")).await, Outcome::Written);
        // Without a term nothing is taken for one's own.
        bucket.write_as("job.c", 0, Some(Bytes::from_static(b"1")));
        assert_eq!(apply(&bucket, &revisions, &fence, 0, "job.c", &value("1")).await, Outcome::Conflict);
    }

    #[tokio::test]
    async fn the_fence_is_checked_just_before_the_write_leaves() {
        let fence = Fence::held(tokio::time::Instant::now().into_std(), Duration::from_secs(60));
        let bucket = FakeBucket { depose_on_read: Some(fence.clone()), ..Default::default() };
        let revisions = Mutex::new(Revisions::default());
        // The key must be read again (a conflict before), and the lease is lost meanwhile.
        revisions.lock().unwrap().stale("job.a");
        let outcome = apply(&bucket, &revisions, &fence, 5, "job.a", &value("1")).await;
        assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
        assert_eq!(*bucket.publishes.lock().unwrap(), 0, "nothing written once the lease may be lost");
    }
}
