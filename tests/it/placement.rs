//! Placement, parameter servers and batch size in the live scheduler, over a real nats-server,
//! with `slaq worker --machine M --slots N` agents as child processes.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use slaq::bus;
use slaq::protocol::{self, Ack, Encoding, JobAllocation, JobSpec, LossReport, Role, Subjects, WorkerAssignment};

use crate::harness::{InProcessScheduler, NatsServer, client, eventually, fast_settings, wait_status};

const WAIT: Duration = Duration::from_secs(20);

/// `slaq worker` agents, killed on drop.
struct Agents(Vec<Child>);

impl Agents {
    fn start(url: &str, machines: &[(&str, u32)]) -> Agents {
        Agents(
            machines
                .iter()
                .map(|(m, slots)| {
                    Command::new(env!("CARGO_BIN_EXE_slaq"))
                        .args(["worker", "--nats", url, "--id", m, "--machine", m, "--slots", &slots.to_string()])
                        .args(["--beat-ms", "200"])
                        .stderr(Stdio::null())
                        .spawn()
                        .expect("slaq worker starts")
                })
                .collect(),
        )
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn hello(c: &async_nats::Client, spec: &JobSpec) {
    let s = Subjects::new("slaq").unwrap();
    let ack: Ack =
        bus::request(c, s.job_hello(&spec.job), Encoding::MsgPack, spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
}

fn report(job: &str, iter: u64, workers: u32) -> LossReport<'_> {
    LossReport { workers, ..crate::harness::loss_report(job, iter) }
}

async fn send(c: &async_nats::Client, r: &LossReport<'_>) {
    let s = Subjects::new("slaq").unwrap();
    bus::publish(c, s.job_loss(&r.job), Encoding::MsgPack, r).await.unwrap();
}

/// A scheduler on a fresh nats-server, a client subscribed to `subscribe` before any worker
/// registers, and two machines of four slots each (worker order m0-0..3, m1-0..3).
struct Cluster {
    _nats: NatsServer,
    _scheduler: InProcessScheduler,
    _agents: Agents,
    c: async_nats::Client,
    s: Subjects,
    watched: async_nats::Subscriber,
}

async fn two_machines(subscribe: &str) -> Cluster {
    let nats = NatsServer::start();
    let scheduler = InProcessScheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let watched = c.subscribe(subscribe.to_string()).await.unwrap();
    let agents = Agents::start(&nats.url, &[("m0", 4), ("m1", 4)]);
    eventually(&c, &s, WAIT, "eight slots register", |st| st.workers.len() == 8).await;
    Cluster { _nats: nats, _scheduler: scheduler, _agents: agents, c, s, watched }
}

/// The machine of a slot worker `<machine>-<i>`.
fn machine(worker: &str) -> &str {
    worker.rsplit_once('-').map_or(worker, |p| p.0)
}

#[tokio::test]
async fn a_jobs_workers_land_on_one_machine_when_they_fit() {
    // Mapping counts to workers in worker order would split the second job over both machines.
    let Cluster { c, s, .. } = &two_machines("slaq.v1.ctl.epoch").await;
    for job in ["a", "b"] {
        hello(c, &JobSpec { max_workers: Some(3), ..JobSpec::new(job) }).await;
    }
    for k in 1..=20 {
        for job in ["a", "b"] {
            send(c, &report(job, k, 1)).await;
        }
    }
    let st = eventually(c, s, WAIT, "both jobs run on three workers", |st| {
        ["a", "b"].iter().all(|j| st.workers.iter().filter(|w| w.job.as_deref() == Some(j)).count() == 3)
    })
    .await;
    for job in ["a", "b"] {
        let machines: std::collections::BTreeSet<&str> =
            st.workers.iter().filter(|w| w.job.as_deref() == Some(job)).map(|w| machine(&w.worker)).collect();
        assert_eq!(machines.len(), 1, "job {job} is on one machine: {st:#?}");
    }
}

#[tokio::test]
async fn a_parameter_server_job_gets_its_servers() {
    let Cluster { c, watched: assignments, .. } = &mut two_machines("slaq.v1.worker.*.assign").await;
    hello(c, &JobSpec { parameter_server: true, max_workers: Some(6), ..JobSpec::new("ps-job") }).await;
    for k in 1..=20 {
        send(c, &report("ps-job", k, 6)).await;
    }
    let mut roles: HashMap<String, (Option<String>, Role)> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let servers = roles.values().filter(|r| r.0.as_deref() == Some("ps-job") && r.1 == Role::Ps).count();
        let workers = roles.values().filter(|r| r.0.as_deref() == Some("ps-job") && r.1 == Role::Worker).count();
        if servers >= 1 && workers >= 1 && servers + workers == 6 {
            break;
        }
        let msg = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), assignments.next())
            .await
            .unwrap_or_else(|_| panic!("a PS job gets servers and workers: {roles:?}"))
            .unwrap();
        let a: WorkerAssignment = protocol::decode(Encoding::MsgPack, &msg.payload, "assignment").unwrap();
        roles.insert(a.worker.clone(), (a.job, a.role));
    }
}

