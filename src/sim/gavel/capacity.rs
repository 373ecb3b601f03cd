//! The most jobs per hour a cluster can keep up with on a trace's work mix: an upper bound on
//! the rate any policy sustains, so that "unfinished" at a higher rate is read as overload, not
//! as a policy's fault.
//!
//! Every job type `j` of the trace brings `W_j / N` steps per arriving job (its jobs' steps over
//! the trace's job count); a GPU of type `t` gives it at most `b_jt` steps per second, the best
//! per-GPU throughput over every size the table measures there (`rate(t, j, k) / k`), so elastic
//! runs are covered. The bound is the largest `λ` with a split `g_jt ≥ 0` of each type's GPUs
//! (`Σ_j g_jt ≤ n_t`) that serves every job type's arrivals: `Σ_t b_jt·g_jt ≥ λ·W_j / (3600·N)`.
//! No restarts, perfect packing and perfect knowledge: no policy does better.

use microlp::{ComparisonOp, OptimizationDirection, Problem};

use super::table::{Cluster, SCALE_FACTORS, Throughputs};
use super::workload::GavelJob;

/// The bound, in jobs per hour (infinite for an empty trace; 0 if some job type cannot run).
pub fn max_jobs_per_hour(table: &Throughputs, cluster: &Cluster, trace: &[GavelJob]) -> f64 {
    if trace.is_empty() {
        return f64::INFINITY;
    }
    let mut work = vec![0.0f64; table.job_types.len()];
    for job in trace {
        work[job.job_type] += job.steps;
    }
    let n = trace.len() as f64;
    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let lambda = lp.add_var(1.0, (0.0, f64::INFINITY));
    let mut per_type: Vec<Vec<(microlp::Variable, f64)>> = vec![Vec::new(); cluster.types.len()];
    for (j, &w) in work.iter().enumerate().filter(|(_, w)| **w > 0.0) {
        let mut served = vec![(lambda, -w / (3600.0 * n))];
        for (t, &count) in cluster.counts.iter().enumerate() {
            let best = SCALE_FACTORS
                .iter()
                .filter(|&&k| k <= count)
                .map(|&k| cluster.rate(table, t, j, k) / f64::from(k))
                .fold(0.0, f64::max);
            if best > 0.0 {
                let g = lp.add_var(0.0, (0.0, f64::from(count)));
                served.push((g, best));
                per_type[t].push((g, 1.0));
            }
        }
        if served.len() == 1 {
            return 0.0;
        }
        lp.add_constraint(served.as_slice(), ComparisonOp::Ge, 0.0);
    }
    for (t, terms) in per_type.iter().enumerate().filter(|(_, terms)| !terms.is_empty()) {
        lp.add_constraint(terms.as_slice(), ComparisonOp::Le, f64::from(cluster.counts[t]));
    }
    lp.solve().ok().and_then(|o| o.solution().map(|s| s.var_value(lambda))).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_bound_is_the_cluster_s_work_rate_over_the_work_per_job() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let table = Throughputs::load(&root.join("data/gavel/simulation_throughputs.json")).unwrap();
        let one = Cluster::parse("v100=10", &table, "t").unwrap();
        let j = table.job_types.iter().position(|t| t == "A3C").unwrap();
        let rate = one.rate(&table, 0, j, 1);
        // Two A3C jobs of an hour each on one V100: ten V100s keep up with ten such jobs an hour.
        let job = |steps: f64| GavelJob {
            arrival_s: 0.0,
            job_type: j,
            scale_factor: 1,
            steps,
            duration_s: steps / rate,
            loss: vec![1.0, 0.5],
        };
        let trace = [job(3600.0 * rate), job(3600.0 * rate)];
        assert!((max_jobs_per_hour(&table, &one, &trace) - 10.0).abs() < 1e-6);
        // Adding K80s raises it by what they do of A3C (each a fraction of a V100).
        let mixed = Cluster::parse("v100=10,k80=10", &table, "t").unwrap();
        let k80 = mixed.rate(&table, 1, j, 1) / rate;
        assert!(k80 > 0.0 && k80 < 1.0);
        assert!((max_jobs_per_hour(&table, &mixed, &trace) - 10.0 * (1.0 + k80)).abs() < 1e-6);
    }
}
