//! `[cluster] shared`: what the partitions' owners send the leader, as the allocator reads it.

use super::super::core::{Input, RemoteJobs};
use super::super::state::Allocator;
use super::{bid, settings};
use crate::protocol::Outcome;

/// `[cluster] shared`: an owner's message with a job both gone and bidding says it ended, then
/// started again: it runs afresh (not ended after its new bid).
#[test]
fn a_remote_job_that_ended_and_started_again_in_one_message_runs_afresh() {
    let mut a = Allocator::new(settings(), false);
    let remote = |gone: &[&str], bids: &[&str]| {
        Input::Remote(RemoteJobs {
            gone: gone.iter().map(|j| (j.to_string(), Outcome::Finished)).collect(),
            bids: bids.iter().map(|j| (j.to_string(), bid(j, None, 8))).collect(),
            quiet: Vec::new(),
        })
    };
    a.handle(0.0, remote(&[], &["j"]));
    assert_eq!(a.snapshot(0.0, &Default::default()).num_jobs, 1);
    a.handle(1.0, remote(&["j"], &["j"]));
    let st = a.snapshot(1.0, &Default::default());
    assert_eq!(st.num_jobs, 1, "{st:?}");
    assert_eq!(st.ended.iter().map(|o| o.job.as_str()).collect::<Vec<_>>(), ["j"], "its predecessor ended");
}
