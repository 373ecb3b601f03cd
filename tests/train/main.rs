//! Real distributed training under slaq: PyTorch (CPU, gloo) installed from PyPI into a
//! virtual environment under `target/`, `slaq serve` and two `slaq worker` agents (2 machines ×
//! 2 slots) over a real nats-server, and three DDP jobs (`examples/torch_ddp.py`) submitted
//! with `slaq submit --wait` at staggered times. Its own test binary: it runs after the `it`
//! tests, not beside them (it keeps both cores busy).

#[allow(dead_code)]
#[path = "../it/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../it/pyenv.rs"]
mod pyenv;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use harness::{ChildGuard, NatsServer, Scheduler, client, fast_settings, temp_dir, wait_status};
use slaq::protocol::Subjects;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/torch_ddp.py");
/// Iterations between the periodic checkpoints the jobs take (besides the one at SIGTERM).
const CHECKPOINT_EVERY: u64 = 20;

/// The test environment's interpreter with torch and scikit-learn; panics (never skips) if
/// they cannot be installed.
fn torch_python() -> PathBuf {
    pyenv::python_env("torch-env", Some("torch"))
        .expect("the training test needs Python 3 with venv (apt-get install -y python3-venv)")
}

fn agent(url: &str, id: &str, machine: &str, dir: &Path) -> ChildGuard {
    typed_agent(url, id, machine, dir, None)
}

/// An agent whose two workers are of `accelerator` (`None`: the type `default`).
fn typed_agent(url: &str, id: &str, machine: &str, dir: &Path, accelerator: Option<&str>) -> ChildGuard {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("{id}.log"))).expect("log");
    Command::new(env!("CARGO_BIN_EXE_slaq"))
        .args(["worker", "--id", id, "--machine", machine, "--slots", "2", "--advertise", "127.0.0.1"])
        .args(accelerator.map(|a| ["--accelerator", a]).into_iter().flatten())
        .args(["--nats", url, "--beat-ms", "300", "--stop-grace-s", "10"])
        .env("RUST_LOG", "slaq=info")
        .stderr(log)
        .spawn()
        .map(ChildGuard)
        .expect("slaq worker starts")
}

/// `slaq submit --wait` of one DDP job.
fn submit(url: &str, python: &Path, job: &str, dir: &Path, iterations: u32) -> ChildGuard {
    let log = std::fs::File::create(dir.join(format!("{job}.submit.log"))).expect("log");
    Command::new(env!("CARGO_BIN_EXE_slaq"))
        .args(["submit", "--job", job, "--nats", url, "--max-workers", "4", "--max-restarts", "8", "--wait"])
        .arg("--checkpoint-dir")
        .arg(dir.join(format!("{job}.ckpt")))
        .arg("--")
        .arg(python)
        .arg(EXAMPLE)
        .args(["--iterations", &iterations.to_string(), "--iter-sleep", "0.04"])
        .args(["--checkpoint-every-iters", &CHECKPOINT_EVERY.to_string(), "--checkpoint-every-s", "1000"])
        .arg("--log")
        .arg(dir.join("events.jsonl"))
        .stderr(log)
        .spawn()
        .map(ChildGuard)
        .expect("slaq submit starts")
}

fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn field<'a>(e: &'a Value, k: &str) -> &'a Value {
    &e[k]
}

fn int(e: &Value, k: &str) -> u64 {
    field(e, k).as_u64().unwrap_or_else(|| panic!("{k} in {e}"))
}

fn is(e: &Value, event: &str, job: &str) -> bool {
    e["event"] == event && e["job"] == job
}

/// Polls the events until `check` holds (panics after `within`).
async fn wait_events(dir: &Path, what: &str, within: Duration, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let e = events(dir);
        if check(&e) {
            return e;
        }
        assert!(Instant::now() < deadline, "{what}: never happened; {} events", e.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The latest generation of `job` in which all its ranks started, and its world size.
fn latest_world(e: &[Value], job: &str) -> Option<(u64, u64)> {
    let mut starts: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for s in e.iter().filter(|s| is(s, "start", job)) {
        let slot = starts.entry(int(s, "generation")).or_insert((int(s, "world"), 0));
        slot.1 += 1;
    }
    starts.into_iter().rev().find(|(_, (world, n))| *n as u64 == *world).map(|(g, (w, _))| (g, w))
}

/// Processes whose command line names `needle` (our temporary directory).
fn processes_naming(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) && pid != std::process::id() {
            found.push(pid);
        }
    }
    found
}

