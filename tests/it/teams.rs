//! Teams over a real nats-server with the shipped `deploy/nats/slaq-auth.conf` (issue #32): a
//! job's tenant is the first token of its id, `TENANT.NAME`, which nats-server's permissions
//! confine each team's user to; the scheduler reads it from the subject, plans each tenant
//! inside its quota and reports every tenant's workers.

use std::path::Path;
use std::time::Duration;

use slaq::bus;
use slaq::protocol::{Ack, Encoding, EndReason, JobEnd, JobSpec, Subjects, WorkerSpec};

use crate::harness::{NatsServer, Scheduler, eventually, fast_settings, loss_report};
use crate::security::connect_as;

const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/nats/slaq-auth.conf");

async fn hello(c: &async_nats::Client, s: &Subjects, spec: &JobSpec) -> Ack {
    bus::request(c, s.job_hello(&spec.job), Encoding::MsgPack, spec, Duration::from_secs(5)).await.expect("an answer")
}

#[tokio::test]
async fn a_team_can_speak_only_for_its_own_tenant_and_each_tenant_keeps_its_guarantee() {
    assert!(Path::new(CONF).exists());
    let nats = NatsServer::start_with_config(Path::new(CONF));
    let settings = fast_settings(
        "policy = \"fair\"\n\
         [nats.auth]\nuser = \"scheduler\"\npassword = \"scheduler-example-password\"\ninbox_prefix = \"_INBOX.scheduler\"\n\
         [nats.state_auth]\nuser = \"scheduler-state\"\npassword = \"scheduler-state-example-password\"\ninbox_prefix = \"_INBOX.scheduler-state\"\n\
         [tenants.team-a]\nguaranteed = 1\n[tenants.team-b]\nguaranteed = 1\n",
    );
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();
    let (operator, _) = connect_as(&nats.url, "operator").await;
    crate::harness::wait_status(&operator, &s).await;

    // Two workers.
    let (w1, _) = connect_as(&nats.url, "w1").await;
    let (w2, _) = connect_as(&nats.url, "w2").await;
    for (c, id) in [(&w1, "w1"), (&w2, "w2")] {
        let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok, "{ack:?}");
    }
    let _beats = crate::harness::beat(vec![(w1.clone(), "w1"), (w2.clone(), "w2")], &s);

    // Team A's job, on its own credentials; and team A publishing as team B: refused by the
    // server (a permissions violation), never seen by the scheduler.
    let (team_a, a_events) = connect_as(&nats.url, "team-a").await;
    let a_job = JobSpec { tenant: Some("team-b".into()), ..JobSpec::new("team-a.train") };
    assert!(hello(&team_a, &s, &a_job).await.ok);
    let before = a_events.server_errors.load(std::sync::atomic::Ordering::Relaxed);
    bus::publish(&team_a, s.job_hello("team-b.forged"), Encoding::MsgPack, &JobSpec::new("team-b.forged"))
        .await
        .unwrap();
    bus::publish(&team_a, s.job_loss("team-b.train"), Encoding::MsgPack, &loss_report("team-b.train", 1))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a_events.server_errors.load(std::sync::atomic::Ordering::Relaxed) < before + 2 {
        assert!(std::time::Instant::now() < deadline, "nats-server did not refuse team A publishing as team B");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (team_b, _) = connect_as(&nats.url, "team-b").await;
    assert!(hello(&team_b, &s, &JobSpec::new("team-b.train")).await.ok);
    for iter in 1..=3 {
        bus::publish(&team_a, s.job_loss("team-a.train"), Encoding::MsgPack, &loss_report("team-a.train", iter))
            .await
            .unwrap();
        bus::publish(&team_b, s.job_loss("team-b.train"), Encoding::MsgPack, &loss_report("team-b.train", iter))
            .await
            .unwrap();
    }
    // Each tenant holds its guarantee of one worker.
    let status = eventually(&operator, &s, Duration::from_secs(15), "each tenant at its guarantee", |st| {
        ["team-a", "team-b"].iter().all(|t| st.tenants.get(*t).is_some_and(|u| u.workers == 1 && u.guaranteed == 1))
    })
    .await;
    assert_eq!(status.jobs.iter().map(|j| j.job.as_str()).collect::<Vec<_>>(), ["team-a.train", "team-b.train"]);
    // Team A's job said hello with `tenant: "team-b"` in its body: it counts as its subject's
    // tenant, team A, in everything the scheduler plans and reports (issue #40).
    assert_eq!(
        (status.tenants["team-a"].jobs, status.tenants["team-b"].jobs),
        (1, 1),
        "a hello whose body names team B counts for its subject's tenant: {:?}",
        status.tenants
    );

    // 1,000 messages from team A, on its own subjects, whose bodies name team B in every way a
    // body can (the job's id, the tenant field, a report's job), or are bytes: not one job is
    // created for team B, and what is accepted is team A's.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..1000u64 {
        let own = format!("team-a.f{}", i % 40);
        let r = next();
        let (subject, payload) = match r % 5 {
            0 => (
                s.job_hello(&own),
                slaq::protocol::encode(Encoding::MsgPack, &JobSpec::new(&format!("team-b.f{i}"))).unwrap(),
            ),
            1 => {
                let spec = JobSpec { tenant: Some("team-b".into()), ..JobSpec::new(&own) };
                (s.job_hello(&own), slaq::protocol::encode(Encoding::MsgPack, &spec).unwrap())
            }
            2 => (
                s.job_loss(&own),
                slaq::protocol::encode(Encoding::MsgPack, &loss_report("team-b.train", i + 1)).unwrap(),
            ),
            3 => {
                let end = JobEnd { job: "team-b.train".into(), reason: EndReason::Finished };
                (s.job_bye(&own), slaq::protocol::encode(Encoding::MsgPack, &end).unwrap())
            }
            _ => (s.job_hello(&own), (0..(r % 64)).map(|k| (next() >> (k % 8)) as u8).collect()),
        };
        team_a.publish(subject, payload.into()).await.unwrap();
    }
    let status = eventually(&operator, &s, Duration::from_secs(15), "the fuzzed hellos counted", |st| {
        st.tenants.get("team-a").is_some_and(|u| u.jobs > 1)
    })
    .await;
    let of_b: Vec<&str> = status.jobs.iter().map(|j| j.job.as_str()).filter(|j| j.starts_with("team-b.")).collect();
    assert_eq!(of_b, ["team-b.train"], "jobs created for team B");
    assert_eq!(status.tenants["team-b"].jobs, 1);
    assert!(status.jobs.iter().all(|j| j.job.starts_with("team-a.") || j.job == "team-b.train"));
    // Team A now has dozens of jobs and team B one: by fair share alone B's job would get
    // nothing; its tenant's guarantee keeps it one worker.
    let status = eventually(&operator, &s, Duration::from_secs(15), "team B keeps its guarantee", |st| {
        st.tenants.get("team-a").is_some_and(|u| u.jobs > 10 && u.workers == 1)
            && st.tenants.get("team-b").is_some_and(|u| u.workers == 1)
    })
    .await;
    assert_eq!(status.jobs.iter().find(|j| j.job == "team-b.train").map(|j| j.workers), Some(1));

    // Team B's job ends: team A borrows B's idle guarantee; B lends it.
    let end = JobEnd { job: "team-b.train".into(), reason: EndReason::Finished };
    bus::publish(&team_b, s.job_bye("team-b.train"), Encoding::MsgPack, &end).await.unwrap();
    eventually(&operator, &s, Duration::from_secs(15), "team A borrows team B's idle worker", |st| {
        let (a, b) = (st.tenants.get("team-a"), st.tenants.get("team-b"));
        a.is_some_and(|a| a.workers == 2 && a.borrowed == 1) && b.is_some_and(|b| b.lent == 1 && b.jobs == 0)
    })
    .await;
}

