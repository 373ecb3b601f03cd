//! Worker types over a real nats-server (issue #31): agents of two types, emulated jobs whose
//! step time on each type is Gavel's measured throughput (declared as their speeds, as stand-in
//! compute), and the scheduler's decisions: every job's world is one type, the job that loses
//! most on the slow type gets the fast one, and what the scheduler says equals what it sent.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use slaq::bus;
use slaq::protocol::{Ack, Encoding, Heartbeat, JobAllocation, JobSpec, LossReport, Subjects, WorkerSpec};
use slaq::sim::gavel::Throughputs;

use crate::harness::{Background, InProcessScheduler, NatsServer, client, eventually, fast_settings, wait_status};

const WAIT: Duration = Duration::from_secs(40);

/// Iterations per second per step per second of the table (the emulation runs fast).
const PACE: f64 = 8.0;

async fn start() -> (NatsServer, InProcessScheduler, async_nats::Client, Subjects) {
    let nats = NatsServer::start();
    let scheduler = InProcessScheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    (nats, scheduler, c, s)
}

/// Heartbeats for `ids` until dropped.
fn beat(c: &async_nats::Client, s: &Subjects, ids: Vec<String>) -> Background {
    let (c, s) = (c.clone(), s.clone());
    Background::spawn(async move {
        loop {
            for w in &ids {
                bus::publish(&c, s.worker_beat(w), Encoding::MsgPack, &Heartbeat::new(w)).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

fn table() -> Throughputs {
    Throughputs::load(
        &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/gavel/simulation_throughputs.json"),
    )
    .unwrap()
}

/// Two V100 workers and four K80s say hello; each worker's type.
async fn two_v100s_four_k80s(c: &async_nats::Client, s: &Subjects) -> HashMap<String, String> {
    let mut type_of: HashMap<String, String> = HashMap::new();
    for (id, kind) in [("v0", "v100"), ("v1", "v100"), ("k0", "k80"), ("k1", "k80"), ("k2", "k80"), ("k3", "k80")] {
        let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: Some(kind.into()), advertise: None };
        let ack: Ack =
            bus::request(c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok, "{ack:?}");
        type_of.insert(id.into(), kind.into());
    }
    type_of
}

/// Job `job` of Gavel's type `name` (up to 4 workers) says hello with its speeds on V100s and
/// K80s from the table and sends its first point, so that it bids; then runs emulated.
async fn gavel_job(
    c: &async_nats::Client,
    s: &Subjects,
    job: &str,
    name: &str,
    type_of: &HashMap<String, String>,
    mixed: &Bad,
) -> Background {
    let table = table();
    let (v100, k80) = (table.worker("v100", "t").unwrap(), table.worker("k80", "t").unwrap());
    let j = table.job_types.iter().position(|t| t == name).unwrap();
    let speeds: BTreeMap<String, f64> =
        [("v100".to_string(), table.rate(v100, j, 1)), ("k80".to_string(), table.rate(k80, j, 1))].into();
    let spec = JobSpec { speeds: Some(speeds.clone()), max_workers: Some(4), ..JobSpec::new(job) };
    let ack: Ack = bus::request(c, s.job_hello(job), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
    let running = emulate_job(c.clone(), s.clone(), job.into(), speeds, type_of.clone(), mixed.clone());
    bus::publish(c, s.job_loss(job), Encoding::MsgPack, &LossReport::new(job, 1, 2.0, 1.0, 0)).await.unwrap();
    running
}

/// Allocations a job saw that mix types or misname them: (workers, the type named).
type Bad = Arc<Mutex<Vec<(Vec<String>, Option<String>)>>>;

/// One emulated job: runs at its type's throughput on the workers of its latest allocation
/// (nothing on a mixed world), reporting its loss as it goes; records every allocation that
/// mixes types or does not name its workers' type.
fn emulate_job(
    c: async_nats::Client,
    s: Subjects,
    job: String,
    speeds: BTreeMap<String, f64>,
    type_of: HashMap<String, String>,
    mixed: Bad,
) -> Background {
    Background::spawn(async move {
        let mut allocs = c.subscribe(s.job_alloc(&job)).await.unwrap();
        let mut workers: Vec<String> = Vec::new();
        let (mut iter, mut reported) = (1.0f64, 1u64);
        let mut last = Instant::now();
        loop {
            while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(20), allocs.next()).await {
                if let Ok(a) = slaq::protocol::decode::<JobAllocation>(Encoding::MsgPack, &msg.payload, "alloc") {
                    let kinds: Vec<&String> = a.workers.iter().filter_map(|w| type_of.get(w)).collect();
                    // A world is one type, and the allocation names it (none without workers).
                    if kinds.windows(2).any(|k| k[0] != k[1]) || a.accelerator.as_ref() != kinds.first().copied() {
                        mixed.lock().unwrap().push((a.workers.clone(), a.accelerator.clone()));
                    }
                    workers = a.workers;
                }
            }
            let dt = last.elapsed().as_secs_f64();
            last = Instant::now();
            let kind = workers.first().and_then(|w| type_of.get(w));
            let rate = kind.and_then(|k| speeds.get(k)).map_or(0.0, |v| v * PACE * workers.len() as f64);
            iter += rate * dt;
            if iter as u64 > reported && rate > 0.0 {
                reported = iter as u64;
                let report = LossReport::new(
                    &job,
                    reported,
                    2.0 / (1.0 + reported as f64 / 400.0),
                    1.0 / rate,
                    workers.len() as u32,
                );
                bus::publish(&c, s.job_loss(&job), Encoding::MsgPack, &report).await.unwrap();
            }
        }
    })
}

#[tokio::test]
async fn each_job_runs_on_one_type_and_the_one_that_loses_most_elsewhere_gets_the_fast_type() {
    let (_nats, scheduler, c, s) = start().await;
    // Two V100s and four K80s.
    let type_of = two_v100s_four_k80s(&c, &s).await;
    let beats = beat(&c, &s, type_of.keys().cloned().collect());
    // ResNet-50 runs 7.2 times as fast on a V100 as on a K80; A3C 2.1 times.
    let mixed = Arc::new(Mutex::new(Vec::new()));
    let mut jobs = Vec::new();
    for (job, name) in [("resnet", "ResNet-50 (batch size 128)"), ("a3c", "A3C")] {
        jobs.push(gavel_job(&c, &s, job, name, &type_of, &mixed).await);
    }
    let on = |st: &slaq::protocol::StatusSnapshot, job: &str| -> Vec<String> {
        let mut kinds: Vec<String> =
            st.workers.iter().filter(|w| w.job.as_deref() == Some(job)).filter_map(|w| w.accelerator.clone()).collect();
        kinds.sort();
        kinds
    };
    let status = eventually(&c, &s, WAIT, "ResNet-50 on the V100s, A3C on the K80s", |st| {
        on(st, "resnet") == ["v100", "v100"] && on(st, "a3c") == ["k80", "k80", "k80", "k80"]
    })
    .await;
    assert_eq!(status.accelerators["v100"].workers, 2);
    assert_eq!((status.accelerators["k80"].workers, status.accelerators["k80"].busy), (4, 4));
    // It stays so, and no job is ever given a mixed world.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let st = wait_status(&c, &s).await;
        for job in ["resnet", "a3c"] {
            let kinds = on(&st, job);
            assert!(kinds.windows(2).all(|k| k[0] == k[1]), "{job} on one type: {kinds:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let st = wait_status(&c, &s).await;
    assert_eq!((on(&st, "resnet"), on(&st, "a3c").len()), (vec!["v100".to_string(); 2], 4));
    assert!(mixed.lock().unwrap().is_empty(), "mixed or misnamed worlds sent: {:?}", mixed.lock().unwrap());
    drop((jobs, beats));
    drop(scheduler);
}

#[tokio::test]
async fn a_job_measures_its_speed_on_each_type_it_runs_on() {
    let (_nats, scheduler, c, s) = start().await;
    let table = table();
    let j = table.job_types.iter().position(|t| t == "ResNet-50 (batch size 128)").unwrap();
    let speeds: BTreeMap<String, f64> = [
        ("v100".to_string(), table.rate(table.worker("v100", "t").unwrap(), j, 1)),
        ("k80".to_string(), table.rate(table.worker("k80", "t").unwrap(), j, 1)),
    ]
    .into();
    let type_of: HashMap<String, String> = [("k0", "k80"), ("k1", "k80"), ("v0", "v100"), ("v1", "v100")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .into();
    let hello = |id: &'static str| {
        let (c, s, kind) = (c.clone(), s.clone(), type_of[id].clone());
        async move {
            let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: Some(kind), advertise: None };
            let ack: Ack =
                bus::request(&c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
            assert!(ack.ok);
        }
    };
    // A K80 cluster; a job that declares nothing runs there and measures it.
    hello("k0").await;
    hello("k1").await;
    let k80_beats = beat(&c, &s, vec!["k0".into(), "k1".into()]);
    let spec = JobSpec { max_workers: Some(2), ..JobSpec::new("resnet") };
    let ack: Ack =
        bus::request(&c, s.job_hello("resnet"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok);
    let mixed = Arc::new(Mutex::new(Vec::new()));
    let job = emulate_job(c.clone(), s.clone(), "resnet".into(), speeds.clone(), type_of.clone(), mixed.clone());
    bus::publish(&c, s.job_loss("resnet"), Encoding::MsgPack, &LossReport::new("resnet", 1, 2.0, 1.0, 0))
        .await
        .unwrap();
    let measured = |st: &slaq::protocol::StatusSnapshot, kind: &str| {
        st.jobs.iter().find(|j| j.job == "resnet").and_then(|j| j.speeds.get(kind).copied())
    };
    eventually(&c, &s, WAIT, "the job measured the K80s", |st| measured(st, "k80").is_some_and(|m| m.1 >= 8)).await;
    // The K80s go (their agents stop) and two V100s join: the job runs there, and measures them.
    drop(k80_beats);
    hello("v0").await;
    hello("v1").await;
    let v100_beats = beat(&c, &s, vec!["v0".into(), "v1".into()]);
    let st = eventually(&c, &s, WAIT, "the job measured both types", |st| {
        measured(st, "k80").is_some_and(|m| m.1 >= 8) && measured(st, "v100").is_some_and(|m| m.1 >= 8)
    })
    .await;
    let (k80, v100) = (measured(&st, "k80").unwrap().0, measured(&st, "v100").unwrap().0);
    let want = speeds["v100"] / speeds["k80"];
    assert!((k80 / v100 / want - 1.0).abs() < 0.35, "measured {:.2}x, the table says {want:.2}x", k80 / v100);
    assert!(mixed.lock().unwrap().is_empty());
    drop((job, v100_beats, scheduler));
}

/// Issue #43, tenants on a cluster of several types: team b's two jobs hold all six workers
/// (a's guarantee idle, lent); a's job says hello and a takes back its 3, every world still one
/// type and named so, each team then holding its guarantee with nothing borrowed.
#[tokio::test]
async fn on_typed_workers_a_team_takes_back_its_guarantee_and_every_world_stays_one_type() {
    let nats = NatsServer::start();
    let tenants = "[tenants.a]\nguaranteed = 3\ngrace_s = 1\n[tenants.b]\nguaranteed = 3\ngrace_s = 1\n";
    let scheduler = InProcessScheduler::start(&nats.url, &fast_settings(tenants));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let type_of = two_v100s_four_k80s(&c, &s).await;
    let beats = beat(&c, &s, type_of.keys().cloned().collect());
    let mixed = Arc::new(Mutex::new(Vec::new()));
    let mut jobs = Vec::new();
    jobs.push(gavel_job(&c, &s, "b.resnet", "ResNet-50 (batch size 128)", &type_of, &mixed).await);
    jobs.push(gavel_job(&c, &s, "b.a3c", "A3C", &type_of, &mixed).await);
    let held = |st: &slaq::protocol::StatusSnapshot, t: &str| st.tenants.get(t).map_or(0, |u| u.workers);
    eventually(&c, &s, WAIT, "team b borrows a's idle guarantee", |st| {
        held(st, "b") == 6 && st.tenants.get("a").is_some_and(|u| u.lent == 3)
    })
    .await;
    jobs.push(gavel_job(&c, &s, "a.resnet", "ResNet-50 (batch size 128)", &type_of, &mixed).await);
    let st =
        eventually(&c, &s, WAIT, "team a holds its guarantee again", |st| held(st, "a") == 3 && held(st, "b") == 3)
            .await;
    for t in ["a", "b"] {
        let u = &st.tenants[t];
        assert_eq!((u.guaranteed, u.quota, u.borrowed), (3, 3, 0), "{t}: {u:?}");
    }
    // It stays so for a while, every world one type.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let st = wait_status(&c, &s).await;
        assert_eq!((held(&st, "a"), held(&st, "b")), (3, 3));
        for job in ["a.resnet", "b.resnet", "b.a3c"] {
            let kinds: Vec<&String> = st
                .workers
                .iter()
                .filter(|w| w.job.as_deref() == Some(job))
                .filter_map(|w| w.accelerator.as_ref())
                .collect();
            assert!(kinds.windows(2).all(|k| k[0] == k[1]), "{job} on one type: {kinds:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(mixed.lock().unwrap().is_empty(), "mixed or misnamed worlds sent: {:?}", mixed.lock().unwrap());
    drop((jobs, beats, scheduler));
}
