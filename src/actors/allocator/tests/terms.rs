//! What the allocator keeps from one epoch to the next for a job's bid (issue #44): it must be
//! the latest bid's.

use std::collections::BTreeMap;

use super::{bid, command, epoch, members, settings, worker};
use crate::actors::allocator::core::Input;
use crate::actors::allocator::planning::PassInput;
use crate::actors::allocator::state::{Allocator, AllocatorSettings};
use crate::policy::GainFn;

/// The completion term an allocator keeps between epochs (computed once per bid) is always its
/// latest bid's: when two jobs' remaining work swaps, the worker follows the shorter one.
#[test]
fn the_completion_term_kept_between_epochs_is_the_latest_bids() {
    let mut a = Allocator::new(AllocatorSettings { completion_weight: 100.0, ..settings() }, false);
    a.handle(0.0, Input::WorkerHello(worker("w", None)));
    let with_left = |job: &str, left: u64| {
        let mut b = bid(job, None, 40);
        b.max_iters = Some(b.last_iter.unwrap_or(0) + left);
        Input::Bid { job: job.into(), bid: b }
    };
    for job in ["long", "short"] {
        a.handle(0.0, Input::JobStarted { job: job.into(), local: true, command: None });
    }
    a.handle(0.0, with_left("long", 1_000_000));
    a.handle(0.0, with_left("short", 10));
    let mut held = BTreeMap::new();
    for now_s in 1..=3 {
        held.extend(members(&epoch(&mut a, f64::from(now_s), true)));
    }
    assert_eq!(held.get("short").map(Vec::len), Some(1), "{held:?}");
    a.handle(4.0, with_left("long", 10));
    a.handle(4.0, with_left("short", 1_000_000));
    for now_s in 5..=7 {
        held.extend(members(&epoch(&mut a, f64::from(now_s), true)));
    }
    assert_eq!(held.get("long").map(Vec::len), Some(1), "{held:?}");
}

/// What is kept of a job's term at its bid fits the job as it was then: when a hello gives a
/// job a command before its next bid, its gains this epoch are what its next bid gives, not the
/// kept sum read as the term's values.
#[test]
fn a_command_given_after_a_bid_gets_the_gains_its_next_bid_would_give() {
    let mut a = Allocator::new(AllocatorSettings { completion_weight: 1.0, ..settings() }, false);
    a.handle(0.0, Input::WorkerHello(worker("w", None)));
    let table = |a: &Allocator| -> Vec<u64> {
        let entry = &a.jobs["j"];
        let (h, g) = (entry.head.as_ref().expect("a bid"), entry.gain.as_deref().expect("a gain"));
        let cx = PassInput {
            settings: &a.settings,
            kept_tables: &a.kept_tables,
            default_model: (&a.default_model, a.default_model.is_special()),
            num_workers: 1,
            owed: false,
            tenants: None,
        };
        cx.finishing(entry, h, g, 0).table().iter().map(|v| v.to_bits()).collect()
    };
    a.handle(0.0, Input::JobStarted { job: "j".into(), local: true, command: None });
    a.handle(0.0, Input::Bid { job: "j".into(), bid: bid("j", Some(8), 40) });
    a.handle(0.0, Input::JobStarted { job: "j".into(), local: true, command: Some(command(1)) });
    let read = table(&a);
    a.handle(0.0, Input::Bid { job: "j".into(), bid: bid("j", Some(8), 40) });
    assert_eq!(read, table(&a));
}
