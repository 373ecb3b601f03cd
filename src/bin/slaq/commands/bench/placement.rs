//! `slaq bench placement`: placement methods against the exact optimum on small instances,
//! and time per decision.

use super::support::BenchOutput;

#[derive(clap::Args)]
pub(crate) struct BenchPlacementArgs {
    /// Random small instances solved exactly and by each method.
    #[arg(long, default_value_t = 200)]
    pub(crate) cases: usize,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Timed repetitions of each decision (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub(crate) runs: usize,
    /// The decisions timed, JOBSxMACHINES (4 slots each, all free). 256 jobs is the most the
    /// planner gives the LP at once (`schedule::LP_MAX_JOBS`).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64x16,256x256,4000x4000")]
    pub(crate) sizes: Vec<(usize, usize)>,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

fn parse_size(s: &str) -> Result<(usize, usize), String> {
    let (j, m) = s.split_once('x').ok_or_else(|| format!("{s:?} is not JOBSxMACHINES"))?;
    let n = |x: &str| {
        x.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| format!("{s:?}: {x:?} is not a positive count"))
    };
    Ok((n(j)?, n(m)?))
}

/// `slaq bench placement`: the gap study and the time per decision at each of `--sizes`.
pub(crate) fn run(args: BenchPlacementArgs) -> anyhow::Result<()> {
    use slaq::cluster::bench;
    anyhow::ensure!(args.cases > 0 && args.runs > 0, "--cases and --runs must be positive");
    let gaps = bench::gaps(args.cases, args.seed);
    let mut sizes = Vec::new();
    for &(jobs, machines) in &args.sizes {
        let (lp, greedy, lp_vs_greedy) = decision_times(jobs, machines, 4, args.runs);
        sizes.push(serde_json::json!({
            "jobs": jobs, "machines": machines, "slots": 4,
            "lp_rounding_ms": lp * 1e3,
            "greedy_ms": greedy * 1e3,
            "lp_cost_vs_greedy_pct": lp_vs_greedy,
        }));
    }
    let out = serde_json::json!({
        "cases": gaps.cases,
        "lp_rounding_gap_pct": gaps.lp_rounding_gap_pct,
        "greedy_gap_pct": gaps.greedy_gap_pct,
        "first_fit_gap_pct": gaps.first_fit_gap_pct,
        "random_gap_pct": gaps.random_gap_pct,
        "decision": sizes,
    });
    if args.out.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{} instances (4 machines x 4 slots, partly taken), gap to the optimum of the summed predicted step time:",
            gaps.cases
        );
        for (name, g) in [
            ("lp rounding", gaps.lp_rounding_gap_pct),
            ("greedy", gaps.greedy_gap_pct),
            ("first fit", gaps.first_fit_gap_pct),
            ("random", gaps.random_gap_pct),
        ] {
            println!("  {name:<12} mean {:>6.2}%  max {:>7.2}%", g.mean, g.max);
        }
        for s in &sizes {
            println!("{s}");
        }
    }
    Ok(())
}

/// Seconds per decision of the LP rounding and the greedy for `jobs` jobs (1 to 8 slots each)
/// on `machines` machines of `slots`, all free (median of `runs`), and the LP's cost against the
/// greedy's (percent).
fn decision_times(jobs: usize, machines: usize, slots: u32, runs: usize) -> (f64, f64, f64) {
    use rand::{RngExt, SeedableRng};
    use slaq::cluster::bench::fitted_models;
    use slaq::cluster::model::Shape;
    use slaq::cluster::place::{self, Layout};
    use std::time::Instant;
    let models = fitted_models();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let capacity = machines as u32 * slots;
    let mut demands: Vec<u32> = (0..jobs).map(|_| rng.random_range(1..=8)).collect();
    // Scale the demands to fill about 90% of the cluster.
    let total: u32 = demands.iter().sum();
    let target = (0.9 * f64::from(capacity)) as u32;
    for d in &mut demands {
        *d = ((u64::from(*d) * u64::from(target) / u64::from(total.max(1))) as u32).clamp(1, slots * 2);
    }
    while demands.iter().sum::<u32>() > capacity {
        if let Some(d) = demands.iter_mut().find(|d| **d > 1) {
            *d -= 1;
        }
    }
    let apps: Vec<usize> = (0..jobs).map(|j| j % models.len()).collect();
    let cost = |j: usize, counts: &[u32]| {
        let (p, b) = models[apps[j]];
        p.step(Shape::of(counts), b)
    };
    let free = vec![slots; machines];
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let time = |f: &mut dyn FnMut() -> Vec<Layout>| {
        let t = Instant::now();
        let out = f();
        (t.elapsed().as_secs_f64(), out)
    };
    let mut lp = Vec::new();
    let mut lp_cost = 0.0;
    let mut greedy = Vec::new();
    for _ in 0..runs.max(1) {
        let (t, out) = time(&mut || place::lp_rounding(&free, &demands, &cost, 8, &mut rng));
        lp_cost = place::total_cost(&out, &cost);
        lp.push(t);
        greedy.push(time(&mut || place::greedy(&free, &demands)).0);
    }
    let greedy_cost = place::total_cost(&place::greedy(&free, &demands), &cost);
    (median(lp), median(greedy), 100.0 * (lp_cost / greedy_cost - 1.0))
}
