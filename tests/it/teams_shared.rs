//! Teams on replicas that share the work (issue #43): two `slaq serve` replicas under the
//! shipped `deploy/nats/slaq-shared.conf` (its accounts, its team users, and its mapping of a
//! tenant's job, `TENANT.NAME`, to a partition on both tokens). Each tenant's quota is planned by
//! the leader over both owners' bids; a reclaim goes on through the leader's death.

use std::path::Path;
use std::time::{Duration, Instant};

use slaq::agent::{self, AgentConfig};
use slaq::bus;
use slaq::protocol::{Ack, Encoding, JobSpec, StatusSnapshot, Subjects, WorkerSpec};

use crate::harness::{Background, NatsServer, Scheduler, eventually, loss_report, temp_dir, wait_for_file};
use crate::holes::{SCHEDULER_AUTH, connect_as};
use crate::shared::{SHARED_CONF, settings};

/// A job name of `tenant` whose partition (of 32) `replica` owns in `st`.
fn job_owned_by(st: &StatusSnapshot, replica: &str, tenant: &str) -> String {
    let owned = &st.owners[replica];
    (0..10_000)
        .map(|i| format!("{tenant}.train-{i}"))
        .find(|job| owned.contains(&slaq::partition::of(job, 32)))
        .expect("some name lands on the replica's partitions")
}

/// Releases the agents' processes when dropped (a failed test leaves none behind).
struct Release(std::path::PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// Two workers (`agent::run` as the shipped users w1 and w2). Each generation's process says
/// it started, and on SIGTERM says so and goes on (a job saving): only SIGKILL after its grace
/// ends it, until the test releases it (a file).
async fn agents(url: &str, s: &Subjects, log: &Path) -> (Vec<Background>, Release) {
    let release = log.with_file_name("release");
    let exec = crate::teams::saving_exec(log, &release);
    let mut agents = Vec::new();
    for id in ["w1", "w2"] {
        let config = AgentConfig {
            beat_every: Duration::from_millis(200),
            exec: Some(exec.clone()),
            stop_grace: Duration::from_secs(60),
            ..AgentConfig::new(
                s.clone(),
                WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None },
            )
        };
        let client = connect_as(url, id).await;
        agents.push(Background::spawn(async move {
            let _ = agent::run(client, config, std::future::pending()).await;
        }));
    }
    (agents, Release(release))
}

