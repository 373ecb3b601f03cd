//! What an epoch keeps for the next so that it does not allocate it again (issue #44).

use super::{epoch, settings};
use crate::actors::allocator::core::Input;
use crate::actors::allocator::state::Allocator;

/// An epoch plans its jobs in the allocation the last one emptied (`planned::recycle`): a
/// fresh one each epoch was faulted in from the OS again whenever mimalloc had purged the last.
#[test]
fn an_epoch_plans_its_jobs_in_the_allocation_the_last_one_emptied() {
    let mut a = Allocator::new(settings(), true);
    for job in ["a", "b", "c"] {
        a.handle(0.0, Input::JobStarted { job: job.into(), local: true, command: None });
    }
    epoch(&mut a, 1.0, true);
    let (kept, capacity) = (a.spare_jobs.as_ptr(), a.spare_jobs.capacity());
    assert!(a.spare_jobs.is_empty() && capacity >= 3, "{capacity}");
    epoch(&mut a, 2.0, true);
    assert_eq!((a.spare_jobs.as_ptr(), a.spare_jobs.capacity()), (kept, capacity));
}
