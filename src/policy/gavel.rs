//! Time-sharing policies on a cluster of several worker types, re-implemented from Gavel's paper
//! (Narayanan et al., OSDI 2020), not copied: an allocation gives each job the fraction of time
//! it should spend on each type, and rounds turn the fractions into whole assignments.
//!
//! - [`max_min_fractions`]: Gavel's heterogeneity-aware least-attained-service policy. It
//!   maximises the minimum over jobs of `(sf / weight) · (Σ_t rate_t · x_t) / equal_share`,
//!   with `equal_share = Σ_t rate_t · count_t / size`, each type's capacity (`Σ_j sf_j · x_jt ≤
//!   count_t`) and each job's fractions summing to at most 1. Solved with `microlp`. A max-min LP
//!   leaves the jobs that are not at the minimum anywhere in a range; as tie-break the LP also
//!   maximises, with a weight of 10⁻³, the sum of the normalised throughputs, so capacity that
//!   nobody at the minimum can use is not left idle.
//! - [`fair_fractions`]: the heterogeneity-agnostic baseline: the same LP with every throughput
//!   set to 1, solved in closed form (the level `z` at which `Σ_j sf_j · min(1, z) = size`), each
//!   job's time spread over the types in proportion to the cluster mix.
//! - [`Rounds`]: Gavel's round mechanism. Priority of job j on type t = its fraction `x_jt`
//!   divided by the share of its rounds it has received on t (a type it never got: infinite,
//!   ordered by `x_jt`); pairs are served in priority order, a job at most once a round and only
//!   where its scale factor fits; ties keep a job where it ran. Then a work-conserving fill
//!   (issue #43): GPUs still free go to the active jobs left waiting, most behind their
//!   allocation first, so the baseline is compared in its strongest form (without it, 14–44% of
//!   the K80s' time was idle while jobs waited).

use microlp::{ComparisonOp, OptimizationDirection, Problem};

/// A job as the time-sharing policies see it.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeJob {
    /// Steps per second on each type at its scale factor (0: cannot run there).
    pub rates: Vec<f64>,
    pub scale_factor: u32,
    pub weight: f64,
}

/// Time fractions `x[j][t]`.
pub type Fractions = Vec<Vec<f64>>;

/// The tie-break's weight (see the module documentation).
const TIE_BREAK: f64 = 1e-3;

/// Gavel's heterogeneity-aware max-min allocation; see the module documentation. An LP the
/// solver cannot solve (it should not happen) falls back to [`fair_fractions`].
pub fn max_min_fractions(jobs: &[TimeJob], counts: &[u32]) -> Fractions {
    if jobs.is_empty() {
        return Vec::new();
    }
    let size: f64 = counts.iter().map(|&c| f64::from(c)).sum();
    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let z = lp.add_var(1.0, (0.0, f64::INFINITY));
    let mut per_type: Vec<Vec<(microlp::Variable, f64)>> = vec![Vec::new(); counts.len()];
    let mut vars: Vec<Vec<Option<microlp::Variable>>> = Vec::with_capacity(jobs.len());
    let n = jobs.len() as f64;
    for job in jobs {
        let equal: f64 = job.rates.iter().zip(counts).map(|(r, &c)| r * f64::from(c)).sum::<f64>() / size;
        let mut row = Vec::with_capacity(counts.len());
        let mut normalised: Vec<(microlp::Variable, f64)> = vec![(z, 1.0)];
        let mut sum: Vec<(microlp::Variable, f64)> = Vec::new();
        for (t, &r) in job.rates.iter().enumerate() {
            let fits = counts.get(t).is_some_and(|&c| c >= job.scale_factor);
            if r <= 0.0 || equal <= 0.0 || !fits {
                row.push(None);
                continue;
            }
            let coef = f64::from(job.scale_factor) / job.weight.max(1e-9) * r / equal;
            let v = lp.add_var(TIE_BREAK * coef / n, (0.0, 1.0));
            normalised.push((v, -coef));
            sum.push((v, 1.0));
            per_type[t].push((v, f64::from(job.scale_factor)));
            row.push(Some(v));
        }
        if !sum.is_empty() {
            lp.add_constraint(normalised.as_slice(), ComparisonOp::Le, 0.0);
            lp.add_constraint(sum.as_slice(), ComparisonOp::Le, 1.0);
        }
        vars.push(row);
    }
    for (t, terms) in per_type.iter().enumerate() {
        if !terms.is_empty() {
            lp.add_constraint(terms.as_slice(), ComparisonOp::Le, f64::from(counts[t]));
        }
    }
    let Ok(outcome) = lp.solve() else { return fair_fractions(jobs, counts) };
    let Some(solution) = outcome.solution() else { return fair_fractions(jobs, counts) };
    vars.iter()
        .map(|row| row.iter().map(|v| v.map_or(0.0, |v| solution.var_value(v).clamp(0.0, 1.0))).collect())
        .collect()
}

