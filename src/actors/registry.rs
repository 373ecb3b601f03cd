//! The worker registry: which workers exist, when each was last heard from, and which job each
//! serves. A plain struct (no actix): the allocator actor owns it.

use std::collections::BTreeMap;

use crate::protocol::{Launch, Role, WorkerSpec};

#[derive(Clone, Debug, PartialEq)]
pub struct WorkerEntry {
    pub spec: Box<WorkerSpec>,
    /// Seconds (on the caller's monotonic clock) of the last hello or heartbeat.
    pub last_seen_s: f64,
    pub job: Option<JobRef>,
    /// What it does for its job (a parameter-server job's servers are `Ps`).
    pub role: Role,
    /// When its assignment was last published (seconds on the caller's clock); `-inf`: never.
    pub told_s: f64,
    /// Its place in its job's current generation, as last published.
    pub launch: Option<Box<Launch>>,
    /// Assignments and commands its agent says it refused.
    pub refused: u64,
    /// Its slot in the registry's heartbeat index (`Silence`).
    slot: u32,
}

/// The job a worker serves: its name, and the allocator's key for it (unique per job for the
/// life of the process), which the epoch's bookkeeping compares instead of names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRef {
    pub key: u64,
    pub id: String,
}

/// The type of a worker that names none.
pub const DEFAULT_ACCELERATOR: &str = "default";

/// A worker's type: its `kind` (`slaq worker --accelerator`), `default` without one.
pub fn accelerator(spec: &WorkerSpec) -> &str {
    spec.kind.as_deref().unwrap_or(DEFAULT_ACCELERATOR)
}

/// Workers by id, in id order (the worker order of placements).
///
/// What an epoch asks of the workers is kept as they change, so that it need not scan every
/// worker for it: who may have gone silent (`Silence`, an index of the workers by when they
/// were last heard from), how many workers name a machine, and how many are of each type.
#[derive(Clone, Debug)]
pub struct WorkerRegistry {
    workers: BTreeMap<String, WorkerEntry>,
    silence: Silence,
    with_machine: usize,
    /// Workers per type (`accelerator`), types with none removed.
    per_type: BTreeMap<String, usize>,
    /// Workers added or removed so far (a hello counts, known worker or not).
    changes: u64,
}

impl Default for WorkerRegistry {
    /// A registry for the default worker timeout (15 s).
    fn default() -> Self {
        WorkerRegistry::new(15.0)
    }
}

impl WorkerRegistry {
    /// An empty registry whose workers usually expire after `timeout_s` of silence (what sizes
    /// its heartbeat index; `expire` takes any timeout).
    pub fn new(timeout_s: f64) -> Self {
        WorkerRegistry {
            workers: BTreeMap::new(),
            silence: Silence::new(timeout_s / 8.0),
            with_machine: 0,
            per_type: BTreeMap::new(),
            changes: 0,
        }
    }

    /// A worker says hello (again): it keeps its job if it had one.
    pub fn hello(&mut self, spec: WorkerSpec, now_s: f64) {
        let id = spec.worker.clone();
        let (job, role, told_s, launch, refused) =
            self.remove(&id).map_or((None, Role::Worker, f64::NEG_INFINITY, None, 0), |w| {
                (w.job, w.role, w.told_s, w.launch, w.refused)
            });
        self.insert(WorkerEntry {
            spec: Box::new(spec),
            last_seen_s: now_s,
            job,
            role,
            told_s,
            launch,
            refused,
            slot: 0,
        });
    }

    /// A worker known from saved state, with the job it served.
    pub fn restore(&mut self, spec: WorkerSpec, job: Option<JobRef>, now_s: f64) {
        let entry = WorkerEntry {
            spec: Box::new(spec),
            last_seen_s: now_s,
            job,
            role: Role::Worker,
            told_s: f64::NEG_INFINITY,
            launch: None,
            refused: 0,
            slot: 0,
        };
        self.remove(&entry.spec.worker);
        self.insert(entry);
    }

