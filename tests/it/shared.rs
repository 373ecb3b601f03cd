//! Replicas that share the jobs (`[cluster] shared`, issue #19) on a real nats-server whose
//! subject mapping partitions the reports: every replica runs the job actors of the partitions
//! it holds, the leader plans on the bids they send; when a partition owner is killed (-9) the
//! others take its partitions over, the jobs come back with their history, and no worker moves.

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
fn mapped_server() -> NatsServer {
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

fn settings(id: &str) -> String {
    format!(
        "[scheduler]\npolicy = \"fair\"\nepoch_ms = 200\nworker_timeout_ms = 5000\nrefit_interval_ms = 20\n\n\
         [state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n\n\
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
    })
    .await;
    let shares: Vec<usize> = before.owners.values().map(Vec::len).collect();
    assert!(shares.iter().all(|&n| (2..=3).contains(&n)), "an even share each: {:?}", before.owners);
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
    // Every job is back, with at least the points it had: its history was restored.
    let back = eventually(&c, &s, Duration::from_secs(20), "every job bids again from its new owner", |st| {
        let now = points(st);
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
