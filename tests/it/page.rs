//! The page (issue #45) in a real browser: `slaq serve` with `[http] listen` and a token, jobs
//! and workers over real NATS, then headless Chromium (Debian's `chromium`; `.ci/run` installs
//! it) loads the page. Its DOM must hold every job of the status snapshot and, for the chosen
//! job, a chart drawn with as many points as the job's history; a screenshot is written under
//! `target/` and checked not blank. The JSON's bad input gets a clear 4xx, and clients that
//! never finish a request hold nothing up.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use slaq::bus;
use slaq::protocol::{Encoding, JobSpec, Subjects};

use crate::harness::{
    NatsServer, Scheduler, beat, client, eventually, fast_settings, free_port, loss_report, temp_dir, wait_status,
};

const TOKEN: &str = "page-test-token";

/// GET `url` with `token` as a bearer token, if any: status and body.
fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut request = agent.get(url);
    if let Some(token) = token {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    let mut response = request.call().expect("the listener answers");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("a body"))
}

async fn get_async(url: String, token: Option<&'static str>) -> (u16, String) {
    tokio::task::spawn_blocking(move || get(&url, token)).await.expect("join")
}

/// Debian's Chromium (or `SLAQ_CHROMIUM`): never skipped, `.ci/run` installs it.
fn chromium() -> PathBuf {
    if let Ok(path) = std::env::var("SLAQ_CHROMIUM") {
        return path.into();
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let out = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().ok()?;
            let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
            (!path.is_empty()).then(|| PathBuf::from(path))
        })
        .expect("headless Chromium (apt-get install -y chromium; .ci/run installs it)")
}

