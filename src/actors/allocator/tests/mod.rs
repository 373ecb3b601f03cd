//! The allocator's rules on a fake clock: every `now_s` below is chosen, none is read. Each test
//! was seen failing with the rule it checks broken: `python3 benches/issue42_mutations.py`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::core::{Input, Restore};
use super::state::{Allocator, AllocatorSettings, Count, Effect};
use super::supervision::backoff_s;
use crate::actors::bid::{Bid, job_model};
use crate::actors::tenants::Tenants;
use crate::policy::PolicyKind;
use crate::protocol::{EndReason, JobCommand, JobSpec, Running, WorkerAssignment, WorkerSpec};
use crate::quality::{JobPredictor, PredictorConfig};
use crate::schedule::{self, PlaceSettings, Placer, PlanSettings, tenants::TenantSet};

mod gains;
mod layout;
mod remote;
mod reuse;
mod terms;

fn settings() -> AllocatorSettings {
    AllocatorSettings {
        epoch: Duration::from_secs(1),
        policy: PolicyKind::Slaq,
        plan: PlanSettings::default(),
        place: PlaceSettings { placer: Placer::Greedy, restart_s: 9.0, horizon_s: 60.0 },
        worker_timeout: Duration::from_secs(15),
        stale_job: None,
        term: Some(7),
        replica: None,
        stall_timeout: Some(Duration::from_secs(30)),
        min_generation: Duration::ZERO,
        save_wait_max: Duration::ZERO,
        rendezvous: (29_500, 1_000, Duration::from_secs(5)),
        restart_amortisation: 0.0,
        bid_horizon_s: 60.0,
        completion_weight: 0.05,
        tenants: Tenants::default(),
    }
}

fn worker(id: &str, kind: Option<&str>) -> WorkerSpec {
    WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: kind.map(str::to_string), advertise: None }
}

fn command(max_restarts: u32) -> JobCommand {
    JobCommand { argv: vec!["train".into()], env: BTreeMap::new(), cwd: None, checkpoint_dir: None, max_restarts }
}

/// A bid from `points` reports of a curve that falls fast, on workers that speed it up.
fn bid(job: &str, max_workers: Option<u32>, points: u64) -> Bid {
    let mut p = JobPredictor::new(PredictorConfig::default());
    for i in 1..=points {
        p.observe(i, 0.1 + 1.0 / i as f64).expect("a valid point");
        for w in 1..=4u32 {
            p.observe_time(w, 1.0 / f64::from(w));
        }
    }
    let gain = schedule::make_bid(&mut p, 60.0, 1.0, 0);
    let spec = JobSpec { max_workers, ..JobSpec::new(job) };
    Bid::new(&spec, Arc::new(job_model(&spec, &[], None)), &p, gain, 0)
}

fn assigns(fx: &[Effect]) -> Vec<&WorkerAssignment> {
    fx.iter().filter_map(|e| if let Effect::Assign(a) = e { Some(a) } else { None }).collect()
}

fn counts(fx: &[Effect]) -> Vec<Count> {
    fx.iter().filter_map(|e| if let Effect::Count(c) = e { Some(*c) } else { None }).collect()
}

fn forgotten(fx: &[Effect]) -> Vec<&str> {
    fx.iter().filter_map(|e| if let Effect::ForgetWorker(w) = e { Some(w.as_str()) } else { None }).collect()
}

fn epoch(a: &mut Allocator, now_s: f64, connected: bool) -> Vec<Effect> {
    let out = a.epoch(now_s, connected, &|| 0.0);
    a.record(out.summary);
    out.effects
}

/// An allocator with a submitted job `j` (its processes restarted up to `max_restarts` times)
/// restored onto worker `w`, its first epoch (the term's, which tells every worker) run at 1 s.
fn submitted_job_on_one_worker(max_restarts: u32) -> Allocator {
    let mut a = Allocator::new(settings(), true);
    a.handle(0.0, Input::JobStarted { job: "j".into(), local: true, command: Some(command(max_restarts)) });
    let restore = Restore {
        workers: vec![worker("w", None)],
        assignments: HashMap::from([("w".to_string(), "j".to_string())]),
        plans: HashMap::new(),
    };
    a.handle(0.0, Input::Restore(restore));
    epoch(&mut a, 1.0, true);
    a
}

/// What the agent on `w` says it runs: generation `generation` of `j`, exited with `exit`.
fn beat(generation: u64, exit: Option<i32>) -> Input {
    let running = Running { job: Some("j".into()), term: 7, epoch: 1, generation: Some(generation), exit, refused: 0 };
    Input::WorkerBeat { worker: "w".into(), running: Some(running) }
}

/// The generation `w` is told to run, if an epoch's effects tell it one.
fn told_generation(fx: &[Effect]) -> Option<u64> {
    assigns(fx).iter().find(|a| a.worker == "w").and_then(|a| a.launch.as_ref()).map(|l| l.generation)
}

