//! Replicas with a leader lease (`bus::lease`, `service::run_replica`) over a real nats-server
//! with JetStream: the lease is exclusive and its terms grow; when the leader is killed a
//! standby takes over, from the durable state, and the workers follow the new leader (whose
//! epochs count from 1 again) but not the deposed one.

use std::time::{Duration, Instant};

use slaq::agent::{self, AgentConfig};
use slaq::bus;
use slaq::bus::lease::Lease;
use slaq::protocol::{Ack, Encoding, JobSpec, StatusSnapshot, Subjects, WorkerAssignment, WorkerSpec};

use crate::harness::{
    Background, NatsServer, Scheduler, client, eventually, loss_report, temp_dir, wait_for_file, wait_status,
};

#[tokio::test]
async fn the_lease_is_exclusive_and_every_term_is_larger_than_the_last() {
    let nats = NatsServer::start_jetstream();
    let c = client(&nats.url).await;
    let ttl = Duration::from_millis(1000);
    let a = Lease::open(&c, "lt", "a", ttl, 1).await.unwrap();
    let b = Lease::open(&c, "lt", "b", ttl, 1).await.unwrap();

    let held_a = a.try_acquire().await.unwrap().expect("a takes the free lease");
    assert!(b.try_acquire().await.unwrap().is_none(), "b cannot take a held lease");
    let held_a = a.renew(held_a).await.unwrap().expect("a renews");
    assert_eq!(b.holder().await.unwrap().map(|h| (h.replica, h.term)), Some(("a".to_string(), held_a.term)));

    // a stops renewing: b gets the lease once it expires, with a larger term, and a's next
    // renewal finds it lost.
    let stopped = Instant::now();
    let held_b = loop {
        if let Some(held) = b.try_acquire().await.unwrap() {
            break held;
        }
        assert!(stopped.elapsed() < Duration::from_secs(10), "the lease never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(stopped.elapsed() >= ttl / 2, "taken after {:?}, before it could expire", stopped.elapsed());
    assert!(held_b.term > held_a.term);
    assert!(a.renew(held_a).await.unwrap().is_none(), "a is deposed");

    // Given back, it is free at once.
    b.release(held_b).await;
    let again = a.try_acquire().await.unwrap().expect("a released lease is free");
    assert!(again.term > held_b.term);
}

/// Agents `w1` and `w2` on `url`, each appending `<job> <term> <epoch>` to `out/<worker>` for
/// every assignment it follows; dropping the senders stops them.
async fn start_agents(url: &str, s: &Subjects, out: &std::path::Path) -> Vec<tokio::sync::oneshot::Sender<()>> {
    let mut stops = Vec::new();
    for w in ["w1", "w2"] {
        let config = AgentConfig {
            beat_every: Duration::from_millis(200),
            exec: Some(format!("echo \"$SLAQ_JOB $SLAQ_TERM $SLAQ_EPOCH\" >> {}", out.join(w).display())),
            ..AgentConfig::new(
                s.clone(),
                WorkerSpec { worker: w.into(), machine: None, slots: 1, kind: None, advertise: None },
            )
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(agent::run(client(url).await, config, async move {
            let _ = stop_rx.await;
        }));
        stops.push(stop_tx);
    }
    stops
}

/// Settings for replica `id`: half-second epochs, a one-second lease.
fn replica_settings(id: &str) -> String {
    replica_settings_with(id, 1)
}

/// The same with `copies` copies of the state in a cluster.
fn replica_settings_with(id: &str, copies: usize) -> String {
    format!(
        "[scheduler]\npolicy = \"fair\"\nepoch_ms = 500\nworker_timeout_ms = 5000\nrefit_interval_ms = 20\n\n\
         [state]\nmode = \"jetstream\"\nsnapshot_ms = 100\nreplicas = {copies}\n\n\
         [ha]\nenabled = true\nlease_ms = 1000\nreplica_id = \"{id}\"\n"
    )
}

#[tokio::test]
async fn a_standby_takes_over_when_the_leader_dies_and_workers_follow_only_the_new_term() {
    let nats = NatsServer::start_jetstream();
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    let leader = Scheduler::start(&nats.url, &replica_settings("a"));
    let first = eventually(&c, &s, Duration::from_secs(20), "replica a leads", |st| {
        st.leader.as_deref() == Some("a") && st.epoch >= 1
    })
    .await;
    let standby = Scheduler::start(&nats.url, &replica_settings("b"));

    // Two agents, each recording the assignments it follows.
    let out = temp_dir("replicas");
    let stops = start_agents(&nats.url, &s, &out).await;
    // One job, reporting throughout: it gets both workers.
    let hello = |job: &'static str| {
        let c = c.clone();
        let s = s.clone();
        async move {
            let ack: Ack =
                bus::request(&c, s.job_hello(job), Encoding::MsgPack, &JobSpec::new(job), Duration::from_secs(5))
                    .await
                    .unwrap();
            assert!(ack.ok);
        }
    };
    hello("j1").await;
    let report = |job: &'static str| {
        let (c, s) = (c.clone(), s.clone());
        Background::spawn(async move {
            for iter in 1.. {
                let _ = bus::publish(&c, s.job_loss(job), Encoding::MsgPack, &loss_report(job, iter)).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut reporters = vec![report("j1")];
    let before = eventually(&c, &s, Duration::from_secs(20), "j1 holds both workers under a", |st| {
        st.leader.as_deref() == Some("a") && st.workers.iter().filter(|w| w.job.as_deref() == Some("j1")).count() == 2
    })
    .await;
    assert_eq!(before.term, first.term);
    wait_for_file(&out.join("w1"), "w1 follows a's assignment", |t| t.contains("j1 ")).await;
    wait_for_file(&out.join("w2"), "w2 follows a's assignment", |t| t.contains("j1 ")).await;

    // The leader dies. The standby takes over, restored from JetStream: the same workers on
    // the same job, a larger term, epochs counted from 1 again.
    leader.kill();
    let killed = Instant::now();
    let after = eventually(&c, &s, Duration::from_secs(20), "replica b leads and allocates", |st| {
        st.leader.as_deref() == Some("b") && st.epoch >= 1
    })
    .await;
    let took = killed.elapsed();
    eprintln!("take-over: replica b allocated {took:?} after the leader was killed (lease 1 s, epoch 0.5 s)");
    // Lease expiry (≤ 1 s after the last renewal) + one standby poll (0.25 s) + start-up and
    // its first epoch (0.5 s): three epochs of slack beyond the lease.
    assert!(took < Duration::from_millis(1000 + 250 + 3 * 500 + 1000), "took {took:?}");
    assert!(after.term > before.term, "term {:?} after {:?}", after.term, before.term);
    let after = eventually(&c, &s, Duration::from_secs(10), "j1 keeps both workers under b", |st| {
        st.leader.as_deref() == Some("b") && st.workers.iter().filter(|w| w.job.as_deref() == Some("j1")).count() == 2
    })
    .await;

    // A second job: the new leader (epochs from 1) moves a worker to it, and that worker follows.
    hello("j2").await;
    reporters.push(report("j2"));
    let split = eventually(&c, &s, Duration::from_secs(20), "b gives j2 a worker", |st| {
        st.workers.iter().any(|w| w.job.as_deref() == Some("j2"))
    })
    .await;
    let moved = split.workers.iter().find(|w| w.job.as_deref() == Some("j2")).map(|w| w.worker.clone()).unwrap();
    let record = out.join(&moved);
    wait_for_file(&record, "the moved worker follows b's assignment", |t| t.contains("j2 ")).await;

    // The deposed leader's assignment (older term, any epoch) is not followed.
    let forged = WorkerAssignment {
        worker: moved.clone(),
        epoch: 1 << 30,
        job: Some("j1".into()),
        role: Default::default(),
        hello_again: false,
        term: before.term,
        launch: None,
        command: None,
        stop_grace_ms: None,
        reclaim_grace_ms: None,
    };
    bus::publish(&c, s.worker_assign(&moved), Encoding::MsgPack, &forged).await.unwrap();
    // Then one of the new term (the agent handles its messages in order): once the agent has
    // followed it, it has seen the forged one before.
    let probe = WorkerAssignment { epoch: 1 << 31, job: Some("probe".into()), term: after.term, ..forged.clone() };
    bus::publish(&c, s.worker_assign(&moved), Encoding::MsgPack, &probe).await.unwrap();
    c.flush().await.unwrap();
    let text = wait_for_file(&record, "the moved worker follows the probe", |t| t.contains("probe ")).await;
    assert!(!text.contains(&format!(" {}", 1u64 << 30)), "followed a deposed leader: {text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[lines.len() - 2].starts_with("j2 "), "{text}");
    assert!(after.term.is_some());

    drop(reporters);
    drop(stops);
    drop(standby);
}

#[tokio::test]
async fn a_leader_that_loses_its_lease_stops_allocating_until_it_wins_a_new_term() {
    let nats = NatsServer::start_jetstream();
    let s = Subjects::new("slaq").unwrap();
    let c = client(&nats.url).await;
    let _leader = Scheduler::start(&nats.url, &replica_settings("a"));
    let led =
        eventually(&c, &s, Duration::from_secs(20), "replica a leads", |st| st.leader.as_deref() == Some("a")).await;
    // Someone else writes the lease key (as a replica that took an expired lease would): a's
    // next renewal fails, and it must stop its scheduler at once.
    let js = async_nats::jetstream::new(c.clone());
    let kv = js.get_key_value(slaq::bus::lease::bucket_name("slaq")).await.unwrap();
    kv.put("leader", r#"{"replica":"thief","term":0}"#.into()).await.unwrap();
    let stolen = Instant::now();
    // Within a renewal period (0.25 s) it stops answering as the leader of the old term...
    // Stopped means observed stopped: nobody answers (NATS says "no responders") or another
    // term does. A request that merely times out proves nothing and is asked again.
    loop {
        let answered =
            bus::request::<_, StatusSnapshot>(&c, s.ctl_status(), Encoding::MsgPack, &(), Duration::from_millis(200))
                .await;
        match answered {
            Ok(st) if st.term == led.term => {}
            Ok(_) => break,
            Err(bus::BusError::Request { source, .. })
                if source.kind() == async_nats::RequestErrorKind::NoResponders =>
            {
                break;
            }
            Err(_) => {}
        }
        assert!(stolen.elapsed() < Duration::from_millis(1500), "still leading after {:?}", stolen.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...and once the thief's write expires (the lease, 1 s), it wins a new, larger term.
    let back = eventually(&c, &s, Duration::from_secs(10), "a leads again", |st| {
        st.leader.as_deref() == Some("a") && st.term > led.term
    })
    .await;
    assert!(back.term > led.term);
}

/// Three NATS servers in one cluster (state and lease replicated three times) and three
/// replicas, each connected to its own server. The leader's server goes (a network partition
/// as the leader sees it): another replica leads with a larger term, the workers keep their
/// job and follow only the new term, also after the old leader's server comes back and its
/// client reconnects.
#[tokio::test]
async fn a_three_node_cluster_elects_a_new_leader_when_the_leaders_server_goes() {
    let mut nodes = NatsServer::start_cluster(3);
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    // Observers, agents and the job use the third server (the observer lists all three).
    let c = bus::connect(&[urls[2].clone(), urls[1].clone(), urls[0].clone()], "observer", 1024).await.unwrap().0;
    let s = Subjects::new("slaq").unwrap();
    // JetStream's cluster is ready once a bucket with three copies can be made.
    let formed = Instant::now();
    loop {
        match Lease::open(&c, "probe", "probe", Duration::from_secs(1), 3).await {
            Ok(_) => break,
            Err(e) => assert!(formed.elapsed() < Duration::from_secs(60), "no JetStream cluster: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("cluster formed in {:?}", formed.elapsed());

    // Each replica talks to its own server only, so that a server going cuts its replica off
    // (as a network partition would) rather than moving its connection to another server.
    let pinned = |id: &str| format!("[nats]\ndiscover_servers = false\n\n{}", replica_settings_with(id, 3));
    let mut replicas = vec![Scheduler::start(&urls[0], &pinned("a"))];
    eventually(&c, &s, Duration::from_secs(30), "replica a leads", |st| st.leader.as_deref() == Some("a")).await;
    replicas.push(Scheduler::start(&urls[1], &pinned("b")));
    replicas.push(Scheduler::start(&urls[2], &pinned("c")));

    let out = temp_dir("cluster");
    let stops = start_agents(&urls[2], &s, &out).await;
    let ack: Ack = bus::request(&c, s.job_hello("j1"), Encoding::MsgPack, &JobSpec::new("j1"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(ack.ok);
    let reporter = {
        let (c, s) = (c.clone(), s.clone());
        Background::spawn(async move {
            for iter in 1.. {
                let _ = bus::publish(&c, s.job_loss("j1"), Encoding::MsgPack, &loss_report("j1", iter)).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let before = eventually(&c, &s, Duration::from_secs(20), "j1 holds both workers under a", |st| {
        st.leader.as_deref() == Some("a") && st.workers.iter().filter(|w| w.job.as_deref() == Some("j1")).count() == 2
    })
    .await;

    // a's server goes: a cannot renew, gives up, and b or c takes the lease once it expires.
    nodes[0].stop();
    let cut = Instant::now();
    // JetStream elects new leaders for the streams that had theirs on the lost server (seconds
    // on 2.9), and a replica's first start may time out reading its state meanwhile: then it
    // gives the lease back and another tries. Status goes unanswered until one is up.
    let after = loop {
        let answer =
            bus::request::<_, StatusSnapshot>(&c, s.ctl_status(), Encoding::MsgPack, &(), Duration::from_millis(500));
        if let Ok(st) = answer.await
            && matches!(st.leader.as_deref(), Some("b" | "c"))
            && st.epoch >= 1
        {
            break st;
        }
        // Three minutes: on this 2-core machine JetStream on 2.9 has taken from 16 s to over two
        // minutes to elect new stream leaders (replicas time out reading the bucket meanwhile and
        // hand the lease on), with the build of f856e0d as with later ones; the take-over figure
        // is printed.
        assert!(cut.elapsed() < Duration::from_secs(180), "no new leader within three minutes");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!("new leader {:?} allocating {:?} after the leader's server stopped", after.leader, cut.elapsed());
    assert!(after.term > before.term);
    eventually(&c, &s, Duration::from_secs(10), "j1 keeps both workers", |st| {
        st.term == after.term && st.workers.iter().filter(|w| w.job.as_deref() == Some("j1")).count() == 2
    })
    .await;

    // The server comes back and a reconnects: it stands by, the new leader stays, and no
    // worker follows anything of a's term from now on.
    let followed = |w: &str| std::fs::read_to_string(out.join(w)).unwrap_or_default().lines().count();
    let seen = [followed("w1"), followed("w2")];
    nodes[0].start_again(true);
    // Seen to reconnect (its log says so), a has had a lease period and more to try for the
    // lease before the checks below.
    let reconnected = Instant::now();
    while !replicas[0].log_text().contains("reconnected to NATS") {
        assert!(reconnected.elapsed() < Duration::from_secs(30), "a never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = wait_status(&c, &s).await;
    assert_eq!((later.leader.as_deref(), later.term), (after.leader.as_deref(), after.term));
    let old_term = before.term.unwrap_or(0).to_string();
    for (w, seen) in ["w1", "w2"].into_iter().zip(seen) {
        let text = std::fs::read_to_string(out.join(w)).unwrap_or_default();
        for line in text.lines().skip(seen) {
            assert_ne!(line.split(' ').nth(1), Some(old_term.as_str()), "{w} followed the deposed leader: {text}");
        }
    }
    drop(reporter);
    drop(stops);
    drop(replicas);
}
