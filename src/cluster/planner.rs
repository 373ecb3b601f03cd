//! One epoch's decision for deep-learning jobs on machines with slots, shared by `sim::pollux`
//! and the live allocator (`actors::allocator`):
//!
//! 1. **Counts** come from `schedule::plan` (the fairness floor, then the SLAQ greedy or fair
//!    sharing) on bids whose gains are [`gains`]: a job's predicted progress over a horizon
//!    with `k` slots, packed on as few machines as possible, at the best batch for `k` (Courier's
//!    rule), as a fraction of the progress it has left (SLAQ's normalised gain, with progress as
//!    the quality measure), net of the restart that any change of count costs.
//! 2. **Placement** ([`place`]): a job whose count is unchanged keeps its machines; the others are
//!    placed on the free slots by [`Placer`] (Yu et al.'s LP rounding, best-fit greedy above
//!    [`LP_MAX_JOBS`] jobs to place, or first fit for the ablation); then a kept job that is spread
//!    over several machines moves to fewer only if the predicted time it saves over
//!    [`PlaceSettings::horizon_s`] pays for the restart.
//! 3. **Batch size** ([`batch_for`]): Courier's rule on the layout actually chosen.
//!
//! Parameter-server jobs split their slots into workers and servers ([`ps_split`]): the split
//! with the shortest predicted iteration.

use super::model::{BatchChoice, BatchConfig, BatchLimits, PerfParams, Shape, choose_batch};
use super::place::{self, Layout};

/// Above this many jobs to place at once the LP is not tried (its time grows superlinearly).
pub const LP_MAX_JOBS: usize = 256;

/// What the planner knows about one job.
#[derive(Clone, Debug)]
pub struct JobModel {
    pub perf: PerfParams,
    pub limits: BatchLimits,
    /// Allowed total batches (declared, or a grid between the limits).
    pub batches: Vec<u32>,
    /// Latest gradient statistics `(grad_sqr, grad_var)`, if the job reports them.
    pub grads: Option<(f64, f64)>,
    pub slo_iter_s: Option<f64>,
    /// A parameter-server job (else all-reduce).
    pub ps: bool,
    /// Its current layout (slots per machine).
    pub current: Layout,
    /// The per-GPU batch its compute was seen at, while it was seen at only one.
    pub seen_local: Option<u32>,
    /// Before it has run: the batch its user chose, which it starts at.
    pub start_batch: Option<u32>,
    /// The per-GPU batches its model is trusted at: half the smallest to twice the largest it
    /// ran at (`None`: any). Like the GPUs a job is trusted with, the range grows as it runs.
    pub local_range: Option<(u32, u32)>,
}

/// What the shapes a job ran in say about the per-GPU batches its model knows: the one batch it
/// was seen at while there is only one (`JobModel::seen_local`), and the range it is trusted at
/// (`JobModel::local_range`).
pub fn seen_batches(shapes: &[super::model::Observation]) -> (Option<u32>, Option<(u32, u32)>) {
    let seen = shapes.iter().map(|o| o.local_bsz as u32);
    let only = match shapes.first() {
        Some(o) if shapes.iter().all(|p| p.local_bsz == o.local_bsz) => Some(o.local_bsz as u32),
        _ => None,
    };
    (only, seen.clone().min().zip(seen.max()).map(|(lo, hi)| (lo / 2, hi.saturating_mul(2))))
}

/// How placement is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placer {
    /// Yu et al.'s LP rounding (best-fit greedy for large batches of jobs).
    Lp,
    /// Best fit on the fewest machines.
    Greedy,
    /// Free slots in machine order, no moves for locality (the ablation without placement).
    FirstFit,
}

/// Placement settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlaceSettings {
    pub placer: Placer,
    /// What a move costs the job, in seconds (a restart).
    pub restart_s: f64,
    /// How far ahead a move must pay for itself.
    pub horizon_s: f64,
}

/// One iteration of `job` with `config` on `counts` slots per machine.
pub fn iter_time(job: &JobModel, counts: &[u32], config: &BatchConfig) -> f64 {
    let shape = Shape::of(counts);
    if job.ps {
        let (workers, servers) = ps_split(job, shape.replicas, f64::from(config.local_bsz));
        let cross = if shape.machines <= 1 { 0.0 } else { 1.0 - 1.0 / f64::from(shape.machines) };
        job.perf.ps_iter_time(workers, servers, cross, f64::from(config.local_bsz), config.accum)
    } else {
        job.perf.iter_time(shape, f64::from(config.local_bsz), config.accum)
    }
}

