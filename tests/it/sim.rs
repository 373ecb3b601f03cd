//! The simulator on the real curves: deterministic, and its metrics mean what they say.

use slaq::sim::{self, PolicySpec, SimConfig, WorkloadConfig};
use slaq::trace::load_curves;

use crate::shared_data;

fn small_workload(seed: u64) -> Vec<sim::SimJob> {
    let curves = load_curves(&shared_data("curves-public.jsonl")).expect("public curves load");
    let config = WorkloadConfig { num_jobs: 24, seed, ..WorkloadConfig::default() };
    sim::workload::generate(&curves, &config).expect("workload")
}

#[test]
fn same_seed_same_results() {
    let jobs = small_workload(7);
    let config = SimConfig { num_workers: 16, ..SimConfig::default() };
    let policies: Vec<PolicySpec> = ["slaq", "fair"].iter().filter_map(|n| PolicySpec::named(n)).collect();
    let a = sim::compare(&jobs, &config, &policies, &[16], 2, &|| {});
    let b = sim::compare(&jobs, &config, &policies, &[16], 1, &|| {});
    // Debug renderings, because samples of epochs with no active job hold NaN.
    assert_eq!(format!("{:?}", a[0].runs), format!("{:?}", b[0].runs), "parallel and serial runs must agree exactly");
    assert_ne!(small_workload(8), jobs, "another seed draws another workload");
}

#[test]
fn every_job_finishes_and_metrics_are_sane() {
    let jobs = small_workload(3);
    let config = SimConfig { num_workers: 16, ..SimConfig::default() };
    for name in ["slaq", "slaq-paper", "fair", "slaq-oracle"] {
        let policy = PolicySpec::named(name).unwrap();
        let run = sim::engine::run(&jobs, &config, policy, |_| {});
        let s = &run.summary;
        assert_eq!(s.jobs_unfinished, 0, "{name}");
        assert!(s.avg_norm_loss > 0.0 && s.avg_norm_loss < 1.0, "{name}: {}", s.avg_norm_loss);
        assert!(s.utilisation > 0.0 && s.utilisation <= 1.0 + 1e-9, "{name}: {}", s.utilisation);
        let share: f64 = s.share_by_group.values().sum();
        assert!((share - s.utilisation).abs() < 1e-6, "{name}: shares {share} vs utilisation {}", s.utilisation);
        for job in &run.jobs {
            let jct = job.completion_s.unwrap();
            assert!(jct >= 0.0);
            let (t90, t95) = (job.time_to_90_s.unwrap(), job.time_to_95_s.unwrap());
            assert!(t90 <= t95 && t95 <= jct + 1e-9, "{name} {}: {t90} {t95} {jct}", job.id);
        }
    }
}

#[test]
fn a_bigger_cluster_finishes_fair_jobs_sooner() {
    let jobs = small_workload(5);
    let fair = PolicySpec::named("fair").unwrap();
    let small = sim::engine::run(&jobs, &SimConfig { num_workers: 4, ..SimConfig::default() }, fair, |_| {});
    let large = sim::engine::run(&jobs, &SimConfig { num_workers: 32, ..SimConfig::default() }, fair, |_| {});
    assert!(large.summary.mean_jct_s < small.summary.mean_jct_s);
}

#[test]
fn the_documented_config_file_is_the_default() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/simulate.toml");
    let file = sim::SimulationFile::load(&path).expect("config/simulate.toml loads");
    assert_eq!(file, sim::SimulationFile::default(), "config/simulate.toml must spell out the defaults");
}
