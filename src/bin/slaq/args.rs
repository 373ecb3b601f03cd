//! The command line's shape: every command, flag and default. The commands themselves live in
//! `offline.rs`, `live.rs` and `bench.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "slaq", version, about = "Quality-driven scheduling of iterative ML training jobs")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Runs a job's command under a guard that stops everything it starts when the agent stops
    /// it or dies (started by `slaq worker`; see `slaq::agent::guard`).
    #[command(name = "job-guard", hide = true)]
    JobGuard(JobGuardArgs),
    /// Replay loss curves and report how well the loss `horizon` iterations ahead is predicted.
    Predict(PredictArgs),
    /// Simulate a workload of jobs replaying real loss curves under several policies.
    Simulate(Box<SimulateArgs>),
    /// Run the scheduler: per-job actors and the allocator over NATS.
    Serve(ServeArgs),
    /// Run a reference worker agent: hello, heartbeats, and following its assignments.
    Worker(WorkerArgs),
    /// Print what the scheduler believes: jobs, workers and message counters.
    Status(StatusArgs),
    /// Submit a job with the command its workers run (`-- program args...`); the agents run it
    /// with torchrun's environment on the workers slaq gives it.
    Submit(Box<SubmitArgs>),
    /// End a submitted job (its processes are stopped, its workers go to others).
    Cancel(CancelArgs),
    /// Play a simulator workload over NATS against `slaq serve` and compare with `simulate`.
    Emulate(Box<EmulateArgs>),
    /// Measure the scheduler's own costs.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// TOML settings (see config/slaq.toml); environment and flags override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// NATS server URL(s), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub(crate) nats: Vec<String>,
    /// Milliseconds between reallocations.
    #[arg(long)]
    pub(crate) epoch_ms: Option<u64>,
    /// Subject prefix.
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    /// Allocation policy: slaq or fair.
    #[arg(long, value_parser = parse_policy_arg)]
    pub(crate) policy: Option<slaq::policy::PolicyKind>,
    /// Fairness floor f in [0, 1]: every job gets at least f times its fair share of
    /// worker-seconds over a sliding window of epochs (0: pure quality, 1: fair).
    #[arg(long)]
    pub(crate) floor: Option<f64>,
    /// Milliseconds between refits of a job's curves (scale it with --epoch-ms when time is
    /// accelerated, as for `slaq emulate`).
    #[arg(long)]
    pub(crate) refit_ms: Option<u64>,
    /// Seconds ahead over which the jobs' gains and completion terms are predicted
    /// (`[scheduler] horizon_s`, 60; divide it by `slaq emulate --speed` when time is
    /// accelerated, as --epoch-ms is).
    #[arg(long)]
    pub(crate) horizon_s: Option<f64>,
    /// host:port for the HTTP listener serving /metrics (Prometheus), /healthz and /readyz.
    #[arg(long)]
    pub(crate) http_listen: Option<String>,
    /// Run as one of several replicas under this name: the replica holding the leader's lease
    /// schedules, the others stand by (needs JetStream; `[ha]` in the settings).
    #[arg(long)]
    pub(crate) replica_id: Option<String>,
    #[command(flatten)]
    pub(crate) auth: NatsAuthArgs,
}

pub(crate) fn parse_speedup(s: &str) -> Result<slaq::sim::curves::SpeedupKind, String> {
    match s {
        "parametric" => Ok(slaq::sim::curves::SpeedupKind::Parametric),
        "pollux" => Ok(slaq::sim::curves::SpeedupKind::Pollux),
        _ => Err(format!("unknown speed-up {s:?}; expected parametric or pollux")),
    }
}

/// The curves the simulator, the emulator and the benchmarks replay by default (vendored).
pub(crate) const DEFAULT_CURVES: &str = "data/curves/curves-public.jsonl";

pub(crate) fn parse_policy_arg(s: &str) -> Result<slaq::policy::PolicyKind, String> {
    slaq::service::config::parse_policy(s).ok_or_else(|| format!("unknown policy {s:?}; expected slaq or fair"))
}

/// Credentials and TLS for NATS (every flag also reads its environment variable).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct NatsAuthArgs {
    /// NATS user name (with --nats-password).
    #[arg(long, env = "SLAQ_NATS_USER")]
    pub(crate) nats_user: Option<String>,
    /// NATS password (prefer the environment variable: flags show in `ps`).
    #[arg(long, env = "SLAQ_NATS_PASSWORD", hide_env_values = true)]
    pub(crate) nats_password: Option<String>,
    /// NATS token.
    #[arg(long, env = "SLAQ_NATS_TOKEN", hide_env_values = true)]
    pub(crate) nats_token: Option<String>,
    /// A file holding an NKey seed.
    #[arg(long, env = "SLAQ_NATS_NKEY_SEED_FILE")]
    pub(crate) nats_nkey_seed_file: Option<PathBuf>,
    /// A NATS .creds file (JWT and NKey seed).
    #[arg(long, env = "SLAQ_NATS_CREDENTIALS_FILE")]
    pub(crate) nats_credentials_file: Option<PathBuf>,
    /// Prefix of this client's reply subjects (default _INBOX), for per-user permissions.
    #[arg(long, env = "SLAQ_NATS_INBOX_PREFIX")]
    pub(crate) nats_inbox_prefix: Option<String>,
    /// CA certificate(s) to verify the server with (PEM).
    #[arg(long, env = "SLAQ_NATS_TLS_CA_FILE")]
    pub(crate) nats_tls_ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with --nats-tls-key-file.
    #[arg(long, env = "SLAQ_NATS_TLS_CERT_FILE")]
    pub(crate) nats_tls_cert_file: Option<PathBuf>,
    /// Client key (PEM).
    #[arg(long, env = "SLAQ_NATS_TLS_KEY_FILE")]
    pub(crate) nats_tls_key_file: Option<PathBuf>,
    /// Refuse to talk to the server without TLS.
    #[arg(long, env = "SLAQ_NATS_TLS_REQUIRED")]
    pub(crate) nats_tls_required: bool,
}

