//! Replicas that share the jobs (`[cluster] shared`, issue #19) on a real nats-server whose
//! subject mapping partitions the reports: every replica runs the job actors of the partitions
//! it holds, the leader plans on the bids they send; when a partition owner is killed (-9) the
//! others take its partitions over, the jobs come back with their history (more than the stream
//! keeps: their saved predictors), and no worker moves.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use slaq::agent::{self, AgentConfig};
use slaq::bus;
use slaq::protocol::{Ack, Encoding, JobSpec, StatusSnapshot, Subjects, WorkerSpec};

use crate::harness::{Background, NatsServer, Scheduler, client, eventually, loss_report, temp_dir};

const PARTITIONS: u32 = 8;
const JOBS: usize = 16;
const WORKERS: usize = 32;

/// A server with JetStream whose account maps each job's reports and byes to its partition.
pub(crate) fn mapped_server() -> NatsServer {
    let dir = temp_dir("shared-conf");
    let conf = dir.join("mapped.conf");
    let map = |kind: &str| {
        format!(
            "  \"slaq.v1.job.*.{kind}\": \"slaq.v1.part.{{{{partition({PARTITIONS},1)}}}}.job.{{{{wildcard(1)}}}}.{kind}\"\n"
        )
    };
    std::fs::write(&conf, format!("mappings = {{\n{}{}}}\n", map("loss"), map("bye"))).unwrap();
    NatsServer::start_with_config(&conf)
}

pub(crate) fn settings(id: &str) -> String {
    format!(
        "[scheduler]\npolicy = \"fair\"\nepoch_ms = 200\nworker_timeout_ms = 5000\nrefit_interval_ms = 20\n\n\
         [state]\nmode = \"jetstream\"\nsnapshot_ms = 100\nreport_history = 10\n\n\
         [ha]\nenabled = true\nlease_ms = 1000\nreplica_id = \"{id}\"\n\n\
         [cluster]\nshared = true\npartitions = {PARTITIONS}\n"
    )
}

fn assignments(st: &StatusSnapshot) -> BTreeMap<String, Option<String>> {
    st.workers.iter().map(|w| (w.worker.clone(), w.job.clone())).collect()
}

fn points(st: &StatusSnapshot) -> HashMap<String, u64> {
    st.jobs.iter().map(|j| (j.job.clone(), j.points)).collect()
}

