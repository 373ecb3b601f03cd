//! Jobs partitioned over replicas (issue #19) on a real nats-server: the server's subject
//! mapping puts a job's reports on the partition `slaq::partition::of` computes.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;

use slaq::bus::partitions::Partitions;

use crate::harness::{NatsServer, client, temp_dir};

/// The server maps `pt.job.<id>.loss` to `pt.part.<p>.job.<id>.loss` with its own partition
/// function (on both tokens of a tenant's job, `TENANT.NAME`, as deploy/nats/slaq-shared.conf
/// does); for ids of every shape a token can take, `p` is `partition::of(id, 32)`.
#[tokio::test]
async fn the_servers_partition_mapping_is_ours() {
    let dir = temp_dir("partition-map");
    let conf = dir.join("map.conf");
    std::fs::write(
        &conf,
        "mappings = {\n \"pt.job.*.loss\": \"pt.part.{{partition(32,1)}}.job.{{wildcard(1)}}.loss\"\n          \"pt.job.*.*.loss\": \"pt.part.{{partition(32,1,2)}}.job.{{wildcard(1)}}.{{wildcard(2)}}.loss\"\n}\n",
    )
    .expect("config");
    let nats = NatsServer::start_with_config(&conf);
    let c = client(&nats.url).await;
    let mut sub = c.subscribe("pt.part.*.job.>").await.expect("subscribe");
    c.flush().await.expect("flush");
    let mut ids: Vec<String> = (0..400).map(|i| format!("job-{i}")).collect();
    ids.extend(
        ["a", "Z", "x_y-z", "résumé", "作业-7", "0", "~!@#$%^&()", "very-long-".repeat(20).as_str()].map(String::from),
    );
    // Tenants' jobs: two tokens, hashed together.
    ids.extend((0..200).map(|i| format!("team-{}.job-{i}", i % 7)));
    ids.extend(["a.b", "ab.c", "x_y.z-1", "é.作业"].map(String::from));
    for id in &ids {
        c.publish(format!("pt.job.{id}.loss"), "x".into()).await.expect("publish");
    }
    c.flush().await.expect("flush");
    let mut seen: HashMap<String, u32> = HashMap::new();
    while seen.len() < ids.len() {
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("every report arrives")
            .expect("open");
        let tokens: Vec<&str> = m.subject.as_str().split('.').collect();
        let id = tokens[4..tokens.len() - 1].join(".");
        seen.insert(id, tokens[2].parse().expect("a partition number"));
    }
    let mut used = [0u32; 32];
    for id in &ids {
        let p = seen[id.as_str()];
        assert_eq!(p, slaq::partition::of(id, 32), "{id}");
        used[p as usize] += 1;
    }
    assert!(used.iter().all(|&n| n > 0), "400 ids reach every one of 32 partitions: {used:?}");
}

/// Each replica's partitions as it last saw them held, each with the end of its fence, shared
/// with the test.
type Board = std::sync::Arc<std::sync::Mutex<HashMap<String, Vec<(u32, std::time::Instant)>>>>;

/// A replica ticking its partition leases every `ttl / 4` and posting what it holds.
fn replica(url: String, name: &'static str, ttl: Duration, board: Board) -> crate::harness::Background {
    crate::harness::Background::spawn(async move {
        let c = client(&url).await;
        let mut parts = Partitions::open(&c, "pl", name, 32, ttl, 1).await.expect("open");
        loop {
            parts.tick().await;
            board.lock().expect("board").insert(name.to_string(), parts.held_until());
            tokio::time::sleep(ttl / 4).await;
        }
    })
}

/// What each replica certainly holds now (a dead replica's partitions until its fences end).
fn holding(board: &Board) -> HashMap<String, Vec<u32>> {
    let now = std::time::Instant::now();
    let b = board.lock().expect("board");
    b.iter().map(|(n, held)| (n.clone(), held.iter().filter(|h| h.1 > now).map(|h| h.0).collect())).collect()
}

/// Samples the board every 10 ms until `done` holds (or `limit` passes), asserting at every
/// sample that no partition is held by two replicas; the time it took.
async fn watch(board: &Board, limit: Duration, done: impl Fn(&HashMap<String, Vec<u32>>) -> bool) -> Duration {
    let start = std::time::Instant::now();
    loop {
        {
            let b = holding(board);
            let mut all: Vec<u32> = b.values().flatten().copied().collect();
            let n = all.len();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), n, "a partition held twice: {b:?}");
            if done(&b) {
                return start.elapsed();
            }
        }
        assert!(start.elapsed() < limit, "not reached within {limit:?}: {:?}", holding(board));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn counts(b: &HashMap<String, Vec<u32>>, names: &[&str]) -> Vec<usize> {
    let mut c: Vec<usize> = names.iter().map(|n| b.get(*n).map_or(0, Vec::len)).collect();
    c.sort_unstable();
    c
}

