//! `slaq submit`: a job with the command its workers run; `--wait` waits for its outcome.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use slaq::bus;
use slaq::protocol::{self, Ack, Encoding, JobCommand, JobSpec, StatusSnapshot, Subjects};

use crate::common::NatsArgs;

#[derive(clap::Args)]
pub(crate) struct SubmitArgs {
    /// The job's id (1-64 characters from [A-Za-z0-9_-]).
    #[arg(long)]
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) bus: NatsArgs,
    #[arg(long, default_value_t = 0)]
    pub(crate) min_workers: u32,
    #[arg(long)]
    pub(crate) max_workers: Option<u32>,
    /// The only worker counts the job may run at, comma-separated (e.g. 1,2,4,8).
    #[arg(long, value_delimiter = ',')]
    pub(crate) worker_counts: Option<Vec<u32>>,
    /// The iteration the job stops at, if known: what the finish-time bound
    /// (`[scheduler] max_slowdown`) predicts its remaining work from.
    #[arg(long)]
    pub(crate) max_iters: Option<u64>,
    /// Seconds between the job's saves, if it saves on a schedule and not at a stop (its
    /// reports' `checkpoint_age_s` say when it last did): its workers change right after a save.
    #[arg(long)]
    pub(crate) checkpoint_every_s: Option<f64>,
    /// The job saves when asked (with `--checkpoint-every-s`): before a reclaim changes its
    /// workers, it is asked (its allocation's `save`) and the change waits for the save, at
    /// most its tenant's grace.
    #[arg(long, requires = "checkpoint_every_s")]
    pub(crate) save_on_request: bool,
    /// Its priority class inside its tenant (capped by the tenant's `max_priority`): a higher
    /// class is served first from the tenant's quota.
    #[arg(long, default_value_t = 0)]
    pub(crate) priority: u8,
    /// The job's model family, for the predictor's prior (e.g. mlp, cnn, transformer).
    #[arg(long)]
    pub(crate) family: Option<String>,
    /// Its weight among its tenant's jobs of its class (capped by the tenant's `max_weight`,
    /// default 1; without `[tenants]` ignored): the policy shares in proportion to it.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) weight: f64,
    /// Where the job's processes keep checkpoints (SLAQ_CHECKPOINT_DIR), reachable from every
    /// worker. Made absolute.
    #[arg(long)]
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// Environment for the job's processes, NAME=VALUE (repeatable).
    #[arg(long = "env", value_parser = parse_env_pair)]
    pub(crate) env: Vec<(String, String)>,
    /// The processes' working directory (default: this one).
    #[arg(long)]
    pub(crate) cwd: Option<PathBuf>,
    /// Failed or stalled generations restarted before the job ends as failed.
    #[arg(long, default_value_t = 3)]
    pub(crate) max_restarts: u32,
    /// Wait for the job to end and exit with its outcome: 0 finished, 1 failed or cancelled,
    /// 3 unknown (the scheduler lost track of it).
    #[arg(long)]
    pub(crate) wait: bool,
    /// Seconds to wait for the scheduler's answer to the submission.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) timeout: f64,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub(crate) command: Vec<String>,
}

fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    Ok((k.to_string(), v.to_string()))
}

/// An absolute form of `path` (relative to the current directory).
fn absolute(path: &std::path::Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(path).with_context(|| format!("{}: cannot make it absolute", path.display()))?;
    abs.to_str().map(str::to_string).with_context(|| format!("{}: not UTF-8", abs.display()))
}

pub(crate) fn run(args: SubmitArgs) -> anyhow::Result<()> {
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
        checkpoint_every_s: args.checkpoint_every_s,
        save_on_request: args.save_on_request,
        priority: args.priority,
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