#[test]
fn a_worker_silent_past_the_timeout_is_gone_and_one_just_inside_it_is_not() {
    let mut a = Allocator::new(settings(), true);
    a.handle(0.0, Input::WorkerHello(worker("w", None)));
    assert!(forgotten(&epoch(&mut a, 14.999, true)).is_empty(), "14.999 s of silence is inside 15 s");
    assert_eq!(a.snapshot(14.999, &Default::default()).num_workers, 1);
    assert_eq!(forgotten(&epoch(&mut a, 15.001, true)), ["w"], "15.001 s of silence is past 15 s");
    assert_eq!(a.snapshot(15.001, &Default::default()).num_workers, 0);
    // A heartbeat from it now is from an unknown worker: it is asked to say hello again, once.
    let fx = a.handle(16.0, Input::WorkerBeat { worker: "w".into(), running: None });
    assert_eq!(counts(&fx), [Count::BeatFromUnknownWorker]);
    assert!(assigns(&fx)[0].hello_again);
    assert!(assigns(&a.handle(17.0, Input::WorkerBeat { worker: "w".into(), running: None })).is_empty());
}

#[test]
fn a_heartbeat_restarts_a_worker_s_timeout() {
    let mut a = Allocator::new(settings(), true);
    a.handle(0.0, Input::WorkerHello(worker("w", None)));
    a.handle(10.0, Input::WorkerBeat { worker: "w".into(), running: None });
    assert!(forgotten(&epoch(&mut a, 24.999, true)).is_empty());
    assert_eq!(forgotten(&epoch(&mut a, 25.001, true)), ["w"]);
}

#[test]
fn no_worker_expires_during_an_outage_and_each_gets_the_full_timeout_after_it() {
    let mut a = Allocator::new(settings(), true);
    a.handle(0.0, Input::WorkerHello(worker("w", None)));
    epoch(&mut a, 1.0, true);
    for now_s in [20.0, 60.0, 600.0] {
        assert!(forgotten(&epoch(&mut a, now_s, false)).is_empty(), "NATS is down at {now_s} s");
    }
    // Back at 601 s: the timeout counts from then.
    assert!(forgotten(&epoch(&mut a, 601.0, true)).is_empty());
    assert!(forgotten(&epoch(&mut a, 615.999, true)).is_empty());
    assert_eq!(forgotten(&epoch(&mut a, 616.001, true)), ["w"]);
}

#[test]
fn restart_backoff_doubles_from_one_second_up_to_a_minute() {
    let expected = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0];
    assert_eq!((1..=8).map(backoff_s).collect::<Vec<_>>(), expected);
    // The same in the core: each failed generation restarts on its worker exactly a backoff
    // after the failure, in a new generation, and the failure after the last restart ends it.
    let mut a = submitted_job_on_one_worker(expected.len() as u32);
    let (mut now_s, mut generation) = (2.0, 0);
    for (restart, backoff) in expected.iter().enumerate() {
        let fx = a.handle(now_s, beat(generation, Some(1)));
        assert_eq!(counts(&fx), [Count::BeatAccepted, Count::JobRestarted], "restart {}", restart + 1);
        // The agent keeps beating (a minute's backoff outlasts the worker timeout).
        a.handle(now_s + backoff - 2e-3, beat(generation, None));
        assert_eq!(told_generation(&epoch(&mut a, now_s + backoff - 1e-3, true)), None, "restart {}", restart + 1);
        let told = told_generation(&epoch(&mut a, now_s + backoff, true));
        assert_eq!(told, Some(generation + 1), "restart {} after {backoff} s", restart + 1);
        (now_s, generation) = (now_s + backoff + 1.0, generation + 1);
    }
    // Its status lists each restarted generation (the page marks them on its curve).
    let restarted = &a.snapshot(now_s, &Default::default()).jobs[0].restarted;
    assert_eq!(restarted, &(1..=expected.len() as u64).collect::<Vec<_>>());
    let fx = a.handle(now_s, beat(generation, Some(1)));
    assert!(counts(&fx).contains(&Count::JobFailed));
    assert!(fx.iter().any(|e| matches!(e, Effect::EndJob { job, reason: EndReason::Failed } if job == "j")));
    // Ended once: another failure report asks for nothing more.
    assert!(!a.handle(now_s + 1.0, beat(generation, Some(1))).iter().any(|e| matches!(e, Effect::EndJob { .. })));
}

