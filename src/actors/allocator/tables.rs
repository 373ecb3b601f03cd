//! Every job's kept completion term ([`super::state::KeptTerm`]), side by side in one buffer in
//! the jobs' id order. Each epoch the policy reads every job's first values in that order; kept
//! one allocation per job, each read was a cache miss the processor could not see coming (perf,
//! 4,000 jobs: the first read of each job's table was 12% of a steady epoch). In one buffer in
//! job order the reads walk forwards through memory.
//!
//! A job's values stay in its slot while they fit there (a new bid overwrites them); values
//! that do not fit go to the end, and so does a new job's. Once the slots placed at the end
//! since the last compaction are a tenth of the jobs, or the space left behind is as large as
//! what is live, [`KeptTables::compact`] lays every slot out again in job order.

use std::ops::Range;

/// A job's slot in [`KeptTables`]: its values and the room it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Slot {
    start: u32,
    len: u32,
    cap: u32,
}

impl Slot {
    fn range(self) -> Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }
}

#[derive(Debug, Default)]
pub(super) struct KeptTables {
    data: Vec<f64>,
    /// Values no slot holds any more (left behind by a move or a job that ended).
    dead: usize,
    /// Slots placed at the end since the last compaction, out of the jobs' order.
    placed_at_end: usize,
}

impl KeptTables {
    /// A job's values.
    pub(super) fn get(&self, slot: Slot) -> &[f64] {
        self.data.get(slot.range()).unwrap_or(&[])
    }

    /// Puts a job's new values where its old ones were (`old`), or at the end when they do not
    /// fit there; returns its slot. `room`: what its values may grow to (its table's longest),
    /// reserved when it moves so that it does not move again.
    pub(super) fn put(&mut self, old: Option<Slot>, values: &[f64], room: usize) -> Slot {
        let len = values.len() as u32;
        if let Some(mut slot) = old.filter(|s| len <= s.cap) {
            slot.len = len;
            self.data[slot.range()].copy_from_slice(values);
            return slot;
        }
        if let Some(old) = old {
            self.free(old);
        }
        let start = self.data.len() as u32;
        let cap = if old.is_some() { room.max(values.len()) } else { values.len() } as u32;
        self.data.extend_from_slice(values);
        self.data.resize((start + cap) as usize, 0.0);
        self.placed_at_end += 1;
        Slot { start, len, cap }
    }

    /// A slot no job holds any more.
    pub(super) fn free(&mut self, slot: Slot) {
        self.dead += slot.cap as usize;
    }

    /// Whether the slots have strayed far enough from the order of `jobs` jobs, or left enough
    /// behind, to be laid out again.
    pub(super) fn due(&self, jobs: usize) -> bool {
        self.placed_at_end > jobs / 10 || (self.dead > 0 && self.dead >= self.data.len() - self.dead)
    }

    /// Lays the slots out again, in the order given, each with its room.
    pub(super) fn compact<'a>(&mut self, slots: impl Iterator<Item = &'a mut Slot>) {
        let mut data = Vec::with_capacity(self.data.len() - self.dead);
        for slot in slots {
            let start = data.len() as u32;
            data.extend_from_slice(self.get(*slot));
            data.resize((start + slot.cap) as usize, 0.0);
            slot.start = start;
        }
        self.data = data;
        self.dead = 0;
        self.placed_at_end = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Job `j` bids values of this length (its room 64).
        Put(usize, usize),
        /// Job `j` ends.
        End(usize),
        Compact,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..12usize, 0..70usize).prop_map(|(j, n)| Op::Put(j, n)),
            1 => (0..12usize).prop_map(Op::End),
            1 => Just(Op::Compact),
        ]
    }

    proptest! {
        /// Whatever the bids, ends and compactions, every job reads back its latest values, the
        /// space is what is live plus what is counted dead, and a compaction keeps job order.
        #[test]
        fn every_job_reads_back_its_latest_values(ops in proptest::collection::vec(op(), 0..200)) {
            let mut tables = KeptTables::default();
            let mut slots: Vec<Option<Slot>> = vec![None; 12];
            let mut want: Vec<Vec<f64>> = vec![Vec::new(); 12];
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Put(j, n) => {
                        let values: Vec<f64> = (0..n).map(|k| (i * 100 + k) as f64).collect();
                        slots[j] = Some(tables.put(slots[j], &values, 64));
                        want[j] = values;
                    }
                    Op::End(j) => {
                        if let Some(s) = slots[j].take() {
                            tables.free(s);
                        }
                        want[j].clear();
                    }
                    Op::Compact => {
                        tables.compact(slots.iter_mut().flatten());
                        let starts: Vec<u32> = slots.iter().flatten().map(|s| s.start).collect();
                        prop_assert!(starts.is_sorted());
                        prop_assert_eq!(tables.dead, 0);
                    }
                }
                for (s, w) in slots.iter().zip(&want) {
                    prop_assert_eq!(s.map_or(&[][..], |s| tables.get(s)), &w[..]);
                }
                let live: usize = slots.iter().flatten().map(|s| s.cap as usize).sum();
                prop_assert_eq!(live + tables.dead, tables.data.len());
            }
        }
    }

    #[test]
    fn a_table_that_outgrows_its_slot_moves_once_with_room_to_grow() {
        let mut tables = KeptTables::default();
        let a = tables.put(None, &[1.0, 2.0], 8);
        let b = tables.put(None, &[3.0], 8);
        // Shorter: in place.
        let a = tables.put(Some(a), &[4.0], 8);
        assert_eq!((a.start, tables.get(a)), (0, &[4.0][..]));
        // Longer: to the end, with its room.
        let a = tables.put(Some(a), &[5.0, 6.0, 7.0], 8);
        assert_eq!((a.start, a.cap, tables.get(a)), (3, 8, &[5.0, 6.0, 7.0][..]));
        let a2 = tables.put(Some(a), &[1.0; 8], 8);
        assert_eq!(a2.start, a.start, "within its room it stays");
        assert_eq!(tables.get(b), &[3.0]);
        assert!(!tables.due(100));
        assert!(tables.due(10), "two of two jobs placed at the end");
    }
}
