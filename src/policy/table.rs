//! Gain tables: a job's gains `g(0..len)` evaluated once, when its bid is made (at refit), so
//! that an allocation reads numbers instead of evaluating curves. Past the table the curve
//! itself answers, so a table changes no decision: `Tabled::gain(w)` is bit-for-bit `g(w)`.

use std::sync::Arc;

use super::GainFn;

/// Entries a table holds at most by default: about ten times the workers a job gets in the
/// benchmarks' clusters (4 per job at 4,000 × 16,000 and 10 at 100,000 × 1,000,000).
pub const DEFAULT_TABLE_LEN: usize = 64;

/// A gain function with its first values precomputed; cloning shares the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Tabled<G> {
    values: Arc<[f64]>,
    curve: G,
}

impl<G: GainFn> Tabled<G> {
    /// Tabulates `curve` for `w = 0, 1, …` up to `max_workers`, at most `max_len` entries, and
    /// stops early after the first value that is not finite or not above the one before (the
    /// greedy stops there; should it go on, the curve answers).
    pub fn new(curve: G, max_workers: u32, max_len: usize) -> Self {
        let len = max_len.min(max_workers as usize + 1).max(1);
        let mut values = Vec::with_capacity(len);
        values.push(curve.gain(0));
        for w in 1..len as u32 {
            let g = curve.gain(w);
            values.push(g);
            if !(g.is_finite() && g > values[values.len() - 2]) {
                break;
            }
        }
        Tabled { values: values.into(), curve }
    }
}

impl<G> Tabled<G> {
    /// The curve behind the table.
    pub fn curve(&self) -> &G {
        &self.curve
    }

    /// Entries tabulated.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Bytes the table adds to a bid (its values and the shared pointer's counts).
    pub fn table_bytes(&self) -> usize {
        self.values.len() * size_of::<f64>() + 2 * size_of::<usize>()
    }
}

impl<G: GainFn> GainFn for Tabled<G> {
    #[inline]
    fn gain(&self, workers: u32) -> f64 {
        match self.values.get(workers as usize) {
            Some(&g) => g,
            None => self.curve.gain(workers),
        }
    }

    fn table(&self) -> &[f64] {
        &self.values
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        if speed == 1.0 { self.gain(workers) } else { self.curve.gain_at_speed(workers, speed) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_answers_as_its_curve_does_inside_and_past_it() {
        let curve = |w: u32| (f64::from(w) + 1.0).ln() - 0.01 * f64::from(w);
        let t = Tabled::new(curve, 1_000, 16);
        assert_eq!(t.len(), 16);
        for w in 0..200 {
            assert_eq!(t.gain(w).to_bits(), curve(w).to_bits());
        }
        // Stops after the gain stops rising (ln(w+1) − w/100 peaks at w = 99).
        assert_eq!(Tabled::new(curve, 1_000, 1_000).len(), 101);
        // And at the maximum.
        assert_eq!(Tabled::new(curve, 3, 1_000).len(), 4);
        // g(0) is always there.
        assert!(!t.is_empty() && Tabled::new(curve, 0, 0).len() == 1);
        // 16 values of 8 bytes and the shared pointer's two counts.
        assert_eq!(t.table_bytes(), 16 * 8 + 2 * std::mem::size_of::<usize>());
    }
}
