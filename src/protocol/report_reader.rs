//! A loss report read straight from MessagePack with rmp's primitives: the ingest's hot path.
//!
//! serde's reading through rmp-serde costs about 130 ns a report, most of it dispatch on each
//! value's marker and UTF-8 checks of the keys; a report's shape is small and fixed. This
//! reader takes the shape every client writes (a map of the report's keys, each once, as
//! strings, their values of the types serde writes or reads into them) and says `None` to
//! anything else, which serde then decides: its errors stay the only ones, and what this reader
//! accepts serde accepts as the same report (a property test holds the two together).

use std::borrow::Cow;

use rmp::Marker;
use rmp::decode::{read_map_len, read_marker};

use super::{Encoding, LossReport, ProtocolError, decode_borrowed};

/// A loss report from its payload: read here where it has the common shape, by serde else.
pub(super) fn decode(encoding: Encoding, payload: &[u8]) -> Result<LossReport<'_>, ProtocolError> {
    let read = match encoding {
        Encoding::MsgPack => read(payload),
        Encoding::Json => None,
    };
    read.map_or_else(|| decode_borrowed(encoding, payload, "loss report"), Ok)
}

/// The report in `payload`, when it has the common shape; `None` leaves it to serde.
pub(super) fn read(payload: &[u8]) -> Option<LossReport<'_>> {
    let mut rd = payload;
    let entries = read_map_len(&mut rd).ok()?;
    let mut report = LossReport::new("", 0, 0.0, 0.0, 0);
    // Which keys were read, by their index in `KEYS` (a repeated key is serde's to refuse).
    let mut seen = 0u16;
    for _ in 0..entries {
        let key = next(&mut rd, string)?;
        let index = KEYS.iter().position(|k| k.as_bytes() == key)?;
        if seen & (1 << index) != 0 {
            return None;
        }
        seen |= 1 << index;
        let (r, rd) = (&mut report, &mut rd);
        match index {
            0 => r.job = Cow::Borrowed(std::str::from_utf8(next(rd, string)?).ok()?),
            1 => r.iter = next(rd, unsigned)?,
            2 => r.loss = next(rd, float)?,
            3 => r.iter_seconds = next(rd, float)?,
            4 => r.workers = next(rd, small)?,
            5 => r.batch_size = optional(rd, small)?,
            6 => r.sent_at = optional(rd, float)?,
            7 => r.machines = optional(rd, small)?,
            8 => r.sync_seconds = optional(rd, float)?,
            9 => r.grad_sqr = optional(rd, float)?,
            10 => r.grad_var = optional(rd, float)?,
            11 => r.generation = optional(rd, unsigned)?,
            _ => r.checkpoint_age_s = optional(rd, float)?,
        }
    }
    // Every required key, and nothing after the map.
    (seen & REQUIRED == REQUIRED && rd.is_empty()).then_some(report)
}

/// The report's keys, in the order `read` matches them: the first five are required.
const KEYS: [&str; 13] = [
    "job",
    "iter",
    "loss",
    "iter_seconds",
    "workers",
    "batch_size",
    "sent_at",
    "machines",
    "sync_seconds",
    "grad_sqr",
    "grad_var",
    "generation",
    "checkpoint_age_s",
];

const REQUIRED: u16 = 0b1_1111;

/// A value's reader, given its marker (already read) and what follows it.
type Reader<T> = fn(Marker, &mut &[u8]) -> Option<T>;

/// The next value, as `read` reads it.
fn next<'a, T>(rd: &mut &'a [u8], read: fn(Marker, &mut &'a [u8]) -> Option<T>) -> Option<T> {
    let marker = read_marker(rd).ok()?;
    read(marker, rd)
}

/// `None` for nil, else the value `read` reads.
fn optional<T>(rd: &mut &[u8], read: Reader<T>) -> Option<Option<T>> {
    match read_marker(rd).ok()? {
        Marker::Null => Some(None),
        marker => read(marker, rd).map(Some),
    }
}

/// A string's bytes (str markers only). rmp's `read_str_len` reads the same header through
/// `io::Read` (one report's inbound 110 -> 123 ns) and `read_str_from_slice` also checks the
/// keys' UTF-8 (146 ns).
fn string<'a>(marker: Marker, rd: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = match marker {
        Marker::FixStr(len) => usize::from(len),
        Marker::Str8 => usize::from(u8::from_be_bytes(take(rd)?)),
        Marker::Str16 => usize::from(u16::from_be_bytes(take(rd)?)),
        Marker::Str32 => usize::try_from(u32::from_be_bytes(take(rd)?)).ok()?,
        _ => return None,
    };
    let (bytes, rest) = rd.split_at_checked(len)?;
    *rd = rest;
    Some(bytes)
}

/// An unsigned integer (the signed markers are left to serde).
fn unsigned(marker: Marker, rd: &mut &[u8]) -> Option<u64> {
    Some(match marker {
        Marker::FixPos(v) => u64::from(v),
        Marker::U8 => u64::from(u8::from_be_bytes(take(rd)?)),
        Marker::U16 => u64::from(u16::from_be_bytes(take(rd)?)),
        Marker::U32 => u64::from(u32::from_be_bytes(take(rd)?)),
        Marker::U64 => u64::from_be_bytes(take(rd)?),
        _ => return None,
    })
}

