//! Saves asked for before a reclaim (issue #43), over a real nats-server: team b's job saves
//! every 600 s and not at its stop, and says it saves when asked; it holds all 4 workers when
//! team a (guaranteed 2, grace 3 s) starts a job. The scheduler asks b's job to save (its
//! allocation again, `save` set), and a gets its workers only once b's reports show the save,
//! with b's processes given the full grace; a job that never answers gives them up within the
//! grace, its processes given what is left of it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use slaq::bus;
use slaq::protocol::{
    Ack, Encoding, Heartbeat, JobAllocation, JobSpec, LossReport, Subjects, WorkerAssignment, WorkerSpec,
};

use crate::harness::{Background, InProcessScheduler, NatsServer, client, fast_settings, wait_status};

const WORKERS: [&str; 4] = ["w0", "w1", "w2", "w3"];

/// When (from the test's start) b's job was asked to save, and when it reported its save.
#[derive(Debug, Default)]
struct Seen {
    asked: Vec<f64>,
    saved: Option<f64>,
}

/// Team b's job: reports a point every 50 ms with its checkpoint age (counted from its start,
/// or from its save); `answers`: it saves 0.5 s after it is asked.
fn b_job(c: async_nats::Client, s: Subjects, start: Instant, answers: bool, seen: Arc<Mutex<Seen>>) -> Background {
    Background::spawn(async move {
        let job = "b.x";
        let mut allocs = c.subscribe(s.job_alloc(job)).await.unwrap();
        let mut iter = 0u64;
        let mut save_at: Option<f64> = None;
        loop {
            while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(50), allocs.next()).await {
                if let Ok(a) = slaq::protocol::decode::<JobAllocation>(Encoding::MsgPack, &msg.payload, "alloc")
                    && a.save
                {
                    let now = start.elapsed().as_secs_f64();
                    seen.lock().unwrap().asked.push(now);
                    if answers && save_at.is_none() {
                        save_at = Some(now + 0.5);
                    }
                }
            }
            iter += 1;
            let now = start.elapsed().as_secs_f64();
            let age = match save_at {
                Some(at) if now >= at => {
                    seen.lock().unwrap().saved.get_or_insert(now);
                    now - at
                }
                _ => now,
            };
            let report = LossReport {
                checkpoint_age_s: Some(age),
                ..LossReport::new(job, iter, 2.0 / (1.0 + iter as f64 / 50.0), 0.05, 4)
            };
            bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &report).await.unwrap();
        }
    })
}

/// Runs the scenario; returns what b's job saw, when (from the start) a's job got its first
/// worker, and the reclaim grace that worker's assignment carried.
async fn reclaim(answers: bool) -> (Seen, f64, Option<u64>) {
    let nats = NatsServer::start();
    let tenants = "[tenants.a]\nguaranteed = 2\ngrace_s = 3\n[tenants.b]\nguaranteed = 2\ngrace_s = 3\n";
    let scheduler = InProcessScheduler::start(&nats.url, &fast_settings(tenants));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let mut assigned = Vec::new();
    for w in WORKERS {
        assigned.push(c.subscribe(s.worker_assign(w)).await.unwrap());
        let spec = WorkerSpec { worker: w.into(), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(&c, s.worker_hello(w), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok, "{ack:?}");
    }
    let beats = {
        let (c, s) = (c.clone(), s.clone());
        Background::spawn(async move {
            loop {
                for w in WORKERS {
                    bus::publish(&c, s.worker_beat(w), Encoding::MsgPack, &Heartbeat::new(w)).await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let start = Instant::now();
    let spec = JobSpec { checkpoint_every_s: Some(600.0), save_on_request: true, ..JobSpec::new("b.x") };
    let ack: Ack =
        bus::request(&c, s.job_hello("b.x"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let b = b_job(c.clone(), s.clone(), start, answers, seen.clone());
    crate::harness::eventually(&c, &s, Duration::from_secs(30), "b holds all 4", |st| {
        st.tenants.get("b").is_some_and(|u| u.workers == 4)
    })
    .await;
    // b's job runs a while (its restart counts as a save; a save within a second of it would
    // read as that one).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(seen.lock().unwrap().asked.is_empty(), "no reclaim, no ask");
    let ack: Ack =
        bus::request(&c, s.job_hello("a.z"), Encoding::MsgPack, &JobSpec::new("a.z"), Duration::from_secs(5))
            .await
            .unwrap();
    assert!(ack.ok, "{ack:?}");
    bus::publish(&c, s.job_loss("a.z"), Encoding::MsgPack, &LossReport::new("a.z", 1, 2.0, 0.05, 0)).await.unwrap();
    // The first assignment of a worker to a's job.
    let merged = futures_util::stream::select_all(assigned);
    let mut merged = std::pin::pin!(merged);
    let (at, grace) = loop {
        let msg =
            tokio::time::timeout(Duration::from_secs(30), merged.next()).await.expect("a's job gets a worker").unwrap();
        let a: WorkerAssignment = slaq::protocol::decode(Encoding::MsgPack, &msg.payload, "assign").unwrap();
        if a.job.as_deref() == Some("a.z") {
            break (start.elapsed().as_secs_f64(), a.reclaim_grace_ms);
        }
    };
    drop((b, beats, scheduler));
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (seen, at, grace)
}

#[tokio::test]
async fn a_job_that_saves_when_asked_is_asked_before_a_reclaim_and_gives_its_workers_up_after_its_save() {
    let (seen, at, grace) = reclaim(true).await;
    eprintln!("answering job: {seen:?}, a's first worker at {at:.2} s, grace {grace:?}");
    let asked = *seen.asked.first().expect("asked to save");
    let saved = seen.saved.expect("it saved");
    assert!(at >= saved, "the reclaim waited for the save: {seen:?}, moved at {at:.2} s");
    assert!(at - asked < 3.0, "within the grace: asked at {asked:.2} s, moved at {at:.2} s");
    assert_eq!(grace, Some(3_000), "the save came: b's processes get the full grace");
}

#[tokio::test]
async fn a_job_asked_that_never_saves_gives_its_workers_up_within_its_grace() {
    let (seen, at, grace) = reclaim(false).await;
    eprintln!("silent job: {seen:?}, a's first worker at {at:.2} s, grace {grace:?}");
    let asked = *seen.asked.first().expect("asked to save");
    assert!(
        at - asked >= 2.5 && at - asked < 3.5,
        "waited its grace less an epoch: asked at {asked:.2} s, moved at {at:.2} s"
    );
    let grace = grace.expect("a grace");
    assert!(grace < 1_000, "what is left of the grace: {grace} ms");
}