impl NatsAuthArgs {
    pub(crate) fn to_auth(&self) -> slaq::bus::NatsAuth {
        slaq::bus::NatsAuth {
            user: self.nats_user.clone(),
            password: self.nats_password.clone(),
            token: self.nats_token.clone(),
            nkey_seed_file: self.nats_nkey_seed_file.clone(),
            credentials_file: self.nats_credentials_file.clone(),
            inbox_prefix: self.nats_inbox_prefix.clone(),
            tls_ca_file: self.nats_tls_ca_file.clone(),
            tls_cert_file: self.nats_tls_cert_file.clone(),
            tls_key_file: self.nats_tls_key_file.clone(),
            tls_required: self.nats_tls_required,
            ignore_discovered_servers: false,
        }
    }
}

/// Where the scheduler is.
#[derive(clap::Args)]
pub(crate) struct NatsArgs {
    /// NATS server URL(s), comma-separated.
    #[arg(long, env = "SLAQ_NATS_URL", value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats: Vec<String>,
    /// Subject prefix.
    #[arg(long, env = "SLAQ_PREFIX", default_value = "slaq")]
    pub(crate) prefix: String,
    #[command(flatten)]
    pub(crate) auth: NatsAuthArgs,
}

#[derive(clap::Args)]
pub(crate) struct JobGuardArgs {
    /// Milliseconds between SIGTERM and SIGKILL when the job is stopped.
    #[arg(long, default_value_t = 30_000)]
    pub(crate) grace_ms: u64,
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub(crate) command: Vec<String>,
}

#[derive(clap::Args)]
pub(crate) struct WorkerArgs {
    /// This worker's id (1-64 characters from [A-Za-z0-9_-]).
    #[arg(long, env = "SLAQ_WORKER_ID")]
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) bus: NatsArgs,
    /// Milliseconds between heartbeats.
    #[arg(long, default_value_t = 2000)]
    pub(crate) beat_ms: u64,
    /// The machine this worker runs on.
    #[arg(long, env = "SLAQ_WORKER_MACHINE")]
    pub(crate) machine: Option<String>,
    /// This worker's type (its accelerator, e.g. v100; 1-64 characters from [A-Za-z0-9_-]): a
    /// job's workers are all of one type [default: default].
    #[arg(long, env = "SLAQ_WORKER_ACCELERATOR")]
    pub(crate) accelerator: Option<String>,
    /// Slots (GPUs) this agent offers: with more than one it registers one worker per slot,
    /// `<id>-0` ... `<id>-<n-1>`, all on --machine (which it then needs).
    #[arg(long, default_value_t = 1, env = "SLAQ_WORKER_SLOTS")]
    pub(crate) slots: u32,
    /// A command to run for each generation of the job a worker is assigned (through `sh -c`,
    /// in a process group of its own), with torchrun's environment (RANK, WORLD_SIZE,
    /// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and SLAQ_JOB,
    /// SLAQ_WORKER, SLAQ_GENERATION, SLAQ_ROLE, SLAQ_BATCH_SIZE. The previous one is stopped
    /// first (SIGTERM, then SIGKILL after --stop-grace-s).
    #[arg(long, env = "SLAQ_WORKER_EXEC")]
    pub(crate) exec: Option<String>,
    /// Seconds a job's process has between SIGTERM and SIGKILL when it is stopped (to save a
    /// checkpoint).
    #[arg(long, default_value_t = 30.0, env = "SLAQ_WORKER_STOP_GRACE_S")]
    pub(crate) stop_grace_s: f64,
    /// The address other machines reach this one at: MASTER_ADDR of the jobs whose rank 0 runs
    /// here. Default: this host's name.
    #[arg(long, env = "SLAQ_WORKER_ADVERTISE")]
    pub(crate) advertise: Option<String>,
    /// Run a submitted command only if this entry allows it (repeatable; e.g.
    /// `/opt/venv/bin/python /srv/train/`): the program is compared by its canonical path, and
    /// each further word with one argument (ending in `/`: a file under that directory once
    /// `..`, links and relative paths are resolved; with a `/`: that file; else that word).
    /// Without it, and without credentials, any submitted command runs as this agent's user;
    /// with credentials, none (see --allow-any-command). Ignored with --exec, which then
    /// receives the job's arguments as "$@".
    #[arg(long = "allow-command", conflicts_with = "allow_any_command")]
    pub(crate) allow_command: Vec<String>,
    /// Run any submitted command, as this agent's user, though the agent connects with
    /// credentials (where, without it or --allow-command, none runs).
    #[arg(long = "allow-any-command", env = "SLAQ_WORKER_ALLOW_ANY_COMMAND")]
    pub(crate) allow_any_command: bool,
    /// A variable a submitted job's environment may set (repeatable; `NAME` or `PREFIX*`).
    /// With any, only those named pass; without, all but the loader's and interpreters' (LD_*,
    /// PYTHON*, PERL5*, NODE_OPTIONS, BASH_ENV, PATH ...). A command that sets another is
    /// refused (exit 126).
    #[arg(long = "allow-env", value_name = "NAME", env = "SLAQ_WORKER_ALLOW_ENV", value_delimiter = ',')]
    pub(crate) allow_env: Vec<String>,
}

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
    /// The job's model family, for the predictor's prior (e.g. mlp, cnn, transformer).
    #[arg(long)]
    pub(crate) family: Option<String>,
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

