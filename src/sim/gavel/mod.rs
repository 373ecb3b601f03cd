//! Gavel's setting (issue #31): a cluster of several GPU types, jobs whose speed on each type is
//! Gavel's measured throughput (`table`), Gavel's workload generator (`workload`), four
//! policies decided in rounds (`engine`) and their figures (`report`).
//! `slaq simulate --gavel-throughputs FILE` runs [`sweep`].

pub mod capacity;
pub mod engine;
pub mod report;
pub mod table;
pub mod workload;

pub use engine::{GavelConfig, GavelPolicy, PolicyRun, run};
pub use report::{Cell, PolicySummary, RateMeans, means};
pub use table::{Cluster, GavelError, Throughputs};
pub use workload::{GavelJob, TraceConfig, generate};

use crate::trace::TraceCurve;

/// What a sweep runs: every rate and seed, each trace under every policy.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub rates: Vec<f64>,
    pub seeds: Vec<u64>,
    pub policies: Vec<GavelPolicy>,
    pub num_jobs: usize,
    pub multi_gpu: bool,
    pub config: GavelConfig,
}

/// Runs the sweep on up to `threads` threads; `done` is called after each run. One [`Cell`] per
/// rate and seed, rates outer.
pub fn sweep(
    table: &Throughputs,
    cluster: &Cluster,
    curves: &[TraceCurve],
    sweep: &Sweep,
    threads: usize,
    done: &(dyn Fn() + Sync),
) -> Result<Vec<Cell>, GavelError> {
    let mut traces = Vec::new();
    for &rate in &sweep.rates {
        for &seed in &sweep.seeds {
            let config =
                TraceConfig { num_jobs: sweep.num_jobs, jobs_per_hour: rate, seed, multi_gpu: sweep.multi_gpu };
            traces.push((rate, seed, generate(table, cluster, curves, &config)?));
        }
    }
    let tasks: Vec<(usize, GavelPolicy)> =
        (0..traces.len()).flat_map(|i| sweep.policies.iter().map(move |&p| (i, p))).collect();
    let runs = crate::sim::parallel::map(&tasks, threads, |&(i, policy)| {
        let out = run(table, cluster, &traces[i].2, policy, &sweep.config);
        done();
        out
    });
    Ok(traces
        .iter()
        .enumerate()
        .map(|(i, (rate, seed, _))| {
            let of: Vec<PolicyRun> =
                tasks.iter().zip(&runs).filter(|(t, _)| t.0 == i).map(|(_, r)| r.clone()).collect();
            Cell {
                jobs_per_hour: *rate,
                seed: *seed,
                max_jobs_per_hour: capacity::max_jobs_per_hour(table, cluster, &traces[i].2),
                policies: report::summarise(&of, cluster, sweep.config.measure),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn setting() -> (Throughputs, Cluster, Vec<TraceCurve>) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let table = Throughputs::load(&root.join("data/gavel/simulation_throughputs.json")).unwrap();
        let cluster = Cluster::parse("v100=4,p100=4,k80=4", &table, "t").unwrap();
        let curves = crate::trace::load_curves(&root.join("data/curves/curves-public.jsonl")).unwrap();
        (table, cluster, curves)
    }

    #[test]
    fn every_policy_runs_each_job_on_one_type_within_capacity_and_finishes_it() {
        let (table, cluster, curves) = setting();
        let trace = generate(
            &table,
            &cluster,
            &curves,
            &TraceConfig { num_jobs: 30, jobs_per_hour: 1.0, seed: 3, multi_gpu: true },
        )
        .unwrap();
        // Long enough after the last arrival for every job to finish.
        let config = GavelConfig { cutoff_s: 1e8, ..GavelConfig::default() };
        let mut runs = Vec::new();
        for policy in [GavelPolicy::Fair, GavelPolicy::Gavel, GavelPolicy::SlaqBlind, GavelPolicy::Slaq] {
            let run = run(&table, &cluster, &trace, policy, &config);
            assert!(run.jobs.iter().all(|j| j.finished_s.is_some()), "{policy:?}");
            for (t, &busy) in run.busy_s.iter().enumerate() {
                assert!(busy <= f64::from(cluster.counts[t]) * run.end_s + 1e-6, "{policy:?} type {t}");
            }
            for (job, result) in trace.iter().zip(&run.jobs) {
                // No job finishes faster than alone on its fastest option.
                let fastest = (0..3)
                    .flat_map(|t| table::SCALE_FACTORS.map(|k| cluster.rate(&table, t, job.job_type, k)))
                    .fold(0.0, f64::max);
                assert!(result.jct().unwrap() >= job.steps / fastest - 1e-6, "{policy:?}");
                assert!(result.loss_area > 0.0);
            }
            runs.push(run);
        }
        let summary = report::summarise(&runs, &cluster, (0, trace.len()));
        let jct = |p: &str| summary[p].mean_jct_s.unwrap();
        assert!(jct("gavel") < jct("fair"), "heterogeneity-aware beats agnostic: {} {}", jct("gavel"), jct("fair"));
        assert_eq!(summary["fair"].worst_slowdown_vs_fair, Some(1.0));
        assert!(summary["slaq"].unfinished == 0 && summary["slaq"].measured_jobs == 30);
    }

    #[test]
    fn a_sweep_is_one_cell_per_rate_and_seed_and_reproducible() {
        let (table, cluster, curves) = setting();
        let sweep = Sweep {
            rates: vec![0.5, 1.0],
            seeds: vec![1],
            policies: vec![GavelPolicy::Fair, GavelPolicy::Slaq],
            num_jobs: 12,
            multi_gpu: false,
            config: GavelConfig::default(),
        };
        let cells = super::sweep(&table, &cluster, &curves, &sweep, 2, &|| {}).unwrap();
        assert_eq!(cells.len(), 2);
        assert_eq!((cells[0].jobs_per_hour, cells[1].jobs_per_hour), (0.5, 1.0));
        assert_eq!(cells, super::sweep(&table, &cluster, &curves, &sweep, 1, &|| {}).unwrap());
        assert_eq!(means(&cells).len(), 4);
    }
}
