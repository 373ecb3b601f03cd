//! Access control, enforced by NATS with `deploy/nats/slaq-auth.conf` (one user per job and per
//! worker, each allowed only its own subjects): what a job or worker may not do is refused by the
//! server, and the scheduler, connecting with its own credentials, works throughout.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use slaq::bus::{self, NatsAuth};
use slaq::protocol::{Ack, Encoding, EndReason, Heartbeat, JobEnd, JobSpec, Subjects, WorkerAssignment, WorkerSpec};

use crate::harness::{NatsServer, Scheduler, eventually, fast_settings, loss_report};

const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/nats/slaq-auth.conf");

fn user(name: &str) -> NatsAuth {
    NatsAuth {
        user: Some(name.into()),
        password: Some(format!("{name}-example-password")),
        inbox_prefix: Some(format!("_INBOX.{name}")),
        ..NatsAuth::default()
    }
}

pub(crate) async fn connect_as(url: &str, name: &str) -> (async_nats::Client, std::sync::Arc<bus::BusCounters>) {
    bus::connect_with(&[url.to_string()], name, 1024, &user(name)).await.expect("connect")
}

async fn hello_worker(c: &async_nats::Client, s: &Subjects, id: &str) {
    let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None };
    let ack: Ack = bus::request(c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
}

/// NATS's permission errors on a connection so far.
fn violations(events: &bus::BusCounters) -> u64 {
    events.server_errors.load(std::sync::atomic::Ordering::Relaxed)
}