fn kill9(pid: u64) {
    // SAFETY: kill(2) with plain integers.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_real_ddp_jobs_grow_shrink_restart_from_checkpoints_and_finish() {
    let python = tokio::task::spawn_blocking(torch_python).await.expect("the environment is made");
    let dir = temp_dir("train");
    let nats = NatsServer::start();
    // Fair sharing: its sizes are known in advance (4, then 2 + 2, then 2 + 1 + 1, ...), so the
    // jobs surely grow and shrink. The stall timeout covers torch's start on a loaded machine.
    // A generation lasts at least 5 s: fair's spare worker would otherwise move to the least
    // served job at every epoch, restarting two jobs each time.
    let settings = fast_settings(
        "policy = \"fair\"\nstall_timeout_ms = 90000\nmin_generation_ms = 5000\nrestart_amortisation = 0\n",
    )
    .replace("worker_timeout_ms = 1500", "worker_timeout_ms = 3000");
    let scheduler = Scheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    wait_status(&c, &s).await;
    let mut n1 = Some(agent(&nats.url, "n1", "node-1", &dir));
    let mut n2 = Some(agent(&nats.url, "n2", "node-2", &dir));
    let long = Duration::from_secs(120);

    // Job a alone gets all four workers; b then takes two of them; c a share too.
    let mut a = submit(&nats.url, &python, "ddp-a", &dir, 700);
    wait_events(&dir, "ddp-a on 4 workers", long, |e| latest_world(e, "ddp-a").is_some_and(|(_, w)| w == 4)).await;
    let mut b = submit(&nats.url, &python, "ddp-b", &dir, 450);
    wait_events(&dir, "ddp-a and ddp-b on 2 each", long, |e| {
        latest_world(e, "ddp-a").is_some_and(|(_, w)| w == 2) && latest_world(e, "ddp-b").is_some_and(|(_, w)| w == 2)
    })
    .await;
    let mut c_job = submit(&nats.url, &python, "ddp-c", &dir, 350);
    let e = wait_events(&dir, "ddp-c running", long, |e| latest_world(e, "ddp-c").is_some()).await;

    // A process of a job is killed (SIGKILL, no checkpoint): the job restarts from its last
    // periodic checkpoint.
    let victim_job = ["ddp-a", "ddp-b", "ddp-c"]
        .into_iter()
        .find(|j| latest_world(&e, j).is_some_and(|(_, w)| w >= 2))
        .expect("a job on two workers");
    let (generation, _) = latest_world(&e, victim_job).unwrap();
    let victim = e
        .iter()
        .rfind(|s| is(s, "start", victim_job) && int(s, "generation") == generation && int(s, "rank") == 1)
        .map(|s| int(s, "pid"))
        .unwrap();
    kill9(victim);
    wait_events(&dir, "the job whose process was killed runs again", long, |e| {
        latest_world(e, victim_job).is_some_and(|(g, _)| g > generation)
    })
    .await;

    // A whole agent is killed: its processes die with it, the jobs it served restart on the
    // workers left once its workers time out; later it comes back.
    let before_agent_kill = events(&dir).len();
    drop(n2.take());
    wait_events(&dir, "a generation started on node-1 alone after the agent died", long, |e| {
        e[before_agent_kill..].iter().any(|s| s["event"] == "start")
    })
    .await;
    n2 = Some(agent(&nats.url, "n2", "node-2", &dir));

    // Every job finishes: `slaq submit --wait` exits 0.
    let deadline = Instant::now() + Duration::from_secs(360);
    let mut said_all = String::new();
    for (job, proc) in [("ddp-a", &mut a), ("ddp-b", &mut b), ("ddp-c", &mut c_job)] {
        let status = loop {
            if let Some(status) = proc.0.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "{job} did not finish in time");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let said = std::fs::read_to_string(dir.join(format!("{job}.submit.log"))).unwrap_or_default();
        assert!(status.success(), "slaq submit --wait for {job}: {status}; it said: {said}");
        // Every job was moved at least once: the scheduler measured what a restart cost it.
        let cost: f64 = said
            .split("a restart cost it ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{job}: no measured restart cost: {said}"));
        // Starting Python, importing torch and forming a gloo world takes seconds: a smaller
        // figure would be the old generation's last reports, not the new one's first.
        assert!(cost >= 1.0, "{job}: a restart measured at {cost} s");
        said_all.push_str(&said);
    }

    // A typed cluster (issue #31): a third agent of another type joins. A job alone runs on
    // the four `default` workers; when their agents stop it moves, from its checkpoint, to the
    // two `cpu-b` workers and finishes there. Every generation is one type.
    let mut n3 = Some(typed_agent(&nats.url, "n3", "node-3", &dir, Some("cpu-b")));
    let mut t = submit(&nats.url, &python, "ddp-t", &dir, 300);
    wait_events(&dir, "ddp-t on the four default workers", long, |e| {
        latest_world(e, "ddp-t").is_some_and(|(_, w)| w == 4)
    })
    .await;
    // The agents stop; nothing of any job is left.
    for agent in [n1.take(), n2.take()].into_iter().flatten() {
        let mut agent = agent;
        // SAFETY: kill(2) with plain integers.
        unsafe {
            libc::kill(agent.0.id() as i32, libc::SIGTERM);
        }
        let status = agent.0.wait().expect("the agent exits");
        assert!(status.success(), "the agent exits cleanly on SIGTERM: {status}");
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = t.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "ddp-t did not finish on the cpu-b workers in time");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let said = std::fs::read_to_string(dir.join("ddp-t.submit.log")).unwrap_or_default();
    assert!(status.success(), "ddp-t: {status}; it said: {said}");
    let typed: Vec<Value> = events(&dir).into_iter().filter(|s| is(s, "start", "ddp-t")).collect();
    let mut kinds: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for s in &typed {
        kinds.entry(int(s, "generation")).or_default().insert(s["accelerator"].as_str().unwrap_or("?").to_string());
    }
    assert!(kinds.values().all(|k| k.len() == 1), "a generation of ddp-t spanned types: {kinds:?}");
    let order: Vec<&String> = kinds.values().flatten().collect();
    assert_eq!((order.first().map(|s| s.as_str()), order.last().map(|s| s.as_str())), (Some("default"), Some("cpu-b")));
    if let Some(mut agent) = n3.take() {
        // SAFETY: kill(2) with plain integers.
        unsafe {
            libc::kill(agent.0.id() as i32, libc::SIGTERM);
        }
        assert!(agent.0.wait().expect("the agent exits").success());
    }
    let needle = dir.to_string_lossy().to_string();
    let left = processes_naming(&needle);
    assert!(left.is_empty(), "processes of the jobs left after the agents stopped: {left:?}");
    drop(scheduler);

    let e = events(&dir);
    let mut worlds_of: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    let mut generations_of: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    let mut lost: Vec<u64> = Vec::new();
    // Seconds from a generation's stop (its rank 0 saved at SIGTERM) to the next one's start
    // (every rank joined, checkpoint restored).
    let mut restart_s: Vec<f64> = Vec::new();
    for job in ["ddp-a", "ddp-b", "ddp-c"] {
        // Every generation formed one world: each start's all_gather of (rank, generation) is
        // exactly 0..N-1 with its own generation, and no rank started twice.
        let mut ranks: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        for s in e.iter().filter(|s| is(s, "start", job)) {
            let (g, world) = (int(s, "generation"), int(s, "world"));
            let members: Vec<(u64, u64)> = s["members"]
                .as_array()
                .expect("members")
                .iter()
                .map(|m| (m[0].as_u64().unwrap(), m[1].as_u64().unwrap()))
                .collect();
            assert_eq!(members, (0..world).map(|r| (r, g)).collect::<Vec<_>>(), "{job} generation {g}: {s}");
            assert!(ranks.entry(g).or_default().insert(int(s, "rank")), "{job} generation {g}: a rank twice");
            worlds_of.entry(job).or_default().insert(world);
            generations_of.entry(job).or_default().insert(g);
        }
        // Each generation resumed from the checkpoint: never more than the checkpoint interval
        // behind the furthest iteration reached before it, and with the parameters saved then.
        let mut reached = 0u64;
        let mut stopped_at: Option<f64> = None;
        let mut saved: BTreeMap<u64, String> = BTreeMap::new();
        for ev in e.iter().filter(|ev| ev["job"] == job) {
            match ev["event"].as_str() {
                Some("loss") => reached = reached.max(int(ev, "iteration")),
                Some("saved") => {
                    saved.insert(int(ev, "iteration"), ev["digest"].as_str().unwrap().to_string());
                }
                Some("stopped") if int(ev, "rank") == 0 => {
                    saved.insert(int(ev, "iteration"), ev["saved"].as_str().unwrap().to_string());
                    stopped_at = ev["t"].as_f64();
                }
                Some("start") if int(ev, "rank") == 0 => {
                    let start = int(ev, "start");
                    assert!(
                        start + CHECKPOINT_EVERY >= reached,
                        "{job} generation {}: resumed at {start}, {reached} had been reached",
                        int(ev, "generation")
                    );
                    if start > 0 {
                        assert_eq!(
                            ev["restored"].as_str(),
                            saved.get(&start).map(String::as_str),
                            "{job}: the parameters restored at {start} are those saved"
                        );
                    }
                    lost.push(reached.saturating_sub(start));
                    if let (Some(stop), Some(t)) = (stopped_at.take(), ev["t"].as_f64()) {
                        restart_s.push(((t - stop) * 10.0).round() / 10.0);
                    }
                }
                _ => {}
            }
        }
        // It learned: the last loss is below the first.
        let losses: Vec<f64> =
            e.iter().filter(|ev| is(ev, "loss", job)).map(|ev| ev["loss"].as_f64().unwrap()).collect();
        let (first, last) = (losses[0], *losses.last().unwrap());
        assert!(last < first, "{job}: loss {first} at first, {last} at the end");
        assert!(e.iter().any(|ev| is(ev, "done", job)), "{job} ran to its last iteration");
    }
    let moved = worlds_of.values().filter(|w| w.len() >= 2).count();
    assert!(moved >= 1, "a job ran at two world sizes at least: {worlds_of:?}");
    eprintln!(
        "training: generations per job {:?}; world sizes {:?}; iterations lost per restart {:?}; \
         seconds from a graceful stop to the next generation's start {:?}",
        generations_of.iter().map(|(j, g)| (j, g.len())).collect::<Vec<_>>(),
        worlds_of,
        lost,
        restart_s
    );
    eprintln!("{said_all}");
}

