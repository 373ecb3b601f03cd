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
        let r = LossReport { job: "j".into(), iter, loss, iter_seconds: secs, workers, batch_size: None, sent_at: None };
        for encoding in [Encoding::MsgPack, Encoding::Json] {
            let bytes = protocol::encode(encoding, &r).unwrap();
            let back: LossReport = protocol::decode(encoding, &bytes, "loss report").unwrap();
            prop_assert_eq!(&back, &r);
            prop_assert!(back.validate("j").is_ok());
        }
    }
}