/// Waits until `events` shows one more permission error than `before` (each forbidden action
/// must be refused on its own, not merely one of them).
async fn refused(events: &bus::BusCounters, before: u64, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while violations(events) <= before {
        assert!(std::time::Instant::now() < deadline, "NATS did not refuse: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn nats_refuses_what_a_job_or_worker_may_not_do_and_the_scheduler_works_throughout() {
    assert!(Path::new(CONF).exists());
    let nats = NatsServer::start_with_config(Path::new(CONF));
    let settings = fast_settings(
        "\n[nats.auth]\nuser = \"scheduler\"\npassword = \"scheduler-example-password\"\ninbox_prefix = \"_INBOX.scheduler\"\n\n\
         [nats.state_auth]\nuser = \"scheduler-state\"\npassword = \"scheduler-state-example-password\"\ninbox_prefix = \"_INBOX.scheduler-state\"\n",
    );
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();

    // No credentials, no connection (connect retries, so bound it).
    let anonymous =
        tokio::time::timeout(Duration::from_secs(3), async_nats::ConnectOptions::new().connect(nats.url.as_str()))
            .await;
    assert!(!matches!(anonymous, Ok(Ok(_))), "an anonymous client got in");

    let (operator, _) = connect_as(&nats.url, "operator").await;
    crate::harness::wait_status(&operator, &s).await;

    // Workers w1 and w2, each on its own credentials.
    let (w1, w1_events) = connect_as(&nats.url, "w1").await;
    let (w2, _) = connect_as(&nats.url, "w2").await;
    let mut w1_own = w1.subscribe(s.worker_assign("w1")).await.unwrap();
    let mut w2_own = w2.subscribe(s.worker_assign("w2")).await.unwrap();
    hello_worker(&w1, &s, "w1").await;
    hello_worker(&w2, &s, "w2").await;
    let _beats = crate::harness::beat(vec![(w1.clone(), "w1"), (w2.clone(), "w2")], &s);

    // job-b says hello and reports 5 points, with its own credentials.
    let (job_b, _) = connect_as(&nats.url, "job-b").await;
    let mut b_alloc = job_b.subscribe(s.job_alloc("job-b")).await.unwrap();
    let ack: Ack =
        bus::request(&job_b, s.job_hello("job-b"), Encoding::MsgPack, &JobSpec::new("job-b"), Duration::from_secs(5))
            .await
            .unwrap();
    assert!(ack.ok, "{ack:?}");
    for iter in 1..=5 {
        bus::publish(&job_b, s.job_loss("job-b"), Encoding::MsgPack, &loss_report("job-b", iter)).await.unwrap();
    }
    // job-a, connected with credentials in its URL, asks for both workers and reports.
    let port = nats.url.rsplit(':').next().unwrap();
    let url_with_credentials = format!("nats://job-a:job-a-example-password@127.0.0.1:{port}");
    let job_a_auth = NatsAuth { inbox_prefix: Some("_INBOX.job-a".into()), ..NatsAuth::default() };
    let (job_a, job_a_events) = bus::connect_with(&[url_with_credentials], "job-a", 1024, &job_a_auth).await.unwrap();
    let spec = JobSpec { min_workers: 1, ..JobSpec::new("job-a") };
    let ack: Ack =
        bus::request(&job_a, s.job_hello("job-a"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
    for iter in 1..=10 {
        bus::publish(&job_a, s.job_loss("job-a"), Encoding::MsgPack, &loss_report("job-a", iter)).await.unwrap();
    }
    let st = eventually(&operator, &s, Duration::from_secs(20), "each job holds a worker", |st| {
        st.jobs.iter().any(|j| j.job == "job-a" && j.points == 10 && j.workers == 1)
            && st.jobs.iter().any(|j| j.job == "job-b" && j.points == 5 && j.workers == 1)
    })
    .await;
    let b_workers: Vec<String> =
        st.workers.iter().filter(|w| w.job.as_deref() == Some("job-b")).map(|w| w.worker.clone()).collect();
    assert_eq!(job_a_events.server_errors.load(std::sync::atomic::Ordering::Relaxed), 0);

    // What job-a may not do, each refused by NATS on its own.
    let forbidden_publishes: Vec<(&str, String, Vec<u8>)> = vec![
        (
            "report for job-b",
            s.job_loss("job-b"),
            slaq::protocol::encode(Encoding::MsgPack, &loss_report("job-b", 6)).unwrap(),
        ),
        (
            "say bye for job-b",
            s.job_bye("job-b"),
            slaq::protocol::encode(Encoding::MsgPack, &JobEnd { job: "job-b".into(), reason: EndReason::Cancelled })
                .unwrap(),
        ),
        (
            "say hello for job-b",
            s.job_hello("job-b"),
            slaq::protocol::encode(Encoding::MsgPack, &JobSpec { min_workers: 2, ..JobSpec::new("job-b") }).unwrap(),
        ),
        (
            "assign a worker",
            s.worker_assign("w1"),
            slaq::protocol::encode(
                Encoding::MsgPack,
                &WorkerAssignment {
                    worker: "w1".into(),
                    epoch: 1 << 40,
                    job: Some("forged".into()),
                    role: Default::default(),
                    hello_again: false,
                    term: Some(1 << 40),
                    launch: None,
                    command: None,
                    stop_grace_ms: None,
                    reclaim_grace_ms: None,
                },
            )
            .unwrap(),
        ),
        ("publish job-b's allocation", s.job_alloc("job-b"), b"{}".to_vec()),
        (
            "beat as a worker",
            s.worker_beat("w1"),
            slaq::protocol::encode(Encoding::MsgPack, &Heartbeat::new("w1")).unwrap(),
        ),
        ("purge the stream", "$JS.API.STREAM.PURGE.slaq_reports".into(), Vec::new()),
        ("write a state key", "$KV.slaq_state.job.job-b".into(), b"x".to_vec()),
    ];
    for (what, subject, payload) in forbidden_publishes {
        let before = violations(&job_a_events);
        job_a.publish(subject, payload.into()).await.unwrap();
        job_a.flush().await.unwrap();
        refused(&job_a_events, before, what).await;
    }
    // Nor read another job's allocations, or other jobs' reports.
    let mut snooping = Vec::new();
    for subject in [s.job_alloc("job-b"), "slaq.v1.job.*.loss".to_string(), s.worker_assign("w1")] {
        let before = violations(&job_a_events);
        snooping.push(job_a.subscribe(subject.clone()).await.unwrap());
        job_a.flush().await.unwrap();
        refused(&job_a_events, before, &format!("subscribe to {subject}")).await;
    }
    // A worker may not read another's assignments, nor speak for it.
    let before = violations(&w1_events);
    let mut w1_snooping = w1.subscribe(s.worker_assign("w2")).await.unwrap();
    w1.flush().await.unwrap();
    refused(&w1_events, before, "w1 subscribes to w2's assign").await;
    let before = violations(&w1_events);
    w1.publish(s.worker_beat("w2"), slaq::protocol::encode(Encoding::MsgPack, &Heartbeat::new("w2")).unwrap().into())
        .await
        .unwrap();
    w1.flush().await.unwrap();
    refused(&w1_events, before, "w1 beats as w2").await;

    // The scheduler's bus user itself may touch no JetStream subject, and may not answer a
    // request on a subject that is not an inbox (no `allow_responses`): the state is out of
    // its reach whatever reply subject a client sets.
    let (bus_user, bus_events) = connect_as(&nats.url, "scheduler").await;
    let mut requests = bus_user.subscribe(s.ctl_status()).await.unwrap();
    bus_user.flush().await.unwrap();
    for subject in ["$JS.API.STREAM.INFO.slaq_reports", "$JS.API.STREAM.PURGE.slaq_reports", "$KV.slaq_state.job.job-b"]
    {
        let before = violations(&bus_events);
        bus_user.publish(subject, "{}".into()).await.unwrap();
        bus_user.flush().await.unwrap();
        refused(&bus_events, before, &format!("the bus user publishes to {subject}")).await;
    }
    operator.publish_with_reply(s.ctl_status(), s.job_hello("job-a"), "{}".into()).await.unwrap();
    operator.flush().await.unwrap();
    let request = tokio::time::timeout(Duration::from_secs(5), requests.next()).await.unwrap().unwrap();
    let before = violations(&bus_events);
    bus_user.publish(request.reply.unwrap(), "{}".into()).await.unwrap();
    bus_user.flush().await.unwrap();
    refused(&bus_events, before, "the bus user answers on a non-inbox reply subject").await;

    // A job that moves its worker: job-b leaves (with its own credentials), so job-a gets both
    // workers, and the allocation goes to job-a only.
    bus::publish(
        &job_b,
        s.job_bye("job-b"),
        Encoding::MsgPack,
        &JobEnd { job: "job-b".into(), reason: EndReason::Finished },
    )
    .await
    .unwrap();
    job_b.flush().await.unwrap();

    // None of job-a's attempts changed anything: job-b kept its 5 points, its spec and its
    // worker until its own bye; then job-a got both workers.
    let st = eventually(&operator, &s, Duration::from_secs(20), "job-a holds both workers", |st| {
        st.jobs.iter().any(|j| j.job == "job-a" && j.workers == 2) && st.jobs.iter().all(|j| j.job != "job-b")
    })
    .await;
    assert_eq!(st.accepted.get("loss"), Some(&15), "only the jobs' own reports count: {:?}", st.accepted);
    assert_eq!(st.accepted.get("job_bye"), Some(&1), "only job-b's own bye: {:?}", st.accepted);
    assert_eq!(st.accepted.get("job_hello"), Some(&2), "{:?}", st.accepted);
    assert!(!st.rejected.contains_key("unknown_job"), "job-b was gone before its own bye: {:?}", st.rejected);

    // Each worker got only the scheduler's assignments; the moved worker followed to job-a.
    for (name, sub) in [("w1", &mut w1_own), ("w2", &mut w2_own)] {
        let mut last = None;
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            let a: WorkerAssignment = slaq::protocol::decode(Encoding::MsgPack, &m.payload, "assignment").unwrap();
            assert_ne!(a.job.as_deref(), Some("forged"), "a job's forged assignment reached {name}");
            last = a.job;
        }
        assert_eq!(last.as_deref(), Some("job-a"), "{name}'s last assignment");
    }
    // job-b received its allocation(s); the snooping subscriptions received nothing.
    let b_got = tokio::time::timeout(Duration::from_millis(500), b_alloc.next()).await;
    assert!(matches!(b_got, Ok(Some(_))), "job-b got no allocation (it held {b_workers:?})");
    for sub in snooping.iter_mut().chain(std::iter::once(&mut w1_snooping)) {
        let got = tokio::time::timeout(Duration::from_millis(200), sub.next()).await;
        assert!(!matches!(got, Ok(Some(_))), "a refused subscription received a message");
    }
}
