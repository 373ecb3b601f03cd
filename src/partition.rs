//! Jobs partitioned over replicas (issue #19), the pure part.
//!
//! - [`of`]: a job's partition, the same number NATS' subject mapping
//!   `{{partition(n, 1)}}` (a one-token id) or `{{partition(n, 1, 2)}}` (a tenant's job,
//!   `TENANT.NAME`) computes from the job's tokens (FNV-1a, 32 bits, over the tokens joined
//!   without their dot, modulo `n`), so a replica knows which of its partitions a job's reports
//!   arrive on. Checked against real servers (2.9 and 2.10+) by `tests/it/partitions.rs`.
//! - [`balance`]: which live replica should own each partition: as even as can be (counts differ
//!   by at most one) with the fewest partitions taken from their live owners. Every replica
//!   computes it from the same view of the lease bucket, so they agree without talking.
//! - [`Bids`]: the leader's merge of the bids replicas send: each job's latest bid from the
//!   owner of its partition under the highest term seen, so a bid still in flight from a
//!   partition's previous owner never replaces its new owner's.

/// The partition of a job id among `partitions` (at least 1). A tenant's job `TENANT.NAME` is
/// hashed as the server's mapping hashes its two tokens: concatenated, without the dot.
pub fn of(job: &str, partitions: u32) -> u32 {
    fnv1a32(job.bytes().filter(|&b| b != b'.')) % partitions.max(1)
}