/// An unsigned integer that fits a `u32`.
fn small(marker: Marker, rd: &mut &[u8]) -> Option<u32> {
    u32::try_from(unsigned(marker, rd)?).ok()
}

/// A float, or an unsigned integer read as one (as serde reads it into an `f64`).
fn float(marker: Marker, rd: &mut &[u8]) -> Option<f64> {
    match marker {
        Marker::F64 => Some(f64::from_be_bytes(take(rd)?)),
        Marker::F32 => Some(f64::from(f32::from_be_bytes(take(rd)?))),
        marker => unsigned(marker, rd).map(|v| v as f64),
    }
}

/// The next `N` bytes.
fn take<const N: usize>(rd: &mut &[u8]) -> Option<[u8; N]> {
    let (bytes, rest) = rd.split_first_chunk::<N>()?;
    *rd = rest;
    Some(*bytes)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rmp::encode as w;

    use super::*;
    use crate::protocol::encode;

    /// The same report, floats compared by their bits (NaN included).
    fn same(a: &LossReport<'_>, b: &LossReport<'_>) -> bool {
        let bits = |x: Option<f64>| x.map(f64::to_bits);
        a.job == b.job
            && (a.iter, a.workers, a.batch_size, a.machines, a.generation)
                == (b.iter, b.workers, b.batch_size, b.machines, b.generation)
            && [a.loss, a.iter_seconds].map(f64::to_bits) == [b.loss, b.iter_seconds].map(f64::to_bits)
            && [a.sent_at, a.sync_seconds, a.grad_sqr, a.grad_var, a.checkpoint_age_s].map(bits)
                == [b.sent_at, b.sync_seconds, b.grad_sqr, b.grad_var, b.checkpoint_age_s].map(bits)
    }

    /// What this reader accepts, serde accepts as the same report.
    fn agrees(payload: &[u8]) -> Result<(), TestCaseError> {
        if let Some(fast) = read(payload) {
            let serde: Result<LossReport<'_>, _> = decode_borrowed(Encoding::MsgPack, payload, "loss report");
            prop_assert!(serde.as_ref().is_ok_and(|s| same(s, &fast)), "{fast:?} but serde {serde:?}");
        }
        Ok(())
    }

    fn float() -> impl Strategy<Value = f64> {
        prop_oneof![any::<f64>(), Just(f64::NAN), Just(-0.0), (0u32..1000).prop_map(f64::from)]
    }

    fn report() -> impl Strategy<Value = LossReport<'static>> {
        let required = ("[a-z0-9.-]{0,12}", any::<u64>(), float(), float(), any::<u32>());
        let optional = (
            proptest::option::of(any::<u32>()),
            proptest::option::of(float()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(float()),
            proptest::option::of(float()),
            proptest::option::of(float()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(float()),
        );
        (required, optional).prop_map(|((job, iter, loss, iter_seconds, workers), o)| LossReport {
            job: job.into(),
            iter,
            loss,
            iter_seconds,
            workers,
            batch_size: o.0,
            sent_at: o.1,
            machines: o.2,
            sync_seconds: o.3,
            grad_sqr: o.4,
            grad_var: o.5,
            generation: o.6,
            checkpoint_age_s: o.7,
        })
    }

    /// One MessagePack value of any kind a client might put under a key.
    /// What `write` writes, as bytes.
    fn written(write: impl Fn(&mut Vec<u8>) -> Result<(), w::ValueWriteError>) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out).expect("writes to a Vec");
        out
    }

    /// An unsigned integer with its shortest marker.
    fn uint(v: u64) -> Vec<u8> {
        written(|o| w::write_uint(o, v).map(drop))
    }

    fn string(s: &str) -> Vec<u8> {
        written(|o| w::write_str(o, s))
    }

    fn value() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(vec![0xc0]),
            Just(vec![0xc3]),
            any::<u64>().prop_map(uint),
            // A u64 marker for any value, as some clients write.
            any::<u64>().prop_map(|v| written(|o| w::write_u64(o, v))),
            any::<i64>().prop_map(|v| written(|o| w::write_sint(o, v).map(drop))),
            // Small ones, negative ones with a marker of their own.
            (-40i64..40).prop_map(|v| written(|o| w::write_sint(o, v).map(drop))),
            any::<f32>().prop_map(|v| written(|o| w::write_f32(o, v))),
            float().prop_map(|v| written(|o| w::write_f64(o, v))),
            "[a-z0-9]{0,40}".prop_map(|s| string(&s)),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(|b| written(|o| w::write_bin(o, &b))),
            proptest::collection::vec(any::<u8>(), 1..6),
        ]
    }

    /// A value of the kind the key takes, mostly; of any kind otherwise.
    fn value_for(key: &'static str) -> BoxedStrategy<Vec<u8>> {
        let floats = ["loss", "iter_seconds", "sent_at", "sync_seconds", "grad_sqr", "grad_var", "checkpoint_age_s"];
        let right = match key {
            "job" => "[a-z0-9]{0,40}".prop_map(|s| string(&s)).boxed(),
            k if floats.contains(&k) => prop_oneof![
                float().prop_map(|v| written(|o| w::write_f64(o, v))),
                any::<f32>().prop_map(|v| written(|o| w::write_f32(o, v))),
                any::<u64>().prop_map(uint),
            ]
            .boxed(),
            _ => prop_oneof![any::<u64>().prop_map(uint), (0..=u64::from(u32::MAX) + 2).prop_map(uint)].boxed(),
        };
        prop_oneof![4 => right, 1 => value(), 1 => Just(vec![0xc0])].boxed()
    }

    /// A report's map as a client might write it: the required keys, some optional ones, each
    /// mostly with a value of its kind, maybe an unknown or repeated key, in any order, maybe
    /// with bytes after it.
    fn map() -> impl Strategy<Value = Vec<u8>> {
        let entries = |keys: Vec<&'static str>| {
            keys.into_iter().map(|k| value_for(k).prop_map(move |v| (k, v))).collect::<Vec<_>>()
        };
        let optional = proptest::sample::subsequence(KEYS[5..].to_vec(), 0..=8);
        let extra = proptest::collection::vec(prop_oneof![Just("other"), (0..KEYS.len()).prop_map(|i| KEYS[i])], 0..3);
        let keys = (optional, extra, proptest::bool::weighted(0.1)).prop_map(|(optional, extra, drop_one)| {
            let mut keys = KEYS[..5].to_vec();
            if drop_one {
                keys.remove(1);
            }
            keys.extend(optional);
            keys.extend(extra);
            keys
        });
        let trailing = proptest::collection::vec(any::<u8>(), 0..2);
        (keys.prop_flat_map(move |keys| entries(keys).prop_shuffle()), proptest::bool::weighted(0.05), trailing)
            .prop_map(|(entries, trail, trailing)| {
                let mut out = written(|o| w::write_map_len(o, entries.len() as u32).map(drop));
                for (k, v) in entries {
                    out.extend(string(k));
                    out.extend(v);
                }
                if trail {
                    out.extend(trailing);
                }
                out
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn every_report_serde_writes_is_read_the_same(report in report()) {
            let payload = encode(Encoding::MsgPack, &report).unwrap();
            let fast = read(&payload);
            prop_assert!(fast.as_ref().is_some_and(|f| same(f, &report)), "{report:?} read as {fast:?}");
        }

        #[test]
        fn what_it_reads_serde_reads_the_same(payload in map()) {
            agrees(&payload)?;
        }

        #[test]
        fn any_bytes_read_are_read_the_same_by_serde(payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            agrees(&payload)?;
        }
    }

    #[test]
    fn it_leaves_the_unusual_to_serde() {
        let report = LossReport::new("j", 3, 0.5, 1.0, 2);
        let named = encode(Encoding::MsgPack, &report).unwrap();
        assert!(same(&read(&named).unwrap(), &report));
        // A map of these entries.
        let map = |entries: &[(&str, Vec<u8>)]| {
            let mut out = written(|o| w::write_map_len(o, entries.len() as u32).map(drop));
            for (k, v) in entries {
                out.extend(string(k));
                out.extend(v);
            }
            out
        };
        let one = || written(|o| w::write_f64(o, 1.0));
        let required = |iter: Vec<u8>| {
            vec![("job", string("j")), ("iter", iter), ("loss", one()), ("iter_seconds", one()), ("workers", uint(1))]
        };
        let with = |mut entries: Vec<(&'static str, Vec<u8>)>, extra: (&'static str, Vec<u8>)| {
            entries.push(extra);
            entries
        };
        // serde reads these: an array into the struct's fields in order, an unknown key
        // ignored, a signed integer that is not negative.
        let positional = rmp_serde::to_vec(&report).unwrap();
        let unknown = map(&with(required(uint(3)), ("extra", vec![0xc0])));
        let signed = map(&required(written(|o| w::write_i64(o, 3))));
        // serde refuses these: a repeated key, a negative iteration, a missing key, a map cut short.
        let repeated = map(&with(required(uint(3)), ("loss", one())));
        let negative = map(&required(written(|o| w::write_i64(o, -3))));
        let missing = map(&required(uint(3))[1..]);
        let cut = &named[..named.len() - 1];
        for payload in [&positional[..], &unknown, &signed, &repeated, &negative, &missing, cut] {
            assert!(read(payload).is_none(), "{payload:?}");
        }
        let ones = LossReport::new("j", 3, 1.0, 1.0, 1);
        for (payload, expected) in [(&positional, &report), (&unknown, &ones), (&signed, &ones)] {
            let decoded = decode(Encoding::MsgPack, payload).unwrap();
            assert!(same(&decoded, expected), "{decoded:?}");
        }
        for payload in [&repeated, &negative, &missing, cut] {
            assert!(matches!(decode(Encoding::MsgPack, payload), Err(ProtocolError::Decode { .. })), "{payload:?}");
        }
    }
}
