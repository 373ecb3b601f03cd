//! `slaq bench placement`: how far each placement method is from the optimum (the time a decision
//! takes is measured by the command, outside the pure core). Jobs are the traces' applications with their iteration-time models fitted
//! from every measured placement ([`fitted_models`]); a layout's cost is its predicted step time
//! at the application's smallest per-GPU batch, summed over the jobs (the objective of
//! [`super::place`]).

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::model::{self, Observation, PerfParams, Shape};
use super::place::{self, Layout};
use super::trace::applications;

/// Each application's model, fitted from its placements on up to four machines at its
/// smallest and largest per-GPU batch, with that smallest batch.
pub fn fitted_models() -> Vec<(PerfParams, f64)> {
    let shapes: Vec<Vec<u32>> = (1..=4u32)
        .flat_map(|a| (0..=4u32).flat_map(move |b| (0..=4u32).map(move |c| vec![a, b, c])))
        .map(|v| v.into_iter().filter(|&x| x > 0).collect())
        .collect();
    applications()
        .iter()
        .map(|app| {
            let (lo, hi) = (f64::from(app.min_local_bsz), f64::from(app.max_local_bsz));
            let obs: Vec<Observation> = shapes
                .iter()
                .flat_map(|counts| {
                    [lo, hi].into_iter().filter_map(move |b| {
                        let (step, sync) = app.step_time(counts, b)?;
                        let s = Shape::of(counts);
                        Some(Observation { machines: s.machines, replicas: s.replicas, local_bsz: b, step, sync })
                    })
                })
                .collect();
            (model::fit(&obs), lo)
        })
        .collect()
}

/// Gap statistics of one method, in percent of the optimum.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Gap {
    pub mean: f64,
    pub max: f64,
}

fn gap(v: &[f64]) -> Gap {
    Gap { mean: v.iter().sum::<f64>() / v.len().max(1) as f64, max: v.iter().copied().fold(0.0, f64::max) }
}

/// The gaps over `cases` random small instances: 4 machines of 4 slots, partly taken, and 2 to 5
/// jobs of 1 to 6 slots that fit.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Gaps {
    pub cases: usize,
    pub lp_rounding_gap_pct: Gap,
    pub greedy_gap_pct: Gap,
    pub first_fit_gap_pct: Gap,
    pub random_gap_pct: Gap,
}

/// A random instance: free slots per machine, and per job its demand and application.
fn instance(
    rng: &mut StdRng,
    machines: usize,
    slots: u32,
    max_jobs: usize,
    max_demand: u32,
) -> (Vec<u32>, Vec<u32>, Vec<usize>) {
    let free: Vec<u32> = (0..machines).map(|_| rng.random_range(slots / 2..=slots)).collect();
    let mut left: u32 = free.iter().sum();
    let (mut demands, mut apps) = (Vec::new(), Vec::new());
    let n_apps = applications().len();
    while left > 0 && demands.len() < max_jobs {
        let d = rng.random_range(1..=left.min(max_demand));
        demands.push(d);
        apps.push(rng.random_range(0..n_apps));
        left -= d;
    }
    (free, demands, apps)
}

/// Runs the gap study.
pub fn gaps(cases: usize, seed: u64) -> Gaps {
    let models = fitted_models();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v: [Vec<f64>; 4] = Default::default();
    for _ in 0..cases {
        let (free, demands, apps) = instance(&mut rng, 4, 4, 5, 6);
        let cost = |j: usize, counts: &[u32]| {
            let (p, b) = models[apps[j]];
            p.step(Shape::of(counts), b)
        };
        let (_, best) = place::exact(&free, &demands, &cost);
        let lp = place::lp_rounding(&free, &demands, &cost, 8, &mut rng);
        let layouts: [Vec<Layout>; 4] = [
            lp,
            place::greedy(&free, &demands),
            place::first_fit(&free, &demands),
            place::random(&free, &demands, &mut rng),
        ];
        for (out, l) in v.iter_mut().zip(&layouts) {
            out.push(100.0 * (place::total_cost(l, &cost) / best - 1.0));
        }
    }
    Gaps {
        cases,
        lp_rounding_gap_pct: gap(&v[0]),
        greedy_gap_pct: gap(&v[1]),
        first_fit_gap_pct: gap(&v[2]),
        random_gap_pct: gap(&v[3]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_study_measures_what_it_says() {
        let g = gaps(30, 1);
        assert_eq!(g.cases, 30);
        for x in [g.lp_rounding_gap_pct, g.greedy_gap_pct, g.first_fit_gap_pct, g.random_gap_pct] {
            assert!(x.mean >= -1e-9 && x.max >= x.mean - 1e-9, "{g:?}");
        }
        // Locality matters: random placement is far from the optimum, the LP close to it.
        assert!(g.random_gap_pct.mean > g.lp_rounding_gap_pct.mean, "{g:?}");
    }
}
