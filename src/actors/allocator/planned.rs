//! A job as the planner sees it each epoch (`planning` makes them): what it bids, and the
//! type that borrows from its entry, whose allocation the allocator keeps between epochs.

use crate::policy::table::Tabled;
use crate::policy::{ByRef, GainFn};
use crate::quality::GainCurve;
use crate::schedule::{self, EpochJob};

/// What a job bids this epoch: its own gains, or (a submitted job, which every change
/// restarts) those gains with the restart priced in.
pub(super) enum BidGain<'a> {
    Curve(ByRef<'a, Tabled<GainCurve>>),
    Priced(schedule::GainTable),
}

impl GainFn for BidGain<'_> {
    fn gain(&self, workers: u32) -> f64 {
        match self {
            BidGain::Curve(c) => c.gain(workers),
            BidGain::Priced(t) => t.gain(workers),
        }
    }

    fn table(&self) -> &[f64] {
        match self {
            BidGain::Curve(c) => c.table(),
            BidGain::Priced(t) => t.table(),
        }
    }

    fn gain_at_speed(&self, workers: u32, speed: f64) -> f64 {
        match self {
            BidGain::Curve(c) => c.gain_at_speed(workers, speed),
            BidGain::Priced(t) => t.gain_at_speed(workers, speed),
        }
    }
}

/// A job as the planner sees it, borrowing from its entry.
pub(super) type PlannedJob<'a> = EpochJob<'a, schedule::Finishing<'a, BidGain<'a>>>;

/// The allocation of an epoch's planned jobs, emptied, for the next epoch's (whose borrows have
/// another lifetime). Allocated afresh every epoch, those megabytes (232 bytes a job) were
/// faulted in from the OS again each second, when mimalloc purges what stayed freed: at 10,000
/// jobs every tenth epoch took half as long again. A collect from `into_iter` reuses the
/// allocation where the layouts match, as here (the same type but for its lifetime), and
/// allocates anew otherwise: correct either way, and a test checks the reuse.
pub(super) fn recycle<'b>(mut jobs: Vec<PlannedJob<'_>>) -> Vec<PlannedJob<'b>> {
    jobs.clear();
    jobs.into_iter().map(|_| unreachable!("emptied")).collect()
}
