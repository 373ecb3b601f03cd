//! The ranks of a job's processes, and where they meet: what torchrun's elastic agent gives
//! each process (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`,
//! `MASTER_ADDR`, `MASTER_PORT`), decided by the scheduler for a whole generation at once so
//! that every member of it agrees. Pure: the allocator calls it when a job's membership changes.
//!
//! Ranks are contiguous per machine: machines in name order, workers in id order within one, so
//! the processes that share a machine are neighbours (what hierarchical all-reduce and
//! `LOCAL_RANK`-based device choice expect). A worker without a machine is its own machine.

use std::collections::BTreeMap;

/// Where one process of a generation stands in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub local_world_size: u32,
    /// The machine's index among the job's machines (torchrun's node rank).
    pub group_rank: u32,
}

/// The ranks of a generation's members, given as `(machine, worker)` pairs; returned in the
/// order given. Rank 0 is the first worker of the first machine in name order.
pub fn layout(members: &[(&str, &str)]) -> Vec<Rank> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| members[a].cmp(&members[b]));
    let world_size = members.len() as u32;
    let mut per_machine: BTreeMap<&str, u32> = BTreeMap::new();
    for (machine, _) in members {
        *per_machine.entry(machine).or_default() += 1;
    }
    let mut ranks =
        vec![Rank { rank: 0, world_size, local_rank: 0, local_world_size: 0, group_rank: 0 }; members.len()];
    let (mut group_rank, mut local_rank) = (0u32, 0u32);
    for (rank, &i) in order.iter().enumerate() {
        if rank > 0 {
            if members[order[rank - 1]].0 == members[i].0 {
                local_rank += 1;
            } else {
                group_rank += 1;
                local_rank = 0;
            }
        }
        ranks[i] =
            Rank { rank: rank as u32, world_size, local_rank, local_world_size: per_machine[members[i].0], group_rank };
    }
    ranks
}

/// The rendezvous ports in use, per host (the address machines advertise: machines that
/// advertise one address share its ports): each job's rank 0 listens on one (`MASTER_PORT`),
/// and two jobs whose rank 0 share a host must not get the same. A port given back is not
/// handed out again for `cooldown_s`: the process of the generation that held it may take that
/// long to stop (its grace before SIGKILL). A job's next generation looks from the port after
/// its last one.
///
/// Each host's ports are a bitset (128 bytes for 1,000 ports), and the ports cooling a queue in
/// the order they were given back: a take costs O(span/64), not a pass over every busy port (at
/// 4,000 jobs that share one address, that pass was half an epoch).
#[derive(Clone, Debug)]
pub struct PortBook {
    base: u16,
    span: u16,
    cooldown_s: f64,
    hosts: BTreeMap<String, HostPorts>,
    /// Per job: the host and port of its current generation.
    held: BTreeMap<u64, (String, u16)>,
}

/// One host's ports, as offsets from the book's base.
#[derive(Clone, Debug, Default)]
struct HostPorts {
    /// Bit `i`: offset `i` is held or cooling.
    busy: Vec<u64>,
    num_busy: usize,
    /// Offsets cooling, with when each is free again, in the order they were given back. Times
    /// only grow while the clock does; an earlier time behind a later one only waits longer.
    cooling: std::collections::VecDeque<(f64, u16)>,
}

impl HostPorts {
    fn set(&mut self, i: u16, busy: bool) {
        let word = usize::from(i / 64);
        if self.busy.len() <= word {
            self.busy.resize(word + 1, 0);
        }
        let bit = 1u64 << (i % 64);
        if busy != (self.busy[word] & bit != 0) {
            self.busy[word] ^= bit;
            if busy { self.num_busy += 1 } else { self.num_busy -= 1 }
        }
    }

    /// Frees the offsets whose cooling is over at `now_s`.
    fn cool(&mut self, now_s: f64) {
        while let Some(&(free_at, i)) = self.cooling.front() {
            if free_at > now_s {
                break;
            }
            self.cooling.pop_front();
            self.set(i, false);
        }
    }

    /// The first free offset from `start` on, wrapping around at `span`.
    fn first_free(&self, start: u16, span: u16) -> Option<u16> {
        let free_in = |from: u32, to: u32| {
            let mut i = from;
            while i < to {
                let word = self.busy.get((i / 64) as usize).copied().unwrap_or(0);
                // The free offsets from i on in this word (the shift brings in no free bits).
                let free = !word >> (i % 64);
                if free != 0 {
                    let first = i + free.trailing_zeros();
                    return (first < to).then_some(first as u16);
                }
                i = (i / 64 + 1) * 64;
            }
            None
        };
        free_in(u32::from(start), u32::from(span)).or_else(|| free_in(0, u32::from(start)))
    }
}

impl PortBook {
    /// Ports `base .. base + span` (torchrun's default `MASTER_PORT` is 29500), each cooling
    /// for `cooldown_s` once given back.
    pub fn new(base: u16, span: u16, cooldown_s: f64) -> PortBook {
        let span = span.clamp(1, u16::MAX - base.min(u16::MAX - 1));
        PortBook { base, span, cooldown_s, hosts: BTreeMap::new(), held: BTreeMap::new() }
    }