/// Three replicas share 32 partitions evenly and never hold one twice; one is killed (no
/// goodbye) and the other two own all 32, moving only its partitions; a fourth joins and takes
/// its share from the others, moving no more partitions than that share. How soon is not
/// asserted here (a timing bound in a test of live processes fails on a loaded machine): the
/// rule, the next tick after the dead replica's keys expire, is `bus::partitions`'s unit test
/// `a_dead_replicas_partitions_are_taken_at_the_next_tick_and_nothing_else_moves`, and the time
/// a benchmark's figure (`slaq bench cluster`, `owned_again_s`).
#[tokio::test]
async fn partitions_are_shared_evenly_taken_over_and_rebalanced_on_join() {
    let nats = NatsServer::start_jetstream();
    let ttl = Duration::from_millis(1000);
    let board: Board = Default::default();
    let a = replica(nats.url.clone(), "a", ttl, board.clone());
    let b = replica(nats.url.clone(), "b", ttl, board.clone());
    let c = replica(nats.url.clone(), "c", ttl, board.clone());
    watch(&board, Duration::from_secs(15), |m| counts(m, &["a", "b", "c"]) == [10, 11, 11]).await;
    let before = holding(&board);

    drop(c); // killed: it neither renews nor gives anything back
    let took = watch(&board, Duration::from_secs(10), |m| counts(m, &["a", "b"]) == [16, 16]).await;
    eprintln!("taken over in {took:?} (lease {ttl:?})");
    // Only the dead replica's partitions moved.
    let after = holding(&board);
    for name in ["a", "b"] {
        assert!(before[name].iter().all(|p| after[name].contains(p)), "{name} lost a partition it held");
    }

    board.lock().expect("board").remove("c");
    let d = replica(nats.url.clone(), "d", ttl, board.clone());
    watch(&board, Duration::from_secs(15), |m| counts(m, &["a", "b", "d"]) == [10, 11, 11]).await;
    let joined = holding(&board);
    let kept = ["a", "b"].iter().map(|n| joined[*n].iter().filter(|p| after[*n].contains(p)).count()).sum::<usize>();
    assert_eq!(kept, 32 - joined["d"].len(), "only d's share moved");
    drop((a, b, d));
}

mod wire_bids {
    use std::sync::Arc;

    use proptest::prelude::*;
    use slaq::actors::bid::{Bid, job_model};
    use slaq::cluster::model::Observation;
    use slaq::policy::{ByRef, JobBid, PolicyKind};
    use slaq::protocol::JobSpec;
    use slaq::protocol::WireBid;
    use slaq::quality::{JobPredictor, PredictorConfig};
    use slaq::schedule::{self, EpochInput, EpochJob, FloorLedger, PlaceSettings, Placer, PlanSettings};

    /// One job as a job actor would bid: a loss curve and iteration times fed to its predictor,
    /// a spec (batch sizes, parameter server, bounds, allowed sizes) and the shapes it ran in.
    #[derive(Clone, Debug)]
    struct Job {
        points: usize,
        decay: f64,
        floor: f64,
        seconds: f64,
        speedup: f64,
        min: u32,
        max: Option<u32>,
        batched: bool,
        ps: bool,
        sizes: Option<Vec<u32>>,
        shapes: Vec<(u32, u32, f64)>,
        held: u32,
        service: f64,
        weight: f64,
    }

    fn job() -> impl Strategy<Value = Job> {
        (
            (0usize..40, 0.2f64..1.5, 0.0f64..0.5, 0.05f64..3.0, 0.3f64..1.0),
            (0u32..3, proptest::option::of(1u32..12), any::<bool>(), any::<bool>()),
            proptest::option::of(proptest::collection::vec(1u32..9, 1..4)),
            proptest::collection::vec((1u32..3, 1u32..9, 0.05f64..2.0), 0..4),
            (0u32..4, 0.0f64..50.0, proptest::sample::select(vec![1.0, 0.5, 2.0, 3.5])),
        )
            .prop_map(
                |(
                    (points, decay, floor, seconds, speedup),
                    (min, max, batched, ps),
                    sizes,
                    shapes,
                    (held, service, weight),
                )| Job {
                    points,
                    decay,
                    floor,
                    seconds,
                    speedup,
                    min,
                    max,
                    batched,
                    ps,
                    sizes,
                    shapes,
                    held,
                    service,
                    weight,
                },
            )
    }