/// Workers and parameter servers out of `slots` (at least one of each when `slots ≥ 2`): the
/// split with the shortest predicted synchronisation at per-GPU batch `local_bsz`.
pub fn ps_split(job: &JobModel, slots: u32, local_bsz: f64) -> (u32, u32) {
    if slots < 2 {
        return (slots, 0);
    }
    let compute = job.perf.compute(local_bsz);
    (1..slots)
        .map(|ps| (slots - ps, ps))
        .min_by(|a, b| {
            // Per worker: compute shared over fewer workers costs more than a faster sync saves.
            let t = |&(w, p): &(u32, u32)| (job.perf.ps_network(w, p, 0.5) + compute) / f64::from(w);
            t(a).total_cmp(&t(b))
        })
        .unwrap_or((slots - 1, 1))
}

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

/// Predicted progress per second with `k` slots packed on machines of `slots` each, at the best
/// batch, for `k = 0..=max`.
pub fn rates(job: &JobModel, max: u32, slots: u32) -> Vec<f64> {
    (0..=max)
        .map(|k| {
            if k == 0 || (job.ps && k < 2) {
                return 0.0;
            }
            batch_for(job, &Shape::packed_counts(k, slots)).map_or(0.0, |c| c.rate)
        })
        .collect()
}

/// SLAQ's normalised gain of `k` slots: the fraction of the progress left (`remaining`) that the
/// next `horizon_s` seconds make, from [`rates`], net of a restart: any count other than the
/// `current` one first loses `restart_s` (so a change is bid only where it pays for itself).
pub fn gains(rates: &[f64], remaining: f64, horizon_s: f64, current: u32, restart_s: f64) -> Vec<f64> {
    rates
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let run = if k as u32 == current { horizon_s } else { (horizon_s - restart_s).max(0.0) };
            (r * run / remaining.max(1e-9)).min(1.0)
        })
        .collect()
}

/// The least concave majorant of `g(0..n)` (its upper concave hull, linear between vertices).
/// Gains with a dip (the locality cliff from four GPUs on one machine to five on two; the restart
/// that a change costs) stop a greedy that hands out one slot at a time at the dip even where a
/// larger step pays; on the hull it takes the step. The greedy on the hull is optimal for the
/// hull (a concave problem), and all jobs but the one at the threshold end on a vertex, where
/// the hull is the gain itself.
pub fn concave_hull(g: &[f64]) -> Vec<f64> {
    let mut hull: Vec<usize> = Vec::with_capacity(g.len());
    for k in 0..g.len() {
        if !g[k].is_finite() {
            break;
        }
        while hull.len() >= 2 {
            let (a, b) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            // b is under the chord from a to k: drop it.
            if (g[b] - g[a]) * (k - a) as f64 <= (g[k] - g[a]) * (b - a) as f64 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(k);
    }
    let mut out = g.to_vec();
    for w in hull.windows(2) {
        let (a, b) = (w[0], w[1]);
        for (k, v) in out.iter_mut().enumerate().take(b).skip(a + 1) {
            *v = g[a] + (g[b] - g[a]) * (k - a) as f64 / (b - a) as f64;
        }
    }
    out
}

/// The layouts for `counts[j]` slots per job on machines with `capacity[m]` slots (see the
/// module's documentation). Every job gets exactly its count when `Σ counts ≤ Σ capacity`.
pub fn place(
    jobs: &[JobModel],
    counts: &[u32],
    capacity: &[u32],
    settings: &PlaceSettings,
    rng: &mut impl rand::Rng,
) -> Vec<Layout> {
    let mut free = capacity.to_vec();
    let mut out: Vec<Layout> = vec![Layout::new(); jobs.len()];
    let mut to_place = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let have: u32 = job.current.iter().map(|l| l.1).sum();
        let fits = job.current.iter().all(|&(m, c)| m < free.len() && free[m] >= c);
        if have == counts[j] && have > 0 && fits {
            for &(m, c) in &job.current {
                free[m] -= c;
            }
            out[j] = job.current.clone();
        } else if counts[j] > 0 {
            to_place.push(j);
        }
    }
    let demands: Vec<u32> = to_place.iter().map(|&j| counts[j]).collect();
    let cost = |i: usize, c: &[u32]| step_cost(&jobs[to_place[i]], c);
    let placed = match settings.placer {
        Placer::Lp if to_place.len() <= LP_MAX_JOBS => {
            place::lp_rounding(&free, &demands, &cost, 8, std::time::Duration::from_millis(200), rng)
        }
        Placer::Lp | Placer::Greedy => place::greedy(&free, &demands),
        Placer::FirstFit => place::first_fit(&free, &demands),
    };
    for (i, layout) in placed.into_iter().enumerate() {
        for &(m, c) in &layout {
            free[m] -= c;
        }
        out[to_place[i]] = layout;
    }
    if settings.placer != Placer::FirstFit {
        improve_kept(jobs, &mut out, &mut free, settings);
    }
    out
}