/// Two replicas, two teams each guaranteed one of two workers (grace 2 s). Team B's two jobs,
/// one owned by each replica, hold both workers (one borrowed from team A); team A's job, owned
/// by the replica that does not lead, says hello, and the leader is killed (-9) at once. Fair
/// shares alone would leave the two workers where they are (three jobs, two workers); team A's
/// guarantee takes one back. The survivor takes the lease and the dead replica's partitions
/// over, plans the quotas over all three jobs' bids, and team A's process starts on the worker
/// taken back within R (epoch, grace, restart) plus a lease; team B keeps its guarantee, no
/// report of team B's is lost, and team A's worker stays team A's.
#[tokio::test]
async fn teams_on_replicas_keep_their_guarantees_and_a_reclaim_goes_on_through_the_leaders_death() {
    let nats = NatsServer::start_with_config(Path::new(SHARED_CONF));
    let s = Subjects::new("slaq").unwrap();
    let config = |id: &str| {
        let base = settings(id).replace("partitions = 8", "partitions = 32").replace("report_history = 10\n", "");
        let base = base.replace("policy = \"fair\"\n", "policy = \"fair\"\nmin_generation_ms = 0\n");
        base + SCHEDULER_AUTH
            + "\n[tenants.team-a]\nguaranteed = 1\ngrace_s = 2.0\n[tenants.team-b]\nguaranteed = 1\ngrace_s = 2.0\n"
    };
    let mut replicas: Vec<(&str, Scheduler)> =
        ["r1", "r2"].into_iter().map(|id| (id, Scheduler::start(&nats.url, &config(id)))).collect();
    let operator = connect_as(&nats.url, "operator").await;
    // The balance settled: 16 partitions each (a replica that joins late holds none at first).
    let st = eventually(&operator, &s, Duration::from_secs(30), "a leader and two replicas holding 16 each", |st| {
        st.leader.is_some() && st.owners.len() == 2 && st.owners.values().all(|p| p.len() == 16)
    })
    .await;
    let leader = st.leader.clone().expect("a leader");
    let other = if leader == "r1" { "r2" } else { "r1" };
    // One of team B's jobs on each replica's partitions, team A's on the one that survives.
    let jobs_b = [job_owned_by(&st, &leader, "team-b"), job_owned_by(&st, other, "team-b")];
    let job_a = job_owned_by(&st, other, "team-a");

    let dir = temp_dir("teams-shared");
    let log = dir.join("runs.txt");
    let agents = agents(&nats.url, &s, &log).await;
    let (team_a, team_b) = (connect_as(&nats.url, "team-a").await, connect_as(&nats.url, "team-b").await);
    let hello = |c: async_nats::Client, job: String| {
        let s = s.clone();
        async move {
            let ack: Ack =
                bus::request(&c, s.job_hello(&job), Encoding::MsgPack, &JobSpec::new(&job), Duration::from_secs(5))
                    .await
                    .expect("hello answered");
            assert!(ack.ok, "{job}: {ack:?}");
        }
    };
    for job in &jobs_b {
        hello(team_b.clone(), job.clone()).await;
    }
    const REPORTS: u64 = 300;
    let reports = {
        let (c, s, jobs) = (team_b.clone(), s.clone(), jobs_b.clone());
        tokio::spawn(async move {
            for iter in 1..=REPORTS {
                for job in &jobs {
                    bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        })
    };
    eventually(&operator, &s, Duration::from_secs(20), "team B's jobs on both workers", |st| {
        st.tenants.get("team-b").is_some_and(|u| u.workers == 2)
            && st.tenants.get("team-a").is_some_and(|u| u.lent == 1)
    })
    .await;
    wait_for_file(&log, "team B's processes on both workers", |t| {
        jobs_b.iter().all(|job| t.contains(&format!("{job} w1 start")) || t.contains(&format!("{job} w2 start")))
    })
    .await;

    // Team A's job arrives; the leader dies with the reclaim under way.
    let asked = Instant::now();
    hello(team_a.clone(), job_a.clone()).await;
    for iter in 1..=3 {
        bus::publish(&team_a, s.job_loss(&job_a), Encoding::MsgPack, &loss_report(&job_a, iter)).await.unwrap();
    }
    let at = replicas.iter().position(|(id, _)| *id == leader).expect("the leader's process");
    replicas.remove(at).1.kill();
    let text =
        wait_for_file(&log, "team A's process started on a worker of team B's", |t| t.contains(&format!("{job_a} w")))
            .await;
    let reclaimed = asked.elapsed();
    eprintln!("teams on replicas: team A's worker came back in {reclaimed:?} through the leader's death");
    let line = text.lines().find(|l| l.starts_with(job_a.as_str())).expect("its line").to_string();
    let worker = line.split(' ').nth(1).expect("its worker");
    let stopped = jobs_b.iter().find_map(|job| text.find(&format!("{job} {worker} term")));
    let stopped = stopped.expect("team B's process there stopped gracefully");
    assert!(stopped < text.find(&line).expect("the line"), "{text}");
    // R here: a lease (1 s) to take over, an epoch (0.2 s), team A's grace (2 s) and a
    // restart, with room for a loaded CI.
    assert!(reclaimed < Duration::from_secs(20), "reclaimed in {reclaimed:?}");
    let st = eventually(&operator, &s, Duration::from_secs(20), "each tenant at its guarantee, a new leader", |st| {
        st.leader.as_deref() == Some(other)
            && ["team-a", "team-b"]
                .iter()
                .all(|t| st.tenants.get(*t).is_some_and(|u| u.workers == 1 && u.borrowed == 0))
    })
    .await;
    assert_eq!(st.owners.keys().collect::<Vec<_>>(), [other], "the survivor owns every partition");
    // No report of team B's lost (one job's partition was taken over: replayed from the stream).
    reports.await.unwrap();
    eventually(&operator, &s, Duration::from_secs(20), "every report of team B's counted", |st| {
        jobs_b.iter().all(|job| st.jobs.iter().any(|j| j.job == *job && j.points == REPORTS && j.dropped == 0))
    })
    .await;
    // Team A's worker stays team A's: its process is never stopped, nothing else starts there.
    // (Team B's two jobs take turns on their one worker: fair shares, with no hold configured.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = std::fs::read_to_string(&log).expect("the log");
    let after = &text[text.find(&line).expect("team A's start") + line.len()..];
    let there = format!(" {worker} ");
    assert!(!after.lines().any(|l| l.contains(&there)), "team A's worker {worker} changed hands: {text}");
    drop(agents);
}
