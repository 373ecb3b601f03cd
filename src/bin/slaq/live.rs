//! The CLI commands that talk to NATS: `serve`, `worker`, `status`, `submit`, `cancel`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;

use slaq::agent::{self, AgentConfig};
use slaq::bus;
use slaq::protocol::{
    self, Ack, Encoding, EndReason, JobCommand, JobEnd, JobSpec, StatusRequest, StatusSnapshot, Subjects, WorkerSpec,
};
use slaq::service::{self, Overrides, RawConfig};

use crate::args::{CancelArgs, EmulateArgs, ServeArgs, StatusArgs, SubmitArgs, WorkerArgs};

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

/// On each SIGHUP, reads `[tenants]` from the configuration file again and serves it from the
/// next message and epoch on; a file that does not check out is refused, keeping the tenants
/// served. Nothing else is reloaded.
async fn reload_tenants_on_hangup(path: Option<std::path::PathBuf>, tenants: slaq::actors::tenants::Tenants) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
    while hangups.recv().await.is_some() {
        let Some(path) = &path else {
            tracing::warn!("SIGHUP: no --config file to reload [tenants] from");
            continue;
        };
        match RawConfig::load(path).and_then(|raw| service::config::tenants_of(&raw)) {
            Ok(set) => {
                let names = set.as_ref().map(|s| s.names.join(", ")).unwrap_or_default();
                tenants.set(set);
                tracing::info!(tenants = %names, "SIGHUP: [tenants] reloaded");
            }
            Err(e) => tracing::warn!(error = %e, "SIGHUP: [tenants] not reloaded; the tenants served stay"),
        }
    }
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
        horizon_s: args.horizon_s,
        http_listen: args.http_listen,
        nats_auth: args.auth.to_auth(),
        replica_id: args.replica_id,
    };
    let config = raw.resolve(&env, &overrides)?;
    let (tenants, path) = (config.tenants.clone(), args.config.clone());
    actix::System::new().block_on(async move {
        actix::spawn(reload_tenants_on_hangup(path, tenants));
        let clients = service::Connections::connect(&config).await?;
        service::run_replica(clients, config, shutdown_signal()).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}

pub fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    anyhow::ensure!(protocol::valid_id(&args.id), "--id must be 1-64 characters from [A-Za-z0-9_-]");
    anyhow::ensure!(args.beat_ms > 0, "--beat-ms must be positive");
    anyhow::ensure!((1..=256).contains(&args.slots), "--slots must be 1 to 256");
    anyhow::ensure!(args.slots == 1 || args.machine.is_some(), "--slots above 1 needs --machine");
    anyhow::ensure!(
        args.stop_grace_s.is_finite() && (0.0..=3600.0).contains(&args.stop_grace_s),
        "--stop-grace-s must be 0 to 3600"
    );
    anyhow::ensure!(
        args.advertise.as_deref().is_none_or(protocol::valid_host),
        "--advertise must be a host name or IP address (1-253 characters from [A-Za-z0-9.:_-])"
    );
    let ids: Vec<String> = if args.slots == 1 {
        vec![args.id.clone()]
    } else {
        (0..args.slots).map(|i| format!("{}-{i}", args.id)).collect()
    };
    for id in &ids {
        anyhow::ensure!(protocol::valid_id(id), "worker id {id:?} is too long: shorten --id");
    }
    let subjects = Subjects::new(&args.bus.prefix)?;
    // Where the other members of a job reach this machine: the flag, else this host's name.
    let advertise = args.advertise.clone().or_else(|| host_name().filter(|h| protocol::valid_host(h)));
    // Secure by default: an agent with credentials runs submitted commands only when told which.
    let commands = if !args.allow_command.is_empty() {
        let entries = args.allow_command.iter().map(|e| agent::allow::Entry::parse(e)).collect::<Result<_, _>>()?;
        agent::allow::Commands::Allowed(entries)
    } else if args.allow_any_command || !bus::carries_credentials(&args.bus.auth.to_auth(), &args.bus.nats) {
        agent::allow::Commands::Any
    } else {
        tracing::info!(
            "connecting with credentials: submitted commands run only with --allow-command or --allow-any-command"
        );
        agent::allow::Commands::Refused
    };
    let env_allowed = agent::allow::EnvAllowed::new(&args.allow_env)?;
    let configs: Vec<AgentConfig> = ids
        .iter()
        .map(|id| AgentConfig {
            beat_every: Duration::from_millis(args.beat_ms),
            exec: args.exec.clone(),
            stop_grace: Duration::from_secs_f64(args.stop_grace_s),
            commands: commands.clone(),
            env_allowed: env_allowed.clone(),
            nats_url: args.bus.nats.first().cloned(),
            guard: std::env::current_exe().ok(),
            ..AgentConfig::new(
                subjects.clone(),
                WorkerSpec {
                    worker: id.clone(),
                    machine: args.machine.clone(),
                    slots: 1,
                    kind: args.accelerator.clone(),
                    advertise: advertise.clone(),
                },
            )
        })
        .collect();
    let auth = args.bus.auth.to_auth();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        use futures_util::FutureExt;
        let (client, _) = bus::connect_with(&args.bus.nats, &format!("slaq-worker-{}", args.id), 1024, &auth).await?;
        let shutdown = shutdown_signal().shared();
        let agents = configs.into_iter().map(|config| agent::run(client.clone(), config, shutdown.clone()));
        for result in futures_util::future::join_all(agents).await {
            result?;
        }
        Ok(())
    })
}