#[derive(clap::Args)]
pub(crate) struct CancelArgs {
    #[arg(long)]
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) bus: NatsArgs,
}

/// A job id as the wire contract allows it.
fn job_id(s: &str) -> Result<String, String> {
    match slaq::protocol::valid_job_id(s) {
        true => Ok(s.to_string()),
        false => Err("a job id is NAME or TENANT.NAME, each 1-64 characters from [A-Za-z0-9_-]".into()),
    }
}

fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    Ok((k.to_string(), v.to_string()))
}

#[derive(clap::Args)]
pub(crate) struct EmulateArgs {
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    pub(crate) curves: Vec<PathBuf>,
    /// The policy `slaq serve` runs (slaq or fair): the simulated run beside the live one uses
    /// it too.
    #[arg(long, default_value = "slaq")]
    pub(crate) policy: String,
    #[arg(long, default_value_t = 160)]
    pub(crate) jobs: usize,
    #[arg(long, default_value_t = slaq::sim::curves::DEFAULT_WORKERS)]
    pub(crate) workers: u32,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Virtual seconds per real second.
    #[arg(long, default_value_t = 50.0)]
    pub(crate) speed: f64,
    /// The scheduler's epoch in milliseconds (`slaq serve --epoch-ms`): with `--speed` it gives
    /// the simulated run's epoch, so the two runs compare.
    #[arg(long, default_value_t = 100)]
    pub(crate) epoch_ms: u64,
    /// Give up after this many real seconds.
    #[arg(long, default_value_t = 600.0)]
    pub(crate) duration: f64,
    #[command(flatten)]
    pub(crate) bus: NatsArgs,
    #[arg(long)]
    pub(crate) json: bool,
}

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

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// Time one full allocation decision (gain curves included) for each policy.
    Alloc(BenchAllocArgs),
    /// Loss reports per second from NATS into the job actors, next to raw NATS pub/sub.
    Ingest(BenchIngestArgs),
    /// Epoch latency (bids, policy, publish) and memory with many jobs and workers.
    Epoch(BenchEpochArgs),
    /// A long run under steady load: memory sampled over time (flat after warm-up?), epochs
    /// and message counts.
    Soak(BenchSoakArgs),
    /// CPU and memory of the scheduler holding many jobs that report nothing more.
    Idle(BenchIdleArgs),
    /// Placement methods against the exact optimum on small instances, and time per decision.
    Placement(BenchPlacementArgs),
    /// What the leader pays to take its replicas' bids (issue #19): encode, decode, tabulate
    /// and merge one bid per job, and the bytes on the wire.
    Merge(BenchMergeArgs),
    /// Replicas that share the jobs (issue #19), measured from outside: epochs, each replica's
    /// CPU per report, and a replica killed (-9). Needs a NATS server whose account maps the
    /// reports to the partitions (deploy/bench-cluster.sh starts a three-node cluster so).
    Cluster(BenchClusterArgs),
}

#[derive(clap::Args)]
pub(crate) struct BenchClusterArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[arg(long, default_value_t = 3)]
    pub(crate) replicas: usize,
    /// As the server's mapping says (`{{partition(N,1)}}`).
    #[arg(long, default_value_t = 32)]
    pub(crate) partitions: u32,
    #[arg(long, default_value_t = 10_000)]
    pub(crate) jobs: usize,
    #[arg(long, default_value_t = 40_000)]
    pub(crate) workers: usize,
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

