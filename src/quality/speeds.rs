//! How fast a job runs on each worker type (issue #31), learned from its own progress, with a
//! prior from the other jobs for the types it has not run on.
//!
//! A measurement is an epoch the job ran through on `k` workers of one type without a change:
//! its iterations over the epoch's seconds give its seconds per iteration there, which divided
//! by its time model's shape (`t(k)/t(1)`) is its **one-worker seconds** on that type, `a_t`
//! (an exponential average, weight [`RATE`]). Against the time model's own `t(1)` this is the
//! speed its gain curve is scaled by: `speed_t = t(1)/a_t`, so a model that drifts (it learns
//! from every type's reports) does not bias the comparison between types.
//!
//! **Prior for a type `u` a job has not measured**: the speeds it declared (`JobSpec::speeds`),
//! if they name `u` and a type it has measured (`a_u = a_s · d_s/d_u`); else, across all jobs, the median ratio
//! `a_u/a_s` for each pair of types both measured by some job ([`TypeRatios`]); a job that has
//! measured `s` is given `a_u = a_s · median(a_u/a_s)` (the median over the types it has
//! measured). With no such pair, `a_u` is taken to be the job's mean over its measured types.
//! **Exploration**: a type nobody has compared with another is tried by one job ([`explorers`]).
//! **Its own measurements replace the prior** by weight `n/(n + PRIOR_EPOCHS)` after `n` epochs on
//! the type: half after 2 epochs, 80% after 8.

use std::collections::BTreeMap;

/// Speeds a job declared per worker type (`JobSpec::speeds`): only their ratios matter.
pub type Declared = BTreeMap<String, f64>;

/// Weight of the newest measurement in a type's average.
pub const RATE: f64 = 0.3;
/// Epochs of measurement the prior is worth.
pub const PRIOR_EPOCHS: f64 = 2.0;

/// One job's one-worker seconds per iteration on each type it has run on, and epochs measured.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TypeSpeeds {
    pub measured: BTreeMap<String, (f64, u32)>,
}

impl TypeSpeeds {
    /// An epoch on `ty`: `seconds_per_iter` measured at a count whose time is `shape` times the
    /// one-worker time (the time model's `t(k)/t(1)`).
    pub fn observe(&mut self, ty: &str, seconds_per_iter: f64, shape: f64) {
        let a = seconds_per_iter / shape;
        if !(a.is_finite() && a > 0.0) {
            return;
        }
        let e = self.measured.entry(ty.to_string()).or_insert((a, 0));
        e.0 = if e.1 == 0 { a } else { e.0 + RATE * (a - e.0) };
        e.1 = e.1.saturating_add(1);
    }

    /// One-worker seconds on `ty`: own measurements blended with the prior (declared speeds,
    /// else `ratios`).
    pub fn one_worker_seconds(&self, ty: &str, ratios: &TypeRatios, declared: Option<&Declared>) -> Option<f64> {
        let own = self.measured.get(ty).copied();
        let prior = self.declared_prior(ty, declared).or_else(|| self.prior(ty, ratios));
        match (own, prior) {
            (Some((a, n)), Some(p)) => {
                let w = f64::from(n) / (f64::from(n) + PRIOR_EPOCHS);
                Some(w * a + (1.0 - w) * p)
            }
            (Some((a, _)), None) => Some(a),
            (None, p) => p,
        }
    }

    /// How many times as fast as its time model's `t(1)` (`t1`) the job runs on `ty`: from
    /// [`Self::one_worker_seconds`]; with nothing measured, its declared speed on `ty` over its
    /// declared speed where it runs now (`running_on`; else their mean); else 1.
    pub fn speed(
        &self,
        ty: &str,
        t1: Option<f64>,
        running_on: Option<&str>,
        ratios: &TypeRatios,
        declared: Option<&Declared>,
    ) -> f64 {
        if let (Some(t1), Some(a)) = (t1, self.one_worker_seconds(ty, ratios, declared))
            && a > 0.0
        {
            return t1 / a;
        }
        let Some(d) = declared else { return 1.0 };
        let Some(&mine) = d.get(ty) else { return 1.0 };
        let reference =
            running_on.and_then(|r| d.get(r).copied()).unwrap_or_else(|| d.values().sum::<f64>() / d.len() as f64);
        if reference > 0.0 { mine / reference } else { 1.0 }
    }

