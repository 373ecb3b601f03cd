//! The `slaq` command line: thin wrappers over the library. Each command is a file of its own
//! under `commands/` (its flags and its `run`); flags several commands share are in `common`.
//! `main` parses, sets up logging, dispatches, and reports errors with their chain (`anyhow`
//! lives only here).

#[cfg(test)]
mod cli_tests;
mod commands;
mod common;

use clap::{Parser, Subcommand};

use commands::*;

/// The scheduler allocates many small, short-lived values per epoch (messages, subjects,
/// worker lists); with glibc's allocator its free-list upkeep was about a fifth of an epoch at
/// 16,000 workers. mimalloc is built without transparent huge pages (`no_thp`): re-faulting a
/// purged 2 MiB page zeroes all of it, which showed up as epochs' slowest milliseconds.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    JobGuard(job_guard::JobGuardArgs),
    /// Replay loss curves and report how well the loss `horizon` iterations ahead is predicted.
    Predict(predict::PredictArgs),
    /// Simulate a workload of jobs replaying real loss curves under several policies.
    Simulate(Box<simulate::SimulateArgs>),
    /// Run the scheduler: per-job actors and the allocator over NATS.
    Serve(serve::ServeArgs),
    /// Run a reference worker agent: hello, heartbeats, and following its assignments.
    Worker(worker::WorkerArgs),
    /// Print what the scheduler believes: jobs, workers and message counters.
    Status(status::StatusArgs),
    /// Submit a job with the command its workers run (`-- program args...`); the agents run it
    /// with torchrun's environment on the workers slaq gives it.
    Submit(Box<submit::SubmitArgs>),
    /// End a submitted job (its processes are stopped, its workers go to others).
    Cancel(cancel::CancelArgs),
    /// Play a simulator workload over NATS against `slaq serve` and compare with `simulate`.
    Emulate(Box<emulate::EmulateArgs>),
    /// Measure the scheduler's own costs.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn main() -> std::process::ExitCode {
    // Like other command-line tools: a closed pipe (`slaq status | head`) ends the process
    // quietly instead of panicking in `println!`.
    #[cfg(unix)]
    // SAFETY: setting a signal disposition to its default at start-up, before any threads.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The whole chain on one line, without a backtrace: this is for people.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Cli::parse().command {
        Command::Predict(args) => predict::run(args),
        Command::Simulate(args) => simulate::run(*args),
        Command::Bench(command) => bench::run(command),
        Command::Serve(args) => serve::run(args),
        Command::Worker(args) => worker::run(args),
        Command::JobGuard(args) => job_guard::run(args),
        Command::Status(args) => status::run(args),
        Command::Submit(args) => submit::run(*args),
        Command::Cancel(args) => cancel::run(args),
        Command::Emulate(args) => emulate::run(*args),
    }
}
