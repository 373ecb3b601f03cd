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
    /// host:port for the HTTP listener serving /metrics (Prometheus), /healthz and /readyz.
    #[arg(long)]
    pub(crate) http_listen: Option<String>,
}

pub(crate) fn parse_speedup(s: &str) -> Result<slaq::sim::SpeedupKind, String> {
    match s {
        "parametric" => Ok(slaq::sim::SpeedupKind::Parametric),
        "pollux" => Ok(slaq::sim::SpeedupKind::Pollux),
        _ => Err(format!("unknown speed-up {s:?}; expected parametric or pollux")),
    }
}

/// The curves the simulator, the emulator and the benchmarks replay by default (vendored).
pub(crate) const DEFAULT_CURVES: &str = "data/curves/curves-public.jsonl";

pub(crate) fn parse_policy_arg(s: &str) -> Result<slaq::policy::PolicyKind, String> {
    slaq::service::config::parse_policy(s).ok_or_else(|| format!("unknown policy {s:?}; expected slaq or fair"))
}

/// Where the scheduler is.
#[derive(clap::Args)]
pub(crate) struct NatsArgs {
    /// NATS server URL(s), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats: Vec<String>,
    /// Subject prefix.
    #[arg(long, default_value = "slaq")]
    pub(crate) prefix: String,
}

#[derive(clap::Args)]
pub(crate) struct WorkerArgs {
    /// This worker's id (1-64 characters from [A-Za-z0-9_-]).
    #[arg(long)]
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) bus: NatsArgs,
    /// Milliseconds between heartbeats.
    #[arg(long, default_value_t = 2000)]
    pub(crate) beat_ms: u64,
    /// The machine this worker runs on.
    #[arg(long)]
    pub(crate) machine: Option<String>,
    /// A command to run whenever the worker is assigned a job, with SLAQ_JOB, SLAQ_WORKER and
    /// SLAQ_EPOCH in its environment (run through `sh -c`; the previous one is killed first).
    #[arg(long)]
    pub(crate) exec: Option<String>,
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
    #[arg(long, default_value_t = slaq::sim::DEFAULT_WORKERS)]
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
}

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// Time one full allocation decision (gain curves included) for each policy.
    Alloc(BenchAllocArgs),
    /// Loss reports per second from NATS into the job actors, next to raw NATS pub/sub.
    Ingest(BenchIngestArgs),
    /// Epoch latency (bids, policy, publish) and memory with many jobs and workers.
    Epoch(BenchEpochArgs),
}

#[derive(clap::Args)]
pub(crate) struct BenchIngestArgs {
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats: Vec<String>,
    /// Loss reports to send (in each of the two runs).
    #[arg(long, default_value_t = 500_000)]
    pub(crate) reports: u64,
    /// Jobs the reports are spread over.
    #[arg(long, default_value_t = 1000)]
    pub(crate) jobs: u64,
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(clap::Args)]
pub(crate) struct BenchEpochArgs {
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats: Vec<String>,
    #[arg(long, default_value_t = 4000)]
    pub(crate) jobs: usize,
    #[arg(long, default_value_t = 16000)]
    pub(crate) workers: usize,
    /// Epochs to measure (after a few warm-up epochs).
    #[arg(long, default_value_t = 40)]
    pub(crate) epochs: usize,
    #[arg(long, default_value_t = 250)]
    pub(crate) epoch_ms: u64,
    #[arg(long)]
    pub(crate) json: bool,
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
    #[arg(long)]
    pub(crate) json: bool,
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
    /// Policies to compare: slaq, slaq-paper, fair, oracle.
    #[arg(long, value_delimiter = ',', default_value = "slaq,fair")]
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
    pub(crate) speedup: Option<slaq::sim::SpeedupKind>,
    /// Fairness floor f in [0, 1]: every job gets at least f times its fair share of
    /// worker-seconds over a sliding window (0: pure quality, 1: fair) [default: 0.5]. Several,
    /// comma-separated, print the frontier (loss-area reduction and worst slowdown against fair
    /// per floor) and, with --out, plot it.
    #[arg(long, value_delimiter = ',')]
    pub(crate) floor: Vec<f64>,
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
