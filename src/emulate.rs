//! `slaq emulate`: a load generator and end-to-end check. It plays a simulator workload over
//! NATS against a running `slaq serve`: W worker agents (hello and heartbeats) and J jobs that
//! replay their curves, each advancing at the speed its currently allocated workers give it
//! (the simulator's speed-up model), in virtual time running `speed` times faster than the
//! clock. It measures with the simulator's own metric code, so the two runs compare directly.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tracing::{debug, info, warn};

use crate::bus::{self, BusError};
use crate::protocol::{
    self, Encoding, EndReason, Heartbeat, JobAllocation, JobEnd, JobSpec, LossReport, Subjects, WorkerSpec,
};
use crate::sim::curves::metrics::{RunMetrics, Tracker};
use crate::sim::curves::replay::ReplayJob;
use crate::sim::curves::{SimJob, SpeedupModel};

/// How to run an emulation.
#[derive(Clone, Debug)]
pub struct EmulateConfig {
    pub subjects: Subjects,
    pub num_workers: u32,
    /// Virtual seconds per real second.
    pub speed: f64,
    pub speedup: SpeedupModel,
    pub min_workers_per_job: u32,
    /// Virtual seconds between metric samples (the simulator samples every epoch).
    pub sample_s: f64,
    /// Real time after which the run stops, finished or not.
    pub max_duration: Duration,
    /// Real time between heartbeats of the emulated workers.
    pub beat_every: Duration,
}