    fn insert(&mut self, mut entry: WorkerEntry) {
        self.changes += 1;
        entry.slot = self.silence.add(&entry.spec.worker, entry.last_seen_s);
        self.with_machine += usize::from(entry.spec.machine.is_some());
        *self.per_type.entry(accelerator(&entry.spec).to_string()).or_default() += 1;
        self.workers.insert(entry.spec.worker.clone(), entry);
    }

    fn remove(&mut self, worker: &str) -> Option<WorkerEntry> {
        let entry = self.workers.remove(worker)?;
        self.silence.free(entry.slot);
        self.changes += 1;
        self.with_machine -= usize::from(entry.spec.machine.is_some());
        let kind = accelerator(&entry.spec);
        if let Some(n) = self.per_type.get_mut(kind) {
            *n -= 1;
            if *n == 0 {
                self.per_type.remove(kind);
            }
        }
        Some(entry)
    }

    /// Every worker counts as heard from now (after an outage of our own).
    pub fn touch_all(&mut self, now_s: f64) {
        self.workers.values_mut().for_each(|w| w.last_seen_s = now_s);
        self.silence.touch_all(now_s);
    }

    /// A heartbeat; `false` if the worker is unknown (it must say hello first).
    pub fn beat(&mut self, worker: &str, now_s: f64) -> bool {
        match self.workers.get_mut(worker) {
            Some(w) => {
                w.last_seen_s = now_s;
                self.silence.seen(w.slot, now_s);
                true
            }
            None => false,
        }
    }

    /// Forgets workers silent for longer than `timeout_s`; returns them, in id order, with the
    /// job each had. Reads only the workers last heard from about a timeout ago or earlier
    /// (`Silence`), not every worker: a full scan once per timeout was 31% of an epoch at
    /// 1,000,000 workers.
    pub fn expire(&mut self, now_s: f64, timeout_s: f64) -> Vec<(String, Option<JobRef>)> {
        let mut gone = self.silence.silent(now_s, timeout_s);
        gone.sort_unstable();
        gone.into_iter().filter_map(|id| self.remove(&id).map(|w| (id, w.job))).collect()
    }

    /// How many times a worker was added or removed: the workers' order and their jobs are as
    /// they were while this has not changed (except through `get_mut` and `iter_mut`).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether any worker names its machine (kept as they come and go, not scanned).
    pub fn any_machine(&self) -> bool {
        self.with_machine > 0
    }

    /// The types of the workers, sorted, with how many workers each (kept, not scanned).
    pub fn per_type(&self) -> impl Iterator<Item = (&str, usize)> {
        self.per_type.iter().map(|(k, &n)| (k.as_str(), n))
    }

    pub fn get(&self, worker: &str) -> Option<&WorkerEntry> {
        self.workers.get(worker)
    }

    /// A worker's entry to change. Its spec and `last_seen_s` are changed through `hello` and
    /// `beat` only (the registry keeps figures over them).
    pub fn get_mut(&mut self, worker: &str) -> Option<&mut WorkerEntry> {
        self.workers.get_mut(worker)
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &WorkerEntry)> {
        self.workers.iter()
    }

    /// The entries to change, as with `get_mut`.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut WorkerEntry)> {
        self.workers.iter_mut()
    }
}

/// The workers by when they were last heard from, so that those silent for a timeout are found
/// without reading the others: a timing wheel. Time is cut into buckets of `width_s`; each
/// worker is on the list of the bucket of its last heartbeat (doubly linked through its slot),
/// and a heartbeat that reaches a later bucket moves it there in constant time. `silent` walks
/// only the buckets a timeout old and older: the silent workers, and those within two buckets
/// of silence.
#[derive(Clone, Debug)]
struct Silence {
    width_s: f64,
    slots: Vec<Node>,
    free: Vec<u32>,
    /// Each bucket's first worker (buckets without one are removed).
    buckets: BTreeMap<i64, u32>,
}