    /// A port on `host` for a new generation of `job` at time `now_s`, its previous port (if
    /// any) given back. `None` if every port of the range there is held or cooling.
    pub fn take(&mut self, job: u64, host: &str, now_s: f64) -> Option<u16> {
        let previous = self.release(job, now_s);
        let start = match &previous {
            Some((h, port)) if h == host => (port - self.base + 1) % self.span,
            _ => 0,
        };
        let ports = match self.hosts.get_mut(host) {
            Some(p) => p,
            None => self.hosts.entry(host.to_string()).or_default(),
        };
        ports.cool(now_s);
        if ports.num_busy >= usize::from(self.span) {
            return None;
        }
        let i = ports.first_free(start, self.span)?;
        ports.set(i, true);
        let port = self.base + i;
        self.held.insert(job, (host.to_string(), port));
        Some(port)
    }

    /// The job ended (or runs nowhere): its port cools from `now_s`, then is free again.
    /// Returns what it held.
    pub fn release(&mut self, job: u64, now_s: f64) -> Option<(String, u16)> {
        let (host, port) = self.held.remove(&job)?;
        let ports = self.hosts.entry(host.clone()).or_default();
        ports.cooling.push_back((now_s + self.cooldown_s, port - self.base));
        Some((host, port))
    }

    /// The port `job` holds, and on which host.
    pub fn held(&self, job: u64) -> Option<(&str, u16)> {
        self.held.get(&job).map(|(m, p)| (m.as_str(), *p))
    }

    /// The address whose ports are most used, and how many of them are held or cooling at
    /// `now_s` (`None`: no port was ever taken); the range holds [`PortBook::span`] per address.
    pub fn busiest(&self, now_s: f64) -> Option<(&str, usize)> {
        let busy = |p: &HostPorts| p.num_busy - p.cooling.iter().filter(|(free_at, _)| *free_at <= now_s).count();
        self.hosts.iter().map(|(h, p)| (h.as_str(), busy(p))).max_by_key(|(_, n)| *n)
    }

    /// Ports per address.
    pub fn span(&self) -> u16 {
        self.span
    }
}