#[test]
fn a_generation_that_reports_nothing_for_the_stall_timeout_is_restarted_but_not_during_an_outage() {
    let mut a = submitted_job_on_one_worker(3);
    // Registered at 0 s with a 30 s stall timeout; its agent beats (it is alive, not progressing).
    for now_s in [10.0, 20.0, 29.0] {
        a.handle(now_s, beat(0, None));
    }
    assert!(!counts(&epoch(&mut a, 29.999, true)).contains(&Count::JobRestarted));
    a.handle(39.0, beat(0, None));
    assert!(!counts(&epoch(&mut a, 40.0, false)).contains(&Count::JobRestarted), "NATS is down");
    assert!(counts(&epoch(&mut a, 40.001, true)).contains(&Count::JobRestarted));
    // A report that makes progress counts the stall from then.
    let mut b = submitted_job_on_one_worker(3);
    b.handle(20.0, Input::Bid { job: "j".into(), bid: bid("j", None, 5) });
    for now_s in [10.0, 20.0, 30.0, 40.0, 49.0] {
        b.handle(now_s, beat(0, None));
    }
    assert!(!counts(&epoch(&mut b, 49.999, true)).contains(&Count::JobRestarted));
    assert!(counts(&epoch(&mut b, 50.001, true)).contains(&Count::JobRestarted));
}

#[test]
fn rank_zero_exiting_zero_ends_the_job_as_finished() {
    let mut a = submitted_job_on_one_worker(3);
    // A restored worker has no rank: its first generation here (after a failure) gives it one.
    a.handle(2.0, beat(0, Some(1)));
    assert_eq!(told_generation(&epoch(&mut a, 3.0, true)), Some(1));
    assert!(!a.handle(4.0, beat(1, Some(3))).iter().any(|e| matches!(e, Effect::EndJob { .. })));
    let fx = a.handle(5.0, beat(1, Some(0)));
    assert!(fx.iter().any(|e| matches!(e, Effect::EndJob { reason: EndReason::Finished, .. })), "{fx:?}");
}

#[test]
fn an_agent_running_another_job_is_told_again_only_two_seconds_after_its_assignment() {
    let mut a = submitted_job_on_one_worker(3);
    // Told at the term's first epoch, at 1 s; the agent says it runs nothing.
    let idle = |term| Input::WorkerBeat {
        worker: "w".into(),
        running: Some(Running { job: None, term, epoch: 0, generation: None, exit: None, refused: 0 }),
    };
    assert!(assigns(&a.handle(2.999, idle(7))).is_empty(), "the assignment may still be on its way");
    let fx = a.handle(3.001, idle(7));
    assert_eq!(assigns(&fx).iter().map(|m| m.job.as_deref()).collect::<Vec<_>>(), [Some("j")]);
    assert!(counts(&fx).contains(&Count::Mismatch));
    assert!(assigns(&a.handle(4.0, idle(7))).is_empty(), "told again at 3.001 s");
    assert!(assigns(&a.handle(10.0, idle(8))).is_empty(), "an agent on a newer term is a new leader's");
}

#[test]
fn a_new_term_tells_every_worker_once_and_then_only_what_changed() {
    let mut a = Allocator::new(settings(), true);
    a.handle(0.0, Input::JobStarted { job: "j".into(), local: true, command: None });
    let restore = Restore {
        workers: vec![worker("w1", None), worker("w2", None), worker("w3", None)],
        assignments: HashMap::from([("w1".to_string(), "j".to_string()), ("w2".to_string(), "j".to_string())]),
        plans: HashMap::new(),
    };
    let fx = a.handle(0.0, Input::Restore(restore));
    assert!(matches!(fx.as_slice(), [Effect::TellJob { workers: 2, .. }]), "{fx:?}");
    let first = epoch(&mut a, 1.0, true);
    let told: BTreeMap<&str, Option<&str>> =
        assigns(&first).iter().map(|m| (m.worker.as_str(), m.job.as_deref())).collect();
    assert_eq!(told, BTreeMap::from([("w1", Some("j")), ("w2", Some("j")), ("w3", None)]));
    assert!(assigns(&first).iter().all(|m| m.term == Some(7)));
    assert!(assigns(&epoch(&mut a, 2.0, true)).is_empty(), "nothing changed");
}

/// The workers each job is assigned in an epoch's effects.
fn members(fx: &[Effect]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in fx {
        if let Effect::Allocate(alloc) = e {
            out.insert(alloc.job.clone(), alloc.workers.clone());
        }
    }
    out
}

#[test]
fn a_tenant_is_held_to_its_quota_in_what_is_published() {
    let toml = r#"
        a = { guaranteed = 2, borrow_limit = 0 }
        b = { guaranteed = 2 }
    "#;
    let set = TenantSet::new(toml::from_str(toml).expect("tenants")).expect("valid tenants");
    let mut a = Allocator::new(AllocatorSettings { tenants: Tenants::new(Some(set)), ..settings() }, false);
    for w in 0..6 {
        a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
    }
    for job in ["a.x", "a.y", "a.z"] {
        a.handle(0.0, Input::JobStarted { job: job.into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: job.into(), bid: bid(job, None, 40) });
    }
    a.handle(0.0, Input::JobStarted { job: "b.x".into(), local: true, command: None });
    a.handle(0.0, Input::Bid { job: "b.x".into(), bid: bid("b.x", Some(1), 40) });
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for now_s in 1..=5 {
        held.extend(members(&epoch(&mut a, f64::from(now_s), true)));
        let of_a: usize = held.iter().filter(|(j, _)| j.starts_with("a.")).map(|(_, w)| w.len()).sum();
        assert!(of_a <= 2, "tenant a holds {of_a} workers at {now_s} s, past its quota of 2: {held:?}");
    }
    assert_eq!(held.get("b.x").map(Vec::len), Some(1));
    assert!(held.iter().filter(|(j, _)| j.starts_with("a.")).map(|(_, w)| w.len()).sum::<usize>() == 2);
}

