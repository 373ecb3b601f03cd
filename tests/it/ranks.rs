//! Jobs that run on several workers: `slaq serve` and two `slaq worker` agents (2 machines × 2
//! slots) as child processes over a real nats-server. Each generation of a job's processes must
//! be one world (ranks 0..N−1, once each, one rendezvous), a process must be stopped with
//! SIGTERM before its worker starts the next, and nothing may outlive the agents.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use slaq::bus;
use slaq::protocol::{Ack, Encoding, EndReason, JobEnd, JobSpec, Subjects};

use crate::harness::{
    Background, ChildGuard, NatsServer, Scheduler, client, fast_settings, loss_report, temp_dir, wait_for_file,
    wait_status,
};

/// One line of the exec script's log: a start or a stop.
#[derive(Clone, Debug)]
struct Line {
    start: bool,
    job: String,
    worker: String,
    generation: u64,
    pid: u32,
    /// rank, world, local rank, local world, group rank, master address, master port.
    ranks: Option<(u32, u32, u32, u32, u32, String, u16)>,
}

fn parse(text: &str) -> Vec<Line> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            match f.as_slice() {
                ["start", job, worker, generation, rank, world, lr, lw, gr, addr, port, pid] => Some(Line {
                    start: true,
                    job: job.to_string(),
                    worker: worker.to_string(),
                    generation: generation.parse().ok()?,
                    pid: pid.parse().ok()?,
                    ranks: Some((
                        rank.parse().ok()?,
                        world.parse().ok()?,
                        lr.parse().ok()?,
                        lw.parse().ok()?,
                        gr.parse().ok()?,
                        addr.to_string(),
                        port.parse().ok()?,
                    )),
                }),
                ["term", job, worker, generation, pid] => Some(Line {
                    start: false,
                    job: job.to_string(),
                    worker: worker.to_string(),
                    generation: generation.parse().ok()?,
                    pid: pid.parse().ok()?,
                    ranks: None,
                }),
                _ => None,
            }
        })
        .collect()
}

/// The starts of each (job, generation).
fn generations(lines: &[Line]) -> BTreeMap<(String, u64), Vec<Line>> {
    let mut by: BTreeMap<(String, u64), Vec<Line>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.start) {
        by.entry((l.job.clone(), l.generation)).or_default().push(l.clone());
    }
    by
}

/// The latest generation of `job` is complete and has `world` processes.
fn has_world(text: &str, job: &str, world: u32) -> bool {
    let gens = generations(&parse(text));
    let latest = gens.iter().rfind(|((j, _), _)| j == job);
    latest.is_some_and(|(_, starts)| starts.len() == world as usize && starts[0].ranks.as_ref().unwrap().1 == world)
}

/// A `slaq worker` child, killed with its process group's jobs if the test ends early.
fn agent(url: &str, id: &str, machine: &str, script: &str, dir: &Path) -> ChildGuard {
    let log = dir.join(format!("{id}.log"));
    Command::new(env!("CARGO_BIN_EXE_slaq"))
        .args(["worker", "--id", id, "--machine", machine, "--slots", "2", "--advertise", "127.0.0.1"])
        .args(["--nats", url, "--beat-ms", "200", "--stop-grace-s", "5", "--exec", script])
        .env("RUST_LOG", "slaq=info")
        .stderr(std::fs::File::create(log).expect("agent log"))
        .spawn()
        .map(ChildGuard)
        .expect("slaq worker starts")
}