/// Runs headless Chromium on `url` with `extra` arguments (after the page has run its polls for
/// a few seconds of virtual time); its stdout.
fn headless(url: &str, profile: &Path, extra: &[&str]) -> String {
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=8000", "--window-size=1400,1100"])
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of attribute `name` on the element whose id is `id`, in serialised HTML.
fn attribute(dom: &str, id: &str, name: &str) -> Option<String> {
    let start = dom.find(&format!("id=\"{id}\""))?;
    let tag_start = dom[..start].rfind('<')?;
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>')?];
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(tag[at..at + tag[at..].find('"')?].to_string())
}

/// Distinct colours in a PNG, and the share of its pixels that are not the most common one.
fn colours(path: &Path) -> (usize, f64) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).expect("the screenshot")));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let bytes = info.color_type.samples();
    let mut counts: BTreeMap<&[u8], usize> = BTreeMap::new();
    for pixel in buf[..info.buffer_size()].chunks(bytes) {
        *counts.entry(pixel).or_default() += 1;
    }
    let total: usize = counts.values().sum();
    let most = counts.values().max().copied().unwrap_or(0);
    (counts.len(), 1.0 - most as f64 / total.max(1) as f64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_every_job_and_the_chosen_job_s_curve_in_chromium() {
    let nats = NatsServer::start();
    let port = free_port();
    let settings = fast_settings(&format!("\n[http]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\n"));
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let base = format!("http://127.0.0.1:{port}");
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    wait_status(&c, &s).await;

    // Three jobs with histories of different lengths, and two workers.
    let reports = [("alpha", 40u64), ("beta", 25), ("gamma-3", 7)];
    for (job, _) in reports {
        let _: slaq::protocol::Ack =
            bus::request(&c, s.job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
                .await
                .unwrap();
    }
    for w in ["w1", "w2"] {
        let spec =
            slaq::protocol::WorkerSpec { worker: w.into(), machine: None, slots: 1, kind: None, advertise: None };
        let _: slaq::protocol::Ack =
            bus::request(&c, s.worker_hello(w), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    }
    let _beats = beat(vec![(c.clone(), "w1"), (c.clone(), "w2")], &s);
    for (job, n) in reports {
        for iter in 1..=n {
            bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
        }
    }
    c.flush().await.unwrap();
    let total: u64 = reports.iter().map(|(_, n)| n).sum();
    eventually(&c, &s, Duration::from_secs(20), "every report counted", |st| st.accepted.get("loss") == Some(&total))
        .await;

    // Nothing but /healthz without the token, whichever way it is missing or wrong.
    assert_eq!(get_async(format!("{base}/healthz"), None).await.0, 200);
    for path in ["/", "/api/v1/overview", "/api/v1/jobs/alpha", "/metrics", "/readyz", "/assets/page.js"] {
        let (status, body) = get_async(format!("{base}{path}"), None).await;
        assert_eq!(status, 401, "{path} without the token: {body}");
        assert!(!body.contains("alpha"), "{path} told a job's name without the token");
        assert_eq!(get_async(format!("{base}{path}"), Some("wrong")).await.0, 401, "{path} with a wrong token");
        assert_eq!(get_async(format!("{base}{path}?token=x{TOKEN}"), None).await.0, 401, "{path}, token in the query");
    }
    // Bad ids get a clear 4xx.
    let job_url = |id: &str| format!("{base}/api/v1/jobs/{id}");
    assert_eq!(get_async(job_url("nobody"), Some(TOKEN)).await.0, 404);
    let (status, body) = get_async(job_url(&"x".repeat(5000)), Some(TOKEN)).await;
    assert!(status == 400 && body.contains("error"), "{status} {body}");
    assert_eq!(get_async(job_url("a%20b"), Some(TOKEN)).await.0, 400);
    assert_eq!(get_async(format!("{base}/assets/none.js"), Some(TOKEN)).await.0, 404);

    // The JSON the page reads: every job of the status snapshot, and each job's whole history.
    let status = wait_status(&c, &s).await;
    let (code, body) = get_async(format!("{base}/api/v1/overview"), Some(TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
    let listed: Vec<&str> = overview["jobs"].as_array().unwrap().iter().map(|j| j["job"].as_str().unwrap()).collect();
    assert_eq!(listed, status.jobs.iter().map(|j| j.job.as_str()).collect::<Vec<_>>());
    for (job, n) in reports {
        let (code, body) = get_async(job_url(job), Some(TOKEN)).await;
        assert_eq!(code, 200, "{body}");
        let view: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(view["curve"]["iter"].as_array().map(Vec::len), Some(n as usize), "{job}: {body}");
    }

    // Clients that never finish their requests, and one that never reads its answer.
    let mut stalled = Vec::new();
    for _ in 0..32 {
        let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        socket.write_all(b"GET /api/v1/overview HTTP/1.1\r\nHost: x\r\n").unwrap();
        stalled.push(socket);
    }
    let mut unread = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(unread, "GET /api/v1/overview HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").unwrap();
    stalled.push(unread);

    // The page in a real browser, the token given once in its address.
    let dir = temp_dir("page");
    let url = format!("{base}/?token={TOKEN}#job=alpha");
    let dom = headless(&url, &dir.join("profile-dom"), &["--dump-dom"]);
    for job in &status.jobs {
        assert!(dom.contains(&format!("<tr data-job=\"{}\"", job.job)), "the page lacks job {}:\n{dom}", job.job);
    }
    assert_eq!(attribute(&dom, "job-loss", "data-job").as_deref(), Some("alpha"), "{dom}");
    assert_eq!(attribute(&dom, "job-loss", "data-points").as_deref(), Some("40"), "the chart's points:\n{dom}");
    assert!(dom.contains("<canvas"), "no chart drawn:\n{dom}");
    assert!(attribute(&dom, "summary", "id").is_some() && dom.contains("policy <b>slaq</b>"), "{dom}");

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("page");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("page.png");
    let _ = std::fs::remove_file(&shot);
    headless(&url, &dir.join("profile-shot"), &[&format!("--screenshot={}", shot.display())]);
    let (distinct, inked) = colours(&shot);
    assert!(distinct > 50 && inked > 0.02, "a blank screenshot: {distinct} colours, {inked:.3} of it not background");

    // The stalled clients held nothing up: epochs ran and the listener still answers.
    let before = wait_status(&c, &s).await.epoch;
    eventually(&c, &s, Duration::from_secs(10), "epochs go on", |st| st.epoch > before + 5).await;
    assert_eq!(get_async(format!("{base}/api/v1/jobs/beta"), Some(TOKEN)).await.0, 200);
    drop(stalled);
}

/// With replicas that share the jobs (`[cluster] shared`), every replica serves the whole
/// cluster: the leader from its allocator, a standby from the leader over NATS; and each job's
/// curve from its actor on whichever replica owns its partition (`ctl.curve`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_every_job_and_its_curve_wherever_its_actor_runs() {
    let nats = crate::shared::mapped_server();
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    let ports = [("r1", free_port()), ("r2", free_port())];
    let mut replicas: Vec<Scheduler> = ports
        .iter()
        .map(|(id, port)| {
            let settings = format!("{}\n[http]\nlisten = \"127.0.0.1:{port}\"\n", crate::shared::settings(id));
            Scheduler::start(&nats.url, &settings)
        })
        .collect();
    // Balanced (four partitions each), so that no partition moves while the test reads.
    eventually(&c, &s, Duration::from_secs(30), "a leader, and both replicas holding four partitions", |st| {
        st.leader.is_some() && st.owners.len() == 2 && st.owners.values().all(|p| p.len() == 4)
    })
    .await;
    let jobs: Vec<String> = (0..8).map(|i| format!("job-{i}")).collect();
    for job in &jobs {
        let ack: slaq::protocol::Ack =
            bus::request(&c, s.job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
                .await
                .unwrap();
        assert!(ack.ok, "{ack:?}");
    }
    // No more than the stream keeps per job (`report_history` = 10).
    for iter in 1..=8 {
        for job in &jobs {
            bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
        }
    }
    c.flush().await.unwrap();
    let st = eventually(&c, &s, Duration::from_secs(30), "every job's 8 points bid through its owner", |st| {
        st.jobs.len() == jobs.len() && st.jobs.iter().all(|j| j.points == 8)
    })
    .await;
    let leader = st.leader.clone().unwrap();
    // Jobs of both owners: the curves come from two processes.
    let owner_of = |job: &str| {
        let p = slaq::partition::of(job, 8);
        st.owners.iter().find(|(_, parts)| parts.contains(&p)).map(|(r, _)| r.clone())
    };
    assert!(jobs.iter().any(|j| owner_of(j) != Some(leader.clone())), "{:?}", st.owners);
    for (id, port) in ports {
        let base = format!("http://127.0.0.1:{port}");
        let ready = get_async(format!("{base}/readyz"), None).await.0;
        assert_eq!(ready, if id == leader { 200 } else { 503 }, "{id}'s /readyz (leader {leader})");
        let (code, body) = get_async(format!("{base}/api/v1/overview"), None).await;
        assert_eq!(code, 200, "{id}: {body}");
        let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
        let listed: Vec<&str> =
            overview["jobs"].as_array().unwrap().iter().map(|j| j["job"].as_str().unwrap()).collect();
        assert_eq!(listed, jobs.iter().map(String::as_str).collect::<Vec<_>>(), "{id}'s overview");
        for job in &jobs {
            let (code, body) = get_async(format!("{base}/api/v1/jobs/{job}"), None).await;
            assert_eq!(code, 200, "{id}, {job}: {body}");
            let view: serde_json::Value = serde_json::from_str(&body).unwrap();
            let points = view["curve"]["iter"].as_array().map(Vec::len);
            assert_eq!(points, Some(8), "{id} shows {job} (owned by {:?}): {body}", owner_of(job));
        }
        assert_eq!(get_async(format!("{base}/api/v1/jobs/nobody"), None).await.0, 404, "{id}");
    }
    // The leader goes: the standby lets its listener's address go and leads on it.
    let at = ports.iter().position(|(id, _)| *id == leader).unwrap();
    replicas.remove(at).kill();
    let (_, port) = ports[1 - at];
    crate::observe::get_until(&format!("http://127.0.0.1:{port}/readyz"), "the new leader ready", |s, _| s == 200)
        .await;
    let (code, body) = get_async(format!("http://127.0.0.1:{port}/api/v1/overview"), None).await;
    assert!(code == 200 && jobs.iter().all(|j| body.contains(j.as_str())), "{code} {body}");
}
