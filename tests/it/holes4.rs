//! Regressions for the holes found from outside in round 4 (issue #40). Each runs over a real
//! nats-server: `.ci/run` runs this binary against Debian's 2.9.10 and again against a current
//! server, so each holds on both.

use std::time::{Duration, Instant};

use slaq::bus;
use slaq::protocol::{self, Encoding, JobEnd, JobSpec, StatusRequest, StatusSnapshot, Subjects};

use crate::harness::{NatsServer, Scheduler, client, fast_settings, loss_report, wait_status};

fn s() -> Subjects {
    Subjects::new("slaq").unwrap()
}

/// `SLAQ_CHURN_FULL=1`: the sizes (300 long jobs, 30 s); CI runs 150 for 10 s.
fn full() -> bool {
    std::env::var_os("SLAQ_CHURN_FULL").is_some()
}

async fn status_of(c: &async_nats::Client, prefix: &str) -> StatusSnapshot {
    let request = StatusRequest { jobs: Some(prefix.to_string()), limit: None, ..StatusRequest::default() };
    bus::request(c, s().ctl_status(), Encoding::MsgPack, &request, Duration::from_secs(10)).await.expect("status")
}

fn encode<T: serde::Serialize>(message: &T) -> bytes::Bytes {
    protocol::encode(Encoding::MsgPack, message).expect("encodes").into()
}

/// What a job that crashes at start-up (or a tiny one) sends, back to back on one connection:
/// a hello whose answer it does not wait for, `reports` reports and a bye; `again`: then a
/// hello of a new job of the same id and one report of it (which stays).
async fn short_job(c: &async_nats::Client, job: &str, reports: u64, again: bool) {
    let hello = encode(&JobSpec::new(job));
    c.publish_with_reply(s().job_hello(job), c.new_inbox(), hello.clone()).await.unwrap();
    for iter in 1..=reports {
        c.publish(s().job_loss(job), encode(&loss_report(job, iter))).await.unwrap();
    }
    let end = JobEnd { job: job.into(), reason: protocol::EndReason::Finished };
    c.publish(s().job_bye(job), encode(&end)).await.unwrap();
    if again {
        c.publish_with_reply(s().job_hello(job), c.new_inbox(), hello).await.unwrap();
        c.publish(s().job_loss(job), encode(&loss_report(job, 1))).await.unwrap();
    }
}

/// #40.1: while long jobs report 4 times a second, every second 50 short jobs each publish a
/// hello (not waiting for its Ack), five reports and a bye, back to back on one connection. The
/// hello comes on core NATS and the bye through the stream, so the scheduler may read the bye
/// first: it then took the late hello for a new job of the same id, bounded by the stream's end
/// (its own bye), and the job stayed for good (250-350 of 500 on 2.15.1, 1,450 of 1,500 on
/// 2.9.10). Every short job must be gone 5 s after its bye. Beside them, 5 jobs a second do the
/// same and then say hello again at once (a new job of the same id, which never says bye):
/// each of those must still be listed, with its report.
async fn short_jobs_leave_within_5_s(settings: &str) {
    let (long_jobs, seconds) = if full() { (300, 30) } else { (150, 10) };
    let nats = NatsServer::start_jetstream();
    let scheduler = Scheduler::start(&nats.url, settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let long: Vec<String> = (0..long_jobs).map(|i| format!("long{i:03}")).collect();
    for job in &long {
        c.publish_with_reply(s().job_hello(job), c.new_inbox(), encode(&JobSpec::new(job))).await.unwrap();
    }
    let until = Instant::now() + Duration::from_secs(seconds);
    let reporter = {
        let (c, long) = (c.clone(), long.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut iter = 0;
            while Instant::now() < until {
                tick.tick().await;
                iter += 1;
                for job in &long {
                    c.publish(s().job_loss(job), encode(&loss_report(job, iter))).await.unwrap();
                }
            }
        })
    };
    let (mut short, mut again) = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < until {
        tick.tick().await;
        for _ in 0..50 {
            short_job(&c, &format!("short{short:05}"), 5, false).await;
            short += 1;
        }
        for _ in 0..5 {
            short_job(&c, &format!("again{again:05}"), 5, true).await;
            again += 1;
        }
    }
    reporter.await.unwrap();
    c.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let left = status_of(&c, "short").await;
    let restarted = status_of(&c, "again").await;
    let with_report = restarted.jobs.iter().filter(|j| j.points >= 1).count();
    eprintln!(
        "short jobs on {}: {short} short jobs, {} still listed 5 s after their bye; {again} jobs ended and \
         started again at once, {} listed ({with_report} with their new report)",
        crate::harness::nats_version(),
        left.jobs.len(),
        restarted.jobs.len(),
    );
    eprintln!("counted: accepted {:?}, rejected {:?}", left.accepted, left.rejected);
    drop(scheduler);
    assert_eq!(left.jobs.len(), 0, "short jobs listed 5 s after their bye: {:?}", left.jobs.first());
    // A job started again at once stays. Known race, left (see docs/operations.md): under
    // load the new hello can be read before the stream has stored the old bye, which then ends
    // the new job (1 run in 5 at full size: 3 of 155). A hello taken for its predecessor's
    // late one would lose nearly all of them.
    assert!(restarted.jobs.len() * 10 >= again * 9, "jobs started again after their bye must stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_jobs_that_end_at_once_leave() {
    short_jobs_leave_within_5_s(&fast_settings(
        "policy = \"fair\"\nmax_reports_per_s = 1000\nreport_burst = 1000\n\n[state]\nmode = \"jetstream\"\n",
    ))
    .await;
}

/// The same with reports of unknown jobs refused (as under the shipped auth config): the
/// short jobs' reports read before their hello are refused, and still no job stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_jobs_that_end_at_once_leave_when_reports_register_nothing() {
    short_jobs_leave_within_5_s(&fast_settings(
        "policy = \"fair\"\nmax_reports_per_s = 1000\nreport_burst = 1000\nregister_on_report = false\n\n[state]\nmode = \"jetstream\"\n",
    ))
    .await;
}

