//! Durable state in JetStream: `slaq serve` killed with SIGKILL comes back with every job (its
//! spec and its predictor), every worker and every assignment, and loses no report that
//! JetStream acknowledged, even those sent while it was down.

use std::collections::BTreeMap;
use std::time::Duration;

use slaq::bus;
use slaq::protocol::{Ack, Encoding, JobSpec, LossReport, StatusSnapshot, Subjects, WorkerSpec};

use crate::harness::{Background, NatsServer, Scheduler, client, eventually, fast_settings};

/// The restart test's size: 20 jobs by default; `SLAQ_SCALE_TEST=1` runs 1,000 jobs on 4,000
/// workers (a minute or so; its figures are printed).
struct Scale {
    jobs: usize,
    /// Workers per job that is not limited to one.
    per_job: usize,
}

impl Scale {
    fn get() -> Scale {
        match std::env::var("SLAQ_SCALE_TEST").as_deref() {
            Ok("1") => Scale { jobs: 1000, per_job: 5 },
            _ => Scale { jobs: 20, per_job: 3 },
        }
    }

    /// Every fourth job may use one worker; the others share the rest equally under `fair`, an
    /// allocation that does not change from epoch to epoch, so any move would be the restart's.
    /// (slaq's allocation moves some workers between epochs by design, restart or not.)
    /// Settings: fast epochs for the small run; at scale (a debug build answering 4,000
    /// workers' heartbeats) the production timeout and half-second epochs.
    fn settings(&self) -> String {
        if self.jobs > 100 {
            "[scheduler]\npolicy = \"fair\"\nepoch_ms = 500\nworker_timeout_ms = 15000\nrefit_interval_ms = 100\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 500\nreport_history = 10\n".into()
        } else {
            settings()
        }
    }

    /// How often the test's workers beat.
    fn beat_every(&self) -> Duration {
        Duration::from_millis(if self.jobs > 100 { 2000 } else { 200 })
    }

    fn limited(&self, j: usize) -> bool {
        j.is_multiple_of(4)
    }

    fn workers(&self) -> usize {
        (0..self.jobs).map(|j| if self.limited(j) { 1 } else { self.per_job }).sum()
    }
}

/// The stream keeps 10 reports per job: a restarted scheduler's 30 points per job must come
/// from its saved predictors, not from replaying the stream.
fn settings() -> String {
    fast_settings("policy = \"fair\"\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\nreport_history = 10\n")
}

fn loss(job: usize, iter: u64) -> f64 {
    let k = iter as f64;
    1.0 + (job as f64 + 1.0) * (-0.03 * (1.0 + job as f64 / 10.0) * k).exp()
}

fn job_id(j: usize) -> String {
    format!("dj{j:04}")
}

/// Publishes reports `iters` of every job through JetStream and waits for every ack.
async fn report_acked(
    js: &async_nats::jetstream::Context,
    s: &Subjects,
    jobs: usize,
    iters: std::ops::RangeInclusive<u64>,
) {
    for iter in iters {
        let mut acks = Vec::with_capacity(jobs);
        for j in 0..jobs {
            let r = LossReport::new(job_id(j), iter, loss(j, iter), 0.5, 1);
            let payload = slaq::protocol::encode(Encoding::MsgPack, &r).unwrap();
            acks.push(js.publish(s.job_loss(&job_id(j)), payload.into()).await.expect("publish"));
        }
        for ack in futures_util::future::join_all(acks.into_iter().map(|a| a.into_future())).await {
            ack.expect("JetStream acknowledges the report");
        }
    }
}

fn assignments(st: &StatusSnapshot) -> BTreeMap<String, Option<String>> {
    st.workers.iter().map(|w| (w.worker.clone(), w.job.clone())).collect()
}

/// The layout a scheduler without saved assignments would make for the counts in `st`.
fn fresh_layout(st: &StatusSnapshot) -> BTreeMap<String, Option<String>> {
    let ids: Vec<&str> = st.jobs.iter().map(|j| j.job.as_str()).collect();
    let counts: Vec<u32> = st.jobs.iter().map(|j| j.workers).collect();
    let placed = slaq::schedule::place::fewest_moves(&counts, &vec![None; st.workers.len()]);
    st.workers.iter().zip(placed).map(|(w, job)| (w.worker.clone(), job.map(|j| ids[j].to_string()))).collect()
}

fn all_points(st: &StatusSnapshot, jobs: usize, n: u64) -> bool {
    st.num_jobs == jobs && !st.truncated && st.jobs.iter().all(|j| j.points == n)
}

