//! A client no one here wrote: a Python job using the `nats-py` package drives the scheduler.

use std::process::Command;
use std::time::Duration;

use crate::harness::{NatsServer, Scheduler, client, eventually, fast_settings, wait_status};
use slaq::protocol::Subjects;

fn python() -> Option<&'static str> {
    ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
}

#[tokio::test]
async fn a_python_job_using_nats_py_registers_and_reports() {
    let Some(python) = python() else {
        eprintln!("SKIPPED: no Python interpreter on this machine");
        return;
    };
    let nats = NatsServer::start();
    // Keep the job after its bye long enough to look at it: the job ends by itself, so check
    // the scheduler's counters rather than its job table.
    let _scheduler = Scheduler::start(&nats.url, &fast_settings(""));
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/python_job.py");
    for (job, extra) in [("py-msgpack", None), ("py-json", Some("--json"))] {
        let mut cmd = Command::new(python);
        cmd.args([script, "--nats", &nats.url, "--job", job, "--iters", "25"]);
        cmd.args(extra);
        let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().expect("python runs");
        assert!(
            out.status.success(),
            "the Python job failed (CI installs nats-py and msgpack with pip): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let st = eventually(&c, &s, Duration::from_secs(20), "both Python jobs' reports and byes land", |st| {
        st.accepted.get("loss") == Some(&50) && st.accepted.get("job_bye") == Some(&2)
    })
    .await;
    assert!(st.rejected.is_empty(), "{:?}", st.rejected);
    assert_eq!(st.accepted.get("job_hello"), Some(&2));
}
