//! Placement: counts per job to concrete workers.
//!
//! - [`fewest_moves`]: workers without machines (or one slot per machine): each job keeps up to
//!   its count of the workers it has, and is topped up from the free ones; the number of workers
//!   whose job changes is the minimum any placement could achieve.
//! - [`place`]: machines with several slots. A job whose count is unchanged keeps its machines;
//!   the others are placed on the free slots by [`Placer`] (Yu et al.'s LP rounding, best-fit
//!   greedy above [`LP_MAX_JOBS`] jobs to place, or first fit for the ablation); then a kept job
//!   that is spread over several machines moves to fewer only if the predicted time it saves over
//!   [`PlaceSettings::horizon_s`] pays for the restart. [`assign_workers`] then maps the layouts
//!   to workers, moving only what the layouts change.

use crate::cluster::place::{self, Layout};
use crate::policy::JobOrd;

use super::job::{JobModel, iter_time};

/// Above this many jobs to place at once the LP is not tried: its time grows superlinearly, and
/// this bound, not a clock, keeps an epoch's placement short and deterministic.
pub const LP_MAX_JOBS: usize = 256;

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

/// `target[j]` workers for job `j`, given each worker's current job; returns each worker's new
/// job. Requires `Σ target ≤ current.len()`; jobs beyond `target.len()` lose their workers.
pub fn fewest_moves(target: &[u32], current: &[Option<JobOrd>]) -> Vec<Option<JobOrd>> {
    debug_assert!(target.iter().map(|&t| t as usize).sum::<usize>() <= current.len());
    let mut kept = vec![0u32; target.len()];
    let mut next: Vec<Option<JobOrd>> = current
        .iter()
        .map(|&job| match job {
            Some(j) if j < target.len() && kept[j] < target[j] => {
                kept[j] += 1;
                Some(j)
            }
            _ => None,
        })
        .collect();
    let mut free = next.iter().enumerate().filter(|(_, j)| j.is_none()).map(|(w, _)| w).collect::<Vec<_>>().into_iter();
    for (job, (&want, &have)) in target.iter().zip(&kept).enumerate() {
        for _ in have..want {
            match free.next() {
                Some(w) => next[w] = Some(job),
                None => return next,
            }
        }
    }
    next
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
        Placer::Lp if to_place.len() <= LP_MAX_JOBS => place::lp_rounding(&free, &demands, &cost, 8, rng),
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
    use crate::schedule::job::test_job as job;
    use rand::SeedableRng;

    fn moves(before: &[Option<JobOrd>], after: &[Option<JobOrd>]) -> usize {
        before.iter().zip(after).filter(|(a, b)| a != b).count()
    }

    #[test]
    fn keeps_what_it_can_and_moves_the_minimum() {
        let current = [Some(0), Some(0), Some(1), None, Some(1), Some(1)];
        let next = fewest_moves(&[1, 2, 2], &current);
        assert_eq!(next, vec![Some(0), Some(2), Some(1), Some(2), Some(1), None]);
        // Job 0 gives up one, job 1 gives up one, job 2 gains two (one of them the idle
        // worker): three workers change, the fewest possible.
        assert_eq!(moves(&current, &next), 3);
        let counts = |p: &[Option<usize>], j| p.iter().filter(|x| **x == Some(j)).count() as u32;
        assert_eq!([counts(&next, 0), counts(&next, 1), counts(&next, 2)], [1, 2, 2]);
    }

    #[test]
    fn same_target_same_placement() {
        let current = [Some(1), None, Some(0), Some(1)];
        let next = fewest_moves(&[1, 2], &current);
        assert_eq!(fewest_moves(&[1, 2], &next), next, "replanning an unchanged input moves nothing");
    }

    #[test]
    fn vanished_jobs_free_their_workers() {
        assert_eq!(fewest_moves(&[1], &[Some(3), Some(0)]), vec![None, Some(0)]);
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
}