/// #40.4: under `slaq job-guard` a process the job started in the background ran with SIGHUP,
/// SIGINT, SIGTERM and SIGCHLD blocked (the guard's own set: std does not reset the mask), so
/// it could not checkpoint at a stop and lived until SIGKILL after the whole grace. Here the
/// job's command backgrounds a process that writes a marker on SIGTERM and exits; the agent's
/// grace is 30 s, and at the job's end the marker is written and every process of the job is
/// gone within 2 s.
#[tokio::test]
async fn a_background_process_of_a_job_gets_sigterm_at_a_stop() {
    use crate::holes3::{agent_with_grace, processes_of, wait_for_processes};
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("min_generation_ms = 0\n"));
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let dir = crate::harness::temp_dir("background");
    let (started, termed) = (dir.join("started"), dir.join("termed"));
    let script = dir.join("background.py");
    std::fs::write(
        &script,
        format!(
            "import pathlib, signal, sys, time\n\
             def on_term(*_):\n    pathlib.Path({termed:?}).write_text('saved')\n    sys.exit(0)\n\
             signal.signal(signal.SIGTERM, on_term)\n\
             blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])\n\
             pathlib.Path({started:?}).write_text('blocked:' + ' '.join(sorted(s.name for s in blocked)))\n\
             time.sleep(600)\n"
        ),
    )
    .unwrap();
    let line = format!("python3 {} & wait", script.display());
    let command = slaq::protocol::JobCommand::new(vec!["sh".into(), "-c".into(), line]);
    let spec = JobSpec { command: Some(command), ..JobSpec::new("background") };
    let ack: protocol::Ack =
        bus::request(&c, s().job_hello("background"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
    let _agent = agent_with_grace(&dir, &nats.url, "bg-w", 30, &[]);
    let blocked =
        crate::harness::wait_for_file(&started, "the background process runs", |t| t.starts_with("blocked:")).await;
    let running = processes_of("bg-w", &nats.url);
    let end = JobEnd { job: "background".into(), reason: protocol::EndReason::Cancelled };
    let stopped_at = Instant::now();
    bus::publish(&c, s().job_bye("background"), Encoding::MsgPack, &end).await.unwrap();
    wait_for_processes("every process of the job is gone", |p| p.is_empty(), "bg-w", &nats.url).await;
    let took = stopped_at.elapsed();
    eprintln!(
        "background process: signals blocked at start [{blocked}]; {} processes gone {took:?} after the job's end; \
         marker written: {}",
        running.len(),
        termed.exists()
    );
    assert_eq!(blocked.trim(), "blocked:", "the job's processes start with no signal blocked");
    assert!(termed.exists(), "the background process got SIGTERM and saved");
    assert!(took < Duration::from_secs(2), "gone in {took:?}, not within 2 s");
}

/// #40, tests that notice: turning the consumer's gap read off was caught by its regression
/// test in 1 run of 6 (that test depends on nats-server 2.9 skipping a message). Here the
/// consumer loses every report of one job on its way in (fail point `reports-skip`, what the
/// server's skip did), each followed by another job's: all of them must be counted, read by
/// sequence, on every run and either server.
#[tokio::test]
async fn every_report_the_consumer_loses_is_read_by_sequence() {
    let nats = NatsServer::start_jetstream();
    let settings = fast_settings(
        "policy = \"fair\"\nmax_reports_per_s = 1000\nreport_burst = 1000\n\n[state]\nmode = \"jetstream\"\n",
    );
    let _scheduler = crate::harness::InProcessScheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    // A job id of this test only: the fail point is the test process's, shared by its tests.
    let (lost, seen) = ("skipped-by-server", "read-in-order");
    fail::cfg("reports-skip", &format!("return({})", s().job_loss(lost))).unwrap();
    for job in [lost, seen] {
        let ack: protocol::Ack =
            bus::request(&c, s().job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
                .await
                .unwrap();
        assert!(ack.ok);
    }
    let per_job = 20;
    for iter in 1..=per_job {
        for job in [lost, seen] {
            bus::publish(&c, s().job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
        }
    }
    c.flush().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let points = loop {
        let st = status_of(&c, "").await;
        let points = |job: &str| st.jobs.iter().find(|j| j.job == job).map_or(0, |j| j.points);
        let found = (points(lost), points(seen));
        if found == (per_job, per_job) || Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    fail::remove("reports-skip");
    eprintln!(
        "reports the consumer lost: {} of {per_job} read by sequence ({} of the other job's read)",
        points.0, points.1
    );
    assert_eq!(points, (per_job, per_job), "reports the consumer lost were not read by sequence");
}