#[derive(clap::Args)]
pub(crate) struct BenchMergeArgs {
    #[arg(long, default_value_t = 100_000)]
    pub(crate) jobs: usize,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub(crate) runs: usize,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

/// How every benchmark prints its figures.
#[derive(clap::Args)]
pub(crate) struct BenchOutput {
    /// One JSON object instead of the readable report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The NATS server a benchmark of the live scheduler runs against (`-js` for durable state).
#[derive(clap::Args)]
pub(crate) struct BenchServer {
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats: Vec<String>,
}

#[derive(clap::Args)]
pub(crate) struct BenchPlacementArgs {
    /// Random small instances solved exactly and by each method.
    #[arg(long, default_value_t = 200)]
    pub(crate) cases: usize,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Timed repetitions of each decision (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub(crate) runs: usize,
    /// The decisions timed, JOBSxMACHINES (4 slots each, all free). 256 jobs is the most the
    /// planner gives the LP at once (`schedule::LP_MAX_JOBS`).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64x16,256x256,4000x4000")]
    pub(crate) sizes: Vec<(usize, usize)>,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

fn parse_size(s: &str) -> Result<(usize, usize), String> {
    let (j, m) = s.split_once('x').ok_or_else(|| format!("{s:?} is not JOBSxMACHINES"))?;
    let n = |x: &str| {
        x.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| format!("{s:?}: {x:?} is not a positive count"))
    };
    Ok((n(j)?, n(m)?))
}

#[derive(clap::Args)]
pub(crate) struct BenchIdleArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[arg(long, default_value_t = 200_000)]
    pub(crate) jobs: usize,
    /// Seconds to let start-up work (saves, refits) finish before measuring.
    #[arg(long, default_value_t = 60)]
    pub(crate) settle_s: u64,
    /// Seconds measured.
    #[arg(long, default_value_t = 30)]
    pub(crate) measure_s: u64,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

#[derive(clap::Args)]
pub(crate) struct BenchSoakArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[arg(long, default_value_t = 4000)]
    pub(crate) jobs: usize,
    #[arg(long, default_value_t = 16000)]
    pub(crate) workers: usize,
    /// Loss reports per second per job.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) reports_per_s: f64,
    /// Seconds of the whole run.
    #[arg(long, default_value_t = 300)]
    pub(crate) duration_s: u64,
    /// Seconds of warm-up before memory is compared.
    #[arg(long, default_value_t = 60)]
    pub(crate) warm_up_s: u64,
    #[arg(long, default_value_t = 1000)]
    pub(crate) epoch_ms: u64,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

#[derive(clap::Args)]
pub(crate) struct BenchIngestArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    /// Loss reports to send (in each of the two runs).
    #[arg(long, default_value_t = 500_000)]
    pub(crate) reports: u64,
    /// Jobs the reports are spread over.
    #[arg(long, default_value_t = 1000)]
    pub(crate) jobs: u64,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

#[derive(clap::Args)]
pub(crate) struct BenchEpochArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[arg(long, default_value_t = 4000)]
    pub(crate) jobs: usize,
    #[arg(long, default_value_t = 16000)]
    pub(crate) workers: usize,
    /// Epochs to measure (after a few warm-up epochs).
    #[arg(long, default_value_t = 40)]
    pub(crate) epochs: usize,
    #[arg(long, default_value_t = 250)]
    pub(crate) epoch_ms: u64,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

#[derive(clap::Args)]
pub(crate) struct BenchAllocArgs {
    #[arg(long, default_value_t = 4000)]
    pub(crate) jobs: usize,
    #[arg(long, default_value_t = 16000)]
    pub(crate) workers: u32,
    /// Curves the jobs' predictors are fitted on.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    pub(crate) curves: Vec<PathBuf>,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub(crate) runs: usize,
    /// Worker types (issue #31): with 2 or more, the workers are split evenly among them, each
    /// job runs at a speed of its own on each, and the typed decisions (the greedy and the
    /// exact LP of `schedule::typed`) are timed too.
    #[arg(long, default_value_t = 1)]
    pub(crate) types: usize,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

#[derive(clap::Args)]
pub(crate) struct SimulateArgs {
    /// JSON-lines curve files (repeatable or comma-separated).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    pub(crate) curves: Vec<PathBuf>,
    /// A TOML file with `[workload]` and `[sim]` tables (see config/simulate.toml); the flags
    /// below override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Policies to compare: slaq, slaq-paper, fair, oracle, srpt-oracle, and the peers optimus,
    /// pollux, tiresias, themis (d = 0.2), themis-d1 (d = 1) [default: slaq,fair]; with
    /// --pollux-workload: fair, slaq, slaq-no-placement, slaq-no-batch [default: all four].
    #[arg(long, value_delimiter = ',')]
    pub(crate) policy: Vec<String>,
    /// Number of jobs [default: 160].
    #[arg(long)]
    pub(crate) jobs: Option<usize>,
    /// Cluster sizes, comma-separated for a sweep [default: 64].
    #[arg(long, value_delimiter = ',')]
    pub(crate) workers: Vec<u32>,
    /// Workload seeds; with several, every seed is run and the improvements over fair are
    /// summarised (mean, min, max) per cluster size [default: 1].
    #[arg(long, value_delimiter = ',')]
    pub(crate) seed: Vec<u64>,
    /// Seconds of simulated time per scheduling epoch [default: 5].
    #[arg(long)]
    pub(crate) epoch: Option<f64>,
    /// Seconds ahead over which gains are predicted [default: 60].
    #[arg(long)]
    pub(crate) horizon: Option<f64>,
    /// Mean seconds between job arrivals [default: 10].
    #[arg(long)]
    pub(crate) interarrival: Option<f64>,
    /// Mean seconds per iteration of a job on one worker [default: 10].
    #[arg(long)]
    pub(crate) base_iter_seconds: Option<f64>,
    /// Speed-up curves: parametric (the model below) or pollux (measured deep-learning step
    /// times, one application per job family) [default: parametric].
    #[arg(long, value_parser = parse_speedup)]
    pub(crate) speedup: Option<slaq::sim::curves::SpeedupKind>,
    /// Fairness floor f in [0, 1]: every job gets at least f times its fair share of
    /// worker-seconds over a sliding window (0: pure quality, 1: fair) [default: 0.25]. Several,
    /// comma-separated, print the frontier (loss-area reduction and worst slowdown against fair
    /// per floor) and, with --out, plot it.
    #[arg(long, value_delimiter = ',')]
    pub(crate) floor: Vec<f64>,
    /// The finish-time bound K: no job is planned to finish more than K times later than under
    /// fair sharing (0: off) [default: `[sim.plan] max_slowdown`].
    #[arg(long)]
    pub(crate) max_slowdown: Option<f64>,
    /// The weight λ of the completion term in slaq's bids: a worker's value to a job is its
    /// quality gain plus λ times the share of the job's remaining work it gets done over the
    /// horizon (issue #41; 0: the quality gain alone) [default: `[sim] completion_weight`, 0.05].
    #[arg(long)]
    pub(crate) completion_weight: Option<f64>,
    /// Serial fraction σ in the speed-up model `t(w) = t1·(σ + (1−σ)/w + c·log2 w)` [default: 0.05].
    #[arg(long)]
    pub(crate) serial_fraction: Option<f64>,
    /// Communication cost c per doubling of workers, as a fraction of t1 [default: 0.02].
    #[arg(long)]
    pub(crate) comm_fraction: Option<f64>,
    /// Workers every job keeps while the cluster has that many for each [default: 0].
    #[arg(long)]
    pub(crate) min_workers: Option<u32>,
    /// A job stops once its normalised loss is at or below this; 0 replays every curve to its end [default: 0].
    #[arg(long)]
    pub(crate) converged: Option<f64>,
    /// Write CSV time series and SVG plots here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Replay Pollux's workload CSV files (comma-separated) on Pollux's job model instead of loss
    /// curves: 16 machines x 4 GPUs, placement and batch size decided too.
    #[arg(long, value_delimiter = ',')]
    pub(crate) pollux_workload: Vec<PathBuf>,
    /// With --pollux-workload: every job gets an SLO on its iteration time of this many times the
    /// step time of its user's choice (requested GPUs packed, requested batch).
    #[arg(long)]
    pub(crate) slo_factor: Option<f64>,
    /// With --pollux-workload: seconds over which slaq's gains must pay for a restart
    /// [default: 120, chosen on workloads 1-4 at load 1.0].
    #[arg(long)]
    pub(crate) restart_horizon: Option<f64>,
    /// With --pollux-workload: Pollux's restart penalty in slaq's bids (a running job's gains
    /// elsewhere scaled by (age - restarts x restart) / (age + restart)) [default: true, chosen on
    /// workloads 1-4 over the four loads].
    #[arg(long)]
    pub(crate) restart_penalty: Option<bool>,
    /// Whether slaq is told each job's length (known: with --pollux-workload its last epoch, as
    /// Optimus+Oracle is; on curves their iterations, as a max_iter) or not (unknown: as Pollux
    /// is not; on curves the finish-time bound predicts it from the job's fitted curve).
    #[arg(long, default_value = "known", value_parser = ["known", "unknown"])]
    pub(crate) job_length: String,
    /// With --job-length unknown: the progress a job has left is taken to be this many times
    /// the progress it has made.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) unknown_length_factor: f64,
    /// With --pollux-workload: the published results to compare with.
    #[arg(long, default_value = "data/pollux/results")]
    pub(crate) published: PathBuf,
    /// Gavel's setting: a cluster of GPU types with this throughput table (Gavel's
    /// simulation_throughputs.json, vendored as data/gavel/); policies fair, gavel, slaq-blind,
    /// slaq [default: all four]; --jobs, --seed, --curves, --max-slowdown [default: 2], --json
    /// and --out apply.
    #[arg(long)]
    pub(crate) gavel_throughputs: Option<PathBuf>,
    /// Teams (issue #32): a TOML file with `[tenants.<name>]` and `[arrivals.<name>]` (see
    /// config/teams/); each tenant's jobs replay --curves, shared on one cluster and each alone
    /// on its guaranteed workers; --seed, --policy (one), --json apply.
    #[arg(long)]
    pub(crate) tenants: Option<PathBuf>,
    /// With --gavel-throughputs: worker types and counts.
    #[arg(long, default_value = "v100=36,p100=36,k80=36")]
    pub(crate) cluster: String,
    /// With --gavel-throughputs: Poisson arrival rates (jobs per hour), comma-separated for a
    /// sweep [default: 2.0].
    #[arg(long, value_delimiter = ',')]
    pub(crate) jobs_per_hour: Vec<f64>,
    /// With --gavel-throughputs: the jobs measured, A..B of the trace [default: all].
    #[arg(long, value_parser = parse_range)]
    pub(crate) measure_jobs: Option<(usize, usize)>,
    /// With --gavel-throughputs: jobs on 1, 2, 4 or 8 GPUs (probabilities 0.7/0.1/0.15/0.05)
    /// instead of one.
    #[arg(long)]
    pub(crate) multi_gpu: bool,
    /// With --gavel-throughputs: when slaq runs a job on more GPUs than its scale factor:
    /// always (wherever the quality gain says so) or spare (only with GPUs no job needs at its
    /// own size).
    #[arg(long, default_value = "always", value_parser = ["always", "spare"])]
    pub(crate) scale_up: String,
}

/// `A..B` with `A < B`.
fn parse_range(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once("..").ok_or_else(|| format!("{s:?}: expected A..B"))?;
    let a: usize = a.trim().parse().map_err(|_| format!("{s:?}: A is not a number"))?;
    let b: usize = b.trim().parse().map_err(|_| format!("{s:?}: B is not a number"))?;
    if a < b { Ok((a, b)) } else { Err(format!("{s:?}: A must be below B")) }
}

#[derive(clap::Args)]
pub(crate) struct PredictArgs {
    /// JSON-lines curve files (repeatable or comma-separated).
    #[arg(long, required = true, value_delimiter = ',')]
    pub(crate) curves: Vec<PathBuf>,
    /// Iterations ahead to predict.
    #[arg(long, default_value_t = 10)]
    pub(crate) horizon: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulate_defaults_are_the_library_defaults() {
        let cli = Cli::parse_from(["slaq", "simulate", "--curves", "x.jsonl"]);
        let Command::Simulate(args) = cli.command else { panic!("simulate expected") };
        assert!(args.workers.is_empty() && args.jobs.is_none(), "unset flags must leave the config's values");
    }
}

/// The deployment files (`deploy/`) cannot rot: every `slaq` command line they contain parses
/// with this CLI, every `SLAQ_*` variable they set is read by some command, every setting they
/// write is a known key, and every local file they mount or copy exists.
#[cfg(test)]
mod deploy_files {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use clap::{CommandFactory, Parser};
    use yaml_rust2::{Yaml, YamlLoader};

