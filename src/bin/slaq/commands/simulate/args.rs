//! `slaq simulate`'s flags: the curve simulator's, and Pollux's, Gavel's and teams' settings.

use std::path::PathBuf;

use crate::common::DEFAULT_CURVES;

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
}

fn parse_speedup(s: &str) -> Result<slaq::sim::curves::SpeedupKind, String> {
    match s {
        "parametric" => Ok(slaq::sim::curves::SpeedupKind::Parametric),
        "pollux" => Ok(slaq::sim::curves::SpeedupKind::Pollux),
        _ => Err(format!("unknown speed-up {s:?}; expected parametric or pollux")),
    }
}

/// `A..B` with `A < B`.
fn parse_range(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once("..").ok_or_else(|| format!("{s:?}: expected A..B"))?;
    let a: usize = a.trim().parse().map_err(|_| format!("{s:?}: A is not a number"))?;
    let b: usize = b.trim().parse().map_err(|_| format!("{s:?}: B is not a number"))?;
    if a < b { Ok((a, b)) } else { Err(format!("{s:?}: A must be below B")) }
}
