//! Partition leases (issue #19): which replica runs the jobs of which partition, by one lease
//! per partition in a JetStream key-value bucket: the leader's [`Lease`] (create if absent,
//! renew by revision, give back), once per partition.
//!
//! - The bucket `<prefix>_parts` expires every key `ttl` after its last write (its `max_age`:
//!   per-key TTLs need 2.11). It holds `member.<replica>` for every live replica and
//!   `part.<p>` for every owned partition (`{replica, term}`).
//! - Every [`Partitions::tick`] (every `ttl / 4`) a replica writes its member key, renews its
//!   partitions (by revision: one it cannot renew is lost), reads the bucket, computes
//!   `partition::balance` over the live members and the owners, gives back what is no longer
//!   its own and takes what is its own and free. Every replica computes the same balance from
//!   the same view, so they agree without talking; a partition changes hands only through a
//!   delete or an expiry, never two owners at once.
//! - A replica that dies stops writing: its member key and partitions expire `ttl` after its
//!   last write, and the others take them at their next tick, within `ttl + ttl/4`.
//! - **Fencing**, as the leader's: a partition is held until `ttl / 2` after its last renewal
//!   was sent, by the monotonic clock ([`Partitions::holds`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};

use super::BusError;
use super::lease::{Held, Holder, Lease};
use super::provision::open_bucket;

/// The partition-lease bucket of a prefix.
pub fn bucket_name(prefix: &str) -> String {
    format!("{prefix}_parts")
}

fn part_key(p: u32) -> String {
    format!("part.{p}")
}

fn member_key(replica: &str) -> String {
    format!("member.{replica}")
}

/// A replica's presence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Member {
    replica: String,
}

fn js_err(what: &str) -> impl Fn(&dyn std::fmt::Display) -> BusError + '_ {
    move |e| BusError::JetStream { what: what.to_string(), detail: e.to_string() }
}

/// One partition held: its lease, and when its last successful renewal was sent.
#[derive(Clone, Copy, Debug)]
struct HeldPart {
    lease: Held,
    sent: Instant,
}

/// Whether a partition whose last renewal was sent at `sent` is still certainly held at `now`:
/// until `ttl / 2` after it (the key lives `ttl` after the write landed, later than it was sent).
fn fenced(sent: Instant, now: Instant, ttl: Duration) -> bool {
    now.saturating_duration_since(sent) < ttl / 2
}

/// What a replica does with the partitions after reading the bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Moves {
    /// Held partitions the balance gives to another replica: given back.
    release: Vec<u32>,
    /// Free partitions the balance gives to this replica: taken.
    acquire: Vec<u32>,
}

/// The balance over `view` (see the module's documentation), for `replica`, which holds the
/// partitions `held` says. Live: the members, and whoever renews a partition (its key lives only
/// while renewed). A partition owned by another live replica is never taken: it changes hands
/// only through its owner giving it back or its key expiring.
fn moves(view: &View, replica: &str, held: impl Fn(u32) -> bool) -> Moves {
    let owners: Vec<Option<&str>> = view.owners.iter().map(|o| o.as_ref().map(|h| h.replica.as_str())).collect();
    let mut live: Vec<&str> = view.members.iter().map(String::as_str).collect();
    live.extend(owners.iter().flatten().copied());
    let target = crate::partition::balance(&owners, &live);
    let mut moves = Moves::default();
    for (p, (now_owner, want)) in (0u32..).zip(owners.iter().zip(&target)) {
        let mine = *want == Some(replica);
        if !mine && held(p) {
            moves.release.push(p);
        } else if mine && now_owner.is_none() && !held(p) {
            moves.acquire.push(p);
        }
    }
    moves
}

/// What the bucket says: the live replicas and each partition's owner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub members: Vec<String>,
    /// Owner and term of each partition (`None`: free).
    pub owners: Vec<Option<Holder>>,
}