/// Each job's layout (of `jobs`) when worker `w`, on machine `machine_of[w]`, serves job
/// `assignment[w]`: the inverse of [`assign_workers`].
pub fn layouts_of(jobs: usize, machine_of: &[usize], assignment: &[Option<usize>]) -> Vec<Layout> {
    let mut layouts = vec![Layout::new(); jobs];
    for (&m, job) in machine_of.iter().zip(assignment) {
        if let Some(layout) = job.and_then(|j| layouts.get_mut(j)) {
            match layout.iter_mut().find(|l| l.0 == m) {
                Some(l) => l.1 += 1,
                None => layout.push((m, 1)),
            }
        }
    }
    layouts
}

/// Concrete workers from layouts: worker `w` is on machine `machine_of[w]` and serves job
/// `current[w]`; each job keeps, on each machine of its layout, the workers it has there (lowest
/// worker order first), and is topped up from that machine's free workers. Returns each
/// worker's job. Moves only what the layouts change.
pub fn assign_workers(layouts: &[Layout], machine_of: &[usize], current: &[Option<usize>]) -> Vec<Option<usize>> {
    let machines = machine_of.iter().copied().max().map_or(0, |m| m + 1);
    // want[(job, machine)] slots still to fill.
    let mut want: std::collections::HashMap<(usize, usize), u32> = std::collections::HashMap::new();
    for (j, layout) in layouts.iter().enumerate() {
        for &(m, c) in layout {
            *want.entry((j, m)).or_default() += c;
        }
    }
    let mut next: Vec<Option<usize>> = vec![None; machine_of.len()];
    for (w, (&m, &job)) in machine_of.iter().zip(current).enumerate() {
        if let Some(j) = job
            && let Some(left) = want.get_mut(&(j, m)).filter(|l| **l > 0)
        {
            *left -= 1;
            next[w] = Some(j);
        }
    }
    let mut free: Vec<Vec<usize>> = vec![Vec::new(); machines];
    for (w, &m) in machine_of.iter().enumerate().rev() {
        if next[w].is_none() {
            free[m].push(w);
        }
    }
    let mut pending: Vec<((usize, usize), u32)> = want.into_iter().filter(|e| e.1 > 0).collect();
    pending.sort_unstable();
    for ((j, m), n) in pending {
        for _ in 0..n {
            match free[m].pop() {
                Some(w) => next[w] = Some(j),
                None => break,
            }
        }
    }
    next
}

/// The predicted step time of `job` on `counts`, at its smallest batch: the placement's cost.
/// Equal predictions (a job with no reports yet predicts no synchronisation cost) are broken
/// towards fewer machines, by a millionth per extra machine.
fn step_cost(job: &JobModel, counts: &[u32]) -> f64 {
    let replicas = counts.iter().sum::<u32>().max(1);
    let t = iter_time(job, counts, &job.limits.configure(job.limits.init_batch, replicas));
    let machines = counts.iter().filter(|&&c| c > 0).count().max(1);
    t * (1.0 + 1e-6 * (machines - 1) as f64)
}

