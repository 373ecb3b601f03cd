//! Regressions for the holes found by probing from outside (issue #16). Each test runs over a
//! real nats-server (the security ones with `deploy/nats/slaq-auth.conf`) and names the item of
//! the issue it covers.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use slaq::bus::{self, NatsAuth};
use slaq::protocol::{
    self, Ack, Encoding, EpochSummary, Heartbeat, JobEnd, JobSpec, LossReport, StatusSnapshot, Subjects,
    WorkerAssignment, WorkerSpec,
};

use crate::harness::{
    Background, NatsServer, Scheduler, client, eventually, fast_settings, loss_report, temp_dir, wait_status,
};

const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/nats/slaq-auth.conf");

/// The scheduler's settings under `slaq-auth.conf`: its bus user and its state user.
pub(crate) const SCHEDULER_AUTH: &str = "\n[nats.auth]\nuser = \"scheduler\"\npassword = \"scheduler-example-password\"\ninbox_prefix = \"_INBOX.scheduler\"\n\n[nats.state_auth]\nuser = \"scheduler-state\"\npassword = \"scheduler-state-example-password\"\ninbox_prefix = \"_INBOX.scheduler-state\"\n";
/// The user that may read the scheduler's stream and buckets (to check them).
const STATE_USER: &str = "scheduler-state";
const STATE_INBOX: &str = "_INBOX.scheduler-state";

fn s() -> Subjects {
    Subjects::new("slaq").unwrap()
}

fn user(name: &str, inbox: &str) -> NatsAuth {
    NatsAuth {
        user: Some(name.into()),
        password: Some(format!("{name}-example-password")),
        inbox_prefix: Some(inbox.into()),
        ..NatsAuth::default()
    }
}

/// A client of `slaq-auth.conf`'s user `name` (its inbox prefix `_INBOX.<name>`).
pub(crate) async fn connect_as(url: &str, name: &str) -> async_nats::Client {
    bus::connect_with(&[url.to_string()], name, 65_536, &user(name, &format!("_INBOX.{name}")))
        .await
        .expect("connect")
        .0
}

async fn inspector(url: &str) -> async_nats::jetstream::Context {
    let c = bus::connect_with(&[url.to_string()], "inspector", 1024, &user(STATE_USER, STATE_INBOX)).await.unwrap().0;
    async_nats::jetstream::new(c)
}

