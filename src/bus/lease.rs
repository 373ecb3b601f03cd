//! Leader election: one allocator at a time, by a lease in a JetStream key-value bucket.
//!
//! - The bucket `<prefix>_lease` keeps one key, `leader`, and expires it `ttl` after its last
//!   write (the bucket's `max_age`; per-key TTLs need 2.11, and this must work on 2.9).
//! - **Acquire**: create the key if absent. The revision of that create is the leader's
//!   **term**: revisions only grow, so every term is larger than every earlier one, with no
//!   counter to keep.
//! - **Renew**: update the key expecting the revision last written. Any other answer (someone
//!   else wrote it, it expired and was taken) means the lease is lost.
//! - **Give up**: a leader that has not renewed for `ttl / 2` stops acting as one, before the
//!   key can expire at `ttl` and another replica take it.
//! - **Fencing**: the leader acts only while its [`Fence`] holds: from each renewal it knows it
//!   holds the lease until `ttl / 2` after it sent that renewal, by its monotonic clock (which
//!   runs on while the process is stopped, so a leader paused past its lease finds its fence
//!   open when it resumes and does nothing). Epochs, publishes and state writes check it. State
//!   writes also expect each key's revision (`durable`), and assignments carry the term: workers
//!   ignore a term older than one they have seen (`agent`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use super::BusError;
use super::provision::open_bucket;

/// The key the leader holds.
const KEY: &str = "leader";

/// The lease bucket of a prefix.
pub fn bucket_name(prefix: &str) -> String {
    format!("{prefix}_lease")
}

/// What the key holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub replica: String,
    pub term: u64,
}

/// A replica's handle on one lease: the leader's (key `leader`), or a partition's
/// (`bus::partitions`).
#[derive(Clone)]
pub struct Lease {
    kv: kv::Store,
    key: String,
    replica: String,
    ttl: Duration,
}

/// The lease held: its term and the revision to renew from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub term: u64,
    revision: u64,
}

impl Lease {
    /// Creates the bucket if missing (2.9-compatibly, as `durable` does), with `replicas`
    /// copies in a cluster.
    pub async fn open(
        client: &async_nats::Client,
        prefix: &str,
        replica: &str,
        ttl: Duration,
        replicas: usize,
    ) -> Result<Lease, BusError> {
        let kv = open_bucket(client, &bucket_name(prefix), replicas, ttl).await?;
        Ok(Lease::on(kv, KEY, replica, ttl))
    }

