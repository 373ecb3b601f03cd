//! Jobs partitioned over replicas (issue #19) on a real nats-server: the server's subject
//! mapping puts a job's reports on the partition `slaq::partition::of` computes.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;

use slaq::bus::partitions::Partitions;

use crate::harness::{NatsServer, client, temp_dir};

/// The server maps `pt.job.<id>.loss` to `pt.part.<p>.job.<id>.loss` with its own partition
/// function; for ids of every shape a token can take, `p` is `partition::of(id, 32)`.
#[tokio::test]
async fn the_servers_partition_mapping_is_ours() {
    let dir = temp_dir("partition-map");
    let conf = dir.join("map.conf");
    std::fs::write(
        &conf,
        "mappings = { \"pt.job.*.loss\": \"pt.part.{{partition(32,1)}}.job.{{wildcard(1)}}.loss\" }\n",
    )
    .expect("config");
    let nats = NatsServer::start_with_config(&conf);
    let c = client(&nats.url).await;
    let mut sub = c.subscribe("pt.part.*.job.*.loss").await.expect("subscribe");
    c.flush().await.expect("flush");
    let mut ids: Vec<String> = (0..400).map(|i| format!("job-{i}")).collect();
    ids.extend(
        ["a", "Z", "x_y-z", "résumé", "作业-7", "0", "~!@#$%^&()", "very-long-".repeat(20).as_str()].map(String::from),
    );
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
        seen.insert(tokens[4].to_string(), tokens[2].parse().expect("a partition number"));
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
            if let Err(e) = parts.tick().await {
                tracing::warn!(error = %e, name, "tick");
            }
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
/// goodbye) and the other two own all 32 within two lease periods; a fourth joins and takes its
/// share from the others, moving no more partitions than that share.
#[tokio::test]
async fn partitions_are_shared_evenly_taken_over_within_two_leases_and_rebalanced_on_join() {
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
    eprintln!("taken over in {took:?}");
    assert!(took < 2 * ttl, "the dead replica's partitions were owned again after {took:?}");
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