#[tokio::test]
async fn replicas_share_the_partitions_and_take_a_dead_owners_over_with_every_job_and_no_move() {
    let nats = mapped_server();
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    let mut replicas: BTreeMap<&str, Scheduler> =
        ["r1", "r2", "r3"].into_iter().map(|id| (id, Scheduler::start(&nats.url, &settings(id)))).collect();
    eventually(&c, &s, Duration::from_secs(30), "a leader, and three replicas holding partitions", |st| {
        st.leader.is_some() && st.owners.len() == 3 && st.owners.values().map(Vec::len).sum::<usize>() == 8
    })
    .await;

    let mut stops = Vec::new();
    for i in 0..WORKERS {
        let config = AgentConfig {
            beat_every: Duration::from_millis(200),
            exec: Some("true".into()),
            ..AgentConfig::new(
                s.clone(),
                WorkerSpec { worker: format!("w{i}"), machine: None, slots: 1, kind: None, advertise: None },
            )
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(agent::run(client(&nats.url).await, config, async move {
            let _ = stop_rx.await;
        }));
        stops.push(stop_tx);
    }
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).collect();
    for job in &jobs {
        let ack: Ack =
            bus::request(&c, s.job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
                .await
                .expect("hello answered");
        assert!(ack.ok, "{ack:?}");
    }
    let reporter = {
        let (c, s, jobs) = (c.clone(), s.clone(), jobs.clone());
        Background::spawn(async move {
            for iter in 1.. {
                for job in &jobs {
                    let _ = bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // Every job's reports reach its owner, whose bids reach the leader; every worker is busy.
    let before = eventually(&c, &s, Duration::from_secs(30), "every job bids through its owner", |st| {
        st.jobs.len() == JOBS
            && st.jobs.iter().all(|j| j.points >= 10)
            && st.workers.len() == WORKERS
            && st.workers.iter().all(|w| w.job.is_some())
            // The balance settles on an even share each (2 or 3 of 8).
            && st.owners.len() == 3
            && st.owners.values().all(|p| (2..=3).contains(&p.len()))
    })
    .await;
    assert_eq!(before.owners.values().map(Vec::len).sum::<usize>(), PARTITIONS as usize, "{:?}", before.owners);
    // Let the assignments settle (fair: every worker stays where it is from now on).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = eventually(&c, &s, Duration::from_secs(5), "status", |_| true).await;
    let leader = settled.leader.clone().expect("a leader");
    // Kill -9 a replica that holds partitions and does not lead.
    let (&victim, _) = replicas.iter().find(|(id, _)| **id != leader).expect("a replica that does not lead");
    let lost = settled.owners.get(victim).cloned().unwrap_or_default();
    assert!(!lost.is_empty(), "{victim} holds partitions: {:?}", settled.owners);
    let points_before = points(&settled);
    let assigned_before = assignments(&settled);
    replicas.remove(victim).expect("the victim").kill();
    let killed = Instant::now();
    let after = eventually(&c, &s, Duration::from_secs(20), "its partitions owned again by the others", |st| {
        !st.owners.contains_key(victim) && st.owners.values().map(Vec::len).sum::<usize>() == PARTITIONS as usize
    })
    .await;
    let took = killed.elapsed();
    eprintln!("partitions {lost:?} of {victim} owned again after {took:?}: {:?}", after.owners);
    // Two lease periods, and the status poll's own pace.
    assert!(took < Duration::from_millis(2_500), "re-owned after {took:?}");
    // Every job is back, with at least the points it had: its history was restored. Watched
    // throughout: a job whose new owner started it afresh would bid fewer points for a while.
    let back = eventually(&c, &s, Duration::from_secs(20), "every job bids again from its new owner", |st| {
        let now = points(st);
        for (job, &had) in &points_before {
            let has = now.get(job).copied().unwrap_or(0);
            assert!(has >= had, "{job} bid {has} points after the takeover, {had} before");
        }
        st.jobs.len() == JOBS
            && lost.iter().all(|&p| {
                jobs.iter()
                    .filter(|j| slaq::partition::of(j, PARTITIONS) == p)
                    .all(|j| now.get(j).is_some_and(|&n| n > points_before[j]))
            })
    })
    .await;
    assert_eq!(back.num_jobs, JOBS, "no job lost");
    let moved = assignments(&back).iter().filter(|(w, job)| assigned_before.get(*w) != Some(job)).count();
    assert_eq!(moved, 0, "no worker moved: {:?} then {:?}", assigned_before, assignments(&back));
    let _ = after;
    drop(reporter);
    drop(stops);
}

pub(crate) const SHARED_CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/nats/slaq-shared.conf");

/// Under `deploy/nats/slaq-shared.conf` (its accounts, permissions and 32-partition mapping):
/// a job's reports and bye reach its partition's owner, and a job can neither report for
/// another job on a mapped subject, nor put a hello into a partition, nor send the leader a bid.
#[tokio::test]
async fn under_the_shared_permissions_reports_reach_their_owner_and_no_job_can_forge_a_report_or_a_bid() {
    use crate::holes::{SCHEDULER_AUTH, connect_as};
    let nats = NatsServer::start_with_config(std::path::Path::new(SHARED_CONF));
    let s = Subjects::new("slaq").unwrap();
    // The default report history: a burst of 20 reports must not outrun what the stream keeps.
    let with_auth = |id: &str| {
        let s = settings(id).replace(&format!("partitions = {PARTITIONS}"), "partitions = 32");
        s.replace("report_history = 10\n", "") + SCHEDULER_AUTH
    };
    let _replicas: Vec<Scheduler> = ["r1", "r2"].iter().map(|id| Scheduler::start(&nats.url, &with_auth(id))).collect();
    let operator = connect_as(&nats.url, "operator").await;
    eventually(&operator, &s, Duration::from_secs(30), "two replicas hold the 32 partitions", |st| {
        st.owners.len() == 2 && st.owners.values().map(Vec::len).sum::<usize>() == 32
    })
    .await;
    let (a, b) = (connect_as(&nats.url, "job-a").await, connect_as(&nats.url, "job-b").await);
    for (c, job) in [(&a, "job-a"), (&b, "job-b")] {
        let ack: Ack = bus::request(c, s.job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
            .await
            .expect("hello answered");
        assert!(ack.ok, "{ack:?}");
    }
    // A hello put straight into a partition, as only the leader may.
    let px = slaq::partition::of("job-x", 32);
    let _ = bus::publish(&a, s.part_job_hello(px, "job-x"), Encoding::MsgPack, &JobSpec::new("job-x")).await;
    let pb = slaq::partition::of("job-b", 32);
    for iter in 1..=20 {
        bus::publish(&a, s.job_loss("job-a"), Encoding::MsgPack, &loss_report("job-a", iter)).await.unwrap();
        // Forgeries: job-b's mapped subject, and a bid for the leader.
        let _ = bus::publish(&a, s.part_job_loss(pb, "job-b"), Encoding::MsgPack, &loss_report("job-b", iter)).await;
        let _ = a.publish(s.part_bids(pb), bytes::Bytes::from_static(b"\x80")).await;
    }

    a.flush().await.unwrap();
    let st = eventually(&operator, &s, Duration::from_secs(20), "job-a's reports reach its owner", |st| {
        st.jobs.iter().any(|j| j.job == "job-a" && j.points >= 20)
    })
    .await;
    let points_b = st.jobs.iter().find(|j| j.job == "job-b").map(|j| j.points);
    assert_eq!(points_b, Some(0), "nothing reached job-b: {st:?}");
    assert!(!st.rejected.contains_key("undecodable"), "no forged bid reached the leader: {st:?}");
    assert!(!st.jobs.iter().any(|j| j.job == "job-x"), "no forged hello started a job: {st:?}");
    // A bye, mapped like the reports, ends the job at its owner and at the leader.
    let end = slaq::protocol::JobEnd { job: "job-a".into(), reason: slaq::protocol::EndReason::Finished };
    bus::publish(&a, s.job_bye("job-a"), Encoding::MsgPack, &end).await.unwrap();
    eventually(&operator, &s, Duration::from_secs(20), "job-a ended", |st| {
        !st.jobs.iter().any(|j| j.job == "job-a")
            && st.ended.iter().any(|o| o.job == "job-a" && o.outcome.as_str() == "finished")
    })
    .await;
}

/// #33.1 and #33.5 with shared work: a report sent after a job's bye never brings it back, and
/// a job that says bye and hello again at once runs as a new job (its predecessor's reports
/// are not its own), however its partition's owner reads the two; and a replica that takes its
/// partition over and reads it again neither ends the new job nor feeds it its predecessor's.
#[tokio::test]
async fn with_shared_work_a_late_report_brings_no_job_back_and_a_new_hello_starts_it_afresh() {
    let nats = mapped_server();
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    // Leases long enough not to lapse on a loaded machine (the takeover is the test's own), the
    // partitions balanced (four each) before the jobs come, and the same owners until the kill.
    let long_lease = |id| settings(id).replace("lease_ms = 1000", "lease_ms = 4000");
    let mut replicas: BTreeMap<&str, Scheduler> =
        ["r1", "r2"].into_iter().map(|id| (id, Scheduler::start(&nats.url, &long_lease(id)))).collect();
    let balanced = eventually(&c, &s, Duration::from_secs(30), "a leader and the partitions balanced", |st| {
        st.leader.is_some() && st.owners.len() == 2 && st.owners.values().all(|p| p.len() == PARTITIONS as usize / 2)
    })
    .await;
    let leader = balanced.leader.clone().expect("a leader");
    let (&victim, _) = replicas.iter().find(|(id, _)| **id != leader).expect("a replica that does not lead");
    // Both jobs live on the replica that does not lead (killed at the end).
    let on_victim = |name: &str| -> &'static str {
        (0..)
            .map(|i| format!("{name}-{i}"))
            .find(|j| balanced.owners[victim].contains(&slaq::partition::of(j, PARTITIONS)))
            .map(|j| &*Box::leak(j.into_boxed_str()))
            .expect("an id of the victim's partitions")
    };
    let (late, again) = (on_victim("late"), on_victim("again"));
    let hello = |job: &'static str| {
        let (c, s) = (c.clone(), s.clone());
        async move {
            let ack: Ack =
                bus::request(&c, s.job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
                    .await
                    .unwrap();
            assert!(ack.ok, "{ack:?}");
        }
    };
    let report = |job: &'static str, iter: u64| {
        let (c, s) = (c.clone(), s.clone());
        async move { bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap() }
    };
    let bye = |job: &'static str| {
        let (c, s) = (c.clone(), s.clone());
        async move {
            let end = slaq::protocol::JobEnd { job: job.into(), reason: slaq::protocol::EndReason::Finished };
            bus::publish(&c, s.job_bye(job), Encoding::MsgPack, &end).await.unwrap()
        }
    };
    for job in [late, again] {
        hello(job).await;
        for iter in 1..=5 {
            report(job, iter).await;
        }
    }
    eventually(&c, &s, Duration::from_secs(20), "both jobs have their five points", |st| {
        [late, again].iter().all(|j| points(st).get(*j) == Some(&5))
    })
    .await;
    bye(late).await;
    for iter in 6..=8 {
        report(late, iter).await;
    }
    bye(again).await;
    hello(again).await;
    report(again, 1).await;
    c.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log_of = |replicas: &BTreeMap<&str, Scheduler>| {
        for r in replicas.values() {
            let log = r.log_text();
            eprintln!("{}", log.lines().filter(|l| l.contains(again)).collect::<Vec<_>>().join("\n"));
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let st = loop {
        let st = crate::harness::wait_status(&c, &s).await;
        if points(&st).get(again) == Some(&1) {
            break st;
        }
        if Instant::now() > deadline {
            log_of(&replicas);
            panic!("the new job does not run with its own report only: {st:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(st.owners, balanced.owners, "no partition moved before the kill");
    assert!(!st.jobs.iter().any(|j| j.job == late), "a late report brought the job back: {:?}", st.jobs);
    let ends = |st: &StatusSnapshot| st.ended.iter().filter(|o| o.job == again).count();
    assert_eq!(ends(&st), 1, "its predecessor ended: {:?}", st.ended);
    // The replica that owns the new job's partition dies; the leader takes the partition over
    // and reads it again. Watched throughout: the job is never ended, never fed its
    // predecessor's reports, and the late one never comes back.
    replicas.remove(victim).expect("the victim").kill();
    let mut taken = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = crate::harness::wait_status(&c, &s).await;
        let fail = |what: &str| {
            log_of(&replicas);
            panic!("{what} after the takeover: {st:?}");
        };
        if ends(&st) != 1 {
            fail("the new job ended");
        }
        if points(&st).get(again).is_some_and(|&n| n != 1) {
            fail("the new job has its predecessor's reports");
        }
        if st.jobs.iter().any(|j| j.job == late) {
            fail("the late job came back");
        }
        let all_here = st.owners.len() == 1 && st.owners.get(&leader).is_some_and(|p| p.len() == PARTITIONS as usize);
        match taken {
            None if all_here => taken = Some(Instant::now()),
            // Read again, and a few epochs' news sent.
            Some(at) if at.elapsed() > Duration::from_secs(3) => {
                assert_eq!(points(&st).get(again), Some(&1), "the new job runs: {st:?}");
                break;
            }
            _ if Instant::now() > deadline => fail("no takeover"),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Nor did the reading again start the ended job for a while (its hello and reports are
    // older than the takeover, and its saved state is gone).
    let log = replicas[leader.as_str()].log_text();
    let started =
        log.lines().filter(|l| l.contains("job actor started") && l.contains(&format!("job={late} "))).count();
    assert_eq!(started, 0, "the new owner started the ended job again");
}
