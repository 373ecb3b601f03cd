//! `slaq emulate`: plays a simulator workload over NATS against `slaq serve` and compares with
//! the simulated run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use slaq::bus;
use slaq::protocol::Subjects;

use crate::common::{DEFAULT_CURVES, NatsArgs, Size, load_all};

#[derive(clap::Args)]
pub(crate) struct EmulateArgs {
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    pub(crate) curves: Vec<PathBuf>,
    /// The policy `slaq serve` runs (slaq or fair): the simulated run beside the live one uses
    /// it too.
    #[arg(long, default_value = "slaq")]
    pub(crate) policy: String,
    #[command(flatten)]
    pub(crate) size: Size<160, { slaq::sim::curves::DEFAULT_WORKERS }>,
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

pub(crate) fn run(args: EmulateArgs) -> anyhow::Result<()> {
    use slaq::sim::curves::{self as sim, PolicySpec, SimConfig, WorkloadConfig};
    anyhow::ensure!(
        args.speed > 0.0 && args.epoch_ms > 0 && args.size.workers > 0,
        "--speed, --epoch-ms and --workers must be positive"
    );
    let curves = load_all(&args.curves)?;
    let workload = WorkloadConfig { num_jobs: args.size.jobs, seed: args.seed, ..WorkloadConfig::default() };
    let jobs = sim::workload::generate(&curves, &workload)?;
    let epoch_s = args.epoch_ms as f64 / 1000.0 * args.speed;
    let sim_config = SimConfig { num_workers: args.size.workers, epoch_s, ..SimConfig::default() };
    let policy = PolicySpec::named(&args.policy).filter(|p| !p.is_oracle()).with_context(|| {
        format!("unknown policy {:?}; expected the policy slaq serve runs (slaq or fair)", args.policy)
    })?;
    let simulated = sim::engine::run(&jobs, &sim_config, policy, |_| {});
    let config = slaq::emulate::EmulateConfig {
        subjects: Subjects::new(&args.bus.prefix)?,
        num_workers: args.size.workers,
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
        "jobs": args.size.jobs,
        "workers": args.size.workers,
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
            policy.name, args.size.jobs, args.size.workers, args.seed, args.speed
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