    use super::Cli;

    fn deploy() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Every environment variable a command reads: `serve`'s settings and the flags' `env`s.
    fn known_env() -> BTreeSet<String> {
        fn walk(cmd: &clap::Command, known: &mut BTreeSet<String>) {
            known.extend(cmd.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()));
            cmd.get_subcommands().for_each(|sub| walk(sub, known));
        }
        let mut known: BTreeSet<String> = slaq::service::config::ENV_VARS.iter().map(|s| s.to_string()).collect();
        walk(&Cli::command(), &mut known);
        known
    }

    fn check_command(origin: &str, args: &[String]) {
        // Values Kubernetes fills in when the pod starts.
        let args: Vec<String> =
            args.iter().map(|a| a.replace("$(POD_NAME)", "slaq-worker-0").replace("$(NODE_NAME)", "node-1")).collect();
        if let Err(e) = Cli::try_parse_from(std::iter::once("slaq".to_string()).chain(args.iter().cloned())) {
            panic!("{origin}: `slaq {}` is not a valid command line:\n{e}", args.join(" "));
        }
    }

    fn check_env(origin: &str, names: impl IntoIterator<Item = String>, known: &BTreeSet<String>) -> usize {
        let mut n = 0;
        for name in names.into_iter().filter(|n| n.starts_with("SLAQ_")) {
            assert!(known.contains(&name), "{origin}: sets {name}, which no slaq command reads (known: {known:?})");
            n += 1;
        }
        n
    }

