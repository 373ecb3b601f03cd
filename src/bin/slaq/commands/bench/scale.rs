//! `slaq bench scale`: what the allocator's epoch costs as the cluster grows at a fixed churn
//! (issue #44). The core alone, as the allocator actor calls it (`Allocator::epoch` with the
//! default settings), no bus: the jobs' bids come from predictors fitted on the public curves
//! (as `cargo bench --bench core -- allocator` makes them), and before each epoch the same
//! number of jobs, whatever the size, send a new bid. Memory is this process's resident set,
//! which holds the allocator and nothing else of size.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use slaq::actors::allocator::{Allocator, Input, thread_cpu};
use slaq::actors::bid::{Bid, job_model};
use slaq::protocol::{JobSpec, WorkerSpec};
use slaq::quality::{JobPredictor, PredictorConfig};
use slaq::service::{Overrides, RawConfig, allocator_settings};
use slaq::sim::curves::fixtures;

use super::support::{BenchOutput, resident_bytes};

/// Epochs at most before measuring, if the layout never stops moving.
const MAX_SETTLE: usize = 200;

#[derive(clap::Args)]
pub(crate) struct BenchScaleArgs {
    /// Cluster sizes in workers, comma-separated (each run in turn, smallest first).
    #[arg(long, value_delimiter = ',', default_value = "16000,64000,256000,1000000")]
    pub(crate) workers: Vec<u32>,
    /// Workers per job: each size runs `workers / workers_per_job` jobs (the design card's
    /// 16,000 workers for 4,000 jobs is 4).
    #[arg(long, default_value_t = 4)]
    pub(crate) workers_per_job: u32,
    /// The same number of jobs at every size instead (`--workers-per-job` is then unused): what
    /// the workers alone cost the epoch.
    #[arg(long)]
    pub(crate) jobs: Option<u32>,
    /// Jobs that send a new bid before each epoch, the same at every size.
    #[arg(long, default_value_t = 40)]
    pub(crate) churn: usize,
    /// Epochs measured per size (after those that settle the layout: until one moves no
    /// worker, at most 200).
    #[arg(long, default_value_t = 20)]
    pub(crate) epochs: usize,
    /// JSON-lines curves the bids' predictors are fitted on.
    #[arg(long, default_value = "data/curves/curves-public.jsonl")]
    pub(crate) curves: PathBuf,
    /// Draw the epoch's time against the workers (SVG) here.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

pub(crate) fn run(args: BenchScaleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.workers_per_job > 0 && args.epochs > 0, "sizes must be positive");
    anyhow::ensure!(args.jobs != Some(0), "--jobs must be positive");
    anyhow::ensure!(args.workers.iter().all(|&w| jobs_at(&args, w) > 0), "every size needs a job");
    let curves = slaq::trace::load_curves(&args.curves)?;
    let templates = fixtures::predictor_templates(&curves, PredictorConfig::default());
    anyhow::ensure!(!templates.is_empty(), "no curve to fit the bids on");
    let config = RawConfig::default().resolve(&Default::default(), &Overrides::default())?;
    let mut sizes = args.workers.clone();
    sizes.sort_unstable();
    let mut rows = Vec::new();
    for workers in sizes {
        let row = measure(&args, &templates, &config, workers)?;
        eprintln!("{row}");
        rows.push(row);
    }
    if let Some(path) = &args.plot {
        plot(path, &rows, &args)?;
    }
    let report = serde_json::json!({
        "workers_per_job": if args.jobs.is_some() { None } else { Some(args.workers_per_job) },
        "jobs_fixed": args.jobs,
        "churn_bids_per_epoch": args.churn,
        "epochs": args.epochs,
        "sizes": rows,
        "note": "the allocator's epoch alone (no bus); wall and this thread's CPU per epoch; \
                 RSS of this process (the allocator, its jobs and workers)",
    });
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}

/// The jobs run at a size of `workers`.
fn jobs_at(args: &BenchScaleArgs, workers: u32) -> usize {
    args.jobs.unwrap_or(workers / args.workers_per_job) as usize
}