impl Default for PortBook {
    /// Ports 29500–30499, each cooling for 60 s (twice an agent's default grace).
    fn default() -> Self {
        PortBook::new(29500, 1000, 60.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranks_are_contiguous_per_machine_in_name_order() {
        let members = [("node-2", "b"), ("node-1", "z"), ("node-2", "a"), ("node-1", "y"), ("node-3", "c")];
        let ranks = layout(&members);
        let r = |i: usize| (ranks[i].rank, ranks[i].local_rank, ranks[i].local_world_size, ranks[i].group_rank);
        // node-1: y (0), z (1); node-2: a (2), b (3); node-3: c (4).
        assert_eq!(
            [r(3), r(1), r(2), r(0), r(4)],
            [(0, 0, 2, 0), (1, 1, 2, 0), (2, 0, 2, 1), (3, 1, 2, 1), (4, 0, 1, 2)]
        );
        assert!(ranks.iter().all(|r| r.world_size == 5));
        assert!(layout(&[]).is_empty());
    }

    #[test]
    fn two_jobs_on_one_host_never_share_a_port_and_a_port_cools_before_reuse() {
        let mut book = PortBook::new(29500, 4, 10.0);
        assert_eq!(book.take(1, "m", 0.0), Some(29500));
        assert_eq!(book.take(2, "m", 0.0), Some(29501));
        assert_eq!(book.take(3, "other", 0.0), Some(29500), "another host's ports are its own");
        // Job 1's next generation moves on; its old port cools, and no other job gets it.
        assert_eq!(book.take(1, "m", 1.0), Some(29502));
        assert_eq!(book.take(4, "m", 1.0), Some(29503));
        assert_eq!(book.take(5, "m", 2.0), None, "held or cooling, every one");
        // Cooled down: free again.
        assert_eq!(book.take(5, "m", 11.5), Some(29500));
        assert_eq!(book.held(5), Some(("m", 29500)));
        assert_eq!(book.release(2, 12.0), Some(("m".to_string(), 29501)));
        assert_eq!(book.release(2, 12.0), None);
        assert_eq!(book.take(6, "m", 13.0), None);
        assert_eq!(book.take(6, "m", 22.5), Some(29501));
        // A job whose rank 0 moves to another host gives its port back.
        assert_eq!(book.take(1, "other", 23.0), Some(29501));
        assert_eq!(book.held(1), Some(("other", 29501)));
    }

    /// The book as first written: every busy port in a map with when it is free, swept at every
    /// take. Slow (a pass over the busy ports per take) and plainly right: the oracle.
    struct Reference {
        base: u16,
        span: u16,
        cooldown_s: f64,
        busy: BTreeMap<String, BTreeMap<u16, f64>>,
        held: BTreeMap<u64, (String, u16)>,
    }

    impl Reference {
        fn take(&mut self, job: u64, host: &str, now_s: f64) -> Option<u16> {
            let previous = self.release(job, now_s);
            let start = match &previous {
                Some((h, port)) if h == host => u32::from(port - self.base) + 1,
                _ => 0,
            };
            let (base, span) = (u32::from(self.base), u32::from(self.span));
            let busy = self.busy.entry(host.to_string()).or_default();
            busy.retain(|_, free_at| *free_at > now_s);
            let port = (0..span).map(|i| (base + (start + i) % span) as u16).find(|p| !busy.contains_key(p))?;
            busy.insert(port, f64::INFINITY);
            self.held.insert(job, (host.to_string(), port));
            Some(port)
        }

        fn release(&mut self, job: u64, now_s: f64) -> Option<(String, u16)> {
            let (host, port) = self.held.remove(&job)?;
            self.busy.entry(host.clone()).or_default().insert(port, now_s + self.cooldown_s);
            Some((host, port))
        }
    }

    /// The documented limit: an address's ports hold its running generations plus those
    /// that ended in the last cooldown; past that no port, and the busiest address says so.
    #[test]
    fn the_limit_is_running_generations_plus_the_last_cooldowns_ends() {
        let mut book = PortBook::default();
        let span = usize::from(book.span());
        for job in 0..500 {
            assert!(book.take(job, "shared", 0.0).is_some());
        }
        // Every job starts a new generation: 500 running, 500 cooling.
        for job in 0..500 {
            assert!(book.take(job, "shared", 1.0).is_some());
        }
        assert_eq!(book.busiest(1.0), Some(("shared", span)));
        assert_eq!(book.take(500, "shared", 1.0), None, "every port held or cooling");
        assert_eq!(book.busiest(61.0), Some(("shared", 500)), "cooled after 60 s");
        assert!(book.take(500, "shared", 61.0).is_some());
        assert_eq!(PortBook::default().busiest(0.0), None);
    }

    proptest! {
        #[test]
        fn every_generation_is_one_consistent_world(
            members in proptest::collection::vec((0u8..4, 0u16..500), 0..40),
        ) {
            let mut seen = std::collections::BTreeSet::new();
            let owned: Vec<(String, String)> = members
                .iter()
                .filter(|(_, w)| seen.insert(*w))
                .map(|(m, w)| (format!("m{m}"), format!("w{w}")))
                .collect();
            let pairs: Vec<(&str, &str)> = owned.iter().map(|(m, w)| (m.as_str(), w.as_str())).collect();
            let ranks = layout(&pairs);
            let n = pairs.len() as u32;
            // Ranks 0..n, each once.
            let mut all: Vec<u32> = ranks.iter().map(|r| r.rank).collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..n).collect::<Vec<_>>());
            for (i, r) in ranks.iter().enumerate() {
                prop_assert_eq!(r.world_size, n);
                let same: Vec<usize> = (0..pairs.len()).filter(|&j| pairs[j].0 == pairs[i].0).collect();
                prop_assert_eq!(r.local_world_size as usize, same.len());
                prop_assert!(r.local_rank < r.local_world_size);
                // Contiguous per machine: rank − local_rank is the same on a machine, and the
                // machine's group rank is the same too.
                for &j in &same {
                    prop_assert_eq!(ranks[j].rank - ranks[j].local_rank, r.rank - r.local_rank);
                    prop_assert_eq!(ranks[j].group_rank, r.group_rank);
                }
            }
        }

        #[test]
        fn the_book_hands_out_what_the_plain_sweep_would(
            span in 1u16..200,
            ops in proptest::collection::vec((0u64..300, 0u8..3, any::<bool>(), 0u8..4), 0..400),
        ) {
            let (base, cooldown) = (29500, 5.0);
            let mut book = PortBook::new(base, span, cooldown);
            let mut oracle = Reference { base, span, cooldown_s: cooldown, busy: BTreeMap::new(), held: BTreeMap::new() };
            let mut now = 0.0;
            for (job, host, release, dt) in ops {
                now += f64::from(dt) * 0.5;
                let host = format!("h{host}");
                if release {
                    prop_assert_eq!(book.release(job, now), oracle.release(job, now));
                } else {
                    prop_assert_eq!(book.take(job, &host, now), oracle.take(job, &host, now));
                }
            }
        }

        #[test]
        fn ports_held_on_a_machine_are_distinct(ops in proptest::collection::vec((0u64..6, 0u8..2, any::<bool>()), 0..60)) {
            let mut book = PortBook::new(40000, 8, 3.0);
            for (t, (job, machine, release)) in ops.into_iter().enumerate() {
                let now = t as f64;
                if release {
                    book.release(job, now);
                } else if let Some(port) = book.take(job, &format!("m{machine}"), now) {
                    prop_assert!((40000..40008).contains(&port));
                }
                let mut per_machine: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
                for job in 0..6 {
                    if let Some((m, p)) = book.held(job) {
                        per_machine.entry(m).or_default().push(p);
                    }
                }
                for ports in per_machine.values() {
                    let mut unique = ports.clone();
                    unique.sort_unstable();
                    unique.dedup();
                    prop_assert_eq!(unique.len(), ports.len());
                }
            }
        }
    }
}
