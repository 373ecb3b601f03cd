//! Benchmarks of the pure core: one allocation decision, one allocator epoch, one predictor
//! update and refit, a whole 160-job simulation, and one loss report's parse and decode.
//! `cargo bench --bench core`; `slaq bench alloc` prints the same allocation figure as JSON at
//! any size, `slaq bench epoch` the epoch's over NATS, and `slaq bench ingest` the reports'.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use slaq::policy::table::{DEFAULT_TABLE_LEN, Tabled};
use slaq::policy::{JobBid, PolicyKind, Problem};
use slaq::quality::{GainCurve, JobPredictor, PredictorConfig};
use slaq::sim::curves::{self as sim, PolicySpec, SimConfig, WorkloadConfig};
use slaq::trace::{TraceCurve, load_curves};

fn curves() -> Vec<TraceCurve> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/curves/curves-public.jsonl");
    load_curves(&path).expect("the public curves are beside the repository")
}

fn allocation(c: &mut Criterion) {
    let templates = sim::fixtures::predictor_templates(&curves(), PredictorConfig::default());
    let predictors = sim::fixtures::predictors(&templates, 4000);
    c.bench_function("allocate slaq 4000 jobs 16000 workers (gains included)", |b| {
        b.iter(|| {
            let bids: Vec<JobBid<GainCurve>> = predictors
                .iter()
                .enumerate()
                .map(|(j, p)| {
                    let current = (j % 8) as u32;
                    JobBid::new(p.gain_curve(60.0, current))
                })
                .collect();
            black_box(PolicyKind::Slaq.allocate(&Problem { num_workers: 16_000, jobs: &bids }))
        })
    });
    // As the live allocator decides: on the tables the job actors made at refit.
    let tabled: Vec<JobBid<Tabled<GainCurve>>> = predictors
        .iter()
        .enumerate()
        .map(|(j, p)| {
            let current = (j % 8) as u32;
            JobBid::new(p.gain_curve(60.0, current).map(|g| Tabled::new(g, u32::MAX, DEFAULT_TABLE_LEN)))
        })
        .collect();
    c.bench_function("allocate slaq 4000 jobs 16000 workers (on gain tables)", |b| {
        b.iter(|| black_box(PolicyKind::Slaq.allocate(&Problem { num_workers: 16_000, jobs: &tabled })))
    });
    c.bench_function("allocate slaq by heap 4000 jobs 16000 workers (on gain tables)", |b| {
        b.iter(|| black_box(slaq::policy::slaq::allocate_by_heap(&Problem { num_workers: 16_000, jobs: &tabled })))
    });
    let none: Vec<JobBid<GainCurve>> = (0..4000).map(|_| JobBid::new(None)).collect();
    c.bench_function("allocate fair 4000 jobs 16000 workers", |b| {
        b.iter(|| black_box(PolicyKind::Fair.allocate(&Problem { num_workers: 16_000, jobs: &none })))
    });
}

