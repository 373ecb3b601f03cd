//! Worker types in the allocator (issue #31): what type a worker is, how many of each there
//! are and how busy, and each job's speed on each, measured over the epochs it runs through
//! unchanged (`quality::speeds` holds the pure part).

use std::collections::BTreeMap;

use crate::protocol::AcceleratorUse;
use crate::quality::TimeCurve;
use crate::quality::speeds::{Declared, TypeRatios, TypeSpeeds};

use super::registry::WorkerRegistry;
pub use super::registry::{DEFAULT_ACCELERATOR, accelerator};

/// The types in use, sorted (`None`: every worker is of the default type, nothing to do).
/// From the registry's counts: no pass over the workers.
pub fn names(registry: &WorkerRegistry) -> Option<Vec<String>> {
    let names: Vec<&str> = registry.per_type().map(|(name, _)| name).collect();
    (names != [DEFAULT_ACCELERATOR]).then(|| names.into_iter().map(str::to_string).collect())
}

/// Each worker's type as an index into `names`, in the registry's order.
pub fn type_of(registry: &WorkerRegistry, names: &[String]) -> Vec<usize> {
    registry
        .iter()
        .map(|(_, w)| names.binary_search_by(|n| n.as_str().cmp(accelerator(&w.spec))).unwrap_or(0))
        .collect()
}

/// Workers and busy workers per type: a linear scan over the few types per worker.
pub fn accelerator_use(registry: &WorkerRegistry) -> BTreeMap<String, AcceleratorUse> {
    let mut by: Vec<(&str, AcceleratorUse)> = Vec::new();
    for (_, w) in registry.iter() {
        let name = accelerator(&w.spec);
        let i = match by.iter().position(|(n, _)| *n == name) {
            Some(i) => i,
            None => {
                by.push((name, AcceleratorUse::default()));
                by.len() - 1
            }
        };
        by[i].1.workers += 1;
        by[i].1.busy += usize::from(w.job.is_some());
    }
    by.into_iter().map(|(n, u)| (n.to_string(), u)).collect()
}

/// The type all of `workers` are of (`None`: none, or several).
pub fn world_type<'a>(registry: &'a WorkerRegistry, workers: &[String]) -> Option<&'a str> {
    let first = accelerator(&registry.get(workers.first()?)?.spec);
    workers.iter().all(|w| registry.get(w).is_some_and(|w| accelerator(&w.spec) == first)).then_some(first)
}

/// [`accelerator_use`] after an epoch, without a pass over the registry (at 16,000 workers
/// the pass was 6% of an epoch): the workers per type are the registry's counts, and a worker
/// is busy when the epoch left it a job (`next`, in the registry's order; on one type, the
/// sum of `counts`, the workers per job in `next`); with several types `type_of` (the same
/// order, into the types' sorted names) says of which.
pub fn accelerator_use_after(
    registry: &WorkerRegistry,
    (next, counts): (&[Option<usize>], &[u32]),
    type_of: Option<&[usize]>,
) -> BTreeMap<String, AcceleratorUse> {
    let mut by: BTreeMap<String, AcceleratorUse> =
        registry.per_type().map(|(name, workers)| (name.to_string(), AcceleratorUse { workers, busy: 0 })).collect();
    match type_of {
        Some(type_of) => {
            let mut busy = vec![0; by.len()];
            for (&t, job) in type_of.iter().zip(next) {
                if let (Some(_), Some(n)) = (job, busy.get_mut(t)) {
                    *n += 1;
                }
            }
            by.values_mut().zip(busy).for_each(|(u, busy)| u.busy = busy);
        }
        None => {
            if let Some(u) = by.values_mut().next() {
                u.busy = counts.iter().map(|&c| c as usize).sum();
            }
        }
    }
    by
}

/// An epoch of a job's progress being measured on one type and count.
#[derive(Clone, Debug, PartialEq)]
struct Probe {
    since_s: f64,
    iter: u64,
    accelerator: String,
    count: u32,
    generation: u64,
}

/// One job's speeds per type and the epoch being measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobSpeeds {
    pub measured: TypeSpeeds,
    probe: Option<Probe>,
}

impl JobSpeeds {
    /// At an epoch's start: the job runs `count` workers all of type `on` (`None`: mixed or
    /// none), has reached `iter` in `generation`, its time model `time`. If it ran through the
    /// epoch that ended the same way and made progress, that is a measurement.
    pub fn epoch(
        &mut self,
        on: Option<&str>,
        count: u32,
        iter: u64,
        generation: u64,
        time: Option<&TimeCurve>,
        now_s: f64,
    ) {
        let Some(ty) = on else {
            self.probe = None;
            return;
        };
        let same_world = |p: &Probe| p.accelerator == ty && p.count == count && p.generation == generation;
        if let (Some(p), Some(time)) = (&self.probe, time)
            && same_world(p)
            && iter > p.iter
        {
            let shape = time.seconds(count) / time.seconds(1);
            self.measured.observe(ty, (now_s - p.since_s) / (iter - p.iter) as f64, shape);
        }
        // Kept while nothing moved (a slow job's iteration spans epochs), else started again.
        if !self.probe.as_ref().is_some_and(|p| same_world(p) && p.iter == iter) {
            self.probe = Some(Probe { since_s: now_s, iter, accelerator: ty.to_string(), count, generation });
        }
    }

    /// Its speed on each of `names` (see `TypeSpeeds::speed`).
    pub fn row(&self, names: &[String], t1: Option<f64>, ratios: &TypeRatios, declared: Option<&Declared>) -> Vec<f64> {
        let running_on = self.probe.as_ref().map(|p| p.accelerator.as_str());
        names.iter().map(|n| self.measured.speed(n, t1, running_on, ratios, declared)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_run_through_unchanged_is_a_measurement_and_a_change_starts_again() {
        let time = TimeCurve::fitted(0.0, 1.0, 0.0); // t(k) = 1/k: shape(2) = 1/2
        let mut j = JobSpeeds::default();
        j.epoch(Some("a"), 2, 10, 1, Some(&time), 0.0);
        // 10 iterations in 5 s on two workers: 0.5 s each, 1 s on one.
        j.epoch(Some("a"), 2, 20, 1, Some(&time), 5.0);
        assert_eq!(j.measured.measured["a"], (1.0, 1));
        // Nothing new this epoch: the probe is kept, so the next one spans both.
        j.epoch(Some("a"), 2, 20, 1, Some(&time), 6.0);
        j.epoch(Some("a"), 2, 30, 1, Some(&time), 10.0);
        assert_eq!(j.measured.measured["a"].1, 2);
        // A new generation, another count or a mixed world measures nothing.
        j.epoch(Some("a"), 2, 40, 2, Some(&time), 15.0);
        j.epoch(Some("a"), 1, 50, 2, Some(&time), 20.0);
        j.epoch(None, 2, 60, 2, Some(&time), 25.0);
        j.epoch(Some("b"), 2, 70, 2, Some(&time), 30.0);
        assert_eq!(j.measured.measured["a"].1, 2);
        assert!(!j.measured.measured.contains_key("b"));
    }
}
