//! `slaq bench ingest`: loss reports per second from NATS into the job actors, next to raw
//! NATS pub/sub in the same run.

use std::sync::atomic::Ordering;
use std::time::Duration;

use slaq::bus;
use slaq::protocol::{Encoding, StatusSnapshot, Subjects};

use super::support::{BenchOutput, BenchServer};
use super::support::{encoded_reports, publish_from_another_thread, start_in_process};
use crate::common::Jobs;

/// How long the wait for the last reports lasts without one arriving, once all are published.
const STALL: Duration = Duration::from_secs(20);

#[derive(clap::Args)]
pub(crate) struct BenchIngestArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    /// Loss reports to send (in each of the two runs).
    #[arg(long, default_value_t = 500_000)]
    pub(crate) reports: u64,
    /// The jobs the reports are spread over.
    #[command(flatten)]
    pub(crate) jobs: Jobs<1000>,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

pub(crate) fn run(args: BenchIngestArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.reports > 0 && args.jobs.jobs > 0, "--reports and --jobs must be positive");
    let report = actix::System::new().block_on(async move {
        // Raw NATS: the same encoded messages, published from another thread and received by a
        // plain subscriber on this one.
        let raw_messages = encoded_reports(args.jobs.jobs as u64, args.reports, "benchraw")?;
        let (sub_client, _) = bus::connect(&args.server.nats, "bench-raw-sub", 1 << 22).await?;
        let mut raw_sub = sub_client.subscribe("benchraw.v1.job.*.loss").await?;
        sub_client.flush().await?;
        let started = std::time::Instant::now();
        let publisher = publish_from_another_thread(args.server.nats.clone(), raw_messages);
        let mut received = 0u64;
        while received < args.reports {
            match tokio::time::timeout(Duration::from_secs(10), futures_util::StreamExt::next(&mut raw_sub)).await {
                Ok(Some(_)) => received += 1,
                _ => break,
            }
        }
        let raw_s = started.elapsed().as_secs_f64();
        publisher.join().map_err(|_| anyhow::anyhow!("publisher thread panicked"))??;
        drop(raw_sub);

        // slaq: the scheduler on this thread, the reports into its job actors' predictors.
        let (handle, stop) = start_in_process(&args.server.nats, "benchslaq", 60_000).await?;
        let (status_client, _) = bus::connect(&args.server.nats, "bench-status", 16).await?;
        let messages = encoded_reports(args.jobs.jobs as u64, args.reports, "benchslaq")?;
        let started = std::time::Instant::now();
        let publisher = publish_from_another_thread(args.server.nats.clone(), messages);
        // Done when every report is accounted for: accepted by its job's actor once observed, or
        // rejected. Read from the scheduler's counters in this process every millisecond, rather
        // than a status request and a count asked of every job actor (1,000 actor messages)
        // every 10 ms, which the ingest measured here had to serve too (the difference was
        // within this machine's noise: issue #44's record).
        let (accepted, rejected) = accounted(&handle, &publisher, args.reports).await;
        let slaq_s = started.elapsed().as_secs_f64();
        // Checked once after: the actors observed what they accepted, and the status agrees.
        let observed = handle.observed_points().await;
        let subjects = Subjects::new("benchslaq")?;
        let status: StatusSnapshot =
            bus::request(&status_client, subjects.ctl_status(), Encoding::MsgPack, &(), Duration::from_secs(10))
                .await?;
        anyhow::ensure!(
            observed == accepted && status.accepted.get("loss").copied().unwrap_or(0) == accepted,
            "observed {observed}, accepted {accepted}, status {:?}",
            status.accepted.get("loss")
        );
        publisher.join().map_err(|_| anyhow::anyhow!("publisher thread panicked"))??;
        let _ = stop.send(());
        let raw_rate = received as f64 / raw_s;
        let slaq_rate = observed as f64 / slaq_s;
        Ok::<_, anyhow::Error>(serde_json::json!({
            "reports": args.reports,
            "jobs": args.jobs.jobs,
            "raw_nats_per_s": raw_rate,
            "raw_received": received,
            "slaq_per_s": slaq_rate,
            "slaq_observed": observed,
            "slaq_rejected": rejected,
            "slaq_vs_raw": slaq_rate / raw_rate,
            "scheduler_nats_disconnects": handle.bus.disconnects.load(Ordering::Relaxed),
            "scheduler_nats_dropped": handle.bus.dropped_messages.load(Ordering::Relaxed),
        }))
    })?;
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

/// Waits until the scheduler has accepted or rejected `reports` (read from its counters in
/// this process every millisecond); returns how many it accepted and rejected. A report lost on
/// the way (core NATS is at most once: a connection the server cuts loses what was in flight)
/// never arrives: once everything is published, the wait ends after `STALL` without progress,
/// and the connection's events say why.
async fn accounted(
    handle: &slaq::service::ServiceHandle,
    publisher: &std::thread::JoinHandle<anyhow::Result<()>>,
    reports: u64,
) -> (u64, u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let (mut accepted, mut rejected) = (0u64, 0u64);
    let mut progress = (0u64, std::time::Instant::now());
    while std::time::Instant::now() < deadline {
        accepted = handle.metrics.accepted("loss").get();
        rejected = handle.metrics.rejected_counts().values().sum();
        if accepted + rejected >= reports {
            break;
        }
        if accepted + rejected > progress.0 {
            progress = (accepted + rejected, std::time::Instant::now());
        } else if publisher.is_finished() && progress.1.elapsed() > STALL {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (accepted, rejected)
}
