//! The CLI commands that talk to NATS: `serve`, `worker`, `status`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};

use slaq::bus;
use slaq::protocol::{self, Ack, Encoding, Heartbeat, StatusSnapshot, Subjects, WorkerAssignment, WorkerSpec};
use slaq::service::{self, Overrides, RawConfig};

use crate::{BenchEpochArgs, BenchIngestArgs, EmulateArgs, ServeArgs, StatusArgs, WorkerArgs};

/// Resolves once SIGINT or SIGTERM arrives.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let raw = match &args.config {
        Some(path) => RawConfig::load(path)?,
        None => RawConfig::default(),
    };
    let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("SLAQ_")).collect();
    let overrides = Overrides {
        nats: args.nats,
        prefix: args.prefix,
        epoch_ms: args.epoch_ms,
        policy: args.policy,
        refit_ms: args.refit_ms,
        floor: args.floor,
    };
    let config = raw.resolve(&env, &overrides)?;
    actix::System::new().block_on(async move {
        let (client, counters) =
            bus::connect(&config.nats_urls, &config.client_name, config.subscription_capacity).await?;
        service::run(client, counters, config, shutdown_signal(), |_| {}).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}

pub fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    anyhow::ensure!(protocol::valid_id(&args.id), "--id must be 1-64 characters from [A-Za-z0-9_-]");
    anyhow::ensure!(args.beat_ms > 0, "--beat-ms must be positive");
    let subjects = Subjects::new(&args.bus.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let (client, _) = bus::connect(&args.bus.nats, &format!("slaq-worker-{}", args.id), 1024).await?;
        let mut assignments = client.subscribe(subjects.worker_assign(&args.id)).await?;
        let spec = WorkerSpec { worker: args.id.clone(), machine: args.machine.clone(), slots: 1, kind: None };
        let hello = || async {
            let ack: Ack =
                bus::request(&client, subjects.worker_hello(&args.id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await?;
            anyhow::ensure!(ack.ok, "scheduler refused the worker: {}", ack.error.unwrap_or_default());
            Ok(())
        };
        // The scheduler may not be up yet: keep saying hello until it answers.
        while let Err(e) = hello().await {
            warn!(error = %format!("{e:#}"), "hello not answered yet; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        info!(worker = %args.id, "registered");
        let mut beat = tokio::time::interval(Duration::from_millis(args.beat_ms));
        let mut child: Option<tokio::process::Child> = None;
        let shutdown = shutdown_signal();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = beat.tick() => {
                    let beat = Heartbeat { worker: args.id.clone(), at: None };
                    if let Err(e) = bus::publish(&client, subjects.worker_beat(&args.id), Encoding::MsgPack, &beat).await {
                        warn!(error = %e, "heartbeat failed");
                    }
                }
                message = futures_util::StreamExt::next(&mut assignments) => {
                    let Some(message) = message else { break };
                    let assignment: WorkerAssignment = match protocol::decode(Encoding::MsgPack, &message.payload, "assignment") {
                        Ok(a) => a,
                        Err(e) => { warn!(error = %e, "ignoring an undecodable assignment"); continue; }
                    };
                    info!(worker = %args.id, epoch = assignment.epoch, job = ?assignment.job, "assignment");
                    if let Some(mut old) = child.take() {
                        let _ = old.kill().await;
                    }
                    if let (Some(cmd), Some(job)) = (&args.exec, &assignment.job) {
                        let spawned = tokio::process::Command::new("sh")
                            .arg("-c").arg(cmd)
                            .env("SLAQ_JOB", job).env("SLAQ_WORKER", &args.id).env("SLAQ_EPOCH", assignment.epoch.to_string())
                            .kill_on_drop(true)
                            .spawn();
                        match spawned {
                            Ok(c) => child = Some(c),
                            Err(e) => warn!(error = %e, "cannot start the --exec command"),
                        }
                    }
                }
            }
        }
        if let Some(mut old) = child.take() {
            let _ = old.kill().await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
        Ok::<_, anyhow::Error>(())
    })
}

pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.timeout > 0.0, "--timeout must be positive");
    let subjects = Subjects::new(&args.bus.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let snapshot: StatusSnapshot = runtime.block_on(async {
        let (client, _) = bus::connect(&args.bus.nats, "slaq-status", 16).await?;
        bus::request(&client, subjects.ctl_status(), Encoding::MsgPack, &(), Duration::from_secs_f64(args.timeout))
            .await
            .context("asking the scheduler for its status (is `slaq serve` running?)")
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snapshot)?);
        return Ok(());
    }
    println!(
        "epoch {}  policy {}  jobs {}  workers {}",
        snapshot.epoch,
        snapshot.policy,
        snapshot.jobs.len(),
        snapshot.workers.len()
    );
    println!("\n{:<24} {:>8} {:>14} {:>14} {:>8}", "job", "iter", "loss", "gain", "workers");
    for j in &snapshot.jobs {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
        println!(
            "{:<24} {:>8} {:>14} {:>14} {:>8}",
            j.job,
            j.last_iter.map_or("-".into(), |i| i.to_string()),
            opt(j.last_loss),
            opt(j.predicted_gain),
            j.workers
        );
    }
    println!("\n{:<24} {:<24} {:>10}", "worker", "job", "silent s");
    for w in &snapshot.workers {
        println!("{:<24} {:<24} {:>10.1}", w.worker, w.job.as_deref().unwrap_or("-"), w.silent_s);
    }
    println!("\naccepted: {:?}", snapshot.accepted);
    println!("rejected: {:?}", snapshot.rejected);
    Ok(())
}

