//! `slaq bench cluster`: replicas that share the jobs (issue #19), measured from outside:
//! epochs, each replica's CPU per report, and a replica killed (-9). Needs a NATS server whose
//! account maps the reports to the partitions (deploy/bench-cluster.sh starts a three-node
//! cluster so).

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

use super::support::{BenchServer, pct};
use crate::common::Size;

#[derive(clap::Args)]
pub(crate) struct BenchClusterArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[arg(long, default_value_t = 3)]
    pub(crate) replicas: usize,
    /// As the server's mapping says (`{{partition(N,1)}}`).
    #[arg(long, default_value_t = 32)]
    pub(crate) partitions: u32,
    #[command(flatten)]
    pub(crate) size: Size<10_000, 40_000>,
    #[arg(long, default_value_t = 1.0)]
    pub(crate) reports_per_s: f64,
    #[arg(long, default_value_t = 1_000)]
    pub(crate) epoch_ms: u64,
    #[arg(long, default_value_t = 4_000)]
    pub(crate) lease_ms: u64,
    /// Copies of the stream and buckets (3 on a three-node cluster).
    #[arg(long, default_value_t = 1)]
    pub(crate) state_replicas: usize,
    #[arg(long, default_value_t = 30)]
    pub(crate) warm_up_s: u64,
    #[arg(long, default_value_t = 30)]
    pub(crate) measure_s: u64,
}

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
    let request = StatusRequest { jobs: Some("-".into()), limit: Some(0), ..StatusRequest::default() };
    for _ in 0..3 {
        let answer = bus::request(client, s.ctl_status(), Encoding::MsgPack, &request, Duration::from_secs(5)).await;
        if let Ok(st) = answer {
            return Some(st);
        }
    }
    None
}

pub(crate) fn run(args: BenchClusterArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.replicas >= 2 && args.size.jobs > 0 && args.size.workers > 0,
        "--replicas >= 2, sizes positive"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(measure(args))?;
    println!("{report}");
    Ok(())
}

/// The leader's epochs as it publishes them, with when each arrived.
type Epochs = Arc<Mutex<Vec<(Instant, EpochSummary)>>>;

/// Each job's points as its owner last sent them, with the replica that sent them.
type Bids = Arc<Mutex<HashMap<String, (String, u64)>>>;

/// A run in progress: the replicas, what is watched, and the reports sent per partition.
struct Bench {
    args: BenchClusterArgs,
    s: Subjects,
    client: async_nats::Client,
    replicas: Vec<Replica>,
    epochs: Epochs,
    bids: Bids,
    per_partition: Arc<Vec<AtomicU64>>,
}

async fn measure(args: BenchClusterArgs) -> anyhow::Result<serde_json::Value> {
    let s = Subjects::new(PREFIX)?;
    let dir = std::env::temp_dir().join(format!("slaq-bench-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (client, _) = bus::connect(&args.server.nats, "bench-cluster", 1 << 16).await?;
    let replicas: Vec<Replica> =
        (1..=args.replicas).map(|i| start_replica(&args, &format!("r{i}"), &dir)).collect::<anyhow::Result<_>>()?;
    let started = Instant::now();
    while !ready(&client, &s, &args).await {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(60), "replicas not ready in 60 s (logs in {dir:?})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "replicas ready after {:?}; registering {} workers and {} jobs",
        started.elapsed(),
        args.size.workers,
        args.size.jobs
    );
    let epochs = watch_epochs(&client, &s).await?;
    let bids = watch_bids(&client, &s, args.partitions).await?;
    let registering = Instant::now();
    let retried = register(&client, &s, args.size.workers as usize, args.size.jobs).await?;
    let registration_s = registering.elapsed().as_secs_f64();
    eprintln!("registered in {registration_s:.1} s ({retried} hellos sent again after no answer)");
    let per_partition: Arc<Vec<AtomicU64>> = Arc::new((0..args.partitions).map(|_| AtomicU64::new(0)).collect());
    let mut bench = Bench { args, s, client, replicas, epochs, bids, per_partition };
    let stop = Arc::new(AtomicBool::new(false));
    let reporter = bench.report(stop.clone());
    tokio::time::sleep(Duration::from_secs(bench.args.warm_up_s)).await;
    let (mut measured, owners, leader, t0) = bench.window().await?;
    measured["registration_s"] = registration_s.into();
    measured["hellos_sent_again"] = retried.into();
    eprintln!("{measured}");
    let kill = bench.kill(&owners, &leader, t0, &stop).await?;
    let _ = reporter.join();
    let args = &bench.args;
    let report = serde_json::json!({
        "jobs": args.size.jobs,
        "workers": args.size.workers,
        "replicas": args.replicas,
        "partitions": args.partitions,
        "epoch_ms": args.epoch_ms,
        "reports_per_s_per_job": args.reports_per_s,
        "measured": measured,
        "kill": kill,
        "note": "CPU seconds of each replica process over the window; the leader's include planning. This machine's cores are shared by every process of the run."
    });
    drop(bench);
    eprintln!("replicas' logs: {}", dir.display());
    Ok(report)
}

/// Whether a leader runs and every replica holds partitions, all of them between them.
async fn ready(client: &async_nats::Client, s: &Subjects, args: &BenchClusterArgs) -> bool {
    status(client, s).await.is_some_and(|st| {
        st.leader.is_some()
            && st.owners.len() == args.replicas
            && st.owners.values().map(Vec::len).sum::<usize>() == args.partitions as usize
    })
}

/// The leader's epochs, as it publishes them.
async fn watch_epochs(client: &async_nats::Client, s: &Subjects) -> anyhow::Result<Epochs> {
    let epochs: Epochs = Arc::default();
    let mut sub = client.subscribe(s.ctl_epoch()).await?;
    let seen = epochs.clone();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if let Ok(e) = protocol::decode::<EpochSummary>(Encoding::MsgPack, &m.payload, "epoch") {
                seen.lock().unwrap_or_else(|p| p.into_inner()).push((Instant::now(), e));
            }
        }
    });
    Ok(epochs)
}