#[test]
fn on_a_typed_cluster_each_job_runs_on_one_type() {
    let mut a = Allocator::new(settings(), false);
    for (w, kind) in [("w0", "v100"), ("w1", "k80"), ("w2", "v100"), ("w3", "k80"), ("w4", "k80")] {
        a.handle(0.0, Input::WorkerHello(worker(w, Some(kind))));
    }
    let kind_of = |w: &str| if ["w0", "w2"].contains(&w) { "v100" } else { "k80" };
    for job in ["x", "y"] {
        a.handle(0.0, Input::JobStarted { job: job.into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: job.into(), bid: bid(job, None, 40) });
    }
    let mut seen = 0;
    for now_s in 1..=5 {
        for e in epoch(&mut a, f64::from(now_s), true) {
            let Effect::Allocate(alloc) = e else { continue };
            let kinds: HashSet<&str> = alloc.workers.iter().map(|w| kind_of(w)).collect();
            assert!(kinds.len() <= 1, "job {} runs on {kinds:?}", alloc.job);
            assert_eq!(alloc.accelerator.as_deref(), kinds.iter().next().copied());
            seen += 1;
        }
    }
    assert!(seen >= 2, "both jobs were allocated workers");
}

/// An epoch after a heartbeat from each of workers w0..w3 (they stay alive past the timeout).
fn beating_epoch(a: &mut Allocator, now_s: f64) -> Vec<Effect> {
    for w in 0..4 {
        a.handle(now_s, Input::WorkerBeat { worker: format!("w{w}"), running: None });
    }
    epoch(a, now_s, true)
}

/// Issue #43: `min_run_s` live. Tenants a and b are guaranteed nothing, c is guaranteed 2.
/// a's job got all 4 workers while alone; b's job arrives: within a's `min_run_s` none of a's
/// workers moves to b (both above their guarantees), after it they are split; c's guarantee is
/// restored through the hold at once.
#[test]
fn a_job_keeps_what_it_got_for_its_tenants_min_run_s_unless_a_guarantee_needs_it() {
    let held_run = |min_run_s: f64| {
        let toml = format!(
            "a = {{ guaranteed = 0, min_run_s = {min_run_s} }}\nb = {{ guaranteed = 0 }}\nc = {{ guaranteed = 2 }}\n"
        );
        let set = TenantSet::new(toml::from_str(&toml).expect("tenants")).expect("valid tenants");
        let mut a = Allocator::new(AllocatorSettings { tenants: Tenants::new(Some(set)), ..settings() }, false);
        for w in 0..4 {
            a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
        }
        a.handle(0.0, Input::JobStarted { job: "a.x".into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: "a.x".into(), bid: bid("a.x", None, 40) });
        let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
        held.extend(members(&epoch(&mut a, 1.0, true)));
        assert_eq!(held.get("a.x").map(Vec::len), Some(4), "alone, a's job takes the cluster");
        a.handle(1.5, Input::JobStarted { job: "b.y".into(), local: true, command: None });
        a.handle(1.5, Input::Bid { job: "b.y".into(), bid: bid("b.y", None, 2) });
        for now_s in 2..=20 {
            held.extend(members(&beating_epoch(&mut a, f64::from(now_s))));
        }
        (a, held)
    };
    let (_, free) = held_run(0.0);
    assert!(free.get("b.y").is_some_and(|w| !w.is_empty()), "without a hold, b's job gets workers: {free:?}");
    let (mut a, held) = held_run(3600.0);
    assert_eq!(held.get("a.x").map(Vec::len), Some(4), "within min_run_s a keeps all four: {held:?}");
    assert!(held.get("b.y").is_none_or(Vec::is_empty), "{held:?}");
    // c's guarantee comes back through the hold.
    a.handle(20.5, Input::JobStarted { job: "c.z".into(), local: true, command: None });
    a.handle(20.5, Input::Bid { job: "c.z".into(), bid: bid("c.z", None, 40) });
    let mut after = held;
    after.extend(members(&beating_epoch(&mut a, 21.0)));
    assert_eq!(after.get("c.z").map(Vec::len), Some(2), "{after:?}");
    assert_eq!(after.get("a.x").map(Vec::len), Some(2), "{after:?}");
    // Past a's min_run_s (from its last change, at 21 s), b gets its share.
    for now_s in (0..400).map(|i| 30.0 + 10.0 * f64::from(i)) {
        let changed = members(&beating_epoch(&mut a, now_s));
        if now_s < 21.0 + 3600.0 {
            assert!(!changed.contains_key("a.x"), "a's job kept its two until {now_s} s: {changed:?}");
        }
        after.extend(changed);
    }
    assert!(after.get("b.y").is_some_and(|w| !w.is_empty()), "{after:?}");
}