/// The allocator's epoch with the default settings (issue #44's measure of what an epoch costs
/// when little changes): 4,000 jobs with bids from real curves on 16,000 workers, settled, then
/// epochs 1 ms apart with nothing new. No bus: the core alone, as the actor calls it.
fn allocator_epoch(c: &mut Criterion) {
    use slaq::actors::allocator::{Allocator, Input};
    use slaq::actors::bid::{Bid, job_model};
    use slaq::protocol::{JobSpec, WorkerSpec};
    use slaq::service::{Overrides, RawConfig};
    let config = RawConfig::default().resolve(&Default::default(), &Overrides::default()).expect("the defaults");
    let mut a = Allocator::new(slaq::service::allocator_settings(&config, None), false);
    for w in 0..16_000 {
        let spec = WorkerSpec { worker: format!("w{w:05}"), machine: None, slots: 1, kind: None, advertise: None };
        a.handle(0.0, Input::WorkerHello(spec));
    }
    let templates = sim::fixtures::predictor_templates(&curves(), PredictorConfig::default());
    for (j, mut p) in sim::fixtures::predictors(&templates, 4000).into_iter().enumerate() {
        let spec = JobSpec::new(&format!("job{j:04}"));
        a.handle(0.0, Input::JobStarted { job: spec.job.clone(), local: true, command: None });
        let gain = slaq::schedule::make_bid(&mut p, 60.0, 1.0, 0);
        let bid = Bid::new(&spec, std::sync::Arc::new(job_model(&spec, &[], None)), &p, gain, 0);
        a.handle(0.0, Input::Bid { job: spec.job.clone(), bid });
    }
    // Epochs a configured epoch apart until three in a row move no worker (the first ones
    // reshuffle as the fair clocks and ledgers fill): then nothing is new. Five epochs 1 s
    // apart, as before, left it moving workers at every measured epoch; one still epoch can be
    // followed by one that moves 54 workers (seen 2026-11-29, when the setup's check failed).
    // Every worker beats before each epoch, as on a live cluster: silent, they would expire
    // after `worker_timeout` (three epochs) and the epochs would be of an empty cluster.
    let epoch_s = a.settings().epoch.as_secs_f64();
    let beat = |a: &mut Allocator, now_s: f64| {
        for w in 0..16_000 {
            a.handle(now_s, Input::WorkerBeat { worker: format!("w{w:05}"), running: None });
        }
    };
    let mut now_s = epoch_s;
    let mut still = 0;
    for _ in 0..200 {
        beat(&mut a, now_s);
        let moved = a.epoch(now_s, true, &|| 0.0).summary.workers_moved;
        now_s += epoch_s;
        still = if moved == 0 { still + 1 } else { 0 };
        if still == 3 {
            break;
        }
    }
    beat(&mut a, now_s);
    let summary = a.epoch(now_s, true, &|| 0.0).summary;
    assert_eq!((summary.workers_moved, summary.num_workers), (0, 16_000), "settled, every worker known");
    let mut group = c.benchmark_group("allocator");
    group.sample_size(20);
    group.bench_function("epoch 4000 jobs 16000 workers, nothing new", |b| {
        b.iter(|| {
            now_s += 0.001;
            black_box(a.epoch(now_s, true, &|| 0.0))
        })
    });
    group.finish();
}

fn predictor(c: &mut Criterion) {
    let curve = curves().into_iter().find(|c| c.family == "mlpc").expect("an mlpc curve");
    let mut warm = JobPredictor::new(PredictorConfig::default());
    for (i, &loss) in curve.loss[..60].iter().enumerate() {
        warm.observe(i as u64 + 1, loss).expect("valid point");
        warm.refit();
    }
    c.bench_function("predictor observe + refit (window of 60)", |b| {
        b.iter_batched(
            || warm.clone(),
            |mut p| {
                p.observe(61, curve.loss[60]).expect("valid point");
                p.refit();
                black_box(p)
            },
            criterion::BatchSize::SmallInput,
        )
    });
}

fn simulation(c: &mut Criterion) {
    let jobs = sim::workload::generate(&curves(), &WorkloadConfig::default()).expect("workload");
    let config = SimConfig::default();
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    for name in ["slaq", "fair"] {
        let policy = PolicySpec::named(name).expect("known policy");
        group.bench_function(format!("160 jobs {name}"), |b| {
            b.iter(|| black_box(sim::engine::run(&jobs, &config, policy, |_| {})))
        });
    }
    group.finish();
}

/// One loss report as the ingest reads it: its subject parsed, its payload decoded and validated.
fn inbound(c: &mut Criterion) {
    use slaq::protocol::{Encoding, InboundLimits, LossReport, Subjects, Tenants, encode, inbound};
    let subjects = Subjects::new("bench").expect("a valid prefix");
    let report = LossReport::new("job417", 1234, 0.25, 0.5, 4);
    let payload = encode(Encoding::MsgPack, &report).expect("encodes");
    let subject = subjects.job_loss("job417");
    let limits = InboundLimits { max_payload_bytes: 1 << 20, max_min_workers: 1 << 16, tenants: Tenants::Any };
    c.bench_function("inbound loss report (subject, MessagePack, validation)", |b| {
        b.iter(|| black_box(inbound(&subjects, black_box(&subject), black_box(&payload), Encoding::MsgPack, &limits)))
    });
}

criterion_group!(benches, allocation, allocator_epoch, predictor, simulation, inbound);
criterion_main!(benches);