/// What one tick changed for this replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Partitions taken (their jobs are now this replica's to run), with their terms.
    pub gained: Vec<(u32, u64)>,
    /// Partitions given back or lost (their jobs are no longer this replica's).
    pub released: Vec<u32>,
}

/// A replica's handle on the partition leases.
pub struct Partitions {
    kv: kv::Store,
    replica: String,
    ttl: Duration,
    /// Partition `p`'s lease, key `part.<p>`.
    leases: Vec<Lease>,
    held: BTreeMap<u32, HeldPart>,
}

impl Partitions {
    /// Creates the bucket if missing (2.9-compatibly, as `durable` does), with `replicas` copies
    /// in a cluster. `replica` must be a valid key token (letters, digits, `-`, `_`).
    pub async fn open(
        client: &async_nats::Client,
        prefix: &str,
        replica: &str,
        count: u32,
        ttl: Duration,
        replicas: usize,
    ) -> Result<Partitions, BusError> {
        if replica.is_empty() || !replica.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(BusError::JetStream {
                what: "partition leases".into(),
                detail: format!("replica name {replica:?} must be letters, digits, '-' or '_'"),
            });
        }
        let kv = open_bucket(client, &bucket_name(prefix), replicas, ttl).await?;
        let leases = (0..count.max(1)).map(|p| Lease::on(kv.clone(), &part_key(p), replica, ttl)).collect();
        Ok(Partitions { kv, replica: replica.to_string(), ttl, leases, held: BTreeMap::new() })
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The partitions this replica holds now (each renewed within `ttl / 2`), with their terms.
    pub fn held(&self) -> Vec<(u32, u64)> {
        let now = Instant::now();
        self.held.iter().filter(|(_, h)| self.valid(h, now)).map(|(&p, h)| (p, h.lease.term)).collect()
    }

    /// The partitions this replica holds now, each with the instant until which it certainly
    /// holds it (`ttl / 2` after its last renewal was sent), if it renews no more.
    pub fn held_until(&self) -> Vec<(u32, Instant)> {
        let now = Instant::now();
        self.held.iter().filter(|(_, h)| self.valid(h, now)).map(|(&p, h)| (p, h.sent + self.ttl / 2)).collect()
    }

    /// Whether this replica certainly holds partition `p` now.
    pub fn holds(&self, p: u32) -> bool {
        self.held.get(&p).is_some_and(|h| self.valid(h, Instant::now()))
    }

    fn valid(&self, h: &HeldPart, now: Instant) -> bool {
        fenced(h.sent, now, self.ttl)
    }

    /// Reads the bucket: the live members and every partition's owner.
    pub async fn view(&self) -> Result<View, BusError> {
        read_view(&self.kv, self.leases.len() as u32).await
    }

