//! `slaq bench`: the scheduler's own costs. `alloc` is one decision in memory; `ingest` and
//! `epoch` run the scheduler in this process against a NATS server.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tracing::warn;

use slaq::bus;
use slaq::protocol::{self, Encoding, StatusSnapshot, Subjects, WorkerSpec};
use slaq::quality::PredictorConfig;
use slaq::service::{self, Overrides, RawConfig};

use crate::args::{
    BenchAllocArgs, BenchEpochArgs, BenchIdleArgs, BenchIngestArgs, BenchMergeArgs, BenchPlacementArgs, BenchSoakArgs,
};
use crate::load_all;

/// One allocation decision in memory. Each job's bid is its gain curve tabulated when the
/// bid is made (`policy::table`, at refit in the live scheduler), so the decision reads tables;
/// what building every table at once costs is reported beside it, as is the heap greedy that
/// the decision must equal (checked on every run).
pub fn alloc(args: BenchAllocArgs) -> anyhow::Result<()> {
    use slaq::policy::table::{DEFAULT_TABLE_LEN, Tabled};
    use slaq::policy::{JobBid, PolicyKind, Problem, check_contract, slaq as greedy};
    use std::time::Instant;
    anyhow::ensure!(args.jobs > 0 && args.runs > 0, "--jobs and --runs must be positive");
    let curves = load_all(&args.curves)?;
    let templates = slaq::sim::curves::fixtures::predictor_templates(&curves, PredictorConfig::default());
    let predictors = slaq::sim::curves::fixtures::predictors(&templates, args.jobs);
    let bytes_per_job = predictors.iter().map(|p| p.state_bytes()).sum::<usize>() / predictors.len();
    let epoch_s = 60.0;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ms = |from: Instant, to: Instant| (to - from).as_secs_f64() * 1e3;
    let (mut slaq_ms, mut heap_ms, mut curves_ms, mut tables_ms, mut fair_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut total_assigned, mut table_bytes, mut table_len) = (0, 0, 0);
    for run in 0..args.runs {
        // Jobs keep their workers across decisions, as in the live allocator.
        let current = |j: usize| ((j + run) % 8) as u32;
        let start = Instant::now();
        let gains: Vec<_> = predictors.iter().enumerate().map(|(j, p)| p.gain_curve(epoch_s, current(j))).collect();
        let curves_done = Instant::now();
        let bids: Vec<_> =
            gains.into_iter().map(|g| JobBid::new(g.map(|g| Tabled::new(g, u32::MAX, DEFAULT_TABLE_LEN)))).collect();
        let tables_done = Instant::now();
        let problem = Problem { num_workers: args.workers, jobs: &bids };
        let allocation = PolicyKind::Slaq.allocate(&problem);
        let slaq_done = Instant::now();
        let by_heap = greedy::allocate_by_heap(&problem);
        let heap_done = Instant::now();
        anyhow::ensure!(allocation == by_heap, "the threshold greedy differs from the heap greedy");
        check_contract(&problem, &allocation)?;
        total_assigned = allocation.total();
        let tabled = bids.iter().filter_map(|b| b.gain.as_ref());
        table_bytes = tabled.clone().map(Tabled::table_bytes).sum::<usize>() / args.jobs;
        table_len = tabled.map(Tabled::len).sum::<usize>() / args.jobs;
        let fair_bids: Vec<JobBid<slaq::quality::GainCurve>> = (0..args.jobs).map(|_| JobBid::new(None)).collect();
        let fair_start = Instant::now();
        let fair = PolicyKind::Fair.allocate(&Problem { num_workers: args.workers, jobs: &fair_bids });
        fair_ms.push(ms(fair_start, Instant::now()));
        std::hint::black_box(fair);
        curves_ms.push(ms(start, curves_done));
        tables_ms.push(ms(curves_done, tables_done));
        slaq_ms.push(ms(tables_done, slaq_done));
        heap_ms.push(ms(slaq_done, heap_done));
    }
    let typed =
        if args.types >= 2 { Some(crate::bench_types::typed_decisions(&predictors, &args, epoch_s)?) } else { None };
    let report = serde_json::json!({
        "jobs": args.jobs,
        "workers": args.workers,
        "types": args.types,
        "typed": typed,
        // The first decision has no earlier threshold to start from (see `policy::slaq`).
        "slaq_first_ms": slaq_ms.first().copied(),
        "slaq_ms": median(slaq_ms),
        "slaq_heap_ms": median(heap_ms),
        "slaq_gain_curves_ms": median(curves_ms),
        "slaq_gain_tables_ms": median(tables_ms),
        "fair_ms": median(fair_ms),
        "slaq_workers_assigned": total_assigned,
        "identical_to_heap": true,
        "predictor_bytes_per_job": bytes_per_job,
        "table_bytes_per_job": table_bytes,
        "table_len_mean": table_len,
        "runs": args.runs,
    });
    if args.out.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// Resident set size of this process in bytes (Linux), for memory figures.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Starts the scheduler in this process (inside the running actix System) with a private
/// prefix; returns its handle and the stop trigger.
async fn start_in_process(
    urls: &[String],
    prefix: &str,
    epoch_ms: u64,
) -> anyhow::Result<(service::ServiceHandle, tokio::sync::oneshot::Sender<()>)> {
    let mut raw = RawConfig::default();
    raw.scheduler.epoch_ms = epoch_ms;
    raw.scheduler.worker_timeout_ms = 600_000;
    raw.scheduler.job_mailbox = 1 << 16;
    raw.scheduler.max_jobs = 1 << 20;
    if let Ok(threads) = std::env::var("SLAQ_BENCH_JOB_THREADS") {
        raw.scheduler.job_threads = threads.parse().context("SLAQ_BENCH_JOB_THREADS")?;
    }
    let overrides = Overrides { nats: urls.to_vec(), prefix: Some(prefix.to_string()), ..Overrides::default() };
    let config = raw.resolve(&BTreeMap::new(), &overrides)?;
    let (client, counters) = bus::connect(&config.nats_urls, "slaq-bench-scheduler", 1 << 20).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    actix::spawn(async move {
        let shutdown = async move {
            let _ = stop_rx.await;
        };
        if let Err(e) = service::run(service::Connections::single(client, counters), config, shutdown, move |h| {
            let _ = ready_tx.send(h);
        })
        .await
        {
            warn!(error = %e, "in-process scheduler failed");
        }
    });
    let handle = ready_rx.await.context("the in-process scheduler did not start")?;
    Ok((handle, stop_tx))
}

fn encoded_reports(jobs: u64, reports: u64, prefix: &str) -> anyhow::Result<Vec<(String, bytes::Bytes)>> {
    let subjects = Subjects::new(prefix)?;
    (0..reports)
        .map(|i| {
            let (job, iter) = (i % jobs, i / jobs + 1);
            let id = format!("job{job}");
            let r = protocol::LossReport::new(&id, iter, 1.0 / iter as f64, 0.5, 1);
            Ok((subjects.job_loss(&id), bytes::Bytes::from(protocol::encode(Encoding::MsgPack, &r)?)))
        })
        .collect()
}

/// Publishes pre-encoded messages from a thread of its own (a load generator must not share
/// the measured process's thread); returns when the server has them all.
fn publish_from_another_thread(
    urls: Vec<String>,
    messages: Vec<(String, bytes::Bytes)>,
) -> std::thread::JoinHandle<anyhow::Result<()>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async move {
            let (client, _) = bus::connect(&urls, "bench-publisher", 1024).await?;
            for (subject, payload) in messages {
                client.publish(subject, payload).await?;
            }
            client.flush().await?;
            Ok(())
        })
    })
}