/// Inside a tenant too: a job of the same tenant arriving does not take a held job's workers.
#[test]
fn a_held_job_keeps_its_workers_from_its_own_tenants_jobs() {
    let set = TenantSet::new(
        toml::from_str(
            "a = { guaranteed = 4, min_run_s = 600 }
",
        )
        .expect("tenants"),
    )
    .expect("valid tenants");
    let mut a = Allocator::new(AllocatorSettings { tenants: Tenants::new(Some(set)), ..settings() }, false);
    for w in 0..4 {
        a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
    }
    a.handle(0.0, Input::JobStarted { job: "a.x".into(), local: true, command: None });
    a.handle(0.0, Input::Bid { job: "a.x".into(), bid: bid("a.x", None, 40) });
    let mut held = members(&beating_epoch(&mut a, 1.0));
    assert_eq!(held.get("a.x").map(Vec::len), Some(4));
    a.handle(1.5, Input::JobStarted { job: "a.y".into(), local: true, command: None });
    a.handle(1.5, Input::Bid { job: "a.y".into(), bid: bid("a.y", None, 2) });
    for now_s in 2..=100 {
        held.extend(members(&beating_epoch(&mut a, f64::from(now_s))));
    }
    assert_eq!(held.get("a.x").map(Vec::len), Some(4), "{held:?}");
    for now_s in (0..80).map(|i| 110.0 + 10.0 * f64::from(i)) {
        held.extend(members(&beating_epoch(&mut a, now_s)));
    }
    assert!(held.get("a.y").is_some_and(|w| !w.is_empty()), "after min_run_s the other job gets some: {held:?}");
}

/// Issue #43: with no declared speeds and no job that has run on two types, a type nobody has
/// compared is tried: a job that measured one type moves to the other once (its workers free),
/// and the measurement there gives every job's prior a ratio.
#[test]
fn a_type_nobody_has_compared_is_tried_by_one_job() {
    let mut a = Allocator::new(settings(), false);
    for (w, kind) in [("w0", "a"), ("w1", "a"), ("w2", "b"), ("w3", "b")] {
        a.handle(0.0, Input::WorkerHello(worker(w, Some(kind))));
    }
    let kind_of = |w: &str| if ["w0", "w1"].contains(&w) { "a" } else { "b" };
    a.handle(0.0, Input::JobStarted { job: "x".into(), local: true, command: None });
    let mut kinds: Vec<&str> = Vec::new();
    for now_s in 1..=12u64 {
        a.handle(now_s as f64 - 0.5, Input::Bid { job: "x".into(), bid: bid("x", Some(2), 40 + now_s) });
        for w in ["w0", "w1", "w2", "w3"] {
            a.handle(now_s as f64, Input::WorkerBeat { worker: w.into(), running: None });
        }
        for e in epoch(&mut a, now_s as f64, true) {
            if let Effect::Allocate(alloc) = e
                && let Some(w) = alloc.workers.first()
            {
                kinds.push(kind_of(w));
            }
        }
    }
    let measured = &a.jobs["x"].speeds.measured.measured;
    assert!(measured.contains_key("a") && measured.contains_key("b"), "{measured:?}");
    assert!(kinds.contains(&"a") && kinds.contains(&"b"), "the job never tried the other type: {kinds:?}");
    assert!(kinds.len() <= 3, "one try, not a dance: {kinds:?}");
}

