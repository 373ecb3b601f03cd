//! Submitted jobs (`JobSpec.command`), over a real nats-server: the scheduler supervises their
//! generations (a failed or stalled one restarts with backoff, `max_restarts`, then the job ends
//! as failed; rank 0 exiting 0 finishes it), keeps them without processes of their own, and the
//! agent runs the command as given (never through a shell), or refuses it.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use slaq::bus;
use slaq::protocol::{
    self, Ack, Encoding, Heartbeat, JobCommand, JobSpec, Running, Subjects, WorkerAssignment, WorkerSpec,
};

use crate::harness::{
    Background, ChildGuard, NatsServer, Scheduler, client, eventually, fast_settings, loss_report, temp_dir,
};

/// A worker the test plays: registered, beating (with what it runs) every 200 ms, and reading
/// its assignments.
struct FakeWorker {
    id: String,
    assignments: async_nats::Subscriber,
    running: std::sync::Arc<std::sync::Mutex<Running>>,
    _beats: Background,
}

impl FakeWorker {
    async fn start(c: &async_nats::Client, s: &Subjects, id: &str) -> FakeWorker {
        let assignments = c.subscribe(s.worker_assign(id)).await.unwrap();
        let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok);
        let running = std::sync::Arc::new(std::sync::Mutex::new(Running {
            job: None,
            term: 0,
            epoch: 0,
            generation: None,
            exit: None,
            refused: 0,
        }));
        let (c2, s2, id2, r2) = (c.clone(), s.clone(), id.to_string(), running.clone());
        let beats = Background::spawn(async move {
            loop {
                let now = r2.lock().unwrap().clone();
                let hb = Heartbeat { running: Some(now), ..Heartbeat::new(&id2) };
                let _ = bus::publish(&c2, s2.worker_beat(&id2), Encoding::MsgPack, &hb).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        FakeWorker { id: id.into(), assignments, running, _beats: beats }
    }

    /// The next assignment to a job with a generation above `after` (others are skipped).
    async fn next_generation(&mut self, after: u64) -> WorkerAssignment {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = tokio::time::timeout(left, self.assignments.next())
                .await
                .unwrap_or_else(|_| panic!("{}: no generation after {after}", self.id))
                .expect("subscription open");
            let a: WorkerAssignment = protocol::decode(Encoding::MsgPack, &m.payload, "assignment").unwrap();
            if let Some(l) = a.launch.as_ref().filter(|l| l.generation > after) {
                let mut r = self.running.lock().unwrap();
                (r.job, r.generation, r.exit) = (a.job.clone(), Some(l.generation), None);
                drop(r);
                return a;
            }
        }
    }

    /// Says in its heartbeats that the current generation's process exited with `code`.
    fn exits(&self, code: i32) {
        self.running.lock().unwrap().exit = Some(code);
    }
}

fn submitted(job: &str, max_restarts: u32) -> JobSpec {
    let command = JobCommand { max_restarts, ..JobCommand::new(vec!["train".into(), "--lr".into(), "0.1".into()]) };
    JobSpec { command: Some(command), ..JobSpec::new(job) }
}

/// A nats-server and `slaq serve` with `settings`, a client, and the subjects, once it answers.
async fn scheduler(settings: &str) -> (NatsServer, Scheduler, async_nats::Client, Subjects) {
    let nats = NatsServer::start();
    let scheduler = Scheduler::start(&nats.url, settings);
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    crate::harness::wait_status(&c, &s).await;
    (nats, scheduler, c, s)
}

async fn hello(c: &async_nats::Client, s: &Subjects, spec: &JobSpec) -> Ack {
    bus::request(c, s.job_hello(&spec.job), Encoding::MsgPack, spec, Duration::from_secs(5)).await.unwrap()
}

#[tokio::test]
async fn a_failing_command_restarts_with_backoff_then_ends_failed() {
    let (_nats, _scheduler, c, s) = scheduler(&fast_settings("min_generation_ms = 0\n")).await;
    let mut w = FakeWorker::start(&c, &s, "sw1").await;
    assert!(hello(&c, &s, &submitted("sj1", 2)).await.ok);
    let first = w.next_generation(0).await;
    let command = first.command.as_ref().expect("the assignment carries the command");
    assert_eq!(command.argv, ["train", "--lr", "0.1"]);
    let mut generation = first.launch.as_ref().unwrap().generation;
    // Two failures: each restarts the job on its worker, the second after a longer backoff.
    let mut waited = Vec::new();
    for _ in 0..2 {
        let failed = Instant::now();
        w.exits(1);
        let next = w.next_generation(generation).await;
        waited.push(failed.elapsed());
        generation = next.launch.as_ref().unwrap().generation;
        assert_eq!(next.command.as_ref().map(|c| &c.argv), Some(&command.argv));
    }
    assert!(waited[0] >= Duration::from_millis(900), "the first restart waits its backoff (1 s): {waited:?}");
    assert!(waited[1] >= Duration::from_millis(1900), "the second waits twice as long: {waited:?}");
    // The third failure uses up max_restarts: the job ends as failed and its worker is freed.
    w.exits(1);
    let st = eventually(&c, &s, Duration::from_secs(10), "sj1 ended as failed", |st| {
        st.ended.iter().any(|o| o.job == "sj1" && o.outcome.as_str() == "failed" && o.restarts == 2)
            && st.jobs.is_empty()
            && st.workers.iter().all(|w| w.job.is_none())
    })
    .await;
    assert_eq!(st.ended.len(), 1, "{:?}", st.ended);
}

#[tokio::test]
async fn a_stalled_generation_restarts_and_rank_0_exiting_0_finishes_the_job() {
    let (_nats, _scheduler, c, s) = scheduler(&fast_settings("min_generation_ms = 0\nstall_timeout_ms = 1500\n")).await;
    let mut w = FakeWorker::start(&c, &s, "sw2").await;
    assert!(hello(&c, &s, &submitted("sj2", 3)).await.ok);
    let first = w.next_generation(0).await.launch.unwrap().generation;
    // No report for the stall timeout: a new generation.
    let started = Instant::now();
    let second = w.next_generation(first).await.launch.unwrap().generation;
    assert!(started.elapsed() >= Duration::from_millis(1200), "restarted only after the stall timeout");
    // Reports flow: no further restart while they do.
    let reporting = {
        let (c, s) = (c.clone(), s.clone());
        Background::spawn(async move {
            for iter in 1.. {
                let _ = bus::publish(&c, s.job_loss("sj2"), Encoding::MsgPack, &loss_report("sj2", iter)).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let quiet = tokio::time::timeout(Duration::from_secs(3), w.next_generation(second)).await;
    assert!(quiet.is_err(), "a job that reports is not restarted");
    drop(reporting);
    // Its rank 0 exits 0 by itself: finished.
    w.exits(0);
    let st = eventually(&c, &s, Duration::from_secs(10), "sj2 finished", |st| {
        st.ended.iter().any(|o| o.job == "sj2" && o.outcome.as_str() == "finished")
    })
    .await;
    assert_eq!(st.ended.iter().find(|o| o.job == "sj2").map(|o| o.restarts), Some(1), "one restart, the stall");
}

#[tokio::test]
async fn a_submitted_job_waits_without_processes_and_keeps_its_command() {
    let nats = NatsServer::start_jetstream();
    let settings = fast_settings(
        "idle_job_timeout_ms = 800\nstale_job_ms = 800\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n",
    );
    let scheduler = Scheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    crate::harness::wait_status(&c, &s).await;
    assert!(hello(&c, &s, &submitted("sj3", 3)).await.ok);
    // A plain job that says hello and goes silent is forgotten; the submitted one waits.
    assert!(hello(&c, &s, &JobSpec::new("plain")).await.ok);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = eventually(&c, &s, Duration::from_secs(5), "the silent plain job is forgotten", |st| {
        st.ended.iter().any(|o| o.job == "plain" && o.outcome.as_str() == "expired")
    })
    .await;
    let job = st.jobs.iter().find(|j| j.job == "sj3").expect("the submitted job is still there");
    assert!(job.submitted);
    // Its own process says hello without a command (as a job's rank 0 may): the command stays,
    // and a worker that joins is told it.
    assert!(hello(&c, &s, &JobSpec { max_workers: Some(1), ..JobSpec::new("sj3") }).await.ok);
    // ... also in the state it saved: a restart brings the command back.
    assert!(scheduler.terminate().success());
    let _scheduler = Scheduler::start(&nats.url, &settings);
    crate::harness::wait_status(&c, &s).await;
    let mut w = FakeWorker::start(&c, &s, "sw3").await;
    let a = w.next_generation(0).await;
    assert_eq!(a.command.map(|c| c.argv), Some(vec!["train".to_string(), "--lr".into(), "0.1".into()]));
}

#[tokio::test]
async fn bad_commands_are_refused_at_the_hello() {
    let (_nats, _scheduler, c, s) = scheduler(&fast_settings("")).await;
    let with = |command: JobCommand| JobSpec { command: Some(command), ..JobSpec::new("bad") };
    let cases = [
        ("empty", with(JobCommand::new(vec![]))),
        ("empty program", with(JobCommand::new(vec![String::new()]))),
        ("too long", with(JobCommand::new(vec!["x".repeat(20_000)]))),
        ("NUL", with(JobCommand::new(vec!["a\0b".into()]))),
        (
            "reserved env",
            with(JobCommand { env: [("RANK".into(), "0".into())].into(), ..JobCommand::new(vec!["t".into()]) }),
        ),
        (
            "slaq env",
            with(JobCommand { env: [("SLAQ_JOB".into(), "x".into())].into(), ..JobCommand::new(vec!["t".into()]) }),
        ),
        (
            "env name",
            with(JobCommand { env: [("A-B".into(), "x".into())].into(), ..JobCommand::new(vec!["t".into()]) }),
        ),
        ("relative cwd", with(JobCommand { cwd: Some("rel".into()), ..JobCommand::new(vec!["t".into()]) })),
        ("restarts", with(JobCommand { max_restarts: 1000, ..JobCommand::new(vec!["t".into()]) })),
        ("never runs", JobSpec { max_workers: Some(0), ..with(JobCommand::new(vec!["t".into()])) }),
        (
            "sizes above max",
            JobSpec {
                max_workers: Some(2),
                worker_counts: Some(vec![4, 8]),
                ..with(JobCommand::new(vec!["t".into()]))
            },
        ),
    ];
    for (what, spec) in cases {
        let ack = hello(&c, &s, &spec).await;
        assert!(!ack.ok, "{what}: accepted");
        assert!(
            ack.error.as_deref().is_some_and(|e| e.contains("command") || e.contains("never run")),
            "{what}: {ack:?}"
        );
    }
    let st = crate::harness::wait_status(&c, &s).await;
    assert!(st.jobs.is_empty(), "nothing refused was kept: {:?}", st.jobs);
}

/// The real agent runs a submitted command as its arguments, with the job's environment (which
/// cannot override slaq's), in its directory; refuses one outside `--allow-command` (reported
/// as exit 126, so the job ends as failed); and hands one to an `--exec` launcher as "$@".
#[tokio::test]
async fn the_agent_runs_the_command_as_given_and_refuses_what_it_may_not_run() {
    let (nats, _scheduler, c, s) = scheduler(&fast_settings("min_generation_ms = 0\n")).await;
    let dir = temp_dir("submit");
    let out = dir.join("out.txt");
    let agent = |id: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_slaq"))
            .args(["worker", "--id", id, "--nats", &nats.url, "--beat-ms", "200", "--stop-grace-s", "2"])
            .args(extra)
            .stderr(std::fs::File::create(dir.join(format!("{id}.log"))).unwrap())
            .spawn()
            .map(ChildGuard)
            .unwrap()
    };
    // The arguments reach the program as they are: a `;` or `$(...)` is no shell syntax here.
    let script = format!(
        "printf '%s|' \"$0\" \"$1\" \"$GREETING\" \"$SLAQ_CHECKPOINT_DIR\" \"$RANK\" \"$(pwd)\" >> {}; echo >> {}",
        out.display(),
        out.display()
    );
    let mut env = std::collections::BTreeMap::new();
    env.insert("GREETING".to_string(), "hi there".to_string());
    let command = JobCommand {
        env,
        cwd: Some(dir.to_string_lossy().into()),
        checkpoint_dir: Some("/ckpt/j".into()),
        max_restarts: 0,
        ..JobCommand::new(vec!["sh".into(), "-c".into(), script, "a; $(rm -rf /)".into(), "x y".into()])
    };
    let plain = agent("ag1", &[]);
    assert!(hello(&c, &s, &JobSpec { command: Some(command.clone()), ..JobSpec::new("run-it") }).await.ok);
    let text = crate::harness::wait_for_file(&out, "the command ran", |t| t.lines().count() >= 1).await;
    assert_eq!(text.lines().next(), Some(format!("a; $(rm -rf /)|x y|hi there|/ckpt/j|0|{}|", dir.display()).as_str()));
    // It exited 0 as rank 0: the job is finished.
    eventually(&c, &s, Duration::from_secs(10), "run-it finished", |st| {
        st.ended.iter().any(|o| o.job == "run-it" && o.outcome.as_str() == "finished")
    })
    .await;
    drop(plain);

    // An agent that may run only scripts in its jobs directory: refused, exit 126, the job fails.
    let jobs_dir = dir.join("jobs");
    std::fs::create_dir_all(&jobs_dir).unwrap();
    let only = format!("sh {}/", jobs_dir.display());
    let strict = agent("ag2", &["--allow-command", &only]);
    assert!(hello(&c, &s, &JobSpec { command: Some(command.clone()), ..JobSpec::new("refused") }).await.ok);
    eventually(&c, &s, Duration::from_secs(10), "the refused job failed", |st| {
        st.ended.iter().any(|o| o.job == "refused" && o.outcome.as_str() == "failed")
    })
    .await;
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 1, "the refused command did not run");
    // The agent counts what it refused, and the scheduler shows it.
    eventually(&c, &s, Duration::from_secs(10), "the refusal is counted", |st| {
        st.workers.iter().any(|w| w.worker == "ag2" && w.refused >= 1)
    })
    .await;
    drop(strict);

    // A launcher: the job's arguments arrive as "$@".
    let launched = dir.join("launched.txt");
    let exec = format!("echo launcher \"$#\" \"$1\" >> {}", launched.display());
    let launcher = agent("ag3", &["--exec", &exec]);
    assert!(hello(&c, &s, &JobSpec { command: Some(command), ..JobSpec::new("launched") }).await.ok);
    let text = crate::harness::wait_for_file(&launched, "the launcher ran", |t| !t.is_empty()).await;
    assert_eq!(text.trim(), "launcher 5 sh");
    drop(launcher);
}

/// A job that runs only at some sizes (`--worker-counts`) gets one of them, never another; the
/// workers that frees go to a job that can use them.
#[tokio::test]
async fn a_job_with_worker_counts_gets_only_those_counts() {
    let (_nats, _scheduler, c, s) = scheduler(&fast_settings("policy = \"fair\"\nmin_generation_ms = 0\n")).await;
    let mut workers = Vec::new();
    for id in ["wc1", "wc2", "wc3"] {
        workers.push(FakeWorker::start(&c, &s, id).await);
    }
    let spec = JobSpec { worker_counts: Some(vec![4, 2]), ..submitted("pow2", 3) };
    assert!(hello(&c, &s, &spec).await.ok);
    let count =
        |st: &slaq::protocol::StatusSnapshot, job: &str| st.jobs.iter().find(|j| j.job == job).map(|j| j.workers);
    // Alone on three workers (fair would give it all three): two.
    eventually(&c, &s, Duration::from_secs(10), "pow2 on 2 workers", |st| count(st, "pow2") == Some(2)).await;
    assert!(hello(&c, &s, &submitted("any", 3)).await.ok);
    let st = eventually(&c, &s, Duration::from_secs(10), "the third worker goes to the other job", |st| {
        count(st, "any") == Some(1)
    })
    .await;
    assert_eq!(count(&st, "pow2"), Some(2));
    for _ in 0..10 {
        let st = crate::harness::wait_status(&c, &s).await;
        let n = count(&st, "pow2").unwrap();
        assert!(n == 0 || n == 2 || n == 4, "pow2 on {n} workers");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Sizes out of range are refused.
    let bad = JobSpec { worker_counts: Some(vec![0]), ..submitted("bad-sizes", 3) };
    assert!(!hello(&c, &s, &bad).await.ok);
}

/// A scheduler killed while a submitted job runs comes back with it: the agents' processes go
/// on untouched, and a process that fails afterwards is still restarted (the restored workers'
/// generation is the one their agents say they run).
#[tokio::test]
async fn a_submitted_job_survives_a_scheduler_restart_and_is_still_supervised() {
    let nats = NatsServer::start_jetstream();
    let settings = fast_settings("min_generation_ms = 0\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n");
    let scheduler = Scheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    crate::harness::wait_status(&c, &s).await;
    let mut w = FakeWorker::start(&c, &s, "sw9").await;
    assert!(hello(&c, &s, &submitted("sj9", 3)).await.ok);
    w.next_generation(0).await;
    // Saved (the spec with its command, the worker and its assignment), then SIGKILL.
    eventually(&c, &s, Duration::from_secs(10), "sj9 runs on sw9", |st| {
        st.workers.iter().any(|x| x.worker == "sw9" && x.job.as_deref() == Some("sj9"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    scheduler.kill();
    let _scheduler = Scheduler::start(&nats.url, &settings);
    eventually(&c, &s, Duration::from_secs(20), "sj9 is back, submitted, on sw9", |st| {
        st.jobs.iter().any(|j| j.job == "sj9" && j.submitted)
            && st.workers.iter().any(|x| x.worker == "sw9" && x.job.as_deref() == Some("sj9"))
    })
    .await;
    // The process fails now: a new generation, long before any stall timeout.
    w.exits(1);
    let again = tokio::time::timeout(Duration::from_secs(15), w.next_generation(0)).await;
    assert!(again.is_ok(), "a failure after the restart was not noticed");
}
