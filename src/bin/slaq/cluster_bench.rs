//! `slaq bench cluster` (issue #19): replicas that share the jobs, measured from outside.
//!
//! Starts `--replicas` `slaq serve` processes with `[cluster] shared` against `--nats` (a
//! server or cluster whose account maps the reports to `--partitions` partitions: see
//! `deploy/nats/slaq-shared.conf` and `deploy/bench-cluster.sh`), registers the workers and
//! the jobs, and has every job report `--reports-per-s` times a second from a thread of its own.
//! After the warm-up it measures, over `--measure-s`: the leader's epochs (from `ctl.epoch`),
//! and each replica's CPU seconds (`/proc/<pid>/stat`) against the reports its partitions
//! received. Then it kills (SIGKILL) a replica that holds partitions and does not lead, and
//! measures how long until its partitions are held again (read from the partition bucket), until
//! a surviving owner sends every one of their jobs' bids with more points than the victim last
//! sent (read from the owners' messages to the leader), and how many workers moved meanwhile.
//! The workers and jobs register as their processes would, by requests answered by the leader.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::{StreamExt, TryStreamExt};

use slaq::bus;
use slaq::partition;
use slaq::protocol::{self, Encoding, EpochSummary, JobSpec, StatusRequest, StatusSnapshot, Subjects, WorkerSpec};

use crate::args::BenchClusterArgs;

const PREFIX: &str = "benchcluster";

/// A `slaq serve` replica started by the bench.
struct Replica {
    id: String,
    child: Child,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds (user and system) a process has used (Linux).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_s > 0).then(|| ticks as f64 / per_s as f64)
}

fn start_replica(args: &BenchClusterArgs, id: &str, dir: &std::path::Path) -> anyhow::Result<Replica> {
    let settings = format!(
        "[nats]\nprefix = \"{PREFIX}\"\n\n\
         [scheduler]\nepoch_ms = {epoch}\nworker_timeout_ms = 3600000\nmax_jobs = 1048576\njob_mailbox = 4096\n\n\
         [state]\nmode = \"jetstream\"\nsnapshot_ms = 2000\nreplicas = {copies}\n\n\
         [ha]\nenabled = true\nlease_ms = {lease}\nreplica_id = \"{id}\"\n\n\
         [cluster]\nshared = true\npartitions = {partitions}\n",
        epoch = args.epoch_ms,
        copies = args.state_replicas,
        lease = args.lease_ms,
        partitions = args.partitions,
    );
    let config = dir.join(format!("{id}.toml"));
    std::fs::write(&config, settings)?;
    let log = std::fs::File::create(dir.join(format!("{id}.log")))?;
    let child = Command::new(std::env::current_exe()?)
        .args(["serve", "--nats", &args.server.nats.join(","), "--config"])
        .arg(&config)
        .env("RUST_LOG", "slaq=info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting a replica")?;
    Ok(Replica { id: id.to_string(), child })
}