/// Issue #43, moves at checkpoints: a job that saves every 100 s (declared) and not at a stop
/// took the 4 workers while alone; a second job arriving takes none of them until the first
/// has saved (its reported checkpoint age falls), then gets its share at once. With tenants, a
/// guarantee waits for no save.
#[test]
fn a_job_between_saves_keeps_its_workers_until_it_saves_unless_a_guarantee_needs_them() {
    let saving_bid = |job: &str, age_s: f64| Bid {
        checkpoint_every_s: Some(100.0),
        checkpoint_age_s: Some(age_s),
        ..bid(job, None, 40)
    };
    let run = |save_wait_max: Duration, tenants: Option<&str>| {
        let tenants = tenants.map(|t| TenantSet::new(toml::from_str(t).expect("tenants")).expect("valid tenants"));
        let settings = AllocatorSettings { save_wait_max, tenants: Tenants::new(tenants), ..settings() };
        let mut a = Allocator::new(settings, false);
        for w in 0..4 {
            a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
        }
        a.handle(0.0, Input::JobStarted { job: "a.x".into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: "a.x".into(), bid: saving_bid("a.x", 0.0) });
        let mut held: BTreeMap<String, Vec<String>> = members(&epoch(&mut a, 1.0, true));
        assert_eq!(held.get("a.x").map(Vec::len), Some(4), "alone, a's job takes the cluster");
        a.handle(1.5, Input::JobStarted { job: "b.y".into(), local: true, command: None });
        a.handle(1.5, Input::Bid { job: "b.y".into(), bid: bid("b.y", None, 40) });
        let mut first_change = None;
        for now_s in 2..=150 {
            let now_s = f64::from(now_s);
            // a saves at 100 s: its reports' age is counted from its last save.
            let age = if now_s < 100.0 { now_s } else { now_s - 100.0 };
            a.handle(now_s, Input::Bid { job: "a.x".into(), bid: saving_bid("a.x", age) });
            let changed = members(&beating_epoch(&mut a, now_s));
            if changed.contains_key("b.y") && first_change.is_none() {
                first_change = Some(now_s);
            }
            held.extend(changed);
        }
        (first_change, held)
    };
    let (at, held) = run(Duration::from_secs(1800), None);
    assert_eq!(at, Some(100.0), "b's job gets workers right after a's save: {held:?}");
    assert!(held.get("b.y").is_some_and(|w| !w.is_empty()), "{held:?}");
    let (at, _) = run(Duration::ZERO, None);
    assert_eq!(at, Some(2.0), "save_wait_max 0: no wait");
    let (at, _) = run(Duration::from_secs(50), None);
    assert_eq!(at, Some(2.0), "saves further apart than save_wait_max: no wait");
    let (at, held) = run(Duration::from_secs(1800), Some("a = { guaranteed = 0 }\nb = { guaranteed = 2 }\n"));
    assert_eq!(at, Some(2.0), "b's guarantee waits for no save: {held:?}");
    assert!(held.get("b.y").is_some_and(|w| w.len() >= 2), "{held:?}");
}

/// Issue #43, priority classes: tenant a (max_priority 1, min_run_s an hour) and b, guaranteed 2
/// of 4 each. a's class-0 job holds a's 2 within its min_run_s; a's class-1 job arrives and
/// takes them at once (the hold yields to a higher class), b's job keeps its 2 (isolation). A
/// job asking for class 5 in b (max_priority 0) is class 0: it takes nothing from b's first.
#[test]
fn a_higher_class_is_served_first_inside_its_tenant_only() {
    let set = TenantSet::new(
        toml::from_str(
            "a = { guaranteed = 2, max_priority = 1, min_run_s = 3600 }\nb = { guaranteed = 2, min_run_s = 3600 }\n",
        )
        .expect("tenants"),
    )
    .expect("valid tenants");
    let mut a = Allocator::new(AllocatorSettings { tenants: Tenants::new(Some(set)), ..settings() }, false);
    for w in 0..4 {
        a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
    }
    let with_priority = |job: &str, priority: u8| Bid { priority, ..bid(job, None, 40) };
    for (job, p) in [("a.low", 0), ("b.first", 0)] {
        a.handle(0.0, Input::JobStarted { job: job.into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: job.into(), bid: with_priority(job, p) });
    }
    let mut held: BTreeMap<String, Vec<String>> = members(&epoch(&mut a, 1.0, true));
    assert_eq!((held.get("a.low").map(Vec::len), held.get("b.first").map(Vec::len)), (Some(2), Some(2)));
    for (job, p) in [("a.high", 1), ("b.pushy", 5)] {
        a.handle(1.5, Input::JobStarted { job: job.into(), local: true, command: None });
        a.handle(1.5, Input::Bid { job: job.into(), bid: with_priority(job, p) });
    }
    let out = a.epoch(2.0, true, &|| 0.0);
    held.extend(members(&out.effects));
    assert_eq!(held.get("a.high").map(Vec::len), Some(2), "a's class 1 first: {held:?}");
    assert!(held.get("a.low").is_none_or(Vec::is_empty), "{held:?}");
    assert_eq!(held.get("b.first").map(Vec::len), Some(2), "b untouched, its hold kept: {held:?}");
    assert!(held.get("b.pushy").is_none_or(Vec::is_empty), "capped to b's class 0: {held:?}");
    let classes = &out.summary.tenants["a"].classes;
    assert_eq!((classes["1"].workers, classes["0"].workers, classes["0"].waiting), (2, 0, 1), "{classes:?}");
    assert!(out.summary.tenants["b"].classes.is_empty(), "b's jobs are all class 0");
}

