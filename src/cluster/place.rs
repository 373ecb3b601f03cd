//! Placement with locality (Yu et al., "Toward Efficient Online Scheduling for Distributed
//! Machine Learning Systems", 2021): which machines a job's slots (workers and parameter
//! servers) go on, given how many it gets. The objective is the sum over jobs of the predicted
//! step time of their layouts, `cost(job, counts per machine)`, supplied by the caller from each
//! job's [`super::model::PerfParams`].
//!
//! - [`lp_rounding`]: Yu et al.'s method. The mixed packing-covering integer program (each job is
//!   covered exactly once, by one machine that holds it whole or by a spread layout; no machine's
//!   slots are over-packed) is relaxed to an LP (solved by `microlp`), whose solution is rounded
//!   at random: job `j` goes whole on machine `m` with probability `z_jm`, spread with
//!   probability `s_j`, and a rounded choice that no longer fits is **repaired** to the best fit
//!   that does. The guarantee relied on is the relaxation's: its optimum is a lower bound on the
//!   integer optimum, and before repair each job's expected cost equals its LP cost (so the
//!   expected total equals the LP bound); by Raghavan–Thompson's Chernoff argument, which Yu et
//!   al. use, a machine's packing constraint is exceeded only by a factor of `O(log M / log log M)`
//!   with high probability. The repair is what we add for feasibility; its cost is measured
//!   (`slaq bench placement`), not bounded. The best of [`ROUNDS`] roundings is kept.
//!   Each job's whole-machine candidates are its `candidates` best-fitting machines, so the LP
//!   has `J·candidates + J` variables.
//! - [`greedy`]: best fit on as few machines as possible, largest jobs first: the fast method for
//!   when the LP is too slow.
//! - [`first_fit`], [`random`]: baselines. [`exact`]: branch and bound over every layout, for
//!   small instances.

use microlp::{ComparisonOp, OptimizationDirection, Problem};
use rand::RngExt;

/// Slots of one job per machine: `(machine, slots)`, machines distinct.
pub type Layout = Vec<(usize, u32)>;

/// Roundings tried by [`lp_rounding`].
pub const ROUNDS: usize = 8;

/// The predicted step time of job `j` laid out as `counts` (slots per machine used).
pub trait LayoutCost {
    fn cost(&self, job: usize, counts: &[u32]) -> f64;
}

impl<F: Fn(usize, &[u32]) -> f64> LayoutCost for F {
    fn cost(&self, job: usize, counts: &[u32]) -> f64 {
        self(job, counts)
    }
}

fn counts(layout: &Layout) -> Vec<u32> {
    layout.iter().map(|l| l.1).filter(|&c| c > 0).collect()
}

/// Sum of the jobs' costs (jobs with no slots cost nothing).
pub fn total_cost(layouts: &[Layout], cost: &impl LayoutCost) -> f64 {
    layouts.iter().enumerate().filter(|(_, l)| !l.is_empty()).map(|(j, l)| cost.cost(j, &counts(l))).sum()
}

/// One job of `want` slots on as few machines as possible, best fit: the machine with the least
/// room that holds what is left, else the one with the most room, again. Takes the slots from
/// `free`. Returns an incomplete layout if the cluster runs out.
pub fn best_fit(free: &mut [u32], want: u32) -> Layout {
    let mut layout = Layout::new();
    let mut left = want;
    while left > 0 {
        let fit = (0..free.len()).filter(|&m| free[m] >= left).min_by_key(|&m| (free[m], m));
        let m = match fit {
            Some(m) => m,
            None => match (0..free.len()).filter(|&m| free[m] > 0).max_by_key(|&m| (free[m], usize::MAX - m)) {
                Some(m) => m,
                None => break,
            },
        };
        let take = free[m].min(left);
        free[m] -= take;
        left -= take;
        layout.push((m, take));
    }
    layout
}

/// Largest jobs first, each by [`best_fit`].
pub fn greedy(free: &[u32], demands: &[u32]) -> Vec<Layout> {
    let mut free = free.to_vec();
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|&j| (std::cmp::Reverse(demands[j]), j));
    let mut out = vec![Layout::new(); demands.len()];
    for j in order {
        out[j] = best_fit(&mut free, demands[j]);
    }
    out
}