    /// One round (see the module's documentation). A failing operation is logged and the round
    /// goes on: what it changed always reaches the caller.
    pub async fn tick(&mut self) -> Changes {
        let mut changes = Changes::default();
        let member = serde_json::to_vec(&Member { replica: self.replica.clone() }).unwrap_or_default();
        // A failed write is not the end of the tick: the renewals below matter more, and a
        // replica that holds partitions counts as live whatever its member key says.
        if let Err(e) = self.kv.put(member_key(&self.replica), member.into()).await {
            tracing::warn!(error = %e, "writing the member key");
        }
        // All at once: a tick must end well within the fence (`ttl / 2`) on a loaded server.
        let held: Vec<(u32, HeldPart)> = self.held.iter().map(|(&p, &h)| (p, h)).collect();
        let renewals = held.iter().map(|&(p, h)| {
            let lease = &self.leases[p as usize];
            async move {
                let sent = Instant::now();
                (p, sent, lease.renew(h.lease).await)
            }
        });
        // Every answer is recorded: a renewal made is a revision the next one must expect.
        let mut failed = None;
        for (p, sent, renewed) in futures_util::future::join_all(renewals).await {
            match renewed {
                Ok(Some(lease)) => {
                    self.held.insert(p, HeldPart { lease, sent });
                }
                Ok(None) => {
                    self.held.remove(&p);
                    changes.released.push(p);
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            // A partition whose renewal failed is released below once its fence lapses.
            tracing::warn!(error = %e, "renewing partition leases");
        }
        // A partition whose fence lapsed (renewals failing) is not this replica's any more.
        let now = Instant::now();
        let lapsed: Vec<u32> = self.held.iter().filter(|(_, h)| !self.valid(h, now)).map(|(&p, _)| p).collect();
        for p in lapsed {
            self.held.remove(&p);
            changes.released.push(p);
        }
        let view = match self.view().await {
            Ok(view) => view,
            Err(e) => {
                tracing::warn!(error = %e, "reading the partition bucket");
                return changes;
            }
        };
        let moves = moves(&view, &self.replica, |p| self.held.contains_key(&p));
        for p in moves.release {
            self.release(p).await;
            changes.released.push(p);
        }
        for p in moves.acquire {
            match self.acquire(p).await {
                Ok(Some(term)) => changes.gained.push((p, term)),
                Ok(None) => {}
                Err(e) => tracing::warn!(partition = p, error = %e, "taking a partition"),
            }
        }
        changes
    }

    /// Takes partition `p` if free: its term, or `None` if someone has it.
    async fn acquire(&mut self, p: u32) -> Result<Option<u64>, BusError> {
        let sent = Instant::now();
        let Some(lease) = self.leases[p as usize].try_acquire().await? else { return Ok(None) };
        self.held.insert(p, HeldPart { lease, sent });
        Ok(Some(lease.term))
    }

    async fn release(&mut self, p: u32) {
        if let Some(h) = self.held.remove(&p) {
            self.leases[p as usize].release(h.lease).await;
        }
    }

    /// Gives every partition and the membership back at once (a graceful stop).
    pub async fn leave(&mut self) {
        for p in self.held.keys().copied().collect::<Vec<_>>() {
            self.release(p).await;
        }
        if let Err(e) = self.kv.delete(member_key(&self.replica)).await {
            tracing::debug!(error = %e, "leaving the partition bucket");
        }
    }
}

/// Which replica holds which of `count` partitions now (for `status`), read from the bucket.
pub async fn owners(
    client: &async_nats::Client,
    prefix: &str,
    count: u32,
) -> Result<BTreeMap<String, Vec<u32>>, BusError> {
    let js = async_nats::jetstream::new(client.clone());
    let kv = js.get_key_value(bucket_name(prefix)).await.map_err(|e| js_err("partition bucket")(&e))?;
    let view = read_view(&kv, count).await?;
    let mut owners: BTreeMap<String, Vec<u32>> = view.members.into_iter().map(|m| (m, Vec::new())).collect();
    for (p, holder) in (0u32..).zip(view.owners) {
        if let Some(h) = holder {
            owners.entry(h.replica).or_default().push(p);
        }
    }
    Ok(owners)
}

/// How long listing the bucket's keys may take. The listing is an ordered consumer that ends
/// when the server says nothing is pending, and such listings are known never to end in some
/// states of a bucket (nats-server#3481, nats.net#1046; a test that lists a bucket so hung for
/// 16 minutes on 2.9.10): bounded, a round that cannot read the bucket fails and the next one
/// tries again.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// The bucket's view: live members (sorted) and the owner of each of `count` partitions.
pub async fn read_view(kv: &kv::Store, count: u32) -> Result<View, BusError> {
    let err = js_err("partition bucket");
    let list = async { kv.keys().await.map_err(|e| err(&e))?.try_collect::<Vec<String>>().await.map_err(|e| err(&e)) };
    let keys = tokio::time::timeout(LIST_TIMEOUT, list).await.map_err(|_| err(&"listing the keys timed out"))??;
    let mut view = View { members: Vec::new(), owners: vec![None; count as usize] };
    let mut parts = Vec::new();
    for key in keys {
        if let Some(replica) = key.strip_prefix("member.") {
            view.members.push(replica.to_string());
        } else if let Some(p) = key.strip_prefix("part.").and_then(|p| p.parse::<usize>().ok())
            && p < view.owners.len()
        {
            parts.push((p, key));
        }
    }
    // Read at once (a tick must stay well within the fence on a loaded server).
    let reads = parts.iter().map(|(p, key)| async move { (*p, kv.get(key).await) });
    for (p, value) in futures_util::future::join_all(reads).await {
        let value = value.map_err(|e| err(&e))?;
        view.owners[p] = value.and_then(|v| serde_json::from_slice::<Holder>(&v).ok());
    }
    view.members.sort_unstable();
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(1);

    /// `owners[p]`: the replica holding partition `p` (`""`: free); `members`: the member keys.
    fn view(members: &[&str], owners: &[&str]) -> View {
        let holder = |r: &&str| (!r.is_empty()).then(|| Holder { replica: r.to_string(), term: 1 });
        View { members: members.iter().map(|m| m.to_string()).collect(), owners: owners.iter().map(holder).collect() }
    }

    fn of(view: &View, replica: &str) -> Moves {
        let held: Vec<u32> = (0u32..)
            .zip(&view.owners)
            .filter(|(_, o)| o.as_ref().is_some_and(|h| h.replica == replica))
            .map(|(p, _)| p)
            .collect();
        moves(view, replica, |p| held.contains(&p))
    }

    #[test]
    fn a_dead_replicas_partitions_are_taken_at_the_next_tick_and_nothing_else_moves() {
        // c died: its member key and partition keys expired (`ttl` after its last write).
        let after = view(&["a", "b"], &["a", "b", "", "a", "b", ""]);
        let (a, b) = (of(&after, "a"), of(&after, "b"));
        assert!(a.release.is_empty() && b.release.is_empty(), "nobody gives back what it holds");
        let mut taken = [a.acquire.clone(), b.acquire.clone()].concat();
        taken.sort_unstable();
        assert_eq!(taken, [2, 5], "every free partition is taken, each by one replica: {a:?} {b:?}");
        assert_eq!((a.acquire.len(), b.acquire.len()), (1, 1), "evenly");
        // While c's keys live (its last renewal less than `ttl` ago), nobody takes them.
        let before = view(&["a", "b"], &["a", "b", "c", "a", "b", "c"]);
        assert_eq!(of(&before, "a"), Moves::default());
        assert_eq!(of(&before, "b"), Moves::default());
    }

    #[test]
    fn a_joiner_takes_its_share_only_after_the_others_give_it_back() {
        let joined = view(&["a", "b", "d"], &["a", "a", "a", "b", "b", "b"]);
        let (a, b, d) = (of(&joined, "a"), of(&joined, "b"), of(&joined, "d"));
        assert!(d.acquire.is_empty(), "nothing is free yet: the joiner takes nothing owned");
        assert_eq!((a.release.len(), b.release.len()), (1, 1), "each gives back one: {a:?} {b:?}");
        // Next tick: what they gave back is free, and it is the joiner's.
        let mut owners = vec!["a", "a", "a", "b", "b", "b"];
        for &p in a.release.iter().chain(&b.release) {
            owners[p as usize] = "";
        }
        let freed = view(&["a", "b", "d"], &owners);
        let d = of(&freed, "d");
        assert_eq!(d.acquire.len(), 2, "{d:?}");
        assert!(of(&freed, "a").acquire.is_empty() && of(&freed, "b").acquire.is_empty());
    }

    #[test]
    fn a_partition_is_held_until_half_a_lease_after_its_last_renewal_was_sent() {
        let sent = Instant::now();
        assert!(fenced(sent, sent + TTL / 2 - Duration::from_millis(1), TTL));
        assert!(!fenced(sent, sent + TTL / 2, TTL));
        // A clock that does not move forward between the two reads holds.
        assert!(fenced(sent + TTL, sent, TTL));
    }
}