/// Issue #43, moves at checkpoints: a job between saves does not grow either. `x` (saving every
/// 100 s, declared) and `y` (at most 1 worker) share 3 workers; a fourth worker joins: x takes
/// it only right after its save.
#[test]
fn a_job_between_saves_grows_only_right_after_it_saves() {
    let mut a = Allocator::new(AllocatorSettings { save_wait_max: Duration::from_secs(1800), ..settings() }, false);
    for w in 0..3 {
        a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
    }
    let saving =
        |age_s: f64| Bid { checkpoint_every_s: Some(100.0), checkpoint_age_s: Some(age_s), ..bid("x", None, 40) };
    a.handle(0.0, Input::JobStarted { job: "x".into(), local: true, command: None });
    a.handle(0.0, Input::Bid { job: "x".into(), bid: saving(0.0) });
    a.handle(0.0, Input::JobStarted { job: "y".into(), local: true, command: None });
    a.handle(0.0, Input::Bid { job: "y".into(), bid: bid("y", Some(1), 40) });
    let mut held: BTreeMap<String, Vec<String>> = members(&epoch(&mut a, 1.0, true));
    assert_eq!((held.get("x").map(Vec::len), held.get("y").map(Vec::len)), (Some(2), Some(1)), "{held:?}");
    a.handle(1.5, Input::WorkerHello(worker("w3", None)));
    let mut grew_at = None;
    for now_s in 2..=150 {
        let now_s = f64::from(now_s);
        let age = if now_s < 100.0 { now_s } else { now_s - 100.0 };
        a.handle(now_s, Input::Bid { job: "x".into(), bid: saving(age) });
        a.handle(now_s, Input::WorkerBeat { worker: "w3".into(), running: None });
        held.extend(members(&beating_epoch(&mut a, now_s)));
        if held.get("x").is_some_and(|w| w.len() > 2) && grew_at.is_none() {
            grew_at = Some(now_s);
        }
    }
    assert_eq!(grew_at, Some(100.0), "x grows right after its save, not before: {held:?}");
}

/// Issue #43, `JobSpec.weight` live: inside a tenant's quota the policy shares in proportion to
/// the jobs' weights, each capped by the tenant's `max_weight`. a (max_weight 3): a.heavy asks
/// 10 (capped to 3) beside a.light (1): 3 and 1 of a's 4 (uncapped, 4 and 0; unweighted, 2 and
/// 2). b (max_weight 1, the default): b.pushy asks 3 and gets what b.plain gets.
#[test]
fn a_jobs_weight_shares_its_tenants_quota_capped_by_the_tenant() {
    let set = TenantSet::new(
        toml::from_str("a = { guaranteed = 4, max_weight = 3 }\nb = { guaranteed = 4 }\n").expect("tenants"),
    )
    .expect("valid tenants");
    let mut a = Allocator::new(
        AllocatorSettings { policy: PolicyKind::Fair, tenants: Tenants::new(Some(set)), ..settings() },
        false,
    );
    for w in 0..8 {
        a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
    }
    for (job, weight) in [("a.heavy", 10.0), ("a.light", 1.0), ("b.plain", 1.0), ("b.pushy", 3.0)] {
        a.handle(0.0, Input::JobStarted { job: job.into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: job.into(), bid: Bid { weight, ..bid(job, None, 40) } });
    }
    let held: BTreeMap<String, usize> =
        members(&epoch(&mut a, 1.0, true)).into_iter().map(|(j, w)| (j, w.len())).collect();
    let expected: BTreeMap<String, usize> = [("a.heavy", 3), ("a.light", 1), ("b.plain", 2), ("b.pushy", 2)]
        .into_iter()
        .map(|(j, n)| (j.into(), n))
        .collect();
    assert_eq!(held, expected);
}

/// Issue #43, tenants on a cluster of several worker types: a's job arrives while b's two jobs
/// hold all six workers (two v100s, four k80s); a takes back its guarantee of 3 through b's
/// `min_run_s`, every job on one type, b's taken workers told with a's grace.
#[test]
fn on_a_typed_cluster_a_tenant_takes_back_its_guarantee_and_each_job_keeps_one_type() {
    let toml = r#"
        a = { guaranteed = 3, grace_s = 5 }
        b = { guaranteed = 3, min_run_s = 3600 }
    "#;
    let set = TenantSet::new(toml::from_str(toml).expect("tenants")).expect("valid tenants");
    let mut a = Allocator::new(AllocatorSettings { tenants: Tenants::new(Some(set)), ..settings() }, false);
    let kinds = [("w0", "v100"), ("w1", "v100"), ("w2", "k80"), ("w3", "k80"), ("w4", "k80"), ("w5", "k80")];
    for (w, kind) in kinds {
        a.handle(0.0, Input::WorkerHello(worker(w, Some(kind))));
    }
    let kind_of = |w: &str| kinds.iter().find(|k| k.0 == w).map_or("?", |k| k.1);
    let start = |a: &mut Allocator, now_s: f64, job: &str| {
        a.handle(now_s, Input::JobStarted { job: job.into(), local: true, command: None });
        a.handle(now_s, Input::Bid { job: job.into(), bid: bid(job, None, 40) });
    };
    start(&mut a, 0.0, "b.x");
    start(&mut a, 0.0, "b.y");
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for now_s in 1..=2 {
        held.extend(members(&epoch(&mut a, f64::from(now_s), true)));
    }
    let of = |held: &BTreeMap<String, Vec<String>>, t: &str| -> usize {
        held.iter().filter(|(j, _)| j.starts_with(t)).map(|(_, w)| w.len()).sum()
    };
    assert_eq!(of(&held, "b."), 6, "b borrows a's idle guarantee: {held:?}");
    start(&mut a, 2.5, "a.z");
    let out = a.epoch(3.0, true, &|| 0.0);
    held.extend(members(&out.effects));
    assert_eq!((of(&held, "a."), of(&held, "b.")), (3, 3), "{held:?}");
    for (job, workers) in &held {
        let on: HashSet<&str> = workers.iter().map(|w| kind_of(w)).collect();
        assert!(on.len() <= 1, "{job} runs on {on:?}");
    }
    let taken: Vec<&WorkerAssignment> =
        assigns(&out.effects).into_iter().filter(|w| w.job.as_deref() == Some("a.z")).collect();
    assert_eq!(taken.len(), 3);
    assert!(taken.iter().all(|w| w.reclaim_grace_ms == Some(5_000)), "{taken:?}");
    let (ua, ub) = (&out.summary.tenants["a"], &out.summary.tenants["b"]);
    assert_eq!((ua.quota, ua.workers, ub.quota, ub.workers, ub.borrowed), (3, 3, 3, 3, 0));
}

