//! Isolation: a flooding job loses only its own excess, garbage creates nothing, idle
//! unannounced jobs are forgotten, and status always fits in one NATS message.

use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use slaq::bus;
use slaq::protocol::{Ack, Encoding, JobSpec, StatusRequest, StatusSnapshot, Subjects};

use crate::harness::{
    Background, NatsServer, Scheduler, client, eventually, fast_settings, loss_report, temp_dir, wait_status,
};

fn report(job: &str, iter: u64) -> bytes::Bytes {
    slaq::protocol::encode(Encoding::MsgPack, &loss_report(job, iter)).unwrap().into()
}

#[tokio::test]
async fn a_flooding_job_loses_only_its_own_excess() {
    const OTHERS: usize = 1000;
    const EACH: u64 = 20;
    const FLOOD: u64 = 100_000;
    let nats = NatsServer::start_jetstream();
    let settings = fast_settings("max_reports_per_s = 200\nreport_burst = 400\n\n[state]\nmode = \"jetstream\"\n");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    let first = wait_status(&c, &s).await;
    let started = Instant::now();
    // The flood and the normal reports interleave: the flooder publishes from its own client
    // as fast as the socket allows.
    let flooder = client(&nats.url).await;
    let subject = s.job_loss("flood");
    let flood = Background::spawn(async move {
        for iter in 1..=FLOOD {
            flooder.publish(subject.clone(), report("flood", iter)).await.unwrap();
        }
        flooder.flush().await.unwrap();
    });
    for iter in 1..=EACH {
        for j in 0..OTHERS {
            let job = format!("calm{j:04}");
            c.publish(s.job_loss(&job), report(&job, iter)).await.unwrap();
        }
    }
    c.flush().await.unwrap();
    flood.join().await;
    let st = eventually(&c, &s, Duration::from_secs(60), "every calm job has all its reports", |st| {
        st.jobs.iter().filter(|j| j.job.starts_with("calm") && j.points == EACH).count() == OTHERS
    })
    .await;
    let flood_job = st.jobs.iter().find(|j| j.job == "flood").expect("the flooder is a job");
    assert!(flood_job.dropped > 0 && flood_job.points < FLOOD, "the flooder was not limited: {flood_job:?}");
    // Its excess: refused for its rate, or for its full queue (and, in JetStream, its oldest
    // reports are dropped from the stream past `report_history`): all its own.
    let own = |cause: &str| st.rejected.get(cause).copied().unwrap_or(0);
    assert_eq!(own("rate_limited") + own("overloaded"), flood_job.dropped, "{:?}", st.rejected);
    assert!(own("rate_limited") > 0);
    assert!(!st.rejected.contains_key("dropped_by_client"), "{:?}", st.rejected);
    assert!(st.jobs.iter().filter(|j| j.job != "flood").all(|j| j.dropped == 0));
    // Epochs kept their period (100 ms) through it: at least half of the expected count ran.
    let expected = started.elapsed().as_millis() as u64 / 100;
    assert!(st.epoch - first.epoch >= expected / 2, "{} epochs in {:?}", st.epoch - first.epoch, started.elapsed());
}

#[tokio::test]
async fn garbage_creates_no_job_and_no_worker_and_every_rejection_is_counted() {
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("register_on_report = false\n"));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    const N: usize = 20_000;
    let kinds = ["hello", "loss", "bye"];
    for i in 0..N {
        let id = format!("g{}", rng.random_range(0..500));
        let subject = if i % 2 == 0 {
            format!("slaq.v1.job.{id}.{}", kinds[i % 3])
        } else {
            format!("slaq.v1.worker.{id}.{}", ["hello", "beat"][i % 4 / 2])
        };
        let len = rng.random_range(0..64);
        let mut payload: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if i % 5 == 0 {
            // Mutations of a valid report: most still fail validation or name the wrong job.
            let mut valid = report("other", rng.random_range(0..u64::MAX)).to_vec();
            let at = rng.random_range(0..valid.len());
            valid[at] = rng.random();
            payload = valid;
        }
        if subject.ends_with("hello") {
            // Requests get an error Ack; do not wait for each.
            c.publish_with_reply(subject, c.new_inbox(), payload.into()).await.unwrap();
        } else {
            c.publish(subject, payload.into()).await.unwrap();
        }
    }
    c.flush().await.unwrap();
    let st = eventually(&c, &s, Duration::from_secs(30), "every message counted", |st| {
        let counted: u64 = st.rejected.values().sum::<u64>() + st.accepted.values().sum::<u64>();
        counted >= N as u64
    })
    .await;
    assert!(st.jobs.is_empty(), "garbage made jobs: {:?}", st.jobs);
    assert!(st.workers.is_empty(), "garbage made workers: {:?}", st.workers);
    assert!(st.rejected.get("undecodable").is_some_and(|&n| n > 1000), "{:?}", st.rejected);
    // A real job and worker still get through.
    let ack: Ack =
        bus::request(&c, s.job_hello("real"), Encoding::MsgPack, &JobSpec::new("real"), Duration::from_secs(5))
            .await
            .unwrap();
    assert!(ack.ok);
}

#[tokio::test]
async fn silent_jobs_are_forgotten_and_those_that_talk_are_kept() {
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("idle_job_timeout_ms = 500\n"));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let ack: Ack = bus::request(
        &c,
        s.job_hello("announced"),
        Encoding::MsgPack,
        &JobSpec::new("announced"),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(ack.ok);
    c.publish(s.job_loss("unannounced"), report("unannounced", 1)).await.unwrap();
    // The announced job goes on reporting; the other said one thing and fell silent.
    let talker = {
        let c = c.clone();
        let s = s.clone();
        Background::spawn(async move {
            for iter in 1.. {
                let _ = c.publish(s.job_loss("announced"), report("announced", iter)).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    eventually(&c, &s, Duration::from_secs(10), "both jobs exist", |st| st.jobs.len() == 2).await;
    let st = eventually(&c, &s, Duration::from_secs(10), "the unannounced job is forgotten", |st| {
        st.jobs.iter().map(|j| j.job.as_str()).collect::<Vec<_>>() == ["announced"]
    })
    .await;
    assert_eq!(st.jobs.len(), 1);
    drop(talker);
}

#[tokio::test]
async fn status_always_fits_one_message_and_can_be_filtered() {
    let dir = temp_dir("small-payload");
    let conf = dir.join("nats.conf");
    std::fs::write(&conf, "max_payload: 8192\n").unwrap();
    let nats = NatsServer::start_with_config(&conf);
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("[state]\nmode = \"none\"\n"));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    for j in 0..300 {
        let job = format!("many{j:03}");
        c.publish(s.job_loss(&job), report(&job, 1)).await.unwrap();
    }
    c.flush().await.unwrap();
    let st = eventually(&c, &s, Duration::from_secs(20), "300 jobs, answered in one cut message", |st| {
        st.num_jobs == 300 && st.truncated
    })
    .await;
    assert!(!st.jobs.is_empty() && st.jobs.len() < 300, "{} jobs listed", st.jobs.len());
    let request = StatusRequest { jobs: Some("many29".into()), limit: None, ..StatusRequest::default() };
    let narrow: StatusSnapshot =
        bus::request(&c, s.ctl_status(), Encoding::MsgPack, &request, Duration::from_secs(5)).await.unwrap();
    assert_eq!(narrow.jobs.len(), 10, "many290..many299");
    assert!(!narrow.truncated);
}
