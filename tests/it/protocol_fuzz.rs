//! Hostile input never panics the protocol layer: arbitrary bytes and subjects.

use proptest::prelude::*;
use slaq::protocol::{self, Encoding, InboundLimits, JobEnd, JobSpec, LossReport, RejectCause, Subjects, WorkerSpec};

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_decode_to_a_value_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        // Whatever the bytes, the ingest's one entry point agrees with decoding and validating
        // by hand: accepted exactly when both succeed, refused as undecodable when decoding
        // fails, and what decodes encodes back to the same value.
        let s = Subjects::new("slaq").unwrap();
        let limits = InboundLimits { max_payload_bytes: 64 * 1024, max_min_workers: 1024, tenants: protocol::Tenants::Any };
        let (loss, hello, bye, worker) = (s.job_loss("j"), s.job_hello("j"), s.job_bye("j"), s.worker_hello("j"));
        for encoding in [Encoding::MsgPack, Encoding::Json] {
            let by_hand = protocol::decode_borrowed::<LossReport>(encoding, &bytes, "loss report");
            let inbound = protocol::inbound(&s, &loss, &bytes, encoding, &limits);
            match &by_hand {
                Ok(r) => {
                    prop_assert_eq!(r.validate("j").is_ok(), inbound.is_ok());
                    let encoded = protocol::encode(encoding, r).unwrap();
                    let again: LossReport = protocol::decode_borrowed(encoding, &encoded, "r").unwrap();
                    prop_assert!(again == *r || r.loss.is_nan());
                }
                Err(_) => prop_assert_eq!(inbound.err().map(|e| e.cause()), Some(RejectCause::Undecodable)),
            }
            let by_hand = protocol::decode::<JobSpec>(encoding, &bytes, "job spec");
            let inbound = protocol::inbound(&s, &hello, &bytes, encoding, &limits);
            match &by_hand {
                Ok(spec) => prop_assert_eq!(spec.validate("j").is_ok() && spec.min_workers <= 1024, inbound.is_ok()),
                Err(_) => prop_assert_eq!(inbound.err().map(|e| e.cause()), Some(RejectCause::Undecodable)),
            }
            let ends = protocol::decode::<JobEnd>(encoding, &bytes, "job end");
            let inbound = protocol::inbound(&s, &bye, &bytes, encoding, &limits);
            prop_assert_eq!(ends.map(|e| e.job == "j").unwrap_or(false), inbound.is_ok());
            let spec = protocol::decode::<WorkerSpec>(encoding, &bytes, "worker spec");
            let inbound = protocol::inbound(&s, &worker, &bytes, encoding, &limits);
            prop_assert_eq!(spec.map(|w| w.validate("j").is_ok()).unwrap_or(false), inbound.is_ok());
        }
    }

    #[test]
    fn arbitrary_subjects_parse_or_are_refused(subject in "\\PC{0,80}") {
        let s = Subjects::new("slaq").unwrap();
        if let Ok((kind, id)) = s.parse(&subject) {
            let job = matches!(kind, protocol::Kind::JobHello | protocol::Kind::JobLoss | protocol::Kind::JobBye | protocol::Kind::JobAlloc | protocol::Kind::JobStatus);
            let valid = if job { protocol::valid_job_id(id) } else { protocol::valid_id(id) };
            prop_assert!(id.is_empty() || valid);
        }
    }

    /// Whatever a hello's body says (its id, its tenant field), a job accepted on team A's
    /// subject is team A's job, of tenant team A: the tenant comes from the subject only.
    #[test]
    fn no_body_changes_a_job_s_tenant(
        job in prop_oneof![Just("team-a.j".to_string()), Just("team-b.j".to_string()), Just("j".to_string()), "[a-z.-]{0,20}"],
        tenant in proptest::option::of(prop_oneof![Just("team-b".to_string()), Just("team-a".to_string()), "\\PC{0,12}"]),
        weight in prop_oneof![Just(1.0f64), 0.0f64..1e6],
        json in any::<bool>(),
    ) {
        let s = Subjects::new("slaq").unwrap();
        let names = ["team-a".to_string(), "team-b".to_string()];
        let limits = InboundLimits { max_payload_bytes: 64 * 1024, max_min_workers: 1024, tenants: protocol::Tenants::Only(&names) };
        let encoding = if json { Encoding::Json } else { Encoding::MsgPack };
        let spec = JobSpec { tenant, weight, ..JobSpec::new(&job) };
        let bytes = protocol::encode(encoding, &spec).unwrap();
        match protocol::inbound(&s, "slaq.v1.job.team-a.j.hello", &bytes, encoding, &limits) {
            Ok(protocol::Inbound::JobHello(spec)) => {
                prop_assert_eq!(spec.job.as_str(), "team-a.j");
                prop_assert_eq!(spec.tenant.as_deref(), Some("team-a"));
            }
            Ok(other) => prop_assert!(false, "{:?}", other),
            Err(e) => prop_assert!(job != "team-a.j" || weight <= 0.0, "{}", e),
        }
    }

    #[test]
    fn valid_reports_round_trip(iter in 1u64.., loss in -1e12f64..1e12, secs in 0.0f64..1e6, workers in any::<u32>(), generation in proptest::option::of(any::<u64>())) {
        let r = LossReport { machines: None, sync_seconds: None, grad_sqr: None, grad_var: None, job: "j".into(), iter, loss, iter_seconds: secs, workers, batch_size: None, sent_at: None, generation, checkpoint_age_s: None };
        for encoding in [Encoding::MsgPack, Encoding::Json] {
            let bytes = protocol::encode(encoding, &r).unwrap();
            let back: LossReport = protocol::decode_borrowed(encoding, &bytes, "loss report").unwrap();
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
            machines, sync_seconds: sync, grad_sqr: sqr, grad_var: var, generation: None, checkpoint_age_s: None,
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
    let limits = InboundLimits { max_payload_bytes: 64 * 1024, max_min_workers: 1024, tenants: protocol::Tenants::Any };
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261122);
    // Valid encodings of every message, each with the subject it belongs on, to mutate.
    let valid: Vec<(Encoding, Vec<u8>, String)> = {
        let report = LossReport {
            machines: Some(2),
            sync_seconds: Some(0.05),
            grad_sqr: Some(1.5),
            grad_var: Some(30.0),
            generation: Some(7),
            checkpoint_age_s: Some(12.5),
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
            command: Some(protocol::JobCommand {
                env: [("LR".to_string(), "0.1".to_string())].into(),
                cwd: Some("/srv/train".into()),
                checkpoint_dir: Some("/shared/ckpt/j1".into()),
                ..protocol::JobCommand::new(vec!["python".into(), "train.py".into(), "--epochs=3".into()])
            }),
            ..JobSpec::new("j1")
        };
        let end = JobEnd { job: "j1".into(), reason: protocol::EndReason::Finished };
        let worker = WorkerSpec {
            worker: "j1".into(),
            machine: Some("m".into()),
            slots: 2,
            kind: None,
            advertise: Some("10.0.0.7".into()),
        };
        let running = protocol::Running {
            job: Some("j2".into()),
            term: 3,
            epoch: 9,
            generation: Some(4),
            exit: Some(0),
            refused: 2,
        };
        let beat = Heartbeat { at: Some(2.0), running: Some(running), ..Heartbeat::new("j1") };
        let mut v = Vec::new();
        for e in [Encoding::MsgPack, Encoding::Json] {
            v.push((e, protocol::encode(e, &report).unwrap(), s.job_loss("j1")));
            v.push((e, protocol::encode(e, &spec).unwrap(), s.job_hello("j1")));
            v.push((e, protocol::encode(e, &end).unwrap(), s.job_bye("j1")));
            v.push((e, protocol::encode(e, &worker).unwrap(), s.worker_hello("j1")));
            v.push((e, protocol::encode(e, &beat).unwrap(), s.worker_beat("j1")));
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
    let mut intact = 0;
    for i in 0..N {
        // Every tenth message is a valid one, intact, on its own subject: it must be accepted.
        if i % 10 == 9 {
            let (e, bytes, subject) = &valid[rng.random_range(0..valid.len())];
            let m = protocol::inbound(&s, subject, bytes, *e, &limits);
            assert!(m.is_ok(), "a valid message on {subject} was refused: {:?}", m.err());
            intact += 1;
            continue;
        }
        let subject = &subjects[rng.random_range(0..subjects.len())];
        let (encoding, payload) = match i % 4 {
            // Random bytes.
            0 => (Encoding::MsgPack, (0..rng.random_range(0..96)).map(|_| rng.random()).collect::<Vec<u8>>()),
            // A valid message, possibly for another kind, with some bytes flipped.
            1 | 2 => {
                let (e, mut bytes, _) = valid[rng.random_range(0..valid.len())].clone();
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..bytes.len());
                    bytes[at] = rng.random();
                }
                (e, bytes)
            }
            // A valid message, truncated.
            _ => {
                let (e, bytes, _) = valid[rng.random_range(0..valid.len())].clone();
                let cut = rng.random_range(0..bytes.len());
                (e, bytes[..cut].to_vec())
            }
        };
        match protocol::inbound(&s, subject, &payload, encoding, &limits) {
            Ok(m) => *accepted.entry(m.kind()).or_default() += 1,
            Err(e) => *refused.entry(e.cause()).or_default() += 1,
        }
    }
    assert_eq!(intact, N / 10);
    // The mix exercises many causes and still lets mutated but meaningful messages through.
    assert!(refused.len() >= 6, "causes seen: {refused:?}");
    assert!(accepted.len() >= 5, "kinds accepted: {accepted:?}");

    // Specific cuts get specific causes.
    let report = |f: &dyn Fn(&mut LossReport)| {
        let mut r = LossReport::new("j1", 3, 0.5, 0.2, 2);
        f(&mut r);
        protocol::encode(Encoding::MsgPack, &r).unwrap()
    };
    let cause = |subject: &str, payload: &[u8]| {
        protocol::inbound(&s, subject, payload, Encoding::MsgPack, &limits).err().map(|e| e.cause())
    };
    let loss = s.job_loss("j1");
    assert_eq!(cause(&loss, &report(&|_| {})), None);
    assert_eq!(cause(&loss, &report(&|_| {})[..5]), Some(RejectCause::Undecodable));
    assert_eq!(cause(&loss, &report(&|r| r.job = "j2".into())), Some(RejectCause::IdMismatch));
    assert_eq!(cause(&loss, &report(&|r| r.loss = f64::NAN)), Some(RejectCause::NonFiniteLoss));
    assert_eq!(cause(&loss, &report(&|r| r.iter = 0)), Some(RejectCause::BadIteration));
    assert_eq!(cause(&loss, &report(&|r| r.iter_seconds = -1.0)), Some(RejectCause::NegativeTime));
    assert_eq!(cause(&loss, &report(&|r| r.checkpoint_age_s = Some(-1.0))), Some(RejectCause::NegativeTime));
    assert_eq!(cause(&loss, &report(&|r| r.checkpoint_age_s = Some(f64::INFINITY))), Some(RejectCause::NegativeTime));
    assert_eq!(cause(&loss, &report(&|r| r.batch_size = Some(0))), Some(RejectCause::Oversized));
    assert_eq!(cause(&loss, &vec![0x90; 64 * 1024 + 1]), Some(RejectCause::Oversized));
    assert_eq!(cause("slaq.v1.job.a.b.c.loss", &report(&|_| {})), Some(RejectCause::InvalidId));
    // A tenant's job (two tokens) is valid; a report must name it whole.
    assert_eq!(cause("slaq.v1.job.a.b.loss", &report(&|_| {})), Some(RejectCause::IdMismatch));
    assert_eq!(cause("slaq.v1.job.a.j1.loss", &report(&|r| r.job = "a.j1".into())), None);
    assert_eq!(cause("slaq.v2.job.j1.loss", &report(&|_| {})), Some(RejectCause::UnknownSubject));
    assert_eq!(cause("slaq.v1.job.bad id.loss", &report(&|_| {})), Some(RejectCause::InvalidId));
    assert_eq!(cause(&s.job_alloc("j1"), &report(&|_| {})), Some(RejectCause::UnknownSubject));
    let spec = |f: &dyn Fn(&mut JobSpec)| {
        let mut j = JobSpec::new("j1");
        f(&mut j);
        protocol::encode(Encoding::MsgPack, &j).unwrap()
    };
    assert_eq!(cause(&s.job_hello("j1"), &spec(&|_| {})), None);
    assert_eq!(cause(&s.job_hello("j1"), &spec(&|j| j.min_workers = 2000)), Some(RejectCause::InvalidSpec));
    assert_eq!(cause(&s.job_hello("j1"), &spec(&|j| j.weight = -1.0)), Some(RejectCause::InvalidSpec));
    let command = |argv: Vec<String>| Some(protocol::JobCommand::new(argv));
    assert_eq!(cause(&s.job_hello("j1"), &spec(&|j| j.command = command(vec![]))), Some(RejectCause::InvalidSpec));
    assert_eq!(
        cause(&s.job_hello("j1"), &spec(&|j| j.command = command(vec!["x".repeat(17 * 1024)]))),
        Some(RejectCause::Oversized)
    );
    assert_eq!(
        cause(&s.job_hello("j1"), &spec(&|j| j.command = command(vec!["a".into(); 300]))),
        Some(RejectCause::Oversized)
    );
    let beat = |b: &Heartbeat| protocol::encode(Encoding::MsgPack, b).unwrap();
    let running = Heartbeat {
        running: Some(protocol::Running {
            job: Some("x y".into()),
            term: 1,
            epoch: 1,
            generation: None,
            exit: None,
            refused: 0,
        }),
        ..Heartbeat::new("j1")
    };
    assert_eq!(cause(&s.worker_beat("j1"), &beat(&running)), Some(RejectCause::InvalidId));
    assert_eq!(cause(&s.worker_beat("j1"), &beat(&Heartbeat::new("j9"))), Some(RejectCause::IdMismatch));
}
