//! Hostile input never panics the protocol layer: arbitrary bytes and subjects.

use proptest::prelude::*;
use slaq::protocol::{self, Encoding, JobEnd, JobSpec, LossReport, Subjects, WorkerSpec};

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_decode_to_a_value_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        for encoding in [Encoding::MsgPack, Encoding::Json] {
            if let Ok(r) = protocol::decode::<LossReport>(encoding, &bytes, "loss report") {
                let _ = r.validate("j");
            }
            if let Ok(s) = protocol::decode::<JobSpec>(encoding, &bytes, "job spec") {
                let _ = s.validate("j");
            }
            let _ = protocol::decode::<JobEnd>(encoding, &bytes, "job end");
            let _ = protocol::decode::<WorkerSpec>(encoding, &bytes, "worker spec");
        }
    }

    #[test]
    fn arbitrary_subjects_parse_or_are_refused(subject in "\\PC{0,80}") {
        let s = Subjects::new("slaq").unwrap();
        if let Ok((_, id)) = s.parse(&subject) {
            prop_assert!(id.is_empty() || protocol::valid_id(id));
        }
    }

    #[test]
    fn valid_reports_round_trip(iter in 1u64.., loss in -1e12f64..1e12, secs in 0.0f64..1e6, workers in any::<u32>()) {
        let r = LossReport { machines: None, sync_seconds: None, grad_sqr: None, grad_var: None, job: "j".into(), iter, loss, iter_seconds: secs, workers, batch_size: None, sent_at: None };
        for encoding in [Encoding::MsgPack, Encoding::Json] {
            let bytes = protocol::encode(encoding, &r).unwrap();
            let back: LossReport = protocol::decode(encoding, &bytes, "loss report").unwrap();
            prop_assert_eq!(&back, &r);
            prop_assert!(back.validate("j").is_ok());
        }
    }
}

proptest! {
    #[test]
    fn placement_statistics_are_checked(
        machines in proptest::option::of(any::<u32>()),
        sync in proptest::option::of(proptest::num::f64::ANY),
        sqr in proptest::option::of(proptest::num::f64::ANY),
        var in proptest::option::of(proptest::num::f64::ANY),
        workers in 0u32..64,
        secs in 0.0f64..10.0,
    ) {
        let r = LossReport {
            job: "j".into(), iter: 1, loss: 1.0, iter_seconds: secs, workers, batch_size: None, sent_at: None,
            machines, sync_seconds: sync, grad_sqr: sqr, grad_var: var,
        };
        match r.validate("j") {
            Ok(point) => {
                prop_assert!(machines.is_none_or(|m| m >= 1 && m <= workers.max(1)));
                prop_assert!(sync.is_none_or(|s| s.is_finite() && (0.0..=secs).contains(&s)));
                prop_assert!(point.grads.is_none_or(|(a, b)| a.is_finite() && b.is_finite() && a >= 0.0 && b >= 0.0));
                prop_assert_eq!(point.grads.is_some(), sqr.is_some() && var.is_some());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}

/// A million random and mutated payloads over every subject kind go through the very function
/// the ingest loop calls: each is accepted or refused with a cause, none panics, and nothing
/// is both. (The scheduler over NATS gets 20,000 of them in `isolate.rs`.)
#[test]
fn a_million_hostile_messages_are_each_accepted_or_refused_with_a_cause() {
    use rand::{RngExt, SeedableRng};
    use slaq::protocol::{Heartbeat, InboundLimits, JobEnd, RejectCause};
    use std::collections::BTreeMap;

    const N: usize = 1_000_000;
    let s = Subjects::new("slaq").unwrap();
    let limits = InboundLimits { max_payload_bytes: 64 * 1024, max_min_workers: 1024 };
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261122);
    // Valid encodings of every message, to mutate.
    let valid: Vec<(Encoding, Vec<u8>)> = {
        let report = LossReport {
            machines: Some(2),
            sync_seconds: Some(0.05),
            grad_sqr: Some(1.5),
            grad_var: Some(30.0),
            job: "j1".into(),
            iter: 3,
            loss: 0.5,
            iter_seconds: 0.2,
            workers: 2,
            batch_size: Some(64),
            sent_at: Some(1.0),
        };
        let spec = JobSpec {
            max_workers: Some(4),
            batch_sizes: Some(vec![32, 64]),
            parameter_server: true,
            max_local_batch: Some(32),
            slo_iter_seconds: Some(0.5),
            ..JobSpec::new("j1")
        };
        let end = JobEnd { job: "j1".into(), reason: protocol::EndReason::Finished };
        let worker = WorkerSpec { worker: "j1".into(), machine: Some("m".into()), slots: 2, kind: None };
        let beat = Heartbeat { at: Some(2.0), ..Heartbeat::new("j1") };
        let mut v = Vec::new();
        for e in [Encoding::MsgPack, Encoding::Json] {
            v.push((e, protocol::encode(e, &report).unwrap()));
            v.push((e, protocol::encode(e, &spec).unwrap()));
            v.push((e, protocol::encode(e, &end).unwrap()));
            v.push((e, protocol::encode(e, &worker).unwrap()));
            v.push((e, protocol::encode(e, &beat).unwrap()));
        }
        v
    };
    let subjects: Vec<String> = vec![
        s.job_hello("j1"),
        s.job_loss("j1"),
        s.job_bye("j1"),
        s.job_alloc("j1"),
        s.worker_hello("j1"),
        s.worker_beat("j1"),
        s.worker_assign("j1"),
        s.ctl_status(),
        s.ctl_epoch(),
        "slaq.v1.job.j2.loss".into(),
        "slaq.v1.job.bad id.loss".into(),
        "slaq.v1.job.a.b.loss".into(),
        "slaq.v2.job.j1.loss".into(),
        "other.v1.job.j1.loss".into(),
    ];
    let (mut accepted, mut refused) = (BTreeMap::<&str, usize>::new(), BTreeMap::<RejectCause, usize>::new());
    for i in 0..N {
        let subject = &subjects[rng.random_range(0..subjects.len())];
        let (encoding, payload) = match i % 4 {
            // Random bytes.
            0 => (Encoding::MsgPack, (0..rng.random_range(0..96)).map(|_| rng.random()).collect::<Vec<u8>>()),
            // A valid message, possibly for another kind, with some bytes flipped.
            1 | 2 => {
                let (e, mut bytes) = valid[rng.random_range(0..valid.len())].clone();
                for _ in 0..rng.random_range(0..4) {
                    let at = rng.random_range(0..bytes.len());
                    bytes[at] = rng.random();
                }
                (e, bytes)
            }
            // A valid message, truncated.
            _ => {
                let (e, bytes) = valid[rng.random_range(0..valid.len())].clone();
                let cut = rng.random_range(0..bytes.len());
                (e, bytes[..cut].to_vec())
            }
        };
        match protocol::inbound(&s, subject, &payload, encoding, &limits) {
            Ok(m) => *accepted.entry(m.kind()).or_default() += 1,
            Err(e) => *refused.entry(e.cause()).or_default() += 1,
        }
    }
    let total: usize = accepted.values().sum::<usize>() + refused.values().sum::<usize>();
    assert_eq!(total, N);
    // The mix exercises many causes and still lets real messages through.
    assert!(refused.len() >= 6, "causes seen: {refused:?}");
    assert!(accepted.len() >= 5, "kinds accepted: {accepted:?}");
    assert!(refused.contains_key(&RejectCause::Undecodable) && refused.contains_key(&RejectCause::IdMismatch));
}
