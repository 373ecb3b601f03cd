//! Saves asked for before a reclaim (issue #43): a job that saves on a schedule, not at its
//! stop, and said it saves when asked (`JobSpec::save_on_request`) is asked to save before a
//! reclaim changes its workers, and the change waits for that save, at most its grace. (A
//! change no guarantee needs waits for the job's next scheduled save anyway: `Hold::Save`.)
//! Every other job's change goes as planned.
//!
//! - At the first epoch, while a tenant is owed its guarantee, whose plan changes such a job's
//!   workers (it loses or gains one, so its processes restart), it is sent its allocation
//!   again with `save` set, and every move of a worker into or out of it is put off: the
//!   workers stay as they are (and its ledger books what it has, not what was planned).
//! - The plan is made again each epoch. Once the job's reports show a save since it was
//!   asked, its change goes, with its full grace. If none comes within its grace (its tenant's
//!   `grace_s`, or the taker's where that is shorter; 60 s without tenants) less an epoch, the
//!   change goes all the same and its processes get what is left of the grace: a reclaim still
//!   ends within `R` = epoch + grace + restart.
//! - A plan that no longer changes the job, or no guarantee owed, calls the ask off.

use super::planning::EpochState;
use super::state::{Allocated, Allocator, Asked, Effect};
use crate::protocol::JobAllocation;
use crate::schedule::EpochPlan;

/// How long a job without a tenant is waited for once asked (the tenants' default grace).
const UNTENANTED_WAIT_S: f64 = 60.0;

impl Allocator {
    /// While a tenant is `owed` its guarantee, asks the jobs that save when asked and whose
    /// workers the plan changes (from `current`) to save first; see the module documentation.
    /// `typed`: the cluster has several worker types (an allocation names its workers' type).
    /// `state` says whether any job saves on request and any was asked (read in its pass over
    /// the jobs): without either, no job is read here.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask_saves(
        &mut self,
        epoch: u64,
        (current, plan): (&[Option<usize>], &EpochPlan),
        state: &EpochState,
        now_s: f64,
        owed: bool,
        typed: bool,
        fx: &mut Vec<Effect>,
    ) -> Asked {
        let n = self.jobs.len();
        let mut asked = Asked { wait: vec![false; n], cut_ms: vec![None; n] };
        if !owed || !state.saves_on_request {
            if state.asked {
                self.jobs.values_mut().for_each(|e| e.asked_s = None);
            }
            return asked;
        }
        let tenants = self.settings.tenants.get();
        let grace_of = |id: &str| tenants.as_deref().and_then(|t| t.config_of(id)).map(|c| c.grace_s);
        let ids: Vec<&str> = self.jobs.keys().map(String::as_str).collect();
        // Per job: whether its membership changes, and the shortest grace of those taking its
        // workers (their tenants' terms bound the wait).
        let mut changes = vec![false; n];
        let mut budget: Vec<f64> = ids.iter().map(|id| grace_of(id).unwrap_or(UNTENANTED_WAIT_S)).collect();
        for (&before, &after) in current.iter().zip(plan.next(current)) {
            if before == after {
                continue;
            }
            for j in [before, after].into_iter().flatten().filter(|&j| j < n) {
                changes[j] = true;
            }
            if let (Some(b), Some(a)) = (before.filter(|&b| b < n), after.filter(|&a| a < n))
                && let Some(g) = grace_of(ids[a])
            {
                budget[b] = budget[b].min(g);
            }
        }
        let epoch_s = self.settings.epoch.as_secs_f64();
        for (j, (id, e)) in self.jobs.iter_mut().enumerate() {
            let asks = e.head.as_ref().is_some_and(|h| h.save_on_request) && e.saves.on_schedule();
            if !(changes[j] && asks && !e.workers.is_empty()) {
                e.asked_s = None;
                continue;
            }
            match e.asked_s {
                // Saved within the last epoch: nothing to lose.
                None if e.saves.saved_since(now_s - epoch_s) => {}
                None => {
                    e.asked_s = Some(now_s);
                    asked.wait[j] = true;
                    let at = Allocated { typed, id, epoch, term: self.settings.term };
                    let ask = at.of(&self.registry, e.workers.clone(), e.batch);
                    fx.push(Effect::Allocate(JobAllocation { save: true, ..ask }));
                }
                Some(at) if e.saves.saved_since(at) => e.asked_s = None,
                Some(at) if now_s - at + epoch_s < budget[j] => asked.wait[j] = true,
                Some(at) => {
                    e.asked_s = None;
                    asked.cut_ms[j] = Some(((budget[j] - (now_s - at)).max(0.0) * 1e3).round() as u64);
                }
            }
        }
        asked
    }
}
