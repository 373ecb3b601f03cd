//! Jobs partitioned over replicas (issue #19) on a real nats-server: the server's subject
//! mapping puts a job's reports on the partition `slaq::partition::of` computes.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;

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
