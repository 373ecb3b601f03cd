//! `slaq status`: what the scheduler believes (jobs, workers, message counters), or one job's
//! own status.

use std::time::Duration;

use anyhow::Context;
use slaq::bus;
use slaq::protocol::{self, Encoding, StatusRequest, StatusSnapshot, Subjects};

use crate::common::NatsArgs;

#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) bus: NatsArgs,
    /// Print the snapshot as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seconds to wait for the scheduler's answer.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) timeout: f64,
    /// Only jobs whose id starts with this (and the workers serving them).
    #[arg(long, conflicts_with = "job")]
    pub(crate) jobs: Option<String>,
    /// One job's own status, asked on `<prefix>.v1.job.<ID>.status`: what that job's NATS user
    /// may ask (the whole status, `ctl.status`, is the operators').
    #[arg(long, value_name = "ID", value_parser = job_id)]
    pub(crate) job: Option<String>,
    /// At most this many jobs and workers (the answer is always cut to fit one NATS message).
    #[arg(long)]
    pub(crate) limit: Option<usize>,
}

/// A job id as the wire contract allows it.
fn job_id(s: &str) -> Result<String, String> {
    match slaq::protocol::valid_job_id(s) {
        true => Ok(s.to_string()),
        false => Err("a job id is NAME or TENANT.NAME, each 1-64 characters from [A-Za-z0-9_-]".into()),
    }
}

pub(crate) fn run(args: StatusArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.timeout > 0.0, "--timeout must be positive");
    let snapshot = ask(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snapshot)?);
        return Ok(());
    }
    print_header(&snapshot, args.jobs.is_some());
    print_jobs(&snapshot);
    print_workers(&snapshot);
    println!("\naccepted: {:?}", snapshot.accepted);
    println!("rejected: {:?}", snapshot.rejected);
    Ok(())
}

/// Asks the scheduler: one job's own status on the subject its job user may ask, else the
/// whole status (the operators').
fn ask(args: &StatusArgs) -> anyhow::Result<StatusSnapshot> {
    let subjects = Subjects::new(&args.bus.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let (client, _) = bus::connect_with(&args.bus.nats, "slaq-status", 16, &args.bus.auth.to_auth()).await?;
        let request = StatusRequest { jobs: args.jobs.clone(), limit: args.limit, ..StatusRequest::default() };
        let subject = match &args.job {
            Some(job) => subjects.job_status(job),
            None => subjects.ctl_status(),
        };
        bus::request(&client, subject, Encoding::MsgPack, &request, Duration::from_secs_f64(args.timeout))
            .await
            .context("asking the scheduler for its status (is `slaq serve` running?)")
    })
}

/// The epoch, the leader and the replicas; whether the lists are cut (`filtered`: a prefix
/// was asked for).
fn print_header(snapshot: &StatusSnapshot, filtered: bool) {
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
    if snapshot.truncated || filtered {
        println!(
            "(showing {} jobs and {} workers{})",
            snapshot.jobs.len(),
            snapshot.workers.len(),
            if snapshot.truncated { "; cut to the limit or to fit one NATS message" } else { "" }
        );
    }
}

/// The jobs, the submitted jobs' generations, and the jobs that ended.
fn print_jobs(snapshot: &StatusSnapshot) {
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
}

/// The workers, the accelerators and the tenants.
fn print_workers(snapshot: &StatusSnapshot) {
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
            for (class, c) in u.classes.iter().rev() {
                let label = format!("  class {class}");
                println!(
                    "{:<16} {:>10} {:>6} {:>6} {:>8} {:>5} {:>5} {:>8}",
                    label, "", "", c.workers, "", "", c.jobs, c.waiting
                );
            }
        }
    }
}