/// Jobs in order, each filling free slots in machine order.
pub fn first_fit(free: &[u32], demands: &[u32]) -> Vec<Layout> {
    let mut free = free.to_vec();
    let mut m = 0;
    demands
        .iter()
        .map(|&want| {
            let mut layout = Layout::new();
            let mut left = want;
            while left > 0 && m < free.len() {
                let take = free[m].min(left);
                if take > 0 {
                    layout.push((m, take));
                    free[m] -= take;
                    left -= take;
                }
                if free[m] == 0 {
                    m += 1;
                }
            }
            layout
        })
        .collect()
}

/// Every slot of every job on a free slot drawn uniformly at random.
pub fn random(free: &[u32], demands: &[u32], rng: &mut impl rand::Rng) -> Vec<Layout> {
    let mut slots: Vec<usize> =
        free.iter().enumerate().flat_map(|(m, &f)| std::iter::repeat_n(m, f as usize)).collect();
    demands
        .iter()
        .map(|&want| {
            let mut per = std::collections::BTreeMap::new();
            for _ in 0..want.min(slots.len() as u32) {
                let i = rng.random_range(0..slots.len());
                *per.entry(slots.swap_remove(i)).or_insert(0u32) += 1;
            }
            per.into_iter().collect()
        })
        .collect()
}

/// The optimum by branch and bound over every layout of every job (jobs with the most slots
/// first; machines with equal room and no slots taken yet are interchangeable, so only the first
/// of them is tried). For small instances: the work grows exponentially.
pub fn exact(free: &[u32], demands: &[u32], cost: &impl LayoutCost) -> (Vec<Layout>, f64) {
    struct Search<'a, C> {
        demands: &'a [u32],
        order: Vec<usize>,
        cost: &'a C,
        initial: Vec<u32>,
        best: f64,
        best_layouts: Vec<Layout>,
        current: Vec<Layout>,
    }
    impl<C: LayoutCost> Search<'_, C> {
        fn job(&mut self, depth: usize, free: &mut Vec<u32>, acc: f64) {
            if acc >= self.best - 1e-12 {
                return;
            }
            let Some(&j) = self.order.get(depth) else {
                self.best = acc;
                self.best_layouts = self.current.clone();
                return;
            };
            let mut counts = vec![0u32; free.len()];
            self.split(depth, j, 0, self.demands[j], free, &mut counts, acc);
        }
        #[allow(clippy::too_many_arguments)]
        fn split(
            &mut self,
            depth: usize,
            j: usize,
            m: usize,
            left: u32,
            free: &mut Vec<u32>,
            counts: &mut Vec<u32>,
            acc: f64,
        ) {
            if left == 0 {
                let layout: Layout = counts.iter().enumerate().filter(|c| *c.1 > 0).map(|(m, &c)| (m, c)).collect();
                let c = self.cost.cost(j, &layout.iter().map(|l| l.1).collect::<Vec<_>>());
                self.current[j] = layout;
                self.job(depth + 1, free, acc + c);
                self.current[j].clear();
                return;
            }
            if m == free.len() {
                return;
            }
            // An untouched machine like an earlier untouched one, which got nothing: skip it.
            let untouched = |k: usize, free: &Vec<u32>| free[k] == self.initial[k];
            let twin = untouched(m, free)
                && (0..m).any(|k| counts[k] == 0 && untouched(k, free) && self.initial[k] == self.initial[m]);
            let max = if twin { 0 } else { free[m].min(left) };
            for take in (0..=max).rev() {
                free[m] -= take;
                counts[m] = take;
                self.split(depth, j, m + 1, left - take, free, counts, acc);
                counts[m] = 0;
                free[m] += take;
            }
        }
    }
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|&j| (std::cmp::Reverse(demands[j]), j));
    let mut search = Search {
        demands,
        order,
        cost,
        initial: free.to_vec(),
        best: f64::INFINITY,
        best_layouts: vec![Layout::new(); demands.len()],
        current: vec![Layout::new(); demands.len()],
    };
    search.job(0, &mut free.to_vec(), 0.0);
    (search.best_layouts, search.best)
}