    fn check_settings(origin: &str, toml_text: &str) {
        let raw: slaq::service::RawConfig =
            toml::from_str(toml_text).unwrap_or_else(|e| panic!("{origin}: not valid slaq settings: {e}"));
        if let Err(e) = raw.resolve(&Default::default(), &Default::default()) {
            panic!("{origin}: settings do not validate: {e}");
        }
    }

    fn strings(y: &Yaml) -> Vec<String> {
        y.as_vec().map(|v| v.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
    }

    /// A mapping with its YAML merge keys (`<<: *anchor`) applied, as Compose reads it.
    fn merged(y: &Yaml) -> yaml_rust2::yaml::Hash {
        let mut out = yaml_rust2::yaml::Hash::new();
        if let Some(map) = y.as_hash() {
            if let Some(base) = map.get(&Yaml::String("<<".into())) {
                out.extend(merged(base));
            }
            for (k, v) in map {
                if k.as_str() != Some("<<") {
                    let v = if v.as_hash().is_some() { Yaml::Hash(merged(v)) } else { v.clone() };
                    out.insert(k.clone(), v);
                }
            }
        }
        out
    }

    fn key(map: &yaml_rust2::yaml::Hash, k: &str) -> Yaml {
        map.get(&Yaml::String(k.into())).cloned().unwrap_or(Yaml::BadValue)
    }

    #[test]
    fn compose_uses_only_what_slaq_has() {
        let path = deploy().join("compose.yaml");
        let docs = YamlLoader::load_from_str(&read(&path)).expect("compose.yaml is YAML");
        // The settings its replicas mount.
        check_settings("compose/slaq-shared.toml", &read(&deploy().join("compose/slaq-shared.toml")));
        let services = merged(&key(&merged(&docs[0]), "services"));
        let known = known_env();
        let (mut commands, mut envs) = (0, 0);
        for (name, service) in &services {
            let name = name.as_str().unwrap_or_default();
            let service = merged(service);
            for volume in strings(&key(&service, "volumes")) {
                if let Some(local) = volume.strip_prefix("./") {
                    let source = local.split(':').next().unwrap_or_default();
                    assert!(deploy().join(source).exists(), "compose service {name} mounts missing ./{source}");
                }
            }
            if !key(&service, "image").as_str().is_some_and(|i| i.starts_with("slaq")) {
                continue;
            }
            let command = strings(&key(&service, "command"));
            assert!(!command.is_empty(), "compose service {name} runs slaq without a command");
            check_command(&format!("compose service {name}"), &command);
            commands += 1;
            let env = key(&service, "environment");
            let names: Option<Vec<String>> =
                env.as_hash().map(|h| h.keys().filter_map(|k| k.as_str().map(str::to_string)).collect());
            envs += check_env(&format!("compose service {name}"), names.unwrap_or_default(), &known);
        }
        assert!(commands >= 6 && envs >= 6, "compose.yaml: {commands} slaq services, {envs} variables checked");
    }

    #[test]
    fn kubernetes_manifests_use_only_what_slaq_has() {
        let known = known_env();
        let (mut commands, mut settings) = (0, 0);
        for entry in std::fs::read_dir(deploy().join("k8s")).expect("deploy/k8s") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let origin = path.display().to_string();
            for doc in YamlLoader::load_from_str(&read(&path)).unwrap_or_else(|e| panic!("{origin}: {e}")) {
                if let (Some("ConfigMap"), Some(toml_text)) = (doc["kind"].as_str(), doc["data"]["slaq.toml"].as_str())
                {
                    check_settings(&origin, toml_text);
                    settings += 1;
                }
                for container in doc["spec"]["template"]["spec"]["containers"].as_vec().into_iter().flatten() {
                    if !container["image"].as_str().is_some_and(|i| i.starts_with("slaq")) {
                        continue;
                    }
                    let mut argv = strings(&container["command"]);
                    argv.retain(|a| !a.ends_with("/slaq") && a != "slaq");
                    argv.extend(strings(&container["args"]));
                    check_command(&origin, &argv);
                    commands += 1;
                    let names = container["env"].as_vec().into_iter().flatten();
                    check_env(&origin, names.filter_map(|e| e["name"].as_str().map(str::to_string)), &known);
                }
            }
        }
        assert!(commands >= 2 && settings >= 1, "deploy/k8s: {commands} commands and {settings} settings checked");
    }

