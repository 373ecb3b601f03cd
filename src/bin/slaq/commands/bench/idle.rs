//! `slaq bench idle`: CPU and memory of the scheduler holding many jobs that report nothing
//! more.

use std::time::Duration;

use super::support::{BenchOutput, BenchServer};
use super::support::{cpu_seconds, encoded_reports, publish_from_another_thread, resident_bytes, start_in_process};
use crate::common::Jobs;

#[derive(clap::Args)]
pub(crate) struct BenchIdleArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[command(flatten)]
    pub(crate) jobs: Jobs<200_000>,
    /// Seconds to let start-up work (saves, refits) finish before measuring.
    #[arg(long, default_value_t = 60)]
    pub(crate) settle_s: u64,
    /// Seconds measured.
    #[arg(long, default_value_t = 30)]
    pub(crate) measure_s: u64,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

/// The scheduler (5 s epochs) holding `jobs` jobs of one report each: its CPU while nothing
/// happens, and its memory.
pub(crate) fn run(args: BenchIdleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.jobs.jobs > 0 && args.measure_s > 0, "--jobs and --measure-s must be positive");
    let report = actix::System::new().block_on(async move {
        let rss_start = resident_bytes();
        let scheduler = start_in_process(&args.server.nats, "benchidle", 5000).await?;
        let handle = &scheduler.handle;
        let messages = encoded_reports(args.jobs.jobs as u64, args.jobs.jobs as u64, &scheduler.prefix)?;
        let publisher = publish_from_another_thread(args.server.nats.clone(), messages);
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while handle.observed_points().await < args.jobs.jobs as u64 {
            anyhow::ensure!(std::time::Instant::now() < deadline, "the reports did not all land");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        publisher.join()?;
        tokio::time::sleep(Duration::from_secs(args.settle_s)).await;
        let cpu_before = cpu_seconds();
        tokio::time::sleep(Duration::from_secs(args.measure_s)).await;
        let cpu_after = cpu_seconds();
        let rss = resident_bytes();
        let epochs = handle.epochs().await;
        scheduler.finish().await;
        let idle_cpu_pct = match (cpu_before, cpu_after) {
            (Some(a), Some(b)) => Some(100.0 * (b - a) / args.measure_s as f64),
            _ => None,
        };
        Ok::<_, anyhow::Error>(serde_json::json!({
            "jobs": args.jobs.jobs,
            "idle_cpu_pct_of_one_core": idle_cpu_pct,
            "rss_bytes": rss,
            "rss_bytes_per_job": match (rss_start, rss) { (Some(a), Some(b)) => Some(b.saturating_sub(a) / args.jobs.jobs as u64), _ => None },
            "last_epoch_ms": epochs.last().map(|e| e.total_ms),
            "note": "this process runs the scheduler (state.mode auto: JetStream when the server has it) and, before the measurement, the load's client"
        }))
    })?;
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}
