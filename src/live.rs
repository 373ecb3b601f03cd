//! The CLI commands that talk to NATS: `serve`, `worker`, `status`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};

use slaq::bus;
use slaq::protocol::{self, Ack, Encoding, Heartbeat, StatusSnapshot, Subjects, WorkerAssignment, WorkerSpec};
use slaq::service::{self, Overrides, RawConfig};

use crate::{EmulateArgs, ServeArgs, StatusArgs, WorkerArgs};

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
    let overrides = Overrides { nats: args.nats, prefix: args.prefix, epoch_ms: args.epoch_ms, policy: args.policy };
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
    let subjects = Subjects::new(&args.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let (client, _) = bus::connect(&args.nats, &format!("slaq-worker-{}", args.id), 1024).await?;
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
    let subjects = Subjects::new(&args.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let snapshot: StatusSnapshot = runtime.block_on(async {
        let (client, _) = bus::connect(&args.nats, "slaq-status", 16).await?;
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
    anyhow::ensure!(args.speed > 0.0 && args.epoch_ms > 0 && args.workers > 0, "--speed, --epoch-ms and --workers must be positive");
    let curves = crate::load_all(&args.curves)?;
    let workload = WorkloadConfig { num_jobs: args.jobs, seed: args.seed, ..WorkloadConfig::default() };
    let jobs = sim::workload::generate(&curves, &workload)?;
    let epoch_s = args.epoch_ms as f64 / 1000.0 * args.speed;
    let sim_config = SimConfig { num_workers: args.workers, epoch_s, ..SimConfig::default() };
    let simulated = sim::engine::run(&jobs, &sim_config, PolicySpec::named("slaq").context("slaq policy")?, |_| {});
    let config = slaq::emulate::EmulateConfig {
        subjects: Subjects::new(&args.prefix)?,
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
        let (client, _) = bus::connect(&args.nats, "slaq-emulate", 65_536).await?;
        let live = slaq::emulate::run(&client, &jobs, &config).await?;
        let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
        Ok::<_, anyhow::Error>(live)
    })?;
    let diff_pct = 100.0 * (live.summary.avg_norm_loss - simulated.summary.avg_norm_loss) / simulated.summary.avg_norm_loss;
    let report = serde_json::json!({
        "jobs": args.jobs,
        "workers": args.workers,
        "seed": args.seed,
        "speed": args.speed,
        "epoch_s": epoch_s,
        "live": live.summary,
        "simulated": simulated.summary,
        "avg_norm_loss_diff_pct": diff_pct,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{} jobs on {} workers, seed {}, {}x real time, epoch {epoch_s} s", args.jobs, args.workers, args.seed, args.speed);
        println!("{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}", "run", "avg loss", "t90 s", "t95 s", "JCT s", "unfinished");
        for (name, s) in [("live", &live.summary), ("simulated", &simulated.summary)] {
            println!(
                "{:<10} {:>10.4} {:>10.1} {:>10.1} {:>10.1} {:>10}",
                name, s.avg_norm_loss, s.mean_time_to_90_s, s.mean_time_to_95_s, s.mean_jct_s, s.jobs_unfinished
            );
        }
        println!("live vs simulated average normalised loss: {diff_pct:+.1}%");
    }
    Ok(())
}
