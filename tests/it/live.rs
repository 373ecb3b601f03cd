//! The live scheduler over a real nats-server: jobs and workers are plain NATS clients.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use slaq::bus;
use slaq::protocol::{
    self, Ack, Encoding, EndReason, Heartbeat, JobAllocation, JobEnd, JobSpec, LossReport, Subjects, WorkerAssignment,
    WorkerSpec,
};

use crate::harness::{
    Background, InProcessScheduler, NatsServer, Scheduler, client, eventually, fast_settings, wait_status,
};

const WAIT: Duration = Duration::from_secs(20);

fn subjects() -> Subjects {
    Subjects::new("slaq").unwrap()
}

async fn hello_worker(c: &async_nats::Client, id: &str) {
    let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None };
    let ack: Ack =
        bus::request(c, subjects().worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
}

async fn beat(c: &async_nats::Client, id: &str) {
    let hb = Heartbeat::new(id);
    bus::publish(c, subjects().worker_beat(id), Encoding::MsgPack, &hb).await.unwrap();
}

async fn report(c: &async_nats::Client, job: &str, iter: u64, loss: f64, workers: u32) {
    let r = LossReport { loss, iter_seconds: 0.5, workers, ..crate::harness::loss_report(job, iter) };
    bus::publish(c, subjects().job_loss(job), Encoding::MsgPack, &r).await.unwrap();
}