async fn hello(c: &async_nats::Client, spec: &JobSpec) {
    let ack: Ack =
        bus::request(c, s().job_hello(&spec.job), Encoding::MsgPack, spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
}

async fn report(c: &async_nats::Client, job: &str, iters: std::ops::RangeInclusive<u64>, loss: impl Fn(u64) -> f64) {
    for iter in iters {
        let r = LossReport { loss: loss(iter), ..loss_report(job, iter) };
        bus::publish(c, s().job_loss(job), Encoding::MsgPack, &r).await.unwrap();
    }
    c.flush().await.unwrap();
}

async fn bye(c: &async_nats::Client, job: &str) {
    let end = JobEnd { job: job.into(), reason: protocol::EndReason::Finished };
    bus::publish(c, s().job_bye(job), Encoding::MsgPack, &end).await.unwrap();
}

/// Workers that say hello and beat every 200 ms until the handle is dropped.
async fn workers(c: &async_nats::Client, ids: &[String]) -> Background {
    for id in ids {
        let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(c, s().worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(10)).await.unwrap();
        assert!(ack.ok);
    }
    let (c, ids) = (c.clone(), ids.to_vec());
    Background::spawn(async move {
        loop {
            for id in &ids {
                let beat = Heartbeat::new(id);
                let _ = bus::publish(&c, s().worker_beat(id), Encoding::MsgPack, &beat).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:03}")).collect()
}

/// Polls `check` until it holds (or panics after 5 s).
async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: never happened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every key of a bucket with its value.
/// A listing of the keys is an ordered consumer that can fail to end (it hung a CI run for 16
/// minutes on 2.9.10): each try is bounded, and a few are made.
async fn bucket(js: &async_nats::jetstream::Context, name: &str) -> BTreeMap<String, bytes::Bytes> {
    let kv = js.get_key_value(name).await.expect("bucket");
    let list = || async {
        let mut keys: Vec<String> = Vec::new();
        if let Ok(mut list) = kv.keys().await {
            while let Some(Ok(k)) = list.next().await {
                keys.push(k);
            }
        }
        keys
    };
    let mut tries = 0;
    let keys = loop {
        tries += 1;
        match tokio::time::timeout(Duration::from_secs(5), list()).await {
            Ok(keys) => break keys,
            Err(_) => {
                eprintln!("listing the keys of {name} did not end within 5 s (try {tries})");
                assert!(tries < 5, "listing the keys of {name} never ended, {tries} tries");
            }
        }
    };
    let mut out = BTreeMap::new();
    for k in keys {
        if let Ok(Some(v)) = kv.get(&k).await {
            out.insert(k, v);
        }
    }
    out
}

/// Messages the reports stream holds on `subject`.
async fn stream_count(js: &async_nats::jetstream::Context, subject: &str) -> u64 {
    let stream = js.get_stream("slaq_reports").await.expect("the reports stream");
    let info = stream.info_with_subjects(subject).await.expect("stream info");
    let read = info.filter_map(|r| async move { r.ok() }).collect::<std::collections::HashMap<String, usize>>();
    let subjects = tokio::time::timeout(Duration::from_secs(10), read).await.expect("the stream's subjects are read");
    subjects.get(subject).copied().unwrap_or(0) as u64
}

fn workers_of(st: &StatusSnapshot, job: &str) -> usize {
    st.workers.iter().filter(|w| w.job.as_deref() == Some(job)).count()
}

// ---------------------------------------------------------------------------------------------
// Security, under the shipped permissions.

/// #16.1: the scheduler answered requests on any reply subject with its own permissions, and
/// JetStream acknowledged a report on its reply subject, so a job user could purge the reports
/// stream or the state bucket, overwrite a key or depose the leader. Every subject slaq answers
/// (job and worker hello, status, and the error answer to any refused message) and the one
/// JetStream acknowledges (loss reports) is tried with each of those reply subjects.
#[tokio::test]
async fn replies_on_non_inbox_subjects_touch_neither_state_nor_lease() {
    let nats = NatsServer::start_with_config(Path::new(CONF));
    let settings = format!(
        "{}\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n\n[ha]\nenabled = true\nlease_ms = 1000\nreplica_id = \"a\"\n{SCHEDULER_AUTH}",
        fast_settings("")
    );
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let operator = connect_as(&nats.url, "operator").await;
    let st = eventually(&operator, &s(), Duration::from_secs(20), "the replica leads", |st| st.epoch >= 1).await;
    let term = st.term;
    let job_a = connect_as(&nats.url, "job-a").await;
    let job_b = connect_as(&nats.url, "job-b").await;
    let w1 = connect_as(&nats.url, "w1").await;
    let w2 = connect_as(&nats.url, "w2").await;
    let mut w2_assign = w2.subscribe(s().worker_assign("w2")).await.unwrap();
    let _beats = workers(&w2, &["w2".to_string()]).await;
    hello(&job_b, &JobSpec::new("job-b")).await;
    hello(&job_a, &JobSpec::new("job-a")).await;
    report(&job_b, "job-b", 1..=20, |k| 1.0 / k as f64).await;
    eventually(&operator, &s(), Duration::from_secs(20), "job-b's 20 points", |st| {
        st.jobs.iter().any(|j| j.job == "job-b" && j.points == 20)
            && workers_of(st, "job-b") + workers_of(st, "job-a") == 1
    })
    .await;
    let js = inspector(&nats.url).await;
    let spec_b = bucket(&js, "slaq_state").await.get("job.job-b").cloned().expect("job-b is saved");
    let lease_before = bucket(&js, "slaq_lease").await.get("leader").cloned().expect("a lease");
    assert_eq!(stream_count(&js, &s().job_loss("job-b")).await, 20);

    let targets = [
        "$JS.API.STREAM.PURGE.slaq_reports".to_string(),
        "$JS.API.STREAM.PURGE.KV_slaq_state".to_string(),
        "$KV.slaq_state.job.job-b".to_string(),
        "$KV.slaq_lease.leader".to_string(),
        s().worker_assign("w2"),
        "$JS.API.STREAM.DELETE.slaq_reports".to_string(),
    ];
    let spec_a = protocol::encode(Encoding::MsgPack, &JobSpec::new("job-a")).unwrap();
    let report_a = protocol::encode(Encoding::MsgPack, &loss_report("job-a", 1)).unwrap();
    let bye_a = b"\xc1not a bye".to_vec();
    let worker_w1 = protocol::encode(
        Encoding::MsgPack,
        &WorkerSpec { worker: "w1".into(), machine: None, slots: 1, kind: None, advertise: None },
    )
    .unwrap();
    for reply in &targets {
        let sends: [(&async_nats::Client, String, Vec<u8>); 7] = [
            (&job_a, s().job_hello("job-a"), spec_a.clone()),
            (&job_a, s().job_hello("job-a"), b"\xc1garbage".to_vec()),
            (&job_a, s().job_loss("job-a"), report_a.clone()),
            (&job_a, s().job_loss("job-a"), b"\xc1garbage".to_vec()),
            (&job_a, s().job_bye("job-a"), bye_a.clone()),
            (&w1, s().worker_hello("w1"), worker_w1.clone()),
            (&operator, s().ctl_status(), Vec::new()),
        ];
        for (c, subject, payload) in sends {
            c.publish_with_reply(subject, reply.clone(), payload.into()).await.unwrap();
        }
    }
    for c in [&job_a, &w1, &operator] {
        c.flush().await.unwrap();
    }
    // Every request with such a reply was refused (the scheduler counts them): what they could
    // have done is done by now. (JetStream acknowledged the reports on publish.)
    eventually(&operator, &s(), Duration::from_secs(10), "the 24 requests are refused", |st| {
        st.rejected.get("bad_reply").copied().unwrap_or(0) >= 24
    })
    .await;

    assert_eq!(stream_count(&js, &s().job_loss("job-b")).await, 20, "job-b's reports were purged");
    let state = bucket(&js, "slaq_state").await;
    assert_eq!(state.get("job.job-b"), Some(&spec_b), "job-b's saved spec was overwritten or purged");
    let lease = bucket(&js, "slaq_lease").await;
    let holder = |v: &bytes::Bytes| serde_json::from_slice::<serde_json::Value>(v).ok().map(|h| h["term"].clone());
    assert_eq!(lease.get("leader").and_then(holder), holder(&lease_before), "the lease was written");
    let st = wait_status(&operator, &s()).await;
    assert_eq!(st.term, term, "the leader was deposed");
    assert!(st.jobs.iter().any(|j| j.job == "job-b" && j.points == 20), "{:?}", st.jobs);
    // Nothing the scheduler said reached w2's assign subject but assignments. (JetStream's own
    // acknowledgement of a report does reach it: a fixed JSON no job chooses, which an agent
    // drops as undecodable.)
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(100), w2_assign.next()).await {
        let answer = protocol::decode::<Ack>(Encoding::MsgPack, &m.payload, "ack")
            .or_else(|_| protocol::decode::<Ack>(Encoding::Json, &m.payload, "ack"));
        assert!(answer.is_err(), "the scheduler answered on w2's assign subject: {answer:?}");
    }
    // Every request with such a reply subject was refused, unanswered: six subjects, each
    // through a job hello (valid and malformed), a worker hello and a status request. (Loss
    // reports and byes are read from the stream, whose reply subjects are JetStream's.)
    let refused = st.rejected.get("bad_reply").copied().unwrap_or(0);
    assert!(refused >= 6 * 4, "refused {refused} of 24: {:?}", st.rejected);
}

/// #16.2: a job published on its own subject with `Nats-Msg-Id: <other-job>:<n>`, and the other
/// job's reports with those ids were acknowledged as duplicates and lost (for the stream's
/// two-minute window). JetStream de-duplicates ids stream-wide and cannot bind them to a
/// subject, so: the window is the server's smallest (100 ms), the scheduler's per-job
/// idempotence de-duplicates, and the contract's ids carry a token of the publisher's run that
/// no other job can guess (`<job>:<iter>:<token>`; the Python client also sends again under a
/// fresh id a report whose first publish is called a duplicate).
#[tokio::test]
async fn a_job_cannot_squat_another_jobs_message_ids() {
    let nats = NatsServer::start_with_config(Path::new(CONF));
    let settings = format!("{}\n[state]\nmode = \"jetstream\"\n{SCHEDULER_AUTH}", fast_settings(""));
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let operator = connect_as(&nats.url, "operator").await;
    wait_status(&operator, &s()).await;
    let job_a = connect_as(&nats.url, "job-a").await;
    let job_b = connect_as(&nats.url, "job-b").await;
    hello(&job_a, &JobSpec::new("job-a")).await;
    hello(&job_b, &JobSpec::new("job-b")).await;
    let (js_a, js_b) = (async_nats::jetstream::new(job_a.clone()), async_nats::jetstream::new(job_b.clone()));
    let publish = |js: async_nats::jetstream::Context, job: &'static str, iter: u64, id: String| async move {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id.as_str());
        let payload = protocol::encode(Encoding::MsgPack, &loss_report(job, iter)).unwrap();
        js.publish_with_headers(s().job_loss(job), headers, payload.into()).await.unwrap().await.expect("acknowledged")
    };
    // job-a takes the ids job-b would use under the old contract, and then some.
    for iter in 1..=10u64 {
        for id in [format!("job-b:{iter}"), format!("job-b:{iter}:0")] {
            publish(js_a.clone(), "job-a", iter, id).await;
        }
    }
    let mut duplicates = Vec::new();
    // job-b under the contract: its ids carry its own run's token.
    let token = format!("{:016x}", (std::process::id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for iter in 1..=5u64 {
        let ack = publish(js_b.clone(), "job-b", iter, format!("job-b:{iter}:{token}")).await;
        if ack.duplicate {
            duplicates.push(iter);
        }
    }
    // And with the old, guessable ids, once the (smallest) window is past.
    tokio::time::sleep(Duration::from_millis(250)).await;
    for iter in 6..=10u64 {
        let ack = publish(js_b.clone(), "job-b", iter, format!("job-b:{iter}")).await;
        if ack.duplicate {
            duplicates.push(iter);
        }
    }
    assert!(duplicates.is_empty(), "job-b's reports {duplicates:?} were taken for job-a's");
    eventually(&operator, &s(), Duration::from_secs(10), "job-b has its 10 points", |st| {
        st.jobs.iter().any(|j| j.job == "job-b" && j.points == 10)
    })
    .await;
    // A re-sent report is still harmless: the stream keeps it, the job counts it a duplicate.
    publish(js_b.clone(), "job-b", 10, "job-b:10:again".into()).await;
    let st = eventually(&operator, &s(), Duration::from_secs(10), "the re-send is counted", |st| {
        st.rejected.get("duplicate").copied().unwrap_or(0) >= 1
    })
    .await;
    assert!(st.jobs.iter().any(|j| j.job == "job-b" && j.points == 10));
}

/// #16.3: one hello with `min_workers = 1024` took every worker for the rest of the run.
#[tokio::test]
async fn a_huge_min_workers_takes_no_more_than_a_fair_share() {
    let nats = NatsServer::start_with_config(Path::new(CONF));
    let _scheduler = Scheduler::start(&nats.url, &format!("{}{SCHEDULER_AUTH}", fast_settings("")));
    let operator = connect_as(&nats.url, "operator").await;
    wait_status(&operator, &s()).await;
    let job_a = connect_as(&nats.url, "job-a").await;
    let job_b = connect_as(&nats.url, "job-b").await;
    let w1 = connect_as(&nats.url, "w1").await;
    let w2 = connect_as(&nats.url, "w2").await;
    let _b1 = workers(&w1, &["w1".to_string()]).await;
    let _b2 = workers(&w2, &["w2".to_string()]).await;
    hello(&job_a, &JobSpec { min_workers: 1024, ..JobSpec::new("job-a") }).await;
    hello(&job_b, &JobSpec { min_workers: 1, ..JobSpec::new("job-b") }).await;
    report(&job_a, "job-a", 1..=10, |k| 1.0 / k as f64).await;
    report(&job_b, "job-b", 1..=10, |k| 1.0 / k as f64).await;
    // Two workers, two jobs: job-b's own minimum (1) is within its fair share and is honoured.
    eventually(&operator, &s(), Duration::from_secs(10), "each job holds one worker", |st| {
        st.epoch >= 3 && workers_of(st, "job-a") == 1 && workers_of(st, "job-b") == 1
    })
    .await;
}

/// #16.4: the reports stream had no message-size cap (1 MB messages, 512 MB of disk per job).
#[tokio::test]
async fn the_reports_stream_refuses_oversized_messages() {
    let nats = NatsServer::start_with_config(Path::new(CONF));
    let settings = format!("{}\n[state]\nmode = \"jetstream\"\n{SCHEDULER_AUTH}", fast_settings(""));
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let operator = connect_as(&nats.url, "operator").await;
    wait_status(&operator, &s()).await;
    let job_a = connect_as(&nats.url, "job-a").await;
    hello(&job_a, &JobSpec::new("job-a")).await;
    let js_a = async_nats::jetstream::new(job_a.clone());
    let big = vec![b'x'; 100 * 1024];
    let ack = js_a.publish(s().job_loss("job-a"), big.into()).await.unwrap().await;
    assert!(ack.is_err(), "the stream kept a 100 KB message: {ack:?}");
    let js = inspector(&nats.url).await;
    let mut stream = js.get_stream("slaq_reports").await.unwrap();
    let config = stream.info().await.unwrap().config.clone();
    assert!(config.max_message_size > 0 && config.max_message_size <= 64 * 1024, "{config:?}");
    assert_eq!(config.max_messages_per_subject, 512);
}

/// #16.5: without auth, a forged assignment with `term = 2^64 − 1` locked a real agent: it
/// ignored every later real assignment.
#[tokio::test]
async fn a_forged_huge_term_does_not_lock_an_agent() {
    let nats = NatsServer::start_jetstream();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("\n[state]\nmode = \"jetstream\"\n"));
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let dir = temp_dir("forged-term");
    let out = dir.join("runs.txt");
    let config = slaq::agent::AgentConfig {
        beat_every: Duration::from_millis(200),
        exec: Some(format!("echo \"$SLAQ_JOB $SLAQ_TERM\" >> {}", out.display())),
        ..slaq::agent::AgentConfig::new(
            s(),
            WorkerSpec { worker: "w1".into(), machine: None, slots: 1, kind: None, advertise: None },
        )
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(slaq::agent::run(client(&nats.url).await, config, async move {
        let _ = stop_rx.await;
    }));
    hello(&c, &JobSpec::new("j1")).await;
    report(&c, "j1", 1..=5, |k| 1.0 / k as f64).await;
    crate::harness::wait_for_file(&out, "w1 runs j1", |t| t.contains("j1 ")).await;
    let forged = WorkerAssignment {
        worker: "w1".into(),
        epoch: 1,
        job: Some("forged".into()),
        role: Default::default(),
        hello_again: false,
        term: Some(u64::MAX),
        launch: None,
        command: None,
        stop_grace_ms: None,
        reclaim_grace_ms: None,
    };
    bus::publish(&c, s().worker_assign("w1"), Encoding::MsgPack, &forged).await.unwrap();
    c.flush().await.unwrap();
    // The real scheduler moves w1 to j2 (the agent handles the forged assignment first: its
    // messages come in order).
    bye(&c, "j1").await;
    hello(&c, &JobSpec::new("j2")).await;
    report(&c, "j2", 1..=5, |k| 1.0 / k as f64).await;
    let text = crate::harness::wait_for_file(&out, "w1 follows the real scheduler to j2", |t| t.contains("j2 ")).await;
    assert!(!text.contains("forged"), "the forged assignment ran: {text}");
    let _ = stop_tx.send(());
}

// ---------------------------------------------------------------------------------------------
// Faults.

/// Settings for the zombie tests: fair shares, a 3-second idle timeout.
fn zombie_settings(extra: &str) -> String {
    fast_settings(&format!(
        "policy = \"fair\"\nidle_job_timeout_ms = 3000\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n{extra}"
    ))
}

/// Ten jobs that said hello and reported; they say bye at `byes`, then are silent. One live
/// job reports throughout. After the idle timeout and an epoch, none of the ten is a job.
async fn no_zombies_after(
    c: &async_nats::Client,
    during: impl std::future::Future<Output = ()>,
    live: &str,
) -> Vec<String> {
    let zombies = ids("z", 10);
    for z in &zombies {
        hello(c, &JobSpec::new(z)).await;
        report(c, z, 1..=10, |k| 2.0 / k as f64).await;
    }
    during.await;
    for z in &zombies {
        bye(c, z).await;
    }
    let _ = c.flush().await;
    let _ = live;
    zombies
}

/// Waits until the scheduler knows the ten zombies-to-be with their ten points each.
async fn zombies_known(c: &async_nats::Client) {
    let zombies = ids("z", 10);
    eventually(c, &s(), Duration::from_secs(20), "the ten jobs and their reports are in", |st| {
        zombies.iter().all(|z| st.jobs.iter().any(|j| &j.job == z && j.points == 10))
    })
    .await;
}

fn live_reporter(c: &async_nats::Client, job: &str) -> Background {
    let (c, job) = (c.clone(), job.to_string());
    Background::spawn(async move {
        for iter in 1.. {
            let _ = bus::publish(&c, s().job_loss(&job), Encoding::MsgPack, &loss_report(&job, iter)).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

async fn assert_no_zombies(c: &async_nats::Client, zombies: &[String], what: &str) {
    let since = Instant::now();
    let st = eventually(c, &s(), Duration::from_secs(30), what, |st| {
        st.epoch >= 1 && !st.jobs.iter().any(|j| zombies.contains(&j.job))
    })
    .await;
    eprintln!(
        "{what}: gone {:?} after the byes; jobs now {:?}",
        since.elapsed(),
        st.jobs.iter().map(|j| &j.job).collect::<Vec<_>>()
    );
    // Past the idle timeout (3 s) and an epoch, they must be gone: 30 s is the harness's bound.
    assert!(since.elapsed() < Duration::from_secs(3 + 5), "{what}: took {:?}", since.elapsed());
}

/// #16.6: byes sent while the scheduler restarts are lost, and restored jobs never expire.
#[tokio::test]
async fn byes_sent_during_a_restart_leave_no_zombie() {
    let nats = NatsServer::start_jetstream();
    let settings = zombie_settings("");
    let scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let _beats = workers(&c, &ids("w", 8)).await;
    hello(&c, &JobSpec::new("live")).await;
    let live = live_reporter(&c, "live");
    let down = async {
        zombies_known(&c).await;
        scheduler.kill();
    };
    let zombies = no_zombies_after(&c, down, "live").await;
    let _again = Scheduler::start(&nats.url, &settings);
    assert_no_zombies(&c, &zombies, "byes during a restart").await;
    drop(live);
}

/// #16.6: byes sent while NATS itself is down.
#[tokio::test]
async fn byes_sent_during_a_nats_outage_leave_no_zombie() {
    let mut nats = NatsServer::start_jetstream();
    let settings = zombie_settings("");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let _beats = workers(&c, &ids("w", 8)).await;
    let zombies = ids("z", 10);
    for z in &zombies {
        hello(&c, &JobSpec::new(z)).await;
        report(&c, z, 1..=10, |k| 2.0 / k as f64).await;
    }
    zombies_known(&c).await;
    nats.stop();
    // Published while disconnected: the client keeps them and sends them when it reconnects.
    for z in &zombies {
        bye(&c, z).await;
    }
    nats.start_again(true);
    assert_no_zombies(&c, &zombies, "byes during an outage").await;
}

/// #16.6: byes sent during a fail-over between replicas.
#[tokio::test]
async fn byes_sent_during_a_fail_over_leave_no_zombie() {
    let nats = NatsServer::start_jetstream();
    let replica =
        |id: &str| zombie_settings(&format!("\n[ha]\nenabled = true\nlease_ms = 1000\nreplica_id = \"{id}\"\n"));
    let leader = Scheduler::start(&nats.url, &replica("a"));
    let c = client(&nats.url).await;
    eventually(&c, &s(), Duration::from_secs(20), "a leads", |st| st.leader.as_deref() == Some("a")).await;
    let _standby = Scheduler::start(&nats.url, &replica("b"));
    let _beats = workers(&c, &ids("w", 8)).await;
    let zombies = ids("z", 10);
    for z in &zombies {
        hello(&c, &JobSpec::new(z)).await;
        report(&c, z, 1..=10, |k| 2.0 / k as f64).await;
    }
    zombies_known(&c).await;
    leader.kill();
    for z in &zombies {
        bye(&c, z).await;
    }
    c.flush().await.unwrap();
    eventually(&c, &s(), Duration::from_secs(20), "b leads", |st| st.leader.as_deref() == Some("b")).await;
    assert_no_zombies(&c, &zombies, "byes during a fail-over").await;
}

/// #16.6: a job that said hello and then went silent was never forgotten.
#[tokio::test]
async fn a_job_that_said_hello_and_went_silent_is_forgotten() {
    let nats = NatsServer::start_jetstream();
    let _scheduler = Scheduler::start(&nats.url, &zombie_settings(""));
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    hello(&c, &JobSpec::new("silent")).await;
    report(&c, "silent", 1..=5, |k| 1.0 / k as f64).await;
    eventually(&c, &s(), Duration::from_secs(10), "the job is known", |st| st.jobs.iter().any(|j| j.job == "silent"))
        .await;
    let since = Instant::now();
    eventually(&c, &s(), Duration::from_secs(20), "the silent job is forgotten", |st| st.jobs.is_empty()).await;
    assert!(since.elapsed() >= Duration::from_millis(2500), "forgotten before its idle timeout");
}

/// What each worker follows: the order of the assignment and its job.
type Followed = BTreeMap<String, ((u64, u64), Option<String>)>;

/// #16.7: killed within milliseconds of an epoch that moved many workers, the restarted
/// scheduler recorded workers on one job while their agents ran another, for ever. Twenty
/// rounds; after each restart's first epochs, every agent runs the job the scheduler records.
/// What an agent runs is what it follows: the latest assignment addressed to it in
/// `(term, epoch)` order, read here from the assignments on the wire.
#[tokio::test]
async fn kill_9_after_a_moving_epoch_leaves_no_agent_on_another_job() {
    const WORKERS: usize = 1000;
    const ROUNDS: usize = 20;
    let nats = NatsServer::start_jetstream();
    let settings = "[scheduler]\npolicy = \"fair\"\nepoch_ms = 300\nworker_timeout_ms = 10000\nrefit_interval_ms = 20\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n".to_string();
    let mut scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    // What each agent follows.
    let runs: std::sync::Arc<std::sync::Mutex<Followed>> = Default::default();
    let mut published = c.subscribe(format!("{}.v1.worker.*.assign", "slaq")).await.unwrap();
    let (follow, seen) = (runs.clone(), std::sync::Arc::new(tokio::sync::Notify::new()));
    let first_seen = seen.clone();
    let follower = Background::spawn(async move {
        while let Some(m) = published.next().await {
            let Ok(a) = protocol::decode::<WorkerAssignment>(Encoding::MsgPack, &m.payload, "assignment") else {
                continue;
            };
            if a.hello_again {
                continue;
            }
            let order = (a.term.unwrap_or(0), a.epoch);
            let mut runs = follow.lock().unwrap();
            let entry = runs.entry(a.worker.clone()).or_insert(((0, 0), None));
            if order >= entry.0 {
                *entry = (order, a.job.clone());
            }
            first_seen.notify_one();
        }
    });
    let _beats = workers(&c, &ids("w", WORKERS)).await;
    for j in ["base-a", "base-b"] {
        hello(&c, &JobSpec::new(j)).await;
    }
    let status = |c: async_nats::Client| async move {
        bus::request::<_, StatusSnapshot>(&c, s().ctl_status(), Encoding::MsgPack, &(), Duration::from_secs(2)).await
    };
    eventually(&c, &s(), Duration::from_secs(30), "every worker busy", |st| {
        st.num_workers == WORKERS && !st.truncated && st.workers.iter().all(|w| w.job.is_some())
    })
    .await;
    // Three moments to die at, in turn: at the first saved assignment of a moving epoch, at the
    // first published one, and when the epoch's summary is out.
    let mut saved = c.subscribe("$KV.slaq_state.workers.>").await.unwrap();
    let mut epochs = c.subscribe(s().ctl_epoch()).await.unwrap();
    let mut mismatched_rounds = Vec::new();
    for round in 0..ROUNDS {
        while tokio::time::timeout(Duration::from_millis(1), saved.next()).await.is_ok() {}
        while tokio::time::timeout(Duration::from_millis(1), epochs.next()).await.is_ok() {}
        // Two jobs come (even rounds) or go (odd rounds): a third of the workers move.
        let extra = [format!("x{}a", round / 2), format!("x{}b", round / 2)];
        for j in &extra {
            if round % 2 == 0 {
                hello(&c, &JobSpec::new(j)).await;
            } else {
                bye(&c, j).await;
            }
        }
        c.flush().await.unwrap();
        let wait = Duration::from_secs(10);
        match round % 3 {
            0 => drop(tokio::time::timeout(wait, saved.next()).await.unwrap()),
            1 => tokio::time::timeout(wait, seen.notified()).await.unwrap(),
            _ => loop {
                let m = tokio::time::timeout(wait, epochs.next()).await.unwrap().unwrap();
                let e: EpochSummary = protocol::decode(Encoding::MsgPack, &m.payload, "epoch").unwrap();
                if e.workers_moved > 0 {
                    break;
                }
            },
        }
        scheduler.kill();
        scheduler = Scheduler::start(&nats.url, &settings);
        eventually(&c, &s(), Duration::from_secs(30), "the restarted scheduler runs", |st| st.epoch >= 2).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        let wrong = loop {
            let Ok(st) = status(c.clone()).await else { continue };
            let runs = runs.lock().unwrap().clone();
            let wrong: Vec<(String, Option<String>, Option<String>)> = st
                .workers
                .iter()
                .filter_map(|w| {
                    let follows = runs.get(&w.worker).and_then(|r| r.1.clone());
                    (w.job != follows).then(|| (w.worker.clone(), w.job.clone(), follows))
                })
                .collect();
            if wrong.is_empty() || Instant::now() > deadline {
                break wrong;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if !wrong.is_empty() {
            eprintln!(
                "round {round}: {} agents run another job than recorded, e.g. {:?}",
                wrong.len(),
                &wrong[..wrong.len().min(3)]
            );
            mismatched_rounds.push(round);
        }
    }
    drop(follower);
    assert!(mismatched_rounds.is_empty(), "rounds with agents on another job: {mismatched_rounds:?} of {ROUNDS}");
}

/// #16.7: an agent that runs another job than the scheduler recorded (its assignment lost,
/// here overtaken by another of the same term) says so in its heartbeat and is told again.
#[tokio::test]
async fn an_agent_whose_heartbeat_shows_another_job_is_told_again() {
    let nats = NatsServer::start_jetstream();
    let scheduler = crate::harness::InProcessScheduler::start(
        &nats.url,
        &fast_settings("policy = \"fair\"\n\n[state]\nmode = \"jetstream\"\n"),
    );
    let c = client(&nats.url).await;
    let dir = temp_dir("retell");
    let out = dir.join("runs.txt");
    let config = slaq::agent::AgentConfig {
        beat_every: Duration::from_millis(200),
        exec: Some(format!("echo \"$SLAQ_JOB\" >> {}", out.display())),
        ..slaq::agent::AgentConfig::new(
            s(),
            WorkerSpec { worker: "w1".into(), machine: None, slots: 1, kind: None, advertise: None },
        )
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(slaq::agent::run(client(&nats.url).await, config, async move {
        let _ = stop_rx.await;
    }));
    hello(&c, &JobSpec::new("j1")).await;
    crate::harness::wait_for_file(&out, "w1 runs j1", |t| t.lines().last() == Some("j1")).await;
    // An assignment of the scheduler's own term and epoch, to a job it never gave w1: as if the
    // scheduler's own later assignment were lost after it.
    let st = wait_status(&c, &s()).await;
    let stray = WorkerAssignment {
        worker: "w1".into(),
        epoch: st.epoch,
        job: Some("elsewhere".into()),
        role: Default::default(),
        hello_again: false,
        term: st.term,
        launch: None,
        command: None,
        stop_grace_ms: None,
        reclaim_grace_ms: None,
    };
    bus::publish(&c, s().worker_assign("w1"), Encoding::MsgPack, &stray).await.unwrap();
    crate::harness::wait_for_file(&out, "w1 runs the stray job", |t| t.contains("elsewhere")).await;
    // Its heartbeats say so; within a couple of seconds it is told j1 again.
    crate::harness::wait_for_file(&out, "w1 is told j1 again", |t| t.lines().last() == Some("j1")).await;
    assert!(scheduler.handle.metrics.assignment_mismatches.get() >= 1);
    let _ = stop_tx.send(());
}

/// #16.8: a leader paused (SIGSTOP) past its lease and its workers' timeout, then resumed, ran
/// catch-up epochs, overwrote assignments and deleted every worker; the next leader restored
/// none. Now nothing of the old term lands and the new leader keeps every worker.
#[tokio::test]
async fn a_paused_and_resumed_leader_writes_nothing_and_the_new_leader_keeps_every_worker() {
    let nats = NatsServer::start_jetstream();
    let replica = |id: &str| {
        format!(
            "[scheduler]\npolicy = \"fair\"\nepoch_ms = 200\nworker_timeout_ms = 3000\nrefit_interval_ms = 20\n\n\
             [state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n\n[ha]\nenabled = true\nlease_ms = 1000\nreplica_id = \"{id}\"\n"
        )
    };
    let a = Scheduler::start(&nats.url, &replica("a"));
    let c = client(&nats.url).await;
    let led = eventually(&c, &s(), Duration::from_secs(20), "a leads", |st| st.leader.as_deref() == Some("a")).await;
    let _b = Scheduler::start(&nats.url, &replica("b"));
    let names = ids("w", 6);
    let _beats = workers(&c, &names).await;
    for j in ["j1", "j2"] {
        hello(&c, &JobSpec::new(j)).await;
    }
    let reporters = [live_reporter(&c, "j1"), live_reporter(&c, "j2")];
    eventually(&c, &s(), Duration::from_secs(20), "every worker busy under a", |st| {
        st.leader.as_deref() == Some("a") && st.num_workers == 6 && st.workers.iter().all(|w| w.job.is_some())
    })
    .await;
    a.pause();
    let paused = Instant::now();
    let taken = eventually(&c, &s(), Duration::from_secs(20), "b leads", |st| st.leader.as_deref() == Some("b")).await;
    assert!(taken.term > led.term);
    // Past a's worker timeout (3 s) too.
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(paused.elapsed())).await;
    let mut assigns = c.subscribe(format!("{}.v1.worker.*.assign", "slaq")).await.unwrap();
    // Every state write from now on, with the term of its writer.
    let mut writes = c.subscribe("$KV.slaq_state.>").await.unwrap();
    c.flush().await.unwrap();
    a.resume();
    // Resumed, a finds its lease gone and says so; what it might still have sent after that
    // would be on the wire within the next moment.
    let resumed = Instant::now();
    while !a.log_text().contains("lost the lease") {
        assert!(resumed.elapsed() < Duration::from_secs(10), "a never noticed it lost the lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // No assignment of a's term was published after it resumed.
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(50), assigns.next()).await {
        let asg: WorkerAssignment = protocol::decode(Encoding::MsgPack, &m.payload, "assignment").unwrap();
        assert!(asg.term >= taken.term, "an assignment of the old term after it resumed: {asg:?}");
    }
    // No state write of a's term landed either.
    let mut seen = 0;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(50), writes.next()).await {
        let term = m.headers.as_ref().and_then(|h| h.get(slaq::bus::durable::TERM_HEADER)).map(|v| v.to_string());
        let term: Option<u64> = term.and_then(|t| t.parse().ok());
        assert!(term >= taken.term, "a state write of the old term after it resumed: {} (term {term:?})", m.subject);
        seen += 1;
    }
    eprintln!("{seen} state writes after the old leader resumed, all of the new term");
    // The state holds every worker, each assigned as the new leader has it.
    let st = eventually(&c, &s(), Duration::from_secs(5), "b still leads with every worker", |st| {
        st.leader.as_deref() == Some("b") && st.num_workers == 6
    })
    .await;
    let js = async_nats::jetstream::new(c.clone());
    let state = bucket(&js, "slaq_state").await;
    let saved = crate::harness::saved_workers(&state);
    assert_eq!(saved.len(), 6, "saved workers after a resumed: {:?}", saved.keys());
    for w in &st.workers {
        let job = saved.get(&w.worker).map(|s| s.job.clone());
        assert_eq!(job, Some(w.job.clone()), "{}'s saved job differs from b's view", w.worker);
    }
    drop(reporters);
}

/// #16.8: the state writer, alone: it writes only while its fence holds, carries its term,
/// never writes over another writer's value without a lease renewed since it saw the conflict,
/// and drops its queue once deposed.
#[tokio::test]
async fn the_state_writer_writes_only_under_its_lease_and_never_over_another_writer() {
    use slaq::bus::durable::{Durable, DurableSettings, TERM_HEADER};
    use slaq::bus::lease::Fence;
    let nats = NatsServer::start_jetstream();
    let c = client(&nats.url).await;
    let lease = Duration::from_millis(400);
    let fence = Fence::held(Instant::now(), lease);
    let d = Durable::open(&c, &s(), &DurableSettings::default(), fence.clone()).await.unwrap().expect("JetStream");
    d.set_term(7);
    let kv = async_nats::jetstream::new(c.clone()).get_key_value("slaq_state").await.unwrap();
    let mut writes = c.subscribe("$KV.slaq_state.>").await.unwrap();
    c.flush().await.unwrap();
    let spec =
        |w: &str| WorkerSpec { worker: w.into(), machine: Some("m".into()), slots: 1, kind: None, advertise: None };
    let shard_key = |w: &str| format!("workers.{}", slaq::bus::durable::worker_shard(w));
    let saved = |w: &'static str| {
        let (kv, key) = (kv.clone(), shard_key(w));
        async move {
            let value = kv.get(key).await.unwrap()?;
            let shard = slaq::bus::durable::decode_worker_shard(&value).expect("a shard");
            shard.into_iter().find(|s| s.spec.worker == w).map(|s| s.spec)
        }
    };
    // Under the lease: written, with the writer's term.
    d.save_worker(&spec("w1"));
    let m = tokio::time::timeout(Duration::from_secs(5), writes.next()).await.unwrap().unwrap();
    assert_eq!(m.headers.as_ref().and_then(|h| h.get(TERM_HEADER)).map(|v| v.to_string()).as_deref(), Some("7"));
    let counters = d.counters();
    // The lease lapses (no renewal for its span): nothing is written...
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    assert!(!fence.holds());
    let failed = counters.failed.load(std::sync::atomic::Ordering::Relaxed);
    d.save_worker(&spec("w2"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(saved("w2").await, None, "written while the lease was not held");
    // Waiting for the lease is no failure: the write is kept, not tried and backed off.
    assert_eq!(counters.failed.load(std::sync::atomic::Ordering::Relaxed), failed);
    // ...until it is renewed.
    fence.renewed(Instant::now(), lease);
    wait_until("w2 written after the renewal", || async { saved("w2").await.is_some() }).await;
    // Someone else writes w1: this writer's next write of it is a conflict, not an overwrite,
    // until the lease is renewed after it; then it reads the key again and writes.
    let intruder = vec![slaq::bus::durable::SavedWorker { spec: WorkerSpec { slots: 9, ..spec("w1") }, job: None }];
    kv.put(shard_key("w1"), protocol::encode(Encoding::MsgPack, &intruder).unwrap().into()).await.unwrap();
    fence.renewed(Instant::now(), Duration::from_secs(5));
    d.save_worker(&WorkerSpec { slots: 2, ..spec("w1") });
    let conflicts = || async { counters.conflicts.load(std::sync::atomic::Ordering::Relaxed) >= 1 };
    wait_until("the write conflicts", conflicts).await;
    // Past any backoff, still not written over: the lease was not renewed since.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(saved("w1").await.map(|s| s.slots), Some(9), "written over another writer");
    fence.renewed(Instant::now(), lease);
    wait_until("written once the lease is renewed", || async { saved("w1").await.map(|s| s.slots) == Some(2) }).await;
    // Deposed: the queue is dropped, and so is every later write.
    fence.depose();
    d.save_worker(&spec("w3"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(saved("w3").await, None);
    assert!(counters.fenced.load(std::sync::atomic::Ordering::Relaxed) >= 1);
}

/// #16.8: the allocator runs epochs, and the publisher publishes, only while the fence holds.
#[tokio::test]
async fn no_epoch_and_no_assignment_while_the_lease_is_not_held() {
    use slaq::bus::lease::Fence;
    let nats = NatsServer::start();
    let lease = Duration::from_millis(600);
    let fence = Fence::held(Instant::now(), lease);
    let scheduler = crate::harness::InProcessScheduler::start_fenced(
        &nats.url,
        &fast_settings("policy = \"fair\"\n\n[state]\nmode = \"none\"\n"),
        fence.clone(),
    );
    let c = client(&nats.url).await;
    let mut assigns = c.subscribe(format!("{}.v1.worker.*.assign", "slaq")).await.unwrap();
    let _beats = workers(&c, &ids("w", 2)).await;
    hello(&c, &JobSpec::new("j1")).await;
    tokio::time::timeout(Duration::from_secs(5), assigns.next()).await.expect("an assignment under the lease");
    // The lease lapses.
    tokio::time::sleep(lease).await;
    let epochs = scheduler.handle.epochs().await.len();
    hello(&c, &JobSpec::new("j2")).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(scheduler.handle.epochs().await.len(), epochs, "epochs ran without the lease");
    assert!(scheduler.handle.metrics.epochs_skipped.get() >= 3);
    // Nor anything else: an unknown worker's heartbeat is not answered (with `hello_again`).
    bus::publish(&c, s().worker_beat("ghost"), Encoding::MsgPack, &Heartbeat::new("ghost")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(50), assigns.next()).await {
        let a: WorkerAssignment = protocol::decode(Encoding::MsgPack, &m.payload, "assignment").unwrap();
        assert!(a.job.as_deref() != Some("j2") && !a.hello_again, "published without the lease: {a:?}");
    }
    // Renewed: epochs resume, one period apart (no burst of the ones missed).
    fence.renewed(Instant::now(), Duration::from_secs(60));
    tokio::time::timeout(Duration::from_secs(5), assigns.next()).await.expect("epochs resume");
    let resumed = scheduler.handle.epochs().await.len() - epochs;
    assert!(resumed <= 3, "{resumed} epochs at once after the lease came back");
}

/// #16.9: state writes that failed (a NATS restart) were dropped, leaving stale `assign.*`.
#[tokio::test]
async fn state_writes_that_fail_in_a_nats_restart_are_retried() {
    const WORKERS: usize = 200;
    let mut nats = NatsServer::start_jetstream();
    let settings = "[scheduler]\npolicy = \"fair\"\nepoch_ms = 200\nworker_timeout_ms = 15000\nrefit_interval_ms = 20\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n".to_string();
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let _beats = workers(&c, &ids("w", WORKERS)).await;
    hello(&c, &JobSpec::new("base")).await;
    eventually(&c, &s(), Duration::from_secs(20), "every worker busy", |st| {
        st.num_workers == WORKERS && !st.truncated && st.workers.iter().all(|w| w.job.is_some())
    })
    .await;
    let mut epochs = c.subscribe(s().ctl_epoch()).await.unwrap();
    for j in ["m1", "m2", "m3"] {
        hello(&c, &JobSpec::new(j)).await;
    }
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), epochs.next()).await.unwrap().unwrap();
        let e: EpochSummary = protocol::decode(Encoding::MsgPack, &m.payload, "epoch").unwrap();
        if e.workers_moved > 0 {
            break;
        }
    }
    nats.stop();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nats.start_again(true);
    let js = async_nats::jetstream::new(c.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = wait_status(&c, &s()).await;
        let saved = crate::harness::saved_workers(&bucket(&js, "slaq_state").await);
        let stale: Vec<&str> = st
            .workers
            .iter()
            .filter(|w| saved.get(&w.worker).map(|s| s.job.clone()) != Some(w.job.clone()))
            .map(|w| w.worker.as_str())
            .collect();
        if stale.is_empty() && st.num_workers == WORKERS {
            break;
        }
        assert!(Instant::now() < deadline, "{} stale assign.* entries: {stale:?}", stale.len());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// #16.10: a job refused at `max_jobs` was still saved, and restored in place of a running one.
#[tokio::test]
async fn jobs_refused_at_max_jobs_are_neither_saved_nor_restored() {
    let nats = NatsServer::start_jetstream();
    let settings = fast_settings("max_jobs = 5\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n");
    let scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let real = ids("r", 5);
    for j in &real {
        hello(&c, &JobSpec::new(j)).await;
    }
    let mut refused = 0;
    for j in ids("a", 20) {
        let ack: Ack =
            bus::request(&c, s().job_hello(&j), Encoding::MsgPack, &JobSpec::new(&j), Duration::from_secs(5))
                .await
                .unwrap();
        refused += usize::from(!ack.ok);
    }
    assert_eq!(refused, 20);
    // The refused hellos were answered after nothing was queued for them; the admitted ones are
    // saved once the writer has been through its queue.
    let js = async_nats::jetstream::new(c.clone());
    let job_keys =
        || async { bucket(&js, "slaq_state").await.into_keys().filter(|k| k.starts_with("job.")).collect::<Vec<_>>() };
    let deadline = Instant::now() + Duration::from_secs(10);
    while job_keys().await.len() < 5 {
        assert!(Instant::now() < deadline, "the admitted jobs were never saved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let saved = job_keys().await;
    scheduler.kill();
    let _again = Scheduler::start(&nats.url, &settings);
    let st = eventually(&c, &s(), Duration::from_secs(20), "restarted", |st| st.epoch >= 1).await;
    let jobs: Vec<&str> = st.jobs.iter().map(|j| j.job.as_str()).collect();
    assert_eq!(jobs, real.iter().map(String::as_str).collect::<Vec<_>>(), "restored");
    assert_eq!(saved.len(), 5, "saved: {saved:?}");
}

/// #16.11: the first burst of reports to a job registered by a report was cut at the actor's
/// default queue (16) until the actor first ran.
#[tokio::test]
async fn the_first_burst_to_a_job_registered_by_its_reports_is_kept() {
    let nats = NatsServer::start();
    let settings = fast_settings("job_threads = 1\n\n[state]\nmode = \"none\"\n");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let jobs = ids("burst", 10);
    for j in &jobs {
        for iter in 1..=200u64 {
            bus::publish(&c, s().job_loss(j), Encoding::MsgPack, &loss_report(j, iter)).await.unwrap();
        }
    }
    c.flush().await.unwrap();
    let st = eventually(&c, &s(), Duration::from_secs(20), "every report counted", |st| {
        let accepted = st.accepted.get("loss").copied().unwrap_or(0);
        let rejected: u64 = st.rejected.values().sum();
        accepted + rejected >= 2000
    })
    .await;
    assert_eq!(st.rejected.get("overloaded").copied().unwrap_or(0), 0, "{:?}", st.rejected);
    // Each job's bid then shows its 200 points.
    eventually(&c, &s(), Duration::from_secs(10), "every job has its 200 points", |st| {
        st.jobs.len() == 10 && st.jobs.iter().all(|j| j.points == 200)
    })
    .await;
}

/// #16.12: a restart logged a line per job it could not restore, every bye logged at INFO, and
/// a heartbeat from an unknown worker counted as both accepted and rejected.
#[tokio::test]
async fn logs_stay_short_and_unknown_beats_count_once() {
    let nats = NatsServer::start_jetstream();
    let settings =
        fast_settings("max_jobs = 5\n\n[nats]\nsubscription_capacity = 16\n\n[state]\nmode = \"jetstream\"\n");
    let first = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    first.kill();
    // 200 saved jobs (as a bigger scheduler left them) for a scheduler that takes 5.
    let js = async_nats::jetstream::new(c.clone());
    let kv = js.get_key_value("slaq_state").await.unwrap();
    for j in ids("saved", 200) {
        kv.put(format!("job.{j}"), protocol::encode(Encoding::MsgPack, &JobSpec::new(&j)).unwrap().into())
            .await
            .unwrap();
    }
    let scheduler = Scheduler::start_with_env(&nats.url, &settings, &[("RUST_LOG", "slaq=info")]);
    let st = wait_status(&c, &s()).await;
    assert_eq!(st.num_jobs, 5);
    // Byes: information for debugging, not a line each at INFO.
    for j in st.jobs.iter().map(|j| j.job.clone()) {
        bye(&c, &j).await;
    }
    // Heartbeats of workers the scheduler does not know: refused, not accepted.
    for w in ids("ghost", 10) {
        bus::publish(&c, s().worker_beat(&w), Encoding::MsgPack, &Heartbeat::new(&w)).await.unwrap();
    }
    c.flush().await.unwrap();
    // A flood the scheduler's 16-message subscription buffer cannot hold: NATS drops, and the
    // scheduler counts every drop but logs them once every 10 s.
    let flood = protocol::encode(Encoding::MsgPack, &Heartbeat::new("ghost000")).unwrap();
    for _ in 0..20_000 {
        c.publish(s().worker_beat("ghost000"), flood.clone().into()).await.unwrap();
    }
    c.flush().await.unwrap();
    let st = eventually(&c, &s(), Duration::from_secs(10), "the byes and beats are counted", |st| {
        st.num_jobs == 0 && st.rejected.get("unknown_worker").copied().unwrap_or(0) >= 10
    })
    .await;
    let dropped = st.rejected.get("dropped_by_client").copied().unwrap_or(0);
    assert!(dropped > 0, "the flood overflowed nothing: {:?}", st.rejected);
    assert_eq!(st.accepted.get("worker_beat").copied().unwrap_or(0), 0, "{:?}", st.accepted);
    let log = scheduler.log_text();
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    // The operator is told, once, that jobs were left out (earlier: a line per job).
    let not_restored = lines("cannot restore") + lines("not restored");
    assert!((1..=2).contains(&not_restored), "{not_restored} lines about jobs not restored");
    assert!(lines("slow consumer") <= 2, "{} slow-consumer lines for {dropped} drops", lines("slow consumer"));
    let info_byes = log.lines().filter(|l| l.contains(" INFO ") && l.contains("job left")).count();
    assert_eq!(info_byes, 0, "a line per bye at INFO");
}

/// #16.6: a silent job's stale gain kept winning workers. A job with a steep curve goes silent
/// while holding most workers; within a few seconds its workers go to the live job (it keeps
/// at most its floor).
#[tokio::test]
async fn a_silent_jobs_stale_gain_wins_no_workers() {
    let nats = NatsServer::start();
    let settings = fast_settings("idle_job_timeout_ms = 60000\nstale_job_ms = 2000\n\n[state]\nmode = \"none\"\n");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let _beats = workers(&c, &ids("w", 8)).await;
    hello(&c, &JobSpec::new("steep")).await;
    hello(&c, &JobSpec::new("flat")).await;
    report(&c, "steep", 1..=30, |k| 10.0 * (-0.02 * k as f64).exp()).await;
    let flat = {
        let c = c.clone();
        Background::spawn(async move {
            for iter in 1.. {
                let r = LossReport { loss: 1.0 + 1e-3 / iter as f64, ..loss_report("flat", iter) };
                let _ = bus::publish(&c, s().job_loss("flat"), Encoding::MsgPack, &r).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    eventually(&c, &s(), Duration::from_secs(20), "the steep job holds most workers", |st| {
        workers_of(st, "steep") >= 5
    })
    .await;
    // It goes silent (its process died, its bye lost): within the stale period (2 s here) and a
    // few epochs, its workers go to the live job.
    eventually(&c, &s(), Duration::from_secs(20), "the silent job's workers go to the live job", |st| {
        workers_of(st, "steep") <= 2 && workers_of(st, "flat") >= 6
    })
    .await;
    drop(flat);
}

/// An answered job hello is never lost: the scheduler answers once the job's spec is in the
/// bucket, which a new leader and a partition's new owner restore from. While the bucket
/// refuses new values the hello goes unanswered; once it takes them, the hello asked again is
/// answered and the spec is there.
#[tokio::test]
async fn a_jobs_hello_is_answered_only_once_its_spec_is_saved() {
    let nats = NatsServer::start_jetstream();
    let settings = fast_settings("[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    hello(&c, &JobSpec::new("first")).await;
    let js = async_nats::jetstream::new(c.clone());
    assert!(bucket(&js, "slaq_state").await.contains_key("job.first"));
    // The bucket refuses any new value.
    let mut stream = js.get_stream("KV_slaq_state").await.unwrap();
    let info = stream.info().await.unwrap().clone();
    let mut config = info.config.clone();
    config.max_messages = i64::try_from(info.state.messages).unwrap();
    js.update_stream(&config).await.unwrap();
    let spec = JobSpec::new("late");
    let answer: Result<Ack, _> =
        bus::request(&c, s().job_hello("late"), Encoding::MsgPack, &spec, Duration::from_secs(3)).await;
    assert!(answer.is_err(), "answered before its spec was saved: {answer:?}");
    assert!(!bucket(&js, "slaq_state").await.contains_key("job.late"));
    config.max_messages = -1;
    js.update_stream(&config).await.unwrap();
    // Asked again, as a job does when not answered.
    hello(&c, &spec).await;
    assert!(bucket(&js, "slaq_state").await.contains_key("job.late"), "answered, not saved");
}