pub fn ingest(args: BenchIngestArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.reports > 0 && args.jobs > 0, "--reports and --jobs must be positive");
    let report = actix::System::new().block_on(async move {
        // Raw NATS: the same encoded messages, published from another thread and received by a
        // plain subscriber on this one.
        let raw_messages = encoded_reports(args.jobs, args.reports, "benchraw")?;
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
        let messages = encoded_reports(args.jobs, args.reports, "benchslaq")?;
        let started = std::time::Instant::now();
        let publisher = publish_from_another_thread(args.server.nats.clone(), messages);
        // Done when the ingest loop has accounted for every report (accepted or rejected) and
        // the job actors have observed every accepted one.
        let subjects = Subjects::new("benchslaq")?;
        let (mut rejected, mut observed) = (0u64, 0u64);
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while std::time::Instant::now() < deadline {
            let status: StatusSnapshot =
                bus::request(&status_client, subjects.ctl_status(), Encoding::MsgPack, &(), Duration::from_secs(10))
                    .await?;
            let accepted = status.accepted.get("loss").copied().unwrap_or(0);
            rejected = status.rejected.values().sum();
            observed = handle.observed_points().await;
            if accepted + rejected >= args.reports && observed >= accepted {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let slaq_s = started.elapsed().as_secs_f64();
        publisher.join().map_err(|_| anyhow::anyhow!("publisher thread panicked"))??;
        let _ = stop.send(());
        let raw_rate = received as f64 / raw_s;
        let slaq_rate = observed as f64 / slaq_s;
        Ok::<_, anyhow::Error>(serde_json::json!({
            "reports": args.reports,
            "jobs": args.jobs,
            "raw_nats_per_s": raw_rate,
            "raw_received": received,
            "slaq_per_s": slaq_rate,
            "slaq_observed": observed,
            "slaq_rejected": rejected,
            "slaq_vs_raw": slaq_rate / raw_rate,
        }))
    })?;
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

pub fn epoch(args: BenchEpochArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.jobs > 0 && args.workers > 0 && args.epochs > 0, "sizes must be positive");
    let report = actix::System::new().block_on(async move {
        let baseline_rss = resident_bytes();
        let (handle, stop) = start_in_process(&args.server.nats, "benchepoch", args.epoch_ms).await?;
        let (client, _) = bus::connect(&args.server.nats, "bench-epoch-load", 1024).await?;
        let subjects = Subjects::new("benchepoch")?;
        for w in 0..args.workers {
            let id = format!("w{w}");
            let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None, advertise: None };
            bus::publish(&client, subjects.worker_hello(&id), Encoding::MsgPack, &spec).await?;
        }
        let after_workers_rss = resident_bytes();
        // Every job reports 40 points of a real-looking curve (so its predictor is fitted).
        for iter in 1..=40u64 {
            for j in 0..args.jobs {
                let id = format!("job{j}");
                let loss = 0.2 + (1.0 + (j % 7) as f64) / (iter as f64).powf(0.5 + (j % 5) as f64 * 0.2);
                let r = protocol::LossReport::new(&id, iter, loss, 1.0 + (j % 3) as f64, 1 + (iter % 4) as u32);
                bus::publish(&client, subjects.job_loss(&id), Encoding::MsgPack, &r).await?;
            }
        }
        client.flush().await?;
        // Let the reports land and refits settle, then measure. Core NATS drops what a slow
        // consumer cannot take (at 100,000 jobs some of the 4 M reports): once nothing more
        // lands for 10 s, measure anyway and say how many landed.
        let sent = (args.jobs * 40) as u64;
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
        let warm_up = 3;
        loop {
            let epochs = handle.epochs().await;
            let measured: Vec<_> = epochs
                .iter()
                .filter(|e| e.epoch > first + warm_up && e.num_jobs * 100 >= args.jobs * 99)
                .cloned()
                .collect();
            if measured.len() >= args.epochs {
                let jobs_rss = resident_bytes();
                let _ = stop.send(());
                let pct = |mut v: Vec<f64>, q: f64| {
                    v.sort_by(f64::total_cmp);
                    v[((v.len() - 1) as f64 * q).round() as usize]
                };
                let field = |f: fn(&protocol::EpochSummary) -> f64| measured.iter().map(f).collect::<Vec<_>>();
                let total = field(|e| e.total_ms);
                let per_job = match (after_workers_rss, jobs_rss) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a) / args.jobs as u64),
                    _ => None,
                };
                return Ok::<_, anyhow::Error>(serde_json::json!({
                    "jobs": args.jobs,
                    "workers": args.workers,
                    "epochs": measured.len(),
                    "epoch_p50_ms": pct(total.clone(), 0.5),
                    "epoch_p99_ms": pct(total, 0.99),
                    "epoch_cpu_p99_ms": pct(measured.iter().filter_map(|e| e.cpu_ms).collect(), 0.99),
                    "collect_p50_ms": pct(field(|e| e.collect_ms), 0.5),
                    "policy_p50_ms": pct(field(|e| e.policy_ms), 0.5),
                    "publish_p50_ms": pct(field(|e| e.publish_ms), 0.5),
                    "jobs_without_bid_max": measured.iter().map(|e| e.jobs_without_bid).max(),
                    "reports_sent": sent,
                    "reports_landed": landed,
                    "workers_moved_p50": pct(measured.iter().map(|e| e.workers_moved as f64).collect(), 0.5),
                    "rss_start_bytes": baseline_rss,
                    "rss_with_workers_bytes": after_workers_rss,
                    "rss_with_jobs_bytes": jobs_rss,
                    "rss_bytes_per_job": per_job,
                    "note": "RSS of this process, which runs the scheduler and the load generator's client"
                }));
            }
            tokio::time::sleep(Duration::from_millis(args.epoch_ms)).await;
        }
    })?;
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