/// The processes whose environment holds `SLAQ_JOB=<job>` (every process of the job's
/// generations), other than zombies.
fn processes_of_job(job: &str) -> Vec<(u32, String)> {
    let wanted = format!("SLAQ_JOB={job}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if !zombie && environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes()) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

/// #40.2: a process of a new generation still waiting in rendezvous (`init_process_group`)
/// when its job ended stayed for the agent's whole grace: `slaq.elastic` deferred SIGTERM to
/// a Python handler that runs only once the call returns, and the guard left SIGTERM blocked
/// in the job's processes. Here rank 1 of a two-worker job never joins, so rank 0 waits in
/// rendezvous (real torch, gloo); the job ends (its submitter cancels it) and every process of
/// it must be gone within 2 s, though the agents' grace is 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_waiting_in_rendezvous_stops_at_once_when_its_job_ends() {
    let python = tokio::task::spawn_blocking(torch_python).await.expect("the environment is made");
    let dir = temp_dir("rendezvous");
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("policy = \"fair\"\nmin_generation_ms = 0\n"));
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    wait_status(&c, &s).await;
    let _n1 = agent(&nats.url, "rv1", "node-1", &dir);
    let waiting = dir.join("waiting");
    let rank0 = format!(
        "import pathlib, slaq.elastic\npathlib.Path({:?}).write_text('in rendezvous')\nslaq.elastic.init(timeout_s=600)\n",
        waiting.display().to_string()
    );
    let line = format!("if [ \"$RANK\" = 1 ]; then exec sleep 600; fi; exec {} -c \"$RANK0_SCRIPT\"", python.display());
    let command = slaq::protocol::JobCommand {
        env: [("RANK0_SCRIPT".to_string(), rank0)].into(),
        ..slaq::protocol::JobCommand::new(vec!["sh".into(), "-c".into(), line])
    };
    let spec = slaq::protocol::JobSpec {
        command: Some(command),
        min_workers: 2,
        max_workers: Some(2),
        ..slaq::protocol::JobSpec::new("rendezvous")
    };
    let ack: slaq::protocol::Ack = slaq::bus::request(
        &c,
        s.job_hello("rendezvous"),
        slaq::protocol::Encoding::MsgPack,
        &spec,
        Duration::from_secs(5),
    )
    .await
    .expect("hello answered");
    assert!(ack.ok, "{ack:?}");
    harness::wait_for_file(&waiting, "rank 0 starts its rendezvous", |t| t.contains("rendezvous")).await;
    // Past torch's import, into init_process_group (it waits there for rank 1 for 600 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !processes_of_job("rendezvous").iter().any(|(pid, _)| listening(*pid)) {
        assert!(Instant::now() < deadline, "rank 0 never opened its rendezvous store");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = processes_of_job("rendezvous");
    let end = slaq::protocol::JobEnd { job: "rendezvous".into(), reason: slaq::protocol::EndReason::Cancelled };
    let ended_at = Instant::now();
    slaq::bus::publish(&c, s.job_bye("rendezvous"), slaq::protocol::Encoding::MsgPack, &end).await.expect("bye");
    let mut left = processes_of_job("rendezvous");
    while !left.is_empty() && ended_at.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = processes_of_job("rendezvous");
    }
    let took = ended_at.elapsed();
    eprintln!("rendezvous: {} processes ({before:?}) gone {took:?} after the job's end; left {left:?}", before.len());
    assert!(left.is_empty(), "processes outlived their job: {left:?}");
    assert!(took < Duration::from_secs(2), "gone in {took:?}, not within 2 s");
}

/// Whether process `pid` has a TCP socket listening (rank 0's rendezvous store).
fn listening(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    let inodes: BTreeSet<String> = fds
        .flatten()
        .filter_map(|f| std::fs::read_link(f.path()).ok())
        .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
        .collect();
    ["tcp", "tcp6"].iter().any(|t| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).unwrap_or_default().lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[3] == "0A" && inodes.contains(f[9])
        })
    })
}