/// The heterogeneity-agnostic max-min allocation; see the module documentation. A type a job
/// cannot run on gets none of its time; its share goes to the types it can run on.
pub fn fair_fractions(jobs: &[TimeJob], counts: &[u32]) -> Fractions {
    let size: f64 = counts.iter().map(|&c| f64::from(c)).sum();
    let demand: f64 = jobs.iter().map(|j| f64::from(j.scale_factor)).sum();
    let level = if demand <= size { 1.0 } else { size / demand };
    jobs.iter()
        .map(|job| {
            let usable: Vec<bool> = job
                .rates
                .iter()
                .zip(counts)
                .map(|(&r, &c)| r > 0.0 && c >= job.scale_factor)
                .chain(std::iter::repeat(false))
                .take(counts.len())
                .collect();
            let mix: f64 = counts.iter().zip(&usable).filter(|(_, u)| **u).map(|(&c, _)| f64::from(c)).sum();
            counts
                .iter()
                .zip(&usable)
                .map(|(&c, &u)| if u && mix > 0.0 { level * f64::from(c) / mix } else { 0.0 })
                .collect()
        })
        .collect()
}

/// Gavel's rounds: what each job has received, and the next round's assignment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rounds {
    /// Rounds each job received on each type, and rounds it has been waiting or running.
    received: Vec<Vec<f64>>,
    alive: Vec<f64>,
}

impl Rounds {
    /// Room for `jobs` jobs of `types` types; jobs past the old length start with nothing.
    pub fn resize(&mut self, jobs: usize, types: usize) {
        self.received.resize(jobs, vec![0.0; types]);
        self.alive.resize(jobs, 0.0);
    }