/// The layout a spread job is priced at in the LP: its slots over as few machines of `slots`
/// each as possible, and at least two.
fn spread_counts(want: u32, slots: u32) -> Vec<u32> {
    let slots = slots.max(1);
    if want <= slots {
        return if want <= 1 { vec![want] } else { vec![want - want / 2, want / 2] };
    }
    let mut out = vec![slots; (want / slots) as usize];
    if !want.is_multiple_of(slots) {
        out.push(want % slots);
    }
    out
}

/// Yu et al.'s LP relaxation and randomized rounding (see the module's documentation). Falls
/// back to [`greedy`] if the LP fails. No clock: the simplex runs to its end, so the same input
/// and generator give the same layouts; its time grows with the jobs placed at once, which the
/// planner bounds (`schedule::LP_MAX_JOBS`; `slaq bench placement` times that size).
pub fn lp_rounding(
    free: &[u32],
    demands: &[u32],
    cost: &impl LayoutCost,
    candidates: usize,
    rng: &mut impl rand::Rng,
) -> Vec<Layout> {
    let Some(z) = relaxation(free, demands, cost, candidates) else { return greedy(free, demands) };
    // Most certain jobs first: their rounding is the least likely to be repaired.
    let mut order: Vec<usize> = (0..demands.len()).collect();
    let certainty = |j: usize| z[j].iter().map(|e| e.1).fold(0.0, f64::max);
    order.sort_by(|&a, &b| certainty(b).total_cmp(&certainty(a)).then(demands[b].cmp(&demands[a])).then(a.cmp(&b)));
    let mut best: Option<(f64, Vec<Layout>)> = None;
    for _ in 0..ROUNDS {
        let out = round(free, demands, &z, &order, rng);
        let c = total_cost(&out, cost);
        if best.as_ref().is_none_or(|b| c < b.0) {
            best = Some((c, out));
        }
    }
    best.map_or_else(|| greedy(free, demands), |b| b.1)
}

/// The LP relaxation: for each job, the fraction of it placed whole on each of its `candidates`
/// best-fitting machines (the rest of it spread). `None` if the LP fails.
fn relaxation(
    free: &[u32],
    demands: &[u32],
    cost: &impl LayoutCost,
    candidates: usize,
) -> Option<Vec<Vec<(usize, f64)>>> {
    let slots = free.iter().copied().max().unwrap_or(1);
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let mut per_machine: Vec<Vec<(microlp::Variable, f64)>> = vec![Vec::new(); free.len()];
    // (machine, variable) per job.
    let mut whole: Vec<Vec<(usize, microlp::Variable)>> = Vec::with_capacity(demands.len());
    for (j, &want) in demands.iter().enumerate() {
        if want == 0 {
            whole.push(Vec::new());
            continue;
        }
        let mut fits: Vec<usize> = (0..free.len()).filter(|&m| free[m] >= want).collect();
        fits.sort_by_key(|&m| (free[m], m));
        fits.truncate(candidates.max(1));
        let packed = cost.cost(j, &[want]);
        let vars: Vec<(usize, microlp::Variable)> = fits.iter().map(|&m| (m, lp.add_var(packed, (0.0, 1.0)))).collect();
        let s = lp.add_var(cost.cost(j, &spread_counts(want, slots)), (0.0, 1.0));
        let mut cover: Vec<(microlp::Variable, f64)> = vars.iter().map(|v| (v.1, 1.0)).collect();
        cover.push((s, 1.0));
        lp.add_constraint(cover.as_slice(), ComparisonOp::Eq, 1.0);
        for &(m, v) in &vars {
            per_machine[m].push((v, f64::from(want)));
        }
        whole.push(vars);
    }
    for (m, terms) in per_machine.iter().enumerate() {
        if !terms.is_empty() {
            lp.add_constraint(terms.as_slice(), ComparisonOp::Le, f64::from(free[m]));
        }
    }
    let outcome = lp.solve().ok()?;
    let solution = outcome.solution()?;
    Some(
        whole
            .iter()
            .map(|vars| vars.iter().map(|&(m, v)| (m, solution.var_value(v).clamp(0.0, 1.0))).collect())
            .collect(),
    )
}

