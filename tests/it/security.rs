//! Access control, enforced by NATS with `deploy/nats/slaq-auth.conf` (one user per job and per
//! worker, each allowed only its own subjects): what a job or worker may not do is refused by the
//! server, and the scheduler, connecting with its own credentials, works throughout.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use slaq::bus::{self, NatsAuth};
use slaq::protocol::{Ack, Encoding, JobSpec, Subjects, WorkerAssignment, WorkerSpec};

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

async fn connect_as(url: &str, name: &str) -> (async_nats::Client, std::sync::Arc<bus::BusCounters>) {
    bus::connect_with(&[url.to_string()], name, 1024, &user(name)).await.expect("connect")
}

async fn hello_worker(c: &async_nats::Client, s: &Subjects, id: &str) {
    let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None };
    let ack: Ack = bus::request(c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
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

    // Workers w1 and w2, each on its own credentials; w1 also tries to read w2's assignments.
    let (w1, w1_events) = connect_as(&nats.url, "w1").await;
    let (w2, _) = connect_as(&nats.url, "w2").await;
    let mut w1_own = w1.subscribe(s.worker_assign("w1")).await.unwrap();
    let mut w1_snooping = w1.subscribe(s.worker_assign("w2")).await.unwrap();
    let mut w2_own = w2.subscribe(s.worker_assign("w2")).await.unwrap();
    hello_worker(&w1, &s, "w1").await;
    hello_worker(&w2, &s, "w2").await;

    // job-a, connected with credentials in its URL, asks for both workers and reports.
    let port = nats.url.rsplit(':').next().unwrap();
    let url_with_credentials = format!("nats://job-a:job-a-example-password@127.0.0.1:{port}");
    let job_a_auth = NatsAuth { inbox_prefix: Some("_INBOX.job-a".into()), ..NatsAuth::default() };
    let (job_a, job_a_events) = bus::connect_with(&[url_with_credentials], "job-a", 1024, &job_a_auth).await.unwrap();
    let spec = JobSpec { min_workers: 2, ..JobSpec::new("job-a") };
    let ack: Ack =
        bus::request(&job_a, s.job_hello("job-a"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
    for iter in 1..=10 {
        bus::publish(&job_a, s.job_loss("job-a"), Encoding::MsgPack, &loss_report("job-a", iter)).await.unwrap();
    }
    // What job-a may not do: report for job-b, say bye for job-b, assign a worker.
    for iter in 1..=5 {
        bus::publish(&job_a, s.job_loss("job-b"), Encoding::MsgPack, &loss_report("job-b", iter)).await.unwrap();
    }
    let forged = WorkerAssignment {
        worker: "w1".into(),
        epoch: 1 << 40,
        job: Some("forged".into()),
        role: Default::default(),
        hello_again: false,
        term: None,
    };
    bus::publish(&job_a, s.worker_assign("w1"), Encoding::MsgPack, &forged).await.unwrap();
    job_a.flush().await.unwrap();

    // The scheduler saw job-a's ten reports and nothing of job-b, and gave job-a both workers.
    let st = eventually(&operator, &s, Duration::from_secs(20), "job-a holds both workers", |st| {
        st.accepted.get("loss") == Some(&10) && st.jobs.iter().any(|j| j.job == "job-a" && j.workers == 2)
    })
    .await;
    assert!(st.jobs.iter().all(|j| j.job != "job-b"), "a report for job-b got through: {:?}", st.jobs);

    // Each worker got its own assignment from the scheduler; the forged one never arrived, and
    // w1's subscription to w2's subject was refused.
    for (name, sub) in [("w1", &mut w1_own), ("w2", &mut w2_own)] {
        let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("{name} got no assignment"));
        let a: WorkerAssignment = slaq::protocol::decode(Encoding::MsgPack, &m.payload, "assignment").unwrap();
        assert_eq!(a.job.as_deref(), Some("job-a"), "{name}: {a:?}");
    }
    let extra = tokio::time::timeout(Duration::from_millis(500), w1_own.next()).await;
    if let Ok(Some(m)) = extra {
        let a: WorkerAssignment = slaq::protocol::decode(Encoding::MsgPack, &m.payload, "assignment").unwrap();
        assert_ne!(a.job.as_deref(), Some("forged"), "a job's forged assignment reached w1");
    }
    let snooped = tokio::time::timeout(Duration::from_millis(300), w1_snooping.next()).await;
    assert!(!matches!(snooped, Ok(Some(_))), "w1 read w2's assignment");
    // NATS told the offenders so.
    let violations = |e: &bus::BusCounters| e.server_errors.load(std::sync::atomic::Ordering::Relaxed);
    assert!(violations(&job_a_events) >= 1, "job-a's forbidden publishes raised no permission error");
    assert!(violations(&w1_events) >= 1, "w1's forbidden subscription raised no permission error");
}