    /// The lease `key` in an open bucket whose keys expire after `ttl`.
    pub fn on(kv: kv::Store, key: &str, replica: &str, ttl: Duration) -> Lease {
        Lease { kv, key: key.to_string(), replica: replica.to_string(), ttl }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Takes the lease if nobody holds it. `Ok(None)`: someone does.
    pub async fn try_acquire(&self) -> Result<Option<Held>, BusError> {
        // The term is the create's revision, known only after it: write a placeholder, then
        // the real value by revision (nobody else can write between, the key being ours).
        let placeholder = self.encode(0)?;
        let revision = match self.kv.create(&self.key, placeholder).await {
            Ok(revision) => revision,
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(BusError::JetStream { what: "lease".into(), detail: e.to_string() }),
        };
        self.renew(Held { term: revision, revision }).await
    }

    /// Renews a held lease; `Ok(None)` if it was lost.
    pub async fn renew(&self, held: Held) -> Result<Option<Held>, BusError> {
        let value = self.encode(held.term)?;
        match self.kv.update(&self.key, value, held.revision).await {
            Ok(revision) => Ok(Some(Held { revision, ..held })),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(BusError::JetStream { what: "lease".into(), detail: e.to_string() }),
        }
    }

    /// Gives the lease back at once (a graceful stop), if still held.
    pub async fn release(&self, held: Held) {
        if let Err(e) = self.kv.delete_expect_revision(&self.key, Some(held.revision)).await {
            tracing::debug!(error = %e, "releasing the lease");
        }
    }

    /// Who holds the lease now, if anyone.
    pub async fn holder(&self) -> Result<Option<Holder>, BusError> {
        let entry = self
            .kv
            .get(&self.key)
            .await
            .map_err(|e| BusError::JetStream { what: "lease".into(), detail: e.to_string() })?;
        Ok(entry.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    fn encode(&self, term: u64) -> Result<bytes::Bytes, BusError> {
        let holder = Holder { replica: self.replica.clone(), term };
        serde_json::to_vec(&holder)
            .map(Into::into)
            .map_err(|e| BusError::JetStream { what: "lease".into(), detail: e.to_string() })
    }
}

/// Whether this scheduler may act as the leader now: shared by the replica loop (which opens it
/// at each renewal and closes it when deposed), the allocator (epochs), the publisher and the
/// state writer. Cheap to clone and to check.
#[derive(Clone, Debug)]
pub struct Fence(Arc<FenceState>);

#[derive(Debug)]
struct FenceState {
    base: Instant,
    /// Milliseconds after `base` until which the lease is certainly held; `u64::MAX`: for ever
    /// (a scheduler without replicas).
    valid_until_ms: AtomicU64,
    deposed: AtomicBool,
    /// Renewals made, to tell that the lease was held after some event.
    renewals: AtomicU64,
}

impl Fence {
    /// A fence that always holds: a scheduler without replicas.
    pub fn unfenced() -> Fence {
        Fence::with_valid_until(Instant::now(), u64::MAX)
    }

    /// A lease just taken (the create was sent at `sent`), held for `valid` after it.
    pub fn held(sent: Instant, valid: Duration) -> Fence {
        let fence = Fence::with_valid_until(sent, 0);
        fence.renewed(sent, valid);
        fence
    }

    fn with_valid_until(base: Instant, ms: u64) -> Fence {
        Fence(Arc::new(FenceState {
            base,
            valid_until_ms: AtomicU64::new(ms),
            deposed: AtomicBool::new(false),
            renewals: AtomicU64::new(0),
        }))
    }

    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.0.base).as_millis() as u64
    }

    /// A renewal sent at `sent` succeeded: the lease is held until `sent + valid`.
    pub fn renewed(&self, sent: Instant, valid: Duration) {
        let until = self.ms(sent) + valid.as_millis() as u64;
        self.0.valid_until_ms.fetch_max(until, Ordering::SeqCst);
        self.0.renewals.fetch_add(1, Ordering::SeqCst);
    }

    /// The lease is lost: nothing more is done under it.
    pub fn depose(&self) {
        self.0.deposed.store(true, Ordering::SeqCst);
        self.0.valid_until_ms.store(0, Ordering::SeqCst);
    }

    /// Whether the lease is certainly held now.
    pub fn holds(&self) -> bool {
        !self.deposed() && self.ms(Instant::now()) < self.0.valid_until_ms.load(Ordering::SeqCst)
    }

    pub fn deposed(&self) -> bool {
        self.0.deposed.load(Ordering::SeqCst)
    }

    /// Whether this fence always holds (no lease).
    pub fn is_unfenced(&self) -> bool {
        self.0.valid_until_ms.load(Ordering::SeqCst) == u64::MAX
    }

    /// Successful renewals so far.
    pub fn renewals(&self) -> u64 {
        self.0.renewals.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_holds_until_half_a_lease_after_the_last_renewal_and_never_once_deposed() {
        assert!(Fence::unfenced().holds());
        let sent = Instant::now();
        let fence = Fence::held(sent, Duration::from_millis(200));
        assert!(fence.holds());
        // A renewal sent long ago does not extend it past now.
        let stale = Fence::held(sent - Duration::from_secs(1), Duration::from_millis(200));
        assert!(!stale.holds(), "a renewal sent a second ago gives no lease now");
        std::thread::sleep(Duration::from_millis(250));
        assert!(!fence.holds(), "expired");
        fence.renewed(Instant::now(), Duration::from_millis(200));
        assert!(fence.holds() && fence.renewals() == 2);
        fence.depose();
        fence.renewed(Instant::now(), Duration::from_millis(200));
        assert!(!fence.holds(), "a deposed fence stays closed");
    }
}
