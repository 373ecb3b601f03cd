//! `slaq job-guard` (hidden): runs a job's command under a guard that stops everything it
//! starts when the agent stops it or dies (started by `slaq worker`; see `slaq::agent::guard`).

#[derive(clap::Args)]
pub(crate) struct JobGuardArgs {
    /// Milliseconds between SIGTERM and SIGKILL when the job is stopped.
    #[arg(long, default_value_t = 30_000)]
    pub(crate) grace_ms: u64,
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub(crate) command: Vec<String>,
}

pub(crate) fn run(args: JobGuardArgs) -> anyhow::Result<()> {
    let code = slaq::agent::guard::run(&args.command, std::time::Duration::from_millis(args.grace_ms));
    std::process::exit(code)
}
