//! The `slaq` command line: thin wrappers over the library. It parses the flags, sets up
//! logging, calls the library and reports errors with their chain (`anyhow` lives only here).

mod args;
mod bench;
mod bench_types;
mod cluster_bench;
mod live;
mod offline;

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use args::{BenchCommand, Cli, Command};

/// The scheduler allocates many small, short-lived values per epoch (messages, subjects,
/// worker lists); with glibc's allocator its free-list upkeep was about a fifth of an epoch at
/// 16,000 workers. mimalloc is built without transparent huge pages (`no_thp`): re-faulting a
/// purged 2 MiB page zeroes all of it, which showed up as epochs' slowest milliseconds.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        Command::Predict(args) => offline::predict(args),
        Command::Simulate(args) => offline::simulate(*args),
        Command::Bench(BenchCommand::Alloc(args)) => bench::alloc(args),
        Command::Bench(BenchCommand::Ingest(args)) => bench::ingest(args),
        Command::Bench(BenchCommand::Epoch(args)) => bench::epoch(args),
        Command::Bench(BenchCommand::Soak(args)) => bench::soak(args),
        Command::Bench(BenchCommand::Idle(args)) => bench::idle(args),
        Command::Bench(BenchCommand::Placement(args)) => bench::placement(args),
        Command::Bench(BenchCommand::Merge(args)) => bench::merge(args),
        Command::Bench(BenchCommand::Cluster(args)) => cluster_bench::cluster(args),
        Command::Serve(args) => live::serve(args),
        Command::Worker(args) => live::worker(args),
        Command::JobGuard(args) => {
            let code = slaq::agent::guard::run(&args.command, std::time::Duration::from_millis(args.grace_ms));
            std::process::exit(code)
        }
        Command::Status(args) => live::status(args),
        Command::Submit(args) => live::submit(*args),
        Command::Cancel(args) => live::cancel(args),
        Command::Emulate(args) => live::emulate(*args),
    }
}

pub(crate) fn load_all(paths: &[PathBuf]) -> anyhow::Result<Vec<slaq::trace::TraceCurve>> {
    let mut curves = Vec::new();
    for path in paths {
        curves
            .extend(slaq::trace::load_curves(path).with_context(|| format!("loading curves from {}", path.display()))?);
    }
    Ok(curves)
}