/// FNV-1a over 32 bits, as Go's `hash/fnv.New32a`, which the NATS server uses to partition.
fn fnv1a32(bytes: impl IntoIterator<Item = u8>) -> u32 {
    bytes.into_iter().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// The owner each of the `owners.len()` partitions should have among the `live` replicas
/// (`None` for all when none is live), given who owns each now (`None`: nobody, or a replica
/// that is gone).
///
/// Each live replica gets `⌊n/r⌋` or `⌈n/r⌉` partitions; the larger quotas go to the replicas
/// that own the most now (ties by name), which keeps the most partitions where they are. A
/// partition stays with its live owner while that owner is within its quota (lowest partition
/// numbers first); the others go to the replicas below their quota, least loaded first, ties
/// by name. Deterministic: the same view gives the same answer on every replica.
pub fn balance<'a>(owners: &[Option<&'a str>], live: &[&'a str]) -> Vec<Option<&'a str>> {
    let mut live: Vec<&str> = live.to_vec();
    live.sort_unstable();
    live.dedup();
    if live.is_empty() {
        return vec![None; owners.len()];
    }
    let index = |name: &str| live.binary_search(&name).ok();
    let mut owned = vec![0usize; live.len()];
    for o in owners.iter().flatten() {
        if let Some(i) = index(o) {
            owned[i] += 1;
        }
    }
    let (base, extra) = (owners.len() / live.len(), owners.len() % live.len());
    let mut by_load: Vec<usize> = (0..live.len()).collect();
    by_load.sort_by(|&a, &b| owned[b].cmp(&owned[a]).then(a.cmp(&b)));
    let mut quota = vec![base; live.len()];
    for &i in &by_load[..extra] {
        quota[i] += 1;
    }
    let mut load = vec![0usize; live.len()];
    let mut next: Vec<Option<usize>> = owners
        .iter()
        .map(|o| {
            let i = o.and_then(index)?;
            (load[i] < quota[i]).then(|| {
                load[i] += 1;
                i
            })
        })
        .collect();
    for slot in next.iter_mut().filter(|s| s.is_none()) {
        let i = (0..live.len()).filter(|&i| load[i] < quota[i]).min_by_key(|&i| (load[i], i));
        if let Some(i) = i {
            load[i] += 1;
            *slot = Some(i);
        }
    }
    next.into_iter().map(|i| i.map(|i| live[i])).collect()
}

/// The bids the leader plans with, merged from the replicas' (see the module's documentation).
#[derive(Clone, Debug)]
pub struct Bids<B> {
    latest: std::collections::BTreeMap<String, (u64, B)>,
}

impl<B> Default for Bids<B> {
    fn default() -> Self {
        Bids { latest: Default::default() }
    }
}

impl<B> Bids<B> {
    /// A bid for `job` sent under partition term `term`: kept unless a bid under a higher term
    /// is already here (then `false`). At equal terms the later one wins (one owner's bids
    /// arrive in order).
    pub fn offer(&mut self, job: &str, term: u64, bid: B) -> bool {
        match self.latest.get_mut(job) {
            Some((t, _)) if *t > term => false,
            Some(slot) => {
                *slot = (term, bid);
                true
            }
            None => {
                self.latest.insert(job.to_string(), (term, bid));
                true
            }
        }
    }

    /// The job left: its bid goes (a later bid under an older term must not bring it back is
    /// the caller's to ensure: a job that left is not in any replica's partitions).
    pub fn remove(&mut self, job: &str) -> Option<B> {
        self.latest.remove(job).map(|(_, b)| b)
    }

    pub fn get(&self, job: &str) -> Option<&B> {
        self.latest.get(job).map(|(_, b)| b)
    }

    /// Every job's bid, in job id order (the planner's order).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &B)> {
        self.latest.iter().map(|(j, (_, b))| (j.as_str(), b))
    }

    /// Every job's bid with its term, in job id order.
    pub fn iter_terms(&self) -> impl Iterator<Item = (&str, u64, &B)> {
        self.latest.iter().map(|(j, (t, b))| (j.as_str(), *t, b))
    }

    /// Keeps the jobs whose bid `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&B) -> bool) {
        self.latest.retain(|_, (_, b)| keep(b));
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv1a_is_gos() {
        // Go: fnv.New32a() over "" and "a" (the algorithm's published test vectors).
        assert_eq!(fnv1a32(*b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(*b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(*b"foobar"), 0xbf9c_f968);
        // What nats-server 2.9.10 and 2.15.1 map `t.*.*` with `{{partition(32,1,2)}}` to (seen
        // on both, and checked again live by `tests/it/partitions.rs`).
        let seen = [("team-a.j1", 31), ("team-b.job-7", 22), ("x.y", 26), ("ab.c", 11), ("solo", 10)];
        for (job, p) in seen {
            assert_eq!(of(job, 32), p, "{job}");
        }
        assert!((0..1000).all(|i| of(&format!("job-{i}"), 32) < 32));
        assert_eq!(of("anything", 0), 0, "no partitions counts as one");
    }

    /// The fewest moves any even assignment needs: try every choice of which replicas get the
    /// larger quota.
    fn fewest_moves(owners: &[Option<&str>], live: &[&str]) -> usize {
        let r = live.len();
        let (base, extra) = (owners.len() / r, owners.len() % r);
        let owned: Vec<usize> = live.iter().map(|l| owners.iter().filter(|o| **o == Some(*l)).count()).collect();
        (0u32..1 << r)
            .filter(|s| s.count_ones() as usize == extra)
            .map(|s| {
                let kept: usize = (0..r).map(|i| owned[i].min(base + usize::from(s >> i & 1 == 1))).sum();
                owners.len() - kept
            })
            .min()
            .unwrap_or(0)
    }

    const NAMES: [&str; 6] = ["r0", "r1", "r2", "r3", "r4", "r5"];

    proptest! {
        /// Even, every partition to a live replica, and no more moves than the best even
        /// assignment needs (found by trying them all).
        #[test]
        fn balance_is_even_and_moves_the_fewest(
            owners in proptest::collection::vec(proptest::option::of(0usize..7), 0..40),
            live in proptest::collection::btree_set(0usize..6, 0..6),
        ) {
            let owners: Vec<Option<&str>> = owners.iter().map(|o| o.map(|i| ["r0", "r1", "r2", "r3", "r4", "r5", "gone"][i])).collect();
            let live: Vec<&str> = live.iter().map(|&i| NAMES[i]).collect();
            let next = balance(&owners, &live);
            prop_assert_eq!(next.len(), owners.len());
            if live.is_empty() {
                prop_assert!(next.iter().all(Option::is_none));
                return Ok(());
            }
            let counts: Vec<usize> = live.iter().map(|l| next.iter().filter(|o| **o == Some(*l)).count()).collect();
            prop_assert!(next.iter().all(|o| o.is_some_and(|o| live.contains(&o))));
            prop_assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{:?}", counts);
            let moved = owners.iter().zip(&next).filter(|(a, b)| a != b).count();
            prop_assert_eq!(moved, fewest_moves(&owners, &live));
            // The same view in another order gives the same answer.
            let mut shuffled = live.clone();
            shuffled.reverse();
            prop_assert_eq!(balance(&owners, &shuffled), next);
        }
    }

    proptest! {
        /// Whatever order the bids of several owners arrive in, the merge keeps for each job the
        /// last bid its newest owner sent.
        #[test]
        fn the_merge_keeps_each_jobs_newest_owners_last_bid(
            sent in proptest::collection::vec((0usize..5, 1u64..4, 0u32..1000), 0..60),
            seed in any::<u64>(),
        ) {
            // Each owner's bids arrive in the order it sent them; owners interleave at random.
            let mut arrivals: Vec<(usize, u64, u32)> = Vec::new();
            let mut by_term: Vec<Vec<(usize, u64, u32)>> = vec![Vec::new(); 4];
            for &(job, term, value) in &sent {
                by_term[term as usize].push((job, term, value));
            }
            let mut rng = seed;
            while by_term.iter().any(|q| !q.is_empty()) {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let open: Vec<usize> = (0..4).filter(|&t| !by_term[t].is_empty()).collect();
                let t = open[(rng >> 33) as usize % open.len()];
                arrivals.push(by_term[t].remove(0));
            }
            let mut bids = Bids::default();
            for &(job, term, value) in &arrivals {
                bids.offer(&format!("j{job}"), term, value);
            }
            for job in 0..5 {
                let want = sent.iter().filter(|s| s.0 == job).max_by_key(|s| s.1).map(|s| s.1).and_then(|top| {
                    sent.iter().rfind(|s| s.0 == job && s.1 == top).map(|s| s.2)
                });
                prop_assert_eq!(bids.get(&format!("j{job}")).copied(), want);
            }
        }
    }

    #[test]
    fn a_balanced_view_stays_put_and_a_dead_replicas_partitions_are_shared() {
        let owners: Vec<Option<&str>> = (0..9).map(|p| Some(["a", "b", "c"][p % 3])).collect();
        assert_eq!(balance(&owners, &["a", "b", "c"]), owners);
        let next = balance(&owners, &["a", "c"]);
        let moved: Vec<usize> = (0..9).filter(|&p| next[p] != owners[p]).collect();
        assert_eq!(moved, vec![1, 4, 7], "only b's partitions move");
        assert_eq!(next.iter().filter(|o| **o == Some("a")).count(), 5);
    }
}