    #[test]
    fn dockerfile_and_systemd_units_use_only_what_slaq_has() {
        let dockerfile = read(&deploy().join("Dockerfile"));
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for line in dockerfile.lines() {
            if let Some(cmd) = line.strip_prefix("CMD ") {
                let argv: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
                check_command("deploy/Dockerfile CMD", &argv);
            }
            if let Some(copy) = line.strip_prefix("COPY ").filter(|c| !c.starts_with("--from")) {
                let parts: Vec<&str> = copy.split_whitespace().collect();
                for source in &parts[..parts.len() - 1] {
                    assert!(root.join(source).exists(), "deploy/Dockerfile copies missing {source}");
                }
            }
        }
        check_settings("config/slaq.toml", &read(&root.join("config/slaq.toml")));
        let mut units = 0;
        for entry in std::fs::read_dir(deploy()).expect("deploy") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("service") {
                continue;
            }
            for line in read(&path).lines() {
                if let Some(exec) = line.strip_prefix("ExecStart=") {
                    let argv: Vec<String> = exec.split_whitespace().skip(1).map(|a| a.replace("%i", "w0")).collect();
                    check_command(&path.display().to_string(), &argv);
                    units += 1;
                }
            }
        }
        assert!(units >= 2, "{units} systemd units checked");
    }

    #[test]
    fn a_made_up_flag_is_caught() {
        let bad = std::panic::catch_unwind(|| check_command("test", &["serve".into(), "--no-such-flag".into()]));
        assert!(bad.is_err());
    }
}

/// The documentation cannot name a command or flag that does not exist: every `slaq` command
/// line in a shell block of README.md or `docs/` parses with this CLI, and every flag an
/// inline `slaq ...` (usage lines included) names belongs to the command it names.
#[cfg(test)]
mod doc_commands {
    use std::path::{Path, PathBuf};