/// Keeps `workers` alive with heartbeats until dropped.
pub fn keep_alive(c: async_nats::Client, workers: Vec<String>) -> Background {
    Background::spawn(async move {
        loop {
            for w in &workers {
                beat(&c, w).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

#[tokio::test]
async fn jobs_register_reports_flow_and_workers_follow_assignments() {
    let nats = NatsServer::start();
    let scheduler = Scheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;

    let mut assignments = c.subscribe("slaq.v1.worker.*.assign").await.unwrap();
    let mut allocs = c.subscribe("slaq.v1.job.*.alloc").await.unwrap();
    let workers: Vec<String> = (0..6).map(|i| format!("w{i}")).collect();
    for w in &workers {
        hello_worker(&c, w).await;
    }
    let beats = keep_alive(c.clone(), workers.clone());
    for job in ["fast", "slow"] {
        let ack: Ack =
            bus::request(&c, s.job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
                .await
                .unwrap();
        assert!(ack.ok);
    }
    // "fast" still improves; "slow" dropped early and has been flat since.
    for k in 1..=30u64 {
        report(&c, "fast", k, 1.0 / k as f64, 1).await;
        report(&c, "slow", k, 0.5 + 0.5 * 0.3f64.powi(k.min(6) as i32), 1).await;
    }
    let status = eventually(&c, &s, WAIT, "both jobs have all their points and the cluster is in use", |st| {
        st.jobs.len() == 2 && st.jobs.iter().all(|j| j.points == 30) && st.workers.iter().all(|w| w.job.is_some())
    })
    .await;
    let fast = status.jobs.iter().find(|j| j.job == "fast").unwrap();
    let slow = status.jobs.iter().find(|j| j.job == "slow").unwrap();
    assert!(fast.workers > slow.workers, "the improving job gets more workers: {status:#?}");
    assert_eq!(status.accepted.get("loss"), Some(&60));

    // Every worker heard its assignment, and each job its allocation.
    let mut heard: HashMap<String, Option<String>> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while heard.len() < workers.len() {
        let msg = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), assignments.next())
            .await
            .expect("assignments")
            .unwrap();
        let a: WorkerAssignment = protocol::decode(Encoding::MsgPack, &msg.payload, "assignment").unwrap();
        assert_eq!(msg.subject.as_str(), s.worker_assign(&a.worker));
        heard.insert(a.worker.clone(), a.job);
    }
    let msg = tokio::time::timeout(WAIT, allocs.next()).await.unwrap().unwrap();
    let alloc: JobAllocation = protocol::decode(Encoding::MsgPack, &msg.payload, "alloc").unwrap();
    assert!(!alloc.workers.is_empty());

    // A finished job frees its workers for the other.
    bus::publish(&c, s.job_bye("fast"), Encoding::MsgPack, &JobEnd { job: "fast".into(), reason: EndReason::Finished })
        .await
        .unwrap();
    eventually(&c, &s, WAIT, "the remaining job gets the freed workers", |st| {
        st.jobs.len() == 1 && st.workers.iter().all(|w| w.job.as_deref() == Some("slow"))
    })
    .await;
    drop(beats);
    assert!(scheduler.terminate().success(), "slaq serve exits cleanly on SIGTERM");
}

/// A worker that goes silent keeps its job no longer than its timeout: dropped, and its job
/// moved to a live worker, within `worker_timeout_ms` (4 s) + a beat (0.2 s) + two epochs
/// (0.2 s) + 1.5 s for a loaded machine. A scheduler that dropped it at twice its timeout
/// (issue #40) fails here.
#[tokio::test]
async fn a_dead_workers_job_gets_another_worker() {
    let nats = NatsServer::start();
    let timeout = Duration::from_secs(4);
    let settings = fast_settings("").replace("worker_timeout_ms = 1500", "worker_timeout_ms = 4000");
    let _scheduler = InProcessScheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;
    // One job that can use one worker; two workers.
    let spec = JobSpec { max_workers: Some(1), ..JobSpec::new("j") };
    let _: Ack = bus::request(&c, s.job_hello("j"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    for w in ["a", "b"] {
        hello_worker(&c, w).await;
    }
    let beat_a = keep_alive(c.clone(), vec!["a".into()]);
    let beat_b = keep_alive(c.clone(), vec!["b".into()]);
    for k in 1..=10 {
        report(&c, "j", k, 1.0 / k as f64, 1).await;
    }
    let st = eventually(&c, &s, WAIT, "the job holds a worker", |st| st.workers.iter().any(|w| w.job.is_some())).await;
    let holder = st.workers.iter().find(|w| w.job.is_some()).unwrap().worker.clone();
    // The holder dies (its last beat was at most one beat interval ago).
    if holder == "a" {
        drop(beat_a);
    } else {
        drop(beat_b);
    }
    let died = std::time::Instant::now();
    let other = if holder == "a" { "b" } else { "a" };
    eventually(&c, &s, WAIT, "the job moves to the live worker", |st| {
        st.workers.len() == 1 && st.workers[0].worker == other && st.workers[0].job.as_deref() == Some("j")
    })
    .await;
    let took = died.elapsed();
    let bound = timeout + Duration::from_millis(200 + 200 + 1500);
    eprintln!("a silent worker's job moved {took:?} after its last beats (timeout {timeout:?}, bound {bound:?})");
    assert!(took >= timeout - Duration::from_millis(200), "dropped before its timeout: {took:?}");
    assert!(took <= bound, "a silent worker kept its job {took:?}, past {bound:?}");
}

#[tokio::test]
async fn malformed_messages_are_counted_and_dropped_while_good_traffic_goes_on() {
    let nats = NatsServer::start();
    let scheduler = Scheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;

    c.publish(s.job_loss("j"), "\u{1}garbage".into()).await.unwrap();
    c.publish(s.job_loss("j"), bytes::Bytes::new()).await.unwrap();
    // NaN and negative time (MessagePack carries NaN).
    let nan = LossReport::new("j", 1, f64::NAN, 0.1, 1);
    bus::publish(&c, s.job_loss("j"), Encoding::MsgPack, &nan).await.unwrap();
    let negative = LossReport { loss: 1.0, iter_seconds: -3.0, ..nan.clone() };
    bus::publish(&c, s.job_loss("j"), Encoding::MsgPack, &negative).await.unwrap();
    // The payload names another job than the subject.
    let other = LossReport { job: "k".into(), loss: 1.0, ..nan.clone() };
    bus::publish(&c, s.job_loss("j"), Encoding::MsgPack, &other).await.unwrap();
    // An id that is too long, and a subject outside the contract.
    let long = "x".repeat(65);
    c.publish(format!("slaq.v1.job.{long}.loss"), "{}".into()).await.unwrap();
    // A hello with a broken spec gets an error Ack.
    let bad = JobSpec { weight: -1.0, ..JobSpec::new("j") };
    let ack: Ack = bus::request(&c, s.job_hello("j"), Encoding::MsgPack, &bad, Duration::from_secs(5)).await.unwrap();
    assert!(!ack.ok && ack.error.is_some(), "{ack:?}");
    // Duplicates are counted by the job, not as new points.
    for k in [1u64, 2, 2, 3] {
        report(&c, "j", k, 1.0 / k as f64, 1).await;
    }
    let st = eventually(&c, &s, WAIT, "good reports land after the bad ones", |st| {
        st.jobs.iter().any(|j| j.job == "j" && j.points == 3)
    })
    .await;
    let rejected = |cause: &str| st.rejected.get(cause).copied().unwrap_or(0);
    assert_eq!(rejected("undecodable"), 2, "{:?}", st.rejected);
    assert_eq!(rejected("non_finite_loss"), 1);
    assert_eq!(rejected("negative_time"), 1);
    assert_eq!(rejected("id_mismatch"), 1);
    assert_eq!(rejected("invalid_id"), 1);
    assert_eq!(rejected("invalid_spec"), 1);
    // The repeated iteration 2 is refused by the job and shows in status.
    let st =
        eventually(&c, &s, WAIT, "the duplicate shows in status", |st| st.rejected.get("duplicate") == Some(&1)).await;
    assert_eq!(st.rejected.get("duplicate"), Some(&1));
    assert_eq!(st.accepted.get("loss"), Some(&3), "a duplicate is not also counted as accepted");
    // Regression: one report with `iter = 2^64 − 1` froze a job (every later one looked old).
    report(&c, "j", u64::MAX, 0.1, 1).await;
    report(&c, "j", 4, 0.25, 1).await;
    let st = eventually(&c, &s, WAIT, "the leap is refused and the job goes on", |st| {
        st.jobs.iter().any(|j| j.job == "j" && j.points == 4)
    })
    .await;
    assert_eq!(st.rejected.get("bad_iteration"), Some(&1), "{:?}", st.rejected);
    // Logged once per cause.
    let log = scheduler.log_text();
    assert_eq!(log.matches("cause=\"undecodable\"").count() + log.matches("cause=undecodable").count(), 1, "{log}");
}

#[tokio::test]
async fn json_and_msgpack_both_work_and_replies_use_the_request_encoding() {
    let nats = NatsServer::start();
    let _scheduler = InProcessScheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;
    // A job speaking JSON by hand.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    let reply = c
        .request_with_headers(
            s.job_hello("js"),
            headers.clone(),
            r#"{"job":"js","family":"logreg","future_field":1}"#.into(),
        )
        .await
        .unwrap();
    let ack: Ack = serde_json::from_slice(&reply.payload).expect("a JSON reply to a JSON request");
    assert!(ack.ok);
    for k in 1..=5 {
        let body = format!(r#"{{"job":"js","iter":{k},"loss":{},"iter_seconds":0.2,"workers":1}}"#, 1.0 / k as f64);
        c.publish_with_headers(s.job_loss("js"), headers.clone(), body.into()).await.unwrap();
    }
    // And one in MessagePack.
    report(&c, "mp", 1, 2.0, 0).await;
    let st = eventually(&c, &s, WAIT, "both encodings land", |st| {
        st.jobs.iter().any(|j| j.job == "js" && j.points == 5) && st.jobs.iter().any(|j| j.job == "mp" && j.points == 1)
    })
    .await;
    assert!(st.rejected.is_empty(), "{:?}", st.rejected);
    let json_status: serde_json::Value =
        serde_json::from_slice(&c.request_with_headers(s.ctl_status(), headers, "{}".into()).await.unwrap().payload)
            .unwrap();
    assert!(json_status["jobs"].is_array());
}

#[tokio::test]
async fn the_scheduler_rides_out_a_nats_restart() {
    let mut nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;
    report(&c, "j", 1, 1.0, 0).await;
    eventually(&c, &s, WAIT, "first report", |st| st.jobs.iter().any(|j| j.points == 1)).await;
    nats.restart();
    // Both clients reconnect (async-nats retries), the scheduler re-subscribes, and state survives
    // in the scheduler's memory.
    let deadline = Instant::now() + WAIT;
    loop {
        report(&c, "j", 2, 0.5, 0).await;
        let st = wait_status(&c, &s).await;
        if st.jobs.iter().any(|j| j.job == "j" && j.points == 2) {
            break;
        }
        assert!(Instant::now() < deadline, "no report landed after the restart: {st:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_reference_worker_agent_follows_its_assignment_and_runs_the_command() {
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;
    let dir = crate::harness::temp_dir("worker");
    let out = dir.join("jobs.txt");
    let mut worker = std::process::Command::new(env!("CARGO_BIN_EXE_slaq"))
        .args(["worker", "--id", "agent-1", "--nats", &nats.url, "--beat-ms", "200", "--exec"])
        .arg(format!("echo \"$SLAQ_JOB $SLAQ_WORKER\" >> {}", out.display()))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("slaq worker starts");
    eventually(&c, &s, WAIT, "the agent registers", |st| st.workers.iter().any(|w| w.worker == "agent-1")).await;
    for k in 1..=10 {
        report(&c, "train", k, 1.0 / k as f64, 1).await;
    }
    crate::harness::wait_for_file(&out, "the --exec command runs with the job", |text| {
        text.lines().any(|l| l == "train agent-1")
    })
    .await;
    // Heartbeats keep it alive past the worker timeout (1.5 s here).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = wait_status(&c, &s).await;
    assert!(st.workers.iter().any(|w| w.worker == "agent-1" && w.job.as_deref() == Some("train")), "{st:#?}");
    let _ = worker.kill();
    let _ = worker.wait();
}

/// Says hello for each job and sends its losses, all before the scheduler's first epoch, then
/// waits until it has run `epochs` epochs.
async fn feed_then_run(
    c: &async_nats::Client,
    scheduler: &InProcessScheduler,
    jobs: &[(JobSpec, &[f64])],
    epochs: u64,
) {
    let s = subjects();
    for (spec, losses) in jobs {
        let ack: Ack =
            bus::request(c, s.job_hello(&spec.job), Encoding::MsgPack, spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok, "{ack:?}");
        for (i, &loss) in losses.iter().enumerate() {
            report(c, &spec.job, i as u64 + 1, loss, 1).await;
        }
    }
    let status = wait_status(c, &s).await;
    assert_eq!(status.epoch, 0, "the reports must be in before the first epoch (2 s): {status:#?}");
    let deadline = tokio::time::Instant::now() + WAIT;
    while scheduler.handle.epochs().await.len() < epochs as usize {
        assert!(tokio::time::Instant::now() < deadline, "the scheduler ran no {epochs} epochs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The predictor the scheduler builds from `losses` reported at iterations 1, 2, ... by one
/// worker taking 0.5 s each (as `report` sends them).
fn fed_predictor(losses: &[f64]) -> slaq::quality::JobPredictor {
    let mut p = slaq::quality::JobPredictor::new(slaq::quality::PredictorConfig::default());
    for (i, &loss) in losses.iter().enumerate() {
        p.observe(i as u64 + 1, loss).unwrap();
        p.observe_time(1, 0.5);
    }
    p
}

/// Live equals planned: the same reports, fed to `slaq serve` over NATS and to the pure planner
/// the simulator calls (`schedule::make_bid` then `schedule::plan`), give the same allocation,
/// epoch after epoch. The planner is replayed with what the allocator carries between epochs:
/// each job bids at the workers it was given, its attained service grows, and the floor ledgers
/// go on.
#[tokio::test]
async fn the_live_scheduler_takes_the_planner_s_decisions() {
    use slaq::policy::{JobBid, PolicyKind};
    use slaq::quality::JobPredictor;
    use slaq::schedule::{self, FloorLedger, PlanSettings};

    const EPOCH_S: f64 = 2.0;
    const EPOCHS: u64 = 4;
    let nats = NatsServer::start();
    // A floor of 0.75 over a short window makes the floor's share alternate between epochs, so
    // the ledgers the allocator carries decide what each epoch gives.
    let scheduler = InProcessScheduler::start(
        &nats.url,
        "[scheduler]\nepoch_ms = 2000\nrefit_interval_ms = 20\nfloor = 0.75\nfloor_window = 4\nmax_slowdown = 0.0\ncompletion_weight = 0.0\n",
    );
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;
    let mut allocs = c.subscribe("slaq.v1.job.*.alloc").await.unwrap();
    let workers: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    for w in &workers {
        hello_worker(&c, w).await;
    }
    let beats = keep_alive(c.clone(), workers.clone());
    // Five jobs at different stages of different curves.
    let curves: Vec<(String, Vec<f64>)> = vec![
        ("a-steep".into(), (1..=12).map(|k| 0.1 + 2.0 * 0.7f64.powi(k)).collect()),
        ("b-sublinear".into(), (1..=20).map(|k| 1.0 / (k as f64).sqrt()).collect()),
        ("c-flat".into(), (1..=40).map(|k| 0.5 + 0.5 * 0.3f64.powi(k.min(5))).collect()),
        ("d-fresh".into(), vec![3.0, 2.5]),
        ("e-noisy".into(), (1..=30).map(|k| 0.3 + 1.0 / k as f64 + if k % 2 == 0 { 0.02 } else { -0.02 }).collect()),
    ];
    let jobs: Vec<(JobSpec, &[f64])> = curves.iter().map(|(job, l)| (JobSpec::new(job), l.as_slice())).collect();
    feed_then_run(&c, &scheduler, &jobs, EPOCHS).await;
    drop(beats);

    // The live allocation after each epoch: an epoch publishes only the jobs whose workers
    // changed, so each epoch's messages update the allocation before it.
    let mut by_epoch: Vec<Vec<(String, u32)>> = vec![Vec::new(); EPOCHS as usize];
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), allocs.next()).await {
        let a: JobAllocation = protocol::decode(Encoding::MsgPack, &msg.payload, "alloc").unwrap();
        if (1..=EPOCHS).contains(&a.epoch) {
            by_epoch[a.epoch as usize - 1].push((a.job, a.workers.len() as u32));
        }
    }
    let mut current: HashMap<String, u32> = HashMap::new();
    let live: Vec<HashMap<String, u32>> = by_epoch
        .into_iter()
        .map(|changes| {
            current.extend(changes);
            current.clone()
        })
        .collect();
    assert_eq!(live.len(), EPOCHS as usize, "epochs seen: {live:?}");

    // The same reports through the planner, in the allocator's job order (by id), with what the
    // allocator carries from one epoch to the next.
    let mut predictors: Vec<JobPredictor> = curves.iter().map(|(_, losses)| fed_predictor(losses)).collect();
    let mut ledgers = vec![FloorLedger::default(); curves.len()];
    let mut held = vec![0u32; curves.len()];
    let mut attained = vec![0.0; curves.len()];
    let mut quality_decided = false;
    for (e, live) in live.iter().enumerate() {
        let gains: Vec<_> =
            predictors.iter_mut().zip(&held).map(|(p, &w)| schedule::make_bid(p, 60.0, EPOCH_S, w)).collect();
        let bids: Vec<JobBid<_>> = gains
            .iter()
            .zip(&attained)
            .map(|(g, &service)| JobBid {
                attained_service: service,
                ..JobBid::new(g.as_ref().map(slaq::policy::ByRef))
            })
            .collect();
        let settings = PlanSettings { floor: 0.75, floor_window: 4, max_slowdown: 0.0 };
        let planned = schedule::plan(PolicyKind::Slaq, &settings, 10, &bids, &[], &mut ledgers);
        let want: HashMap<String, u32> =
            curves.iter().zip(&planned.workers).filter(|(_, w)| **w > 0).map(|((id, _), &w)| (id.clone(), w)).collect();
        let got: HashMap<String, u32> = live.iter().filter(|(_, w)| **w > 0).map(|(j, &w)| (j.clone(), w)).collect();
        assert_eq!(got, want, "epoch {}: live allocation vs the planner's", e + 1);
        // Quality, not only the floor, decided something: not everyone got the even split.
        quality_decided |= planned.workers.iter().any(|&w| w != 2);
        for (j, &w) in planned.workers.iter().enumerate() {
            attained[j] += EPOCH_S * f64::from(w);
            held[j] = w;
        }
    }
    assert!(quality_decided, "every epoch was the even split: the comparison proves little");
}

/// Live equals simulated: the same workload (24 jobs replaying the vendored curves on 16
/// workers), played over NATS against `slaq serve` by `slaq emulate`, ends with the metrics
/// `sim::curves::engine` gives on it, under slaq and under fair. The two policies' simulated runs must
/// differ by far more than the tolerance, so a live scheduler that ran the other policy, or
/// bid or floored differently from the simulator, fails.
#[test]
fn a_live_run_ends_with_the_simulator_s_figures() {
    const TOLERANCE_PCT: f64 = 10.0;
    let nats = NatsServer::start();
    let run = |policy: &'static str| {
        let url = nats.url.clone();
        std::thread::spawn(move || {
            let prefix = format!("emu-{policy}");
            let scheduler = Scheduler::start(
                &url,
                &format!(
                    "[nats]\nprefix = \"{prefix}\"\n\n[scheduler]\npolicy = \"{policy}\"\nepoch_ms = 100\nrefit_interval_ms = 20\nhorizon_s = 1.2\n"
                ),
            );
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_slaq"))
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .args(["emulate", "--nats", &url, "--prefix", &prefix, "--policy", policy])
                .args(["--jobs", "24", "--workers", "16", "--speed", "50", "--epoch-ms", "100", "--duration", "240"])
                .arg("--json")
                .env("RUST_LOG", "slaq=warn")
                .output()
                .expect("slaq emulate runs");
            assert!(out.status.success(), "emulate failed: {}", String::from_utf8_lossy(&out.stderr));
            drop(scheduler);
            serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("emulate --json")
        })
    };
    let slaq_run = run("slaq").join().unwrap();
    let fair_run = run("fair").join().unwrap();
    let figure = |r: &serde_json::Value, side: &str, key: &str| r[side][key].as_f64().unwrap_or(f64::NAN);
    for r in [&slaq_run, &fair_run] {
        assert_eq!(figure(r, "live", "jobs_unfinished"), 0.0, "every job finishes live: {r:#}");
        for key in ["mean_loss_area", "mean_jct_s"] {
            let (live, sim) = (figure(r, "live", key), figure(r, "simulated", key));
            let diff = 100.0 * (live - sim) / sim;
            eprintln!("{} {key}: live {live:.2}, simulated {sim:.2} ({diff:+.1}%)", r["policy"]);
            assert!(
                diff.abs() < TOLERANCE_PCT,
                "{} {key}: live {live:.2} vs simulated {sim:.2} ({diff:+.1}%)",
                r["policy"]
            );
        }
    }
    let (slaq_area, fair_area) =
        (figure(&slaq_run, "simulated", "mean_loss_area"), figure(&fair_run, "simulated", "mean_loss_area"));
    assert!(
        (fair_area - slaq_area).abs() > 2.0 * TOLERANCE_PCT / 100.0 * slaq_area,
        "the policies must differ by more than the tolerance for the check to tell them apart: {slaq_area} vs {fair_area}"
    );
}

/// Live equals planned, for the whole epoch: on workers that share machines, with a job that
/// declares batch sizes and a parameter-server job, `slaq serve` over NATS assigns every worker
/// to the job and role, and every job to the batch, that `schedule::plan_epoch` (the function the
/// simulators call) decides on the same reports, epoch after epoch.
#[tokio::test]
async fn the_live_scheduler_places_and_batches_as_the_planner_does() {
    use slaq::policy::JobBid;
    use slaq::protocol::{Role, WorkerAssignment};
    use slaq::quality::JobPredictor;
    use slaq::schedule::{self, EpochInput, EpochJob, FloorLedger};

    const EPOCHS: u64 = 4;
    let config_text = "[scheduler]\nepoch_ms = 2000\nrefit_interval_ms = 20\nfloor = 0.75\nfloor_window = 4\nmax_slowdown = 0.0\ncompletion_weight = 0.0\n";
    let config: slaq::service::ServeConfig = toml::from_str::<slaq::service::RawConfig>(config_text)
        .unwrap()
        .resolve(&Default::default(), &Default::default())
        .unwrap();
    let epoch_s = config.epoch.as_secs_f64();
    let nats = NatsServer::start();
    let scheduler = InProcessScheduler::start(&nats.url, config_text);
    let c = client(&nats.url).await;
    let s = subjects();
    wait_status(&c, &s).await;
    let mut assigns = c.subscribe("slaq.v1.worker.*.assign").await.unwrap();
    let mut allocs = c.subscribe("slaq.v1.job.*.alloc").await.unwrap();
    // Three machines of four slots (one worker per slot), in id order as the registry keeps them.
    let workers: Vec<String> = (0..12).map(|i| format!("w{i:02}")).collect();
    let machine_of: Vec<usize> = (0..12).map(|i| i / 4).collect();
    for (w, &m) in workers.iter().zip(&machine_of) {
        let spec =
            WorkerSpec { worker: w.clone(), machine: Some(format!("m{m}")), slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(&c, s.worker_hello(w), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok, "{ack:?}");
    }
    let beats = keep_alive(c.clone(), workers.clone());
    let batched = JobSpec { batch_sizes: Some(vec![32, 64, 128, 256, 512]), ..JobSpec::new("a-batched") };
    let ps = JobSpec { parameter_server: true, ..JobSpec::new("b-ps") };
    let specs = [batched, ps, JobSpec::new("c-plain"), JobSpec::new("d-fresh")];
    let curves: Vec<Vec<f64>> = vec![
        (1..=12).map(|k| 0.1 + 2.0 * 0.7f64.powi(k)).collect(),
        (1..=20).map(|k| 1.0 / (k as f64).sqrt()).collect(),
        (1..=40).map(|k| 0.5 + 0.5 * 0.3f64.powi(k.min(5))).collect(),
        vec![3.0, 2.5],
    ];
    let jobs: Vec<(JobSpec, &[f64])> = specs.iter().cloned().zip(curves.iter().map(Vec::as_slice)).collect();
    feed_then_run(&c, &scheduler, &jobs, EPOCHS).await;
    drop(beats);

    // What the scheduler published, epoch by epoch: each worker's job and role, each job's batch.
    type Layout = (Vec<(Option<String>, Role)>, HashMap<String, Option<u32>>);
    let mut told: Vec<Vec<WorkerAssignment>> = vec![Vec::new(); EPOCHS as usize];
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), assigns.next()).await {
        let a: WorkerAssignment = protocol::decode(Encoding::MsgPack, &msg.payload, "assign").unwrap();
        if (1..=EPOCHS).contains(&a.epoch) && !a.hello_again {
            told[a.epoch as usize - 1].push(a);
        }
    }
    let mut batches_told: Vec<Vec<JobAllocation>> = vec![Vec::new(); EPOCHS as usize];
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), allocs.next()).await {
        let a: JobAllocation = protocol::decode(Encoding::MsgPack, &msg.payload, "alloc").unwrap();
        if (1..=EPOCHS).contains(&a.epoch) {
            batches_told[a.epoch as usize - 1].push(a);
        }
    }
    let mut now: Layout = (vec![(None, Role::Worker); workers.len()], HashMap::new());
    let live: Vec<Layout> = told
        .into_iter()
        .zip(batches_told)
        .map(|(assigned, allocated)| {
            for a in assigned {
                let w = workers.iter().position(|w| *w == a.worker).expect("a known worker");
                now.0[w] = (a.job, a.role);
            }
            for a in allocated {
                now.1.insert(a.job, a.batch_size);
            }
            now.clone()
        })
        .collect();

    // The same reports through `plan_epoch`, with what the allocator carries between epochs.
    let models: Vec<schedule::JobModel> = specs.iter().map(|s| slaq::actors::bid::job_model(s, &[], None)).collect();
    let mut predictors: Vec<JobPredictor> = curves.iter().map(|losses| fed_predictor(losses)).collect();
    let mut ledgers = vec![FloorLedger::default(); specs.len()];
    let mut current: Vec<Option<usize>> = vec![None; workers.len()];
    let mut attained = vec![0.0; specs.len()];
    let mut batches: HashMap<String, Option<u32>> = HashMap::new();
    let mut servers_seen = false;
    for (e, live) in live.iter().enumerate() {
        let held: Vec<u32> =
            (0..specs.len()).map(|j| current.iter().filter(|c| **c == Some(j)).count() as u32).collect();
        let gains: Vec<_> = predictors
            .iter_mut()
            .zip(&held)
            .map(|(p, &w)| schedule::make_bid(p, config.horizon_s, epoch_s, w))
            .collect();
        let jobs: Vec<EpochJob<'_, _>> = gains
            .iter()
            .zip(&attained)
            .zip(&models)
            .map(|((g, &service), model)| EpochJob {
                bid: JobBid { attained_service: service, ..JobBid::new(g.as_ref().map(slaq::policy::ByRef)) },
                own_minimum: true,
                sizes: None,
                model,
                pace: None,
            })
            .collect();
        let input = EpochInput {
            policy: config.policy,
            plan: config.plan,
            place: config.place,
            jobs: &jobs,
            machine_of: Some(&machine_of),
            current: &current,
            held: None,
            seed: e as u64,
            types: None,
            tenants: None,
            special: None,
        };
        let plan = schedule::plan_epoch(&input, &mut ledgers);
        let want: Vec<(Option<String>, Role)> = plan
            .next(&current)
            .iter()
            .zip(&plan.serves)
            .map(|(j, &serves)| (j.map(|j| specs[j].job.clone()), if serves { Role::Ps } else { Role::Worker }))
            .collect();
        assert_eq!(live.0, want, "epoch {}: each worker's job and role, live vs planned", e + 1);
        for (spec, choice) in specs.iter().zip(&plan.batches) {
            if let Some(c) = choice {
                batches.insert(spec.job.clone(), Some(c.config.batch));
            }
        }
        let live_batches: HashMap<String, Option<u32>> =
            live.1.iter().filter(|(_, b)| b.is_some()).map(|(j, b)| (j.clone(), *b)).collect();
        assert_eq!(live_batches, batches, "epoch {}: batches, live vs planned", e + 1);
        servers_seen |= plan.serves.contains(&true);
        for (j, &w) in plan.counts.iter().enumerate() {
            attained[j] += epoch_s * f64::from(w);
        }
        current = plan.next(&current).to_vec();
    }
    assert!(batches.contains_key("a-batched"), "the batched job never ran: the batch comparison proves nothing");
    assert!(servers_seen, "no parameter server in any epoch: the role comparison proves nothing");
}

/// The finish-time bound live: a converged job is parked by pure quality, and the bound gives
/// it a worker back before its deadline, whether it declared its length (`max_iters`) or not
/// (issue #41: every job is bounded); with the bound off it stays parked. Its deadline: 20 iterations left at 2 a second on its fair share of one
/// worker is 10 s; at K = 1.5 it must run from about 4.5 s after it registered. (It reports
/// nothing more, so an epoch later it looks as if it could still make it on two workers and
/// waits again: the grant is only asserted once.)
#[tokio::test]
async fn the_finish_time_bound_brings_a_parked_job_back_in_time() {
    async fn flat_job_workers(max_slowdown: f64, watch: Duration, declared: bool) -> Vec<u32> {
        let nats = NatsServer::start();
        let _scheduler = InProcessScheduler::start(
            &nats.url,
            &format!(
                "[scheduler]\nepoch_ms = 500\nrefit_interval_ms = 20\nfloor = 0\nmax_slowdown = {max_slowdown}\ncompletion_weight = 0\n"
            ),
        );
        let c = client(&nats.url).await;
        let s = subjects();
        wait_status(&c, &s).await;
        let mut allocs = c.subscribe("slaq.v1.job.flat.alloc").await.unwrap();
        let workers = vec!["w0".to_string(), "w1".to_string()];
        for w in &workers {
            hello_worker(&c, w).await;
        }
        let _beats = keep_alive(c.clone(), workers.clone());
        let flat = JobSpec { max_iters: declared.then_some(40), ..JobSpec::new("flat") };
        // Every job is bounded (its length declared or predicted from its curve): the steep one
        // declares a long run, so that its own deadline is far and the flat job's comes first.
        let steep = JobSpec { max_iters: Some(1000), ..JobSpec::new("steep") };
        for (spec, losses) in
            [(steep, (1..=12).map(|k| 0.1 + 2.0 * 0.7f64.powi(k)).collect::<Vec<_>>()), (flat, vec![0.5; 20])]
        {
            let ack: Ack = bus::request(&c, s.job_hello(&spec.job), Encoding::MsgPack, &spec, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(ack.ok, "{ack:?}");
            for (i, &loss) in losses.iter().enumerate() {
                report(&c, &spec.job, i as u64 + 1, loss, 1).await;
            }
        }
        let mut seen = Vec::new();
        let end = tokio::time::Instant::now() + watch;
        while let Ok(Some(msg)) = tokio::time::timeout_at(end, allocs.next()).await {
            let a: JobAllocation = protocol::decode(Encoding::MsgPack, &msg.payload, "alloc").unwrap();
            seen.push(a.workers.len() as u32);
        }
        seen
    }
    let off = flat_job_workers(0.0, Duration::from_secs(8), true).await;
    assert!(off.iter().all(|&w| w == 0), "without the bound pure quality parks the flat job: {off:?}");
    let on = flat_job_workers(1.5, Duration::from_secs(8), true).await;
    // Undeclared, its length is predicted from its curve (a flat curve has converged: as many
    // iterations again as it has run, 20, the declared case's remaining work).
    let undeclared = flat_job_workers(1.5, Duration::from_secs(8), false).await;
    eprintln!("flat job's workers, epoch by epoch it changed: bound off {off:?}, on {on:?}, undeclared {undeclared:?}");
    assert!(on.iter().any(|&w| w >= 1), "the bound gave the parked job no worker in 8 s: {on:?}");
    assert!(undeclared.iter().any(|&w| w >= 1), "the bound left the undeclared job parked: {undeclared:?}");
}
