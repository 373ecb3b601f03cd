//! `slaq worker`: a reference worker agent (hello, heartbeats, and following its assignments,
//! running the jobs' processes).

use std::time::Duration;

use slaq::agent::{self, AgentConfig};
use slaq::bus;
use slaq::protocol::{self, Subjects, WorkerSpec};

use crate::common::{NatsArgs, shutdown_signal};

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

pub(crate) fn run(args: WorkerArgs) -> anyhow::Result<()> {
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