/// A worker in the wheel (`id` empty: a free slot).
#[derive(Clone, Debug)]
struct Node {
    id: String,
    /// When it was last heard from: it is on the list of this time's bucket.
    seen_s: f64,
    prev: u32,
    next: u32,
}

/// No slot.
const NIL: u32 = u32::MAX;

impl Silence {
    fn new(width_s: f64) -> Self {
        let width_s = if width_s.is_finite() && width_s > 1e-3 { width_s } else { 1e-3 };
        Silence { width_s, slots: Vec::new(), free: Vec::new(), buckets: BTreeMap::new() }
    }

    fn bucket(&self, at_s: f64) -> i64 {
        let q = at_s / self.width_s;
        let b = q as i64; // Toward zero (saturating): one less below zero, for the floor.
        if (b as f64) > q { b - 1 } else { b }
    }

    fn link(&mut self, slot: u32, bucket: i64) {
        let head = self.buckets.insert(bucket, slot).unwrap_or(NIL);
        if let Some(h) = self.slots.get_mut(head as usize) {
            h.prev = slot;
        }
        let node = &mut self.slots[slot as usize];
        (node.prev, node.next) = (NIL, head);
    }

    fn unlink(&mut self, slot: u32) {
        let Node { prev, next, seen_s, .. } = self.slots[slot as usize];
        let bucket = self.bucket(seen_s);
        match self.slots.get_mut(prev as usize) {
            Some(p) => p.next = next,
            None if next == NIL => {
                self.buckets.remove(&bucket);
            }
            None => {
                self.buckets.insert(bucket, next);
            }
        }
        if let Some(n) = self.slots.get_mut(next as usize) {
            n.prev = prev;
        }
    }