/// A reclaim end to end with two worker agents (`agent::run`, what `slaq worker` runs): team B's
/// job holds both workers while team A has nothing; team A's job arrives, and team B's process
/// on the worker taken back gets SIGTERM (its handler runs) and, as it does not exit, SIGKILL
/// after team B's grace (`grace_s`, on the assignment; the agents' own is far longer); team B's
/// job goes on with one worker, and none of its reports is lost.
#[tokio::test]
async fn a_lent_guarantee_comes_back_through_a_graceful_stop_and_no_report_is_lost() {
    let reclaimed = reclaim(1.0, 1.0, false).await;
    eprintln!("teams: team A's worker came back in {reclaimed:?} (team B's grace 1 s, the agents' 60 s)");
}

/// #40.3: team B's grace is 120 s, team A's 1 s. A worker B borrowed from A's guarantee comes
/// with A's terms: B's process there gets A's 1 s, not its own 120 s (so A's promise, epoch +
/// its grace + restart, depends on its own setting only), through the job guard (the agent's
/// second SIGTERM ends the guard's longer grace). The code before waited B's 120 s.
#[tokio::test]
async fn a_borrowed_worker_comes_back_within_the_lenders_grace_not_the_borrowers() {
    let reclaimed = reclaim(1.0, 120.0, true).await;
    eprintln!("teams: team A's worker came back in {reclaimed:?} (team A's grace 1 s, team B's 120 s, guarded)");
}