pub fn emulate(args: EmulateArgs) -> anyhow::Result<()> {
    use slaq::sim::{self, PolicySpec, SimConfig, WorkloadConfig};
    anyhow::ensure!(
        args.speed > 0.0 && args.epoch_ms > 0 && args.workers > 0,
        "--speed, --epoch-ms and --workers must be positive"
    );
    let curves = crate::load_all(&args.curves)?;
    let workload = WorkloadConfig { num_jobs: args.jobs, seed: args.seed, ..WorkloadConfig::default() };
    let jobs = sim::workload::generate(&curves, &workload)?;
    let epoch_s = args.epoch_ms as f64 / 1000.0 * args.speed;
    let sim_config = SimConfig { num_workers: args.workers, epoch_s, ..SimConfig::default() };
    let policy = PolicySpec::named(&args.policy).filter(|p| !p.is_oracle()).with_context(|| {
        format!("unknown policy {:?}; expected the policy slaq serve runs (slaq or fair)", args.policy)
    })?;
    let simulated = sim::engine::run(&jobs, &sim_config, policy, |_| {});
    let config = slaq::emulate::EmulateConfig {
        subjects: Subjects::new(&args.bus.prefix)?,
        num_workers: args.workers,
        speed: args.speed,
        speedup: sim_config.speedup,
        min_workers_per_job: sim_config.min_workers_per_job,
        sample_s: epoch_s,
        max_duration: Duration::from_secs_f64(args.duration),
        beat_every: Duration::from_millis(1000),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let live = runtime.block_on(async {
        let (client, _) = bus::connect(&args.bus.nats, "slaq-emulate", 65_536).await?;
        let live = slaq::emulate::run(&client, &jobs, &config).await?;
        let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
        Ok::<_, anyhow::Error>(live)
    })?;
    let diff_pct =
        100.0 * (live.summary.mean_loss_area - simulated.summary.mean_loss_area) / simulated.summary.mean_loss_area;
    let report = serde_json::json!({
        "jobs": args.jobs,
        "workers": args.workers,
        "seed": args.seed,
        "speed": args.speed,
        "epoch_s": epoch_s,
        "policy": policy.name,
        "live": live.summary,
        "simulated": simulated.summary,
        "loss_area_diff_pct": diff_pct,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "policy {}: {} jobs on {} workers, seed {}, {}x real time, epoch {epoch_s} s",
            policy.name, args.jobs, args.workers, args.seed, args.speed
        );
        println!(
            "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "run", "loss area", "t90 s", "t95 s", "JCT s", "unfinished"
        );
        for (name, s) in [("live", &live.summary), ("simulated", &simulated.summary)] {
            println!(
                "{:<10} {:>10.2} {:>10.1} {:>10.1} {:>10.1} {:>10}",
                name, s.mean_loss_area, s.mean_time_to_90_s, s.mean_time_to_95_s, s.mean_jct_s, s.jobs_unfinished
            );
        }
        println!("live vs simulated mean loss area: {diff_pct:+.1}%");
    }
    Ok(())
}

/// Resident set size of this process in bytes (Linux), for memory figures.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Starts the scheduler in this process (inside the running actix System) with a private
/// prefix; returns its handle and the stop trigger.
async fn start_in_process(
    urls: &[String],
    prefix: &str,
    epoch_ms: u64,
) -> anyhow::Result<(service::ServiceHandle, tokio::sync::oneshot::Sender<()>)> {
    let mut raw = RawConfig::default();
    raw.scheduler.epoch_ms = epoch_ms;
    raw.scheduler.worker_timeout_ms = 600_000;
    raw.scheduler.job_mailbox = 1 << 16;
    raw.scheduler.max_jobs = 1 << 20;
    if let Ok(threads) = std::env::var("SLAQ_BENCH_JOB_THREADS") {
        raw.scheduler.job_threads = threads.parse().context("SLAQ_BENCH_JOB_THREADS")?;
    }
    let overrides = Overrides { nats: urls.to_vec(), prefix: Some(prefix.to_string()), ..Overrides::default() };
    let config = raw.resolve(&BTreeMap::new(), &overrides)?;
    let (client, counters) = bus::connect(&config.nats_urls, "slaq-bench-scheduler", 1 << 20).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    actix::spawn(async move {
        let shutdown = async move {
            let _ = stop_rx.await;
        };
        if let Err(e) = service::run(client, counters, config, shutdown, move |h| {
            let _ = ready_tx.send(h);
        })
        .await
        {
            warn!(error = %e, "in-process scheduler failed");
        }
    });
    let handle = ready_rx.await.context("the in-process scheduler did not start")?;
    Ok((handle, stop_tx))
}

fn encoded_reports(jobs: u64, reports: u64, prefix: &str) -> anyhow::Result<Vec<(String, bytes::Bytes)>> {
    let subjects = Subjects::new(prefix)?;
    (0..reports)
        .map(|i| {
            let (job, iter) = (i % jobs, i / jobs + 1);
            let id = format!("job{job}");
            let r = protocol::LossReport {
                job: id.clone(),
                iter,
                loss: 1.0 / iter as f64,
                iter_seconds: 0.5,
                workers: 1,
                batch_size: None,
                sent_at: None,
            };
            Ok((subjects.job_loss(&id), bytes::Bytes::from(protocol::encode(Encoding::MsgPack, &r)?)))
        })
        .collect()
}

/// Publishes pre-encoded messages from a thread of its own (a load generator must not share
/// the measured process's thread); returns when the server has them all.
fn publish_from_another_thread(
    urls: Vec<String>,
    messages: Vec<(String, bytes::Bytes)>,
) -> std::thread::JoinHandle<anyhow::Result<()>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async move {
            let (client, _) = bus::connect(&urls, "bench-publisher", 1024).await?;
            for (subject, payload) in messages {
                client.publish(subject, payload).await?;
            }
            client.flush().await?;
            Ok(())
        })
    })
}

