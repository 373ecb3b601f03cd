//! Real processes for integration tests: a private `nats-server` on a free loopback port and
//! `slaq serve` as a child, both killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use slaq::bus;
use slaq::protocol::{Encoding, StatusSnapshot, Subjects};

/// A child process (an agent, a submission) killed and reaped on drop, so that a failing test
/// leaves nothing running.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A test's own directory under the system's temporary one (`slaq-it-<tag>-…`): removed when
/// dropped, or kept and named on stderr when the test is failing, for a look at its logs.
/// Declared before the processes that write into it, it outlives them.
pub struct TestDir(Option<tempfile::TempDir>);

pub fn temp_dir(tag: &str) -> TestDir {
    let dir = tempfile::Builder::new().prefix(&format!("slaq-it-{tag}-")).tempdir().expect("temp dir");
    TestDir(Some(dir))
}

impl TestDir {
    /// The directory, no longer removed on drop: for an owner that removes it itself.
    pub fn keep(mut self) -> PathBuf {
        self.0.take().expect("a test dir is kept once").keep()
    }
}

impl std::ops::Deref for TestDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.as_ref().expect("a test dir is kept once").path()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!("kept the failed test's directory {}", dir.keep().display());
        }
    }
}

pub struct NatsServer {
    child: Child,
    pub url: String,
    port: u16,
    dir: PathBuf,
    /// The configuration file it was started with, if any (used again by `start_again`).
    config: Option<PathBuf>,
}

impl NatsServer {
    pub fn start() -> NatsServer {
        Self::start_on(temp_dir("nats").keep(), None, None)
    }

    /// A server with JetStream (file storage in its own directory).
    pub fn start_jetstream() -> NatsServer {
        Self::start_on(temp_dir("nats").keep(), None, Some(Path::new("")))
    }

    /// A server with a configuration file (accounts, permissions) and JetStream; address and
    /// port are still loopback and free.
    pub fn start_with_config(config: &Path) -> NatsServer {
        Self::start_on(temp_dir("nats").keep(), None, Some(config))
    }

    fn start_on(dir: PathBuf, port: Option<u16>, config: Option<&Path>) -> NatsServer {
        let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
        let mut cmd = Command::new("nats-server");
        if let Some(config) = config {
            if !config.as_os_str().is_empty() {
                cmd.arg("-c").arg(config);
            }
            cmd.arg("-js").arg("-sd").arg(dir.join("jetstream"));
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("server.log")).expect("log");
        let child = cmd
            .args(["-a", "127.0.0.1", "-p", &port_arg, "--ports_file_dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nats-server must be installed (apt-get install -y nats-server)");
        let url = wait_for_ports_file(&dir, child.id());
        let port = url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port in the URL");
        let config = config.filter(|c| !c.as_os_str().is_empty()).map(Path::to_path_buf);
        NatsServer { child, url, port, dir, config }
    }

    /// `n` servers forming one cluster, each with JetStream in its own directory, on loopback:
    /// free client ports, and route ports picked free before they start.
    pub fn start_cluster(n: usize) -> Vec<NatsServer> {
        let routes: Vec<u16> = (0..n).map(|_| free_port()).collect();
        (0..n)
            .map(|i| {
                let dir = temp_dir("nats-cluster").keep();
                let config = dir.join("node.conf");
                let others: Vec<String> = routes
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, p)| format!("\"nats-route://127.0.0.1:{p}\""))
                    .collect();
                let text = format!(
                    "server_name: n{i}\ncluster {{\n  name: slaq-test\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n",
                    routes[i],
                    others.join(", ")
                );
                std::fs::write(&config, text).expect("node config");
                Self::start_on(dir, None, Some(&config))
            })
            .collect()
    }

    /// Kills the server (an outage).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again after [`Self::stop`], on the same port and with the same data
    /// (JetStream's files survive, as on a real server's restart).
    pub fn start_again(&mut self, jetstream: bool) {
        let marker = PathBuf::new();
        let config = self.config.clone().unwrap_or(marker);
        let fresh = Self::start_on(self.dir.clone(), Some(self.port), jetstream.then_some(config.as_path()));
        let old = std::mem::replace(self, fresh);
        std::mem::forget(old);
    }

    /// Kills the server (a fault) and starts a new one on the same port.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("dir");
        let fresh = Self::start_on(self.dir.clone(), Some(self.port), None);
        let old = std::mem::replace(self, fresh);
        // The old server is dead and its directory is the new one's: skip its Drop.
        std::mem::forget(old);
    }
}