/// One size: workers say hello, jobs bid, the layout settles, then `epochs` epochs, each after
/// `churn` new bids, a configured epoch apart.
fn measure(
    args: &BenchScaleArgs,
    templates: &[JobPredictor],
    config: &slaq::service::ServeConfig,
    workers: u32,
) -> anyhow::Result<serde_json::Value> {
    let jobs = jobs_at(args, workers);
    // The workers' names, before the memory baseline: they are the bench's, not the allocator's.
    let ids: Vec<String> = (0..workers).map(|w| format!("w{w:07}")).collect();
    let rss_start = resident_bytes();
    let mut a = Allocator::new(allocator_settings(config, None), false);
    for id in &ids {
        let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None, advertise: None };
        a.handle(0.0, Input::WorkerHello(spec));
    }
    let rss_workers = resident_bytes();
    let bid = |j: usize, points: u64| {
        let spec = JobSpec::new(&format!("job{j:06}"));
        let mut p = templates[j % templates.len()].clone();
        let gain = slaq::schedule::make_bid(&mut p, 60.0, 1.0, 0);
        let mut bid = Bid::new(&spec, Arc::new(job_model(&spec, &[], None)), &p, gain, 0);
        bid.points += points;
        (spec.job, bid)
    };
    for j in 0..jobs {
        let (job, b) = bid(j, 0);
        a.handle(0.0, Input::JobStarted { job: job.clone(), local: true, command: None });
        a.handle(0.0, Input::Bid { job, bid: b });
    }
    let rss_jobs = resident_bytes();
    let epoch_s = a.settings().epoch.as_secs_f64();
    let (settle, mut now_s) = settle(&mut a, &ids, epoch_s);
    let (mut wall, mut cpu, mut moved, mut assigned) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut next = 0;
    for e in 0..args.epochs {
        beat(&mut a, &ids, now_s);
        for _ in 0..args.churn.min(jobs) {
            let (job, b) = bid(next, e as u64 + 1);
            a.handle(now_s, Input::Bid { job, bid: b });
            next = (next + 1) % jobs;
        }
        let (started, cpu_started) = (Instant::now(), thread_cpu());
        let out = a.epoch(now_s, true, &|| 0.0);
        wall.push(started.elapsed().as_secs_f64() * 1e3);
        cpu.extend(cpu_started.zip(thread_cpu()).map(|(a, b)| b.saturating_sub(a).as_secs_f64() * 1e3));
        moved.push(out.summary.workers_moved as f64);
        assigned.push(out.summary.workers_assigned as f64);
        anyhow::ensure!(
            out.summary.num_workers == workers as usize,
            "a worker was lost: the epoch measured is not this size"
        );
        now_s += epoch_s;
    }
    let rss_end = resident_bytes();
    let per = |a: Option<u64>, b: Option<u64>, n: usize| a.zip(b).map(|(a, b)| b.saturating_sub(a) / n.max(1) as u64);
    Ok(serde_json::json!({
        "workers": workers,
        "jobs": jobs,
        "settle_epochs": settle,
        "epoch_p50_ms": pct(&wall, 0.5),
        "epoch_p99_ms": pct(&wall, 0.99),
        "epoch_cpu_p50_ms": pct(&cpu, 0.5),
        "epoch_cpu_max_ms": pct(&cpu, 1.0),
        "workers_moved_p50": pct(&moved, 0.5),
        "workers_assigned_p50": pct(&assigned, 0.5),
        "rss_bytes": rss_end,
        "rss_bytes_per_worker": per(rss_start, rss_workers, workers as usize),
        "rss_bytes_per_job": per(rss_workers, rss_jobs, jobs),
    }))
}

/// Every worker's heartbeat, between two epochs as on a live cluster (not timed): without them
/// the workers expire after `worker_timeout` and the epochs measured are of an empty cluster.
fn beat(a: &mut Allocator, ids: &[String], now_s: f64) {
    for id in ids {
        a.handle(now_s, Input::WorkerBeat { worker: id.clone(), running: None });
    }
}

/// Epochs `epoch_s` apart, every worker beating, until one moves no worker: the first ones
/// reshuffle (the fair clocks and ledgers start empty), which is not the steady state measured.
/// Returns the epochs run and the time of the next.
fn settle(a: &mut Allocator, ids: &[String], epoch_s: f64) -> (usize, f64) {
    let mut now_s = epoch_s;
    for settle in 1..=MAX_SETTLE {
        beat(a, ids, now_s);
        let moved = a.epoch(now_s, true, &|| 0.0).summary.workers_moved;
        now_s += epoch_s;
        if moved == 0 && settle > 1 {
            return (settle, now_s);
        }
    }
    (MAX_SETTLE, now_s)
}

/// The `q` quantile of `v` (nearest rank); 0 for none.
fn pct(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(0.0)
}

fn plot(path: &std::path::Path, rows: &[serde_json::Value], args: &BenchScaleArgs) -> anyhow::Result<()> {
    let line = |key: &str| -> Vec<(f64, f64)> {
        rows.iter().filter_map(|r| Some((r["workers"].as_f64()? / 1000.0, r[key].as_f64()?))).collect()
    };
    let lines = vec![
        ("epoch p50 (wall)".to_string(), line("epoch_p50_ms")),
        ("epoch p99 (wall)".to_string(), line("epoch_p99_ms")),
        ("epoch CPU p50".to_string(), line("epoch_cpu_p50_ms")),
    ];
    let jobs = match args.jobs {
        Some(jobs) => format!("{jobs} jobs at every size"),
        None => format!("{} workers per job", args.workers_per_job),
    };
    let title = format!("The allocator's epoch against workers ({jobs}, {} new bids per epoch)", args.churn);
    slaq::sim::curves::report::plot_lines(path, &title, "workers (thousands)", "ms per epoch", &lines)
        .map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))
}