/// A hello, asked again for up to 30 s while nobody answers (as during a replicated
/// scheduler's take-over) or the answer is late.
async fn hello<T: serde::Serialize>(
    client: &async_nats::Client,
    subject: String,
    spec: &T,
) -> Result<protocol::Ack, BusError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match bus::request(client, subject.clone(), Encoding::MsgPack, spec, Duration::from_secs(5)).await {
            Ok(ack) => return Ok(ack),
            Err(e) if std::time::Instant::now() < deadline => {
                debug!(error = %e, subject, "hello not answered; asking again");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A job that sent nothing for this long says hello again.
const KEEP_ALIVE: Duration = Duration::from_secs(30);

/// The emulated workers: each says hello, then all beat every `beat_every` until the returned
/// task is aborted.
async fn start_workers(
    client: &async_nats::Client,
    config: &EmulateConfig,
) -> Result<tokio::task::JoinHandle<()>, BusError> {
    let s = &config.subjects;
    let worker_ids: Vec<String> = (0..config.num_workers).map(|i| format!("emu-w{i:05}")).collect();
    for id in &worker_ids {
        let spec = WorkerSpec { worker: id.clone(), machine: None, slots: 1, kind: None, advertise: None };
        let ack = hello(client, s.worker_hello(id), &spec).await?;
        if !ack.ok {
            warn!(worker = %id, error = ?ack.error, "worker refused");
        }
    }
    let (client, subjects, every) = (client.clone(), s.clone(), config.beat_every);
    Ok(tokio::spawn(async move {
        loop {
            for id in &worker_ids {
                let hb = Heartbeat::new(id);
                let _ = bus::publish(&client, subjects.worker_beat(id), Encoding::MsgPack, &hb).await;
            }
            tokio::time::sleep(every).await;
        }
    }))
}

/// What an emulated job says in its hello: its length is its curve's (as a user sets
/// `max_iter`), which the simulator reads too.
fn spec_of(job: &SimJob, config: &EmulateConfig) -> JobSpec {
    JobSpec {
        min_workers: config.min_workers_per_job,
        family: Some(job.family.clone()),
        max_iters: Some(job.loss.len() as u64),
        ..JobSpec::new(&job.id)
    }
}

/// A job arrives: hello, then the history a resumed job brings, then it runs.
async fn arrive(
    client: &async_nats::Client,
    st: &mut ReplayJob<'_>,
    config: &EmulateConfig,
    now: f64,
) -> Result<(), BusError> {
    let s = &config.subjects;
    let ack = hello(client, s.job_hello(&st.job.id), &spec_of(st.job, config)).await?;
    if !ack.ok {
        warn!(job = %st.job.id, error = ?ack.error, "job refused");
    }
    for (i, &loss) in st.job.loss[..st.job.offset].iter().enumerate() {
        let report = LossReport::new(&st.job.id, i as u64 + 1, loss, 0.0, 0);
        bus::publish(client, s.job_loss(&st.job.id), Encoding::MsgPack, &report).await?;
    }
    st.arrive(now);
    Ok(())
}

/// The iterations done by `now`: each reported, and a bye for each job that finished (how many
/// did is returned). `last_sent[j]`: when job `j` last sent anything.
async fn complete(
    client: &async_nats::Client,
    states: &mut [ReplayJob<'_>],
    config: &EmulateConfig,
    now: f64,
    last_sent: &mut [Instant],
) -> Result<usize, BusError> {
    let s = &config.subjects;
    let mut finished = 0;
    for (j, st) in states.iter_mut().enumerate() {
        let Some(done) = st.complete(now) else { continue };
        // The iteration's time as the scheduler lives it: real seconds (virtual / speed), so
        // its time models, the jobs' ages on its clock and its epochs share one unit.
        let seconds = done.seconds / config.speed;
        let report = LossReport::new(&st.job.id, done.iter, done.loss, seconds, done.workers);
        bus::publish(client, s.job_loss(&st.job.id), Encoding::MsgPack, &report).await?;
        last_sent[j] = Instant::now();
        if done.finished {
            finished += 1;
            let end = JobEnd { job: st.job.id.clone(), reason: EndReason::Finished };
            bus::publish(client, s.job_bye(&st.job.id), Encoding::MsgPack, &end).await?;
        }
    }
    Ok(finished)
}

/// A job parked without workers sends no reports: it says hello again every [`KEEP_ALIVE`]
/// so the scheduler does not forget it (`idle_job_timeout`).
async fn keep_alive(
    client: &async_nats::Client,
    states: &[ReplayJob<'_>],
    config: &EmulateConfig,
    last_sent: &mut [Instant],
) -> Result<(), BusError> {
    for (j, st) in states.iter().enumerate().filter(|(_, st)| st.active) {
        if last_sent[j].elapsed() >= KEEP_ALIVE {
            last_sent[j] = Instant::now();
            let hello = spec_of(st.job, config);
            bus::publish(client, config.subjects.job_hello(&st.job.id), Encoding::MsgPack, &hello).await?;
        }
    }
    Ok(())
}

/// Runs `jobs` against the scheduler reachable through `client`; returns the metrics.
pub async fn run(client: &async_nats::Client, jobs: &[SimJob], config: &EmulateConfig) -> Result<RunMetrics, BusError> {
    let s = &config.subjects;
    let beats = start_workers(client, config).await?;
    let mut allocations = bus::subscribe(client, s.job_alloc("*")).await?;

    let mut states: Vec<ReplayJob<'_>> =
        jobs.iter().map(|job| ReplayJob::new(job, config.speedup.curve(job.application))).collect();
    let by_id: HashMap<&str, usize> = jobs.iter().enumerate().map(|(i, j)| (j.id.as_str(), i)).collect();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| jobs[a].arrival_s.total_cmp(&jobs[b].arrival_s));
    let mut next_arrival = 0;
    let mut tracker = Tracker::new(config.num_workers);
    let started = Instant::now();
    let virtual_now = || started.elapsed().as_secs_f64() * config.speed;
    let mut now = 0.0f64;
    let mut next_sample = 0.0f64;
    let mut num_finished = 0;
    // When each job last sent anything: a job parked without workers sends no reports, and
    // says hello again now and then so the scheduler does not forget it (`idle_job_timeout`).
    let mut last_sent: Vec<Instant> = vec![started; jobs.len()];

    while num_finished < jobs.len() && started.elapsed() < config.max_duration {
        let mut next_event = next_sample;
        if let Some(&j) = order.get(next_arrival) {
            next_event = next_event.min(jobs[j].arrival_s);
        }
        for t in states.iter().filter_map(|st| st.completes_at(now)) {
            next_event = next_event.min(t);
        }
        let wake = started + Duration::from_secs_f64(next_event.max(now) / config.speed);
        let mut changed: Vec<(usize, u32)> = Vec::new();
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            Some(message) = allocations.next() => {
                let decoded = protocol::decode::<JobAllocation>(Encoding::MsgPack, &message.payload, "allocation");
                if let Some((&j, a)) = decoded.ok().and_then(|a| by_id.get(a.job.as_str()).map(|j| (j, a))) {
                    changed.push((j, a.workers.len() as u32));
                }
            }
        }
        let t = virtual_now().min(next_event.max(now));
        let dt = (t - now).max(0.0);
        tracker.integrate(states.iter().filter(|s| s.active).map(ReplayJob::view), dt);
        for st in &mut states {
            st.advance(dt);
        }
        now = t;
        for (j, workers) in changed {
            if states[j].active {
                states[j].workers = workers;
            }
        }
        num_finished += complete(client, &mut states, config, now, &mut last_sent).await?;
        // Arrivals: hello, then the history a resumed job brings.
        while let Some(&j) = order.get(next_arrival) {
            if jobs[j].arrival_s > now {
                break;
            }
            next_arrival += 1;
            arrive(client, &mut states[j], config, now).await?;
        }
        keep_alive(client, &states, config, &mut last_sent).await?;
        if now >= next_sample {
            tracker.sample(now, states.iter().filter(|s| s.active).map(ReplayJob::view));
            next_sample = now + config.sample_s;
        }
    }
    beats.abort();
    if num_finished < jobs.len() {
        warn!(unfinished = jobs.len() - num_finished, "emulation stopped at its time limit");
    }
    info!(virtual_s = now, real_s = started.elapsed().as_secs_f64(), "emulation done");
    let outcomes = states.iter().map(ReplayJob::outcome).collect();
    Ok(tracker.finish("live", outcomes, now))
}