/// Moves a spread job onto fewer machines when the time saved over the horizon pays for a
/// restart: `(H − restart)/T_new > H/T_old`.
fn improve_kept(jobs: &[JobModel], out: &mut [Layout], free: &mut [u32], settings: &PlaceSettings) {
    for (j, job) in jobs.iter().enumerate() {
        if out[j].len() < 2 || out[j] != job.current {
            continue;
        }
        let want: u32 = out[j].iter().map(|l| l.1).sum();
        let mut trial = free.to_vec();
        for &(m, c) in &out[j] {
            trial[m] += c;
        }
        let candidate = place::best_fit(&mut trial, want);
        if candidate.len() >= out[j].len() {
            continue;
        }
        let counts = |l: &Layout| l.iter().map(|e| e.1).collect::<Vec<u32>>();
        let (old, new) = (step_cost(job, &counts(&out[j])), step_cost(job, &counts(&candidate)));
        if (settings.horizon_s - settings.restart_s) / new > settings.horizon_s / old {
            free.copy_from_slice(&trial);
            out[j] = candidate;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn job(current: Layout) -> JobModel {
        JobModel {
            perf: PerfParams {
                alpha_c: 0.02,
                beta_c: 0.005,
                alpha_l: 0.02,
                beta_l: 0.0,
                alpha_n: 0.3,
                beta_n: 0.01,
                gamma: 1.0,
            },
            limits: BatchLimits { init_batch: 32, max_batch: 512, min_local: 8, max_local: 64 },
            batches: vec![32, 64, 128, 256, 512],
            grads: None,
            slo_iter_s: None,
            ps: false,
            current,
            seen_local: None,
            start_batch: None,
            local_range: None,
        }
    }

    #[test]
    fn the_hull_bridges_dips_and_keeps_concave_gains() {
        let h = concave_hull(&[0.0, 1.0, 1.5, 1.2, 3.0, 3.1]);
        assert_eq!(h[0], 0.0);
        assert_eq!(h[4], 3.0);
        // Vertices at 0, 1, 4, 5: 2 and 3 lie on the chord from (1, 1) to (4, 3).
        assert_eq!(h[1], 1.0);
        assert!((h[2] - 5.0 / 3.0).abs() < 1e-12 && (h[3] - 7.0 / 3.0).abs() < 1e-12, "{h:?}");
        let concave = [0.0, 1.0, 1.8, 2.4, 2.8];
        assert_eq!(concave_hull(&concave), concave.to_vec());
    }

    #[test]
    fn workers_stay_where_their_job_stays() {
        // Workers 0-3 on machine 0, 4-7 on machine 1; job 0 has 0 and 5.
        let machine_of = [0, 0, 0, 0, 1, 1, 1, 1];
        let current = [Some(0), None, None, None, None, Some(0), None, None];
        let next = assign_workers(&[vec![(0, 2)], vec![(1, 3)]], &machine_of, &current);
        assert_eq!(next[0], Some(0), "kept");
        assert_eq!(next[5], Some(1), "job 0 left machine 1");
        assert_eq!(next.iter().filter(|j| **j == Some(0)).count(), 2);
        assert!(next.iter().enumerate().all(|(w, j)| *j != Some(0) || machine_of[w] == 0));
        assert!(next.iter().enumerate().all(|(w, j)| *j != Some(1) || machine_of[w] == 1));
        assert_eq!(next.iter().filter(|j| **j == Some(1)).count(), 3);
        assert_eq!(layouts_of(2, &machine_of, &next), vec![vec![(0, 2)], vec![(1, 3)]]);
        assert_eq!(layouts_of(2, &machine_of, &current), vec![vec![(0, 1), (1, 1)], vec![]]);
    }

    #[test]
    fn locality_shows_in_the_rates() {
        let r = rates(&job(Layout::new()), 8, 4);
        assert_eq!(r[0], 0.0);
        // 4 GPUs on one machine beat 5 across two: the cliff the placement must avoid.
        assert!(r[4] > r[5], "{r:?}");
        assert!(r[2] > r[1]);
    }

    #[test]
    fn unchanged_jobs_keep_their_machines_and_spread_ones_move_only_when_it_pays() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let jobs = vec![job(vec![(0, 2)]), job(vec![(1, 2), (2, 2)]), job(Layout::new())];
        let long = PlaceSettings { placer: Placer::Lp, restart_s: 30.0, horizon_s: 3600.0 };
        let out = place(&jobs, &[2, 4, 4], &[4, 4, 4, 4], &long, &mut rng);
        assert_eq!(out[0], vec![(0, 2)], "kept");
        assert_eq!(out[1].len(), 1, "moved onto one machine: {out:?}");
        assert_eq!(out[2].len(), 1, "placed whole: {out:?}");
        let short = PlaceSettings { horizon_s: 35.0, ..long };
        let out = place(&jobs, &[2, 4, 4], &[4, 4, 4, 4], &short, &mut rng);
        assert_eq!(out[1], vec![(1, 2), (2, 2)], "a move that does not pay is not made");
    }

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
