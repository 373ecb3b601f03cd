//! `PolicyKind`, the live allocation policies, and the one place that dispatches to them.

use super::{Allocation, GainFn, JobBid, Problem, fair, slaq};

/// The allocation policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Greedy marginal gain ([`slaq::allocate`]).
    Slaq,
    /// Work-conserving max-min fair share ([`fair::allocate`]).
    Fair,
}

impl PolicyKind {
    pub fn allocate<G: GainFn>(self, problem: &Problem<'_, G>) -> Allocation {
        match self {
            PolicyKind::Slaq if super::weighted(problem.jobs) => {
                let jobs: Vec<_> = problem.jobs.iter().map(JobBid::scaled).collect();
                slaq::allocate(&Problem { num_workers: problem.num_workers, jobs: &jobs })
            }
            PolicyKind::Slaq => slaq::allocate(problem),
            PolicyKind::Fair => fair::allocate(problem),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `slaq` with weights values each job's gains times its weight (`Scaled`); all weights 1
    /// is the unweighted greedy exactly.
    #[test]
    fn slaq_values_gains_times_the_weight() {
        let concave = |w: u32| (1.0 + f64::from(w)).ln();
        let bid = |weight| JobBid { weight, ..JobBid::new(Some(concave)) };
        let even = [bid(1.0), bid(1.0)];
        assert_eq!(PolicyKind::Slaq.allocate(&Problem { num_workers: 8, jobs: &even }).workers, vec![4, 4]);
        // ln: the marginal of the k-th worker is ln((k+1)/k); weight 3 takes workers while
        // 3·ln((a+1)/a) ≥ ln((b+1)/b): 6 and 2 of 8.
        let heavy = [bid(3.0), bid(1.0)];
        let a = PolicyKind::Slaq.allocate(&Problem { num_workers: 8, jobs: &heavy });
        assert_eq!(a.workers, vec![6, 2]);
        // Fair shares in proportion to the weights.
        assert_eq!(PolicyKind::Fair.allocate(&Problem { num_workers: 8, jobs: &heavy }).workers, vec![6, 2]);
    }
}
