//! `slaq bench soak`: a long run under steady load, memory sampled over time.

use std::time::Duration;

use slaq::bus;
use slaq::protocol::{self, Encoding, Subjects, WorkerSpec};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::support::{BenchOutput, BenchServer};
use super::support::{resident_bytes, start_in_process};
use crate::common::Size;

#[derive(clap::Args)]
pub(crate) struct BenchSoakArgs {
    #[command(flatten)]
    pub(crate) server: BenchServer,
    #[command(flatten)]
    pub(crate) size: Size<4000, 16000>,
    /// Loss reports per second per job.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) reports_per_s: f64,
    /// Seconds of the whole run.
    #[arg(long, default_value_t = 300)]
    pub(crate) duration_s: u64,
    /// Seconds of warm-up before memory is compared.
    #[arg(long, default_value_t = 60)]
    pub(crate) warm_up_s: u64,
    #[arg(long, default_value_t = 1000)]
    pub(crate) epoch_ms: u64,
    /// Jobs that end (a bye) per second, each replaced at once by a new job with a new id
    /// (reporting from its first iteration): the population stays at `--jobs`.
    #[arg(long, default_value_t = 4.0)]
    pub(crate) churn_per_s: f64,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

/// Steady load for `duration_s`: every worker beats every 2 s and every job reports
/// `reports_per_s` times a second, from a thread of its own. Memory (RSS) is sampled every 5 s;
/// after the warm-up its growth is the figure that matters.
pub(crate) fn run(args: BenchSoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.size.jobs > 0 && args.size.workers > 0 && args.reports_per_s > 0.0, "sizes must be positive");
    anyhow::ensure!(args.warm_up_s < args.duration_s, "--warm-up-s must be shorter than --duration-s");
    anyhow::ensure!(args.churn_per_s >= 0.0, "--churn-per-s must not be negative");
    let json = args.out.json;
    let report = actix::System::new().block_on(async move {
        let scheduler = start_in_process(&args.server.nats, "benchsoak", args.epoch_ms).await?;
        let handle = &scheduler.handle;
        let running = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let ended = Arc::new(AtomicU64::new(0));
        let load = steady_load(&args, &scheduler.prefix, running.clone(), (sent.clone(), ended.clone()));
        let started = std::time::Instant::now();
        let mut samples: Vec<(f64, u64)> = Vec::new();
        let mut jobs_seen: Vec<(f64, usize)> = Vec::new();
        while started.elapsed() < Duration::from_secs(args.duration_s) {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if let Some(rss) = resident_bytes() {
                samples.push((started.elapsed().as_secs_f64(), rss));
            }
            if let Some(e) = handle.epochs().await.last() {
                jobs_seen.push((started.elapsed().as_secs_f64(), e.num_jobs));
            }
        }
        let jobs_max = jobs_seen.iter().map(|j| j.1).max().unwrap_or(0);
        running.store(false, Ordering::Relaxed);
        let _ = load.join();
        let epochs = handle.epochs().await;
        let accepted = handle.metrics.accepted_counts();
        let rejected = handle.metrics.rejected_counts();
        scheduler.finish().await;
        let after: Vec<u64> = samples.iter().filter(|(t, _)| *t >= args.warm_up_s as f64).map(|s| s.1).collect();
        anyhow::ensure!(!after.is_empty(), "no memory samples after the warm-up");
        let (first, min, max) = (after[0], *after.iter().min().unwrap_or(&0), *after.iter().max().unwrap_or(&0));
        let last = *after.last().unwrap_or(&0);
        let mut total: Vec<f64> = epochs.iter().map(|e| e.total_ms).collect();
        total.sort_by(f64::total_cmp);
        let pct = |q: f64| total.get(((total.len().max(1) - 1) as f64 * q).round() as usize).copied();
        Ok::<_, anyhow::Error>(serde_json::json!({
            "jobs": args.size.jobs,
            "workers": args.size.workers,
            "reports_per_s_per_job": args.reports_per_s,
            "duration_s": args.duration_s,
            "warm_up_s": args.warm_up_s,
            "churn_per_s": args.churn_per_s,
            "jobs_ended": ended.load(Ordering::Relaxed),
            "churn_per_s_achieved": ended.load(Ordering::Relaxed) as f64 / args.duration_s as f64,
            "reports_per_s_per_job_achieved": accepted.get("loss").copied().unwrap_or(0) as f64
                / (args.duration_s as f64 * args.size.jobs as f64),
            "jobs_in_scheduler_max": jobs_max,
            "jobs_in_scheduler_last": jobs_seen.last().map(|j| j.1),
            "messages_sent": sent.load(Ordering::Relaxed),
            "accepted": accepted,
            "rejected": rejected,
            "epochs_recent": epochs.len(),
            "epoch_p50_ms": pct(0.5),
            "epoch_p99_ms": pct(0.99),
            "rss_after_warm_up_bytes": first,
            "rss_min_bytes": min,
            "rss_max_bytes": max,
            "rss_last_bytes": last,
            "rss_growth_after_warm_up_pct": 100.0 * (last as f64 - first as f64) / first as f64,
            "rss_spread_after_warm_up_pct": 100.0 * (max as f64 - min as f64) / min as f64,
            "rss_samples": samples.iter().map(|(t, b)| serde_json::json!([t.round(), b])).collect::<Vec<_>>(),
            "note": "RSS of this process: the scheduler and the load generator's client"
        }))
    })?;
    println!("{}", if json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

/// The load, from a thread of its own until `running` is cleared: every worker says hello,
/// then beats every 2 s, and every job reports `reports_per_s` times a second; `churn_per_s`
/// jobs a second end and are replaced by new ones. Counts the messages sent and the jobs ended.
fn steady_load(
    args: &BenchSoakArgs,
    prefix: &str,
    running: Arc<AtomicBool>,
    (sent, ended): (Arc<AtomicU64>, Arc<AtomicU64>),
) -> std::thread::JoinHandle<anyhow::Result<()>> {
    let (urls, prefix) = (args.server.nats.clone(), prefix.to_string());
    let (jobs, workers, rate, churn) = (args.size.jobs, args.size.workers, args.reports_per_s, args.churn_per_s);
    std::thread::spawn(move || -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async move {
            let (client, _) = bus::connect(&urls, "bench-soak-load", 1024).await?;
            let subjects = Subjects::new(&prefix)?;
            for w in 0..workers {
                let spec = WorkerSpec { worker: format!("w{w}"), machine: None, slots: 1, kind: None, advertise: None };
                bus::publish(&client, subjects.worker_hello(&spec.worker), Encoding::MsgPack, &spec).await?;
            }
            let tick = Duration::from_millis(100);
            let per_tick = rate * tick.as_secs_f64();
            let (mut owed, mut iter, mut next_job, mut ticks) = (0.0, vec![0u64; jobs], 0usize, 0u64);
            // Each slot's job is `job<slot>` at first, then `job<slot>r<n>` after its n-th end.
            let (mut round, mut owed_ends, mut next_end) = (vec![0u64; jobs], 0.0, 0usize);
            let id =
                |slot: usize, round: u64| if round == 0 { format!("job{slot}") } else { format!("job{slot}r{round}") };
            let mut interval = tokio::time::interval(tick);
            let mut last = std::time::Instant::now();
            while running.load(Ordering::Relaxed) {
                interval.tick().await;
                ticks += 1;
                // Ends by the clock, not by ticks: a tick late behind its reports still ends
                // the jobs due (the churn asked holds whatever the reports manage).
                owed_ends += churn * last.elapsed().as_secs_f64();
                last = std::time::Instant::now();
                while owed_ends >= 1.0 {
                    owed_ends -= 1.0;
                    let slot = next_end;
                    next_end = (next_end + 1) % jobs;
                    let job = id(slot, round[slot]);
                    let end = protocol::JobEnd { job: job.clone(), reason: protocol::EndReason::Finished };
                    bus::publish(&client, subjects.job_bye(&job), Encoding::MsgPack, &end).await?;
                    (round[slot], iter[slot]) = (round[slot] + 1, 0);
                    ended.fetch_add(1, Ordering::Relaxed);
                }
                // Reports: `rate` per job per second, spread over the ticks.
                owed += per_tick * jobs as f64;
                while owed >= 1.0 {
                    owed -= 1.0;
                    let j = next_job;
                    next_job = (next_job + 1) % jobs;
                    iter[j] += 1;
                    let k = iter[j] as f64;
                    let r = protocol::LossReport::new(
                        id(j, round[j]),
                        iter[j],
                        0.2 + (1.0 + (j % 7) as f64) / k.powf(0.5 + (j % 5) as f64 * 0.2),
                        1.0 / rate,
                        4,
                    );
                    bus::publish(&client, subjects.job_loss(&r.job), Encoding::MsgPack, &r).await?;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                // Heartbeats: every worker every 2 s (a twentieth of them per tick).
                for w in (0..workers).filter(|w| (*w as u64) % 20 == ticks % 20) {
                    let beat = protocol::Heartbeat::new(&format!("w{w}"));
                    bus::publish(&client, subjects.worker_beat(&beat.worker), Encoding::MsgPack, &beat).await?;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            client.flush().await?;
            Ok(())
        })
    })
}