    /// A worker joins, last heard from at `seen_s`: its slot.
    fn add(&mut self, id: &str, seen_s: f64) -> u32 {
        let node = Node { id: id.to_string(), seen_s, prev: NIL, next: NIL };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = node;
                slot
            }
            None => {
                self.slots.push(node);
                (self.slots.len() - 1) as u32
            }
        };
        self.link(slot, self.bucket(seen_s));
        slot
    }

    fn free(&mut self, slot: u32) {
        self.unlink(slot);
        self.slots[slot as usize].id = String::new();
        self.free.push(slot);
    }

    /// The worker in `slot` was heard from at `now_s`.
    fn seen(&mut self, slot: u32, now_s: f64) {
        let bucket = self.bucket(now_s);
        if self.bucket(self.slots[slot as usize].seen_s) != bucket {
            self.unlink(slot);
            self.link(slot, bucket);
        }
        self.slots[slot as usize].seen_s = now_s;
    }

    /// Every worker was heard from at `now_s`.
    fn touch_all(&mut self, now_s: f64) {
        self.buckets.clear();
        let bucket = self.bucket(now_s);
        for slot in 0..self.slots.len() as u32 {
            if !self.slots[slot as usize].id.is_empty() {
                self.slots[slot as usize].seen_s = now_s;
                self.link(slot, bucket);
            }
        }
    }

    /// The workers silent for longer than `timeout_s` at `now_s` (their slots freed by the
    /// registry's `remove`). A worker so silent was last heard from before `now_s - timeout_s`
    /// (give or take a rounding), so in that bucket or an earlier one: one bucket more is read
    /// for the rounding.
    fn silent(&self, now_s: f64, timeout_s: f64) -> Vec<String> {
        let last = self.bucket(now_s - timeout_s).saturating_add(1);
        let mut gone = Vec::new();
        for (_, &head) in self.buckets.range(..=last) {
            let mut slot = head;
            while let Some(node) = self.slots.get(slot as usize) {
                if now_s - node.seen_s > timeout_s {
                    gone.push(node.id.clone());
                }
                slot = node.next;
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str) -> WorkerSpec {
        WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None }
    }

    #[test]
    fn silent_workers_expire_with_their_job() {
        let mut r = WorkerRegistry::default();
        r.hello(spec("a"), 0.0);
        r.hello(spec("b"), 0.0);
        let j = JobRef { key: 1, id: "j".into() };
        r.iter_mut().for_each(|(_, w)| w.job = Some(j.clone()));
        assert!(r.beat("a", 9.0));
        assert!(!r.beat("zzz", 9.0));
        assert_eq!(r.expire(12.0, 10.0), vec![("b".to_string(), Some(j.clone()))]);
        assert_eq!(r.len(), 1);
        r.hello(spec("a"), 13.0);
        assert_eq!(r.iter().next().unwrap().1.job, Some(j), "a re-hello keeps the job");
    }

    /// The registry against a plain model (every worker's last hello or beat, expired by a scan
    /// at every call): the heartbeat index must find exactly whom a scan finds, whether its
    /// buckets are sized for this timeout, a far shorter or a far longer one, and the machine
    /// count and the counts per type must follow hellos, restores and expiries.
    #[test]
    fn expiring_by_the_index_forgets_exactly_whom_a_full_scan_forgets() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        #[derive(Clone, Debug)]
        enum Op {
            Hello(u8, bool),
            Restore(u8, bool),
            Beat(u8),
            Expire,
            TouchAll,
        }
        let op = prop_oneof![
            (0u8..12, any::<bool>()).prop_map(|(w, m)| Op::Hello(w, m)),
            (0u8..12, any::<bool>()).prop_map(|(w, m)| Op::Restore(w, m)),
            (0u8..12).prop_map(Op::Beat),
            Just(Op::Expire),
            Just(Op::TouchAll),
        ];
        let ops = proptest::collection::vec((op, 0u8..4, any::<bool>()), 1..80);
        let sized_for = proptest::sample::select(vec![0.1f64, 5.0, 40.0, 1e6]);
        TestRunner::new(Config { cases: 2_000, ..Config::default() })
            .run(&(ops, sized_for), |(ops, sized_for)| {
                let mut r = WorkerRegistry::new(sized_for);
                let mut model: BTreeMap<String, (f64, bool)> = BTreeMap::new();
                let mut now = 0.0;
                for (op, dt, quarter) in ops {
                    now += f64::from(dt) + if quarter { 0.25 } else { 0.0 };
                    // A hello again may change a worker's type as well as its machine.
                    let with = |w: u8, m: bool| WorkerSpec {
                        machine: m.then(|| "m".to_string()),
                        kind: [None, Some("k80".to_string()), Some("v100".to_string())]
                            [(w as usize + usize::from(m)) % 3]
                            .clone(),
                        ..spec(&format!("w{w}"))
                    };
                    match op {
                        Op::Hello(w, m) => {
                            r.hello(with(w, m), now);
                            model.insert(format!("w{w}"), (now, m));
                        }
                        Op::Restore(w, m) => {
                            r.restore(with(w, m), None, now);
                            model.insert(format!("w{w}"), (now, m));
                        }
                        Op::Beat(w) => {
                            let known = model.get_mut(&format!("w{w}")).map(|e| e.0 = now).is_some();
                            prop_assert_eq!(r.beat(&format!("w{w}"), now), known);
                        }
                        Op::TouchAll => {
                            r.touch_all(now);
                            model.values_mut().for_each(|e| e.0 = now);
                        }
                        Op::Expire => {
                            let gone: Vec<String> = r.expire(now, 5.0).into_iter().map(|(id, _)| id).collect();
                            let want: Vec<String> =
                                model.iter().filter(|(_, e)| now - e.0 > 5.0).map(|(id, _)| id.clone()).collect();
                            model.retain(|_, e| now - e.0 <= 5.0);
                            prop_assert_eq!(gone, want);
                        }
                    }
                    prop_assert_eq!(r.len(), model.len());
                    prop_assert_eq!(r.any_machine(), model.values().any(|e| e.1));
                    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
                    r.iter().for_each(|(_, w)| *kinds.entry(accelerator(&w.spec)).or_default() += 1);
                    prop_assert_eq!(r.per_type().collect::<BTreeMap<_, _>>(), kinds);
                }
                Ok(())
            })
            .unwrap();
    }
}