/// Issue #43, saves asked for: b's job saves every 600 s, not at its stop, and says it saves
/// when asked; it holds all 4 workers when a (guaranteed 2, grace 10 s) starts a job. It is
/// asked to save (its allocation again, `save` set) and keeps its workers until its reports
/// show the save; then a gets its 2 with the full grace. A job that never answers gives them
/// up once its grace, less an epoch, has passed, its processes getting what is left; a job
/// that did not say it saves when asked gives them up at once, as before.
#[test]
fn a_job_that_saves_when_asked_is_asked_before_a_reclaim_and_moves_after_its_save() {
    let toml = "a = { guaranteed = 2, grace_s = 10 }\nb = { guaranteed = 2, grace_s = 10 }\n";
    let bid_of = |asks: bool, age_s: f64| Bid {
        checkpoint_every_s: Some(600.0),
        checkpoint_age_s: Some(age_s),
        save_on_request: asks,
        ..bid("b.x", None, 40)
    };
    // Runs until a's job has its workers; `saves_at`: when b's job saves after being asked.
    let run = |asks: bool, saves_at: Option<f64>| {
        let set = TenantSet::new(toml::from_str(toml).expect("tenants")).expect("valid tenants");
        let mut a = Allocator::new(AllocatorSettings { tenants: Tenants::new(Some(set)), ..settings() }, false);
        for w in 0..4 {
            a.handle(0.0, Input::WorkerHello(worker(&format!("w{w}"), None)));
        }
        a.handle(0.0, Input::JobStarted { job: "b.x".into(), local: true, command: None });
        a.handle(0.0, Input::Bid { job: "b.x".into(), bid: bid_of(asks, 0.0) });
        assert_eq!(members(&epoch(&mut a, 1.0, true)).get("b.x").map(Vec::len), Some(4));
        for now_s in 2..=9 {
            a.handle(f64::from(now_s), Input::Bid { job: "b.x".into(), bid: bid_of(asks, f64::from(now_s)) });
            beating_epoch(&mut a, f64::from(now_s));
        }
        a.handle(9.5, Input::JobStarted { job: "a.z".into(), local: true, command: None });
        a.handle(9.5, Input::Bid { job: "a.z".into(), bid: bid("a.z", None, 40) });
        let (mut asked_at, mut moved) = (Vec::new(), None);
        for now_s in 10..=40 {
            let now_s = f64::from(now_s);
            let age = match saves_at {
                Some(at) if now_s >= at => now_s - at,
                _ => now_s,
            };
            a.handle(now_s, Input::Bid { job: "b.x".into(), bid: bid_of(asks, age) });
            let fx = beating_epoch(&mut a, now_s);
            for e in &fx {
                if let Effect::Allocate(alloc) = e
                    && alloc.save
                {
                    assert_eq!((alloc.job.as_str(), alloc.workers.len()), ("b.x", 4), "asked with its workers");
                    asked_at.push(now_s);
                }
            }
            let to_a: Vec<&WorkerAssignment> =
                assigns(&fx).into_iter().filter(|w| w.job.as_deref() == Some("a.z")).collect();
            if !to_a.is_empty() {
                assert_eq!(to_a.len(), 2, "a's guarantee");
                moved = Some((now_s, to_a[0].reclaim_grace_ms));
                break;
            }
        }
        (asked_at, moved)
    };
    let (asked, moved) = run(true, Some(12.0));
    assert_eq!(asked, vec![10.0], "asked once, when the reclaim was planned");
    assert_eq!(moved, Some((12.0, Some(10_000))), "moved once its save shows, with the full grace");
    let (asked, moved) = run(true, None);
    assert_eq!(asked, vec![10.0]);
    assert_eq!(moved, Some((19.0, Some(1_000))), "no save: moved at the grace less an epoch, with the rest");
    let (asked, moved) = run(false, None);
    assert!(asked.is_empty());
    assert_eq!(moved, Some((10.0, Some(10_000))), "not asked: moved at once");
}