/// An absolute form of `path` (relative to the current directory).
fn absolute(path: &std::path::Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(path).with_context(|| format!("{}: cannot make it absolute", path.display()))?;
    abs.to_str().map(str::to_string).with_context(|| format!("{}: not UTF-8", abs.display()))
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        protocol::valid_job_id(&args.job),
        "--job must be NAME or TENANT.NAME, each 1-64 characters from [A-Za-z0-9_-]"
    );
    anyhow::ensure!(args.timeout > 0.0, "--timeout must be positive");
    let cwd = match &args.cwd {
        Some(dir) => absolute(dir)?,
        None => absolute(&std::env::current_dir().context("the current directory")?)?,
    };
    let checkpoint_dir = match &args.checkpoint_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating --checkpoint-dir {}", dir.display()))?;
            Some(absolute(dir)?)
        }
        None => None,
    };
    let command = JobCommand {
        argv: args.command.clone(),
        env: args.env.iter().cloned().collect(),
        cwd: Some(cwd),
        checkpoint_dir,
        max_restarts: args.max_restarts,
    };
    let spec = JobSpec {
        min_workers: args.min_workers,
        max_workers: args.max_workers,
        family: args.family.clone(),
        weight: args.weight,
        command: Some(command),
        worker_counts: args.worker_counts.clone(),
        max_iters: args.max_iters,
        speeds: None,
        ..JobSpec::new(&args.job)
    };
    // Refused here with the scheduler's own rules, before anything is sent.
    spec.validate(&args.job).map_err(|e| anyhow::anyhow!("invalid job: {e}"))?;
    let subjects = Subjects::new(&args.bus.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let code = runtime.block_on(async {
        let (client, _) =
            bus::connect_with(&args.bus.nats, &format!("slaq-submit-{}", args.job), 16, &args.bus.auth.to_auth())
                .await?;
        let timeout = Duration::from_secs_f64(args.timeout);
        let ack: Ack = bus::request(&client, subjects.job_hello(&args.job), Encoding::MsgPack, &spec, timeout)
            .await
            .context("submitting the job (is `slaq serve` running?)")?;
        anyhow::ensure!(ack.ok, "the scheduler refused the job: {}", ack.error.unwrap_or_default());
        eprintln!("submitted {}", args.job);
        if !args.wait {
            return Ok(0);
        }
        wait_for_outcome(&client, &subjects, &args.job, timeout).await
    })?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Polls the job's own status (`job.<id>.status`, which the job's NATS user may ask under
/// `deploy/nats/slaq-auth.conf`) until `job` has ended: 0 if it finished, 1 if it failed or was
/// cancelled, 3 if the scheduler no longer knows it and has no outcome for it.
async fn wait_for_outcome(
    client: &async_nats::Client,
    subjects: &Subjects,
    job: &str,
    timeout: Duration,
) -> anyhow::Result<i32> {
    // Polls in a row that found neither the job nor its outcome.
    let mut missing = 0;
    loop {
        match bus::request::<_, StatusSnapshot>(client, subjects.job_status(job), Encoding::MsgPack, &(), timeout).await
        {
            Ok(status) => {
                if let Some(outcome) = status.ended.iter().rev().find(|o| o.job == job) {
                    let cost = outcome.restart_s.map_or(String::new(), |s| format!("; a restart cost it {s:.1} s"));
                    eprintln!("{job}: {} after {} restart(s){cost}", outcome.outcome, outcome.restarts);
                    return Ok(if outcome.outcome == slaq::protocol::Outcome::Finished { 0 } else { 1 });
                }
                if status.jobs.iter().any(|j| j.job == job) {
                    missing = 0;
                } else {
                    missing += 1;
                    if missing >= 10 {
                        eprintln!("{job}: the scheduler no longer knows it and has no outcome for it");
                        return Ok(3);
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "status not answered; asking again"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        protocol::valid_job_id(&args.job),
        "--job must be NAME or TENANT.NAME, each 1-64 characters from [A-Za-z0-9_-]"
    );
    let subjects = Subjects::new(&args.bus.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let (client, _) = bus::connect_with(&args.bus.nats, "slaq-cancel", 16, &args.bus.auth.to_auth()).await?;
        let bye = JobEnd { job: args.job.clone(), reason: EndReason::Cancelled };
        bus::publish(&client, subjects.job_bye(&args.job), Encoding::MsgPack, &bye).await?;
        tokio::time::timeout(Duration::from_secs(5), client.flush())
            .await
            .context("NATS did not take the cancellation within 5 s")??;
        Ok::<_, anyhow::Error>(())
    })?;
    eprintln!("cancelled {}", args.job);
    Ok(())
}

/// This host's name (gethostname(2)), if it has one.
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok().filter(|h| !h.is_empty())
}

pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.timeout > 0.0, "--timeout must be positive");
    let subjects = Subjects::new(&args.bus.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let snapshot: StatusSnapshot = runtime.block_on(async {
        let (client, _) = bus::connect_with(&args.bus.nats, "slaq-status", 16, &args.bus.auth.to_auth()).await?;
        let request = StatusRequest { jobs: args.jobs.clone(), limit: args.limit };
        // One job's own status: the subject its job user may ask; the whole status is the
        // operators'.
        let subject = match &args.job {
            Some(job) => subjects.job_status(job),
            None => subjects.ctl_status(),
        };
        bus::request(&client, subject, Encoding::MsgPack, &request, Duration::from_secs_f64(args.timeout))
            .await
            .context("asking the scheduler for its status (is `slaq serve` running?)")
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snapshot)?);
        return Ok(());
    }
    println!(
        "epoch {}  policy {}  jobs {}  workers {}  state {}",
        snapshot.epoch,
        snapshot.policy,
        snapshot.num_jobs,
        snapshot.num_workers,
        if snapshot.state.is_empty() { "-" } else { &snapshot.state }
    );
    if snapshot.leader.is_some() || snapshot.term.is_some() {
        println!(
            "leader {}  term {}",
            snapshot.leader.as_deref().unwrap_or("- (no replicas)"),
            snapshot.term.map_or("-".to_string(), |t| t.to_string())
        );
    }
    // Replicas that share the jobs: who runs which partitions' jobs.
    for (replica, parts) in &snapshot.owners {
        let list: Vec<String> = parts.iter().map(u32::to_string).collect();
        println!("replica {replica}  partitions {} ({})", parts.len(), list.join(","));
    }
    if snapshot.truncated || args.jobs.is_some() {
        println!(
            "(showing {} jobs and {} workers{})",
            snapshot.jobs.len(),
            snapshot.workers.len(),
            if snapshot.truncated { "; cut to the limit or to fit one NATS message" } else { "" }
        );
    }
    println!(
        "\n{:<24} {:>8} {:>14} {:>14} {:>8} {:>8} {:>8}",
        "job", "iter", "loss", "gain", "workers", "batch", "dropped"
    );
    for j in &snapshot.jobs {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
        println!(
            "{:<24} {:>8} {:>14} {:>14} {:>8} {:>8} {:>8}",
            j.job,
            j.last_iter.map_or("-".into(), |i| i.to_string()),
            opt(j.last_loss),
            opt(j.predicted_gain),
            j.workers,
            j.batch_size.map_or("-".into(), |b| b.to_string()),
            j.dropped
        );
    }
    if snapshot.jobs.iter().any(|j| j.submitted) {
        println!("\n{:<24} {:>10} {:>8} {:>10}", "submitted job", "generation", "restarts", "restart s");
        for j in snapshot.jobs.iter().filter(|j| j.submitted) {
            let cost = j.restart_s.map_or("-".to_string(), |s| format!("{s:.1}"));
            println!("{:<24} {:>10} {:>8} {:>10}", j.job, j.generation, j.restarts, cost);
        }
    }
    if !snapshot.ended.is_empty() {
        println!("\n{:<24} {:<10} {:>8} {:>8}", "ended job", "outcome", "restarts", "epoch");
        for o in &snapshot.ended {
            println!("{:<24} {:<10} {:>8} {:>8}", o.job, o.outcome, o.restarts, o.epoch);
        }
    }
    println!(
        "\n{:<24} {:<16} {:<12} {:<24} {:<6} {:>10}",
        "worker", "machine", "accelerator", "job", "role", "silent s"
    );
    for w in &snapshot.workers {
        let role = if w.role == protocol::Role::Ps { "ps" } else { "worker" };
        println!(
            "{:<24} {:<16} {:<12} {:<24} {:<6} {:>10.1}",
            w.worker,
            w.machine.as_deref().unwrap_or("-"),
            w.accelerator.as_deref().unwrap_or("-"),
            w.job.as_deref().unwrap_or("-"),
            role,
            w.silent_s
        );
    }
    if !snapshot.accelerators.is_empty() {
        println!("\n{:<16} {:>8} {:>8}", "accelerator", "workers", "busy");
        for (name, used) in &snapshot.accelerators {
            println!("{:<16} {:>8} {:>8}", name, used.workers, used.busy);
        }
    }
    if !snapshot.tenants.is_empty() {
        println!(
            "\n{:<16} {:>10} {:>6} {:>6} {:>8} {:>5} {:>5} {:>8}",
            "tenant", "guaranteed", "quota", "held", "borrowed", "lent", "jobs", "waiting"
        );
        for (name, u) in &snapshot.tenants {
            println!(
                "{:<16} {:>10} {:>6} {:>6} {:>8} {:>5} {:>5} {:>8}",
                name, u.guaranteed, u.quota, u.workers, u.borrowed, u.lent, u.jobs, u.waiting
            );
        }
    }
    println!("\naccepted: {:?}", snapshot.accepted);
    println!("rejected: {:?}", snapshot.rejected);
    Ok(())
}

pub fn emulate(args: EmulateArgs) -> anyhow::Result<()> {
    use slaq::sim::curves::{self as sim, PolicySpec, SimConfig, WorkloadConfig};
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
        let (client, _) = bus::connect_with(&args.bus.nats, "slaq-emulate", 65_536, &args.bus.auth.to_auth()).await?;
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
