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
//! - **Fencing**: assignments carry the term; workers ignore a term older than one they have
//!   seen (`agent`), so a deposed leader that still publishes is not obeyed.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use super::BusError;

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

/// A replica's handle on the lease.
#[derive(Clone)]
pub struct Lease {
    kv: kv::Store,
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
        let js = jetstream::new(client.clone());
        let err =
            |e: &dyn std::fmt::Display| BusError::JetStream { what: "lease bucket".into(), detail: e.to_string() };
        let bucket = bucket_name(prefix);
        let config = super::durable::kv_bucket_stream(&bucket, replicas, ttl);
        js.get_or_create_stream(config).await.map_err(|e| err(&e))?;
        let kv = js.get_key_value(bucket).await.map_err(|e| err(&e))?;
        Ok(Lease { kv, replica: replica.to_string(), ttl })
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Takes the lease if nobody holds it. `Ok(None)`: someone does.
    pub async fn try_acquire(&self) -> Result<Option<Held>, BusError> {
        // The term is the create's revision, known only after it: write a placeholder, then
        // the real value by revision (nobody else can write between, the key being ours).
        let placeholder = self.encode(0)?;
        let revision = match self.kv.create(KEY, placeholder).await {
            Ok(revision) => revision,
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(BusError::JetStream { what: "lease".into(), detail: e.to_string() }),
        };
        self.renew(Held { term: revision, revision }).await
    }

    /// Renews a held lease; `Ok(None)` if it was lost.
    pub async fn renew(&self, held: Held) -> Result<Option<Held>, BusError> {
        let value = self.encode(held.term)?;
        match self.kv.update(KEY, value, held.revision).await {
            Ok(revision) => Ok(Some(Held { revision, ..held })),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(BusError::JetStream { what: "lease".into(), detail: e.to_string() }),
        }
    }

    /// Gives the lease back at once (a graceful stop), if still held.
    pub async fn release(&self, held: Held) {
        if let Err(e) = self.kv.delete_expect_revision(KEY, Some(held.revision)).await {
            tracing::debug!(error = %e, "releasing the lease");
        }
    }

    /// Who holds the lease now, if anyone.
    pub async fn holder(&self) -> Result<Option<Holder>, BusError> {
        let entry =
            self.kv.get(KEY).await.map_err(|e| BusError::JetStream { what: "lease".into(), detail: e.to_string() })?;
        Ok(entry.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    fn encode(&self, term: u64) -> Result<bytes::Bytes, BusError> {
        let holder = Holder { replica: self.replica.clone(), term };
        serde_json::to_vec(&holder)
            .map(Into::into)
            .map_err(|e| BusError::JetStream { what: "lease".into(), detail: e.to_string() })
    }
}
