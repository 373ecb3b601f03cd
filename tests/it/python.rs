//! Clients no one here wrote: Python jobs using the `slaq` client package
//! (`clients/python`, over `nats-py`) drive the scheduler. The test prepares its own virtual
//! environment under `target/` with the package installed, so `cargo test` needs nothing but
//! Python (with `venv`) and access to PyPI the first time.

use std::process::Command;
use std::time::Duration;

use crate::harness::{Background, NatsServer, Scheduler, client, eventually, fast_settings, wait_status};
use slaq::bus;
use slaq::protocol::{Ack, Encoding, Heartbeat, Subjects, WorkerSpec};

fn python_env() -> Option<std::path::PathBuf> {
    crate::pyenv::python_env("python-env", None)
}

fn output(mut cmd: Command) -> std::process::Output {
    cmd.output().expect("python runs")
}

/// Registers worker `id` and keeps it alive until the returned task is aborted.
async fn one_worker(url: &str, s: &Subjects, id: &str) -> Background {
    let c = client(url).await;
    let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None };
    let ack: Ack =
        bus::request(&c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok);
    let (s, id) = (s.clone(), id.to_string());
    Background::spawn(async move {
        loop {
            let hb = Heartbeat::new(&id);
            let _ = bus::publish(&c, s.worker_beat(&id), Encoding::MsgPack, &hb).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

#[tokio::test]
async fn the_python_client_package_passes_its_tests_against_the_scheduler() {
    let python = python_env().expect("these tests need Python 3 with venv (apt-get install -y python3-venv)");
    // JetStream on, so the package's durable reports have the scheduler's stream to go to.
    let nats = NatsServer::start_jetstream();
    // A short idle timeout: the package's keep-alive test waits past it without reports.
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("idle_job_timeout_ms = 3000\n"));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let worker = one_worker(&nats.url, &s, "pw1").await;
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "unittest", "discover", "-v", "-s", "tests"])
        .current_dir(crate::pyenv::PACKAGE)
        .env("SLAQ_TEST_NATS_URL", &nats.url);
    let out = tokio::task::spawn_blocking(move || output(cmd)).await.unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client package's tests failed:\n{log}");
    assert!(!log.contains("skipped"), "no test may be skipped here:\n{log}");
    let st = eventually(&c, &s, Duration::from_secs(20), "every job's reports and byes land", |st| {
        // 20 + 20 + 1 + 20 reports, the durable job's 10 (its re-send is dropped by the stream or
        // counted a duplicate by the job), and the squatted job's 3.
        st.accepted.get("loss") == Some(&74) && st.accepted.get("job_bye") == Some(&7)
    })
    .await;
    assert_eq!(st.rejected.get("invalid_spec"), Some(&1), "the refused hello: {:?}", st.rejected);
    assert!(st.rejected.get("duplicate").copied().unwrap_or(0) <= 1, "{:?}", st.rejected);
    // The squatter's message, kept by the stream under the job's id, is refused by the
    // scheduler; the job's own first report went in under a fresh id.
    assert_eq!(st.rejected.get("undecodable"), Some(&1), "{:?}", st.rejected);
    drop(worker);
}

#[tokio::test]
async fn the_example_job_runs_in_msgpack_and_json() {
    let python = python_env().expect("these tests need Python 3 with venv (apt-get install -y python3-venv)");
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/python_job.py");
    for (job, extra) in [("py-msgpack", None), ("py-json", Some("--json"))] {
        let mut cmd = Command::new(&python);
        cmd.args([script, "--nats", &nats.url, "--job", job, "--iters", "25"]);
        cmd.args(extra);
        let out = tokio::task::spawn_blocking(move || output(cmd)).await.unwrap();
        assert!(out.status.success(), "the example job failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let st = eventually(&c, &s, Duration::from_secs(20), "both jobs' reports and byes land", |st| {
        st.accepted.get("loss") == Some(&50) && st.accepted.get("job_bye") == Some(&2)
    })
    .await;
    assert!(st.rejected.is_empty(), "{:?}", st.rejected);
    assert_eq!(st.accepted.get("job_hello"), Some(&2));
}

/// The nats-server on PATH answers `$SYS.REQ.USER.INFO` from 2.10 on.
fn server_answers_user_info() -> bool {
    let out = Command::new("nats-server").arg("--version").output().expect("nats-server --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.trim().rsplit('v').next().unwrap_or("");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 10)
}

/// Issue #43: a team's job named `NAME` alone takes its tenant from its NATS user's
/// permissions (the subjects it may publish on), under the shipped auth configuration: the
/// scheduler sees `team-a.train` of tenant team-a, and the user never repeated its tenant. A
/// server that cannot say (before 2.10, and no credentials file) leaves the id as given, and
/// the server refuses it: that is the fallback, asserted too.
#[tokio::test]
async fn a_teams_job_named_alone_takes_its_tenant_from_its_credentials() {
    let python = python_env().expect("these tests need Python 3 with venv (apt-get install -y python3-venv)");
    let conf = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/nats/slaq-auth.conf"));
    let nats = NatsServer::start_with_config(conf);
    let settings = fast_settings(&format!(
        "{}[tenants.team-a]\nguaranteed = 1\n[tenants.team-b]\nguaranteed = 1\n",
        crate::holes::SCHEDULER_AUTH
    ));
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();
    let (operator, _) = crate::security::connect_as(&nats.url, "operator").await;
    wait_status(&operator, &s).await;
    let script = r#"
import asyncio, sys
from slaq.aio import AsyncJob
async def main(url):
    options = {"user": "team-a", "password": "team-a-example-password", "inbox_prefix": "_INBOX.team-a"}
    try:
        job = await AsyncJob.connect("train", nats=url, hello_timeout=3.0, connect_options=options)
    except Exception as e:
        print(f"refused {type(e).__name__}")
        return
    print(f"job {job.job}")
    for i in range(1, 4):
        await job.report(i, 1.0 / i, 0.1, 1)
    await job.bye()
    await job.close()
asyncio.run(main(sys.argv[1]))
"#;
    let mut cmd = Command::new(&python);
    cmd.args(["-c", script, &nats.url]);
    let out = tokio::task::spawn_blocking(move || output(cmd)).await.unwrap();
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    if !server_answers_user_info() {
        assert!(said.starts_with("refused"), "a server that cannot say: the id stays and is refused: {said}");
        return;
    }
    assert_eq!(said, "job team-a.train");
    let st = eventually(&operator, &s, Duration::from_secs(15), "team A's job, its reports and its bye", |st| {
        st.accepted.get("loss") == Some(&3) && st.accepted.get("job_bye") == Some(&1)
    })
    .await;
    assert_eq!(st.rejected.get("unknown_tenant"), None, "{:?}", st.rejected);
}
