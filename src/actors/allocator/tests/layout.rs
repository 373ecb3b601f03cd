//! The layout an epoch leaves is the next epoch's, until a job or a worker comes or goes
//! (issue #44: no pass over the workers for it otherwise). Each epoch checks, in debug builds,
//! that the layout kept is what the registry says.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::core::Input;
use super::super::state::Allocator;
use super::{assigns, bid, epoch, members, settings, worker};
use crate::actors::bid::{Bid, job_model};
use crate::protocol::{JobSpec, Outcome, Role};
use crate::quality::{JobPredictor, PredictorConfig};
use crate::schedule;

/// Three jobs on two workers each, settled.
fn three_jobs() -> Allocator {
    let mut a = Allocator::new(settings(), false);
    for w in 1..=6 {
        a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
    }
    for j in ["a", "m", "z"] {
        a.handle(0.0, Input::JobStarted { job: j.into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: j.into(), bid: bid(j, Some(2), 5) });
    }
    let fx = epoch(&mut a, 1.0, true);
    assert!(members(&fx).values().all(|w| w.len() == 2), "{:?}", members(&fx));
    assert!(assigns(&epoch(&mut a, 2.0, true)).is_empty(), "settled");
    a
}

/// The workers each job serves, from the epoch's messages to workers.
fn jobs_of(fx: &[super::super::state::Effect]) -> BTreeMap<String, Option<String>> {
    assigns(fx).iter().map(|m| (m.worker.clone(), m.job.clone())).collect()
}

/// Each job's workers as the allocator records them.
fn members_now(a: &Allocator) -> BTreeMap<String, Vec<String>> {
    a.jobs.iter().map(|(id, e)| (id.clone(), e.workers.clone())).collect()
}

#[test]
fn a_job_that_ends_between_epochs_frees_its_workers_and_moves_no_other() {
    let mut a = three_jobs();
    let before = members_now(&a);
    a.handle(2.5, Input::JobStopped { job: "m".into(), outcome: Outcome::Finished });
    let fx = epoch(&mut a, 3.0, true);
    let freed: Vec<&String> = before["m"].iter().collect();
    let told = jobs_of(&fx);
    assert_eq!(told.keys().collect::<Vec<_>>(), freed, "only the ended job's workers are told");
    assert!(told.values().all(Option::is_none), "each of them is idle (the others are full): {told:?}");
    let after = members_now(&a);
    assert_eq!((&after["a"], &after["z"]), (&before["a"], &before["z"]));
}

#[test]
fn a_worker_that_joins_between_epochs_moves_no_other() {
    let mut a = three_jobs();
    let before = members_now(&a);
    // First in the workers' order: every other worker's place in it moves by one.
    a.handle(2.5, Input::WorkerHello(worker("w0", None)));
    let fx = epoch(&mut a, 3.0, true);
    assert!(assigns(&fx).is_empty(), "no worker is told anything (the new one stays idle, as it was)");
    assert_eq!(members_now(&a), before);
}

#[test]
fn a_job_that_starts_between_epochs_moves_no_other_job_s_workers() {
    let mut a = three_jobs();
    let before = members_now(&a);
    a.handle(2.5, Input::WorkerHello(worker("w7", None)));
    epoch(&mut a, 3.0, true);
    // Between two jobs in the jobs' order: the later jobs' places in it move by one.
    a.handle(3.5, Input::JobStarted { job: "b".into(), local: true, command: None });
    a.handle(3.5, Input::Bid { job: "b".into(), bid: bid("b", Some(1), 5) });
    epoch(&mut a, 4.0, true);
    let after = members_now(&a);
    assert_eq!(after["b"], vec!["w7".to_string()], "the new job gets the idle worker");
    for j in ["a", "m", "z"] {
        assert_eq!(after[j], before[j], "{j} keeps its workers");
    }
}

/// A parameter-server job's bid whose synchronisation costs `per_load` per worker a server
/// carries: the dearer, the more of its workers serve.
fn ps_bid(job: &str, per_load: f64) -> Bid {
    let mut p = JobPredictor::new(PredictorConfig::default());
    for i in 1..=5u64 {
        p.observe(i, 0.1 + 1.0 / i as f64).expect("a valid point");
        for w in 1..=6u32 {
            p.observe_time(w, 1.0 / f64::from(w));
        }
    }
    let gain = schedule::make_bid(&mut p, 60.0, 1.0, 0);
    let spec = JobSpec { max_workers: Some(6), parameter_server: true, ..JobSpec::new(job) };
    let mut model = job_model(&spec, &[], None);
    (model.perf.beta_n, model.perf.beta_l) = (per_load, per_load);
    Bid::new(&spec, Arc::new(model), &p, gain, 0)
}

/// The workers serving parameters, as the allocator records them.
fn servers(a: &Allocator) -> usize {
    a.registry.iter().filter(|(_, w)| w.role == Role::Ps).count()
}

#[test]
fn a_role_that_changes_while_every_worker_keeps_its_job_is_told() {
    let mut a = Allocator::new(settings(), false);
    for w in 1..=6 {
        a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
    }
    a.handle(0.0, Input::JobStarted { job: "p".into(), local: true, command: None });
    a.handle(0.0, Input::Bid { job: "p".into(), bid: ps_bid("p", 0.0) });
    epoch(&mut a, 1.0, true);
    assert!(assigns(&epoch(&mut a, 2.0, true)).is_empty(), "settled");
    assert_eq!((a.jobs["p"].workers.len(), servers(&a)), (6, 1), "cheap synchronisation: one server");
    // Dear synchronisation: more servers on the same six workers (no job or worker came or went).
    a.handle(2.5, Input::Bid { job: "p".into(), bid: ps_bid("p", 100.0) });
    let fx = epoch(&mut a, 3.0, true);
    assert_eq!(a.jobs["p"].workers.len(), 6);
    assert!(servers(&a) > 1, "{} servers", servers(&a));
    let told_ps = assigns(&fx).iter().filter(|m| m.role == Role::Ps).count();
    assert_eq!(told_ps, servers(&a), "every server is told its role");
}