    fn declared_prior(&self, ty: &str, declared: Option<&Declared>) -> Option<f64> {
        let d = declared?;
        let &mine = d.get(ty)?;
        let mut estimates: Vec<f64> = self
            .measured
            .iter()
            .filter(|(s, _)| s.as_str() != ty)
            .filter_map(|(s, &(a, _))| d.get(s).map(|&ds| a * ds / mine))
            .collect();
        (!estimates.is_empty()).then(|| median(&mut estimates))
    }

    /// The prior for `ty` from the other types this job has measured (see the module).
    fn prior(&self, ty: &str, ratios: &TypeRatios) -> Option<f64> {
        let mut estimates: Vec<f64> = self
            .measured
            .iter()
            .filter(|(s, _)| s.as_str() != ty)
            .filter_map(|(s, &(a, _))| ratios.ratio(ty, s).map(|r| a * r))
            .collect();
        if estimates.is_empty() {
            let others: Vec<f64> = self.measured.iter().filter(|(s, _)| s.as_str() != ty).map(|(_, e)| e.0).collect();
            return (!others.is_empty()).then(|| others.iter().sum::<f64>() / others.len() as f64);
        }
        Some(median(&mut estimates))
    }
}

/// Exploration (issue #43): a type `u` that no job has measured beside another type has no
/// ratio for any job's prior, and without declared speeds every job would take it as fast as
/// where it runs: nothing would ever try it. One job per such type is chosen to try it (the
/// planner moves it there when workers of `u` are idle, `schedule::epoch`): of the jobs without
/// declared speeds that measured another type but not `u`, the one measured longest (ties: the
/// first). Once it has run an epoch on `u`, the pair has a ratio and every job's prior follows
/// it. `jobs[j]`: its speeds and whether it declared speeds; returns `(job, type)` pairs, the
/// type as its index in `names`.
pub fn explorers(jobs: &[(&TypeSpeeds, bool)], names: &[String]) -> Vec<(usize, usize)> {
    let compared = |u: &str| jobs.iter().any(|(s, _)| s.measured.contains_key(u) && s.measured.len() >= 2);
    names
        .iter()
        .enumerate()
        .filter(|(_, u)| !compared(u))
        .filter_map(|(t, u)| {
            let epochs = |s: &TypeSpeeds| s.measured.values().map(|e| e.1).sum::<u32>();
            jobs.iter()
                .enumerate()
                .filter(|(_, (s, declared))| {
                    !declared && !s.measured.is_empty() && !s.measured.contains_key(u.as_str())
                })
                .max_by(|(a, (sa, _)), (b, (sb, _))| epochs(sa).cmp(&epochs(sb)).then(b.cmp(a)))
                .map(|(j, _)| (j, t))
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Across jobs, the median of `a_u/a_s` for each pair of types that some job has measured both
/// of.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TypeRatios {
    ratios: BTreeMap<(String, String), f64>,
}

impl TypeRatios {
    /// From every job's measurements: O(jobs × types²).
    pub fn of<'a>(jobs: impl IntoIterator<Item = &'a TypeSpeeds>) -> Self {
        let mut pairs: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for job in jobs {
            for (u, &(au, _)) in &job.measured {
                for (s, &(a_s, _)) in job.measured.iter().filter(|(s, _)| *s != u) {
                    pairs.entry((u.clone(), s.clone())).or_default().push(au / a_s);
                }
            }
        }
        TypeRatios { ratios: pairs.into_iter().map(|(k, mut v)| (k, median(&mut v))).collect() }
    }

    /// `median(a_u/a_s)`, if some job measured both.
    pub fn ratio(&self, u: &str, s: &str) -> Option<f64> {
        self.ratios.get(&(u.to_string(), s.to_string())).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_s_own_measurements_replace_the_prior_from_other_jobs() {
        // Two jobs measured both types: type b takes 3 and 5 times as long as type a.
        let mut x = TypeSpeeds::default();
        x.observe("a", 1.0, 1.0);
        x.observe("b", 3.0, 1.0);
        let mut y = TypeSpeeds::default();
        y.observe("a", 2.0, 2.0);
        y.observe("b", 10.0, 2.0);
        let mut z = TypeSpeeds::default();
        z.observe("a", 1.0, 1.0);
        z.observe("b", 4.0, 1.0);
        let ratios = TypeRatios::of([&x, &y, &z]);
        assert_eq!(ratios.ratio("b", "a"), Some(4.0), "median of 3, 5 and 4");
        // A new job that ran only on a (at 2 s a one-worker iteration, measured on 4 workers
        // at half that time): its prior on b is 4 × 2 s.
        let mut j = TypeSpeeds::default();
        j.observe("a", 1.0, 0.5);
        assert_eq!(j.one_worker_seconds("a", &ratios, None), Some(2.0));
        assert_eq!(j.one_worker_seconds("b", &ratios, None), Some(8.0));
        // It runs on b and measures 4 s: after n epochs the estimate is (n·own + 2·prior)/(n + 2).
        j.observe("b", 4.0, 1.0);
        assert!((j.one_worker_seconds("b", &ratios, None).unwrap() - (4.0 + 2.0 * 8.0) / 3.0).abs() < 1e-9);
        for _ in 0..7 {
            j.observe("b", 4.0, 1.0);
        }
        assert!((j.one_worker_seconds("b", &ratios, None).unwrap() - (8.0 * 4.0 + 2.0 * 8.0) / 10.0).abs() < 1e-9);
        // With no job that measured both, the prior is the job's own mean elsewhere; with
        // nothing measured, none.
        assert_eq!(j.one_worker_seconds("c", &ratios, None), Some(3.0));
        assert_eq!(TypeSpeeds::default().one_worker_seconds("a", &ratios, None), None);
        // Nonsense is not measured.
        let mut k = TypeSpeeds::default();
        k.observe("a", f64::NAN, 1.0);
        k.observe("a", 1.0, 0.0);
        assert!(k.measured.is_empty());
    }

    #[test]
    fn one_job_explores_each_type_nobody_has_compared() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let on = |ty: &str, epochs: u32| {
            let mut s = TypeSpeeds::default();
            for _ in 0..epochs {
                s.observe(ty, 1.0, 1.0);
            }
            s
        };
        let (x, y, z) = (on("a", 3), on("a", 5), on("b", 1));
        // Nobody measured two types: the longest-measured job of another type tries each.
        assert_eq!(explorers(&[(&x, false), (&y, false), (&z, false)], &names), vec![(2, 0), (1, 1), (1, 2)]);
        // A job that declared its speeds has a prior: it is not sent.
        assert_eq!(explorers(&[(&x, false), (&y, true), (&z, false)], &names), vec![(2, 0), (0, 1), (0, 2)]);
        // Once one job measured a and b, only c is unexplored; nobody measured: nobody goes.
        let mut both = on("a", 1);
        both.observe("b", 2.0, 1.0);
        assert_eq!(explorers(&[(&x, false), (&both, false)], &names), vec![(0, 2)]);
        assert!(explorers(&[(&TypeSpeeds::default(), false)], &names).is_empty());
    }

    #[test]
    fn declared_speeds_are_the_prior_and_give_way_to_measurements() {
        let declared: Declared = [("v100".to_string(), 2.5), ("k80".to_string(), 0.5)].into();
        let none = TypeRatios::default();
        let mut j = TypeSpeeds::default();
        // Nothing measured: the declared ratio against where it runs (or their mean).
        assert_eq!(j.speed("k80", Some(1.0), Some("v100"), &none, Some(&declared)), 0.2);
        assert_eq!(j.speed("v100", Some(1.0), None, &none, Some(&declared)), 2.5 / 1.5);
        assert_eq!(j.speed("p100", Some(1.0), None, &none, Some(&declared)), 1.0, "undeclared: 1");
        assert_eq!(j.speed("k80", Some(1.0), None, &none, None), 1.0);
        // Measured on v100 at 1 s a one-worker iteration: k80's prior is 5 s.
        j.observe("v100", 1.0, 1.0);
        assert_eq!(j.one_worker_seconds("k80", &none, Some(&declared)), Some(5.0));
        assert!((j.speed("k80", Some(1.0), Some("v100"), &none, Some(&declared)) - 0.2).abs() < 1e-12);
        // It declared wrong: k80 is as fast as v100. Measurements take over.
        for _ in 0..20 {
            j.observe("k80", 1.0, 1.0);
        }
        let a = j.one_worker_seconds("k80", &none, Some(&declared)).unwrap();
        assert!((a - (20.0 * 1.0 + 2.0 * 5.0) / 22.0).abs() < 1e-9, "{a}");
    }
}