/// The reclaim above with these tenants' graces, the agents' processes under `slaq job-guard`
/// or not; returns how long team A waited for its worker.
async fn reclaim(grace_a: f64, grace_b: f64, guarded: bool) -> Duration {
    use slaq::agent::{self, AgentConfig};
    let nats = NatsServer::start();
    let settings = fast_settings(&format!(
        "policy = \"fair\"\nmin_generation_ms = 0\n[tenants.team-a]\nguaranteed = 1\ngrace_s = {grace_a:?}\n[tenants.team-b]\nguaranteed = 1\ngrace_s = {grace_b:?}\n",
    ));
    let _scheduler = crate::harness::InProcessScheduler::start(&nats.url, &settings);
    let s = Subjects::new("slaq").unwrap();
    let dir = crate::harness::temp_dir("teams-reclaim");
    let log = dir.join("runs.txt");
    // Each generation's process: says it started, and on SIGTERM says so and goes on (as a job
    // that takes its time to save would): only SIGKILL, after its grace, ends it.
    // Released by the test at its end (a file), so that stopping the agents waits no grace.
    let release = log.with_file_name("release");
    let exec = saving_exec(&log, &release);
    // The agents' own grace: far longer than the tenants' 1 s, which their assignments carry.
    let grace = Duration::from_secs(60);
    let mut stops = Vec::new();
    for id in ["w1", "w2"] {
        let config = AgentConfig {
            beat_every: Duration::from_millis(200),
            exec: Some(exec.clone()),
            stop_grace: grace,
            guard: guarded.then(crate::harness::slaq_bin),
            ..AgentConfig::new(
                s.clone(),
                WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None },
            )
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let client = crate::harness::client(&nats.url).await;
        stops.push((
            stop_tx,
            tokio::spawn(agent::run(client, config, async move {
                let _ = stop_rx.await;
            })),
        ));
    }
    let c = crate::harness::client(&nats.url).await;
    crate::harness::wait_status(&c, &s).await;
    // Team B's job reports all along: every report must be counted.
    assert!(hello(&c, &s, &JobSpec::new("team-b.train")).await.ok);
    let reports = {
        let (c, s) = (c.clone(), s.clone());
        tokio::spawn(async move {
            for iter in 1..=150u64 {
                bus::publish(&c, s.job_loss("team-b.train"), Encoding::MsgPack, &loss_report("team-b.train", iter))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        })
    };
    eventually(&c, &s, Duration::from_secs(15), "team B's job on both workers", |st| {
        st.tenants.get("team-b").is_some_and(|u| u.workers == 2 && u.lent == 0) && st.tenants["team-a"].lent == 1
    })
    .await;
    crate::harness::wait_for_file(&log, "team B's processes on both workers", |t| {
        t.contains("team-b.train w1 start") && t.contains("team-b.train w2 start")
    })
    .await;

    // Team A's job arrives: its worker comes back through team B's graceful stop.
    let asked = std::time::Instant::now();
    assert!(hello(&c, &s, &JobSpec::new("team-a.train")).await.ok);
    for iter in 1..=3 {
        bus::publish(&c, s.job_loss("team-a.train"), Encoding::MsgPack, &loss_report("team-a.train", iter))
            .await
            .unwrap();
    }
    let text = crate::harness::wait_for_file(&log, "team A's process started on a worker of team B's", |t| {
        t.contains("team-a.train w")
    })
    .await;
    let reclaimed = asked.elapsed();
    let line = text.lines().find(|l| l.starts_with("team-a.train")).unwrap().to_string();
    let worker = line.split(' ').nth(1).unwrap();
    // Team B's process there was stopped by SIGTERM (its handler ran), before team A's started.
    let stopped = text.find(&format!("team-b.train {worker} term")).expect("team B's process there stopped gracefully");
    assert!(stopped < text.find(&line).unwrap(), "{text}");
    // Within R: an epoch (0.1 s), team A's grace (1 s) and a restart, with room for a loaded
    // CI; far from the agents' own 60 s and from team B's grace when longer.
    assert!(reclaimed < Duration::from_secs(15), "reclaimed in {reclaimed:?}");
    let status = eventually(&c, &s, Duration::from_secs(15), "each tenant at its guarantee", |st| {
        ["team-a", "team-b"].iter().all(|t| st.tenants.get(*t).is_some_and(|u| u.workers == 1 && u.borrowed == 0))
    })
    .await;
    assert_eq!(
        status.jobs.iter().map(|j| (j.job.as_str(), j.workers)).collect::<Vec<_>>(),
        [("team-a.train", 1), ("team-b.train", 1)]
    );
    // Team B's job went on, on one worker, in a new generation; none of its reports was lost.
    reports.await.unwrap();
    eventually(&c, &s, Duration::from_secs(15), "every report of team B counted", |st| {
        st.jobs.iter().any(|j| j.job == "team-b.train" && j.points == 150 && j.dropped == 0)
    })
    .await;
    std::fs::write(&release, "").unwrap();
    for (stop, agent) in stops {
        let _ = stop.send(());
        let _ = agent.await;
    }
    reclaimed
}

/// A generation's process (an agent's `--exec`) that writes `$SLAQ_JOB $SLAQ_WORKER start` to
/// `log`, and on SIGTERM `... term` and goes on (as a job that takes its time to save would),
/// until `release` exists: only SIGKILL, after its grace, ends it before.
pub(crate) fn saving_exec(log: &Path, release: &Path) -> String {
    format!(
        "trap 'echo \"$SLAQ_JOB $SLAQ_WORKER term\" >> {log}' TERM; echo \"$SLAQ_JOB $SLAQ_WORKER start\" >> {log}; while [ ! -e {release} ]; do sleep 0.05; done",
        log = log.display(),
        release = release.display()
    )
}

/// `[tenants]` reloads on SIGHUP without a restart: a tenant added is served from then on, a
/// guarantee changed is planned with, and a file that does not check out changes nothing.
#[tokio::test]
async fn tenants_reload_on_sighup_and_a_bad_file_keeps_those_served() {
    let nats = NatsServer::start();
    let base = fast_settings("policy = \"fair\"\n");
    let scheduler = Scheduler::start(&nats.url, &format!("{base}[tenants.team-a]\nguaranteed = 1\n"));
    let c = crate::harness::client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    crate::harness::wait_status(&c, &s).await;
    let refused = hello(&c, &s, &JobSpec::new("team-c.x")).await;
    assert!(!refused.ok && refused.error.as_deref().is_some_and(|e| e.contains("tenant")), "{refused:?}");

    std::fs::write(
        scheduler.config_path(),
        format!("{base}[tenants.team-a]\nguaranteed = 1\n[tenants.team-c]\nguaranteed = 1\nweight = 2.0\n"),
    )
    .unwrap();
    scheduler.hangup();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !hello(&c, &s, &JobSpec::new("team-c.x")).await.ok {
        assert!(std::time::Instant::now() < deadline, "team C never served after SIGHUP");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually(&c, &s, Duration::from_secs(10), "team C in the status", |st| {
        st.tenants.get("team-c").is_some_and(|u| u.jobs == 1)
    })
    .await;

    // A bad file: refused, the tenants served stay (team C is still accepted).
    std::fs::write(scheduler.config_path(), format!("{base}[tenants.team-a]\nweight = 0\n")).unwrap();
    scheduler.hangup();
    crate::harness::wait_for_file(&scheduler.log, "the reload refused", |t| t.contains("not reloaded")).await;
    assert!(hello(&c, &s, &JobSpec::new("team-c.y")).await.ok);
}

/// A job that says hello and then reports an iteration every 50 ms until dropped.
/// Workers w1 and w2, said hello and kept beating (while the returned task lives).
async fn two_workers(c: &async_nats::Client, s: &Subjects) -> crate::harness::Background {
    workers(c, s, &["w1", "w2"]).await
}

/// Workers `ids`, said hello and kept beating (while the returned task lives).
async fn workers(c: &async_nats::Client, s: &Subjects, ids: &[&'static str]) -> crate::harness::Background {
    for &id in ids {
        let spec = WorkerSpec { worker: id.into(), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok, "{ack:?}");
    }
    crate::harness::beat(ids.iter().map(|&id| (c.clone(), id)).collect(), s)
}

/// The workers job `job` holds, as `status` says.
fn workers_of(st: &slaq::protocol::StatusSnapshot, job: &str) -> u32 {
    st.jobs.iter().find(|j| j.job == job).map_or(0, |j| j.workers)
}

fn reporting(c: async_nats::Client, s: Subjects, job: &'static str) -> crate::harness::Background {
    reporting_as(c, s, JobSpec::new(job))
}

/// A job with `spec` that says hello and then reports an iteration every 50 ms until dropped.
fn reporting_as(c: async_nats::Client, s: Subjects, spec: JobSpec) -> crate::harness::Background {
    crate::harness::Background::spawn(async move {
        let job = spec.job.clone();
        let job = job.as_str();
        assert!(hello(&c, &s, &spec).await.ok, "{job}'s hello");
        for iter in 1u64.. {
            let _ = bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Issue #43, `min_run_s` live: tenant a's job got both workers while alone; tenant b's job
/// arrives, and within a's `min_run_s` (an hour) neither of a's workers goes to b, though both
/// tenants are above their guarantees of 0 (without the hold their weights split the two, 1
/// and 1: `actors::allocator`'s test); tenant c, guaranteed 1, gets its worker back through the
/// hold at once.
#[tokio::test]
async fn min_run_s_holds_a_jobs_workers_live_and_a_guarantee_comes_back_through_it() {
    let nats = NatsServer::start();
    let settings = fast_settings(
        "[tenants.a]\nguaranteed = 0\nmin_run_s = 3600\n[tenants.b]\nguaranteed = 0\n[tenants.c]\nguaranteed = 1\n",
    );
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = crate::harness::client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    crate::harness::wait_status(&c, &s).await;
    let _beats = two_workers(&c, &s).await;
    let _a = reporting(c.clone(), s.clone(), "a.x");
    eventually(&c, &s, Duration::from_secs(15), "a's job alone takes both workers", |st| workers_of(st, "a.x") == 2)
        .await;
    let _b = reporting(c.clone(), s.clone(), "b.y");
    eventually(&c, &s, Duration::from_secs(15), "b's job known and bidding", |st| {
        st.jobs.iter().any(|j| j.job == "b.y" && j.points >= 5)
    })
    .await;
    // Thirty epochs and more: a keeps both, b gets none.
    for _ in 0..30 {
        let st = crate::harness::wait_status(&c, &s).await;
        assert_eq!((workers_of(&st, "a.x"), workers_of(&st, "b.y")), (2, 0), "the hold broke: {:?}", st.tenants);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _c = reporting(c.clone(), s.clone(), "c.z");
    eventually(&c, &s, Duration::from_secs(15), "c's guarantee comes back through the hold", |st| {
        workers_of(st, "c.z") == 1 && workers_of(st, "a.x") == 1 && workers_of(st, "b.y") == 0
    })
    .await;
}

/// Issue #43, moves at checkpoints, live: job `x` declares that it saves every 10 minutes (and
/// not at a stop) and reports its checkpoint age; it took both workers while alone. Job `y`
/// arrives: none of x's workers moves while x is between saves, though y bids; x reports a
/// save, and y gets a worker right after it.
#[tokio::test]
async fn a_job_between_saves_keeps_its_workers_live_and_gives_them_up_right_after_a_save() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let nats = NatsServer::start();
    let _scheduler = Scheduler::start(&nats.url, &fast_settings(""));
    let c = crate::harness::client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    crate::harness::wait_status(&c, &s).await;
    let _beats = two_workers(&c, &s).await;
    let saved = Arc::new(AtomicBool::new(false));
    let _x = {
        let (c, s, saved) = (c.clone(), s.clone(), saved.clone());
        crate::harness::Background::spawn(async move {
            let spec = JobSpec { checkpoint_every_s: Some(600.0), ..JobSpec::new("x") };
            assert!(hello(&c, &s, &spec).await.ok, "x's hello");
            let mut last_save = std::time::Instant::now();
            for iter in 1u64.. {
                if saved.swap(false, Ordering::SeqCst) {
                    last_save = std::time::Instant::now();
                }
                let report = slaq::protocol::LossReport {
                    checkpoint_age_s: Some(last_save.elapsed().as_secs_f64()),
                    ..loss_report("x", iter)
                };
                let _ = bus::publish(&c, s.job_loss("x"), Encoding::MsgPack, &report).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    eventually(&c, &s, Duration::from_secs(15), "x alone takes both workers", |st| workers_of(st, "x") == 2).await;
    let _y = reporting(c.clone(), s.clone(), "y");
    eventually(&c, &s, Duration::from_secs(15), "y known and bidding", |st| {
        st.jobs.iter().any(|j| j.job == "y" && j.points >= 5)
    })
    .await;
    for _ in 0..30 {
        let st = crate::harness::wait_status(&c, &s).await;
        assert_eq!((workers_of(&st, "x"), workers_of(&st, "y")), (2, 0), "x moved between saves");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    saved.store(true, Ordering::SeqCst);
    eventually(&c, &s, Duration::from_secs(5), "y gets a worker right after x's save", |st| workers_of(st, "y") >= 1)
        .await;
}

/// Issue #43, priority classes live: tenant a (max_priority 1) has its class-0 job on both
/// workers, held by min_run_s (an hour); a's job of priority 1 arrives and gets both at once
/// (a higher class is served first from its tenant's quota, holds or not); status says so per
/// class.
#[tokio::test]
async fn a_higher_class_takes_its_tenants_workers_live_through_the_hold() {
    let nats = NatsServer::start();
    let settings = fast_settings("[tenants.a]\nguaranteed = 0\nmin_run_s = 3600\nmax_priority = 1\n");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = crate::harness::client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    crate::harness::wait_status(&c, &s).await;
    let _beats = two_workers(&c, &s).await;
    let _low = reporting(c.clone(), s.clone(), "a.low");
    eventually(&c, &s, Duration::from_secs(15), "a's class-0 job takes both workers", |st| {
        workers_of(st, "a.low") == 2
    })
    .await;
    let _high = {
        let (c, s) = (c.clone(), s.clone());
        crate::harness::Background::spawn(async move {
            let spec = JobSpec { priority: 1, ..JobSpec::new("a.high") };
            assert!(hello(&c, &s, &spec).await.ok, "a.high's hello");
            for iter in 1u64.. {
                let _ = bus::publish(&c, s.job_loss("a.high"), Encoding::MsgPack, &loss_report("a.high", iter)).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let st = eventually(&c, &s, Duration::from_secs(10), "a's class 1 gets a's workers through the hold", |st| {
        workers_of(st, "a.high") == 2 && workers_of(st, "a.low") == 0
    })
    .await;
    let classes = &st.tenants["a"].classes;
    assert_eq!((classes["1"].workers, classes["0"].workers, classes["0"].waiting), (2, 0, 1), "{classes:?}");
}

/// Issue #43, `JobSpec.weight` live, under `fair`: tenant a (max_weight 3) has `a.heavy`, which
/// asks for weight 10 (capped to 3), and `a.light` (1): a's four workers go 3 and 1 (unweighted,
/// 2 and 2; uncapped, 4 and 0). Tenant b (max_weight 1, the default) asks weight 3 for one of
/// its two jobs: they share b's four equally.
#[tokio::test]
async fn a_jobs_weight_shares_its_tenants_workers_live_capped_by_the_tenant() {
    let nats = NatsServer::start();
    let settings =
        fast_settings("policy = \"fair\"\n[tenants.a]\nguaranteed = 4\nmax_weight = 3\n[tenants.b]\nguaranteed = 4\n");
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let c = crate::harness::client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    crate::harness::wait_status(&c, &s).await;
    let _beats = workers(&c, &s, &["w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8"]).await;
    let weighted = |job: &str, weight: f64| JobSpec { weight, ..JobSpec::new(job) };
    let _jobs: Vec<crate::harness::Background> =
        [("a.heavy", 10.0), ("a.light", 1.0), ("b.plain", 1.0), ("b.pushy", 3.0)]
            .into_iter()
            .map(|(job, w)| reporting_as(c.clone(), s.clone(), weighted(job, w)))
            .collect();
    let expected = [("a.heavy", 3), ("a.light", 1), ("b.plain", 2), ("b.pushy", 2)];
    eventually(&c, &s, Duration::from_secs(15), "each tenant's workers shared by its jobs' weights", |st| {
        expected.iter().all(|&(job, n)| workers_of(st, job) == n)
    })
    .await;
    // And it stays so (fair's remainders would rotate; these shares divide exactly).
    for _ in 0..10 {
        let st = crate::harness::wait_status(&c, &s).await;
        let got: Vec<u32> = expected.iter().map(|&(job, _)| workers_of(&st, job)).collect();
        assert_eq!(got, [3, 1, 2, 2], "{:?}", st.jobs);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