/// The status of every job, read in pages by id prefix (an answer must fit in one message).
/// Registers the workers and the jobs as their processes would: each hello is a request,
/// sent again when not answered within the agent's default `hello_timeout`, with at most
/// `HELLOS_IN_FLIGHT` waiting at once. Returns how many were sent again.
async fn register(client: &async_nats::Client, s: &Subjects, workers: usize, jobs: usize) -> anyhow::Result<u64> {
    let retried = AtomicU64::new(0);
    let hellos = (0..workers)
        .map(|w| {
            let id = format!("w{w}");
            let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None, advertise: None };
            protocol::encode(Encoding::MsgPack, &spec).map(|b| (s.worker_hello(&id), b))
        })
        .chain((0..jobs).map(|j| {
            let id = format!("job{j}");
            protocol::encode(Encoding::MsgPack, &JobSpec::new(&id)).map(|b| (s.job_hello(&id), b))
        }));
    let retried_ref = &retried;
    futures_util::stream::iter(hellos)
        .map(|hello| async move {
            let (subject, bytes) = hello?;
            let bytes = bytes::Bytes::from(bytes);
            loop {
                let answer = tokio::time::timeout(
                    slaq::agent::DEFAULT_HELLO_TIMEOUT,
                    client.request(subject.clone(), bytes.clone()),
                )
                .await;
                if matches!(answer, Ok(Ok(_))) {
                    return Ok::<_, anyhow::Error>(());
                }
                retried_ref.fetch_add(1, Ordering::Relaxed);
                if answer.is_ok() {
                    // No responders (a leader changing): wait before asking again.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        })
        .buffer_unordered(HELLOS_IN_FLIGHT)
        .try_for_each(|()| async { Ok(()) })
        .await?;
    Ok(retried.load(Ordering::Relaxed))
}

/// Hellos waiting for their answers at once.
const HELLOS_IN_FLIGHT: usize = 4096;

/// The status without jobs or workers (asked up to three times: a busy leader may be late).
async fn status(client: &async_nats::Client, s: &Subjects) -> Option<StatusSnapshot> {
    let request = StatusRequest { jobs: Some("-".into()), limit: Some(0) };
    for _ in 0..3 {
        let answer = bus::request(client, s.ctl_status(), Encoding::MsgPack, &request, Duration::from_secs(5)).await;
        if let Ok(st) = answer {
            return Some(st);
        }
    }
    None
}

fn pct(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

pub fn cluster(args: BenchClusterArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.replicas >= 2 && args.jobs > 0 && args.workers > 0, "--replicas >= 2, sizes positive");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(run(args))?;
    println!("{report}");
    Ok(())
}

async fn run(args: BenchClusterArgs) -> anyhow::Result<serde_json::Value> {
    let s = Subjects::new(PREFIX)?;
    let dir = std::env::temp_dir().join(format!("slaq-bench-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (client, _) = bus::connect(&args.server.nats, "bench-cluster", 1 << 16).await?;
    let mut replicas: Vec<Replica> =
        (1..=args.replicas).map(|i| start_replica(&args, &format!("r{i}"), &dir)).collect::<anyhow::Result<_>>()?;
    let started = Instant::now();
    loop {
        let ready = status(&client, &s).await.is_some_and(|st| {
            st.leader.is_some()
                && st.owners.len() == args.replicas
                && st.owners.values().map(Vec::len).sum::<usize>() == args.partitions as usize
        });
        if ready {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(60), "replicas not ready in 60 s (logs in {dir:?})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "replicas ready after {:?}; registering {} workers and {} jobs",
        started.elapsed(),
        args.workers,
        args.jobs
    );
    // The leader's epochs, as it publishes them.
    let epochs: Arc<Mutex<Vec<(Instant, EpochSummary)>>> = Arc::default();
    {
        let mut sub = client.subscribe(s.ctl_epoch()).await?;
        let epochs = epochs.clone();
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                if let Ok(e) = protocol::decode::<EpochSummary>(Encoding::MsgPack, &m.payload, "epoch") {
                    epochs.lock().unwrap_or_else(|p| p.into_inner()).push((Instant::now(), e));
                }
            }
        });
    }
    // The owners' bids as they send them: each job's points, by the replica that sent them.
    let bids: Arc<Mutex<HashMap<String, (String, u64)>>> = Arc::default();
    {
        let mut sub = client.subscribe(s.part_bids_all()).await?;
        let (bids, partitions) = (bids.clone(), args.partitions);
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                if let Ok(m) = slaq::protocol::PartitionBids::decode(&m.payload, partitions) {
                    let mut bids = bids.lock().unwrap_or_else(|p| p.into_inner());
                    for (job, bid) in m.bids {
                        bids.insert(job, (m.replica.clone(), bid.points));
                    }
                }
            }
        });
    }
    let registering = Instant::now();
    let retried = register(&client, &s, args.workers, args.jobs).await?;
    let registration_s = registering.elapsed().as_secs_f64();
    eprintln!("registered in {registration_s:.1} s ({retried} hellos sent again after no answer)");
    // Reports from a thread of its own, counted per partition.
    let per_partition: Arc<Vec<AtomicU64>> = Arc::new((0..args.partitions).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let reporter = {
        let (urls, jobs, rate, partitions) = (args.server.nats.clone(), args.jobs, args.reports_per_s, args.partitions);
        let (per_partition, stop, s) = (per_partition.clone(), stop.clone(), s.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async move {
                let (client, _) = bus::connect(&urls, "bench-cluster-reports", 1024).await?;
                let ids: Vec<(String, String, usize)> = (0..jobs)
                    .map(|j| {
                        let id = format!("job{j}");
                        let subject = s.job_loss(&id);
                        let p = partition::of(&id, partitions) as usize;
                        (id, subject, p)
                    })
                    .collect();
                let round = Duration::from_secs_f64(1.0 / rate);
                let mut tick = tokio::time::interval(round);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                for iter in 1u64.. {
                    tick.tick().await;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    for (j, (id, subject, p)) in ids.iter().enumerate() {
                        let loss = 0.2 + (1.0 + (j % 7) as f64) / (iter as f64).powf(0.5 + (j % 5) as f64 * 0.2);
                        let r = protocol::LossReport::new(id, iter, loss, 1.0 + (j % 3) as f64, 1 + (iter % 4) as u32);
                        let bytes = protocol::encode(Encoding::MsgPack, &r)?;
                        client.publish(subject.clone(), bytes.into()).await?;
                        per_partition[*p].fetch_add(1, Ordering::Relaxed);
                    }
                }
                client.flush().await?;
                Ok(())
            })
        })
    };
    tokio::time::sleep(Duration::from_secs(args.warm_up_s)).await;
    // The measured window.
    let owners = status(&client, &s).await.context("status")?.owners;
    let counts = |pp: &[AtomicU64]| pp.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<u64>>();
    let cpu0: Vec<Option<f64>> = replicas.iter().map(|r| cpu_seconds(r.child.id())).collect();
    let (reports0, t0) = (counts(&per_partition), Instant::now());
    tokio::time::sleep(Duration::from_secs(args.measure_s)).await;
    let cpu1: Vec<Option<f64>> = replicas.iter().map(|r| cpu_seconds(r.child.id())).collect();
    let (reports1, t1) = (counts(&per_partition), Instant::now());
    let after = status(&client, &s).await.context("status")?;
    let leader = after.leader.clone().unwrap_or_default();
    let window: Vec<EpochSummary> = epochs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(at, _)| *at >= t0 && *at <= t1)
        .map(|(_, e)| e.clone())
        .collect();
    let per_replica: Vec<serde_json::Value> = replicas
        .iter()
        .zip(cpu0.iter().zip(&cpu1))
        .map(|(r, (a, b))| {
            let parts = owners.get(&r.id).cloned().unwrap_or_default();
            let reports: u64 = parts.iter().map(|&p| reports1[p as usize] - reports0[p as usize]).sum();
            let cpu = a.zip(*b).map(|(a, b)| b - a);
            serde_json::json!({
                "replica": r.id,
                "leader": r.id == leader,
                "partitions": parts.len(),
                "reports": reports,
                "cpu_s": cpu,
                "cpu_s_per_million_reports": cpu.map(|c| c / (reports.max(1) as f64 / 1e6)),
            })
        })
        .collect();
    let total_ms: Vec<f64> = window.iter().map(|e| e.total_ms).collect();
    let measured = serde_json::json!({
        "registration_s": registration_s,
        "hellos_sent_again": retried,
        "seconds": (t1 - t0).as_secs_f64(),
        "reports_sent": reports1.iter().sum::<u64>() - reports0.iter().sum::<u64>(),
        "epochs": window.len(),
        "epoch_p50_ms": pct(total_ms.clone(), 0.5),
        "epoch_p99_ms": pct(total_ms, 0.99),
        "epoch_max_ms": window.iter().map(|e| e.total_ms).fold(0.0, f64::max),
        "epoch_cpu_p50_ms": pct(window.iter().filter_map(|e| e.cpu_ms).collect(), 0.5),
        "epoch_cpu_p99_ms": pct(window.iter().filter_map(|e| e.cpu_ms).collect(), 0.99),
        "collect_p99_ms": pct(window.iter().map(|e| e.collect_ms).collect(), 0.99),
        "policy_p99_ms": pct(window.iter().map(|e| e.policy_ms).collect(), 0.99),
        "publish_p99_ms": pct(window.iter().map(|e| e.publish_ms).collect(), 0.99),
        "jobs_without_bid_max": window.iter().map(|e| e.jobs_without_bid).max(),
        "num_jobs_min": window.iter().map(|e| e.num_jobs).min(),
        "workers_moved_per_epoch_p50": pct(window.iter().map(|e| e.workers_moved as f64).collect(), 0.5),
        "replicas": per_replica,
    });
    eprintln!("{measured}");
    // Kill -9 a replica that holds partitions and does not lead.
    let victim_at = replicas
        .iter()
        .position(|r| r.id != leader && owners.get(&r.id).is_some_and(|p| !p.is_empty()))
        .context("no replica holds partitions without leading")?;
    let lost: Vec<u32> = owners.get(&replicas[victim_at].id).cloned().unwrap_or_default();
    // Each job's points as its owner last sent them.
    let before: HashMap<String, u64> =
        bids.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(j, (_, n))| (j.clone(), *n)).collect();
    let victim = replicas.remove(victim_at);
    let victim_id = victim.id.clone();
    let killed = Instant::now();
    drop(victim);
    let deadline = killed + Duration::from_secs(120);
    // Read from the partition bucket itself (a busy leader's status answer would add its delay).
    let owned_again = loop {
        if let Ok(owners) = slaq::bus::partitions::owners(&client, PREFIX, args.partitions).await
            && owners.iter().all(|(r, p)| *r != victim_id || p.is_empty())
            && owners.values().map(Vec::len).sum::<usize>() == args.partitions as usize
        {
            break Some(killed.elapsed());
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lost_jobs: Vec<String> =
        before.keys().filter(|j| lost.contains(&partition::of(j, args.partitions))).cloned().collect();
    // Back with its history: a surviving owner sends the job's bid with more points than the
    // victim last sent (read from the owners' own messages, not from the busy leader).
    let (mut with_history, mut back_after) = (0, None);
    while Instant::now() < deadline {
        with_history = {
            let bids = bids.lock().unwrap_or_else(|p| p.into_inner());
            lost_jobs
                .iter()
                .filter(|j| {
                    bids.get(*j).is_some_and(|(r, n)| *r != victim_id && *n > before.get(*j).copied().unwrap_or(0))
                })
                .count()
        };
        if with_history == lost_jobs.len() {
            back_after = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let num_jobs = status(&client, &s).await.map(|st| st.num_jobs);
    // Workers moved from the kill until all were back, against as many epochs before it.
    let recovered = Instant::now();
    tokio::time::sleep(Duration::from_millis(3 * args.epoch_ms)).await;
    stop.store(true, Ordering::Relaxed);
    let all: Vec<(Instant, EpochSummary)> = epochs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let during: Vec<&EpochSummary> =
        all.iter().filter(|(at, _)| *at >= killed && *at <= recovered).map(|(_, e)| e).collect();
    let baseline: Vec<&EpochSummary> =
        all.iter().filter(|(at, _)| *at >= t0 && *at < killed).rev().take(during.len()).map(|(_, e)| e).collect();
    let moved = |v: &[&EpochSummary]| v.iter().map(|e| e.workers_moved).sum::<usize>();
    let kill = serde_json::json!({
        "victim": victim_id,
        "partitions_lost": lost.len(),
        "jobs_lost": lost_jobs.len(),
        "lease_s": args.lease_ms as f64 / 1000.0,
        "killed_at_unix_s": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()) - killed.elapsed().as_secs_f64(),
        "owned_again_s": owned_again.map(|d| d.as_secs_f64()),
        "jobs_back_with_history": with_history,
        "all_back_s": back_after.map(|d| d.as_secs_f64()),
        "num_jobs_after": num_jobs,
        "epochs_until_back": during.len(),
        "workers_moved_until_back": moved(&during),
        "workers_moved_as_many_epochs_before": moved(&baseline),
        "workers": args.workers,
    });
    let _ = reporter.join();
    drop(replicas);
    eprintln!("replicas' logs: {}", dir.display());
    Ok(serde_json::json!({
        "jobs": args.jobs,
        "workers": args.workers,
        "replicas": args.replicas,
        "partitions": args.partitions,
        "epoch_ms": args.epoch_ms,
        "reports_per_s_per_job": args.reports_per_s,
        "measured": measured,
        "kill": kill,
        "note": "CPU seconds of each replica process over the window; the leader's include planning. This machine's cores are shared by every process of the run."
    }))
}
