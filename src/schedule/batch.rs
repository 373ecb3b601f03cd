//! Courier's batch size for a job on the layout it was given, and a parameter-server job's
//! split of its slots into workers and servers.

use crate::cluster::model::{BatchChoice, Shape, choose_batch};

use super::job::{JobModel, iter_time, ps_split};

/// Courier's batch for `job` on `counts` (the replicas are its workers), among the allowed
/// batches whose per-GPU batch its model is trusted at (all, if none is).
pub fn batch_for(job: &JobModel, counts: &[u32]) -> Option<BatchChoice> {
    let replicas = replicas(job, counts);
    let trusted: Vec<u32> = match job.local_range {
        Some((lo, hi)) => job
            .batches
            .iter()
            .copied()
            .filter(|&b| (lo..=hi).contains(&job.limits.configure(b, replicas).local_bsz))
            .collect(),
        None => Vec::new(),
    };
    choose_among(job, counts, if trusted.is_empty() { &job.batches } else { &trusted })
}

/// The job's workers on `counts` slots (a parameter-server job's other slots serve).
fn replicas(job: &JobModel, counts: &[u32]) -> u32 {
    let slots = Shape::of(counts).replicas;
    if job.ps { ps_split(job, slots, f64::from(job.limits.min_local)).0 } else { slots }
}

/// Courier's rule for `job` on `counts` over `batches`.
fn choose_among(job: &JobModel, counts: &[u32], batches: &[u32]) -> Option<BatchChoice> {
    choose_batch(batches, replicas(job, counts), &job.limits, job.grads, job.slo_iter_s, |c| iter_time(job, counts, c))
}

/// The batch a job runs at: Courier's choice ([`batch_for`]), except that a job that has not run
/// yet starts at its user's batch (`start_batch`), and a job whose compute was seen at one
/// per-GPU batch only (`seen_local`), and would run at it again, runs at the allowed batch whose
/// per-GPU batch is nearest twice that (within the SLO, if any): one epoch spent learning how its
/// compute grows with the batch, which the prior cannot know.
pub fn batch_to_run(job: &JobModel, counts: &[u32]) -> Option<BatchChoice> {
    if let Some(b) = job.start_batch {
        return choose_among(job, counts, &[b]);
    }
    let best = batch_for(job, counts)?;
    let Some(seen) = job.seen_local.filter(|&s| s == best.config.local_bsz) else { return Some(best) };
    let explore = job
        .batches
        .iter()
        .filter_map(|&b| choose_among(job, counts, &[b]))
        .filter(|c| c.config.local_bsz > seen && c.meets_slo)
        .min_by_key(|c| c.config.local_bsz.abs_diff(2 * seen));
    Some(explore.unwrap_or(best))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::place::Layout;
    use crate::schedule::job::test_job as job;

    #[test]
    fn ps_jobs_get_servers_and_an_slo_bounds_the_batch() {
        let mut ps = job(Layout::new());
        ps.ps = true;
        let (w, p) = ps_split(&ps, 6, 8.0);
        assert!(w >= 1 && p >= 1 && w + p == 6);
        let mut slo = job(Layout::new());
        slo.grads = Some((1.0, 100.0));
        let free = batch_for(&slo, &[4]).unwrap();
        let slo_s = 0.6 * free.iter_s;
        slo.slo_iter_s = Some(slo_s);
        let bounded = batch_for(&slo, &[4]).unwrap();
        assert!(bounded.meets_slo && bounded.iter_s <= slo_s, "{bounded:?}");
        assert!(bounded.config.batch < free.config.batch, "{bounded:?} {free:?}");
    }
}