    fn bid(j: &Job) -> Bid {
        let mut p = JobPredictor::new(PredictorConfig::default());
        for i in 1..=j.points {
            let _ = p.observe(i as u64, j.floor + 1.0 / (i as f64).powf(j.decay));
            let w = 1 + (i as u32 % 4);
            p.observe_time(w, j.seconds / f64::from(w).powf(j.speedup));
        }
        let gain = schedule::make_bid(&mut p, 60.0, 2.0, j.held);
        let spec = JobSpec {
            min_workers: j.min,
            max_workers: j.max,
            batch_sizes: j.batched.then(|| vec![32, 64, 128, 256]),
            parameter_server: j.ps,
            worker_counts: j.sizes.clone(),
            weight: j.weight,
            // Saves on a schedule and when asked, for half the draws.
            checkpoint_every_s: (j.held % 2 == 1).then_some(600.0),
            save_on_request: j.held % 2 == 1,
            ..JobSpec::new("j")
        };
        let shapes: Vec<Observation> = j
            .shapes
            .iter()
            .map(|&(machines, replicas, step)| Observation {
                machines: machines.min(replicas),
                replicas,
                local_bsz: 32.0,
                step,
                sync: step / 4.0,
            })
            .collect();
        Bid::new(&spec, Arc::new(job_model(&spec, &shapes, None)), &p, gain, j.held)
    }

    fn plan(
        bids: &[Bid],
        jobs: &[Job],
        machine_of: &[usize],
        current: &[Option<usize>],
        seed: u64,
    ) -> schedule::EpochPlan {
        let epoch_jobs: Vec<EpochJob<'_, _>> = bids
            .iter()
            .zip(jobs)
            .map(|(b, j)| EpochJob {
                bid: JobBid {
                    min_workers: b.min_workers,
                    max_workers: b.max_workers,
                    attained_service: j.service,
                    gain: b.gain.as_deref().map(ByRef),
                    weight: b.weight,
                },
                own_minimum: true,
                sizes: b.sizes.as_deref(),
                model: b.model.as_ref(),
                pace: None,
            })
            .collect();
        let input = EpochInput {
            policy: PolicyKind::Slaq,
            plan: PlanSettings::default(),
            place: PlaceSettings { placer: Placer::Lp, restart_s: 30.0, horizon_s: 120.0 },
            jobs: &epoch_jobs,
            machine_of: Some(machine_of),
            current,
            held: None,
            seed,
            types: None,
            tenants: None,
            special: None,
        };
        let mut ledgers = vec![FloorLedger::default(); bids.len()];
        schedule::plan_epoch(&input, &mut ledgers)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        /// A replica's bids, encoded as they go to the leader (MessagePack, named fields) and
        /// decoded there, give the leader the plan that the bids themselves give: counts, every
        /// worker's job and role, batches and SLO verdicts.
        #[test]
        fn bids_that_crossed_the_wire_plan_as_the_originals(
            jobs in proptest::collection::vec(job(), 1..10),
            slots in 1usize..5,
            workers in 1usize..24,
            seed in any::<u64>(),
            held in proptest::collection::vec(proptest::option::of(0usize..10), 24),
        ) {
            let bids: Vec<Bid> = jobs.iter().map(bid).collect();
            let crossed: Vec<Bid> = bids
                .iter()
                .map(|b| {
                    let bytes = rmp_serde::to_vec_named(&b.to_wire()).expect("encode");
                    Bid::from_wire(rmp_serde::from_slice::<WireBid>(&bytes).expect("decode"))
                })
                .collect();
            let machine_of: Vec<usize> = (0..workers).map(|w| w / slots).collect();
            let current: Vec<Option<usize>> = held[..workers].iter().map(|h| h.filter(|&j| j < jobs.len())).collect();
            prop_assert_eq!(plan(&crossed, &jobs, &machine_of, &current, seed), plan(&bids, &jobs, &machine_of, &current, seed));
            for (a, b) in bids.iter().zip(&crossed) {
                prop_assert_eq!(&a.to_wire(), &b.to_wire());
            }
        }
    }
}
