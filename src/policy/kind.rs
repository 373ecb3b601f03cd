//! `PolicyKind`, the live allocation policies, and the one place that dispatches to them.

use super::{Allocation, GainFn, Problem, fair, slaq};

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
            PolicyKind::Slaq => slaq::allocate(problem),
            PolicyKind::Fair => fair::allocate(problem),
        }
    }
}
