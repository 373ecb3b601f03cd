//! Placement: turns worker counts per job into concrete workers, moving as few as possible.
//! Each job keeps up to its target of the workers it has (lowest worker order first), gives up
//! the rest, and is topped up from the free workers in worker order. The number of workers
//! whose job changes is then the minimum any placement could achieve.

use super::JobOrd;

/// Dense index of a worker.
pub type WorkerOrd = usize;

/// `target[j]` workers for job `j`, given each worker's current job; returns each worker's new
/// job. Requires `Σ target ≤ current.len()`; jobs beyond `target.len()` lose their workers.
pub fn place(target: &[u32], current: &[Option<JobOrd>]) -> Vec<Option<JobOrd>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn moves(before: &[Option<JobOrd>], after: &[Option<JobOrd>]) -> usize {
        before.iter().zip(after).filter(|(a, b)| a != b).count()
    }

    #[test]
    fn keeps_what_it_can_and_moves_the_minimum() {
        let current = [Some(0), Some(0), Some(1), None, Some(1), Some(1)];
        let next = place(&[1, 2, 2], &current);
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
        let next = place(&[1, 2], &current);
        assert_eq!(place(&[1, 2], &next), next, "replanning an unchanged input moves nothing");
    }

    #[test]
    fn vanished_jobs_free_their_workers() {
        assert_eq!(place(&[1], &[Some(3), Some(0)]), vec![None, Some(0)]);
    }
}
