//! What the benchmarks share: how they print (`BenchOutput`) and which server they run
//! against (`BenchServer`); for those of the live scheduler, the scheduler in this process,
//! reports encoded and published from another thread, and this process's memory and CPU.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use slaq::bus;
use slaq::protocol::{self, Encoding, Subjects};
use slaq::service::{self, Overrides, RawConfig};
use tracing::warn;

/// How every benchmark prints its figures.
#[derive(clap::Args)]
pub(crate) struct BenchOutput {
    /// One JSON object instead of the readable report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The NATS server a benchmark of the live scheduler runs against (`-js` for durable state).
#[derive(clap::Args)]
pub(crate) struct BenchServer {
    #[arg(long, value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats: Vec<String>,
}

/// Resident set size of this process in bytes (Linux), for memory figures.
pub(super) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU seconds this process has used (Linux).
pub(super) fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_s > 0).then(|| ticks as f64 / per_s as f64)
}

/// A subject prefix of this run's own (`base`, this process's id and the time): a scheduler
/// started on it against a JetStream server finds no stream or bucket of an earlier run, whose
/// jobs it would otherwise restore and whose reports it would replay.
pub(super) fn run_prefix(base: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{base}{}x{nanos}", std::process::id())
}

/// Removes the reports stream and the state bucket a scheduler on `prefix` made (nothing
/// without JetStream): a benchmark leaves no state behind on the server.
pub(super) async fn remove_state(urls: &[String], prefix: &str) {
    let Ok((client, _)) = bus::connect(urls, "bench-cleanup", 16).await else { return };
    let js = async_nats::jetstream::new(client);
    let streams = [bus::provision::stream_name(prefix), format!("KV_{}", bus::provision::bucket_name(prefix))];
    for stream in streams {
        // Absent without JetStream, or if the run never made it: nothing to remove.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), js.delete_stream(&stream)).await;
    }
}

/// A scheduler running in this process, on a prefix of its own run.
pub(super) struct InProcess {
    pub(super) handle: service::ServiceHandle,
    /// This run's subject prefix ([`run_prefix`]).
    pub(super) prefix: String,
    stop: tokio::sync::oneshot::Sender<()>,
    urls: Vec<String>,
}

impl InProcess {
    /// Stops the scheduler and removes the state it made on the server.
    pub(super) async fn finish(self) {
        let _ = self.stop.send(());
        remove_state(&self.urls, &self.prefix).await;
    }
}

/// Starts the scheduler in this process (inside the running actix System) on a prefix of this
/// run's own, made from `base`.
pub(super) async fn start_in_process(urls: &[String], base: &str, epoch_ms: u64) -> anyhow::Result<InProcess> {
    start_serving(urls, base, epoch_ms, None).await
}

/// [`start_in_process`], with the HTTP listener (the page) on `http` if given.
pub(super) async fn start_serving(
    urls: &[String],
    base: &str,
    epoch_ms: u64,
    http: Option<&str>,
) -> anyhow::Result<InProcess> {
    let prefix = run_prefix(base);
    let mut raw = RawConfig::default();
    raw.http.listen = http.unwrap_or("").to_string();
    raw.scheduler.epoch_ms = epoch_ms;
    raw.scheduler.worker_timeout_ms = 600_000;
    raw.scheduler.job_mailbox = 1 << 16;
    raw.scheduler.max_jobs = 1 << 20;
    if let Ok(threads) = std::env::var("SLAQ_BENCH_JOB_THREADS") {
        raw.scheduler.job_threads = threads.parse().context("SLAQ_BENCH_JOB_THREADS")?;
    }
    let overrides = Overrides { nats: urls.to_vec(), prefix: Some(prefix.clone()), ..Overrides::default() };
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
    Ok(InProcess { handle, prefix, stop: stop_tx, urls: urls.to_vec() })
}

/// GET `path` from `addr`, on a blocking thread (not the scheduler's): the status, the body's
/// bytes, and the milliseconds to the last byte. The benchmarks' page client.
pub(super) async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, usize, f64)> {
    let url = format!("http://{addr}{path}");
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let started = std::time::Instant::now();
        let mut response = agent.get(&url).call()?;
        let bytes = response.body_mut().with_config().limit(64 << 20).read_to_vec()?.len();
        Ok((response.status().as_u16(), bytes, started.elapsed().as_secs_f64() * 1e3))
    })
    .await?
}

/// The `q` quantile of `v` (nearest rank); NaN for none.
pub(super) fn pct(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(f64::NAN)
}

pub(super) fn encoded_reports(jobs: u64, reports: u64, prefix: &str) -> anyhow::Result<Vec<(String, bytes::Bytes)>> {
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
/// the measured process's thread). Its connection stays open until [`Publishing::join`]: a
/// nats-server (2.9.10 here) dropped most of a burst into a stream whose publisher disconnected
/// right after its last message, which a job that stays connected never sees.
pub(super) fn publish_from_another_thread(urls: Vec<String>, messages: Vec<(String, bytes::Bytes)>) -> Publishing {
    let published = Arc::new(AtomicBool::new(false));
    let (release, released) = std::sync::mpsc::channel::<()>();
    let done = published.clone();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let sent = runtime.block_on(async move {
            let (client, _) = bus::connect(&urls, "bench-publisher", 1024).await?;
            for (subject, payload) in messages {
                client.publish(subject, payload).await?;
            }
            client.flush().await?;
            Ok::<_, anyhow::Error>(client)
        });
        done.store(true, Ordering::Release);
        let client = sent?;
        let _ = released.recv();
        drop(client);
        Ok(())
    });
    Publishing { thread, published, release }
}

/// A publisher thread ([`publish_from_another_thread`]).
pub(super) struct Publishing {
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
    published: Arc<AtomicBool>,
    release: std::sync::mpsc::Sender<()>,
}

impl Publishing {
    /// Whether the server has every message (or the publisher gave up).
    pub(super) fn published(&self) -> bool {
        self.published.load(Ordering::Acquire) || self.thread.is_finished()
    }

    /// Lets the connection go and waits for the thread: whether it published everything.
    pub(super) fn join(self) -> anyhow::Result<()> {
        let _ = self.release.send(());
        self.thread.join().map_err(|_| anyhow::anyhow!("publisher thread panicked"))?
    }
}
