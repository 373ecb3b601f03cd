//! The reference worker agent (`slaq::agent`, what `slaq worker` runs), in process against the
//! scheduler's `service::run`, both over a real nats-server.

use std::time::Duration;

use slaq::agent::{self, AgentConfig};
use slaq::bus;
use slaq::protocol::{Ack, Encoding, JobSpec, Subjects, WorkerAssignment, WorkerSpec};

use crate::harness::{InProcessScheduler, NatsServer, client, fast_settings, loss_report, temp_dir, wait_for_file};

#[tokio::test]
async fn the_agent_registers_follows_its_assignment_and_refuses_forged_ones() {
    let nats = NatsServer::start();
    let scheduler = InProcessScheduler::start(&nats.url, &fast_settings(""));
    let s = Subjects::new("slaq").unwrap();
    let dir = temp_dir("agent");
    let out = dir.join("runs.txt");
    let config = AgentConfig {
        beat_every: Duration::from_millis(200),
        exec: Some(format!("echo \"$SLAQ_JOB $SLAQ_WORKER $SLAQ_EPOCH\" >> {}", out.display())),
        ..AgentConfig::new(
            s.clone(),
            WorkerSpec { worker: "w1".into(), machine: None, slots: 1, kind: None, advertise: None },
        )
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent_client = client(&nats.url).await;
    let agent = tokio::spawn(agent::run(agent_client, config, async move {
        let _ = stop_rx.await;
    }));

    // A job arrives: the only worker goes to it, and the agent runs the command for it.
    let c = client(&nats.url).await;
    let ack: Ack = bus::request(&c, s.job_hello("j1"), Encoding::MsgPack, &JobSpec::new("j1"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(ack.ok);
    for iter in 1..=5u64 {
        bus::publish(&c, s.job_loss("j1"), Encoding::MsgPack, &loss_report("j1", iter)).await.unwrap();
    }
    let text = wait_for_file(&out, "the agent runs the command for j1", |t| t.contains("j1 w1 ")).await;
    // The in-process scheduler's own counters: one hello, from the agent.
    assert_eq!(scheduler.handle.metrics.accepted_counts().get("worker_hello"), Some(&1));
    let epoch: u64 = text.lines().next().and_then(|l| l.split(' ').nth(2)).and_then(|e| e.parse().ok()).unwrap();

    // Forged assignments on its subject: for another worker, with an id that is not a token, and
    // older than the one followed. None of them runs anything.
    for forged in [
        WorkerAssignment {
            worker: "w2".into(),
            epoch: epoch + 100,
            job: Some("x1".into()),
            role: Default::default(),
            hello_again: false,
            term: None,
            launch: None,
            command: None,
            stop_grace_ms: None,
            reclaim_grace_ms: None,
        },
        WorkerAssignment {
            worker: "w1".into(),
            epoch: epoch + 100,
            job: Some("x;id".into()),
            role: Default::default(),
            hello_again: false,
            term: None,
            launch: None,
            command: None,
            stop_grace_ms: None,
            reclaim_grace_ms: None,
        },
        WorkerAssignment {
            worker: "w1".into(),
            epoch: epoch.saturating_sub(1),
            job: Some("x2".into()),
            role: Default::default(),
            hello_again: false,
            term: None,
            launch: None,
            command: None,
            stop_grace_ms: None,
            reclaim_grace_ms: None,
        },
    ] {
        bus::publish(&c, s.worker_assign("w1"), Encoding::MsgPack, &forged).await.unwrap();
    }
    // A real assignment after them still goes through (the agent kept running).
    let real = WorkerAssignment {
        worker: "w1".into(),
        epoch: epoch + 1000,
        job: Some("j9".into()),
        role: Default::default(),
        hello_again: false,
        term: None,
        launch: None,
        command: None,
        stop_grace_ms: None,
        reclaim_grace_ms: None,
    };
    bus::publish(&c, s.worker_assign("w1"), Encoding::MsgPack, &real).await.unwrap();
    let text = wait_for_file(&out, "the later assignment runs", |t| t.contains("j9 w1 ")).await;
    assert!(!text.contains('x'), "a forged assignment ran: {text:?}");

    let _ = stop_tx.send(());
    let result = tokio::time::timeout(Duration::from_secs(5), agent).await.expect("the agent stops").unwrap();
    assert!(result.is_ok(), "{result:?}");
}

/// Regression: a scheduler restarted without state never assigned again the workers that had
/// said hello once (their heartbeats were counted as unknown). Now it asks them to say hello
/// again, and the agent does.
#[tokio::test]
async fn an_agent_says_hello_again_to_a_scheduler_that_forgot_it() {
    let nats = NatsServer::start();
    let settings = fast_settings("\n[state]\nmode = \"none\"\n");
    let first = InProcessScheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();
    let config = AgentConfig {
        beat_every: Duration::from_millis(100),
        ..AgentConfig::new(
            s.clone(),
            WorkerSpec { worker: "w-re".into(), machine: None, slots: 1, kind: None, advertise: None },
        )
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(agent::run(client(&nats.url).await, config, async move {
        let _ = stop_rx.await;
    }));
    let c = client(&nats.url).await;
    crate::harness::eventually(&c, &s, Duration::from_secs(10), "the worker registered", |st| {
        st.workers.iter().any(|w| w.worker == "w-re")
    })
    .await;
    // The scheduler goes away and a new one, with no saved state, takes over.
    drop(first);
    let second = InProcessScheduler::start(&nats.url, &settings);
    crate::harness::eventually(&c, &s, Duration::from_secs(10), "the worker is known again", |st| {
        st.workers.iter().any(|w| w.worker == "w-re")
    })
    .await;
    assert_eq!(second.handle.metrics.accepted_counts().get("worker_hello"), Some(&1), "one new hello");
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), agent).await;
}