    /// The next round: each job's type, or none. `active` marks the jobs that want to run,
    /// `current` where each ran last round. Books the round as received.
    pub fn assign(
        &mut self,
        fractions: &Fractions,
        jobs: &[TimeJob],
        counts: &[u32],
        active: &[bool],
        current: &[Option<usize>],
    ) -> Vec<Option<usize>> {
        self.resize(jobs.len(), counts.len());
        let mut pairs: Vec<(f64, bool, usize, usize)> = Vec::new();
        for (j, row) in fractions.iter().enumerate().filter(|(j, _)| active[*j]) {
            for (t, &x) in row.iter().enumerate().filter(|(_, x)| **x > 1e-9) {
                let share = if self.alive[j] > 0.0 { self.received[j][t] / self.alive[j] } else { 0.0 };
                let priority = if share > 0.0 { x / share } else { f64::INFINITY };
                pairs.push((priority, current[j] == Some(t), j, t));
            }
        }
        // Infinite priorities are ordered by their fractions; then a job stays where it ran.
        let key = |p: &(f64, bool, usize, usize)| (p.0, if p.0.is_infinite() { fractions[p.2][p.3] } else { 0.0 });
        pairs.sort_by(|a, b| {
            let (ka, kb) = (key(a), key(b));
            kb.0.total_cmp(&ka.0)
                .then(kb.1.total_cmp(&ka.1))
                .then(b.1.cmp(&a.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        let mut free = counts.to_vec();
        let mut out = vec![None; jobs.len()];
        for (_, _, j, t) in pairs {
            if out[j].is_none() && free[t] >= jobs[j].scale_factor {
                free[t] -= jobs[j].scale_factor;
                out[j] = Some(t);
            }
        }
        self.fill(fractions, jobs, active, &mut free, &mut out);
        for j in (0..jobs.len()).filter(|&j| active[j]) {
            self.alive[j] += 1.0;
            if let Some(t) = out[j] {
                self.received[j][t] += 1.0;
            }
        }
        out
    }
}

impl Rounds {
    /// The work-conserving fill: GPUs the priority pass left free go to the active jobs it did
    /// not serve, most behind their allocation first (their LP time minus the share of rounds
    /// they received), each on the free type where it runs fastest relative to its equal share;
    /// ties to the lower job. A job with no fraction on a type may run there: running slower
    /// beats waiting, and the round is booked as received, so the priorities see it.
    fn fill(
        &self,
        fractions: &Fractions,
        jobs: &[TimeJob],
        active: &[bool],
        free: &mut [u32],
        out: &mut [Option<usize>],
    ) {
        let behind = |j: usize| {
            let owed: f64 = fractions.get(j).map_or(0.0, |row| row.iter().sum());
            let got = if self.alive[j] > 0.0 { self.received[j].iter().sum::<f64>() / self.alive[j] } else { 0.0 };
            owed - got
        };
        let mut waiting: Vec<(f64, usize)> =
            (0..jobs.len()).filter(|&j| active[j] && out[j].is_none()).map(|j| (behind(j), j)).collect();
        waiting.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, j) in waiting {
            let sf = jobs[j].scale_factor;
            let pick = (0..free.len())
                .filter(|&t| free[t] >= sf && jobs[j].rates.get(t).is_some_and(|&r| r > 0.0))
                .max_by(|&a, &b| jobs[j].rates[a].total_cmp(&jobs[j].rates[b]).then(b.cmp(&a)));
            if let Some(t) = pick {
                free[t] -= sf;
                out[j] = Some(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rates: &[f64], sf: u32) -> TimeJob {
        TimeJob { rates: rates.to_vec(), scale_factor: sf, weight: 1.0 }
    }

    #[test]
    fn the_heterogeneity_aware_lp_sends_each_job_where_it_gains_most() {
        // One fast and one slow GPU. Job 0 runs 10× faster on the fast one; job 1 runs the
        // same on both. Max-min: job 1 cannot beat its equal share (1 GPU's time at 1 step/s),
        // and job 0 on the fast GPU is 10/5.5 = 1.8 times its own; the tie-break keeps it there.
        let jobs = [job(&[10.0, 1.0], 1), job(&[1.0, 1.0], 1)];
        let x = max_min_fractions(&jobs, &[1, 1]);
        assert!(x[0][0] > 0.99 && x[1][1] > 0.99, "{x:?}");
        // Each type's capacity and each job's time hold.
        let three = [job(&[10.0, 1.0], 1), job(&[2.0, 1.0], 1), job(&[3.0, 2.0], 1)];
        let x = max_min_fractions(&three, &[1, 1]);
        let norm = |j: usize| {
            let equal = three[j].rates.iter().sum::<f64>() / 2.0;
            x[j].iter().zip(&three[j].rates).map(|(a, r)| a * r).sum::<f64>() / equal
        };
        let fair_level = 2.0 / 3.0;
        for j in 0..3 {
            assert!(x[j].iter().sum::<f64>() <= 1.0 + 1e-9);
            assert!(norm(j) >= fair_level - 1e-6, "nobody below the agnostic share: {} {x:?}", norm(j));
        }
        for t in 0..2 {
            assert!(x.iter().map(|row| row[t]).sum::<f64>() <= 1.0 + 1e-9);
        }
        let jobs = [job(&[10.0, 1.0], 1), job(&[2.0, 1.0], 1)];
        // Agnostic: every job half of each.
        assert_eq!(fair_fractions(&jobs, &[1, 1]), vec![vec![0.5, 0.5], vec![0.5, 0.5]]);
    }

    #[test]
    fn the_agnostic_share_is_the_lp_with_every_throughput_one() {
        // Three jobs (one on two GPUs) on 3 + 1 GPUs: demand 4 fits, everybody runs all the time.
        let jobs = [job(&[1.0, 1.0], 1), job(&[1.0, 1.0], 2), job(&[1.0, 1.0], 1)];
        let f = fair_fractions(&jobs, &[3, 1]);
        assert_eq!(f[1], vec![1.0, 0.0], "two GPUs fit only on the first type");
        assert_eq!(f[0], vec![0.75, 0.25]);
        // Six one-GPU jobs on four GPUs: 2/3 of the time each, and the LP agrees on the level.
        let six = vec![job(&[1.0, 1.0], 1); 6];
        let f = fair_fractions(&six, &[3, 1]);
        let lp = max_min_fractions(&six, &[3, 1]);
        for j in 0..6 {
            let (a, b) = (f[j].iter().sum::<f64>(), lp[j].iter().sum::<f64>());
            assert!((a - 2.0 / 3.0).abs() < 1e-9 && (b - 2.0 / 3.0).abs() < 1e-6, "{a} {b}");
        }
    }

    #[test]
    fn rounds_serve_fractions_over_time_and_keep_jobs_in_place() {
        // Three jobs, one GPU of each of two types: each job is owed 2/3 of a GPU's time.
        let jobs = vec![job(&[1.0, 1.0], 1); 3];
        let x = fair_fractions(&jobs, &[1, 1]);
        let mut rounds = Rounds::default();
        let mut current = vec![None; 3];
        let mut ran = [0; 3];
        for _ in 0..300 {
            current = rounds.assign(&x, &jobs, &[1, 1], &[true; 3], &current);
            assert!(current.iter().flatten().filter(|&&t| t == 0).count() <= 1);
            for (r, c) in ran.iter_mut().zip(&current) {
                *r += usize::from(c.is_some());
            }
        }
        assert!(ran.iter().all(|&r| (195..=205).contains(&r)), "{ran:?}");
        // An inactive job gets nothing; a job alone keeps its type.
        let alone = rounds.assign(&x, &jobs, &[1, 1], &[true, false, false], &[Some(1), None, None]);
        assert_eq!(alone[1..], [None, None]);
    }

    #[test]
    fn rounds_leave_no_gpu_idle_that_a_waiting_job_can_use() {
        // One fast GPU and one slow; an allocation that gives both jobs half of the fast GPU's
        // time and nothing of the slow (the time fractions Gavel's LP gives jobs that gain
        // little from the slow type). The priority pass alone serves only pairs with a
        // fraction, so one job waits every round beside an idle GPU.
        let jobs = vec![job(&[10.0, 1.0], 1); 2];
        let x = vec![vec![0.5, 0.0]; 2];
        let mut rounds = Rounds::default();
        let mut current = vec![None; 2];
        for _ in 0..10 {
            current = rounds.assign(&x, &jobs, &[1, 1], &[true; 2], &current);
            assert_eq!(current.iter().flatten().count(), 2, "every GPU busy: {current:?}");
            assert_eq!(current.iter().flatten().filter(|&&t| t == 0).count(), 1, "{current:?}");
        }
        // A job that fits nowhere free still waits; the fill never overfills a type.
        let big = [job(&[1.0, 1.0], 1), job(&[1.0, 1.0], 2)];
        let x = fair_fractions(&big, &[1, 1]);
        let got = Rounds::default().assign(&x, &big, &[1, 1], &[true; 2], &[None, None]);
        assert_eq!(got, vec![Some(0), None]);
    }
}