/// A job that says hello and reports every 100 ms until dropped.
async fn job(c: &async_nats::Client, s: &Subjects, id: &'static str) -> Background {
    let spec = JobSpec { max_workers: Some(4), ..JobSpec::new(id) };
    let ack: Ack = bus::request(c, s.job_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    assert!(ack.ok, "{ack:?}");
    let (c, s) = (c.clone(), s.clone());
    Background::spawn(async move {
        for iter in 1.. {
            bus::publish(&c, s.job_loss(id), Encoding::MsgPack, &loss_report(id, iter)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

#[tokio::test]
async fn each_generation_is_one_world_and_every_process_is_stopped_gracefully() {
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings("policy = \"fair\"\n"));
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    wait_status(&c, &s).await;
    let dir = temp_dir("ranks");
    let log = dir.join("runs.txt");
    let script = format!(
        "echo \"start $SLAQ_JOB $SLAQ_WORKER $SLAQ_GENERATION $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE \
         $GROUP_RANK $MASTER_ADDR $MASTER_PORT $$\" >> {log}; \
         trap 'echo \"term $SLAQ_JOB $SLAQ_WORKER $SLAQ_GENERATION $$\" >> {log}; exit 0' TERM; \
         while :; do sleep 0.05; done",
        log = log.display()
    );
    let agents = [agent(&nats.url, "n1", "node-1", &script, &dir), agent(&nats.url, "n2", "node-2", &script, &dir)];

    // Alone, a job runs on all four slots; with a second job, fair gives each two; when the
    // second leaves, the first grows back to four.
    let a = job(&c, &s, "job-a").await;
    wait_for_file(&log, "job-a on 4 workers", |t| has_world(t, "job-a", 4)).await;
    let b = job(&c, &s, "job-b").await;
    wait_for_file(&log, "job-a and job-b on 2 each", |t| has_world(t, "job-a", 2) && has_world(t, "job-b", 2)).await;
    drop(b);
    let bye = JobEnd { job: "job-b".into(), reason: EndReason::Finished };
    bus::publish(&c, s.job_bye("job-b"), Encoding::MsgPack, &bye).await.unwrap();
    wait_for_file(&log, "job-a back on 4", |t| {
        let g = generations(&parse(t));
        g.keys().filter(|(j, _)| j == "job-a").count() >= 3 && has_world(t, "job-a", 4)
    })
    .await;

    // A whole agent is killed (SIGKILL): its processes die with it, and once its workers
    // time out the job goes on in a new generation on the two that are left.
    let [n1, mut n2] = agents;
    let _ = n2.0.kill();
    let _ = n2.0.wait();
    let killed_at = parse(&std::fs::read_to_string(&log).unwrap()).len();
    wait_for_file(&log, "job-a on the two workers left", |t| {
        parse(t)[killed_at..].iter().any(|l| l.start && l.worker.starts_with("n1")) && has_world(t, "job-a", 2)
    })
    .await;
    drop(a);

    // The other agent stops: every process it runs gets SIGTERM.
    let mut n1 = n1;
    let _ = Command::new("kill").args(["-TERM", &n1.0.id().to_string()]).status();
    let status = n1.0.wait().expect("the agent exits");
    assert!(status.success(), "the agent exits cleanly on SIGTERM: {status}");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = parse(&text);

    // Every generation: ranks 0..N−1 once each, one world size, one rendezvous, ranks
    // contiguous per machine with the local ranks and world of its machine.
    let gens = generations(&lines);
    for ((job, generation), starts) in &gens {
        let world = starts[0].ranks.as_ref().unwrap().1;
        let rendezvous = starts[0].ranks.as_ref().map(|r| (r.5.clone(), r.6)).unwrap();
        let ranks: BTreeSet<u32> = starts.iter().map(|l| l.ranks.as_ref().unwrap().0).collect();
        assert_eq!(ranks.len(), starts.len(), "{job} generation {generation}: a rank twice: {starts:?}");
        assert_eq!(ranks, (0..world).collect(), "{job} generation {generation}: not one world: {starts:?}");
        for l in starts {
            let (rank, w, local_rank, local_world, group_rank, addr, port) = l.ranks.clone().unwrap();
            assert_eq!((w, (addr, port)), (world, rendezvous.clone()), "{job} generation {generation}: {starts:?}");
            let machine = &l.worker[..2];
            let same: Vec<&Line> = starts.iter().filter(|o| o.worker.starts_with(machine)).collect();
            assert_eq!(local_world as usize, same.len(), "{l:?}");
            assert!(local_rank < local_world && rank >= local_rank, "{l:?}");
            assert!(
                same.iter().all(|o| o.ranks.as_ref().unwrap().4 == group_rank),
                "one group rank per machine: {starts:?}"
            );
        }
    }
    let worlds: BTreeSet<u32> =
        gens.iter().filter(|((j, _), _)| j == "job-a").map(|(_, s)| s[0].ranks.as_ref().unwrap().1).collect();
    assert!(worlds.len() >= 2, "job-a ran at two world sizes at least: {worlds:?}");
    // No rendezvous port is handed out again while a process that held it may still be
    // stopping (ports cool for a minute; this test is shorter): every generation has its own.
    let ports: Vec<u16> = gens.values().map(|s| s[0].ranks.as_ref().unwrap().6).collect();
    assert_eq!(ports.iter().collect::<BTreeSet<_>>().len(), ports.len(), "a port reused: {gens:?}");

    // Every process started was stopped with SIGTERM (it logged it), on each worker before the
    // next one started there, and none is left.
    let mut per_worker: BTreeMap<&str, Vec<&Line>> = BTreeMap::new();
    for l in &lines {
        let seq = per_worker.entry(l.worker.as_str()).or_default();
        // A process may get SIGTERM twice and log both: its agent signals the process group,
        // guard included, and the guard passes SIGTERM on to every descendant. One stop.
        if !l.start && seq.last().is_some_and(|last| !last.start && last.pid == l.pid) {
            continue;
        }
        seq.push(l);
    }
    for (worker, seq) in &per_worker {
        for pair in seq.chunks(2) {
            match pair {
                [start, term] => assert!(
                    start.start && !term.start && start.pid == term.pid,
                    "{worker}: a process not stopped before the next started: {seq:?}"
                ),
                // The killed agent's last processes died with it, without a word.
                [start] if worker.starts_with("n2") && start.start => {}
                _ => panic!("{worker}: a process never got SIGTERM: {seq:?}"),
            }
        }
    }
    for l in lines.iter().filter(|l| l.start) {
        // Running, or stopped but not yet reaped (a zombie, state Z, is gone but for its entry;
        // the orphans of the killed agent are reaped by init whenever it gets to them).
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", l.pid)).unwrap_or_default();
        let state = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next());
        assert!(
            matches!(state, None | Some("Z") | Some("X")),
            "process {} of {} is still running: {stat}",
            l.pid,
            l.job
        );
    }
}
