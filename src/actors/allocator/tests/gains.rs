//! The epoch's check of each job's prediction against its reports (the summary's `gains`).

use super::super::core::Input;
use super::super::state::Allocator;
use super::{bid, settings, worker};

/// Each epoch checks what the last one predicted for a job against its reports since: the drop
/// predicted at the workers it had, and the drop realised, both scaled as the bid's gain was.
/// A job whose prediction has not been checked yet adds nothing.
#[test]
fn an_epoch_checks_the_last_epochs_prediction_against_the_loss_reported_since() {
    let mut a = Allocator::new(settings(), false);
    a.handle(0.0, Input::JobStarted { job: "j".into(), local: true, command: None });
    a.handle(0.0, Input::WorkerHello(worker("w", None)));
    let first = bid("j", Some(1), 5);
    let (loss_at_start, gain) = (first.last_loss.expect("a loss"), first.gain.clone().expect("a gain"));
    a.handle(0.0, Input::Bid { job: "j".into(), bid: first });
    let out = a.epoch(1.0, true, &|| 0.0);
    assert!(out.summary.gains.is_none(), "nothing predicted before the first epoch");
    let later = bid("j", Some(1), 9);
    let loss = later.last_loss.expect("a loss");
    a.handle(1.5, Input::Bid { job: "j".into(), bid: later });
    let gains = a.epoch(2.0, true, &|| 0.0).summary.gains.expect("one job's prediction checked");
    assert_eq!(gains.jobs, 1);
    let curve = gain.curve();
    assert_eq!(gains.predicted, curve.predicted_drop(1, 1.0), "predicted at the one worker it got");
    assert_eq!(gains.realised, (loss_at_start - loss) / curve.scale);
    assert!(gains.realised > 0.0);
}
