//! `slaq bench epoch`: epoch latency (bids, policy, publish) and memory with many jobs and
//! workers.

use std::time::Duration;

use slaq::bus;
use slaq::protocol::{self, Encoding, Subjects, WorkerSpec};

use super::support::{BenchOutput, BenchServer};
use super::support::{http_get, pct, resident_bytes, start_serving};
use crate::common::Size;

#[derive(clap::Args)]
pub(crate) struct BenchEpochArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[command(flatten)]
    pub(crate) size: Size<4000, 16000>,
    /// Epochs to measure (after a few warm-up epochs).
    #[arg(long, default_value_t = 40)]
    pub(crate) epochs: usize,
    #[arg(long, default_value_t = 250)]
    pub(crate) epoch_ms: u64,
    /// Then as many epochs again with the page open: its JSON (the overview and one job's
    /// curve) fetched over HTTP every this many ms, the pair in one run (issue #45).
    #[arg(long)]
    pub(crate) page_poll_ms: Option<u64>,
    /// Serve the page here (host:port) while it runs (with --page-poll-ms: on a free port).
    #[arg(long)]
    pub(crate) http_listen: Option<String>,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

pub(crate) fn run(args: BenchEpochArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.size.jobs > 0 && args.size.workers > 0 && args.epochs > 0, "sizes must be positive");
    let json = args.out.json;
    let report = actix::System::new().block_on(async move {
        let baseline_rss = resident_bytes();
        let listen = args.http_listen.clone().or_else(|| args.page_poll_ms.map(|_| "127.0.0.1:0".to_string()));
        let scheduler = start_serving(&args.server.nats, "benchepoch", args.epoch_ms, listen.as_deref()).await?;
        let handle = &scheduler.handle;
        let (client, _) = bus::connect(&args.server.nats, "bench-epoch-load", 1024).await?;
        let subjects = Subjects::new(&scheduler.prefix)?;
        hello_workers(&client, &subjects, args.size.workers).await?;
        let after_workers_rss = resident_bytes();
        report_curves(&client, &subjects, args.size.jobs).await?;
        // Let the reports land and refits settle, then measure. Core NATS drops what a slow
        // consumer cannot take (at 100,000 jobs some of the 4 M reports): once nothing more
        // lands for 10 s, measure anyway and say how many landed.
        let sent = (args.size.jobs * 40) as u64;
        let (mut landed, mut last_change) = (0, std::time::Instant::now());
        while landed < sent && last_change.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = handle.observed_points().await;
            if now > landed {
                (landed, last_change) = (now, std::time::Instant::now());
            }
        }
        anyhow::ensure!(landed > 0, "no report landed");
        let first = handle.epochs().await.last().map_or(0, |e| e.epoch);
        let measured = measure(handle, first + 3, &args).await;
        let jobs_rss = resident_bytes();
        let page = match (args.page_poll_ms, handle.http_addr) {
            (Some(every), Some(addr)) => {
                let last = measured.last().map_or(first, |e| e.epoch);
                Some(with_page(handle, addr, every, last, &args).await?)
            }
            _ => None,
        };
        scheduler.finish().await;
        let field = |f: fn(&protocol::EpochSummary) -> f64| measured.iter().map(f).collect::<Vec<_>>();
        let total = field(|e| e.total_ms);
        let per_job = match (after_workers_rss, jobs_rss) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) / args.size.jobs as u64),
            _ => None,
        };
        Ok::<_, anyhow::Error>(serde_json::json!({
            "jobs": args.size.jobs,
            "workers": args.size.workers,
            "epochs": measured.len(),
            "epoch_p50_ms": pct(total.clone(), 0.5),
            "epoch_p99_ms": pct(total, 0.99),
            "epoch_cpu_p50_ms": pct(measured.iter().filter_map(|e| e.cpu_ms).collect(), 0.5),
            "epoch_cpu_p99_ms": pct(measured.iter().filter_map(|e| e.cpu_ms).collect(), 0.99),
            "collect_p50_ms": pct(field(|e| e.collect_ms), 0.5),
            "policy_p50_ms": pct(field(|e| e.policy_ms), 0.5),
            "publish_p50_ms": pct(field(|e| e.publish_ms), 0.5),
            "jobs_without_bid_max": measured.iter().map(|e| e.jobs_without_bid).max(),
            "reports_sent": sent,
            "reports_landed": landed,
            "workers_moved_p50": pct(measured.iter().map(|e| e.workers_moved as f64).collect(), 0.5),
            "workers_known_min": measured.iter().map(|e| e.num_workers).min(),
            "workers_assigned_p50": pct(measured.iter().map(|e| e.workers_assigned as f64).collect(), 0.5),
            "rss_start_bytes": baseline_rss,
            "rss_with_workers_bytes": after_workers_rss,
            "rss_with_jobs_bytes": jobs_rss,
            "rss_bytes_per_job": per_job,
            "with_page": page,
            "note": "RSS of this process, which runs the scheduler and the load generator's client"
        }))
    })?;
    println!("{}", if json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

/// The next `args.epochs` epochs after epoch `after` with nearly all the jobs in.
async fn measure(
    handle: &slaq::service::ServiceHandle,
    after: u64,
    args: &BenchEpochArgs,
) -> Vec<protocol::EpochSummary> {
    loop {
        let measured: Vec<_> = handle
            .epochs()
            .await
            .into_iter()
            .filter(|e| e.epoch > after && e.num_jobs * 100 >= args.size.jobs * 99)
            .take(args.epochs)
            .collect();
        if measured.len() >= args.epochs {
            return measured;
        }
        tokio::time::sleep(Duration::from_millis(args.epoch_ms)).await;
    }
}

/// As many epochs again with a page client fetching the overview and one job's curve every
/// `every_ms`: those epochs' times, the JSON's size and the fetches' times.
async fn with_page(
    handle: &slaq::service::ServiceHandle,
    addr: std::net::SocketAddr,
    every_ms: u64,
    after: u64,
    args: &BenchEpochArgs,
) -> anyhow::Result<serde_json::Value> {
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
    let poller = actix::spawn(async move {
        let (mut overview, mut job) = (Vec::new(), Vec::new());
        let mut tick = tokio::time::interval(Duration::from_millis(every_ms.max(1)));
        loop {
            tokio::select! {
                _ = &mut done_rx => break,
                _ = tick.tick() => {
                    overview.push(http_get(addr, "/api/v1/overview").await);
                    job.push(http_get(addr, "/api/v1/jobs/job7").await);
                }
            }
        }
        (overview, job)
    });
    let measured = measure(handle, after, args).await;
    let _ = done_tx.send(());
    let (overview, job) = poller.await?;
    let ok = |v: &[anyhow::Result<(u16, usize, f64)>]| -> Vec<(usize, f64)> {
        v.iter().filter_map(|r| r.as_ref().ok().filter(|(s, _, _)| *s == 200).map(|&(_, b, ms)| (b, ms))).collect()
    };
    let (overview_ok, job_ok) = (ok(&overview), ok(&job));
    let total: Vec<f64> = measured.iter().map(|e| e.total_ms).collect();
    Ok(serde_json::json!({
        "poll_ms": every_ms,
        "epochs": measured.len(),
        "epoch_p50_ms": pct(total.clone(), 0.5),
        "epoch_p99_ms": pct(total, 0.99),
        "overview_fetches": overview.len(),
        "overview_fetches_ok": overview_ok.len(),
        "overview_bytes_max": overview_ok.iter().map(|x| x.0).max(),
        "overview_ms_p50": pct(overview_ok.iter().map(|x| x.1).collect(), 0.5),
        "overview_ms_p99": pct(overview_ok.iter().map(|x| x.1).collect(), 0.99),
        "job_fetches_ok": job_ok.len(),
        "job_bytes_max": job_ok.iter().map(|x| x.0).max(),
        "job_ms_p50": pct(job_ok.iter().map(|x| x.1).collect(), 0.5),
    }))
}

/// Every worker says hello.
async fn hello_workers(client: &async_nats::Client, subjects: &Subjects, workers: u32) -> anyhow::Result<()> {
    for w in 0..workers {
        let id = format!("w{w}");
        let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None, advertise: None };
        bus::publish(client, subjects.worker_hello(&id), Encoding::MsgPack, &spec).await?;
    }
    Ok(())
}

/// Every job reports 40 points of a real-looking curve (so its predictor is fitted).
async fn report_curves(client: &async_nats::Client, subjects: &Subjects, jobs: usize) -> anyhow::Result<()> {
    for iter in 1..=40u64 {
        for j in 0..jobs {
            let id = format!("job{j}");
            let loss = 0.2 + (1.0 + (j % 7) as f64) / (iter as f64).powf(0.5 + (j % 5) as f64 * 0.2);
            let r = protocol::LossReport::new(&id, iter, loss, 1.0 + (j % 3) as f64, 1 + (iter % 4) as u32);
            bus::publish(client, subjects.job_loss(&id), Encoding::MsgPack, &r).await?;
        }
    }
    client.flush().await?;
    Ok(())
}