fn wait_for_ports_file(dir: &Path, pid: u32) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let file = dir.join(format!("nats-server_{pid}.ports"));
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let ports: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if let Some(url) = ports["nats"][0].as_str() {
            return url.to_string();
        }
        assert!(Instant::now() < deadline, "nats-server did not write its ports file in {}", dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Kept for a look at its log when the test fails, or always with SLAQ_KEEP_NATS=1.
        if !std::thread::panicking() && std::env::var_os("SLAQ_KEEP_NATS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `slaq serve` as a child process.
pub struct Scheduler {
    child: Child,
    pub log: PathBuf,
    /// The test stopped it: its exit is expected.
    stopped: bool,
    /// Its configuration and log (dropped after the process is killed).
    _dir: TestDir,
}

impl Scheduler {
    /// Starts `slaq serve` with `settings` (TOML) against `url`.
    pub fn start(url: &str, settings: &str) -> Scheduler {
        Self::start_with_env(url, settings, &[])
    }

    /// Starts `slaq serve` with extra environment variables (e.g. `RUST_LOG`).
    pub fn start_with_env(url: &str, settings: &str, env: &[(&str, &str)]) -> Scheduler {
        let dir = temp_dir("serve");
        let config = dir.join("slaq.toml");
        std::fs::write(&config, settings).expect("config");
        let log = dir.join("serve.log");
        let mut cmd = Command::new(slaq_bin());
        cmd.args(["serve", "--nats", url, "--config"]).arg(&config).env("RUST_LOG", "slaq=debug");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("slaq serve starts");
        Scheduler { child, log, stopped: false, _dir: dir }
    }

    /// Stops the process where it is (SIGSTOP): it holds its connections and state, and does
    /// nothing until [`Self::resume`].
    pub fn pause(&self) {
        let _ = Command::new("kill").args(["-STOP", &self.child.id().to_string()]).status();
    }

    /// Sends SIGHUP: `slaq serve` reloads `[tenants]` from its configuration file
    /// ([`Self::config_path`]).
    pub fn hangup(&self) {
        let _ = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status();
    }

    /// The configuration file it was started with.
    pub fn config_path(&self) -> PathBuf {
        self.log.with_file_name("slaq.toml")
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills the process outright (SIGKILL): nothing is flushed or saved.
    pub fn kill(mut self) {
        self.check();
        self.stopped = true;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `within` for the process to end on its own (a refusal to start); its exit
    /// status, or `None` if it still runs.
    pub fn exits_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        self.stopped = true;
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.check();
        self.stopped = true;
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "slaq serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Scheduler {
    /// Fails the test if the process ended on its own (it should run until the test stops it)
    /// or logged a panic (a task of it failed).
    fn check(&mut self) {
        if std::thread::panicking() || self.stopped {
            return;
        }
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("slaq serve exited on its own ({status}); its log ends:\n{}", tail(&self.log_text(), 40));
        }
        let log = self.log_text();
        if log.contains("panicked at") {
            panic!("slaq serve panicked; its log ends:\n{}", tail(&log, 60));
        }
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.check();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A task a test runs beside it (heartbeats, load): aborted when dropped, and failing the test
/// if it panicked meanwhile (a failed `unwrap` in it is not lost).
pub struct Background(Option<tokio::task::JoinHandle<()>>);

impl Background {
    pub fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> Background {
        Background(Some(tokio::spawn(task)))
    }

    /// Waits for the task to finish by itself, and fails the test if it panicked.
    pub async fn join(mut self) {
        if let Some(handle) = self.0.take()
            && let Err(e) = handle.await
        {
            panic!("a background task of this test failed: {e}");
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        use futures_util::FutureExt;
        let Some(handle) = self.0.take() else { return };
        if !handle.is_finished() {
            handle.abort();
            return;
        }
        if let Some(Err(e)) = handle.now_or_never()
            && !std::thread::panicking()
        {
            panic!("a background task of this test failed: {e}");
        }
    }
}

pub async fn client(url: &str) -> async_nats::Client {
    bus::connect(&[url.to_string()], "slaq-test", 65_536).await.expect("connect").0
}

/// Asks for status until the scheduler answers (it may still be starting).
pub async fn wait_status(client: &async_nats::Client, subjects: &Subjects) -> StatusSnapshot {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match bus::request(client, subjects.ctl_status(), Encoding::MsgPack, &(), Duration::from_millis(500)).await {
            Ok(s) => return s,
            Err(e) => assert!(Instant::now() < deadline, "scheduler never answered status: {e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` on status snapshots until it holds (or panics with the last snapshot).
pub async fn eventually(
    client: &async_nats::Client,
    subjects: &Subjects,
    timeout: Duration,
    what: &str,
    check: impl Fn(&StatusSnapshot) -> bool,
) -> StatusSnapshot {
    let deadline = Instant::now() + timeout;
    loop {
        let s = wait_status(client, subjects).await;
        if check(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: never happened; {}; last status {s:#?}", summary(&s));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A status in one line (a failed wait's message leads with it: a CI log keeps its ends).
fn summary(s: &StatusSnapshot) -> String {
    let points = s.jobs.iter().map(|j| j.points);
    let assigned = s.workers.iter().filter(|w| w.job.is_some()).count();
    format!(
        "epoch {}, {} jobs (points {:?}..{:?}), {} workers ({assigned} assigned), truncated {}",
        s.epoch,
        s.num_jobs,
        points.clone().min(),
        points.max(),
        s.num_workers,
        s.truncated
    )
}

/// Settings for a fast test scheduler.
pub fn fast_settings(extra: &str) -> String {
    format!("[scheduler]\nepoch_ms = 100\nworker_timeout_ms = 1500\nrefit_interval_ms = 20\n{extra}")
}

/// `slaq serve`'s `service::run` on a thread of this test process (its own actix System), for
/// tests that do not need a separate process. Stopped (gracefully) on drop.
pub struct InProcessScheduler {
    pub handle: slaq::service::ServiceHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcessScheduler {
    pub fn start(url: &str, settings: &str) -> InProcessScheduler {
        Self::start_fenced(url, settings, slaq::bus::lease::Fence::unfenced())
    }

    /// Started under `fence`, which the test opens and closes as a replica's lease would.
    pub fn start_fenced(url: &str, settings: &str, fence: slaq::bus::lease::Fence) -> InProcessScheduler {
        use slaq::service::{Overrides, RawConfig};
        let raw: RawConfig = toml::from_str(settings).expect("settings");
        let overrides = Overrides { nats: vec![url.to_string()], ..Overrides::default() };
        let mut config = raw.resolve(&Default::default(), &overrides).expect("valid settings");
        config.fence = fence;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix::System::new().block_on(async move {
                let (client, counters) =
                    bus::connect(&config.nats_urls, "slaq-in-process", 65_536).await.expect("connect");
                let shutdown = async move {
                    let _ = stop_rx.await;
                };
                let clients = slaq::service::Connections::single(client, counters);
                slaq::service::run(clients, config, shutdown, move |h| {
                    let _ = ready_tx.send(h);
                })
                .await
                .expect("the scheduler runs");
            });
        });
        let handle = ready_rx.recv_timeout(Duration::from_secs(20)).expect("the in-process scheduler starts");
        InProcessScheduler { handle, stop: Some(stop_tx), thread: Some(thread) }
    }
}

impl Drop for InProcessScheduler {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The scheduler's panic or error (it `expect`s its own success) fails the test.
        if let Some(thread) = self.thread.take()
            && let Err(panic) = thread.join()
            && !std::thread::panicking()
        {
            std::panic::resume_unwind(panic);
        }
    }
}

/// A loopback port that was free a moment ago (for a child process's listener).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A loss report of a job whose loss falls as 1/iter, on one worker at 0.1 s an iteration.
pub fn loss_report(job: &str, iter: u64) -> slaq::protocol::LossReport<'_> {
    slaq::protocol::LossReport::new(job, iter, 1.0 / iter as f64, 0.1, 1)
}

/// Polls a file until `check` holds on its text (or panics with the text after 20 s).
pub async fn wait_for_file(path: &Path, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if check(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what}: never happened; the file has {text:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The workers saved in a state bucket's shards (`workers.<s>`), by id, from the bucket's
/// values by key.
pub fn saved_workers(
    state: &std::collections::BTreeMap<String, bytes::Bytes>,
) -> std::collections::BTreeMap<String, slaq::bus::durable::SavedWorker> {
    state
        .iter()
        .filter(|(k, _)| k.starts_with("workers."))
        .flat_map(|(k, v)| slaq::bus::durable::decode_worker_shard(v).unwrap_or_else(|| panic!("{k} does not decode")))
        .map(|w| (w.spec.worker.clone(), w))
        .collect()
}

/// The version of the `nats-server` on the PATH, as the tests' figures name it.
pub fn nats_version() -> String {
    Command::new("nats-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "an unknown nats-server".into())
}

/// The `slaq` binary the tests run: this build's, or `SLAQ_BIN` (to run a regression test
/// against an earlier build and see it fail).
pub fn slaq_bin() -> std::path::PathBuf {
    std::env::var_os("SLAQ_BIN").map_or_else(|| env!("CARGO_BIN_EXE_slaq").into(), Into::into)
}

/// Heartbeats every 200 ms for each `(client, worker id)`, until dropped.
pub fn beat(workers: Vec<(async_nats::Client, &'static str)>, subjects: &Subjects) -> Background {
    let s = subjects.clone();
    Background::spawn(async move {
        loop {
            for (c, id) in &workers {
                let beat = slaq::protocol::Heartbeat::new(id);
                let _ = bus::publish(c, s.worker_beat(id), Encoding::MsgPack, &beat).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}
