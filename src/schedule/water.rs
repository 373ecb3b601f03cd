//! Max-min fair shares as a water level, computed to the bit as a plain bisection would.

/// The max-min fair shares of `capacity` among jobs bounded by `[min, max]` each: a common level
/// clamped to each job's bounds, chosen so the shares sum to the capacity (or all are at max).
///
/// The level is bisected sixty times, each step comparing the shares' sum, added in job order,
/// with the capacity. That sum is a chain of dependent additions (a third of a millisecond at
/// 4,000 jobs, twice an epoch); most steps are decided by a [`Piece`] of it (the jobs whose
/// bound lies between the bisection's ends added in eight lanes, the rest summed once), whose
/// distance from the capacity exceeds any rounding either sum can make, and only the steps too
/// close to call (the last few, near the level) add in job order. The level is the same to the
/// bit.
pub fn water_level(capacity: f64, bounds: &[(f64, f64)]) -> Vec<f64> {
    let total = |level: f64| bounds.iter().map(|&(lo, hi)| level.clamp(lo, hi)).sum::<f64>();
    // Non-negative finite bounds: every share is then non-negative, and either sum is within
    // `n + 3` roundings (relative) of the exact one, whatever order it adds in.
    let lanes = bounds.iter().all(|&(lo, hi)| lo >= 0.0 && lo <= hi && hi.is_finite());
    let margin = 16.0 * (bounds.len() as f64 + 4.0) * f64::EPSILON;
    let (mut lo, mut hi) = (0.0, capacity.max(1.0));
    let mut piece = lanes.then(|| Piece::new(bounds));
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        let fits = match piece.as_ref().map(|p| p.total(mid)) {
            Some(approx) if (approx - capacity).abs() > margin * approx => approx <= capacity,
            _ => total(mid) <= capacity,
        };
        if fits {
            lo = mid
        } else {
            hi = mid
        }
        if let Some(p) = piece.as_mut() {
            p.narrow(lo, hi);
        }
    }
    bounds.iter().map(|&(min, max)| lo.clamp(min, max)).collect()
}

/// The shares' sum as a piece of its line, valid between the bisection's bounds: the jobs held
/// at a bound there (their bound), those free there (the level each), and the few whose bound
/// falls inside (each clamped). As the bounds close in, jobs leave the last group, so a step
/// adds only those instead of every job.
struct Piece {
    held: f64,
    free: f64,
    inside: Vec<(f64, f64)>,
}

impl Piece {
    fn new(bounds: &[(f64, f64)]) -> Piece {
        Piece { held: 0.0, free: 0.0, inside: bounds.to_vec() }
    }

    fn total(&self, level: f64) -> f64 {
        self.held + self.free * level + lanes_total(level, &self.inside)
    }

    /// Moves the jobs with no bound strictly inside `(lo, hi)` out of `inside`.
    fn narrow(&mut self, lo: f64, hi: f64) {
        let (held, free) = (&mut self.held, &mut self.free);
        self.inside.retain(|&(min, max)| {
            if max <= lo {
                *held += max;
            } else if min >= hi {
                *held += min;
            } else if min <= lo && max >= hi {
                *free += 1.0;
            } else {
                return true;
            }
            false
        });
    }
}

/// The shares' sum at `level` in eight independent lanes (bounds ordered `min <= max`).
fn lanes_total(level: f64, bounds: &[(f64, f64)]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = bounds.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &(lo, hi)) in lanes.iter_mut().zip(chunk) {
            *lane += level.max(lo).min(hi);
        }
    }
    rest.iter().fold(lanes.iter().sum::<f64>(), |sum, &(lo, hi)| sum + level.max(lo).min(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: sixty bisections, each comparing the sum in job order.
    fn by_definition(capacity: f64, bounds: &[(f64, f64)]) -> Vec<f64> {
        let total = |level: f64| bounds.iter().map(|&(lo, hi)| level.clamp(lo, hi)).sum::<f64>();
        let (mut lo, mut hi) = (0.0, capacity.max(1.0));
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if total(mid) <= capacity { lo = mid } else { hi = mid }
        }
        bounds.iter().map(|&(min, max)| lo.clamp(min, max)).collect()
    }

    #[test]
    fn shares_fill_the_capacity_up_to_each_jobs_bounds() {
        let shares = water_level(10.0, &[(0.0, 2.0), (0.0, 100.0), (5.0, 100.0)]);
        assert_eq!(shares[0], 2.0);
        assert!((shares[1] - 3.0).abs() < 1e-9 && (shares[2] - 5.0).abs() < 1e-9, "{shares:?}");
    }

    proptest::proptest! {
        /// Equal to the bisection in job order, bit for bit, on bounds drawn from a few values
        /// (ties and jobs at their bounds are the rule in a cluster) and from a range.
        #[test]
        fn the_level_is_the_bisections_to_the_bit(
            bounds in proptest::collection::vec(
                (proptest::sample::select(vec![0.0f64, 1.0, 2.0, 3.5, 4.0]), proptest::sample::select(vec![0.0f64, 1.0, 4.0, 16.0, 4.294967295e9]), 0.0f64..50.0),
                0..300,
            ),
            capacity in 0u32..20_000,
        ) {
            let bounds: Vec<(f64, f64)> = bounds
                .iter()
                .enumerate()
                .map(|(i, &(lo, hi, x))| if i % 3 == 2 { (0.0, x) } else { (lo.min(hi), hi) })
                .collect();
            let capacity = f64::from(capacity);
            let fast: Vec<u64> = water_level(capacity, &bounds).iter().map(|x| x.to_bits()).collect();
            let plain: Vec<u64> = by_definition(capacity, &bounds).iter().map(|x| x.to_bits()).collect();
            proptest::prop_assert_eq!(fast, plain);
        }
    }
}