/// One randomized rounding of the relaxation `z`, jobs in `order`: each job whole on the
/// machine it draws (or, that one full, on the best fit that holds it), else spread over the
/// best fits, largest first.
fn round(
    free: &[u32],
    demands: &[u32],
    z: &[Vec<(usize, f64)>],
    order: &[usize],
    rng: &mut impl rand::Rng,
) -> Vec<Layout> {
    let mut left = free.to_vec();
    let mut out = vec![Layout::new(); demands.len()];
    let mut spread_jobs = Vec::new();
    for &j in order {
        let want = demands[j];
        if want == 0 {
            continue;
        }
        let draw: f64 = rng.random();
        let mut acc = 0.0;
        let mut chosen = None;
        for &(m, p) in &z[j] {
            acc += p;
            if draw < acc {
                chosen = Some(m);
                break;
            }
        }
        match chosen {
            Some(m) if left[m] >= want => {
                left[m] -= want;
                out[j] = vec![(m, want)];
            }
            // Repair: the rounded machine is full; the best fit that holds it whole.
            Some(_) => match (0..left.len()).filter(|&m| left[m] >= want).min_by_key(|&m| (left[m], m)) {
                Some(m) => {
                    left[m] -= want;
                    out[j] = vec![(m, want)];
                }
                None => spread_jobs.push(j),
            },
            None => spread_jobs.push(j),
        }
    }
    spread_jobs.sort_by_key(|&j| (std::cmp::Reverse(demands[j]), j));
    for j in spread_jobs {
        out[j] = best_fit(&mut left, demands[j]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// A cost with a locality cliff: 1 on one machine, 2 across, plus a little per machine.
    fn cliff(_: usize, counts: &[u32]) -> f64 {
        if counts.len() <= 1 { 1.0 } else { 2.0 + 0.1 * counts.len() as f64 }
    }

    fn valid(free: &[u32], demands: &[u32], layouts: &[Layout]) {
        let mut used = vec![0u32; free.len()];
        for (j, l) in layouts.iter().enumerate() {
            assert_eq!(l.iter().map(|e| e.1).sum::<u32>(), demands[j], "job {j}: {l:?}");
            for &(m, c) in l {
                used[m] += c;
            }
        }
        assert!(used.iter().zip(free).all(|(u, f)| u <= f), "{used:?} over {free:?}");
    }

    #[test]
    fn every_method_is_feasible_and_none_beats_the_optimum() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let free: Vec<u32> = (0..4).map(|_| rng.random_range(0..=4)).collect();
            let total: u32 = free.iter().sum();
            let mut demands = Vec::new();
            let mut left = total;
            while left > 0 && demands.len() < 4 {
                let d = rng.random_range(1..=left.min(6));
                demands.push(d);
                left -= d;
            }
            let (opt, best) = exact(&free, &demands, &cliff);
            valid(&free, &demands, &opt);
            assert!((total_cost(&opt, &cliff) - best).abs() < 1e-9);
            let lp = lp_rounding(&free, &demands, &cliff, 8, &mut rng);
            for layouts in [greedy(&free, &demands), first_fit(&free, &demands), random(&free, &demands, &mut rng), lp]
            {
                valid(&free, &demands, &layouts);
                assert!(total_cost(&layouts, &cliff) >= best - 1e-9);
            }
        }
    }

    #[test]
    fn best_fit_packs_on_one_machine_when_it_can() {
        let mut free = vec![4, 2, 3];
        assert_eq!(best_fit(&mut free, 2), vec![(1, 2)]);
        assert_eq!(best_fit(&mut free, 4), vec![(0, 4)]);
        assert_eq!(free, vec![0, 0, 3]);
        let mut free = vec![2, 3, 1];
        assert_eq!(best_fit(&mut free, 4), vec![(1, 3), (2, 1)]);
    }

    #[test]
    fn the_lp_finds_the_packing_that_first_fit_misses() {
        // Machines of 4; jobs of 3, 3, 1, 1 in that order: first fit splits the second 3.
        let free = [4, 4];
        let demands = [3, 3, 1, 1];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let lp = lp_rounding(&free, &demands, &cliff, 8, &mut rng);
        assert_eq!(total_cost(&lp, &cliff), 4.0);
        assert!(total_cost(&first_fit(&free, &demands), &cliff) > 4.0);
    }
}