/// The owners' bids as they send them: each job's points, by the replica that sent them.
async fn watch_bids(client: &async_nats::Client, s: &Subjects, partitions: u32) -> anyhow::Result<Bids> {
    let bids: Bids = Arc::default();
    let mut sub = client.subscribe(s.part_bids_all()).await?;
    let seen = bids.clone();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if let Ok(m) = slaq::protocol::PartitionBids::decode(&m.payload, partitions) {
                let mut bids = seen.lock().unwrap_or_else(|p| p.into_inner());
                for (job, bid) in m.bids {
                    bids.insert(job, (m.replica.clone(), bid.points));
                }
            }
        }
    });
    Ok(bids)
}

impl Bench {
    /// Every job reports `reports_per_s` times a second, from a thread of its own until `stop`,
    /// counted per partition.
    fn report(&self, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<anyhow::Result<()>> {
        let args = &self.args;
        let (urls, jobs, rate, partitions) =
            (args.server.nats.clone(), args.size.jobs, args.reports_per_s, args.partitions);
        let (per_partition, s) = (self.per_partition.clone(), self.s.clone());
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
    }

    /// The measured window: epochs, and each replica's CPU per report. Returns its figures,
    /// the partitions' owners and the leader at its start, and when it started.
    async fn window(
        &self,
    ) -> anyhow::Result<(serde_json::Value, std::collections::BTreeMap<String, Vec<u32>>, String, Instant)> {
        let owners = status(&self.client, &self.s).await.context("status")?.owners;
        let counts = |pp: &[AtomicU64]| pp.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<u64>>();
        let cpu0: Vec<Option<f64>> = self.replicas.iter().map(|r| cpu_seconds(r.child.id())).collect();
        let (reports0, t0) = (counts(&self.per_partition), Instant::now());
        tokio::time::sleep(Duration::from_secs(self.args.measure_s)).await;
        let cpu1: Vec<Option<f64>> = self.replicas.iter().map(|r| cpu_seconds(r.child.id())).collect();
        let (reports1, t1) = (counts(&self.per_partition), Instant::now());
        let after = status(&self.client, &self.s).await.context("status")?;
        let leader = after.leader.clone().unwrap_or_default();
        let window: Vec<EpochSummary> = self
            .epochs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(at, _)| *at >= t0 && *at <= t1)
            .map(|(_, e)| e.clone())
            .collect();
        let per_replica: Vec<serde_json::Value> = self
            .replicas
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
        Ok((measured, owners, leader, t0))
    }