/// Iteration time 0.01 s + 1 ms per example on each of 4 workers on one machine.
fn truth(batch: u32) -> f64 {
    0.01 + 0.001 * f64::from(batch) / 4.0
}

/// Jobs "slo" (iterations within 0.05 s) and "free", both able to run at 32 to 512, reporting
/// their true iteration times at 32 and 256 on four workers of one machine, and noisy gradients
/// (larger batches progress more per example). Within 0.05 s: a per-worker batch of at most 40,
/// so a total of at most 160 of the allowed sizes: 128.
async fn slo_and_free_jobs(c: &async_nats::Client) {
    let sizes = vec![32, 64, 128, 256, 512];
    let slo = JobSpec {
        max_workers: Some(4),
        batch_sizes: Some(sizes.clone()),
        slo_iter_seconds: Some(0.05),
        ..JobSpec::new("slo")
    };
    let free = JobSpec { max_workers: Some(4), batch_sizes: Some(sizes), ..JobSpec::new("free") };
    hello(c, &slo).await;
    hello(c, &free).await;
    for k in 1..=40u64 {
        for job in ["slo", "free"] {
            let batch = if k % 2 == 0 { 32 } else { 256 };
            let r = LossReport {
                batch_size: Some(batch),
                iter_seconds: truth(batch),
                machines: Some(1),
                sync_seconds: Some(0.0),
                grad_sqr: Some(1.0),
                grad_var: Some(1000.0),
                generation: None,
                checkpoint_age_s: None,
                ..report(job, k, 4)
            };
            send(c, &r).await;
        }
    }
}

/// The status shows the batches the SLO rule gives "slo" and "free".
fn batches_shown(st: &protocol::StatusSnapshot) -> bool {
    st.jobs.iter().any(|j| j.job == "slo" && j.batch_size == Some(128))
        && st.jobs.iter().any(|j| j.job == "free" && j.batch_size.is_some_and(|b| b > 128))
}

#[tokio::test]
async fn a_job_with_an_slo_gets_a_batch_that_meets_it() {
    let Cluster { c, s, watched: allocs, .. } = &mut two_machines("slaq.v1.job.*.alloc").await;
    slo_and_free_jobs(c).await;
    let mut batch: HashMap<String, u32> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while !(batch.get("slo") == Some(&128) && batch.get("free").is_some_and(|&b| b > 128)) {
        let msg = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), allocs.next())
            .await
            .unwrap_or_else(|_| panic!("the SLO job gets 128 and the other a larger batch: {batch:?}"))
            .unwrap();
        let a: JobAllocation = protocol::decode(Encoding::MsgPack, &msg.payload, "alloc").unwrap();
        if let Some(b) = a.batch_size {
            batch.insert(a.job.clone(), b);
        }
    }
    assert!(truth(batch["slo"]) <= 0.05);
    // Status and metrics show it: the batch per job, and one SLO job predicted to meet it.
    eventually(c, s, WAIT, "status shows the batches", |st| {
        batches_shown(st) && st.workers.iter().all(|w| w.machine.is_some())
    })
    .await;
    let mut epochs = c.subscribe("slaq.v1.ctl.epoch").await.unwrap();
    let msg = tokio::time::timeout(WAIT, epochs.next()).await.unwrap().unwrap();
    let e: protocol::EpochSummary = protocol::decode(Encoding::MsgPack, &msg.payload, "epoch").unwrap();
    assert_eq!((e.slo_jobs, e.slo_missed), (1, 0), "{e:?}");
}

#[tokio::test]
async fn a_restarted_scheduler_keeps_what_it_learned_of_a_jobs_iteration_time() {
    let nats = NatsServer::start_jetstream();
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    let _agents = Agents::start(&nats.url, &[("m0", 4), ("m1", 4)]);
    {
        let _scheduler = InProcessScheduler::start(&nats.url, &fast_settings(""));
        wait_status(&c, &s).await;
        eventually(&c, &s, WAIT, "eight slots register", |st| st.workers.len() == 8).await;
        slo_and_free_jobs(&c).await;
        eventually(&c, &s, WAIT, "the SLO rule's batches", batches_shown).await;
    }
    // A new scheduler on the same state, and no new report: the batches come from the
    // iteration-time models it restored (the reports replayed from the stream are already in
    // the saved predictors, so they teach it nothing).
    let _scheduler = InProcessScheduler::start(&nats.url, &fast_settings(""));
    eventually(&c, &s, WAIT, "the same batches after the restart", |st| batches_shown(st) && st.epoch >= 1).await;
}