#[tokio::test]
async fn a_killed_scheduler_comes_back_with_its_jobs_workers_and_every_acknowledged_report() {
    let scale = Scale::get();
    let (jobs, workers) = (scale.jobs, scale.workers());
    let nats = NatsServer::start_jetstream();
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    let js = async_nats::jetstream::new(c.clone());
    let scheduler = Scheduler::start(&nats.url, &scale.settings());
    crate::harness::wait_status(&c, &s).await;
    let wait = Duration::from_secs(if jobs > 100 { 120 } else { 30 });

    // Workers keep beating throughout (they do not know the scheduler restarts).
    let worker_ids: Vec<String> = (0..workers).map(|w| format!("dw{w:04}")).collect();
    for id in &worker_ids {
        let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack =
            bus::request(&c, s.worker_hello(id), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok);
    }
    let (beat_client, subjects, every) = (c.clone(), s.clone(), scale.beat_every());
    let beats = Background::spawn(async move {
        loop {
            for id in &worker_ids {
                let hb = slaq::protocol::Heartbeat::new(id);
                let _ = bus::publish(&beat_client, subjects.worker_beat(id), Encoding::MsgPack, &hb).await;
            }
            tokio::time::sleep(every).await;
        }
    });
    // The last job alone first, then the rest of the odd half, then the even half, each stage
    // once the one before holds every worker: the layout then depends on that history (the
    // fewest moves from each stage; the last job keeps the lowest workers, where a fresh layout
    // puts the first), not only on the counts, so a scheduler that lost its saved assignments
    // could not place the workers the same again. (With the odd half at once, a first epoch
    // that saw all of it made a layout close to a fresh one: seen under load.)
    let hello = |j: usize| {
        let (c, s, max_workers) = (c.clone(), s.clone(), scale.limited(j).then_some(1));
        async move {
            let spec = JobSpec { max_workers, ..JobSpec::new(&job_id(j)) };
            let ack: Ack = bus::request(&c, s.job_hello(&spec.job), Encoding::MsgPack, &spec, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(ack.ok);
        }
    };
    let last = (0..jobs).rev().find(|&j| j % 2 == 1 && !scale.limited(j)).expect("an unlimited odd job");
    let stages = [vec![last], (0..jobs).filter(|&j| j % 2 == 1 && j != last).collect::<Vec<_>>()];
    for (stage, ids) in stages.iter().enumerate() {
        for &j in ids {
            hello(j).await;
        }
        let known = if stage == 0 { 1 } else { jobs / 2 };
        eventually(&c, &s, wait, "the jobs so far hold every worker", |st| {
            st.num_jobs == known && st.num_workers == workers && st.workers.iter().all(|w| w.job.is_some())
        })
        .await;
    }
    for j in (0..jobs).filter(|j| j % 2 == 0) {
        hello(j).await;
    }
    report_acked(&js, &s, jobs, 1..=30).await;
    // Settled: fair's allocation for these jobs (a limited job one worker, the others
    // `per_job`), not merely every worker busy, which the first half's layout also is.
    let settled = |st: &StatusSnapshot| {
        all_points(st, jobs, 30)
            && st.num_workers == workers
            && st.workers.iter().all(|w| w.job.is_some())
            && st.jobs.iter().all(|j| {
                let limited = j.job[2..].parse::<usize>().is_ok_and(|n| scale.limited(n));
                j.workers as usize == if limited { 1 } else { scale.per_job }
            })
    };
    eventually(&c, &s, wait, "30 points per job, every worker busy", settled).await;
    // The allocation and the predictors are saved (every 100 ms): wait until the bucket holds
    // every job's predictor at 30 points and every worker's assignment as status shows it.
    let kv = js.get_key_value("slaq_state").await.unwrap();
    let saved_deadline = std::time::Instant::now() + wait;
    let before = loop {
        let st = eventually(&c, &s, wait, "status", settled).await;
        let mut all_saved = true;
        for j in st.jobs.iter() {
            let pred = kv.get(format!("pred.{}", j.job)).await.unwrap();
            let points =
                pred.and_then(|b| slaq::actors::job::SavedJob::decode(&b).ok()).map(|p| p.predictor.num_points());
            all_saved &= points == Some(30);
        }
        for w in st.workers.iter() {
            let shard = kv.get(format!("workers.{}", slaq::bus::durable::worker_shard(&w.worker))).await.unwrap();
            let saved = shard.and_then(|v| slaq::bus::durable::decode_worker_shard(&v)).unwrap_or_default();
            all_saved &= saved.iter().any(|s| s.spec.worker == w.worker && s.job == w.job);
        }
        if all_saved {
            break st;
        }
        assert!(std::time::Instant::now() < saved_deadline, "the state was never all saved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The layout a scheduler would make afresh for these counts differs from this one in many
    // workers: the comparison after the restart has teeth.
    let fresh = fresh_layout(&before);
    let differs = assignments(&before).iter().filter(|(w, job)| fresh.get(*w) != Some(job)).count();
    assert!(differs * 10 >= workers, "only {differs} of {workers} workers differ from a fresh layout");

    // SIGKILL: nothing flushed, nothing saved on the way out. Back with the same reports, each
    // job predicts what it predicted before, and the workers are where they were.
    scheduler.kill();
    let restarted = std::time::Instant::now();
    let scheduler = Scheduler::start(&nats.url, &scale.settings());
    let answering = crate::harness::wait_status(&c, &s).await;
    let answered_after = restarted.elapsed();
    let restored = eventually(&c, &s, wait, "every job and worker back", |st| {
        st.epoch >= answering.epoch + 2 && all_points(st, jobs, 30) && st.num_workers == workers
    })
    .await;
    let gains = |st: &StatusSnapshot| -> BTreeMap<String, (u32, Option<f64>)> {
        st.jobs.iter().map(|j| (j.job.clone(), (j.workers, j.predicted_gain))).collect()
    };
    let mut worst_gain_diff: f64 = 0.0;
    for ((job, (w0, g0)), (_, (w1, g1))) in gains(&before).iter().zip(gains(&restored).iter()) {
        assert_eq!(w0, w1, "{job}: workers before and after the restart");
        let (g0, g1) = (g0.expect("a gain before"), g1.expect("a gain after"));
        let diff = (g0 - g1).abs() / g0.abs().max(1e-12);
        worst_gain_diff = worst_gain_diff.max(if (g0 - g1).abs() <= 1e-12 { 0.0 } else { diff });
        assert!((g0 - g1).abs() <= 0.01 * g0.abs() + 1e-12, "{job}: predicted gain {g0} before, {g1} after");
    }
    let (a, b) = (assignments(&before), assignments(&restored));
    let moved = a.iter().filter(|(w, job)| b.get(*w) != Some(job)).count();
    assert!(moved * 100 <= workers, "{moved} of {workers} workers moved across the restart");

    // Killed again; while it is down every job reports five more iterations, acknowledged by
    // JetStream. None is lost.
    scheduler.kill();
    report_acked(&js, &s, jobs, 31..=35).await;
    let _scheduler = Scheduler::start(&nats.url, &scale.settings());
    let after = eventually(&c, &s, wait, "every job back with all 35 points", |st| {
        all_points(st, jobs, 35) && st.num_workers == workers
    })
    .await;

    // Specs survived: the jobs limited to one worker have at most one.
    for j in after.jobs.iter().filter(|j| j.job[2..].parse::<usize>().is_ok_and(|n| scale.limited(n))) {
        assert!(j.workers <= 1, "{} has {} workers but asked for at most 1", j.job, j.workers);
    }
    eprintln!(
        "restart: {jobs} jobs, {workers} workers ({differs} placed unlike a fresh layout); status answered \
         {answered_after:?} after the restart; {moved} workers moved; worst predicted-gain difference {:.4}%; all {} acknowledged reports present",
        worst_gain_diff * 100.0,
        jobs * 35
    );
    drop(beats);
}

/// NATS itself goes away for three worker timeouts, under load, and comes back: the scheduler
/// drops no worker for the silence it could not hear, and everything is back at once.
#[tokio::test]
async fn a_nats_outage_longer_than_the_worker_timeout_loses_no_worker_or_job() {
    const N_JOBS: usize = 10;
    const N_WORKERS: usize = 20;
    let mut nats = NatsServer::start_jetstream();
    let s = Subjects::new("slaq").unwrap();
    let _scheduler = Scheduler::start(&nats.url, &settings());
    let c = client(&nats.url).await;
    crate::harness::wait_status(&c, &s).await;
    for w in 0..N_WORKERS {
        let spec = WorkerSpec { worker: format!("ow{w:02}"), machine: None, slots: 1, kind: None, advertise: None };
        let ack: Ack = bus::request(&c, s.worker_hello(&spec.worker), Encoding::MsgPack, &spec, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(ack.ok);
    }
    for j in 0..N_JOBS {
        let job = format!("oj{j:02}");
        let ack: Ack =
            bus::request(&c, s.job_hello(&job), Encoding::MsgPack, &JobSpec::new(&job), Duration::from_secs(5))
                .await
                .unwrap();
        assert!(ack.ok);
    }
    // Load: workers beat and jobs report all along, ignoring errors while NATS is away.
    let (load_client, subjects) = (c.clone(), s.clone());
    let load = Background::spawn(async move {
        for iter in 1u64.. {
            for w in 0..N_WORKERS {
                let id = format!("ow{w:02}");
                let beat = slaq::protocol::Heartbeat::new(&id);
                let _ = bus::publish(&load_client, subjects.worker_beat(&id), Encoding::MsgPack, &beat).await;
            }
            for j in 0..N_JOBS {
                let job = format!("oj{j:02}");
                let r = LossReport::new(&job, iter, loss(j, iter), 0.2, 2);
                let _ = bus::publish(&load_client, subjects.job_loss(&job), Encoding::MsgPack, &r).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let busy = |st: &StatusSnapshot| {
        st.jobs.len() == N_JOBS && st.workers.len() == N_WORKERS && st.workers.iter().all(|w| w.job.is_some())
    };
    eventually(&c, &s, Duration::from_secs(20), "every worker busy", busy).await;

    // Three worker timeouts (1.5 s each) without NATS.
    nats.stop();
    tokio::time::sleep(Duration::from_millis(4500)).await;
    nats.start_again(true);
    // The first answer after the reconnection already has every worker and job, and within two
    // more epochs every worker is serving a job again.
    let back = eventually(&c, &s, Duration::from_secs(30), "the scheduler answers again", |_| true).await;
    assert_eq!((back.jobs.len(), back.workers.len()), (N_JOBS, N_WORKERS), "{back:#?}");
    let after = eventually(&c, &s, Duration::from_secs(5), "every worker busy again", busy).await;
    assert!(after.epoch <= back.epoch + 3, "took from epoch {} to {}", back.epoch, after.epoch);
    assert!(!after.rejected.contains_key("unknown_worker"), "{:?}", after.rejected);
    drop(load);
}

/// A partition's takeover reads its jobs from the bucket while the other owners keep saving
/// theirs, on a three-server cluster with three copies, as deployed: the read ends (it takes
/// what the bucket held when it began instead of chasing the newer writes to the end of the
/// stream) and finds each of the partition's jobs with its predictor.
#[tokio::test]
async fn a_takeovers_read_ends_while_other_owners_keep_saving() {
    use slaq::bus::durable::{Durable, DurableSettings};
    let nodes = NatsServer::start_cluster(3);
    let c = client(&nodes[0].url).await;
    let subjects = Subjects::new("slaq").unwrap();
    let settings = DurableSettings { replicas: 3, ..DurableSettings::default() };
    let formed = std::time::Instant::now();
    let open = || async {
        loop {
            match Durable::open(&c, &subjects, &settings, slaq::bus::lease::Fence::unfenced()).await {
                Ok(Some(d)) => return d,
                other => assert!(formed.elapsed() < Duration::from_secs(60), "no JetStream cluster: {:?}", other.err()),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let (mine, others) = (open().await, open().await);
    let theirs: Vec<String> = (0..5000).map(|i| format!("theirs-{i:04}")).collect();
    for id in &theirs {
        others.save_job(&JobSpec::new(id));
    }
    others.flush(Duration::from_secs(30)).await;
    // Ours: one-token ids and tenants' jobs (`TENANT.NAME`, a key of three tokens).
    let mut ours: Vec<String> =
        (0..20).map(|i| if i % 2 == 0 { format!("ours-{i:02}") } else { format!("team-{i:02}.ours-{i:02}") }).collect();
    ours.sort();
    for id in &ours {
        mine.save_job(&JobSpec::new(id));
        mine.save_predictor(id, bytes::Bytes::from(format!("predictor of {id}")));
    }
    mine.flush(Duration::from_secs(30)).await;
    // The other owners save their predictors without pause, through the whole read.
    let saving = {
        let kv = async_nats::jetstream::new(c.clone()).get_key_value("slaq_state").await.unwrap();
        let theirs = theirs.clone();
        Background::spawn(async move {
            use futures_util::StreamExt;
            for round in 0u64.. {
                futures_util::stream::iter(&theirs)
                    .for_each_concurrent(256, |id| {
                        let kv = kv.clone();
                        async move {
                            let _ = kv.put(format!("pred.{id}"), format!("{id} round {round}").into()).await;
                        }
                    })
                    .await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reader = open().await;
    let read = tokio::time::timeout(Duration::from_secs(30), reader.load_jobs(|id| id.contains("ours-"))).await;
    drop(saving);
    let jobs = read.expect("the read never ended").expect("read");
    let found: Vec<(String, Option<bytes::Bytes>)> = jobs.into_iter().map(|(s, p)| (s.job, p)).collect();
    let expected: Vec<(String, Option<bytes::Bytes>)> =
        ours.iter().map(|id| (id.clone(), Some(bytes::Bytes::from(format!("predictor of {id}"))))).collect();
    assert_eq!(found, expected);
}

/// State saved in the earlier layout (a key per worker, `worker.<id>` and `assign.<id>`) is
/// restored, each worker with its job, and moved into the workers' shards; a worker forgotten
/// later leaves no key of either layout behind, so no restart brings it back.
#[tokio::test]
async fn workers_saved_a_key_each_are_restored_and_moved_into_their_shards() {
    use slaq::bus::durable::{Durable, DurableSettings, decode_worker_shard, worker_shard};
    let nats = NatsServer::start_jetstream();
    let c = client(&nats.url).await;
    let subjects = Subjects::new("slaq").unwrap();
    let open = || async {
        Durable::open(&c, &subjects, &DurableSettings::default(), slaq::bus::lease::Fence::unfenced())
            .await
            .unwrap()
            .unwrap()
    };
    let d = open().await;
    let kv = async_nats::jetstream::new(c.clone()).get_key_value("slaq_state").await.unwrap();
    let spec =
        |w: &str| WorkerSpec { worker: w.into(), machine: Some("m".into()), slots: 1, kind: None, advertise: None };
    let ids: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    for (i, w) in ids.iter().enumerate() {
        let bytes = slaq::protocol::encode(Encoding::MsgPack, &spec(w)).unwrap();
        kv.put(format!("worker.{w}"), bytes.into()).await.unwrap();
        let job = if i % 2 == 0 { "job-a" } else { "" };
        kv.put(format!("assign.{w}"), job.to_string().into()).await.unwrap();
    }
    let expected = |ids: &[String]| -> BTreeMap<String, Option<String>> {
        ids.iter()
            .map(|w| (w.clone(), (w[1..].parse::<u32>().unwrap() % 2 == 0).then(|| "job-a".to_string())))
            .collect()
    };
    let restored = |state: &slaq::bus::durable::SavedState| -> BTreeMap<String, Option<String>> {
        state.workers.iter().map(|w| (w.worker.clone(), state.assignments.get(&w.worker).cloned())).collect()
    };
    let state = d.load().await.unwrap();
    assert_eq!(restored(&state), expected(&ids));
    d.flush(Duration::from_secs(10)).await;
    let in_shards = || async {
        let mut all = BTreeMap::new();
        for w in &ids {
            let key = format!("workers.{}", worker_shard(w));
            if let Some(v) = kv.get(&key).await.unwrap() {
                for s in decode_worker_shard(&v).expect("a shard") {
                    all.insert(s.spec.worker.clone(), s.job.clone());
                }
            }
        }
        all
    };
    assert_eq!(in_shards().await, expected(&ids), "moved into the shards");
    // Forgotten: gone from both layouts, and from what a restart restores.
    d.forget_worker("w3");
    d.flush(Duration::from_secs(10)).await;
    assert_eq!(kv.get("worker.w3").await.unwrap(), None);
    assert_eq!(kv.get("assign.w3").await.unwrap(), None);
    let rest: Vec<String> = ids.iter().filter(|w| *w != "w3").cloned().collect();
    assert_eq!(in_shards().await, expected(&rest));
    assert_eq!(restored(&open().await.load().await.unwrap()), expected(&rest));
}

/// #33.7: "a state key was written by someone else" was logged (and counted as a conflict)
/// when the other writer was the scheduler itself: a write that timed out here but landed,
/// retried with the revision from before it. Now the key's last write is read after a
/// conflict: under this scheduler's term it is its own (written if it holds the value, written
/// again at once if not); only another writer's write is a conflict.
#[tokio::test]
async fn a_write_that_timed_out_but_landed_is_no_conflict() {
    use slaq::bus::durable::{Durable, DurableSettings};
    use std::sync::atomic::Ordering;
    let nats = NatsServer::start_jetstream();
    let c = client(&nats.url).await;
    let subjects = Subjects::new("slaq").unwrap();
    let d = Durable::open(&c, &subjects, &DurableSettings::default(), slaq::bus::lease::Fence::unfenced())
        .await
        .unwrap()
        .unwrap();
    d.set_term(7);
    let kv = async_nats::jetstream::new(c.clone()).get_key_value("slaq_state").await.unwrap();
    let spec = JobSpec { weight: 2.0, ..JobSpec::new("own") };
    d.save_job(&spec);
    d.flush(Duration::from_secs(10)).await;
    let counters = d.counters();
    assert_eq!(counters.conflicts.load(Ordering::Relaxed), 0);
    // The acknowledgement was lost: the same value again, then a new one.
    d.assume_revision(&slaq::bus::durable::Key::Job("own".into()), 0);
    d.save_job(&spec);
    d.flush(Duration::from_secs(10)).await;
    d.assume_revision(&slaq::bus::durable::Key::Job("own".into()), 0);
    let newer = JobSpec { weight: 3.0, ..JobSpec::new("own") };
    d.save_job(&newer);
    d.flush(Duration::from_secs(10)).await;
    assert_eq!(counters.conflicts.load(Ordering::Relaxed), 0, "its own writes are no conflict");
    let saved: JobSpec =
        slaq::protocol::decode(Encoding::MsgPack, &kv.get("job.own").await.unwrap().unwrap(), "spec").unwrap();
    assert_eq!(saved, newer);
    // Someone else's write is still a conflict.
    kv.put("job.own", slaq::protocol::encode(Encoding::MsgPack, &spec).unwrap().into()).await.unwrap();
    d.save_job(&JobSpec { weight: 4.0, ..JobSpec::new("own") });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while counters.conflicts.load(Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "another writer's write was not a conflict");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server with JetStream whose state user may not use its API: `slaq serve` refuses to start,
/// naming the user and the two ways out, instead of running without durable state. Without
/// durable state on purpose (`state.mode = "none"`) it runs and says so in `status` and
/// `/readyz`; with the state user allowed, `status` says `jetstream`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_user_refused_jetstream_stops_the_scheduler_instead_of_running_without_state() {
    let dir = crate::harness::temp_dir("state-refused");
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        "authorization {\n  users = [\n    { user: bus, password: bus-pw }\n    \
         { user: state, password: state-pw, permissions: { publish: { deny: [\"$JS.API.>\"] } } }\n    \
         { user: state-ok, password: state-ok-pw }\n  ]\n}\n",
    )
    .expect("config");
    let nats = NatsServer::start_with_config(&conf);
    let auth = |state_user: &str| {
        format!(
            "\n[nats.auth]\nuser = \"bus\"\npassword = \"bus-pw\"\n\n[nats.state_auth]\nuser = \"{state_user}\"\npassword = \"{state_user}-pw\"\n"
        )
    };
    // Refused: the process ends, non-zero, and says why and what to do.
    let mut refused = Scheduler::start(&nats.url, &fast_settings(&auth("state")));
    let status = refused.exits_within(Duration::from_secs(30)).expect("slaq serve must not run without its state");
    assert!(!status.success(), "it exited {status}");
    let text = refused.log_text();
    for needed in [
        "has JetStream but the state connection (user state) cannot use it",
        "state.mode = \"none\"",
        "[nats.state_auth]",
    ] {
        assert!(text.contains(needed), "the error names {needed:?}; log:\n{text}");
    }

    let bus_client = async_nats::ConnectOptions::with_user_and_password("bus".into(), "bus-pw".into())
        .connect(nats.url.as_str())
        .await
        .expect("bus user connects");
    let s = Subjects::new("slaq").unwrap();
    // On purpose without state: it runs, and status and /readyz say so.
    let port = crate::harness::free_port();
    let none = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n\n[state]\nmode = \"none\"\n{}", auth("state"));
    let without = Scheduler::start(&nats.url, &fast_settings(&none));
    let st = crate::harness::wait_status(&bus_client, &s).await;
    assert_eq!(st.state, "none");
    let url = format!("http://127.0.0.1:{port}/readyz");
    let body = crate::observe::get_until(&url, "readyz says ready", |status, _| status == 200).await;
    assert!(body.contains("state: none"), "{body}");
    without.terminate();

    // Allowed: durable state, and status says so.
    let _with = Scheduler::start(&nats.url, &fast_settings(&auth("state-ok")));
    eventually(&bus_client, &s, Duration::from_secs(20), "a status that says jetstream", |st| st.state == "jetstream")
        .await;
}