pub fn bench_ingest(args: BenchIngestArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.reports > 0 && args.jobs > 0, "--reports and --jobs must be positive");
    let report = actix::System::new().block_on(async move {
        // Raw NATS: the same encoded messages, published from another thread and received by a
        // plain subscriber on this one.
        let raw_messages = encoded_reports(args.jobs, args.reports, "benchraw")?;
        let (sub_client, _) = bus::connect(&args.nats, "bench-raw-sub", 1 << 22).await?;
        let mut raw_sub = sub_client.subscribe("benchraw.v1.job.*.loss").await?;
        sub_client.flush().await?;
        let started = std::time::Instant::now();
        let publisher = publish_from_another_thread(args.nats.clone(), raw_messages);
        let mut received = 0u64;
        while received < args.reports {
            match tokio::time::timeout(Duration::from_secs(10), futures_util::StreamExt::next(&mut raw_sub)).await {
                Ok(Some(_)) => received += 1,
                _ => break,
            }
        }
        let raw_s = started.elapsed().as_secs_f64();
        publisher.join().map_err(|_| anyhow::anyhow!("publisher thread panicked"))??;
        drop(raw_sub);

        // slaq: the scheduler on this thread, the reports into its job actors' predictors.
        let (handle, stop) = start_in_process(&args.nats, "benchslaq", 60_000).await?;
        let (status_client, _) = bus::connect(&args.nats, "bench-status", 16).await?;
        let messages = encoded_reports(args.jobs, args.reports, "benchslaq")?;
        let started = std::time::Instant::now();
        let publisher = publish_from_another_thread(args.nats.clone(), messages);
        // Done when the ingest loop has accounted for every report (accepted or rejected) and
        // the job actors have observed every accepted one.
        let subjects = Subjects::new("benchslaq")?;
        let (mut rejected, mut observed) = (0u64, 0u64);
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while std::time::Instant::now() < deadline {
            let status: StatusSnapshot =
                bus::request(&status_client, subjects.ctl_status(), Encoding::MsgPack, &(), Duration::from_secs(10))
                    .await?;
            let accepted = status.accepted.get("loss").copied().unwrap_or(0);
            rejected = status.rejected.values().sum();
            observed = handle.observed_points().await;
            if accepted + rejected >= args.reports && observed >= accepted {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let slaq_s = started.elapsed().as_secs_f64();
        publisher.join().map_err(|_| anyhow::anyhow!("publisher thread panicked"))??;
        let _ = stop.send(());
        let raw_rate = received as f64 / raw_s;
        let slaq_rate = observed as f64 / slaq_s;
        Ok::<_, anyhow::Error>(serde_json::json!({
            "reports": args.reports,
            "jobs": args.jobs,
            "raw_nats_per_s": raw_rate,
            "raw_received": received,
            "slaq_per_s": slaq_rate,
            "slaq_observed": observed,
            "slaq_rejected": rejected,
            "slaq_vs_raw": slaq_rate / raw_rate,
        }))
    })?;
    println!("{}", if args.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

pub fn bench_epoch(args: BenchEpochArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.jobs > 0 && args.workers > 0 && args.epochs > 0, "sizes must be positive");
    let report = actix::System::new().block_on(async move {
        let baseline_rss = resident_bytes();
        let (handle, stop) = start_in_process(&args.nats, "benchepoch", args.epoch_ms).await?;
        let (client, _) = bus::connect(&args.nats, "bench-epoch-load", 1024).await?;
        let subjects = Subjects::new("benchepoch")?;
        for w in 0..args.workers {
            let id = format!("w{w}");
            let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None };
            bus::publish(&client, subjects.worker_hello(&id), Encoding::MsgPack, &spec).await?;
        }
        let after_workers_rss = resident_bytes();
        // Every job reports 40 points of a real-looking curve (so its predictor is fitted).
        for iter in 1..=40u64 {
            for j in 0..args.jobs {
                let id = format!("job{j}");
                let loss = 0.2 + (1.0 + (j % 7) as f64) / (iter as f64).powf(0.5 + (j % 5) as f64 * 0.2);
                let r = protocol::LossReport {
                    job: id.clone(),
                    iter,
                    loss,
                    iter_seconds: 1.0 + (j % 3) as f64,
                    workers: 1 + (iter % 4) as u32,
                    batch_size: None,
                    sent_at: None,
                };
                bus::publish(&client, subjects.job_loss(&id), Encoding::MsgPack, &r).await?;
            }
        }
        client.flush().await?;
        // Let the reports land and refits settle, then measure.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while handle.observed_points().await < (args.jobs * 40) as u64 {
            anyhow::ensure!(std::time::Instant::now() < deadline, "reports did not all land");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let first = handle.epochs().await.last().map_or(0, |e| e.epoch);
        let warm_up = 3;
        loop {
            let epochs = handle.epochs().await;
            let measured: Vec<_> =
                epochs.iter().filter(|e| e.epoch > first + warm_up && e.num_jobs == args.jobs).cloned().collect();
            if measured.len() >= args.epochs {
                let jobs_rss = resident_bytes();
                let _ = stop.send(());
                let pct = |mut v: Vec<f64>, q: f64| {
                    v.sort_by(f64::total_cmp);
                    v[((v.len() - 1) as f64 * q).round() as usize]
                };
                let field = |f: fn(&protocol::EpochSummary) -> f64| measured.iter().map(f).collect::<Vec<_>>();
                let total = field(|e| e.total_ms);
                let per_job = match (after_workers_rss, jobs_rss) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a) / args.jobs as u64),
                    _ => None,
                };
                return Ok::<_, anyhow::Error>(serde_json::json!({
                    "jobs": args.jobs,
                    "workers": args.workers,
                    "epochs": measured.len(),
                    "epoch_p50_ms": pct(total.clone(), 0.5),
                    "epoch_p99_ms": pct(total, 0.99),
                    "gather_p50_ms": pct(field(|e| e.gather_ms), 0.5),
                    "policy_p50_ms": pct(field(|e| e.policy_ms), 0.5),
                    "publish_p50_ms": pct(field(|e| e.publish_ms), 0.5),
                    "late_bids_max": measured.iter().map(|e| e.late_bids).max(),
                    "workers_moved_p50": pct(measured.iter().map(|e| e.workers_moved as f64).collect(), 0.5),
                    "rss_start_bytes": baseline_rss,
                    "rss_with_workers_bytes": after_workers_rss,
                    "rss_with_jobs_bytes": jobs_rss,
                    "rss_bytes_per_job": per_job,
                    "note": "RSS of this process, which runs the scheduler and the load generator's client"
                }));
            }
            tokio::time::sleep(Duration::from_millis(args.epoch_ms)).await;
        }
    })?;
    println!("{}", if args.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}
