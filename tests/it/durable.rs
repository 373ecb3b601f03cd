//! Durable state in JetStream: `slaq serve` killed with SIGKILL comes back with every job (its
//! spec and its predictor), every worker and every assignment, and loses no report that
//! JetStream acknowledged, even those sent while it was down.

use std::collections::BTreeMap;
use std::time::Duration;

use slaq::bus;
use slaq::protocol::{Ack, Encoding, JobSpec, LossReport, StatusSnapshot, Subjects, WorkerSpec};

use crate::harness::{NatsServer, Scheduler, client, eventually, fast_settings};

const JOBS: usize = 20;
/// Seven jobs may use one worker, thirteen share the other 39: three each under `fair`, an
/// allocation that does not change from epoch to epoch, so any move would be the restart's.
/// (slaq's allocation moves some workers between epochs by design, restart or not.)
const WORKERS: usize = 46;

fn settings() -> String {
    fast_settings("policy = \"fair\"\n\n[state]\nmode = \"jetstream\"\nsnapshot_ms = 100\n")
}

fn loss(job: usize, iter: u64) -> f64 {
    let k = iter as f64;
    1.0 + (job as f64 + 1.0) * (-0.03 * (1.0 + job as f64 / 10.0) * k).exp()
}

fn job_id(j: usize) -> String {
    format!("dj{j:02}")
}

/// Publishes reports `iters` of every job through JetStream and waits for each ack.
async fn report_acked(js: &async_nats::jetstream::Context, s: &Subjects, iters: std::ops::RangeInclusive<u64>) {
    for iter in iters {
        for j in 0..JOBS {
            let r = LossReport {
                job: job_id(j),
                iter,
                loss: loss(j, iter),
                iter_seconds: 0.5,
                workers: 1,
                batch_size: None,
                sent_at: None,
            };
            let payload = slaq::protocol::encode(Encoding::MsgPack, &r).unwrap();
            let ack = js.publish(s.job_loss(&job_id(j)), payload.into()).await.expect("publish");
            ack.await.expect("JetStream acknowledges the report");
        }
    }
}

fn assignments(st: &StatusSnapshot) -> BTreeMap<String, Option<String>> {
    st.workers.iter().map(|w| (w.worker.clone(), w.job.clone())).collect()
}

fn all_points(st: &StatusSnapshot, n: u64) -> bool {
    st.jobs.len() == JOBS && st.jobs.iter().all(|j| j.points == n)
}

#[tokio::test]
async fn a_killed_scheduler_comes_back_with_its_jobs_workers_and_every_acknowledged_report() {
    let nats = NatsServer::start_jetstream();
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    let js = async_nats::jetstream::new(c.clone());
    let scheduler = Scheduler::start(&nats.url, &settings());
    crate::harness::wait_status(&c, &s).await;

    // Workers keep beating throughout (they do not know the scheduler restarts).
    for w in 0..WORKERS {
        let spec = WorkerSpec { worker: format!("dw{w:02}"), machine: None, slots: 1, kind: None };
        let ack: Ack = bus::request(&c, s.worker_hello(&spec.worker), Encoding::MsgPack, &spec, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(ack.ok);
    }
    let beats = crate::live::keep_alive(c.clone(), (0..WORKERS).map(|w| format!("dw{w:02}")).collect());
    // Every third job may use one worker at most: a spec that must survive.
    for j in 0..JOBS {
        let spec = JobSpec { max_workers: (j % 3 == 0).then_some(1), ..JobSpec::new(&job_id(j)) };
        let ack: Ack =
            bus::request(&c, s.job_hello(&spec.job), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
        assert!(ack.ok);
    }
    report_acked(&js, &s, 1..=30).await;
    let settled = |st: &StatusSnapshot| {
        all_points(st, 30) && st.workers.len() == WORKERS && st.workers.iter().all(|w| w.job.is_some())
    };
    eventually(&c, &s, Duration::from_secs(30), "30 points per job, every worker busy", settled).await;
    // Let the allocation settle and the predictors be saved (every 100 ms).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = eventually(&c, &s, Duration::from_secs(5), "status", settled).await;

    // SIGKILL: nothing flushed, nothing saved on the way out. Back with the same reports, each
    // job predicts what it predicted before, and the workers are where they were.
    scheduler.kill();
    let scheduler = Scheduler::start(&nats.url, &settings());
    let restored = eventually(&c, &s, Duration::from_secs(30), "every job and worker back", |st| {
        st.epoch >= 2 && all_points(st, 30) && st.workers.len() == WORKERS
    })
    .await;
    let gains = |st: &StatusSnapshot| -> BTreeMap<String, (u32, Option<f64>)> {
        st.jobs.iter().map(|j| (j.job.clone(), (j.workers, j.predicted_gain))).collect()
    };
    for ((job, (w0, g0)), (_, (w1, g1))) in gains(&before).iter().zip(gains(&restored).iter()) {
        assert_eq!(w0, w1, "{job}: workers before and after the restart");
        let (g0, g1) = (g0.expect("a gain before"), g1.expect("a gain after"));
        assert!((g0 - g1).abs() <= 0.01 * g0.abs() + 1e-12, "{job}: predicted gain {g0} before, {g1} after");
    }
    assert_eq!(assignments(&before), assignments(&restored), "no worker moves across the restart");

    // Killed again; while it is down every job reports five more iterations, acknowledged by
    // JetStream. None is lost.
    scheduler.kill();
    report_acked(&js, &s, 31..=35).await;
    let _scheduler = Scheduler::start(&nats.url, &settings());
    let after = eventually(&c, &s, Duration::from_secs(30), "every job back with all 35 points", |st| {
        all_points(st, 35) && st.workers.len() == WORKERS
    })
    .await;

    // Specs survived: the jobs limited to one worker have at most one.
    for j in after.jobs.iter().filter(|j| j.job[2..].parse::<usize>().is_ok_and(|n| n % 3 == 0)) {
        assert!(j.workers <= 1, "{} has {} workers but asked for at most 1", j.job, j.workers);
    }
    // Workers were not reshuffled by the restart.
    let (a, b) = (assignments(&before), assignments(&after));
    let moved = a.iter().filter(|(w, job)| b.get(*w) != Some(job)).count();
    assert!(moved * 100 <= WORKERS, "{moved} of {WORKERS} workers moved across the restart: {a:?} -> {b:?}");
    beats.abort();
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
        let spec = WorkerSpec { worker: format!("ow{w:02}"), machine: None, slots: 1, kind: None };
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
    let load = tokio::spawn(async move {
        for iter in 1u64.. {
            for w in 0..N_WORKERS {
                let id = format!("ow{w:02}");
                let beat = slaq::protocol::Heartbeat { worker: id.clone(), at: None };
                let _ = bus::publish(&load_client, subjects.worker_beat(&id), Encoding::MsgPack, &beat).await;
            }
            for j in 0..N_JOBS {
                let job = format!("oj{j:02}");
                let r = LossReport {
                    job: job.clone(),
                    iter,
                    loss: loss(j, iter),
                    iter_seconds: 0.2,
                    workers: 2,
                    batch_size: None,
                    sent_at: None,
                };
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
    load.abort();
}