    use clap::{CommandFactory, Parser};

    use super::Cli;

    fn documents() -> Vec<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
        let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
            .expect("docs/")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
        files
    }

    /// `text` with every `$(...)` replaced by one word (the simulator's file lists are made so).
    fn without_substitutions(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            out.push_str(&rest[..start]);
            let mut depth = 0;
            let mut end = rest.len();
            for (i, c) in rest[start + 1..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = start + 1 + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.push_str("substituted");
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }

    /// The shell lines of one block, continuations joined and comments cut.
    fn shell_lines(block: &[&str]) -> Vec<String> {
        let mut lines = Vec::new();
        let mut current = String::new();
        for line in block {
            let line = line.trim();
            let line = line.strip_prefix("$ ").unwrap_or(line);
            if let Some(head) = line.strip_suffix('\\') {
                current.push_str(head);
                current.push(' ');
                continue;
            }
            current.push_str(line);
            let joined = std::mem::take(&mut current);
            // A comment starts at a `#` after white space, outside quotes.
            let (mut quote, mut cut) = (None, joined.len());
            let bytes = joined.as_bytes();
            for (i, &b) in bytes.iter().enumerate() {
                match (quote, b) {
                    (None, b'\'' | b'"') => quote = Some(b),
                    (Some(q), b) if b == q => quote = None,
                    (None, b'#') if i == 0 || bytes[i - 1] == b' ' => {
                        cut = i;
                        break;
                    }
                    _ => {}
                }
            }
            lines.push(without_substitutions(&joined[..cut]));
        }
        lines
    }

    /// The arguments after `slaq` of every slaq command in a shell line.
    fn slaq_commands(line: &str) -> Vec<Vec<String>> {
        let Some(words) = shlex::split(line) else { return Vec::new() };
        let mut out = Vec::new();
        for command in words.split(|w| ["&&", "||", ";", "|", "&"].contains(&w.as_str())) {
            let skip = match command {
                [first, ..] if first == "slaq" || first.ends_with("/slaq") => 1,
                [cargo, run, rest @ ..] if cargo == "cargo" && run == "run" => {
                    match rest.iter().position(|w| w == "--") {
                        Some(i) => 3 + i,
                        None => continue,
                    }
                }
                _ => continue,
            };
            out.push(command[skip..].to_vec());
        }
        out
    }

    #[test]
    fn every_shell_command_line_in_the_docs_parses() {
        let mut checked = 0;
        for file in documents() {
            let text = std::fs::read_to_string(&file).expect("readable");
            let lines: Vec<&str> = text.lines().collect();
            let mut i = 0;
            while i < lines.len() {
                let fence = lines[i].trim_start();
                let shell = ["```sh", "```bash", "```console", "```shell"].contains(&fence);
                i += 1;
                if !fence.starts_with("```") {
                    continue;
                }
                let start = i;
                while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                    i += 1;
                }
                if shell {
                    for line in shell_lines(&lines[start..i]) {
                        for args in slaq_commands(&line) {
                            let argv = std::iter::once("slaq".to_string()).chain(args.iter().cloned());
                            if let Err(e) = Cli::try_parse_from(argv) {
                                panic!(
                                    "{} (block at line {start}): `slaq {}` does not parse:\n{e}",
                                    file.display(),
                                    args.join(" ")
                                );
                            }
                            checked += 1;
                        }
                    }
                }
                i += 1;
            }
        }
        assert!(checked >= 8, "only {checked} command lines found: is the scan reading the blocks?");
    }

    #[test]
    fn every_flag_named_inline_belongs_to_its_command() {
        let root = Cli::command();
        let mut checked = 0;
        for file in documents() {
            let text = std::fs::read_to_string(&file).expect("readable").replace("\\|", "|");
            for (n, span) in text.split('`').enumerate().filter(|(n, _)| n % 2 == 1) {
                let Some(rest) = span.strip_prefix("slaq ") else { continue };
                let words: Vec<&str> = rest.split_whitespace().collect();
                // The command: the leading words that are subcommands.
                let mut command = &root;
                let mut path = Vec::new();
                for w in &words {
                    match command.find_subcommand(w) {
                        Some(sub) => {
                            command = sub;
                            path.push(*w);
                        }
                        None => break,
                    }
                }
                let origin = format!("{}: `{span}` (span {n})", file.display());
                assert!(!path.is_empty(), "{origin}: names no slaq command");
                for w in &words {
                    for flag in w.split(['[', ']', '|', '=', ',', '(', ')']).filter(|f| f.starts_with("--")) {
                        let name = flag.trim_start_matches('-').trim_end_matches(['.', ':', ';']);
                        if name.is_empty() {
                            continue; // `--` before a program's arguments
                        }
                        let known = command.get_arguments().any(|a| a.get_long() == Some(name))
                            || ["help", "version"].contains(&name);
                        assert!(known, "{origin}: `slaq {}` has no flag --{name}", path.join(" "));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 40, "only {checked} inline flags found: is the scan reading the spans?");
    }
}