/// Steady load for `duration_s`: every worker beats every 2 s and every job reports
/// `reports_per_s` times a second, from a thread of its own. Memory (RSS) is sampled every 5 s;
/// after the warm-up its growth is the figure that matters.
pub fn soak(args: BenchSoakArgs) -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    anyhow::ensure!(args.jobs > 0 && args.workers > 0 && args.reports_per_s > 0.0, "sizes must be positive");
    anyhow::ensure!(args.warm_up_s < args.duration_s, "--warm-up-s must be shorter than --duration-s");
    let report = actix::System::new().block_on(async move {
        let (handle, stop) = start_in_process(&args.server.nats, "benchsoak", args.epoch_ms).await?;
        let running = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let load = {
            let (urls, running, sent) = (args.server.nats.clone(), running.clone(), sent.clone());
            let (jobs, workers, rate) = (args.jobs, args.workers, args.reports_per_s);
            std::thread::spawn(move || -> anyhow::Result<()> {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(async move {
                    let (client, _) = bus::connect(&urls, "bench-soak-load", 1024).await?;
                    let subjects = Subjects::new("benchsoak")?;
                    for w in 0..workers {
                        let spec = WorkerSpec {
                            worker: format!("w{w}"),
                            machine: None,
                            slots: 1,
                            kind: None,
                            advertise: None,
                        };
                        bus::publish(&client, subjects.worker_hello(&spec.worker), Encoding::MsgPack, &spec).await?;
                    }
                    let tick = Duration::from_millis(100);
                    let per_tick = rate * tick.as_secs_f64();
                    let (mut owed, mut iter, mut next_job, mut ticks) = (0.0, vec![0u64; jobs], 0usize, 0u64);
                    let mut interval = tokio::time::interval(tick);
                    while running.load(Ordering::Relaxed) {
                        interval.tick().await;
                        ticks += 1;
                        // Reports: `rate` per job per second, spread over the ticks.
                        owed += per_tick * jobs as f64;
                        while owed >= 1.0 {
                            owed -= 1.0;
                            let j = next_job;
                            next_job = (next_job + 1) % jobs;
                            iter[j] += 1;
                            let k = iter[j] as f64;
                            let r = protocol::LossReport::new(
                                format!("job{j}"),
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
        };
        let started = std::time::Instant::now();
        let mut samples: Vec<(f64, u64)> = Vec::new();
        while started.elapsed() < Duration::from_secs(args.duration_s) {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if let Some(rss) = resident_bytes() {
                samples.push((started.elapsed().as_secs_f64(), rss));
            }
        }
        running.store(false, Ordering::Relaxed);
        let _ = load.join();
        let epochs = handle.epochs().await;
        let accepted = handle.metrics.accepted_counts();
        let rejected = handle.metrics.rejected_counts();
        let _ = stop.send(());
        let after: Vec<u64> = samples.iter().filter(|(t, _)| *t >= args.warm_up_s as f64).map(|s| s.1).collect();
        anyhow::ensure!(!after.is_empty(), "no memory samples after the warm-up");
        let (first, min, max) = (after[0], *after.iter().min().unwrap_or(&0), *after.iter().max().unwrap_or(&0));
        let last = *after.last().unwrap_or(&0);
        let mut total: Vec<f64> = epochs.iter().map(|e| e.total_ms).collect();
        total.sort_by(f64::total_cmp);
        let pct = |q: f64| total.get(((total.len().max(1) - 1) as f64 * q).round() as usize).copied();
        Ok::<_, anyhow::Error>(serde_json::json!({
            "jobs": args.jobs,
            "workers": args.workers,
            "reports_per_s_per_job": args.reports_per_s,
            "duration_s": args.duration_s,
            "warm_up_s": args.warm_up_s,
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
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

/// CPU seconds this process has used (Linux).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_s > 0).then(|| ticks as f64 / per_s as f64)
}

/// The scheduler (5 s epochs) holding `jobs` jobs of one report each: its CPU while nothing
/// happens, and its memory.
pub fn idle(args: BenchIdleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.jobs > 0 && args.measure_s > 0, "--jobs and --measure-s must be positive");
    let report = actix::System::new().block_on(async move {
        let rss_start = resident_bytes();
        let (handle, stop) = start_in_process(&args.server.nats, "benchidle", 5000).await?;
        let messages = encoded_reports(args.jobs as u64, args.jobs as u64, "benchidle")?;
        publish_from_another_thread(args.server.nats.clone(), messages).join().map_err(|_| anyhow::anyhow!("publisher panicked"))??;
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while handle.observed_points().await < args.jobs as u64 {
            anyhow::ensure!(std::time::Instant::now() < deadline, "the reports did not all land");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(Duration::from_secs(args.settle_s)).await;
        let cpu_before = cpu_seconds();
        tokio::time::sleep(Duration::from_secs(args.measure_s)).await;
        let cpu_after = cpu_seconds();
        let rss = resident_bytes();
        let epochs = handle.epochs().await;
        let _ = stop.send(());
        let idle_cpu_pct = match (cpu_before, cpu_after) {
            (Some(a), Some(b)) => Some(100.0 * (b - a) / args.measure_s as f64),
            _ => None,
        };
        Ok::<_, anyhow::Error>(serde_json::json!({
            "jobs": args.jobs,
            "idle_cpu_pct_of_one_core": idle_cpu_pct,
            "rss_bytes": rss,
            "rss_bytes_per_job": match (rss_start, rss) { (Some(a), Some(b)) => Some(b.saturating_sub(a) / args.jobs as u64), _ => None },
            "last_epoch_ms": epochs.last().map(|e| e.total_ms),
            "note": "this process runs the scheduler (state.mode auto: JetStream when the server has it) and, before the measurement, the load's client"
        }))
    })?;
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

/// `slaq bench placement`: the gap study and the time per decision at each of `--sizes`.
pub fn placement(args: BenchPlacementArgs) -> anyhow::Result<()> {
    use slaq::cluster::bench;
    anyhow::ensure!(args.cases > 0 && args.runs > 0, "--cases and --runs must be positive");
    let gaps = bench::gaps(args.cases, args.seed);
    let mut sizes = Vec::new();
    for &(jobs, machines) in &args.sizes {
        let (lp, greedy, lp_vs_greedy) = decision_times(jobs, machines, 4, args.runs);
        sizes.push(serde_json::json!({
            "jobs": jobs, "machines": machines, "slots": 4,
            "lp_rounding_ms": lp * 1e3,
            "greedy_ms": greedy * 1e3,
            "lp_cost_vs_greedy_pct": lp_vs_greedy,
        }));
    }
    let out = serde_json::json!({
        "cases": gaps.cases,
        "lp_rounding_gap_pct": gaps.lp_rounding_gap_pct,
        "greedy_gap_pct": gaps.greedy_gap_pct,
        "first_fit_gap_pct": gaps.first_fit_gap_pct,
        "random_gap_pct": gaps.random_gap_pct,
        "decision": sizes,
    });
    if args.out.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{} instances (4 machines x 4 slots, partly taken), gap to the optimum of the summed predicted step time:",
            gaps.cases
        );
        for (name, g) in [
            ("lp rounding", gaps.lp_rounding_gap_pct),
            ("greedy", gaps.greedy_gap_pct),
            ("first fit", gaps.first_fit_gap_pct),
            ("random", gaps.random_gap_pct),
        ] {
            println!("  {name:<12} mean {:>6.2}%  max {:>7.2}%", g.mean, g.max);
        }
        for s in &sizes {
            println!("{s}");
        }
    }
    Ok(())
}

/// Seconds per decision of the LP rounding and the greedy for `jobs` jobs (1 to 8 slots each)
/// on `machines` machines of `slots`, all free (median of `runs`), and the LP's cost against the
/// greedy's (percent).
fn decision_times(jobs: usize, machines: usize, slots: u32, runs: usize) -> (f64, f64, f64) {
    use rand::{RngExt, SeedableRng};
    use slaq::cluster::bench::fitted_models;
    use slaq::cluster::model::Shape;
    use slaq::cluster::place::{self, Layout};
    use std::time::Instant;
    let models = fitted_models();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let capacity = machines as u32 * slots;
    let mut demands: Vec<u32> = (0..jobs).map(|_| rng.random_range(1..=8)).collect();
    // Scale the demands to fill about 90% of the cluster.
    let total: u32 = demands.iter().sum();
    let target = (0.9 * f64::from(capacity)) as u32;
    for d in &mut demands {
        *d = ((u64::from(*d) * u64::from(target) / u64::from(total.max(1))) as u32).clamp(1, slots * 2);
    }
    while demands.iter().sum::<u32>() > capacity {
        if let Some(d) = demands.iter_mut().find(|d| **d > 1) {
            *d -= 1;
        }
    }
    let apps: Vec<usize> = (0..jobs).map(|j| j % models.len()).collect();
    let cost = |j: usize, counts: &[u32]| {
        let (p, b) = models[apps[j]];
        p.step(Shape::of(counts), b)
    };
    let free = vec![slots; machines];
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let time = |f: &mut dyn FnMut() -> Vec<Layout>| {
        let t = Instant::now();
        let out = f();
        (t.elapsed().as_secs_f64(), out)
    };
    let mut lp = Vec::new();
    let mut lp_cost = 0.0;
    let mut greedy = Vec::new();
    for _ in 0..runs.max(1) {
        let (t, out) = time(&mut || place::lp_rounding(&free, &demands, &cost, 8, &mut rng));
        lp_cost = place::total_cost(&out, &cost);
        lp.push(t);
        greedy.push(time(&mut || place::greedy(&free, &demands)).0);
    }
    let greedy_cost = place::total_cost(&place::greedy(&free, &demands), &cost);
    (median(lp), median(greedy), 100.0 * (lp_cost / greedy_cost - 1.0))
}

/// Bids of `jobs` fitted jobs (40 points of a real-looking curve each, as `bench epoch` feeds
/// them), then per run: encode each as a replica would, decode and tabulate it as the leader
/// would, and merge it into the leader's table.
pub fn merge(args: BenchMergeArgs) -> anyhow::Result<()> {
    use slaq::actors::bid::{Bid, job_model};
    use slaq::partition::Bids;
    use slaq::protocol::WireBid;
    use std::time::Instant;

    anyhow::ensure!(args.jobs > 0 && args.runs > 0, "sizes must be positive");
    let spec = protocol::JobSpec::new("j");
    let model = std::sync::Arc::new(job_model(&spec, &[], None));
    let bids: Vec<(String, Bid)> = (0..args.jobs)
        .map(|j| {
            let mut p = slaq::quality::JobPredictor::new(PredictorConfig::default());
            for iter in 1..=40u64 {
                let loss = 0.2 + (1.0 + (j % 7) as f64) / (iter as f64).powf(0.5 + (j % 5) as f64 * 0.2);
                let _ = p.observe(iter, loss);
                p.observe_time(1 + (iter % 4) as u32, 1.0 + (j % 3) as f64);
            }
            let gain = slaq::schedule::make_bid(&mut p, 60.0, 2.0, 4);
            let bid = Bid::new(&spec, model.clone(), &p, gain, 4);
            (format!("job{j}"), bid)
        })
        .collect();
    let (mut encode, mut decode, mut merge) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0;
    for _ in 0..args.runs {
        let t = Instant::now();
        let wire: Vec<(&str, Vec<u8>)> = bids
            .iter()
            .map(|(j, b)| rmp_serde::to_vec_named(&b.to_wire()).map(|v| (j.as_str(), v)))
            .collect::<Result<_, _>>()?;
        encode.push(t.elapsed().as_secs_f64() * 1e3);
        bytes = wire.iter().map(|w| w.1.len()).sum::<usize>();
        let t = Instant::now();
        let decoded: Vec<(&str, Bid)> = wire
            .iter()
            .map(|(j, v)| rmp_serde::from_slice::<WireBid>(v).map(|w| (*j, Bid::from_wire(w))))
            .collect::<Result<_, _>>()?;
        decode.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let mut table = Bids::default();
        for (j, b) in decoded {
            table.offer(j, 1, b);
        }
        merge.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(table.len() == args.jobs, "every bid merged");
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let report = serde_json::json!({
        "jobs": args.jobs,
        "runs": args.runs,
        "bytes_per_bid": bytes as f64 / args.jobs as f64,
        "bytes_total": bytes,
        "encode_ms": median(encode),
        "decode_and_tabulate_ms": median(decode),
        "merge_ms": median(merge),
        "note": "one thread; decode includes rebuilding each bid's gain table (64 evaluations)",
    });
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}