    /// Kills -9 a replica that holds partitions and does not lead, and measures how soon its
    /// partitions are owned again and its jobs back with their history, and the workers moved
    /// meanwhile (against as many epochs before the kill, from `t0`). Stops the reports.
    async fn kill(
        &mut self,
        owners: &std::collections::BTreeMap<String, Vec<u32>>,
        leader: &str,
        t0: Instant,
        stop: &AtomicBool,
    ) -> anyhow::Result<serde_json::Value> {
        let partitions = self.args.partitions;
        let victim_at = self
            .replicas
            .iter()
            .position(|r| r.id != leader && owners.get(&r.id).is_some_and(|p| !p.is_empty()))
            .context("no replica holds partitions without leading")?;
        let lost: Vec<u32> = owners.get(&self.replicas[victim_at].id).cloned().unwrap_or_default();
        // Each job's points as its owner last sent them.
        let before: HashMap<String, u64> =
            self.bids.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(j, (_, n))| (j.clone(), *n)).collect();
        let victim = self.replicas.remove(victim_at);
        let victim_id = victim.id.clone();
        let killed = Instant::now();
        drop(victim);
        let deadline = killed + Duration::from_secs(120);
        let owned_again = self.owned_again(&victim_id, killed, deadline).await;
        let lost_jobs: Vec<String> =
            before.keys().filter(|j| lost.contains(&partition::of(j, partitions))).cloned().collect();
        let (with_history, back_after) =
            self.back_with_history(&lost_jobs, &before, &victim_id, killed, deadline).await;
        let num_jobs = status(&self.client, &self.s).await.map(|st| st.num_jobs);
        // Workers moved from the kill until all were back, against as many epochs before it.
        let recovered = Instant::now();
        tokio::time::sleep(Duration::from_millis(3 * self.args.epoch_ms)).await;
        stop.store(true, Ordering::Relaxed);
        let all: Vec<(Instant, EpochSummary)> = self.epochs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let during: Vec<&EpochSummary> =
            all.iter().filter(|(at, _)| *at >= killed && *at <= recovered).map(|(_, e)| e).collect();
        let baseline: Vec<&EpochSummary> =
            all.iter().filter(|(at, _)| *at >= t0 && *at < killed).rev().take(during.len()).map(|(_, e)| e).collect();
        let moved = |v: &[&EpochSummary]| v.iter().map(|e| e.workers_moved).sum::<usize>();
        let unix_now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        Ok(serde_json::json!({
            "victim": victim_id,
            "partitions_lost": lost.len(),
            "jobs_lost": lost_jobs.len(),
            "lease_s": self.args.lease_ms as f64 / 1000.0,
            "killed_at_unix_s": unix_now - killed.elapsed().as_secs_f64(),
            "owned_again_s": owned_again.map(|d| d.as_secs_f64()),
            "jobs_back_with_history": with_history,
            "all_back_s": back_after.map(|d| d.as_secs_f64()),
            "num_jobs_after": num_jobs,
            "epochs_until_back": during.len(),
            "workers_moved_until_back": moved(&during),
            "workers_moved_as_many_epochs_before": moved(&baseline),
            "workers": self.args.size.workers,
        }))
    }

    /// How soon after `killed` every partition is owned again, none by the victim (read from
    /// the partition bucket itself: a busy leader's status answer would add its delay).
    async fn owned_again(&self, victim_id: &str, killed: Instant, deadline: Instant) -> Option<Duration> {
        let partitions = self.args.partitions;
        loop {
            if let Ok(owners) = slaq::bus::partitions::owners(&self.client, PREFIX, partitions).await
                && owners.iter().all(|(r, p)| *r != victim_id || p.is_empty())
                && owners.values().map(Vec::len).sum::<usize>() == partitions as usize
            {
                return Some(killed.elapsed());
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The lost jobs back with their history: a surviving owner sends each one's bid with more
    /// points than the victim last sent (read from the owners' own messages, not from the busy
    /// leader). Returns how many came back, and when all had.
    async fn back_with_history(
        &self,
        lost_jobs: &[String],
        before: &HashMap<String, u64>,
        victim_id: &str,
        killed: Instant,
        deadline: Instant,
    ) -> (usize, Option<Duration>) {
        let mut with_history = 0;
        while Instant::now() < deadline {
            with_history = {
                let bids = self.bids.lock().unwrap_or_else(|p| p.into_inner());
                lost_jobs
                    .iter()
                    .filter(|j| {
                        bids.get(*j).is_some_and(|(r, n)| *r != victim_id && *n > before.get(*j).copied().unwrap_or(0))
                    })
                    .count()
            };
            if with_history == lost_jobs.len() {
                return (with_history, Some(killed.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (with_history, None)
    }
}
